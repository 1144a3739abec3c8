// The "did you mean" suggestion for a misspelled flag (cli/args/did_you_mean.h).
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include "cli/args/did_you_mean.h"

namespace megatron::cli {
namespace {

TEST(DidYouMean, EditDistance) {
  EXPECT_EQ(edit_distance("", ""), 0);
  EXPECT_EQ(edit_distance("abc", ""), 3);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3);  // two substitutions and an insertion
  EXPECT_EQ(edit_distance("--hiden-size", "--hidden-size"), 1);
  EXPECT_EQ(edit_distance("--hidden_size", "--hidden-size"), 1);
  EXPECT_EQ(edit_distance("--hdiden-size", "--hidden-size"), 1);  // neighbours swapped
  EXPECT_EQ(edit_distance("ca", "abc"), 3);  // a swap, then no edit of the swapped pair again
}

struct Flags {
  CLI::App app{"test"};
  int hidden = 0, heads = 0, layers = 0, tokens = 0;
  double lr = 0;
  Flags() {
    app.add_option("--hidden-size", hidden);
    app.add_option("--num-attention-heads", heads);
    app.add_option("--num-layers", layers);
    app.add_option("--lr", lr);
    // Flags in an option group count too (megatron bench registers its flags in groups).
    app.add_option_group("kernels")->add_option("--tokens", tokens);
  }
};

TEST(DidYouMean, NearestFlag) {
  Flags f;
  EXPECT_EQ(nearest_flag(f.app, "--hiden-size"), "--hidden-size");
  EXPECT_EQ(nearest_flag(f.app, "--hidden_size"), "--hidden-size");
  EXPECT_EQ(nearest_flag(f.app, "--hidden-size=64"), "--hidden-size");
  EXPECT_EQ(nearest_flag(f.app, "--num-attention-head"), "--num-attention-heads");
  EXPECT_EQ(nearest_flag(f.app, "--num_attention_heads"), "--num-attention-heads");
  EXPECT_EQ(nearest_flag(f.app, "--num-layer"), "--num-layers");
  EXPECT_EQ(nearest_flag(f.app, "--token"), "--tokens");
  EXPECT_EQ(nearest_flag(f.app, "--lrr"), "--lr");
  // Too far from every flag, or not a flag at all: no suggestion.
  EXPECT_EQ(nearest_flag(f.app, "--sequence-parallel"), "");
  EXPECT_EQ(nearest_flag(f.app, "--fp16"), "");
  EXPECT_EQ(nearest_flag(f.app, "hidden-size"), "");
  EXPECT_EQ(nearest_flag(f.app, "64"), "");
}

}  // namespace
}  // namespace megatron::cli
