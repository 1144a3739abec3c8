// PyTorch's checkpoint container: the zip archive torch.save writes (torch >= 1.6), read and
// written without a zip library.
//
//   <archive>/data.pkl     the pickle (core/pickle_reader.h)
//   <archive>/data/<key>   one record per tensor storage, raw little-endian elements
//   <archive>/version      the serialization version, "3\n"
//   <archive>/byteorder    "little" (PyTorch >= 2.1 writes it; absent means little)
// `<archive>` is one folder every record sits in (torch.save names it after the file's stem,
// "archive" for streams); records are addressed relative to it.
//
// Only the profile PyTorch writes is accepted — records *stored* (never compressed), zip64
// where sizes or offsets pass 4 GiB — which is why no general zip library is used: the writer
// must reproduce PyTorch's layout exactly (a data descriptor after every non-empty record, zero
// timestamps, the zip64 end records always), with every record's data 64-byte aligned (the
// local header carries an "FB" extra field of 'Z' padding, as PyTorch's writer does) so that
// tensors are views of the mapped file, and the file is byte-identical to torch.save's for
// the same records. The reader validates the whole directory before exposing a record and
// checks each record's CRC-32 the first time it is read.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/durable_file.h"

namespace megatron {

class MappedFile;

class TorchZipReader {
 public:
  // Maps and validates `path`; throws Error naming the file and the problem (not a zip, a
  // truncated or corrupt directory, a compressed or encrypted record, records outside one
  // archive folder, a record past the end of the file).
  explicit TorchZipReader(const std::string& path);
  // The archive torch.save wrote at bytes [offset, offset + length) of `file` (mapped
  // copy-on-write): its offsets count from `offset` (a PyTorch Distributed Checkpoint item,
  // checkpoint/torch_dcp.h); `length` uint64_t(-1) runs to the end of the file. `name` stands
  // for the file in messages. A range past the end of the file is an Error (truncated).
  TorchZipReader(std::shared_ptr<MappedFile> file, uint64_t offset, uint64_t length,
                 std::string name);
  ~TorchZipReader();
  TorchZipReader(const TorchZipReader&) = delete;
  TorchZipReader& operator=(const TorchZipReader&) = delete;

  const std::string& path() const { return path_; }
  const std::string& archive_name() const { return archive_; }
  // Record names relative to the archive folder ("data.pkl", "data/0", ...), in file order.
  std::vector<std::string> record_names() const;
  // The bytes of record `name`: a view of the (copy-on-write) mapping, valid while `this`
  // lives. Its CRC-32 is checked on the first call; a mismatch, or a
  // missing record, throws Error naming the file and the record.
  std::string_view record(const std::string& name) const;
  // Writable pointer to record `name`'s bytes in the private mapping (after the CRC check):
  // tensors are handed out as copy-on-write views of it.
  uint8_t* writable_record(const std::string& name) const;

 private:
  struct Record {
    uint64_t offset = 0, size = 0;  // data bytes in the file
    uint32_t crc = 0;
    size_t order = 0;
    mutable bool verified = false;
  };
  const Record& find(const std::string& name) const;

  // The archive's bytes (its window of the mapping).
  const uint8_t* base() const;

  std::string path_, archive_;
  std::shared_ptr<MappedFile> file_;
  uint64_t window_ = 0, size_ = 0;  // where the archive starts in the file, its length
  std::map<std::string, Record> records_;
};

class TorchZipWriter {
 public:
  // Creates `path` (truncated); records go into the folder `archive_name`.
  TorchZipWriter(const std::string& path, std::string archive_name);
  // Appends the archive to `file`, which stays open (a PyTorch Distributed Checkpoint data
  // file, checkpoint/torch_dcp_writer.h, holds one archive per tensor chunk, back to back, as
  // torch.save into a stream writes it): offsets and alignment count from the archive's first
  // byte, so the archive reads where it lands.
  TorchZipWriter(DurableFile& file, std::string archive_name);
  // Appends record `name` (relative to the archive folder), stored, its data 64-byte aligned.
  void add_record(const std::string& name, const void* data, size_t size);
  // Writes the central directory and the (zip64) end records; a file of its own is then
  // fsync'ed and closed.
  void finish();
  // Bytes of the archive written so far (all of it after finish()).
  uint64_t size() const { return offset_; }

 private:
  struct Entry {
    std::string name;
    uint64_t header_offset, size;
    uint32_t crc;
  };
  void write(const std::string& bytes);

  std::string archive_;
  std::unique_ptr<DurableFile> own_file_;  // null when appending to another's file
  DurableFile& file_;
  uint64_t offset_ = 0;
  std::vector<Entry> entries_;
  bool finished_ = false;
};

}  // namespace megatron
