// Megatron-LM's torch_dist checkpoints (checkpoint/torch_dcp.h,
// checkpoint/megatron_lm_torch_dist.h, convert/megatron_lm_checkpoint.h) against the files PyTorch
// wrote (tests/data/megatron_lm_gpt_tiny/torch_dist_*,
// tools/reference/megatron_torch_dist_checkpoint.py): the GPT-2 saved by PyTorch 1.13's own DCP
// writer from two tensor-parallel ranks, the Qwen2 with PyTorch 2.x's .metadata. Every global
// tensor assembled from the chunks is bit for bit the one the script built (CRC-32 of its bytes);
// the import holds the tensors the script computed from the HF weights; a forbidden global, a
// truncated or shifted data file, a missing one are refused naming the problem.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "../common/error_of.h"
#include "../common/megatron_lm_fixture.h"
#include "../common/source_dir.h"
#include "../common/temp_dir.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/megatron_lm_torch_dist.h"
#include "checkpoint/shards.h"
#include "checkpoint/torch_dcp.h"
#include "convert/convert_common.h"
#include "convert/gpt_checkpoint.h"
#include "convert/llama_checkpoint.h"
#include "convert/megatron_lm_checkpoint.h"
#include "core/crc32.h"
#include "core/durable_file.h"
#include "core/pickle_reader.h"
#include "core/pickle_writer.h"

