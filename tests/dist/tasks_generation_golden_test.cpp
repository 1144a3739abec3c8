// Greedy generation against PyTorch at TP = world size (1, 2, 4): the tiny HF GPT-2 fixture
// (tests/data/gpt2_tiny) continued greedily with the KV cache gives the tokens a plain-torch
// float64 loop that recomputes the whole sequence every step chose
// (tools/reference/gpt2_reference.py, greedy.safetensors), batched and alone.
#include <gtest/gtest.h>

#include "../common/gpt2_golden.h"
#include "mpi_test_util.h"
#include "tasks/generation.h"

namespace megatron {
namespace {

using namespace megatron::testing;

TEST(GenerationGolden, GreedyContinuationEqualsPytorch) {
  const ParallelState ps = ParallelState::create(test::world(), test::world_size(), 1);
  Gpt2Golden g = load_gpt2_golden(128);
  Gpt2FromFixture m(g, ps);
  SafetensorsReader greedy(gpt2_fixture_dir() + "/greedy.safetensors");
  const int64_t prompt_lengths[] = {5, 9}, new_tokens = 12;

  std::vector<std::vector<int32_t>> prompts, expected;
  for (int row = 0; row < 2; ++row) {
    expected.push_back(greedy.get("greedy." + std::to_string(row)).to_vector<int32_t>());
    prompts.emplace_back(expected.back().begin(), expected.back().begin() + prompt_lengths[row]);
    ASSERT_EQ(int64_t(expected.back().size()), prompt_lengths[row] + new_tokens);
  }
  GenerationOptions o;
  o.tokens_to_generate = new_tokens;
  o.sampling.top_k = 1;  // greedy
  o.stop_tokens = {};    // the reference never stops early
  const GenerationOutput batch = generate_tokens(*m.model, prompts, o);
  std::vector<GenerationOutput> alone;
  for (const auto& p : prompts) alone.push_back(generate_tokens(*m.model, {p}, o));
  for (int row = 0; row < 2; ++row) {
    EXPECT_EQ(batch.tokens[size_t(row)], expected[size_t(row)]) << "row " << row;
    EXPECT_EQ(alone[size_t(row)].tokens[0], expected[size_t(row)]) << "row " << row << " alone";
  }
}

}  // namespace
}  // namespace megatron
