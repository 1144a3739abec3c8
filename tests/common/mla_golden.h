// The PyTorch golden fixtures of multi-latent attention (tests/data/mla, mla_rms and mla_yarn,
// written by tools/reference/mla_reference.py): 2-layer GPTs with MLA (4 heads, query/key
// content 8 + RoPE 4 channels, values 6, key/value latent 16), weights in our names.
//   mla      learned absolute positions and MLA's RoPE, LayerNorm (also on the latents), linear
//            biases, GeLU, a query latent of 24 (--q-lora-rank), untied output layer
//   mla_rms  --position-embedding-type rope, RMSNorm, SwiGLU, no biases, a direct query
//            projection, tied output layer
//   mla_yarn mla's model with 10 RoPE channels and YaRN: --rotary-scaling-factor 40, --mscale 1,
//            --mscale-all-dim 0.8 (Megatron-Core MLA's original context 4096 and betas 32, 1)
// They load and compare through gpt_variants_golden.h's helpers.
#pragma once

#include <string>

#include "../common/gpt_variants_golden.h"

namespace megatron::testing {

// The shape of the reference script's model `name` ("mla", "mla_rms" or "mla_yarn"; its
// constants).
inline GptConfig mla_golden_config(const std::string& name) {
  const bool rms = name == "mla_rms", yarn = name == "mla_yarn";
  GptConfig c = tiny_reference_gpt(48);
  ArchitectureOptions& a = c.arch;
  a.mla = {.enabled = true,
           .q_lora_rank = rms ? 0 : 24,
           .kv_lora_rank = 16,
           .qk_head_dim = 8,
           .qk_pos_emb_head_dim = yarn ? 10 : 4,
           .v_head_dim = 6};
  a.position_embedding = rms ? PositionEmbedding::kRope : PositionEmbedding::kLearnedAbsolute;
  a.normalization = rms ? Normalization::kRMSNorm : Normalization::kLayerNorm;
  a.swiglu = rms;
  a.add_bias_linear = !rms;
  a.untie_embeddings_and_output_weights = !rms;
  if (yarn) a.yarn = {.factor = 40.0f, .mscale = 1.0f, .mscale_all_dim = 0.8f};
  return c;
}

inline GptVariantsGolden load_mla_golden(const std::string& name) {
  return load_golden_fixture(name, mla_golden_config(name));
}

}  // namespace megatron::testing
