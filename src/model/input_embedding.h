// InputEmbedding: the input layer of GPT and BERT (Megatron-LM's Embedding).
//   tokens i32 [b, s] (and, with a token-type table, token types i32 [b, s]) → (transposed
//   to [s, b]) vocab-parallel word embedding + learned position embedding (position = index
//   in the sequence) [+ token-type embedding] [× output_mult] [→ LayerNorm] → dropout →
//   [s, b, h] in the compute dtype.
// Parameters: "embedding.word_embeddings.weight" [V_padded, h] partition 0,
// "embedding.position_embeddings.weight" [max_pos, h], "embedding.tokentype_embeddings.weight"
// [types, h] when num_tokentypes > 0 (BERT), "embedding.layernorm.{weight,bias}" [h] when
// enabled (post-LN BERT) — Megatron's names, registered in this order.
// Without learned positions (--position-embedding-type rope or none) there is no position
// table: RoPE acts inside attention.
// The dropout mask is keyed by (layer 0, DropoutSite::kEmbedding).
// With sequence_parallel the vocabulary-parallel partial lookups are reduce-scattered along
// the sequence to this rank's shard (ReduceScatterToSequenceParallelRegion), the position and
// token-type rows of the shard's global positions added to it, then the LayerNorm (its
// parameters sequence-parallel) and the dropout, which draws the mask of the shard's global
// positions: the output is [s/t, b, h], bitwise the rows of the unsplit one, and backward
// all-gathers its gradient before scattering it into the tables.
#pragma once

#include <memory>
#include <optional>

#include "core/arena.h"
#include "distributed/parallel_state.h"
#include "model/layer_norm.h"
#include "parallel/random.h"
#include "parallel/vocab_parallel_embedding.h"

namespace megatron {

struct InputEmbeddingConfig {
  const char* model_name = "";  // "GPT", "BERT": names the inputs in error messages
  int64_t vocab_size = 0;       // real entries (the rest of the padded table is padding)
  int64_t padded_vocab_size = 0;
  int64_t hidden_size = 0;
  int max_position_embeddings = 0;
  int num_tokentypes = 0;  // 0: no token-type table (GPT)
  bool learned_positions = true;
  float init_method_std = 0.02f;
  float output_mult = 1.0f;  // the sum of the tables × this (muP's --mup-embedding-mult)
  float hidden_dropout = 0.1f;
  bool layernorm = false;  // LayerNorm before the dropout (post-LN BERT)
  float layernorm_epsilon = 1e-5f;
  bool sequence_parallel = false;  // output the sequence shard [s/t, b, h]
};

class InputEmbedding {
 public:
  struct Ctx {
    int64_t seq = 0, batch = 0;  // the whole sequence
    VocabParallelEmbedding::Ctx word;
    Tensor position_ids;   // i32 [s·b] (whole sequence) or undefined (no position table)
    Tensor tokentype_ids;  // i32 [s·b] (whole sequence) or undefined (no token-type table)
    LayerNorm::Ctx layernorm;
    Tensor dropout_mask;  // u8 [s·b, h] ([s/t·b, h] with sequence parallelism) or undefined
  };

  InputEmbedding(const InputEmbeddingConfig& config, const ParallelState& ps, ParameterStore& store,
                 const ComputeWeights& weights);

  void init_weights(ParameterStore& store, uint64_t seed) const;

  // tokens i32 [b, s] (ids in [0, V)), token_types i32 [b, s] (types in [0, num_tokentypes);
  // undefined when there is no token-type table) → [s, b, h]. Position ids are
  // position_start + index in the sequence (> 0: continuing a sequence, KV-cache decoding).
  // With sequence_parallel → [s/t, b, h] (training only: position_start = 0). On a
  // context-parallel rank tokens are its local sequence (parallel/context_parallel_layout.h)
  // and the positions and dropout masks are those of its chunks (training only).
  Tensor forward(Ctx& ctx, const Tensor& tokens, const Tensor& token_types,
                 const DropoutScope& scope, Arena& arena, int64_t position_start = 0) const;
  // KV-cache decoding of rows at different positions (continuous batching): tokens i32 [b, s],
  // row r's at positions [row_starts[r], + s) → [s, b, h]. No token types, no sequence or
  // context parallelism. Equals forward() row by row.
  Tensor forward_rows(Ctx& ctx, const Tensor& tokens, const std::vector<int64_t>& row_starts,
                      Arena& arena) const;
  // Multi-token prediction's input at depth `shift` >= 1 (model/multi_token_prediction.h,
  // Megatron's roll_tensor): the tokens i32 [b, s] and their positions shifted left by `shift`,
  // the last `shift` places of each sequence holding token 0 at position 0; no token-type table.
  // The dropout mask is keyed by (layer `dropout_layer`, DropoutSite::kEmbedding), not the
  // input's (layer 0). Training and evaluation only (positions from 0), no context parallelism.
  Tensor forward_shifted(Ctx& ctx, const Tensor& tokens, int64_t shift, int dropout_layer,
                         const DropoutScope& scope, Arena& arena) const;
  // dout shaped like forward's output → accumulates the tables' (and the LayerNorm's)
  // gradients.
  void backward(const Ctx& ctx, const Tensor& dout, Arena& arena) const;

  const VocabParallelEmbedding& word_embeddings() const { return word_; }

 private:
  // forward's work on the checked inputs: ids [s, b] (sequence-major), positions from
  // position_start, or shifted left by `shift` (> 0) with position 0 past the end, or with
  // row_starts (not null) from each row's own start.
  Tensor embed(Ctx& ctx, const Tensor& ids, const Tensor& token_types, const DropoutScope& scope,
               Arena& arena, int64_t position_start, int64_t shift, int dropout_layer,
               const std::vector<int64_t>* row_starts = nullptr) const;

  InputEmbeddingConfig config_;
  std::shared_ptr<Communicator> tp_;
  int cp_size_, cp_rank_;
  const ComputeWeights& weights_;
  VocabParallelEmbedding word_;
  std::optional<size_t> position_index_;   // none without learned positions
  std::optional<size_t> tokentype_index_;  // none without a token-type table
  std::unique_ptr<LayerNorm> layernorm_;   // null unless config.layernorm
};

// A [b, s] tensor as a contiguous [s, b] one (activations are sequence-major).
Tensor to_seq_major(const Tensor& t, Arena& arena);

}  // namespace megatron
