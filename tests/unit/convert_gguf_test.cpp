// The GGUF writer against bytes worked out by hand from the format (ggml's gguf.h), and the
// tokenizer metadata of a GGUF export. Whether llama.cpp loads and computes the exported models
// is e2e_gguf_llama_cpp's part.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "../common/temp_dir.h"
#include "convert/gguf_export.h"
#include "convert/gguf_tokenizer.h"
#include "convert/gguf_writer.h"
#include "core/durable_file.h"
#include "core/error.h"

namespace megatron {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

// Little-endian bytes, appended one field at a time as the format lists them.
struct Bytes {
  std::string s;
  Bytes& raw(const std::string& text) {
    s += text;
    return *this;
  }
  Bytes& le(uint64_t value, int n) {
    for (int i = 0; i < n; ++i) s += char((value >> (8 * i)) & 0xff);
    return *this;
  }
  Bytes& str(const std::string& text) { return le(text.size(), 8).raw(text); }
  Bytes& zeros(size_t n) { return raw(std::string(n, '\0')); }
};

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(GgufWriter, BytesOfASmallFile) {
  GgufWriter gguf;
  gguf.add_uint32("a.b", 7);
  gguf.add_string("s", "xy");
  gguf.add_tensor("t", Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {2, 3}),
                  GgufTensorType::kF32);
  // bf16 rounds to nearest even: 1 + 2^-8 is a tie (down to 1.0), 1 + 3·2^-8 a tie (up to
  // 1 + 2^-6, the even mantissa).
  gguf.add_tensor("u", Tensor::from_vector<float>({1.5f, 1.00390625f, 1.01171875f}, {3}),
                  GgufTensorType::kBF16);
  TempDir dir;
  gguf.write(dir.file("m.gguf"));

  Bytes want;
  want.raw("GGUF").le(3, 4).le(2, 8).le(2, 8);                 // version, tensors, keys
  want.str("a.b").le(4, 4).le(7, 4);                           // u32
  want.str("s").le(8, 4).str("xy");                            // string
  want.str("t").le(2, 4).le(3, 8).le(2, 8).le(0, 4).le(0, 8);  // ne {3, 2}, f32, offset 0
  want.str("u").le(1, 4).le(3, 8).le(30, 4).le(32, 8);         // bf16 at 24 rounded up to 32
  ASSERT_EQ(want.s.size(), 140u);
  want.zeros(20);  // the data section starts at 160, a multiple of 32
  for (float v : {0.f, 1.f, 2.f, 3.f, 4.f, 5.f}) want.le(bits(v), 4);
  want.zeros(8);
  want.le(0x3FC0, 2).le(0x3F80, 2).le(0x3F82, 2).zeros(26);
  EXPECT_EQ(read_file(dir.file("m.gguf"), "test"), want.s);
  EXPECT_FALSE(std::filesystem::exists(dir.file("m.gguf.tmp")));
}

TEST(GgufWriter, ArraysBoolsFloatsAndAnotherAlignment) {
  GgufWriter gguf(64);
  gguf.add_string_array("x", {"ab", ""});
  gguf.add_int32_array("y", {-1, 2});
  gguf.add_bool("z", true);
  gguf.add_float32("f", 0.5f);
  gguf.add_int32("i", -3);
  gguf.add_tensor("h", Tensor::from_vector<float>({1.0f, 65504.0f, 1.0f / 3.0f}, {3}),
                  GgufTensorType::kF16);
  TempDir dir;
  gguf.write(dir.file("m.gguf"));
  Bytes want;
  want.raw("GGUF").le(3, 4).le(1, 8).le(6, 8);
  want.str("general.alignment").le(4, 4).le(64, 4);
  want.str("x").le(9, 4).le(8, 4).le(2, 8).str("ab").str("");
  want.str("y").le(9, 4).le(5, 4).le(2, 8).le(uint32_t(-1), 4).le(2, 4);
  want.str("z").le(7, 4).le(1, 1);
  want.str("f").le(6, 4).le(bits(0.5f), 4);
  want.str("i").le(5, 4).le(uint32_t(-3), 4);
  want.str("h").le(1, 4).le(3, 8).le(1, 4).le(0, 8);
  want.zeros((64 - want.s.size() % 64) % 64);
  // f16: 1.0 = 0x3C00, 65504 (the largest) = 0x7BFF, 1/3 rounds to 0x3555.
  want.le(0x3C00, 2).le(0x7BFF, 2).le(0x3555, 2).zeros(58);
  EXPECT_EQ(read_file(dir.file("m.gguf"), "test"), want.s);
}

