// ModelSpecs of the planner tests (plan_memory_test.cpp, plan_time_test.cpp,
// plan_validation_test.cpp): the published models their hand-derived numbers are about.
#pragma once

#include <cstdint>

#include "plan/model_spec.h"

namespace megatron::plan {

// A GPT of `layers` layers, hidden size `hidden`, `heads` attention heads, sequence length
// `seq` and a vocabulary of `vocab` before padding; every other field ModelSpec's default
// (4h MLP, learned positions, max_position_embeddings = seq, padding to a multiple of 128).
inline ModelSpec gpt_spec(int layers, int64_t hidden, int64_t heads, int seq, int64_t vocab) {
  ModelSpec m;
  m.num_layers = layers;
  m.hidden_size = hidden;
  m.num_attention_heads = heads;
  m.seq_length = seq;
  m.vocab_size = vocab;
  return m;
}

// GPT-3 175B as Megatron-LM's papers size it: L 96, h 12288, a 96, s 2048, V 51200.
inline ModelSpec gpt3_175b() {
  return gpt_spec(96, 12288, 96, 2048, 51200);
}

}  // namespace megatron::plan
