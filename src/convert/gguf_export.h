// `megatron convert --to gguf`: a GPT-family checkpoint as one GGUF file that llama.cpp (and
// everything built on it) loads, written by convert/gguf_writer.h. The architecture is the
// llama.cpp one that computes the same function:
//
//   gpt2   GPT-2-style models (LayerNorm, learned positions, tanh GeLU MLP, biases, tied or
//          untied output layer): token_embd, position_embd, blk.N.{attn_norm, attn_qkv,
//          attn_output, ffn_norm, ffn_up, ffn_down}, output_norm[, output]. attn_qkv is the
//          fused [Q; K; V] rows (HF GPT-2's c_attn, transposed back to [out, in]).
//   llama  Llama/Mistral-style models (RMSNorm, RoPE, SwiGLU, GQA, no biases): token_embd,
//          blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up,
//          ffn_down}, output_norm[, output][, rope_freqs]. llama.cpp's llama rotates pairs of
//          adjacent channels (2j, 2j+1) while HF and Megatron rotate the halves (j, j + d/2), so
//          the rows of attn_q and attn_k are permuted per head — within each head, row
//          t·d/2 + j moves to 2j + t — as llama.cpp's own converter does.
//   qwen2  the same with q/k/v biases (--add-qkv-bias): llama.cpp's qwen2 rotates the halves,
//          so nothing is permuted.
//   Mixtures of experts, every layer sparse: Mixtral's routing (softmax, top k renormalised) is
//          llama with expert_count/expert_used_count, the router blk.N.ffn_gate_inp [E, h] and
//          the experts stacked as ffn_gate_exps, ffn_up_exps [E, F, h], ffn_down_exps [E, h, F];
//          Qwen2-MoE's (top-k softmax weights as they are, q/k/v biases, a sigmoid-gated
//          shared expert ffn_{gate,up,down}_shexp with gate ffn_gate_inp_shexp [h]) is qwen2moe.
// Llama 3.1's RoPE scaling (--use-rope-scaling) is the rope_freqs tensor (each frequency's
// divisor), linear scaling (--rotary-seq-len-interpolation-factor) the rope.scaling keys.
//
// Refused, each with a sentence: BERT, multi-latent attention, a mixture of experts with dense
// layers or another routing, QK norms
// (Qwen3), muP, partial or interleaved RoPE, Nemotron's options, the exact erf GeLU (llama.cpp's
// gpt2 computes the tanh form), anything else GPT-2 or Llama cannot describe.
//
// Matrices are stored as `type` (f32, f16 or bf16, rounded to nearest even); 1-D tensors, norms
// and position_embd stay f32, as llama.cpp's converter keeps them.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "convert/gguf_writer.h"
#include "convert/hf_tokenizer_files.h"

namespace megatron {

// "f32", "f16", "bf16" -> the tensor type; anything else is an Error naming the three.
GgufTensorType gguf_tensor_type_from_name(const std::string& name);

struct GgufExportOptions {
  GgufTensorType type = GgufTensorType::kF32;
  int64_t vocab_size = 0;  // the real vocabulary when state.json does not record it
  std::string name;        // general.name
  TokenizerFileOverrides tokenizer;
  // The tokenizer when the checkpoint records none (an HF import: the HF directory's
  // tokenizer files, hf_tokenizer_identity()); null: the checkpoint's.
  nlohmann::json tokenizer_identity;
};

// The tokenizer identity (data/tokenizers/tokenizer_identity.h's shape) of an HF directory's
// tokenizer files: GPT-2 BPE's vocab.json and merges.txt (the end of document being
// config.json's eos_token_id), else a SentencePiece tokenizer.model (as Llama2Tokenizer, which
// encodes with the model alone); null when the directory has neither.
nlohmann::json hf_tokenizer_identity(const std::string& hf_dir);

// Gathers iteration `iteration` (-1: latest) of the megatron-cpp checkpoint in `load_dir` into
// full tensors and writes `gguf_path` (atomically). Returns the llama.cpp architecture written.
std::string export_gguf(const std::string& load_dir, int64_t iteration,
                        const std::string& gguf_path, const GgufExportOptions& options);

}  // namespace megatron
