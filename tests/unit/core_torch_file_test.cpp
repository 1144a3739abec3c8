// PyTorch's checkpoint container and pickles (core/torch_zip.h, core/pickle_reader.h,
// core/pickle_writer.h, core/torch_file.h), against files PyTorch 1.13 wrote
// (tests/data/megatron_lm_gpt_tiny, tools/reference/megatron_lm_checkpoint.py) and a file this
// writer wrote that PyTorch loaded (tests/data/torch_file, tools/reference/torch_file_check.py).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "../common/error_of.h"
#include "../common/source_dir.h"
#include "../common/temp_dir.h"
#include "core/crc32.h"
#include "core/pickle_reader.h"
#include "core/pickle_writer.h"
#include "core/torch_file.h"
#include "core/torch_zip.h"

namespace megatron {
namespace {

using testing::error_of;

using testing::source_dir;
using testing::TempDir;

// A string literal's bytes, NULs included.
template <size_t N>
std::string raw(const char (&s)[N]) {
  return std::string(s, N - 1);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> fixture_files() {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(
           source_dir() + "/tests/data/megatron_lm_gpt_tiny"))
    if (e.path().filename() == "model_optim_rng.pt") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

std::string legacy_rank(int tp, int pp) {
  return source_dir() + "/tests/data/megatron_lm_gpt_tiny/legacy_tp2_pp2/iter_0000010/mp_rank_0" +
         std::to_string(tp) + "_00" + std::to_string(pp) + "/model_optim_rng.pt";
}

// Structural equality (tensors by dtype, shape and bytes).
bool same(const PyValue& a, const PyValue& b) {
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case PyValue::Kind::kList:
    case PyValue::Kind::kTuple: {
      const auto &x = a.as_sequence(""), &y = b.as_sequence("");
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!same(x[i], y[i])) return false;
      return true;
    }
    case PyValue::Kind::kDict: {
      const PyDict &x = a.as_dict(""), &y = b.as_dict("");
      if (x.kind != y.kind || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!same(x.items[i].first, y.items[i].first) ||
            !same(x.items[i].second, y.items[i].second))
          return false;
      return true;
    }
    case PyValue::Kind::kObject: {
      const PyObject &x = a.as_object(""), &y = b.as_object("");
      if (!(x.type == y.type) || x.args.size() != y.args.size() || bool(x.state) != bool(y.state))
        return false;
      for (size_t i = 0; i < x.args.size(); ++i)
        if (!same(x.args[i], y.args[i])) return false;
      return !x.state || same(*x.state, *y.state);
    }
    case PyValue::Kind::kTensor: {
      const PyTensor &x = a.as_tensor(""), &y = b.as_tensor("");
      if (x.dtype != y.dtype || x.shape != y.shape || x.requires_grad != y.requires_grad)
        return false;
      const Tensor cx = x.data.clone(), cy = y.data.clone();
      return std::memcmp(cx.raw_data(), cy.raw_data(), cx.nbytes()) == 0;
    }
    case PyValue::Kind::kFloat:
      return a.as_float("") == b.as_float("");
    default:
      return a.key_equals(b);
  }
}

// ---- the zip container -----------------------------------------------------------------------

TEST(TorchZip, RewritingPyTorchsRecordsGivesItsExactBytes) {
  const auto files = fixture_files();
  // legacy_tp2_pp2 4, mcore_tp1 1, qwen2_core_tp2 2, legacy_bf16_tp2 2, distrib_tp2_pp2 4
  ASSERT_EQ(files.size(), 13u);
  TempDir dir;
  for (const std::string& path : files) {
    TorchZipReader in(path);
    EXPECT_EQ(in.archive_name(), "model_optim_rng");
    TorchZipWriter out(dir.file("model_optim_rng.pt"), in.archive_name());
    for (const std::string& name : in.record_names()) {
      const std::string_view bytes = in.record(name);
      // PyTorch aligns every record's data to 64 bytes in the file.
      EXPECT_EQ((bytes.data() - reinterpret_cast<const char*>(in.writable_record(name))), 0);
      out.add_record(name, bytes.data(), bytes.size());
    }
    out.finish();
    EXPECT_EQ(slurp(dir.file("model_optim_rng.pt")), slurp(path)) << path;
  }
}

TEST(TorchZip, RecordsAre64ByteAligned) {
  TorchZipReader in(legacy_rank(0, 0));
  const auto* base = in.writable_record("data.pkl") - 64;  // data.pkl starts at byte 64
  for (const std::string& name : in.record_names())
    EXPECT_EQ((in.writable_record(name) - base) % 64, 0) << name;
  EXPECT_EQ(in.record("version"), "3\n");
}

TEST(TorchZip, CorruptAndTruncatedFilesAreRefused) {
  TempDir dir;
  const std::string good = slurp(legacy_rank(1, 1));
  // Truncated anywhere: the end records are gone.
  for (size_t keep : {size_t(0), size_t(10), good.size() / 2, good.size() - 1}) {
    const std::string path = dir.write("cut.pt", good.substr(0, keep));
    const std::string e = error_of([&] { TorchZipReader r(path); });
    EXPECT_NE(e.find("is not a valid torch.save zip archive"), std::string::npos) << e;
    EXPECT_NE(e.find("cut.pt"), std::string::npos) << e;
  }
  EXPECT_NE(error_of([&] {
              TorchZipReader r(dir.write("text.pt", std::string(4096, 'x')));
            }).find("no end-of-central-directory record"),
            std::string::npos);
  // A flipped byte inside a storage: the CRC check names the record.
  {
    TorchZipReader r(legacy_rank(1, 1));
    const size_t at = size_t(r.writable_record("data/3") - (r.writable_record("data.pkl") - 64));
    std::string bad = good;
    bad[at + 5] ^= 0x40;
    const std::string path = dir.write("flip.pt", bad);
    const std::string e = error_of([&] { torch_load(path); });
    EXPECT_NE(e.find("data/3' fails its CRC-32 check"), std::string::npos) << e;
  }
  // A compressed record (method 8 in the central directory).
  {
    std::string bad = good;
    const size_t cd = bad.find("PK\x01\x02");
    ASSERT_NE(cd, std::string::npos);
    bad[cd + 10] = 8;
    const std::string e = error_of([&] { TorchZipReader r(dir.write("deflate.pt", bad)); });
    EXPECT_NE(e.find("is compressed (method 8)"), std::string::npos) << e;
  }
}

// ---- pickles ---------------------------------------------------------------------------------

TEST(PickleReader, ForbiddenGlobalsAreRefusedByName) {
  struct Case {
    std::string pickle, global;
  };
  const std::vector<Case> cases = {
      // protocol 0: os.system("echo pwned")
      {"cos\nsystem\n(S'echo pwned'\ntR.", "os.system"},
      // protocol 2: builtins.eval("1+1")
      {raw("\x80\x02"
           "cbuiltins\neval\nX\x03\x00\x00\x00"
           "1+1\x85R."),
       "builtins.eval"},
      // protocol 4: STACK_GLOBAL of subprocess.Popen
      {raw("\x80\x04\x8c\x0asubprocess\x8c\x05Popen\x93)R."), "subprocess.Popen"},
      // a torch name that is not a rebuild function
      {"ctorch\nload\n.", "torch.load"},
      // getattr is admitted for enum members only: getattr(posix, "system") names posix
      {"c__builtin__\ngetattr\ncposix\nsystem\n", "posix.system"},
  };
  for (const Case& c : cases) {
    const std::string e = error_of([&] { read_pickle(c.pickle, "'evil.pt'"); });
    EXPECT_NE(e.find("names the global " + c.global), std::string::npos) << e;
    EXPECT_NE(e.find("refusing to load it"), std::string::npos) << e;
    EXPECT_NE(e.find("evil.pt"), std::string::npos) << e;
  }
  // ... and getattr of an allowed name that is not an enum class is refused too.
  const std::string e = error_of([] {
    read_pickle(raw("\x80\x02"
                    "c__builtin__\ngetattr\nccollections\nOrderedDict\n"
                    "X\x08\x00\x00\x00"
                    "fromkeys\x86R."),
                "'evil.pt'");
  });
  EXPECT_NE(e.find("only a member of an allowed enum class is read"), std::string::npos) << e;
  EXPECT_FALSE(pickle_global_allowed("os", "system"));
  EXPECT_TRUE(pickle_global_allowed("torch._utils", "_rebuild_tensor_v2"));
}

TEST(PickleReader, ForbiddenGlobalInsideATorchFileIsRefusedBeforeAnythingLoads) {
  TempDir dir;
  TorchZipWriter zip(dir.file("evil.pt"), "evil");
  const std::string pickle =
      raw("\x80\x02}X\x01\x00\x00\x00"
          "xcposix\nsystem\nX\x02\x00\x00\x00"
          "id\x85Rs.");
  zip.add_record("data.pkl", pickle.data(), pickle.size());
  zip.add_record("version", "3\n", 2);
  zip.finish();
  const std::string e = error_of([&] { torch_load(dir.file("evil.pt")); });
  EXPECT_NE(e.find("names the global posix.system"), std::string::npos) << e;
}

TEST(PickleReader, MalformedStreamsAreRefused) {
  const std::string good = write_pickle(PyValue::str("hello"));
  for (size_t keep = 0; keep < good.size(); ++keep) {
    const std::string e = error_of([&] { read_pickle(good.substr(0, keep), "'cut'"); });
    EXPECT_NE(e.find("pickle 'cut'"), std::string::npos) << keep << ": " << e;
  }
  EXPECT_NE(error_of([] { read_pickle("\x80\x02\xff.", "'x'"); }).find("unknown opcode 0xff"),
            std::string::npos);
  EXPECT_NE(error_of([] { read_pickle("\x80\x02s.", "'x'"); }).find("empty stack"),
            std::string::npos);
  EXPECT_NE(error_of([] { read_pickle("\x80\x02h\x07.", "'x'"); }).find("never stored"),
            std::string::npos);
  EXPECT_NE(error_of([] { read_pickle("\x80\x02\x8f.", "'x'"); }).find("set"), std::string::npos);
  // A tensor that runs past its storage.
  PyTensor t;
  t.storage_key = "0";
  t.storage_numel = 4;
  t.shape = {2, 3};
  t.strides = {3, 1};
  const std::string e = error_of([&] { read_pickle(write_pickle(PyValue::tensor(t)), "'x'"); });
  EXPECT_NE(e.find("runs past its storage of 4 elements"), std::string::npos) << e;
}

// A pickle can nest lists far deeper than any call stack: refused, and released without
// recursion; and a list that contains itself is refused.
TEST(PickleReader, DeepOrSelfContainingNestingIsRefused) {
  const int depth = 1000000;
  std::string deep = "\x80\x02";
  for (int i = 0; i < depth; ++i) deep += "]";      // a million empty lists on the stack ...
  for (int i = 0; i < depth - 1; ++i) deep += "a";  // ... each appended into the one below
  deep += ".";
  std::string e = error_of([&] { read_pickle(deep, "'deep'"); });
  EXPECT_NE(e.find("nests containers more than 1000 deep"), std::string::npos) << e;
  // 999 levels are fine.
  std::string ok = "\x80\x02";
  for (int i = 0; i < 999; ++i) ok += "]";
  for (int i = 0; i < 998; ++i) ok += "a";
  ok += ".";
  EXPECT_EQ(read_pickle(ok, "'ok'").kind(), PyValue::Kind::kList);
  // ] q0 h0 a: the list appended to itself.
  e = error_of([] {
    read_pickle(raw("\x80\x02]q\x00h\x00"
                    "a."),
                "'loop'");
  });
  EXPECT_NE(e.find("holds a container that contains itself"), std::string::npos) << e;
}

TEST(PickleReader, ReadsMegatronsDictionaries) {
  const PyValue root = torch_load(legacy_rank(0, 0));
  const PyDict& d = root.as_dict("root");
  EXPECT_EQ(d.find("iteration")->as_int(""), 10);
  EXPECT_EQ(d.find("checkpoint_version")->as_float(""), 3.0);
  const PyDict& args = d.find("args")->as_dict("args");
  EXPECT_EQ(args.kind, PyDict::Kind::kNamespace);
  EXPECT_EQ(args.find("hidden_size")->as_int(""), 32);
  EXPECT_EQ(args.find("norm_epsilon")->as_float(""), 1e-5);
  EXPECT_EQ(args.find("params_dtype")->as_global("").qualified(), "torch.float32");
  EXPECT_EQ(args.find("vocab_size")->as_int(""), 96);
  EXPECT_TRUE(args.find("recompute_granularity")->is_none());
  EXPECT_EQ(args.find("data_path")->as_sequence("").at(0).as_str(""), "corpus_text_document");
  // Python 3.11's pickle of an enum member: getattr(AttnBackend, "auto"), kept as data.
  const PyObject& backend = args.find("attention_backend")->as_object("");
  EXPECT_EQ(backend.type.qualified(), "__builtin__.getattr");
  EXPECT_EQ(backend.args.at(0).as_global("").qualified(),
            "megatron.core.transformer.enums.AttnBackend");
  EXPECT_EQ(backend.args.at(1).as_str(""), "auto");
  // The model: nested dicts of OrderedDicts of tensors.
  const PyDict& lm = d.find("model")->as_dict("").find("language_model")->as_dict("");
  const PyDict& table = lm.find("embedding")->as_dict("").find("word_embeddings")->as_dict("");
  EXPECT_EQ(table.kind, PyDict::Kind::kOrderedDict);
  const Tensor w = table.find("weight")->as_tensor("").data;
  EXPECT_EQ(w.dtype(), DType::F32);
  EXPECT_EQ(w.shape(), Shape({64, 32}));  // vocabulary 96 padded to 128, half of it
  EXPECT_EQ(lm.find("encoder")->as_dict("").items.size(), 12u);  // one layer of the two
  // The optimizer: int keys, tuples, tensors.
  const PyDict& opt = d.find("optimizer")->as_dict("");
  const PyDict& state = opt.find("state")->as_dict("");
  EXPECT_EQ(state.items.size(), 14u);
  EXPECT_EQ(state.items[0].first.as_int(""), 0);
  EXPECT_EQ(state.items[0].second.as_dict("").find("step")->as_tensor("").data.numel(), 1);
  const auto& groups = opt.find("param_groups")->as_sequence("");
  EXPECT_EQ(groups.at(0).as_dict("").find("betas")->kind(), PyValue::Kind::kTuple);
  // RNG states: Python's Mersenne Twister (ints up to 2^32 - 1), NumPy's (an ndarray
  // reconstruction, kept as data), PyTorch's (a byte tensor).
  const PyDict& rng = d.find("rng_state")->as_sequence("").at(0).as_dict("");
  const auto& py = rng.find("random_rng_state")->as_sequence("");
  ASSERT_EQ(py.size(), 3u);
  const auto& words = py[1].as_sequence("");
  EXPECT_EQ(words.size(), 625u);
  for (const PyValue& v : words) {
    EXPECT_GE(v.as_int(""), 0);
    EXPECT_LT(v.as_int(""), int64_t(1) << 32);
  }
  const auto& np = rng.find("np_rng_state")->as_sequence("");
  EXPECT_EQ(np.at(0).as_str(""), "MT19937");
  EXPECT_EQ(np.at(1).as_object("").type.name, "_reconstruct");
  const Tensor torch_rng = rng.find("torch_rng_state")->as_tensor("").data;
  EXPECT_EQ(torch_rng.dtype(), DType::U8);
  EXPECT_EQ(torch_rng.shape(), Shape({5056}));
}

// Transformer Engine's _extra_state as older versions saved it (a BytesIO of a torch.save) is
// kept as data, never opened; newer versions' empty byte tensor is a tensor like any other.
TEST(PickleReader, ReadsTransformerEnginesExtraState) {
  const PyValue root = torch_load(source_dir() +
                                  "/tests/data/megatron_lm_gpt_tiny/mcore_tp1/iter_0000007/"
                                  "mp_rank_00/model_optim_rng.pt");
  const PyDict& model = root.as_dict("").find("model")->as_dict("");
  const PyObject& bytes_io =
      model.find("decoder.layers.0.self_attention.linear_qkv._extra_state")->as_object("");
  EXPECT_EQ(bytes_io.type.qualified(), "_io.BytesIO");
  ASSERT_TRUE(bytes_io.state);
  EXPECT_EQ(bytes_io.state->as_sequence("").at(0).as_bytes("").substr(0, 4), "PK\x03\x04");
  const PyTensor& empty = model.find("decoder.layers.0.mlp.linear_fc1._extra_state")->as_tensor("");
  EXPECT_EQ(empty.dtype, DType::U8);
  EXPECT_EQ(empty.shape, Shape({0}));
  EXPECT_TRUE(model.find("decoder.layers.0.mlp.linear_fc2._extra_state")->is_none());
}

TEST(TorchFile, SaveThenLoadKeepsEveryValueOfMegatronsFiles) {
  TempDir dir;
  for (const std::string& path : fixture_files()) {
    const PyValue root = torch_load(path);
    torch_save(dir.file("copy.pt"), root);
    EXPECT_TRUE(same(torch_load(dir.file("copy.pt")), torch_load(path))) << path;
  }
}

// The object tools/reference/torch_file_check.py expects: every kind the writer writes.
PyValue fixed_object() {
  PyValue root = PyValue::dict();
  PyDict& d = root.as_dict("");
  auto set = [&](const char* k, PyValue v) { d.set(PyValue::str(k), std::move(v)); };
  set("f32",
      PyValue::tensor(Tensor::from_vector<float>({0, 0.5f, -1, 2.25f, 3e-8f, 1e30f}, {2, 3})));
  set("f32_transposed",
      PyValue::tensor(Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}).transpose(0, 1)));
  set("f64", PyValue::tensor(Tensor::from_vector<double>({0.1, -2.5}, {2})));
  set("bf16",
      PyValue::tensor(Tensor::from_vector<bf16>({bf16(1.5f), bf16(-3.0f), bf16(0.0078125f)}, {3})));
  set("f16", PyValue::tensor(Tensor::from_vector<f16>(
                 {f16(0.5f), f16(-65504.0f), f16(1e-3f), f16(2.0f)}, {2, 2})));
  set("i64", PyValue::tensor(Tensor::from_vector<int64_t>({-1, int64_t(1) << 40, 7}, {3})));
  set("i32", PyValue::tensor(Tensor::from_vector<int32_t>({-7, 123456}, {2})));
  set("u8", PyValue::tensor(Tensor::from_vector<uint8_t>({0, 1, 127, 128, 255}, {5})));
  set("scalar", PyValue::tensor(Tensor::from_vector<float>({42.0f}, {})));
  PyValue ordered = PyValue::dict(PyDict::Kind::kOrderedDict);
  ordered.as_dict("").set(PyValue::str("a"), PyValue::integer(1));
  ordered.as_dict("").set(PyValue::str("b"), PyValue::list({PyValue(), PyValue::boolean(true),
                                                            PyValue::boolean(false)}));
  set("ordered", ordered);
  PyValue ns = PyValue::dict(PyDict::Kind::kNamespace);
  ns.as_dict("").set(PyValue::str("hidden_size"), PyValue::integer(32));
  ns.as_dict("").set(PyValue::str("lr"), PyValue::real(0.25));
  ns.as_dict("").set(PyValue::str("name"), PyValue::str("tiny \xc3\xbc"));
  ns.as_dict("").set(PyValue::str("params_dtype"), PyValue::global("torch", "bfloat16"));
  set("args", ns);
  std::vector<PyValue> ints;
  for (int64_t v : {int64_t(0), int64_t(255), int64_t(256), int64_t(65535), int64_t(65536),
                    int64_t(-1), int64_t(2147483647), int64_t(-2147483647) - 1, int64_t(2147483648),
                    int64_t(1) << 62, -(int64_t(1) << 62), INT64_MIN})
    ints.push_back(PyValue::integer(v));
  set("ints", PyValue::tuple(ints));
  set("floats", PyValue::list({PyValue::real(1.5), PyValue::real(-0.0), PyValue::real(1e300)}));
  set("bytes", PyValue::bytes(raw("\x00\xff\x80"
                                  "abc")));
  set("empty", PyValue::dict());
  set("tuple1", PyValue::tuple({PyValue::integer(1)}));
  PyValue int_keys = PyValue::dict();
  int_keys.as_dict("").set(PyValue::integer(3), PyValue::str("three"));
  set("int_keys", int_keys);
  return root;
}

// tests/data/torch_file/written.pt was written by this test and loaded by PyTorch 1.13
// (tools/reference/torch_file_check.py, which checks every value and wrote
// written.torch_load.txt): the writer must keep producing exactly those bytes.
TEST(TorchFile, WriterOutputIsTheFilePyTorchLoaded) {
  TempDir dir;
  torch_save(dir.file("written.pt"), fixed_object());
  const std::string golden = source_dir() + "/tests/data/torch_file/written.pt";
  if (std::getenv("MEGATRON_WRITE_TORCH_GOLDEN")) {
    std::filesystem::copy_file(dir.file("written.pt"), golden,
                               std::filesystem::copy_options::overwrite_existing);
  }
  EXPECT_EQ(slurp(dir.file("written.pt")), slurp(golden));
  EXPECT_TRUE(same(torch_load(dir.file("written.pt")), fixed_object()));
}

}  // namespace
}  // namespace megatron
