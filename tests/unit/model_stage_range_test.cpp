// PipelineSplit (model/stage_range.h): the layers of each virtual stage against tables worked
// out by hand from Megatron-LM's rules (get_num_layers_to_build, get_transformer_layer_offset)
// for its documented examples and its CI configurations, the parameter → pipeline rank mapping
// that follows the split, and the errors for splits Megatron-LM refuses.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/stage_range.h"

namespace megatron {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// "first_layer+num_layers" per virtual stage, in virtual-stage order (chunk c of rank r at c·p+r).
std::vector<std::string> ranges(const PipelineSplit& s) {
  std::vector<std::string> out(size_t(s.virtual_stages()));
  for (int chunk = 0; chunk < s.chunks; ++chunk)
    for (int rank = 0; rank < s.pipeline_size; ++rank) {
      const StageRange r = stage_range(s, rank, chunk);
      out[size_t(chunk * s.pipeline_size + rank)] =
          std::to_string(r.first_layer) + "+" + std::to_string(r.num_layers);
    }
  return out;
}

std::string error_of(const PipelineSplit& s) {
  try {
    check_pipeline_split(s);
  } catch (const Error& e) {
    return e.message();
  }
  return "accepted";
}

// Megatron-Core's transformer_block.py: 8 layers over 2 stages with 4 model chunks are
// [0] [2] [4] [6] on stage 0 and [1] [3] [5] [7] on stage 1; with 2 chunks [0, 1] [4, 5] and
// [2, 3] [6, 7].
TEST(PipelineSplit, EvenInterleavedAsMegatronDocumentsIt) {
  EXPECT_THAT(ranges({.num_layers = 8, .pipeline_size = 2, .chunks = 4}),
              ElementsAre("0+1", "1+1", "2+1", "3+1", "4+1", "5+1", "6+1", "7+1"));
  EXPECT_THAT(ranges({.num_layers = 8, .pipeline_size = 2, .chunks = 2}),
              ElementsAre("0+2", "2+2", "4+2", "6+2"));
  const StageRange rank1_chunk1 =
      stage_range({.num_layers = 8, .pipeline_size = 2, .chunks = 2}, 1, 1);
  EXPECT_TRUE(rank1_chunk1.last);
  EXPECT_FALSE(rank1_chunk1.first);
}

// gpt3_mcore_te_tp1_pp4_vp1_uneven_pipeline: 12 layers, PP 4, first and last stages 2 layers,
// the two in between 4 each (offsets 0, 2, 6, 10).
TEST(PipelineSplit, FirstAndLastCounts) {
  EXPECT_THAT(
      ranges(
          {.num_layers = 12, .pipeline_size = 4, .first_stage_layers = 2, .last_stage_layers = 2}),
      ElementsAre("0+2", "2+4", "6+4", "10+2"));
  // Either count alone: the others split the rest.
  EXPECT_THAT(ranges({.num_layers = 10, .pipeline_size = 4, .first_stage_layers = 1}),
              ElementsAre("0+1", "1+3", "4+3", "7+3"));
  EXPECT_THAT(ranges({.num_layers = 7, .pipeline_size = 2, .last_stage_layers = 1}),
              ElementsAre("0+6", "6+1"));
  // No stage in between: the two counts are the whole model.
  EXPECT_THAT(
      ranges(
          {.num_layers = 5, .pipeline_size = 2, .first_stage_layers = 3, .last_stage_layers = 2}),
      ElementsAre("0+3", "3+2"));
}

// With v chunks each stage's count is cut into v equal chunks (Megatron's offset arithmetic:
// chunk c of rank r starts at c·(F + M + E)/v plus the chunks before it in round c).
TEST(PipelineSplit, FirstAndLastCountsInterleaved) {
  // 16 layers, PP 4, v 2, first 2, last 6: ranks 1 and 2 hold 4 each, 2 per chunk.
  EXPECT_THAT(ranges({.num_layers = 16,
                      .pipeline_size = 4,
                      .chunks = 2,
                      .first_stage_layers = 2,
                      .last_stage_layers = 6}),
              ElementsAre("0+1", "1+2", "3+2", "5+3", "8+1", "9+2", "11+2", "13+3"));
}

// gpt3_mcore_te_tp1_pp4_vp2_account_for_embedding_loss_in_pipeline_split: 6 layers, PP 4,
// v 2, the embedding and the loss counted as layers: 8 "layers", one per virtual stage, so
// virtual stage 0 holds the embedding alone and virtual stage 7 the final norm and head alone.
TEST(PipelineSplit, AccountForEmbeddingAndLoss) {
  const PipelineSplit both{.num_layers = 6,
                           .pipeline_size = 4,
                           .chunks = 2,
                           .account_for_embedding = true,
                           .account_for_loss = true};
  EXPECT_THAT(virtual_stage_layers(both), ElementsAre(0, 1, 1, 1, 1, 1, 1, 0));
  EXPECT_THAT(ranges(both), ElementsAre("0+0", "0+1", "1+1", "2+1", "3+1", "4+1", "5+1", "6+0"));
  const StageRange loss_only = stage_range(both, 3, 1);
  EXPECT_TRUE(loss_only.last);
  EXPECT_EQ(loss_only.first_layer, 6);
  EXPECT_EQ(loss_only.num_layers, 0);
  EXPECT_TRUE(stage_range(both, 0, 0).first);
  // One of them: 7 layers + the embedding over 4 stages.
  EXPECT_THAT(
      virtual_stage_layers({.num_layers = 7, .pipeline_size = 4, .account_for_embedding = true}),
      ElementsAre(1, 2, 2, 2));
  EXPECT_THAT(virtual_stage_layers({.num_layers = 7, .pipeline_size = 4, .account_for_loss = true}),
              ElementsAre(2, 2, 2, 1));
}

TEST(PipelineSplit, ParameterRankFollowsTheSplit) {
  const PipelineSplit uneven{
      .num_layers = 12, .pipeline_size = 4, .first_stage_layers = 2, .last_stage_layers = 2};
  const std::vector<std::pair<std::string, int>> expected = {
      {"embedding.word_embeddings.weight", 0},
      {"decoder.layers.0.mlp.linear_fc1.weight", 0},
      {"decoder.layers.1.self_attention.linear_qkv.weight", 0},
      {"decoder.layers.2.mlp.linear_fc1.weight", 1},
      {"decoder.layers.5.mlp.linear_fc1.weight", 1},
      {"decoder.layers.6.mlp.linear_fc1.weight", 2},
      {"decoder.layers.9.mlp.linear_fc1.weight", 2},
      {"decoder.layers.10.mlp.linear_fc1.weight", 3},
      {"decoder.layers.11.mlp.linear_fc1.weight", 3},
      {"decoder.final_layernorm.weight", 3},
      {"output_layer.weight", 3}};
  for (const auto& [name, rank] : expected)
    EXPECT_EQ(pipeline_rank_of_parameter(name, uneven), rank) << name;
  // Interleaved: layer 5 of 8 (PP 2, v 2) is on chunk 1 of rank 0.
  EXPECT_EQ(pipeline_rank_of_parameter("layers.5.mlp.dense_h_to_4h.weight",
                                       {.num_layers = 8, .pipeline_size = 2, .chunks = 2}),
            0);
  // A layer after a stage that holds none (account for the embedding, 3 layers over 4).
  EXPECT_EQ(pipeline_rank_of_parameter(
                "layers.0.mlp.dense_h_to_4h.weight",
                {.num_layers = 3, .pipeline_size = 4, .account_for_embedding = true}),
            1);
  EXPECT_THROW(pipeline_rank_of_parameter("layers.12.mlp.dense_h_to_4h.weight", uneven), Error);
}

TEST(PipelineSplit, RefusesWhatMegatronRefuses) {
  EXPECT_THAT(error_of({.num_layers = 10, .pipeline_size = 4}),
              HasSubstr("--num-layers 10 is not divisible by --pipeline-model-parallel-size 4"));
  EXPECT_THAT(error_of({.num_layers = 8, .pipeline_size = 4, .account_for_embedding = true}),
              HasSubstr("--num-layers 8 (+ 1 for the embedding, "
                        "--account-for-*-in-pipeline-split) is not divisible by "
                        "--pipeline-model-parallel-size 4"));
  EXPECT_THAT(error_of({.num_layers = 6,
                        .pipeline_size = 2,
                        .chunks = 3,
                        .account_for_embedding = true,
                        .account_for_loss = true}),
              HasSubstr("is not divisible into 6 virtual pipeline stages"));
  EXPECT_THAT(
      error_of({.num_layers = 12, .pipeline_size = 4, .first_stage_layers = 4}),
      HasSubstr("--num-layers 12 leaves 8 layers after --decoder-first-pipeline-num-layers"));
  EXPECT_THAT(
      error_of({.num_layers = 12, .pipeline_size = 4, .chunks = 2, .first_stage_layers = 3}),
      HasSubstr("--decoder-first-pipeline-num-layers 3 must be a multiple of the 2 "
                "virtual stages per pipeline rank"));
  EXPECT_THAT(
      error_of(
          {.num_layers = 12, .pipeline_size = 4, .first_stage_layers = 8, .last_stage_layers = 8}),
      HasSubstr("ask for more than the 12 layers of --num-layers"));
  EXPECT_THAT(
      error_of(
          {.num_layers = 12, .pipeline_size = 2, .first_stage_layers = 4, .last_stage_layers = 4}),
      HasSubstr("has no stage between the first and the last to hold them"));
  EXPECT_THAT(
      error_of(
          {.num_layers = 12, .pipeline_size = 4, .first_stage_layers = 6, .last_stage_layers = 6}),
      HasSubstr("leaves 0 layers"));
  EXPECT_THAT(error_of({.num_layers = 12,
                        .pipeline_size = 4,
                        .first_stage_layers = 2,
                        .account_for_loss = true}),
              HasSubstr("cannot be combined with --account-for-embedding-in-pipeline-split"));
  EXPECT_THAT(error_of({.num_layers = 4, .pipeline_size = 1, .first_stage_layers = 4}),
              HasSubstr("need --pipeline-model-parallel-size > 1"));
  EXPECT_THAT(error_of({.num_layers = 4, .pipeline_size = 1, .chunks = 2}),
              HasSubstr("need --pipeline-model-parallel-size > 1"));
  EXPECT_THAT(error_of({.num_layers = 4, .pipeline_size = 2, .first_stage_layers = -1}),
              HasSubstr("must be positive"));
  EXPECT_EQ(error_of({.num_layers = 6,
                      .pipeline_size = 4,
                      .chunks = 2,
                      .account_for_embedding = true,
                      .account_for_loss = true}),
            "accepted");
}

}  // namespace
}  // namespace megatron
