// HF Llama-family (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM and
// the mixtures of experts MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, whose
// MoE flags --num-experts, --moe-* come from config.json alike) <-> our checkpoints,
// behind `megatron convert --model-type gpt --from hf` / `--to hf` (convert/hf_llama.h has the
// layouts). The architecture flags (--position-embedding-type rope, --normalization RMSNorm,
// --swiglu, --group-query-attention --num-query-groups, --untie-embeddings-and-output-weights,
// --disable-bias-linear, --add-qkv-bias, --rotary-base, --norm-epsilon, ...) are taken from
// config.json and stored with the checkpoint's arguments, so pretrain-gpt --load, generate and
// export read them from the checkpoint (--use-checkpoint-args semantics) and nobody retypes them.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "convert/hf_tokenizer_files.h"

namespace megatron {

// True when `hf_dir`'s config.json names a Llama-family architecture.
bool is_hf_llama_directory(const std::string& hf_dir);

// Reads the HF directory (model.safetensors, or shards listed by model.safetensors.index.json)
// and saves it to `save_dir` as iteration 0 at `target_tp` ranks, the vocabulary tables padded
// to a multiple of divisible_by × target_tp. state.json records the HF architecture and
// dtype so that export writes them back.
void import_hf_llama(const std::string& hf_dir, const std::string& save_dir, int target_tp,
                     int make_vocab_size_divisible_by);

// True when the checkpoint's stored arguments describe a Llama-style model (RoPE, RMSNorm,
// SwiGLU).
bool is_llama_checkpoint(const nlohmann::json& state);

// Gathers iteration `iteration` (-1: latest) of `load_dir` into full tensors and writes an HF
// directory: config.json, and the weights in the dtype recorded at import (else f32) as
// model.safetensors, or — when they exceed `max_shard_bytes` — as model-0000k-of-0000n
// shards listed by model.safetensors.index.json (HF's layout). The architecture is the one
// recorded at import, else (with experts) hf_moe_architecture_of, else Qwen2ForCausalLM with
// q/k/v biases, Qwen3ForCausalLM with QK norms, else LlamaForCausalLM. Also the
// model card README.md (convert/hf_model_card.h) and, when the checkpoint was trained with a
// tokenizer, its files (convert/hf_tokenizer_files.h; `tokenizer_files` overrides their paths).
void export_hf_llama(const std::string& load_dir, int64_t iteration, const std::string& hf_dir,
                     int64_t max_shard_bytes, const TokenizerFileOverrides& tokenizer_files = {});

}  // namespace megatron
