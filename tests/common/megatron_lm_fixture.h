// The Megatron-LM checkpoint fixtures (tests/data/megatron_lm_gpt_tiny, written by
// tools/reference/megatron_lm_checkpoint.py and megatron_torch_dist_checkpoint.py) and the check
// that an import holds the tensors those scripts computed.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "checkpoint/layout.h"
#include "checkpoint/shards.h"
#include "convert/convert_common.h"
#include "convert/gpt_checkpoint.h"
#include "core/crc32.h"
#include "model/gpt_model.h"
#include "source_dir.h"

namespace megatron::testing {

inline std::string megatron_lm_fixture(const std::string& name) {
  return source_dir() + "/tests/data/megatron_lm_gpt_tiny/" + name;
}

// Every model tensor of megatron-cpp's checkpoint in `dir` (latest iteration), full; its
// state.json in `state` when given.
inline TensorMap full_model_tensors(const std::string& dir, nlohmann::json* state = nullptr) {
  CheckpointShardReader reader(checkpoint_iteration_dir(dir, -1));
  const nlohmann::json s = reader.state(0, 0);
  if (state) *state = s;
  const GptConfig c = gpt_config_from_checkpoint_state(s, dir);
  return read_full_model_tensors(reader, registered_parameter_store<GptModel>(c, 0, 1));
}

// `full` holds exactly the tensors of the fixture `expected_file` (CRC-32s the reference scripts
// computed from the HF weights in megatron-cpp's names), the vocabulary padding zero.
inline void expect_tensors_as_computed_by_pytorch(const TensorMap& full,
                                                  const std::string& expected_file) {
  std::ifstream in(megatron_lm_fixture(expected_file));
  const nlohmann::json expected = nlohmann::json::parse(in);
  const int64_t vocab = expected["vocab_size"];
  EXPECT_EQ(full.size(), expected["tensors"].size());
  for (const auto& [name, e] : expected["tensors"].items()) {
    ASSERT_TRUE(full.count(name)) << name;
    Tensor t = full.at(name);
    if (name == "embedding.word_embeddings.weight" || name == "output_layer.weight") {
      for (float v : t.slice(0, vocab, t.size(0)).clone().to_vector<float>()) EXPECT_EQ(v, 0.0f);
      t = t.slice(0, 0, vocab);
    }
    const Tensor c = t.clone();
    EXPECT_EQ(c.shape(), e["shape"].get<Shape>()) << name;
    EXPECT_EQ(crc32(c.raw_data(), c.nbytes()), e["crc32"].get<uint32_t>()) << name;
  }
}

}  // namespace megatron::testing
