// safetensors reader/writer against the format spec: exact bytes the reference implementation
// writes, handcrafted files, round trips of every dtype, and each kind of corruption.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "../common/temp_dir.h"
#include "core/safetensors.h"

namespace megatron {
namespace {

using ::testing::HasSubstr;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

std::string u64_le(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = char((v >> (8 * i)) & 0xff);
  return s;
}

// A file from a header string and a data section; the length field is the header's size.
std::string file_bytes(const std::string& header, const std::string& data) {
  return u64_le(header.size()) + header + data;
}

std::string float_bytes(std::initializer_list<float> values) {
  std::string s;
  for (float v : values) s.append(reinterpret_cast<const char*>(&v), 4);
  return s;
}

// The serialization test of the reference implementation (safetensors/src/tensor.rs): one
// F32 [1, 2, 3] tensor of zeros named "attn.0", no metadata; its header is exactly 64 bytes.
TEST(Safetensors, WriterMatchesReferenceImplementationBytes) {
  TempDir dir;
  write_safetensors(dir.file("a.safetensors"), {{"attn.0", Tensor::zeros({1, 2, 3}, DType::F32)}});
  std::string header = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  ASSERT_EQ(header.size(), 64u);
  EXPECT_EQ(read_bytes(dir.file("a.safetensors")), file_bytes(header, std::string(24, '\0')));
}

TEST(Safetensors, WriterPadsHeaderWithSpacesAndPutsMetadataFirst) {
  TempDir dir;
  Tensor t = Tensor::from_vector<float>({1.5f, -2.0f}, {2});
  write_safetensors(dir.file("a.safetensors"), {{"a", t}}, {{"format", "pt"}});
  std::string header =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  ASSERT_EQ(header.size() % 8, 0u);
  EXPECT_EQ(read_bytes(dir.file("a.safetensors")), file_bytes(header, float_bytes({1.5f, -2.0f})));
}

TEST(Safetensors, WriterOrdersByElementSizeThenNameSoEveryTensorIsAligned) {
  TempDir dir;
  write_safetensors(dir.file("a.safetensors"), {{"b_u8", Tensor::zeros({3}, DType::U8)},
                                                {"z_f64", Tensor::zeros({1}, DType::F64)},
                                                {"a_bf16", Tensor::zeros({1}, DType::BF16)},
                                                {"a_f32", Tensor::zeros({1}, DType::F32)}});
  SafetensorsReader r(dir.file("a.safetensors"));
  EXPECT_EQ(r.info("z_f64").begin, 0u);
  EXPECT_EQ(r.info("a_f32").begin, 8u);
  EXPECT_EQ(r.info("a_bf16").begin, 12u);
  EXPECT_EQ(r.info("b_u8").begin, 14u);
}

TEST(Safetensors, ReadsHandcraftedFile) {
  // Header order differs from data order, as other writers may produce.
  std::string header = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]},)"
                       R"("ids":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},)"
                       R"("h":{"dtype":"BF16","shape":[2],"data_offsets":[24,28]},)"
                       R"("__metadata__":{"k":"v"}}   )";
  int64_t id = -7;
  std::string data(reinterpret_cast<const char*>(&id), 8);
  data += float_bytes({1, 2, 3, 4});
  uint16_t h[2] = {0x3f80, 0xc000};  // bf16 1.0 and -2.0
  data.append(reinterpret_cast<const char*>(h), 4);
  TempDir dir;
  write_bytes(dir.file("h.safetensors"), file_bytes(header, data));

  SafetensorsReader r(dir.file("h.safetensors"));
  EXPECT_EQ(r.names(), (std::vector<std::string>{"h", "ids", "w"}));
  EXPECT_EQ(r.metadata().at("k"), "v");
  EXPECT_EQ(r.get("w").shape(), (Shape{2, 2}));
  EXPECT_EQ(r.get("w").to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(r.get("ids").to_vector<int64_t>(), (std::vector<int64_t>{-7}));
  std::vector<bf16> hv = r.get("h").to_vector<bf16>();
  EXPECT_EQ(float(hv[0]), 1.0f);
  EXPECT_EQ(float(hv[1]), -2.0f);
  EXPECT_THROW(r.get("missing"), Error);
  EXPECT_THROW(r.metadata_value("missing"), Error);
}

TEST(Safetensors, MisalignedTensorIsCopiedToAlignedMemory) {
  std::string header = R"({"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                       R"("f":{"dtype":"F32","shape":[1],"data_offsets":[1,5]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  TempDir dir;
  write_bytes(dir.file("m.safetensors"), file_bytes(header, "\x09" + float_bytes({3.25f})));
  SafetensorsReader r(dir.file("m.safetensors"));
  Tensor f = r.get("f");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f.raw_data()) % 4, 0u);
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{3.25f}));
}

