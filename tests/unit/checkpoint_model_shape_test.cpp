// model_shape_differences: the check that a checkpoint's recorded model is the one the flags
// describe (checkpoint/model_shape.h).
#include <gtest/gtest.h>

#include "checkpoint/model_shape.h"

namespace megatron {
namespace {

TEST(ModelShapeDifferences, NamesEveryDifferingKeyAndSkipsUnrecordedAndIgnoredOnes) {
  const nlohmann::json flags = {{"num_layers", 2}, {"hidden_size", 64}, {"padded_vocab_size", 128}};
  EXPECT_EQ(model_shape_differences({{"num_layers", 2}}, flags, {}), "");
  EXPECT_EQ(model_shape_differences({{"num_layers", 3}, {"hidden_size", 64}}, flags, {}),
            "\n  num_layers: checkpoint 3, flags 2");
  EXPECT_EQ(model_shape_differences({{"padded_vocab_size", 256}}, flags, {"padded_vocab_size"}),
            "");
}

// Megatron-LM fills in kv_channels = hidden / heads, an import records 0 (implied), a flag may
// give it explicitly: one model.
TEST(ModelShapeDifferences, HeadSizeOfHiddenOverHeadsIsTheImpliedOne) {
  const nlohmann::json explicit_head = {
      {"hidden_size", 64}, {"num_attention_heads", 2}, {"kv_channels", 32}};
  const nlohmann::json implied_head = {
      {"hidden_size", 64}, {"num_attention_heads", 2}, {"kv_channels", 0}};
  EXPECT_EQ(model_shape_differences(implied_head, explicit_head, {}), "");
  EXPECT_EQ(model_shape_differences(explicit_head, implied_head, {}), "");
  const nlohmann::json other_head = {
      {"hidden_size", 64}, {"num_attention_heads", 2}, {"kv_channels", 16}};
  EXPECT_EQ(model_shape_differences(other_head, explicit_head, {}),
            "\n  kv_channels: checkpoint 16, flags 32");
}

}  // namespace
}  // namespace megatron
