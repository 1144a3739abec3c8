#include "train/log/tensorboard_writer.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/crc32c.h"
#include "core/error.h"

namespace megatron {

namespace {

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  out.push_back(char(uint8_t(v)));
}

template <typename T>
void put_fixed(std::string& out, T v) {  // little-endian host (x86)
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  out.append(bytes, sizeof(T));
}

// Protobuf field key: (field number << 3) | wire type.
void put_key(std::string& out, int field, int wire_type) {
  put_varint(out, uint64_t(field << 3 | wire_type));
}

void put_bytes_field(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

std::string event_header(double wall_time, int64_t step) {
  std::string e;
  put_key(e, 1, 1);  // wall_time: double, fixed64
  put_fixed(e, wall_time);
  if (step != 0) {  // proto3 omits default values
    put_key(e, 2, 0);
    put_varint(e, uint64_t(step));
  }
  return e;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string encode_scalar_event(double wall_time, int64_t step, const std::string& tag,
                                float value) {
  std::string v;
  put_bytes_field(v, 1, tag);
  put_key(v, 2, 5);  // simple_value: float, fixed32
  put_fixed(v, value);
  std::string summary;
  put_bytes_field(summary, 1, v);
  std::string e = event_header(wall_time, step);
  put_bytes_field(e, 5, summary);
  return e;
}

std::string encode_file_version_event(double wall_time, const std::string& version) {
  std::string e = event_header(wall_time, 0);
  put_bytes_field(e, 3, version);
  return e;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  MT_REQUIRE(!ec, "--tensorboard-dir '", dir, "' cannot be created: ", ec.message());
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const double now = now_seconds();
  path_ = dir + "/events.out.tfevents." + std::to_string(int64_t(now)) + "." + host;
  errno = 0;
  out_.open(path_, std::ios::binary | std::ios::trunc);
  MT_REQUIRE(out_.good(), "cannot open TensorBoard event file '", path_,
             "' for writing: ", io_error_reason());
  write_record(encode_file_version_event(now, "brain.Event:2"));
  flush();
}

void TensorBoardWriter::flush() {
  errno = 0;
  out_.flush();
  MT_REQUIRE(out_.good(), "writing TensorBoard event file '", path_,
             "' failed: ", io_error_reason());
}

void TensorBoardWriter::add_scalar(const std::string& tag, float value, int64_t step) {
  write_record(encode_scalar_event(now_seconds(), step, tag, value));
}

void TensorBoardWriter::write_record(const std::string& payload) {
  std::string header;
  put_fixed(header, uint64_t(payload.size()));
  std::string framed = header;
  put_fixed(framed, masked_crc32c(header.data(), header.size()));
  framed += payload;
  put_fixed(framed, masked_crc32c(payload.data(), payload.size()));
  errno = 0;
  out_.write(framed.data(), std::streamsize(framed.size()));
  MT_REQUIRE(out_.good(), "writing TensorBoard event file '", path_,
             "' failed: ", io_error_reason());
}

}  // namespace megatron