TEST(GgufWriter, StridedTensorsAreWrittenInLogicalOrder) {
  GgufWriter gguf;
  const Tensor t = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {2, 3}).transpose(0, 1);
  gguf.add_tensor("t", t, GgufTensorType::kF32);
  TempDir dir;
  gguf.write(dir.file("m.gguf"));
  const std::string bytes = read_file(dir.file("m.gguf"), "test");
  Bytes data;
  for (float v : {0.f, 3.f, 1.f, 4.f, 2.f, 5.f}) data.le(bits(v), 4);
  EXPECT_EQ(bytes.substr(96, 24), data.s);  // a 65-byte header padded to 96
  EXPECT_EQ(bytes.substr(24 + 8 + 1 + 4, 16), Bytes().le(2, 8).le(3, 8).s);  // ne {2, 3}
}

TEST(GgufWriter, DuplicateNamesAreBugs) {
  GgufWriter gguf;
  gguf.add_uint32("k", 1);
  EXPECT_THROW(gguf.add_string("k", "again"), Error);
  gguf.add_tensor("t", Tensor::zeros({2}, DType::F32), GgufTensorType::kF32);
  EXPECT_THROW(gguf.add_tensor("t", Tensor::zeros({2}, DType::F32), GgufTensorType::kF32), Error);
}

TEST(GgufWriter, ValuesBeyondF16AreRefusedAndNothingIsLeft) {
  GgufWriter gguf;
  gguf.add_tensor("big", Tensor::from_vector<float>({1.0f, 70000.0f}, {2}), GgufTensorType::kF16);
  TempDir dir;
  try {
    gguf.write(dir.file("m.gguf"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("GGUF tensor 'big' has values beyond f16's range"));
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("m.gguf")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("m.gguf.tmp")));
  GgufWriter bf16;  // bf16 has f32's range
  bf16.add_tensor("big", Tensor::from_vector<float>({1.0f, 70000.0f}, {2}), GgufTensorType::kBF16);
  bf16.write(dir.file("m.gguf"));
  EXPECT_TRUE(std::filesystem::exists(dir.file("m.gguf")));
}

TEST(GgufExport, TensorTypeNames) {
  EXPECT_EQ(gguf_tensor_type_from_name("f32"), GgufTensorType::kF32);
  EXPECT_EQ(gguf_tensor_type_from_name("f16"), GgufTensorType::kF16);
  EXPECT_EQ(gguf_tensor_type_from_name("bf16"), GgufTensorType::kBF16);
  try {
    gguf_tensor_type_from_name("q4_0");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("--gguf-dtype q4_0 is not a GGUF tensor type written here"));
  }
}

// The tokenizer keys of a GPT-2 BPE vocabulary, as llama.cpp's loader reads them.
TEST(GgufTokenizer, Gpt2BpeMetadata) {
  TempDir dir;
  const std::string vocab =
      dir.write("v.json", "{\"b\": 1, \"a\": 0, \"ab\": 2, \"<|endoftext|>\": 3}");
  const std::string merges = dir.write("m.txt", "#version: 0.2\na b\n\n");
  const nlohmann::json identity = {
      {"type", "GPT2BPETokenizer"},
      {"vocab_size", 4},
      {"eod", 3},
      {"files", {{"vocab_file", {{"path", vocab}}}, {"merge_file", {{"path", merges}}}}}};
  GgufWriter gguf;
  add_gguf_tokenizer(gguf, identity, 4, {});
  gguf.write(dir.file("m.gguf"));
  Bytes want;
  want.raw("GGUF").le(3, 4).le(0, 8).le(8, 8);
  want.str("tokenizer.ggml.model").le(8, 4).str("gpt2");
  want.str("tokenizer.ggml.pre").le(8, 4).str("gpt-2");
  want.str("tokenizer.ggml.tokens")
      .le(9, 4)
      .le(8, 4)
      .le(4, 8)
      .str("a")
      .str("b")
      .str("ab")
      .str("<|endoftext|>");
  want.str("tokenizer.ggml.token_type")
      .le(9, 4)
      .le(5, 4)
      .le(4, 8)
      .le(1, 4)
      .le(1, 4)
      .le(1, 4)
      .le(3, 4);
  want.str("tokenizer.ggml.merges").le(9, 4).le(8, 4).le(1, 8).str("a b");
  want.str("tokenizer.ggml.bos_token_id").le(4, 4).le(3, 4);
  want.str("tokenizer.ggml.eos_token_id").le(4, 4).le(3, 4);
  want.str("tokenizer.ggml.add_bos_token").le(7, 4).le(0, 1);
  want.zeros((32 - want.s.size() % 32) % 32);
  EXPECT_EQ(read_file(dir.file("m.gguf"), "test"), want.s);
}

