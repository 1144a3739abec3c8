// Megatron-LM's torch-format checkpoints (checkpoint/megatron_lm_torch.h,
// convert/megatron_lm_checkpoint.h) against the files PyTorch 1.13 wrote
// (tests/data/megatron_lm_gpt_tiny, tools/reference/megatron_lm_checkpoint.py): every tensor
// loaded is the one the script computed from the HF weights (its CRC-32), the import equals
// the HF import of the same model, and what the exporter writes has exactly the entries,
// dtypes, shapes and values of PyTorch's files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../common/error_of.h"
#include "../common/megatron_lm_fixture.h"
#include "../common/source_dir.h"
#include "../common/temp_dir.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/layout.h"
#include "checkpoint/shards.h"
#include "convert/convert_common.h"
#include "convert/gpt_checkpoint.h"
#include "convert/megatron_lm_checkpoint.h"
#include "core/crc32.h"
#include "core/torch_file.h"

namespace megatron {
namespace {

using testing::error_of;
using testing::expect_tensors_as_computed_by_pytorch;
using testing::full_model_tensors;
using testing::megatron_lm_fixture;

namespace fs = std::filesystem;
using testing::source_dir;
using testing::TempDir;

TEST(MegatronLmImport, LegacyTp2Pp2LoadsTheTensorsPyTorchComputed) {
  for (int tp : {1, 2, 4}) {
    TempDir dir;
    import_megatron_lm_gpt(megatron_lm_fixture("legacy_tp2_pp2"), -1, dir.file("ckpt"), tp, 0);
    nlohmann::json state;
    const TensorMap full = full_model_tensors(dir.file("ckpt"), &state);
    expect_tensors_as_computed_by_pytorch(full, "expected.json");
    EXPECT_EQ(state["iteration"],
              10);  // with its optimizer state (convert_megatron_lm_optimizer_test)
    EXPECT_EQ(state["converted_from"]["format"], "megatron-lm-torch");
    EXPECT_EQ(state["converted_from"]["iteration"], 10);
    EXPECT_EQ(state["model"]["vocab_size"], 96);
    EXPECT_EQ(state["model"]["padded_vocab_size"], padded_vocab_size(96, 64, tp));
    // Megatron's fused bias-GeLU computed the tanh form.
    EXPECT_EQ(state["model"]["openai_gelu"], true);
    EXPECT_EQ(int(list_rank_dirs(dir.file("ckpt/iter_0000010")).size()), tp);
  }
}

TEST(MegatronLmImport, MegatronCoreNamesLoadTheSameTensors) {
  TempDir dir;
  import_megatron_lm_gpt(megatron_lm_fixture("mcore_tp1"), -1, dir.file("ckpt"), 2, 0);
  nlohmann::json state;
  expect_tensors_as_computed_by_pytorch(full_model_tensors(dir.file("ckpt"), &state),
                                        "expected.json");
  EXPECT_EQ(state["converted_from"]["iteration"], 7);
}

// Llama-family options through Megatron-Core's names from a --bf16 run: RoPE, RMSNorm, SwiGLU
// ([gate_r; up_r] per rank), grouped-query attention (one query group per rank), QKV biases
// without linear biases, an untied output layer.
TEST(MegatronLmImport, Qwen2FromABf16RunAtTp2) {
  for (int tp : {1, 2}) {
    TempDir dir;
    import_megatron_lm_gpt(megatron_lm_fixture("qwen2_core_tp2"), -1, dir.file("ckpt"), tp, 0);
    nlohmann::json state;
    expect_tensors_as_computed_by_pytorch(full_model_tensors(dir.file("ckpt"), &state),
                                          "qwen2_expected.json");
    EXPECT_EQ(state["model"]["swiglu"], true);
    EXPECT_EQ(state["model"]["normalization"], "RMSNorm");
    EXPECT_EQ(state["model"]["num_query_groups"], 2);
    EXPECT_EQ(state["model"]["rotary_base"], 1000000.0);
    // Out again at TP 2 in Megatron-Core's names: PyTorch's entries, values as f32.
    export_megatron_lm_gpt(dir.file("ckpt"), -1, dir.file("out"), 2, 1, MegatronLmNaming::kCore);
    import_megatron_lm_gpt(dir.file("out"), -1, dir.file("back"), 1, 0);
    expect_tensors_as_computed_by_pytorch(full_model_tensors(dir.file("back")),
                                          "qwen2_expected.json");
  }
}

TEST(MegatronLmImport, EqualsTheHfImportOfTheSameModel) {
  TempDir dir;
  import_megatron_lm_gpt(megatron_lm_fixture("legacy_tp2_pp2"), -1, dir.file("mlm"), 1, 0);
  import_hf_gpt2(source_dir() + "/tests/data/gpt2_tiny/hf", dir.file("hf"), 1, 64);
  nlohmann::json mlm_state, hf_state;
  const TensorMap a = full_model_tensors(dir.file("mlm"), &mlm_state);
  const TensorMap b = full_model_tensors(dir.file("hf"), &hf_state);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    const Tensor x = t.clone(), y = b.at(name).clone();
    ASSERT_EQ(x.shape(), y.shape()) << name;
    EXPECT_EQ(std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()), 0) << name;
  }
  EXPECT_EQ(mlm_state["model"], hf_state["model"]);
}

