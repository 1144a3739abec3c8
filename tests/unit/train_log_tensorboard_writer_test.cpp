// TensorBoard event files: the protobuf bytes against hand-encoded ones, and the TFRecord
// framing decoded with an independent bit-by-bit CRC-32C.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/crc32c.h"
#include "train/log/tensorboard_writer.h"

namespace megatron {
namespace {

// Bitwise CRC-32C, written from the definition (no table), as the independent reference.
uint32_t reference_crc32c(const std::string& bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char b : bytes) {
    crc ^= b;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}
uint32_t reference_masked(const std::string& bytes) {
  uint32_t c = reference_crc32c(bytes);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TEST(Crc32c, KnownVector) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the standard check value
  EXPECT_EQ(reference_crc32c("123456789"), 0xE3069283u);
  const std::string s = "megatron event bytes \x01\x02\xff";
  EXPECT_EQ(masked_crc32c(s.data(), s.size()), reference_masked(s));
}

TEST(TensorBoardWriter, ScalarEventBytes) {
  // Event{wall_time=1.5, step=7, summary{value{tag="loss", simple_value=2.0}}}
  const std::string expected(
      "\x09\x00\x00\x00\x00\x00\x00\xf8\x3f"  // field 1, fixed64 1.5
      "\x10\x07"                              // field 2, varint 7
      "\x2a\x0d"                              // field 5, 13 bytes of Summary
      "\x0a\x0b"                              //   field 1 (value), 11 bytes
      "\x0a\x04loss"                          //     tag
      "\x15\x00\x00\x00\x40",                 //     simple_value 2.0f
      26);
  EXPECT_EQ(encode_scalar_event(1.5, 7, "loss", 2.0f), expected);
}

TEST(TensorBoardWriter, FileVersionEventBytes) {
  const std::string expected(
      "\x09\x00\x00\x00\x00\x00\x00\x00\x40"  // wall_time 2.0
      "\x1a\x0d"
      "brain.Event:2",
      24);
  EXPECT_EQ(encode_file_version_event(2.0, "brain.Event:2"), expected);
}

TEST(TensorBoardWriter, RecordsDecodeWithValidCrcs) {
  const auto dir = std::filesystem::temp_directory_path() / "megatron_tb_test";
  std::filesystem::remove_all(dir);
  std::string path;
  {
    TensorBoardWriter w(dir.string());
    w.add_scalar("lm loss", 3.25f, 10);
    w.add_scalar("lm loss", 3.0f, 20);
    path = w.path();
  }
  EXPECT_NE(path.find("events.out.tfevents."), std::string::npos);
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t pos = 0;
  std::vector<std::string> payloads;
  while (pos < bytes.size()) {
    ASSERT_LE(pos + 12, bytes.size());
    const std::string len_bytes = bytes.substr(pos, 8);
    uint64_t len;
    uint32_t len_crc, data_crc;
    std::memcpy(&len, len_bytes.data(), 8);
    std::memcpy(&len_crc, bytes.data() + pos + 8, 4);
    EXPECT_EQ(len_crc, reference_masked(len_bytes));
    ASSERT_LE(pos + 12 + len + 4, bytes.size());
    const std::string payload = bytes.substr(pos + 12, len);
    std::memcpy(&data_crc, bytes.data() + pos + 12 + len, 4);
    EXPECT_EQ(data_crc, reference_masked(payload));
    payloads.push_back(payload);
    pos += 12 + len + 4;
  }
  ASSERT_EQ(payloads.size(), 3u);
  EXPECT_NE(payloads[0].find("brain.Event:2"), std::string::npos);
  // The wall time differs per run; everything after it is fixed: step 20, "lm loss", 3.0f.
  const std::string tail("\x10\x14\x2a\x10\x0a\x0e\x0a\x07lm loss\x15\x00\x00\x40\x40", 20);
  EXPECT_EQ(payloads[2].substr(9), tail);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace megatron