TEST(GgufTokenizer, Errors) {
  TempDir dir;
  const std::string vocab = dir.write("v.json", "{\"a\": 0, \"b\": 0}");
  const std::string merges = dir.write("m.txt", "a b c\n");
  nlohmann::json identity = {
      {"type", "GPT2BPETokenizer"},
      {"eod", 1},
      {"files", {{"vocab_file", {{"path", vocab}}}, {"merge_file", {{"path", merges}}}}}};
  auto message = [&](int64_t vocab_size) {
    GgufWriter gguf;
    try {
      add_gguf_tokenizer(gguf, identity, vocab_size, {});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(message(3), HasSubstr("holds 2 tokens but the model 3"));
  EXPECT_THAT(message(2), HasSubstr("has id 0, not a distinct id below 2"));
  dir.write("v.json", "{\"a\": 0, \"b\": 1}");
  EXPECT_THAT(message(2), HasSubstr("line 1: expected two symbols, got 'a b c'"));
  identity["type"] = "SentencePieceTokenizer";
  EXPECT_THAT(message(2), HasSubstr("--tokenizer-type SentencePieceTokenizer has no GGUF export"));
  identity["type"] = "GPT2BPETokenizer";
  identity["vocab_size"] = 5;
  EXPECT_THAT(message(2), HasSubstr("has 5 entries but its model 2"));
}

// Without a tokenizer: placeholder tokens, user-defined (llama.cpp matches them in any text),
// no merges; NullTokenizer's end of document as bos/eos when recorded.
TEST(GgufTokenizer, NoTokenizerWritesPlaceholders) {
  for (const nlohmann::json& identity :
       {nlohmann::json(nullptr),
        nlohmann::json{{"type", "NullTokenizer"}, {"vocab_size", 3}, {"eod", 2}}}) {
    GgufWriter gguf;
    add_gguf_tokenizer(gguf, identity, 3, {});
    TempDir dir;
    gguf.write(dir.file("m.gguf"));
    Bytes want;
    want.raw("GGUF").le(3, 4).le(0, 8).le(identity.is_null() ? 6 : 8, 8);
    want.str("tokenizer.ggml.model").le(8, 4).str("gpt2");
    want.str("tokenizer.ggml.pre").le(8, 4).str("default");
    want.str("tokenizer.ggml.tokens")
        .le(9, 4)
        .le(8, 4)
        .le(3, 8)
        .str("<|0|>")
        .str("<|1|>")
        .str("<|2|>");
    want.str("tokenizer.ggml.token_type").le(9, 4).le(5, 4).le(3, 8).le(4, 4).le(4, 4).le(4, 4);
    want.str("tokenizer.ggml.merges").le(9, 4).le(8, 4).le(0, 8);
    if (!identity.is_null()) {
      want.str("tokenizer.ggml.bos_token_id").le(4, 4).le(2, 4);
      want.str("tokenizer.ggml.eos_token_id").le(4, 4).le(2, 4);
    }
    want.str("tokenizer.ggml.add_bos_token").le(7, 4).le(0, 1);
    want.zeros((32 - want.s.size() % 32) % 32);
    EXPECT_EQ(read_file(dir.file("m.gguf"), "test"), want.s);
  }
}

}  // namespace
}  // namespace megatron