// Tensors of a saved "model" entry by path ("language_model/encoder/layers.0.input_norm.weight"),
// and the other entries' kinds.
void flatten(const PyValue& v, const std::string& path, std::map<std::string, PyValue>& out) {
  if (v.kind() == PyValue::Kind::kDict) {
    out[path + "#kind"] = PyValue::str(v.describe());
    for (const auto& [k, item] : v.as_dict("").items)
      flatten(item, path.empty() ? k.as_str("") : path + "/" + k.as_str(""), out);
  } else {
    out[path] = v;
  }
}

// The exported rank files have PyTorch's entries (names, kinds, dtypes, shapes) and values;
// the padding rows of the word embedding, random in Megatron's files, are zero in ours.
void expect_same_model_entries(const std::string& ours_dir, const std::string& pytorch_dir,
                               int64_t vocab) {
  // mp_rank_* name -> its file, in the checkpoint's (only) iteration directory.
  const auto list = [](const std::string& d) {
    std::map<std::string, std::string> files;
    for (const auto& e : fs::recursive_directory_iterator(d))
      if (e.path().filename() == kMegatronLmTorchFileName)
        files[e.path().parent_path().filename().string()] = e.path().string();
    return files;
  };
  const auto ours_files = list(ours_dir), pytorch_files = list(pytorch_dir);
  ASSERT_EQ(ours_files.size(), pytorch_files.size());
  for (const auto& [file, ours_path] : ours_files) {
    ASSERT_TRUE(pytorch_files.count(file)) << file;
    const PyValue ours = torch_load(ours_path);
    const PyValue theirs = torch_load(pytorch_files.at(file));
    std::map<std::string, PyValue> a, b;
    flatten(*ours.as_dict("").find("model"), "", a);
    flatten(*theirs.as_dict("").find("model"), "", b);
    ASSERT_EQ(a.size(), b.size()) << file;
    for (const auto& [path, x] : a) {
      ASSERT_TRUE(b.count(path)) << file << ": " << path;
      const PyValue& y = b.at(path);
      if (path.ends_with("._extra_state")) continue;  // ours None; Transformer Engine's vary
      ASSERT_EQ(x.kind(), y.kind()) << file << ": " << path;
      if (x.kind() == PyValue::Kind::kStr) {
        EXPECT_EQ(x.as_str(""), y.as_str("")) << file << ": " << path;
        continue;
      }
      if (x.kind() != PyValue::Kind::kTensor) continue;
      Tensor tx = x.as_tensor("").data, ty = y.as_tensor("").data;
      ASSERT_EQ(tx.dtype(), ty.dtype()) << path;
      ASSERT_EQ(tx.shape(), ty.shape()) << file << ": " << path;
      if (path.find("word_embeddings") != std::string::npos ||
          path == "word_embeddings_for_head/weight" ||
          (path == "output_layer.weight" && tx.size(0) > vocab)) {
        // Rows past the real vocabulary (this rank's slice starts at its TP rank's rows).
        const int64_t rows = tx.size(0);
        const int64_t tp_rank = file.find("mp_rank_01") != std::string::npos ? 1 : 0;
        const int64_t real = std::clamp<int64_t>(vocab - tp_rank * rows, 0, rows);
        tx = tx.slice(0, 0, real);
        ty = ty.slice(0, 0, real);
      }
      const Tensor cx = tx.clone(), cy = ty.clone();
      EXPECT_EQ(std::memcmp(cx.raw_data(), cy.raw_data(), cx.nbytes()), 0) << file << ": " << path;
    }
    const PyDict& root = ours.as_dict("");
    EXPECT_EQ(root.find("checkpoint_version")->as_float(""), 3.0);
    EXPECT_EQ(root.find("iteration")->as_int(""), 10);  // the import's
    const PyDict& args = root.find("args")->as_dict("");
    EXPECT_EQ(args.kind, PyDict::Kind::kNamespace);
    for (const char* key : {"num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size",
                            "max_position_embeddings", "padded_vocab_size",
                            "tensor_model_parallel_size", "pipeline_model_parallel_size"})
      EXPECT_EQ(args.find(key)->as_int(key),
                theirs.as_dict("").find("args")->as_dict("").find(key)->as_int(key))
          << key;
    EXPECT_EQ(args.find("params_dtype")->as_global("").qualified(), "torch.float32");
  }
}

