// BERT in Megatron-LM's torch format (checkpoint/megatron_lm_torch.h,
// convert/megatron_lm_checkpoint.h) against the files PyTorch 1.13 wrote
// (tests/data/megatron_lm_bert_tiny, tools/reference/megatron_lm_bert_checkpoint.py): every
// tensor and Adam moment an import holds is the one the script computed (its CRC-32s), from the
// legacy TP 2 x PP 2 files and the Megatron-Core TP 1 one, at any target TP; an export's rank
// files hold the fixture's model entries; a post-LayerNorm BERT has no Megatron-LM counterpart.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "../common/error_of.h"
#include "../common/source_dir.h"
#include "../common/temp_dir.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/layout.h"
#include "checkpoint/shards.h"
#include "convert/bert_checkpoint.h"
#include "convert/convert_common.h"
#include "convert/megatron_lm_checkpoint.h"
#include "core/crc32.h"
#include "core/torch_file.h"
#include "model/bert_model.h"
#include "model/gpt_model.h"

namespace megatron {
namespace {

using testing::error_of;
using testing::source_dir;
using testing::TempDir;

std::string bert_fixture(const std::string& name) {
  return source_dir() + "/tests/data/megatron_lm_bert_tiny/" + name;
}

// The model tensors (`buffer` "": the weights, else that optimizer buffer) of megatron-cpp's BERT
// checkpoint in `dir`, full; its state.json in `state`.
TensorMap full_bert_tensors(const std::string& dir, const std::string& buffer,
                            nlohmann::json* state = nullptr) {
  CheckpointShardReader reader(checkpoint_iteration_dir(dir, -1));
  const nlohmann::json s = reader.state(0, 0);
  if (state) *state = s;
  ParameterStore store =
      registered_parameter_store<BertModel>(bert_config_from_checkpoint_state(s, dir), 0, 1);
  std::map<std::string, Tensor> flat;
  if (!buffer.empty()) flat[buffer] = Tensor::zeros({store.flat_values().numel()}, DType::F32);
  read_parameters(reader, store, buffer.empty() ? nullptr : &flat);
  TensorMap full;
  for (const Parameter& p : store.params())
    full[p.spec.name] =
        buffer.empty() ? p.value.clone()
                       : flat[buffer]
                             .slice(0, p.flat_offset, p.flat_offset + shape_numel(p.local_shape))
                             .view(p.local_shape)
                             .clone();
  return full;
}

// `full` holds exactly the tensors of `expected` (CRC-32s the script computed in megatron-cpp's
// names), the vocabulary padding zero.
void expect_as_computed(const TensorMap& full, const nlohmann::json& expected) {
  const int64_t vocab = expected["vocab_size"];
  EXPECT_EQ(full.size(), expected["tensors"].size());
  for (const auto& [name, e] : expected["tensors"].items()) {
    ASSERT_TRUE(full.count(name)) << name;
    Tensor t = full.at(name);
    if (name == "embedding.word_embeddings.weight" || name == "lm_head.bias") {
      for (float v : t.slice(0, vocab, t.size(0)).clone().to_vector<float>()) EXPECT_EQ(v, 0.0f);
      t = t.slice(0, 0, vocab);
    }
    const Tensor c = t.clone();
    EXPECT_EQ(c.shape(), e["shape"].get<Shape>()) << name;
    EXPECT_EQ(crc32(c.raw_data(), c.nbytes()), e["crc32"].get<uint32_t>()) << name;
  }
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

TEST(MegatronLmBertImport, LegacyTp2Pp2LoadsTheTensorsAndAdamStatePyTorchComputed) {
  const nlohmann::json expected = read_json(bert_fixture("expected.json"));
  const nlohmann::json optimizer = read_json(bert_fixture("optimizer_expected.json"));
  for (int tp : {1, 2}) {
    TempDir dir;
    import_megatron_lm_bert(bert_fixture("legacy_tp2_pp2"), -1, dir.file("ckpt"), tp, 100);
    nlohmann::json state;
    expect_as_computed(full_bert_tensors(dir.file("ckpt"), "", &state), expected);
    for (const char* buffer : {"exp_avg", "exp_avg_sq"})
      expect_as_computed(full_bert_tensors(dir.file("ckpt"), buffer), optimizer[buffer]);
    EXPECT_EQ(state["iteration"], 10);
    EXPECT_EQ(state["optimizer"]["steps"], 10);
    EXPECT_EQ(state["consumed_train_samples"], 40);
    EXPECT_EQ(state["scheduler"]["num_steps"], 40);
    EXPECT_EQ(state["model"]["vocab_size"], 100);
    EXPECT_EQ(state["model"]["padded_vocab_size"], padded_vocab_size(100, 64, tp));
    EXPECT_EQ(state["model"]["layernorm_order"], "pre");
    EXPECT_EQ(state["model"]["binary_head"], true);
    EXPECT_EQ(state["model"]["num_tokentypes"], 2);
    EXPECT_EQ(state["model"]["openai_gelu"], false);  // no fused bias-GeLU: erf
    EXPECT_EQ(state["converted_from"]["format"], "megatron-lm-torch");
  }
}

TEST(MegatronLmBertImport, MegatronCoreNamesLoadTheSameTensors) {
  TempDir dir;
  import_megatron_lm_bert(bert_fixture("mcore_tp1"), -1, dir.file("ckpt"), 2, 100);
  nlohmann::json state;
  expect_as_computed(full_bert_tensors(dir.file("ckpt"), "", &state),
                     read_json(bert_fixture("expected.json")));
  EXPECT_EQ(state["iteration"], 0);  // --no-save-optim: weights only
}

TEST(MegatronLmBertExport, WritesTheFixturesModelEntriesAndRoundTrips) {
  TempDir dir;
  import_megatron_lm_bert(bert_fixture("legacy_tp2_pp2"), -1, dir.file("ours"), 1, 100);
  export_megatron_lm_bert(dir.file("ours"), -1, dir.file("out"), 2, 2, MegatronLmNaming::kLegacy);
  for (const char* rank : {"mp_rank_00_000", "mp_rank_01_001"}) {
    const std::string rel = std::string("/iter_0000010/") + rank + "/model_optim_rng.pt";
    const PyValue ours = torch_load(dir.file("out") + rel);
    const PyValue theirs = torch_load(bert_fixture("legacy_tp2_pp2") + rel);
    const PyDict& a = ours.as_dict("").find("model")->as_dict("");
    const PyDict& b = theirs.as_dict("").find("model")->as_dict("");
    ASSERT_EQ(a.items.size(), b.items.size()) << rank;
    for (size_t i = 0; i < a.items.size(); ++i)
      EXPECT_EQ(a.items[i].first.as_str(""), b.items[i].first.as_str("")) << rank;
    EXPECT_TRUE(ours.as_dict("").find("optimizer")) << rank;
    EXPECT_TRUE(ours.as_dict("").find("opt_param_scheduler")) << rank;
  }
  import_megatron_lm_bert(dir.file("out"), -1, dir.file("back"), 1, 100);
  const TensorMap x = full_bert_tensors(dir.file("ours"), ""),
                  y = full_bert_tensors(dir.file("back"), "");
  for (const auto& [name, t] : x)
    EXPECT_EQ(crc32(t.raw_data(), t.nbytes()), crc32(y.at(name).raw_data(), y.at(name).nbytes()))
        << name;
}

TEST(MegatronLmBertExport, RefusesAPostLayerNormBertAndTheOtherFamily) {
  TempDir dir;
  import_hf_bert(source_dir() + "/tests/data/bert_tiny/hf", dir.file("post_ln"), 1, 64);
  EXPECT_NE(error_of([&] {
              export_megatron_lm_bert(dir.file("post_ln"), -1, dir.file("o"), 1, 1,
                                      MegatronLmNaming::kLegacy);
            }).find("Megatron-LM's BERT is pre-LayerNorm"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              export_megatron_lm_gpt(dir.file("post_ln"), -1, dir.file("o"), 1, 1,
                                     MegatronLmNaming::kLegacy);
            }).find("is a BERT checkpoint: export it with --model-type bert"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              import_megatron_lm_gpt(bert_fixture("legacy_tp2_pp2"), -1, dir.file("o"), 1, 100);
            }).find("holds a BERT model: convert it with --model-type bert"),
            std::string::npos);
}

}  // namespace
}  // namespace megatron
