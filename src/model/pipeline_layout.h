// --pipeline-model-parallel-layout: Megatron-LM's string that names, stage by stage, what each
// virtual pipeline stage holds (PipelineParallelLayerLayout in Megatron-Core), e.g.
// "Et*3|(tt|)*29,m|L".
//
// Grammar, as Megatron reads it (parse_str_to_list): commas are removed (cosmetic); then every
// "(X)*N" (X without parentheses, not empty) becomes N copies of X, then every "c*N" (c any one
// character, '|' included) N copies of c, each pass left to right; what remains is cut at '|'
// into the stages, whose characters must be layer symbols:
//   E  the embedding              t  a transformer (decoder) layer
//   L  the final norm, head, loss m  a multi-token-prediction (MTP) layer
// A stage may be empty ("E||t|L"). The stages are the virtual stages in order: stage c·p + r is
// chunk c of pipeline rank r, so a layout of n stages for --pipeline-model-parallel-size p
// gives v = n/p model chunks per rank (v > 1: the interleaved schedule).
//
// What megatron-cpp builds from it: the transformer layers of each virtual stage, consecutive in
// stage order (the same cut model/stage_range.h makes from the other split flags). The
// embedding lives on the first virtual stage and the loss on the last, as in Megatron, so E
// must open the first stage and L close the last, once each; the MTP layers ('m', as many as
// --mtp-num-layers) go with the loss, in the last stage after its transformer layers
// (model/multi_token_prediction.h: the depths follow the decoder on the last stage).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace megatron {

// The layout with the commas removed and the repetitions unrolled (Megatron's rewriting, no
// symbol checked yet): "xy(ab|cd)*2,pq" -> "xyab|cdab|cdpq", "(|ab)*2,cd" -> "|ab|abcd".
// Throws Error for a repetition count above 100000.
std::string expand_pipeline_layout(std::string_view layout);

// The stages of the layout, each its layer symbols in order (empty for an empty stage).
// Throws Error naming the first character that is not a layer symbol, '|', or part of a
// well-formed repetition (a space, an unclosed or nested parenthesis, a stray '*').
std::vector<std::string> parse_pipeline_layout(std::string_view layout);

// The transformer layers of each virtual stage (indexed c·p + r) of `layout` for a model of
// `num_layers` layers and `pipeline_size` pipeline ranks. Throws Error naming the layout and
// the rule unless: the number of stages is a multiple of pipeline_size; E is the first symbol
// of the first stage and L the last of the last, once each; it holds num_layers 't'; it holds
// mtp_num_layers 'm', all in the last stage after its 't's.
std::vector<int> pipeline_layout_stage_layers(std::string_view layout, int num_layers,
                                              int pipeline_size, int mtp_num_layers = 0);

}  // namespace megatron