TEST(MegatronLmExport, WritesTheEntriesOfPyTorchsFilesInBothNamings) {
  TempDir dir;
  import_megatron_lm_gpt(megatron_lm_fixture("legacy_tp2_pp2"), -1, dir.file("ours"), 1, 0);
  export_megatron_lm_gpt(dir.file("ours"), -1, dir.file("legacy"), 2, 2, MegatronLmNaming::kLegacy);
  expect_same_model_entries(dir.file("legacy"), megatron_lm_fixture("legacy_tp2_pp2"), 96);
  export_megatron_lm_gpt(dir.file("ours"), -1, dir.file("core"), 1, 1, MegatronLmNaming::kCore);
  expect_same_model_entries(dir.file("core"), megatron_lm_fixture("mcore_tp1"), 96);
}

TEST(MegatronLmExport, RoundTripsAtAnyLayoutAndIsDeterministic) {
  TempDir dir;
  import_megatron_lm_gpt(megatron_lm_fixture("mcore_tp1"), -1, dir.file("ours"), 2, 0);
  const TensorMap original = full_model_tensors(dir.file("ours"));
  struct Layout {
    int tp, pp;
    MegatronLmNaming naming;
  };
  for (const Layout& l :
       {Layout{4, 1, MegatronLmNaming::kLegacy}, Layout{1, 2, MegatronLmNaming::kCore},
        Layout{2, 2, MegatronLmNaming::kCore}}) {
    const std::string out = dir.file("mlm_" + std::to_string(l.tp) + "_" + std::to_string(l.pp));
    export_megatron_lm_gpt(dir.file("ours"), -1, out, l.tp, l.pp, l.naming);
    import_megatron_lm_gpt(out, -1, out + "_back", 1, 96);
    const TensorMap back = full_model_tensors(out + "_back");
    for (const auto& [name, t] : original) {
      const Tensor x = t.clone(), y = back.at(name).clone();
      EXPECT_EQ(std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()), 0) << name;
    }
  }
  // The same checkpoint exports to the same bytes.
  export_megatron_lm_gpt(dir.file("ours"), -1, dir.file("again"), 1, 2, MegatronLmNaming::kCore);
  for (const auto& e : fs::recursive_directory_iterator(dir.file("again"))) {
    if (!e.is_regular_file()) continue;
    const std::string rel = fs::relative(e.path(), dir.file("again")).string();
    std::ifstream a(e.path(), std::ios::binary), b(dir.file("mlm_1_2/" + rel), std::ios::binary);
    std::stringstream sa, sb;
    sa << a.rdbuf();
    sb << b.rdbuf();
    EXPECT_TRUE(sa.str() == sb.str()) << rel;
  }
}

// A copy of the legacy fixture to break.
std::string copy_legacy(const TempDir& dir) {
  fs::copy(megatron_lm_fixture("legacy_tp2_pp2"), dir.file("mlm"), fs::copy_options::recursive);
  return dir.file("mlm");
}

std::string rank_file(const std::string& root, const char* rank) {
  return root + "/iter_0000010/" + rank + "/model_optim_rng.pt";
}