namespace megatron {
namespace {

using testing::error_of;
using testing::expect_tensors_as_computed_by_pytorch;
using testing::full_model_tensors;
using testing::megatron_lm_fixture;

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::source_dir;
using testing::TempDir;

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

TEST(TorchDcp, GlobalTensorsAreBitForBitThoseThePyTorchScriptBuilt) {
  const nlohmann::json expected = read_json(megatron_lm_fixture("torch_dist_expected.json"));
  for (const auto& [name, iteration] :
       {std::pair<std::string, std::string>{"torch_dist_gpt2_tp2", "iter_0000012"},
        {"torch_dist_qwen2_tp2", "iter_0000005"},
        {"torch_dist_gpt2_adam_tp2", "iter_0000003"},
        {"torch_dist_gpt2_adam_dist_tp2", "iter_0000003"}}) {
    const DcpCheckpoint dcp(megatron_lm_fixture(name + "/" + iteration));
    const nlohmann::json& e = expected[name];
    EXPECT_EQ(dcp.tensors().size(), e.size()) << name;
    for (const auto& [key, want] : e.items()) {
      ASSERT_TRUE(dcp.tensors().count(key)) << name << " " << key;
      const Tensor t = dcp.read_tensor(key);
      EXPECT_EQ(dtype_name(t.dtype()), want["dtype"] == "float32" ? "f32" : "bf16") << key;
      EXPECT_EQ(t.shape(), want["shape"].get<Shape>()) << key;
      EXPECT_EQ(crc32(t.raw_data(), t.nbytes()), want["crc32"].get<uint32_t>()) << key;
    }
  }
}

TEST(TorchDcp, ChunksComeFromEveryRanksFile) {
  const DcpCheckpoint dcp(megatron_lm_fixture("torch_dist_gpt2_tp2/iter_0000012"));
  // Layer-stacked, column-parallel: 2 layers x 2 TP ranks, one file per rank.
  const DcpTensor& qkv = dcp.tensors().at("decoder.layers.self_attention.linear_qkv.weight");
  EXPECT_EQ(qkv.shape, (Shape{2, 96, 32}));
  ASSERT_EQ(qkv.chunks.size(), 4u);
  std::set<std::string> files;
  for (const DcpChunk& c : qkv.chunks) {
    EXPECT_EQ(c.sizes, (Shape{1, 48, 32}));
    files.insert(c.storage.file);
  }
  EXPECT_EQ(files, (std::set<std::string>{"__0_0.distcp", "__1_0.distcp"}));
  // Row-parallel: split along the input columns.
  const DcpTensor& proj = dcp.tensors().at("decoder.layers.self_attention.linear_proj.weight");
  EXPECT_EQ(proj.chunks.front().sizes, (Shape{1, 32, 16}));
  // Transformer Engine's extra states are byte items.
  EXPECT_EQ(dcp.byte_items().size(), 10u);
  const PyValue extra = dcp.load_byte_item("decoder.layers.mlp.linear_fc1._extra_state/shard_1_2");
  ASSERT_EQ(extra.as_sequence("").size(), 1u);  // torch.save([state]): an empty byte tensor
  EXPECT_EQ(extra.as_sequence("")[0].as_tensor("").data.shape(), (Shape{0}));
  // SwiGLU: two chunks per rank, gate rows then up rows of the global [gate; up].
  const DcpCheckpoint qwen(megatron_lm_fixture("torch_dist_qwen2_tp2/iter_0000005"));
  const DcpTensor& fc1 = qwen.tensors().at("decoder.layers.mlp.linear_fc1.weight");
  EXPECT_EQ(fc1.shape, (Shape{1, 64, 64}));
  std::set<Shape> offsets;
  for (const DcpChunk& c : fc1.chunks) offsets.insert(c.offsets);
  EXPECT_EQ(offsets, (std::set<Shape>{{0, 0, 0}, {0, 16, 0}, {0, 32, 0}, {0, 48, 0}}));
  EXPECT_TRUE(qwen.byte_items().count("common_state/shard_0_1"));
}

TEST(MegatronTorchDistImport, Gpt2FromPyTorch113sDcpLoadsTheTensorsPyTorchComputed) {
  for (int tp : {1, 2, 4}) {
    TempDir dir;
    import_megatron_lm_gpt(megatron_lm_fixture("torch_dist_gpt2_tp2"), -1, dir.file("ckpt"), tp, 0);
    nlohmann::json state;
    expect_tensors_as_computed_by_pytorch(full_model_tensors(dir.file("ckpt"), &state),
                                          "expected.json");
    EXPECT_EQ(state["iteration"], 0);
    EXPECT_EQ(state["converted_from"]["format"], "megatron-lm-torch_dist");
    EXPECT_EQ(state["converted_from"]["iteration"], 12);
    EXPECT_EQ(state["converted_from"]["tensor_model_parallel_size"], 2);
    EXPECT_EQ(state["model"]["vocab_size"], 96);
    EXPECT_EQ(state["model"]["padded_vocab_size"], padded_vocab_size(96, 64, tp));
    EXPECT_EQ(state["model"]["openai_gelu"], true);  // Megatron's fused bias-GeLU
  }
}

// RoPE, RMSNorm, SwiGLU (global [gate; up]), grouped-query attention, QKV biases, an untied
// output layer, bf16; PyTorch 2.x's .metadata and the common state inside the DCP checkpoint.
TEST(MegatronTorchDistImport, Qwen2WithPyTorch2sMetadataLoadsTheTensorsPyTorchComputed) {
  for (int tp : {1, 2}) {
    TempDir dir;
    import_megatron_lm_gpt(megatron_lm_fixture("torch_dist_qwen2_tp2"), -1, dir.file("ckpt"), tp,
                           0);
    nlohmann::json state;
    expect_tensors_as_computed_by_pytorch(full_model_tensors(dir.file("ckpt"), &state),
                                          "qwen2_expected.json");
    EXPECT_EQ(state["converted_from"]["iteration"], 5);
    EXPECT_EQ(state["model"]["swiglu"], true);
    EXPECT_EQ(state["model"]["num_query_groups"], 2);
  }
}

// Mixture-of-experts checkpoints PyTorch 1.13's DCP writer saved from two tensor-parallel ranks
// with Megatron-Core's keys (tools/reference/megatron_torch_dist_moe_checkpoint.py): Qwen2-MoE
// (a dense layer among MoE ones: one key per layer; a gated shared expert; the experts [E, ...],
// SwiGLU's [gate; up] per expert) and Qwen3-MoE (QK norms). Each import holds the weights
// megatron-cpp's HF import of the same HF directory holds — the same model, so the same loss —
// bit for bit, the vocabulary padding aside.
TEST(MegatronTorchDistImport, MoeCheckpointsHoldTheWeightsOfTheHfImport) {
  for (const std::string name : {"qwen2_moe", "qwen3_moe"}) {
    for (int tp : {1, 2}) {
      TempDir dir;
      import_megatron_lm_gpt(megatron_lm_fixture("torch_dist_" + name + "_tp2"), -1,
                             dir.file("ckpt"), tp, 0);
      import_hf_llama(source_dir() + "/tests/data/" + name + "_tiny/hf", dir.file("hf"), tp, 64);
      nlohmann::json state;
      const TensorMap ours = full_model_tensors(dir.file("ckpt"), &state);
      const TensorMap hf = full_model_tensors(dir.file("hf"));
      EXPECT_EQ(state["converted_from"]["iteration"], 7);
      EXPECT_EQ(state["model"]["num_experts"], 4);
      ASSERT_EQ(ours.size(), hf.size()) << name;
      for (const auto& [key, t] : hf) {
        ASSERT_TRUE(ours.count(key)) << name << " " << key;
        Tensor a = ours.at(key), b = t;
        if (key == "embedding.word_embeddings.weight" || key == "output_layer.weight") {
          a = a.slice(0, 0, 64);
          b = b.slice(0, 0, 64);
        }
        ASSERT_EQ(a.shape(), b.shape()) << name << " " << key;
        EXPECT_EQ(a.clone().to_vector<float>(), b.clone().to_vector<float>())
            << name << " tp " << tp << " " << key;
      }
    }
  }
}

// Multi-latent attention as Megatron-Core's MLA layer spec saves it (Transformer Engine's fused
// latent norms, a separate input norm) with its rope rows in Megatron's pairing (2j, 2j + 1):
// tools/reference/megatron_torch_dist_mla_checkpoint.py checked that Megatron's rope on those
// rows computes mla_reference.py's logits, then saved them with PyTorch 1.13's DCP from two TP
// ranks. The import gives mla_reference's weights in megatron-cpp's rows — those the MLA golden
// test runs — bit for bit.
TEST(MegatronTorchDistImport, MlaWithMegatronsRopePairingLoadsTheReferenceWeights) {
  for (int tp : {1, 2}) {
    TempDir dir;
    import_megatron_lm_gpt(megatron_lm_fixture("torch_dist_mla_tp2"), -1, dir.file("ckpt"), tp, 0);
    nlohmann::json state;
    expect_tensors_as_computed_by_pytorch(full_model_tensors(dir.file("ckpt"), &state),
                                          "torch_dist_mla_expected.json");
    EXPECT_EQ(state["model"]["multi_latent_attention"], true);
    EXPECT_EQ(state["model"]["qk_layernorm"], false);  // MLA's latent norms: not QK norms here
  }
}

// A copy of a fixture's iteration directory to spoil.
std::string copy_fixture(const TempDir& dir, const std::string& name) {
  fs::copy(megatron_lm_fixture(name), dir.file(name), fs::copy_options::recursive);
  return dir.file(name);
}

std::string iteration_dir(const std::string& ckpt) {
  return checkpoint_iteration_dir(ckpt, -1);
}

TEST(MegatronTorchDistImport, AForbiddenGlobalInTheMetadataIsRefusedByName) {
  TempDir dir;
  const std::string ckpt = copy_fixture(dir, "torch_dist_gpt2_tp2");
  // pickle.dumps of os.system("echo owned") as a reduce: what a malicious .metadata holds.
  const char evil[] =
      "\x80\x02\x63os\nsystem\nq\x00X\x0a\x00\x00\x00echo ownedq\x01\x85q\x02Rq\x03.";
  write_file_durably(iteration_dir(ckpt) + "/.metadata", std::string(evil, sizeof evil - 1));
  std::string e = error_of([&] { import_megatron_lm_gpt(ckpt, -1, dir.file("o"), 1, 0); });
  EXPECT_THAT(e, HasSubstr("names the global os.system"));
  EXPECT_THAT(e, HasSubstr("refusing to load it"));
  // A DCP class that is not metadata (its planner's SavePlan) is refused as well.
  const char plan[] =
      "\x80\x02\x63torch.distributed.checkpoint.planner\nSavePlan\nq\x00)\x81q\x01.";
  write_file_durably(iteration_dir(ckpt) + "/.metadata", std::string(plan, sizeof plan - 1));
  e = error_of([&] { import_megatron_lm_gpt(ckpt, -1, dir.file("o"), 1, 0); });
  EXPECT_THAT(e, HasSubstr("names the global torch.distributed.checkpoint.planner.SavePlan"));
  EXPECT_FALSE(fs::exists(dir.file("o")));
}

TEST(MegatronTorchDistImport, ATruncatedOrShiftedDataFileIsAClearError) {
  TempDir dir;
  const std::string ckpt = copy_fixture(dir, "torch_dist_gpt2_tp2");
  const std::string file = iteration_dir(ckpt) + "/__1_0.distcp";
  const std::string bytes = read_file(file, "test");
  write_file_durably(file, bytes.substr(0, bytes.size() / 2));
  std::string e = error_of([&] { import_megatron_lm_gpt(ckpt, -1, dir.file("o"), 1, 0); });
  EXPECT_THAT(e, HasSubstr("__1_0.distcp"));
  EXPECT_THAT(e, HasSubstr("(the file is truncated)"));
  // 64 bytes in front: every offset of .metadata now points 64 bytes early.
  write_file_durably(file, std::string(64, '\0') + bytes);
  e = error_of([&] { import_megatron_lm_gpt(ckpt, -1, dir.file("o"), 1, 0); });
  EXPECT_THAT(e, HasSubstr("__1_0.distcp bytes ["));
  EXPECT_THAT(e, HasSubstr("is not a valid torch.save zip archive"));
  EXPECT_THAT(e, HasSubstr("its .metadata places that chunk there, so the .distcp file is "
                           "truncated or was not written together with this .metadata"));
  fs::remove(file);
  e = error_of([&] { import_megatron_lm_gpt(ckpt, -1, dir.file("o"), 1, 0); });
  EXPECT_THAT(e, HasSubstr("names the data file '__1_0.distcp', which is missing"));
  EXPECT_FALSE(fs::exists(dir.file("o")));
}

// .metadata read, changed by `change` (given Metadata's fields) and written back
// (core/pickle_writer.h writes DCP's dataclasses as REDUCE + BUILD, which the reader reads as it
// reads Python's NEWOBJ + BUILD).
void rewrite_metadata(const std::string& it_dir, const std::function<void(PyDict&)>& change) {
  const std::string path = it_dir + "/.metadata";
  const PyValue root = read_pickle(read_file(path, "test"), path);
  change(root.as_object("").state->as_dict(""));
  write_file_durably(path, write_pickle(root));
}

// The same with the chunk list of the stacked QKV weight.
void rewrite_qkv_chunks(const std::string& it_dir,
                        const std::function<void(std::vector<PyValue>&)>& change) {
  rewrite_metadata(it_dir, [&](PyDict& metadata) {
    const PyValue& qkv = *metadata.find("state_dict_metadata")
                              ->as_dict("")
                              .find("decoder.layers.self_attention.linear_qkv.weight");
    change(qkv.as_object("").state->as_dict("").find("chunks")->as_sequence(""));
  });
}

TEST(TorchDcp, RawChunksOfTheSafetensorsSerializationAreRefusedByName) {
  TempDir dir;
  const std::string it = iteration_dir(copy_fixture(dir, "torch_dist_gpt2_tp2"));
  rewrite_metadata(it, [](PyDict& metadata) {
    for (auto& [index, info] : metadata.find("storage_data")->as_dict("").items)
      if (index.as_object("").state->as_dict("").find("fqn")->as_str("") ==
          "decoder.final_layernorm.weight")
        info.as_object("").state->as_dict("").set(PyValue::str("length"), PyValue::integer(32 * 4));
  });
  const std::string e =
      error_of([&] { DcpCheckpoint(it).read_tensor("decoder.final_layernorm.weight"); });
  EXPECT_THAT(e, HasSubstr("holds the chunk's raw elements (DCP's SAFETENSORS serialization)"));
}

TEST(TorchDcp, ChunksThatDoNotTileTheTensorAreRefused) {
  TempDir dir;
  const std::string it = iteration_dir(copy_fixture(dir, "torch_dist_gpt2_tp2"));
  rewrite_qkv_chunks(it, [](std::vector<PyValue>&) {});  // unchanged: still read
  EXPECT_EQ(DcpCheckpoint(it).tensors().size(), 16u);
  rewrite_qkv_chunks(it, [](std::vector<PyValue>& chunks) { chunks.pop_back(); });
  std::string e = error_of([&] { DcpCheckpoint{it}; });
  EXPECT_THAT(e, HasSubstr("entry 'decoder.layers.self_attention.linear_qkv.weight': its chunks "
                           "cover 4608 of the 6144 elements of [2, 96, 32]"));
  rewrite_qkv_chunks(it, [](std::vector<PyValue>& chunks) { chunks.push_back(chunks.front()); });
  e = error_of([&] { DcpCheckpoint{it}; });
  EXPECT_THAT(e, HasSubstr("overlap"));
}

TEST(MegatronTorchDistImport, AKeyNoGptModelHasIsRefusedByName) {
  TempDir dir;
  const std::string ckpt = copy_fixture(dir, "torch_dist_gpt2_tp2");
  // The stacked fc1 bias renamed as a key of Megatron-Core's BERT (not read yet).
  const std::string from = "decoder.layers.mlp.linear_fc1.bias";
  const std::string to = "lm_head.dense.bias";
  rewrite_metadata(iteration_dir(ckpt), [&](PyDict& metadata) {
    for (auto& [key, m] : metadata.find("state_dict_metadata")->as_dict("").items)
      if (key.as_str("") == from) key = PyValue::str(to);
    for (auto& [index, info] : metadata.find("storage_data")->as_dict("").items) {
      PyDict& fields = index.as_object("").state->as_dict("");
      if (fields.find("fqn")->as_str("") == from) fields.set(PyValue::str("fqn"), PyValue::str(to));
    }
  });
  const std::string e = error_of([&] { import_megatron_lm_gpt(ckpt, -1, dir.file("o"), 1, 0); });
  EXPECT_THAT(e, HasSubstr("holds 'lm_head.dense.bias' [2, 128], which no GPT-family model of "
                           "megatron-cpp has"));
}

// An optimizer tensor not of its parameter's global shape (as the distributed optimizer's
// flattened layouts save them) is refused by name: here two moments' keys swapped.
TEST(MegatronTorchDistImport, AnOptimizerTensorNotOfItsParametersShapeIsRefusedByName) {
  TempDir dir;
  const std::string ckpt = copy_fixture(dir, "torch_dist_gpt2_adam_tp2");
  const std::string a = "optimizer.state.exp_avg.embedding.position_embeddings.weight";
  const std::string b = "optimizer.state.exp_avg.embedding.word_embeddings.weight";
  rewrite_metadata(iteration_dir(ckpt), [&](PyDict& metadata) {
    auto swap = [&](PyValue& key) {
      const std::string k = key.as_str("");
      if (k == a || k == b) key = PyValue::str(k == a ? b : a);
    };
    for (auto& [key, m] : metadata.find("state_dict_metadata")->as_dict("").items) swap(key);
    for (auto& [index, info] : metadata.find("storage_data")->as_dict("").items) {
      PyDict& fields = index.as_object("").state->as_dict("");
      PyValue fqn = *fields.find("fqn");
      swap(fqn);
      fields.set(PyValue::str("fqn"), fqn);
    }
  });
  const std::string e = error_of([&] { import_megatron_lm_gpt(ckpt, -1, dir.file("o"), 1, 0); });
  EXPECT_THAT(e, HasSubstr("holds the optimizer tensor '" + a +
                           "' [128, 32], not of its "
                           "parameter's shape [32, 32]: only the non-distributed optimizer's state "
                           "is read"));
  EXPECT_FALSE(fs::exists(dir.file("o")));
}

TEST(MegatronTorchDistImport, OtherBackendsAndAMissingCommonStateAreRefused) {
  TempDir dir;
  const std::string ckpt = copy_fixture(dir, "torch_dist_gpt2_tp2");
  const std::string it = iteration_dir(ckpt);
  write_file_durably(it + "/metadata.json", R"({"sharded_backend": "zarr"})");
  std::string e = error_of([&] { import_megatron_lm_gpt(ckpt, -1, dir.file("o"), 1, 0); });
  EXPECT_THAT(e, HasSubstr("names the sharded backend 'zarr'"));
  write_file_durably(it + "/metadata.json", R"({"sharded_backend": "torch_dist"})");
  fs::remove(it + "/common.pt");
  e = error_of([&] { import_megatron_lm_gpt(ckpt, -1, dir.file("o"), 1, 0); });
  EXPECT_THAT(e, HasSubstr("has neither common.pt nor the DCP item 'common_state/shard_0_1'"));
  fs::remove(it + "/.metadata");
  e = error_of([&] { import_megatron_lm_gpt(ckpt, -1, dir.file("o"), 1, 0); });
  EXPECT_THAT(e, HasSubstr("has no .metadata file"));
}

}  // namespace
}  // namespace megatron