TEST(Safetensors, RoundTripEveryDtypeAndLayout) {
  Tensor f32 = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor transposed = f32.transpose(0, 1);  // non-contiguous: written in logical order
  Tensor f64 = Tensor::from_vector<double>({1e-300, -2.5}, {2});
  Tensor bf = Tensor::from_vector<bf16>({bf16(1.5f), bf16(-3.0f), bf16(0.1f)}, {3});
  Tensor hf = Tensor::from_vector<f16>({f16(0.5f), f16(65504.0f)}, {1, 2});
  Tensor i32 = Tensor::from_vector<int32_t>({-1, 2147483647}, {2});
  Tensor i64 = Tensor::from_vector<int64_t>({int64_t(1) << 40}, {1});
  Tensor u8 = Tensor::from_vector<uint8_t>({0, 255, 7}, {3, 1});
  Tensor empty = Tensor::zeros({0, 4}, DType::F32);
  Tensor scalar = Tensor::from_vector<float>({42.0f}, {});
  NamedTensors tensors = {{"f32", f32},     {"transposed", transposed},
                          {"f64", f64},     {"bf16", bf},
                          {"f16", hf},      {"i32", i32},
                          {"i64", i64},     {"u8", u8},
                          {"empty", empty}, {"scalar", scalar}};
  TempDir dir;
  write_safetensors(dir.file("r.safetensors"), tensors, {{"iteration", "100"}, {"x", ""}});
  SafetensorsReader r(dir.file("r.safetensors"));
  EXPECT_EQ(r.metadata(), (std::map<std::string, std::string>{{"iteration", "100"}, {"x", ""}}));
  ASSERT_EQ(r.names().size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    Tensor got = r.get(name);
    EXPECT_EQ(got.dtype(), t.dtype());
    EXPECT_EQ(got.shape(), t.shape());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(got.raw_data()) % dtype_size(t.dtype()), 0u);
    Tensor expected = t.clone();
    EXPECT_EQ(std::memcmp(got.raw_data(), expected.raw_data(), t.nbytes()), 0);
  }
  EXPECT_EQ(r.get("transposed").to_vector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

TEST(Safetensors, WritingIntoAReadTensorDoesNotChangeTheFile) {
  TempDir dir;
  write_safetensors(dir.file("r.safetensors"), {{"a", Tensor::from_vector<float>({1, 2}, {2})}});
  std::string before = read_bytes(dir.file("r.safetensors"));
  {
    SafetensorsReader r(dir.file("r.safetensors"));
    r.get("a").data<float>()[0] = 99.0f;
  }
  EXPECT_EQ(read_bytes(dir.file("r.safetensors")), before);
}

TEST(Safetensors, WriterRejectsDuplicateAndReservedNames) {
  TempDir dir;
  Tensor t = Tensor::zeros({1}, DType::F32);
  EXPECT_THROW(write_safetensors(dir.file("d.safetensors"), {{"a", t}, {"a", t}}), Error);
  EXPECT_THROW(write_safetensors(dir.file("d.safetensors"), {{"__metadata__", t}}), Error);
}

// Each corruption must be reported with the file name and a description of the problem.
void expect_corrupt(const std::string& bytes, const std::string& message_part) {
  TempDir dir;
  std::string path = dir.file("bad.safetensors");
  write_bytes(path, bytes);
  try {
    SafetensorsReader r(path);
    ADD_FAILURE() << "no error for a file expected to fail with '" << message_part << "'";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr(path));
    EXPECT_THAT(e.message(), HasSubstr(message_part));
  }
}

const std::string kGoodTensor = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";

TEST(SafetensorsCorruption, MissingFile) {
  EXPECT_THROW(SafetensorsReader("/nonexistent/x.safetensors"), Error);
}

TEST(SafetensorsCorruption, ShorterThanLengthField) {
  expect_corrupt("\x05\x00\x00", "too short for the 8-byte header length");
}

TEST(SafetensorsCorruption, HeaderLengthBeyondFile) {
  expect_corrupt(u64_le(1000) + "{}", "exceeds the 2 bytes after the length field");
}

TEST(SafetensorsCorruption, HeaderLengthAboveLimit) {
  expect_corrupt(u64_le(uint64_t(1) << 40) + "{}", "exceeds the limit");
}

TEST(SafetensorsCorruption, HeaderNotAnObject) {
  expect_corrupt(file_bytes("[1, 2]", ""), "does not start with '{'");
}

TEST(SafetensorsCorruption, HeaderNotJson) {
  expect_corrupt(file_bytes("{\"a\": ", ""), "not valid JSON");
}

TEST(SafetensorsCorruption, UnsupportedDtype) {
  expect_corrupt(file_bytes(R"({"a":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]}})", "x"),
                 "unsupported safetensors dtype 'BOOL'");
}

TEST(SafetensorsCorruption, MissingField) {
  expect_corrupt(file_bytes(R"({"a":{"dtype":"F32","shape":[1]}})", "xxxx"),
                 "expected an object with dtype, shape and data_offsets");
}

TEST(SafetensorsCorruption, NegativeShape) {
  expect_corrupt(file_bytes(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "1234"),
                 "not a non-negative integer");
}

TEST(SafetensorsCorruption, SizeDisagreesWithShape) {
  expect_corrupt(
      file_bytes(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", float_bytes({1, 2})),
      "hold 8 bytes but F32 [3] needs 12");
}

TEST(SafetensorsCorruption, OffsetsOutsideData) {
  expect_corrupt(
      file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", float_bytes({1, 2})),
      "outside the data section of 8 bytes");
}

TEST(SafetensorsCorruption, OffsetsReversed) {
  expect_corrupt(
      file_bytes(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", float_bytes({1, 2})),
      "outside the data section");
}

TEST(SafetensorsCorruption, GapBetweenTensors) {
  expect_corrupt(
      file_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", float_bytes({1, 2})),
      "leaves a gap at byte 0");
}

TEST(SafetensorsCorruption, OverlappingTensors) {
  expect_corrupt(
      file_bytes("{" + kGoodTensor + R"(,"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                 float_bytes({1, 2})),
      "overlaps at byte 4");
}

TEST(SafetensorsCorruption, TrailingBytesAfterTensors) {
  expect_corrupt(file_bytes("{" + kGoodTensor + "}", float_bytes({1, 2, 3})),
                 "tensors cover 8 bytes but the data section has 12");
}

TEST(SafetensorsCorruption, MetadataValueNotString) {
  expect_corrupt(file_bytes(R"({"__metadata__":{"n":3},)" + kGoodTensor + "}", float_bytes({1, 2})),
                 "__metadata__ value of 'n' is not a string");
}

}  // namespace
}  // namespace megatron