TEST(MegatronLmImport, BadCheckpointsAreRefusedNamingTheProblem) {
  {  // A missing rank directory.
    TempDir dir;
    const std::string mlm = copy_legacy(dir);
    fs::remove_all(mlm + "/iter_0000010/mp_rank_01_001");
    const std::string e = error_of([&] { import_megatron_lm_gpt(mlm, -1, dir.file("o"), 1, 0); });
    EXPECT_NE(e.find("expected a complete grid"), std::string::npos) << e;
    EXPECT_FALSE(fs::exists(dir.file("o")));
  }
  {  // A tensor of the wrong shape, and one the model does not have.
    TempDir dir;
    const std::string mlm = copy_legacy(dir);
    const std::string file = rank_file(mlm, "mp_rank_01_000");
    PyValue root = torch_load(file);
    PyDict& enc = root.as_dict("")
                      .find("model")
                      ->as_dict("")
                      .find("language_model")
                      ->as_dict("")
                      .find("encoder")
                      ->as_dict("");
    enc.set(PyValue::str("layers.0.mlp.dense_4h_to_h.weight"),
            PyValue::tensor(Tensor::zeros({32, 7}, DType::F32)));
    enc.set(PyValue::str("layers.0.mlp.router.weight"),
            PyValue::tensor(Tensor::zeros({4, 32}, DType::F32)));
    fs::remove(file);
    torch_save(file, root);
    const std::string e = error_of([&] { import_megatron_lm_gpt(mlm, -1, dir.file("o"), 1, 0); });
    EXPECT_NE(e.find("layers.0.mlp.router.weight"), std::string::npos) << e;
    enc.items.pop_back();
    fs::remove(file);
    torch_save(file, root);
    const std::string e2 = error_of([&] { import_megatron_lm_gpt(mlm, -1, dir.file("o"), 1, 0); });
    EXPECT_NE(
        e2.find("layers.0.mlp.dense_4h_to_h.weight is [32, 7], the model's slice is [32, 64]"),
        std::string::npos)
        << e2;
  }
  {  // Rank files of different saves; an unknown vocabulary; a BERT model.
    TempDir dir;
    const std::string mlm = copy_legacy(dir);
    const std::string file = rank_file(mlm, "mp_rank_00_001");
    PyValue root = torch_load(file);
    root.as_dict("").set(PyValue::str("iteration"), PyValue::integer(11));
    fs::remove(file);
    torch_save(file, root);
    std::string e = error_of([&] { import_megatron_lm_gpt(mlm, -1, dir.file("o"), 1, 0); });
    EXPECT_NE(e.find("the rank files come from different saves"), std::string::npos) << e;
    for (const char* rank :
         {"mp_rank_00_000", "mp_rank_01_000", "mp_rank_00_001", "mp_rank_01_001"}) {
      const std::string f = rank_file(mlm, rank);
      PyValue r = torch_load(f);
      r.as_dict("").set(PyValue::str("iteration"), PyValue::integer(10));
      PyDict& args = r.as_dict("").find("args")->as_dict("");
      args.set(PyValue::str("tokenizer_type"), PyValue::str("NullTokenizer"));
      args.set(PyValue::str("vocab_size"), PyValue());
      fs::remove(f);
      torch_save(f, r);
    }
    e = error_of([&] { import_megatron_lm_gpt(mlm, -1, dir.file("o"), 1, 0); });
    EXPECT_NE(e.find("does not record its real vocabulary size"), std::string::npos) << e;
    e = error_of([&] { import_megatron_lm_gpt(mlm, -1, dir.file("o"), 1, 50257); });
    EXPECT_NE(e.find("the real vocabulary size 50257 (--vocab-size) is not within "
                     "args.padded_vocab_size 128"),
              std::string::npos)
        << e;
    import_megatron_lm_gpt(mlm, -1, dir.file("o"), 1, 96);  // with it, it converts
  }
  {  // A megatron-cpp checkpoint is not Megatron-LM's, and the other way round.
    TempDir dir;
    import_megatron_lm_gpt(megatron_lm_fixture("mcore_tp1"), -1, dir.file("ours"), 1, 0);
    std::string e =
        error_of([&] { import_megatron_lm_gpt(dir.file("ours"), -1, dir.file("o"), 1, 0); });
    EXPECT_NE(e.find("it is megatron-cpp's own"), std::string::npos) << e;
    e = error_of([&] { CheckpointShardReader r(megatron_lm_fixture("mcore_tp1/iter_0000007")); });
    EXPECT_NE(e.find("is Megatron-LM's torch format"), std::string::npos) << e;
    EXPECT_NE(e.find("--from megatron-lm"), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace megatron
