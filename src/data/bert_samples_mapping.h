// The BERT samples mapping (Megatron's helpers.cpp build_mapping): which consecutive
// sentences of which document form each training sample, and its target length.
//
// For each epoch and each document with at least 2 sentences (and none longer than 512
// tokens, Megatron's LONG_SENTENCE_LEN), sentences are accumulated until their total reaches
// the target length (while at least one sentence stays for the next sample and the sample has
// >= 2 sentences) or the document ends; that run of sentences is one sample. The target is
// max_tokens, or with probability ≈ short_seq_prob (1 in round(1/p)) a random length in
// [2, max_tokens], so the model also sees short sequences. Epochs repeat (with fresh target
// lengths) until num_samples samples exist; all samples are then shuffled.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace megatron {

struct BertSampleSpan {
  int64_t first_sentence;  // sentences [first_sentence, end_sentence) of the dataset
  int64_t end_sentence;
  int64_t target_length;  // token budget for A + B (max_seq_length − 3 or shorter)
};

// doc_idx: the document indices of the split (document d = sentences
// [doc_idx[d], doc_idx[d+1])); sizes: every sentence length of the dataset.
// Draws from RandomStream(seed, ·). Throws Error when no document can give a sample.
std::vector<BertSampleSpan> build_bert_samples_mapping(std::span<const int64_t> doc_idx,
                                                       std::span<const int32_t> sizes,
                                                       int64_t num_samples, int64_t max_tokens,
                                                       double short_seq_prob, uint64_t seed);

}  // namespace megatron
