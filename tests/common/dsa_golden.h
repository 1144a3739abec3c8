// The PyTorch golden fixtures of DeepSeek sparse attention (tests/data/dsa and tests/data/
// dsa_sparse, written by tools/reference/dsa_reference.py): mla_golden.h's tiny MLA GPTs without
// linear biases, each layer with a lightning indexer of 4 heads × 8 channels keeping the top 5
// of the 16 keys, indexer loss coefficient 0.5; weights in our names.
//   dsa         learned positions, LayerNorm, a query latent of 24, GeLU, untied output layer;
//               the dense indexer loss, ReLU scores
//   dsa_sparse  --position-embedding-type rope, RMSNorm, SwiGLU, a direct query projection,
//               tied output layer; the sparse indexer loss, no ReLU, interleaved indexer RoPE
//   dsa_dense   dsa keeping every causal key (top-k 16): no selection for bf16 to change
// Besides mla_golden.h's entries, each holds indexer_loss [layers]. They load and compare
// through gpt_variants_golden.h's helpers.
#pragma once

#include <string>

#include "../common/mla_golden.h"

namespace megatron::testing {

// The shape of the reference script's model `name` ("dsa", "dsa_sparse" or "dsa_dense"; its
// constants).
inline GptConfig dsa_golden_config(const std::string& name) {
  const bool sparse = name == "dsa_sparse";
  GptConfig c = mla_golden_config(sparse ? "mla_rms" : "mla");
  c.arch.add_bias_linear = false;
  c.arch.dsa = {.enabled = true,
                .indexer_heads = 4,
                .indexer_head_dim = 8,
                .topk = name == "dsa_dense" ? 16 : 5,
                .loss_coeff = 0.5f,
                .sparse_loss = sparse,
                .scoring_relu = !sparse,
                .rope_interleaved = sparse};
  return c;
}

inline GptVariantsGolden load_dsa_golden(const std::string& name) {
  return load_golden_fixture(name, dsa_golden_config(name));
}

}  // namespace megatron::testing
