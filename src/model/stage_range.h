// StageRange: which part of a model one pipeline stage holds (DESIGN.md §3 "Model stages"),
// and PipelineSplit: how the layers are cut into stages, with Megatron-LM's semantics
// (get_num_layers_to_build and get_transformer_layer_offset in Megatron-Core).
//
// With p pipeline ranks and v model chunks per rank (v > 1: the interleaved schedule) there are
// p·v virtual stages; chunk c of pipeline rank r is virtual stage c·p + r (Megatron's
// assignment). The layers are cut into consecutive runs in virtual-stage order, so the layers
// a virtual stage holds follow from how many each one holds:
//
//   even (default)          L/(p·v) each
//   first / last counts     --decoder-first-pipeline-num-layers F: rank 0's chunks F/v each;
//                           --decoder-last-pipeline-num-layers E: rank p − 1's chunks E/v each;
//                           the other ranks' chunks split the rest evenly: (L − F − E)/(p'·v)
//                           with p' the ranks in between (either count may be given alone)
//   account for embedding   the embedding (--account-for-embedding-in-pipeline-split) and the
//   / loss                  loss (--account-for-loss-in-pipeline-split) count as one layer
//                           each in an even split of L + 1 (or + 2) "layers", so virtual stage 0
//                           holds one transformer layer fewer (and the last one one fewer); a
//                           virtual stage may then hold no transformer layer at all
//
// e.g. L = 12, p = 4, F = E = 2: 2, 4, 4, 2 layers; L = 6, p = 4, v = 2 with both accounted
// for: virtual stages 0..7 hold 0, 1, 1, 1, 1, 1, 1, 0 layers (the embedding alone, then one
// layer each, then the final LayerNorm and the head alone).
// The embedding belongs to virtual stage 0, the final LayerNorm and the head to virtual stage
// p·v − 1, whatever the counts.
#pragma once

#include <string>
#include <vector>

namespace megatron {

struct StageRange {
  int first_layer = 0;
  int num_layers = -1;  // -1: through the last layer
  bool first = true;    // holds the embedding
  bool last = true;     // holds the final LayerNorm and the head
  bool whole() const { return first && last; }
};

struct PipelineSplit {
  int num_layers = 1;                  // --num-layers, L
  int pipeline_size = 1;               // --pipeline-model-parallel-size, p
  int chunks = 1;                      // model chunks per pipeline rank, v
  int first_stage_layers = 0;          // --decoder-first-pipeline-num-layers; 0: not given
  int last_stage_layers = 0;           // --decoder-last-pipeline-num-layers; 0: not given
  bool account_for_embedding = false;  // --account-for-embedding-in-pipeline-split
  bool account_for_loss = false;       // --account-for-loss-in-pipeline-split
  // --pipeline-model-parallel-layout: the layers of each virtual stage c·p + r
  // (pipeline_layout_stage_layers); empty: not given.
  std::vector<int> layout{};

  int virtual_stages() const { return pipeline_size * chunks; }
  // Every virtual stage holds L/(p·v) layers (no first/last counts, nothing accounted for, no
  // layout).
  bool even() const {
    return first_stage_layers == 0 && last_stage_layers == 0 && !account_for_embedding &&
           !account_for_loss && layout.empty();
  }
};

// Throws Error naming the flags unless the split is one Megatron-LM accepts: the counts
// positive and, with v > 1, multiples of v; the layers left for the ranks in between divisible
// by them (and by v), none left when there are no such ranks; first/last counts not combined
// with the account-for flags (nor given with p = 1); L (plus what is accounted for) divisible
// by p·v otherwise; v > 1 only with p > 1; a layout alone, of p·v stages holding L layers.
void check_pipeline_split(const PipelineSplit& split);

// Transformer layers of each virtual stage, indexed c·p + r (check_pipeline_split first).
std::vector<int> virtual_stage_layers(const PipelineSplit& split);

// Chunk `chunk` of pipeline rank `pipeline_rank`.
StageRange stage_range(const PipelineSplit& split, int pipeline_rank, int chunk);

// The pipeline rank that holds parameter `name` under `split`: "...layers.<i>...." the rank
// whose virtual stage holds layer i, "embedding...." the first rank, anything else (final
// LayerNorm, heads, multi-token prediction's "mtp....") the last. Throws Error for a layer index
// outside [0, num_layers).
int pipeline_rank_of_parameter(const std::string& name, const PipelineSplit& split);

}  // namespace megatron
