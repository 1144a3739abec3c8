// Parameter counts of a model and of one rank's share under a layout: what is split over the
// tensor-parallel group (linear weights, the vocabulary-parallel embedding) and what every TP
// rank holds whole (LayerNorms, the row-parallel output biases, position embeddings).
//
// Exact for this project's GPT and BERT (they register these parameters); Megatron-LM's
// theoretical_memory_usage counts the same model but leaves out the linear biases and the
// position/token-type embeddings (a few per mille; tests/unit/plan_memory_test.cpp shows the
// difference term by term).
#pragma once

#include <cstdint>

#include "plan/implementation.h"
#include "plan/layout.h"
#include "plan/model_spec.h"

namespace megatron::plan {

struct ParameterCounts {
  // Whole model (padded vocabulary at this TP size).
  double layer_sharded = 0;     // one transformer layer, parts split over TP (full count)
  double layer_replicated = 0;  // one transformer layer, parts every TP rank holds
  // The routed experts of one layer (averaged over the layers, --moe-layer-freq): fc1 weights
  // and biases and fc2 weights, split over EP x ETP (e·et); their fc2 biases, split over EP and
  // whole on every ETP rank. Not in layer_sharded / layer_replicated (the router, the shared
  // expert and its gate are).
  double layer_expert = 0;
  double layer_expert_bias = 0;
  double word_embedding = 0;   // V_padded · h (split over TP by vocabulary)
  double other_embedding = 0;  // position (+ token type) embeddings, replicated
  double embedding_norm = 0;   // post-LN BERT: the embedding's LayerNorm, replicated
  double output_layer = 0;     // untied output weights V_padded · h (0 when tied)
  double head_sharded = 0;     // BERT: the LM head's vocabulary bias
  double head_replicated = 0;  // final norm; BERT: LM-head dense + LayerNorm, pooler, binary head
  // Of the replicated parameters, those applied to each rank's sequence shard under sequence
  // parallelism, whose gradients are then partial sums over TP (Megatron's `sequence_parallel`
  // attribute): per layer all of layer_replicated (norms, row-parallel biases); in the head the
  // final norm and BERT's LM-head dense + LayerNorm (the pooler sees the gathered first token).
  // That is Megatron-LM's BERT; megatron-cpp's all-gathers the hidden states before its heads,
  // so there only the final norm sees a shard (final_norm).
  double head_sequence_parallel = 0;
  double final_norm = 0;  // the final norm after the last layer (in head_replicated; post-LN: 0)
  double total = 0;       // every parameter of the model once

  // One rank (TP share) of a pipeline stage; with PP = 1 first == last == the whole model.
  double first_stage_rank = 0;  // embeddings (+ their norm) + L/p layers
  double last_stage_rank = 0;   // L/p layers + final norm + head (+ its copy of the tied embedding)
  // Of those, the routed experts' share: L/p · (layer_expert/(e·et) + layer_expert_bias/e),
  // whose gradients and distributed-optimizer state go over the expert-data-parallel group.
  double stage_expert_rank = 0;
  double max_rank() const {
    return first_stage_rank > last_stage_rank ? first_stage_rank : last_stage_rank;
  }
};

ParameterCounts count_parameters(const ModelSpec& model, const Layout& layout);

// How many parameter tensors (each weight, bias and norm vector its own tensor, as Megatron's
// modules register them; SwiGLU's fc1 one fused tensor) one rank of the first and the last
// pipeline stage holds. Code that loops over parameters tensor by tensor pays per tensor
// (plan/step_time.h: the 2019 code's optimizer).
struct ParameterTensors {
  int64_t first_stage_rank = 0;
  int64_t last_stage_rank = 0;
  int64_t max_rank() const {
    return first_stage_rank > last_stage_rank ? first_stage_rank : last_stage_rank;
  }
};
ParameterTensors count_parameter_tensors(const ModelSpec& model, const Layout& layout);

// Under sequence parallelism, the replicated parameters of one TP rank that see only its
// sequence shard, so that their gradients are partial sums the step all-reduces over TP (in
// one packed buffer: megatron-cpp's reduce_sequence_parallel_gradients, the parameters it
// registers with `sequence_parallel`): per layer its norms and row-parallel biases; on the
// first stage the embedding LayerNorm (post-LN BERT); on the last the final norm (pre-LN) and,
// in Megatron-LM's BERT, the LM head's dense and LayerNorm (megatron-cpp's BERT runs its heads
// on the gathered sequence). With PP = 1 first == last == the whole model's.
struct SequenceParallelGradients {
  double first_stage_rank = 0;
  double last_stage_rank = 0;
  double max_rank() const {
    return first_stage_rank > last_stage_rank ? first_stage_rank : last_stage_rank;
  }
};
SequenceParallelGradients sequence_parallel_gradients(const ModelSpec& model, const Layout& layout,
                                                      Implementation impl);

}  // namespace megatron::plan
