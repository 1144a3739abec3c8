// --pipeline-model-parallel-layout (model/pipeline_layout.h): the grammar against the examples
// in Megatron-LM's code comments, help text and docs (the expansions worked out by hand from its
// two regular expressions), the stages of its unit tests' and CI configs' layouts, the layer
// ranges they give (Megatron's test_layout_layer_number golden answer), and every malformed
// layout refused with a message naming the problem.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "model/pipeline_layout.h"
#include "model/stage_range.h"

namespace megatron {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string stage_layers_error(const std::string& layout, int num_layers, int pipeline_size,
                               int mtp_num_layers = 0) {
  try {
    pipeline_layout_stage_layers(layout, num_layers, pipeline_size, mtp_num_layers);
  } catch (const Error& e) {
    return e.message();
  }
  return "accepted";
}

std::string parse_error(const std::string& layout) {
  try {
    parse_pipeline_layout(layout);
  } catch (const Error& e) {
    return e.message();
  }
  return "accepted";
}

// The comments of Megatron's parse_str_to_list, one by one.
TEST(PipelineLayout, ExpandsAsMegatronsCommentsSay) {
  EXPECT_EQ(expand_pipeline_layout("xy(ab|cd|ef)*2,pq"), "xyab|cd|efab|cd|efpq");
  EXPECT_EQ(expand_pipeline_layout("(ab)*3"), "ababab");
  EXPECT_EQ(expand_pipeline_layout("ab,(cd|)*2"), "abcd|cd|");
  EXPECT_EQ(expand_pipeline_layout("(|ab)*2,cd"), "|ab|abcd");
  EXPECT_EQ(expand_pipeline_layout("x*3"), "xxx");
}

TEST(PipelineLayout, ExpandsCountsAndCommasLikeMegatron) {
  EXPECT_EQ(expand_pipeline_layout("t*12"), "tttttttttttt");
  EXPECT_EQ(expand_pipeline_layout("E,t,t,|,L"), "Ett|L");
  EXPECT_EQ(expand_pipeline_layout("|*3"), "|||");
  EXPECT_EQ(expand_pipeline_layout("(t*2|)*2"), "tt|tt|");
  // A count of 0 unrolls to nothing.
  EXPECT_EQ(expand_pipeline_layout("Et*0(t|)*0L"), "EL");
  // Groups unroll before single characters: the '*3' left after a group applies to its last
  // character (Megatron's two passes).
  EXPECT_EQ(expand_pipeline_layout("(tt|)*2*3"), "tt|tt|||");
  // One pass each: "t*2*3" leaves "*3" after the first repetition.
  EXPECT_EQ(expand_pipeline_layout("t*2*3"), "tt*3");
  // What the passes do not match stays; an empty group's ')' is a character like any other.
  EXPECT_EQ(expand_pipeline_layout("(tt)"), "(tt)");
  EXPECT_EQ(expand_pipeline_layout("()*3"), "()))");
}

// parse_str_to_list's docstring and Megatron's user guide: "Ettt|(tt|)*29,m|L" (and the guide's
// "Et*3|...") is [E t t t] + [t t] x 29 + [m] + [L].
TEST(PipelineLayout, ParsesMegatronsDocumentedExample) {
  std::vector<std::string> expected = {"Ettt"};
  for (int i = 0; i < 29; ++i) expected.push_back("tt");
  expected.push_back("m");
  expected.push_back("L");
  EXPECT_EQ(parse_pipeline_layout("Ettt|(tt|)*29,m|L"), expected);
  EXPECT_EQ(parse_pipeline_layout("Et*3|(tt|)*29,m|L"), expected);
  // The help text of --pipeline-model-parallel-layout, and the guide's empty stage.
  EXPECT_THAT(parse_pipeline_layout("E|(t|)*3,m|m||L"),
              ElementsAre("E", "t", "t", "t", "m", "m", "", "L"));
  EXPECT_THAT(parse_pipeline_layout("E||t|L"), ElementsAre("E", "", "t", "L"));
}

// MTP layers ('m', --mtp-num-layers) go with the loss: as many as the flag says, in the last
// stage after its transformer layers. The guide's DeepSeek-V3 example puts its 'm' on a stage
// of its own (Megatron's standalone MTP), which is refused by name.
TEST(PipelineLayout, MtpLayersGoWithTheLoss) {
  EXPECT_THAT(pipeline_layout_stage_layers("Et*7|t*7mL", 14, 2, 1), ElementsAre(7, 7));
  EXPECT_THAT(pipeline_layout_stage_layers("Et*3|(tt|)*6mL", 15, 2, 1),
              ElementsAre(3, 2, 2, 2, 2, 2, 2, 0));
  EXPECT_THAT(pipeline_layout_stage_layers("Et|t|t|tmmL", 4, 2, 2), ElementsAre(1, 1, 1, 1));
  EXPECT_THAT(stage_layers_error("Et*7|t*7mL", 14, 2),
              HasSubstr("places 1 MTP layers ('m'), but --mtp-num-layers is 0"));
  EXPECT_THAT(stage_layers_error("Et*7|t*7L", 14, 2, 1),
              HasSubstr("places 0 MTP layers ('m'), but --mtp-num-layers is 1"));
  EXPECT_THAT(stage_layers_error("Et*3|(tt|)*29,m|L", 61, 16, 1),
              AllOf(HasSubstr("--pipeline-model-parallel-layout \"Et*3|(tt|)*29,m|L\" must place "
                              "the MTP layers ('m') in the last stage"),
                    HasSubstr("standalone MTP) is not implemented")));
  EXPECT_THAT(stage_layers_error("Et|tmtL", 3, 2, 1), HasSubstr("after its transformer layers"));
}

// Megatron's CI configs: gpt3_moe_mcore_te_tp2_pp2_ep4_etp1_no_mtp_no_a2a_ovlp_fine_grained_
// offloading (15 layers, PP 2: 8 stages, v = 4), and the MTP configs' layouts without their m
// (with them: MtpLayersGoWithTheLoss).
TEST(PipelineLayout, StageLayersOfMegatronsCiLayouts) {
  EXPECT_THAT(pipeline_layout_stage_layers("Et*3|(tt|)*6L", 15, 2),
              ElementsAre(3, 2, 2, 2, 2, 2, 2, 0));
  EXPECT_THAT(pipeline_layout_stage_layers("Et*7|t*7L", 14, 2), ElementsAre(7, 7));
  EXPECT_THAT(pipeline_layout_stage_layers("Et*2|(tt|)*5t|tL", 14, 4),
              ElementsAre(2, 2, 2, 2, 2, 2, 1, 1));
  EXPECT_THAT(pipeline_layout_stage_layers("Et|(tt|)*6L", 13, 2),
              ElementsAre(1, 2, 2, 2, 2, 2, 2, 0));
  // One stage: PP 1 with a layout.
  EXPECT_THAT(pipeline_layout_stage_layers("Et*4L", 4, 1), ElementsAre(4));
  EXPECT_THAT(pipeline_layout_stage_layers("E||t|L", 1, 2), ElementsAre(0, 0, 1, 0));
  EXPECT_THAT(pipeline_layout_stage_layers("E||t|L", 1, 4), ElementsAre(0, 0, 1, 0));
}

// Megatron's test_layout_layer_number: 8 layers, PP 4, v 2, layout
// [E] [t] [t t] [t] [] [t] [t] [t t L]; its golden layer numbers (1-based) per rank and chunk
// are rank 0: [] []; rank 1: [1] [5]; rank 2: [2, 3] [6]; rank 3: [4] [7, 8].
TEST(PipelineLayout, LayerRangesAsMegatronsGoldenAnswer) {
  const PipelineSplit split{.num_layers = 8,
                            .pipeline_size = 4,
                            .chunks = 2,
                            .layout = pipeline_layout_stage_layers("E|t|tt|t||t|t|ttL", 8, 4)};
  check_pipeline_split(split);
  auto layers_of = [&](int rank, int chunk) {
    const StageRange r = stage_range(split, rank, chunk);
    std::vector<int> numbers;
    for (int i = 0; i < r.num_layers; ++i) numbers.push_back(r.first_layer + i + 1);
    return numbers;
  };
  EXPECT_THAT(layers_of(0, 0), ElementsAre());
  EXPECT_THAT(layers_of(0, 1), ElementsAre());
  EXPECT_THAT(layers_of(1, 0), ElementsAre(1));
  EXPECT_THAT(layers_of(1, 1), ElementsAre(5));
  EXPECT_THAT(layers_of(2, 0), ElementsAre(2, 3));
  EXPECT_THAT(layers_of(2, 1), ElementsAre(6));
  EXPECT_THAT(layers_of(3, 0), ElementsAre(4));
  EXPECT_THAT(layers_of(3, 1), ElementsAre(7, 8));
  EXPECT_TRUE(stage_range(split, 0, 0).first);
  EXPECT_FALSE(stage_range(split, 0, 1).first);
  EXPECT_TRUE(stage_range(split, 3, 1).last);
  EXPECT_FALSE(stage_range(split, 3, 0).last);
  EXPECT_FALSE(split.even());
  // Parameters follow: layer 4 (0-based) is on stage 5, rank 1; the empty stage 4 holds none.
  EXPECT_EQ(pipeline_rank_of_parameter("decoder.layers.4.mlp.linear_fc1.weight", split), 1);
  EXPECT_EQ(pipeline_rank_of_parameter("decoder.layers.3.mlp.linear_fc1.weight", split), 3);
  EXPECT_EQ(pipeline_rank_of_parameter("embedding.word_embeddings.weight", split), 0);
  EXPECT_EQ(pipeline_rank_of_parameter("output_layer.weight", split), 3);
}

// Megatron's test_layer_builder cases, as strings: 7 layers, PP 2.
TEST(PipelineLayout, MegatronsLayerBuilderCases) {
  EXPECT_THAT(pipeline_layout_stage_layers("Et|t*4|t|tL", 7, 2), ElementsAre(1, 4, 1, 1));
  EXPECT_THAT(pipeline_layout_stage_layers("E|t*7||L", 7, 2), ElementsAre(0, 7, 0, 0));
  EXPECT_THAT(pipeline_layout_stage_layers("E|t*6|t|L", 7, 2), ElementsAre(0, 6, 1, 0));
  EXPECT_THAT(stage_layers_error("t*6|tL", 7, 2), HasSubstr("must name the embedding (E) once"));
  EXPECT_THAT(stage_layers_error("Et*6|t", 7, 2), HasSubstr("must name the loss (L"));
  EXPECT_THAT(stage_layers_error("E|t*7|L", 7, 2),
              HasSubstr("has 3 stages ('|' separates them), not a multiple of "
                        "--pipeline-model-parallel-size 2"));
}

TEST(PipelineLayout, RefusesMalformedLayouts) {
  const std::string flag = "--pipeline-model-parallel-layout ";
  // Whitespace, as Megatron: not a symbol.
  EXPECT_THAT(parse_error("Et | tL"),
              AllOf(HasSubstr(flag + "\"Et | tL\""), HasSubstr("a space is not a layer symbol")));
  EXPECT_THAT(parse_error(" EttL"), HasSubstr("a space is not a layer symbol"));
  EXPECT_THAT(parse_error("Et\t|tL"), HasSubstr("a space is not a layer symbol"));
  // Groups: unclosed, nested, empty, without a count.
  EXPECT_THAT(parse_error("E(tt|*2L"), HasSubstr("a '(' must open a group written (X)*N"));
  EXPECT_THAT(parse_error("E((t|)*2)*2L"), HasSubstr("groups do not nest"));
  EXPECT_THAT(parse_error("E()*2tL"), HasSubstr("a '(' must open a group"));
  EXPECT_THAT(parse_error("E(tt|)tL"), HasSubstr("a '(' must open a group"));
  EXPECT_THAT(parse_error("Ett)*2L"), HasSubstr("a ')' must close a group"));
  // Stray repetition marks and counts.
  EXPECT_THAT(parse_error("Et**2L"), HasSubstr("a '*' must follow a layer symbol"));
  EXPECT_THAT(parse_error("*2EtL"), HasSubstr("a '*' must follow a layer symbol"));
  EXPECT_THAT(parse_error("Et*|L"), HasSubstr("a '*' must follow a layer symbol"));
  EXPECT_THAT(parse_error("Et3|L"), HasSubstr("a count must follow a '*'"));
  // Unknown symbols; Megatron's symbols are case-sensitive.
  EXPECT_THAT(parse_error("Ex|L"), HasSubstr("'x' is not a layer symbol"));
  EXPECT_THAT(parse_error("etl"), HasSubstr("'e' is not a layer symbol"));
  // Counts that would only exhaust memory.
  EXPECT_THAT(parse_error("Et*1000000L"), HasSubstr("the repetition count 1000000 is larger"));
  EXPECT_THAT(parse_error("E(t*100000|)*100000L"), HasSubstr("unrolls to more than"));
}

TEST(PipelineLayout, RefusesLayoutsThatDoNotFitTheModel) {
  EXPECT_THAT(stage_layers_error("Et*3|t*4L", 8, 2),
              HasSubstr("holds 7 transformer layers (t), but --num-layers is 8"));
  EXPECT_THAT(stage_layers_error("Ett|tt|ttL", 6, 2), HasSubstr("has 3 stages"));
  EXPECT_THAT(stage_layers_error("Ett|ttL", 4, 1),
              HasSubstr("has 2 stages for --pipeline-model-parallel-size 1"));
  // E first, once; L last, once.
  EXPECT_THAT(stage_layers_error("tE|tL", 2, 2), HasSubstr("as the first symbol of the first"));
  EXPECT_THAT(stage_layers_error("Et|EtL", 2, 2), HasSubstr("must name the embedding (E) once"));
  // Megatron would take an empty first stage before E (its check reads the flattened layout)
  // but still builds the embedding on the first stage: refused rather than moved.
  EXPECT_THAT(stage_layers_error("|Et|t|L", 2, 2), HasSubstr("must name the embedding (E) once"));
  EXPECT_THAT(stage_layers_error("EtL|t", 2, 2), HasSubstr("as the last symbol of the last stage"));
  EXPECT_THAT(stage_layers_error("EtL|tL", 2, 2), HasSubstr("must name the loss (L"));
  EXPECT_THAT(stage_layers_error("Et|tL|", 2, 3), HasSubstr("must name the loss (L"));
  EXPECT_THAT(stage_layers_error("", 2, 1), HasSubstr("must name the embedding (E) once"));
}

// The layout in a PipelineSplit: no other split flag beside it, its stages and layers must
// match the split's sizes.
TEST(PipelineLayout, SplitChecks) {
  auto error_of = [](const PipelineSplit& s) -> std::string {
    try {
      check_pipeline_split(s);
    } catch (const Error& e) {
      return e.message();
    }
    return "accepted";
  };
  EXPECT_EQ(error_of({.num_layers = 4, .pipeline_size = 2, .layout = {1, 3}}), "accepted");
  EXPECT_THAT(
      error_of({.num_layers = 4, .pipeline_size = 2, .first_stage_layers = 1, .layout = {1, 3}}),
      HasSubstr("--pipeline-model-parallel-layout sets every stage's layers itself"));
  EXPECT_THAT(
      error_of(
          {.num_layers = 4, .pipeline_size = 2, .account_for_embedding = true, .layout = {1, 3}}),
      HasSubstr("cannot be combined with --decoder-first-pipeline-num-layers"));
  EXPECT_THAT(error_of({.num_layers = 4, .pipeline_size = 2, .chunks = 2, .layout = {1, 3}}),
              HasSubstr("has 2 stages, but --pipeline-model-parallel-size 2 x 2"));
  EXPECT_THAT(error_of({.num_layers = 5, .pipeline_size = 2, .layout = {1, 3}}),
              HasSubstr("holds 4 transformer layers, but --num-layers is 5"));
  EXPECT_THAT(virtual_stage_layers({.num_layers = 4, .pipeline_size = 2, .layout = {0, 4}}),
              ElementsAre(0, 4));
}

}  // namespace
}  // namespace megatron
