// TensorBoardWriter: scalar summaries in TensorBoard's event-file format, written without
// TensorFlow or protobuf.
//
// File: DIR/events.out.tfevents.<unix seconds>.<hostname>, a TFRecord stream: each record is
// u64 length (little-endian), u32 masked CRC-32C of those 8 bytes, the payload, u32 masked
// CRC-32C of the payload. Payloads are tensorflow.Event protobufs encoded by hand:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }
// The first record carries file_version "brain.Event:2", as TensorFlow's writer does.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace megatron {

class TensorBoardWriter {
 public:
  explicit TensorBoardWriter(const std::string& dir);  // creates dir if needed
  void add_scalar(const std::string& tag, float value, int64_t step);
  void flush();  // throws Error when the bytes cannot be written (a full disk)
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& payload);
  std::string path_;
  std::ofstream out_;
};

// The protobuf bytes of one Event (exposed for tests).
std::string encode_scalar_event(double wall_time, int64_t step, const std::string& tag,
                                float value);
std::string encode_file_version_event(double wall_time, const std::string& version);

}  // namespace megatron
