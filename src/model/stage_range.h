// StageRange: which part of a model one pipeline stage holds (DESIGN.md §3 "Model stages").
//
// With p pipeline ranks and v model chunks per rank (v > 1: the interleaved schedule), the
// L layers are cut into p·v virtual stages of L/(p·v) consecutive layers; chunk c of pipeline
// rank r is virtual stage c·p + r (Megatron's assignment), so rank r holds layers
// [(c·p + r)·L/(p·v), + L/(p·v)) for each c. The embedding belongs to virtual stage 0, the
// final LayerNorm and the head to virtual stage p·v − 1.
#pragma once

#include <string>

namespace megatron {

struct StageRange {
  int first_layer = 0;
  int num_layers = -1;  // -1: through the last layer
  bool first = true;    // holds the embedding
  bool last = true;     // holds the final LayerNorm and the head
  bool whole() const { return first && last; }
};

// Throws Error naming the flags unless `num_layers` splits into pipeline_size · chunks equal
// stages (chunks > 1 needs pipeline_size > 1).
void check_pipeline_split(int num_layers, int pipeline_size, int chunks);

// Chunk `chunk` of pipeline rank `pipeline_rank` (check_pipeline_split first).
StageRange stage_range(int num_layers, int pipeline_size, int pipeline_rank, int chunks, int chunk);

// The pipeline rank that holds parameter `name` when `num_layers` layers are split into
// `pipeline_size` contiguous stages (one chunk per rank): "...layers.<i>...." by its layer,
// "embedding...." the first stage, anything else (final LayerNorm, heads) the last. Throws
// Error for a layer index outside [0, num_layers).
int pipeline_rank_of_parameter(const std::string& name, int num_layers, int pipeline_size);

}  // namespace megatron
