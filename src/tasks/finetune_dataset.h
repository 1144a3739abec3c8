// A finetuning task's samples as BERT inputs (Megatron's RaceDataset, MNLIDataset and
// QQPDataset after tokenization): the texts read by finetune_data.h, tokenized and laid out by
// bert_pair_input, in Megatron's order:
//   RACE   per option: [CLS] question+option [SEP] passage [SEP] (question+option cut to 128
//          tokens), 4 consecutive rows per sample
//   MNLI, QQP        : [CLS] text_a [SEP] text_b [SEP], one row per sample
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizers/tokenizer.h"
#include "tasks/finetune_data.h"

namespace megatron {

struct FinetuneDataset {
  std::string name;     // Megatron's dataset name, printed in the accuracy lines
  int64_t choices = 1;  // rows per sample (RACE: 4)
  int64_t seq_length = 0;
  std::vector<int32_t> ids, types;  // [samples · choices · seq_length]
  std::vector<uint8_t> pad_mask;    // [samples · choices · seq_length], 1 = padding
  std::vector<int32_t> labels;      // [samples]
  int64_t size() const { return int64_t(labels.size()); }
};

// The tokenizer needs [CLS], [SEP] and [PAD] (a BERT WordPiece tokenizer).
FinetuneDataset race_dataset(const std::string& name, const std::vector<RaceQuestion>& questions,
                             const Tokenizer& tokenizer, int64_t seq_length);
FinetuneDataset pair_dataset(const std::string& name, const std::vector<PairSample>& samples,
                             const Tokenizer& tokenizer, int64_t seq_length);

// Megatron's name of a --valid-data dataset: RACE: the path after its last "RACE", '/'
// stripped from both ends, '/' → '-' ("data/RACE/dev/middle" → "dev-middle"); MNLI, QQP:
// the path after its last "MNLI" / "QQP", with Python's .strip('.tsv') (every '.', 't', 's',
// 'v' at either end) then .strip('/'), '_' → '-' ("glue/MNLI/dev_matched.tsv" →
// "dev-matched").
std::string finetune_dataset_name(const std::string& task, const std::string& path);

}  // namespace megatron
