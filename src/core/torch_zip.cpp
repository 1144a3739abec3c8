#include "core/torch_zip.h"

#include <algorithm>
#include <cstring>

#include "core/crc32.h"
#include "core/error.h"
#include "core/mapped_file.h"

namespace megatron {

namespace {

constexpr uint32_t kLocalHeaderSig = 0x04034b50, kCentralHeaderSig = 0x02014b50,
                   kEndSig = 0x06054b50, kZip64EndSig = 0x06064b50, kZip64LocatorSig = 0x07064b50,
                   kDataDescriptorSig = 0x08074b50;
constexpr size_t kLocalHeaderSize = 30, kCentralHeaderSize = 46, kEndSize = 22, kZip64EndSize = 56,
                 kZip64LocatorSize = 20;
constexpr uint16_t kZip64ExtraId = 0x0001;
// General-purpose flags PyTorch's writer sets: bit 11 (UTF-8 names) and, unless the record is
// empty, bit 3 (sizes and CRC in a data descriptor after the data; an empty record has none).
constexpr uint16_t kUtf8Flag = 0x0800, kDescriptorFlag = 0x0008;
uint16_t torch_flags(uint64_t size) {
  return size ? kUtf8Flag | kDescriptorFlag : kUtf8Flag;
}
constexpr uint32_t kMax32 = 0xFFFFFFFFu;
constexpr uint64_t kAlignment = 64;

uint16_t get16(const uint8_t* p) {
  return uint16_t(p[0] | (p[1] << 8));
}
uint32_t get32(const uint8_t* p) {
  return uint32_t(get16(p)) | (uint32_t(get16(p + 2)) << 16);
}
uint64_t get64(const uint8_t* p) {
  return uint64_t(get32(p)) | (uint64_t(get32(p + 4)) << 32);
}

void put16(std::string& s, uint16_t v) {
  s.push_back(char(v & 0xFF));
  s.push_back(char(v >> 8));
}
void put32(std::string& s, uint32_t v) {
  put16(s, uint16_t(v & 0xFFFF));
  put16(s, uint16_t(v >> 16));
}
void put64(std::string& s, uint64_t v) {
  put32(s, uint32_t(v & kMax32));
  put32(s, uint32_t(v >> 32));
}

}  // namespace

// ---- reader -------------------------------------------------------------------------------------

TorchZipReader::TorchZipReader(const std::string& path)
    : TorchZipReader(std::make_shared<MappedFile>(path, MappedFile::Access::kCopyOnWrite), 0,
                     uint64_t(-1), path) {}

TorchZipReader::TorchZipReader(std::shared_ptr<MappedFile> file, uint64_t offset, uint64_t length,
                               std::string name)
    : path_(std::move(name)), file_(std::move(file)), window_(offset) {
  MT_REQUIRE(offset <= file_->size(), "PyTorch checkpoint '", path_, "' starts at byte ", offset,
             " of '", file_->path(), "', which has ", file_->size(),
             " bytes (the file is truncated)");
  size_ = length == uint64_t(-1) ? file_->size() : length;
  MT_REQUIRE(size_ <= file_->size() - offset, "PyTorch checkpoint '", path_, "' is bytes [", offset,
             ", ", offset + size_, ") of '", file_->path(), "', which has ", file_->size(),
             " bytes (the file is truncated)");
  const uint8_t* base = this->base();
  const uint64_t size = size_;
  auto corrupt = [&](const auto&... what) {
    MT_THROW("PyTorch checkpoint '", path_, "' is not a valid torch.save zip archive: ", what...,
             " (a truncated or corrupt file; save it again or copy it anew)");
  };
  // The end-of-central-directory record: the last one, before a comment of up to 64 KiB.
  if (size < kEndSize) corrupt("the file is ", size, " bytes, too short for a zip archive");
  uint64_t end = size - kEndSize;
  const uint64_t lowest = size >= kEndSize + 0xFFFF ? size - kEndSize - 0xFFFF : 0;
  while (get32(base + end) != kEndSig || end + kEndSize + get16(base + end + 20) != size) {
    if (end == lowest) corrupt("no end-of-central-directory record");
    --end;
  }
  uint64_t entries = get16(base + end + 10), cd_size = get32(base + end + 12),
           cd_offset = get32(base + end + 16);
  if (end >= kZip64LocatorSize && get32(base + end - kZip64LocatorSize) == kZip64LocatorSig) {
    const uint64_t z64 = get64(base + end - kZip64LocatorSize + 8);
    if (z64 + kZip64EndSize > end - kZip64LocatorSize || get32(base + z64) != kZip64EndSig)
      corrupt("the zip64 end record is missing or misplaced");
    entries = get64(base + z64 + 32);
    cd_size = get64(base + z64 + 40);
    cd_offset = get64(base + z64 + 48);
  }
  if (cd_offset > size || cd_size > size - cd_offset)
    corrupt("the central directory lies outside the file");

  uint64_t at = cd_offset;
  for (uint64_t i = 0; i < entries; ++i) {
    if (at + kCentralHeaderSize > cd_offset + cd_size || get32(base + at) != kCentralHeaderSig)
      corrupt("central directory entry ", i, " of ", entries, " is missing");
    const uint8_t* h = base + at;
    const uint16_t flags = get16(h + 8), method = get16(h + 10);
    const uint16_t name_len = get16(h + 28), extra_len = get16(h + 30), comment_len = get16(h + 32);
    if (at + kCentralHeaderSize + name_len + extra_len + comment_len > cd_offset + cd_size)
      corrupt("central directory entry ", i, " runs past the directory");
    const std::string name(reinterpret_cast<const char*>(h + kCentralHeaderSize), name_len);
    uint64_t csize = get32(h + 20), usize = get32(h + 24), local = get32(h + 42);
    // Zip64: the extra field holds, in this order, each of the three that is 0xFFFFFFFF.
    const uint8_t* x = h + kCentralHeaderSize + name_len;
    for (const uint8_t* xe = x + extra_len; x + 4 <= xe;) {
      const uint16_t id = get16(x), len = get16(x + 2);
      if (x + 4 + len > xe) corrupt("a malformed extra field in the entry of '", name, "'");
      if (id == kZip64ExtraId) {
        const uint8_t* f = x + 4;
        const uint8_t* fe = f + len;
        for (uint64_t* v : {&usize, &csize, &local}) {
          if (*v != kMax32) continue;
          if (f + 8 > fe) corrupt("a short zip64 field in the entry of '", name, "'");
          *v = get64(f);
          f += 8;
        }
      }
      x += 4 + len;
    }
    MT_REQUIRE((flags & 1) == 0, "PyTorch checkpoint '", path_, "': record '", name,
               "' is encrypted, which torch.save never writes");
    MT_REQUIRE(method == 0 && csize == usize, "PyTorch checkpoint '", path_, "': record '", name,
               "' is compressed (method ", method,
               "); torch.save stores records uncompressed, so this file was rewritten by another "
               "zip tool — extract it and save it with torch.save again");
    if (local > size || size - local < kLocalHeaderSize || get32(base + local) != kLocalHeaderSig)
      corrupt("the local header of '", name, "' is missing");
    const uint64_t data =
        local + kLocalHeaderSize + get16(base + local + 26) + get16(base + local + 28);
    if (data > size || usize > size - data) corrupt("record '", name, "' runs past the end");
    const size_t slash = name.find('/');
    if (slash == std::string::npos || slash == 0)
      corrupt("record '", name, "' is not inside an archive folder");
    const std::string folder = name.substr(0, slash);
    if (i == 0) archive_ = folder;
    if (folder != archive_) corrupt("records in two folders, '", archive_, "' and '", folder, "'");
    const std::string rel = name.substr(slash + 1);
    if (records_.count(rel)) corrupt("record '", name, "' appears twice");
    records_[rel] = Record{data, usize, get32(h + 16), size_t(i)};
    at += kCentralHeaderSize + name_len + extra_len + comment_len;
  }
  if (!records_.count("data.pkl")) corrupt("it has no data.pkl record");
  if (records_.count("byteorder")) {
    const std::string_view order = record("byteorder");
    MT_REQUIRE(order == "little", "PyTorch checkpoint '", path_, "' holds ", order,
               "-endian tensors; only little-endian checkpoints can be read");
  }
}

TorchZipReader::~TorchZipReader() = default;

const uint8_t* TorchZipReader::base() const {
  return file_->data() + window_;
}

std::vector<std::string> TorchZipReader::record_names() const {
  std::vector<std::pair<size_t, std::string>> ordered;
  for (const auto& [name, r] : records_) ordered.emplace_back(r.order, name);
  std::sort(ordered.begin(), ordered.end());
  std::vector<std::string> names;
  for (auto& [order, name] : ordered) names.push_back(std::move(name));
  return names;
}

const TorchZipReader::Record& TorchZipReader::find(const std::string& name) const {
  auto it = records_.find(name);
  MT_REQUIRE(it != records_.end(), "PyTorch checkpoint '", path_, "' has no record '", archive_,
             "/", name, "' (a storage its pickle refers to is missing: the file is corrupt)");
  const Record& r = it->second;
  if (!r.verified) {
    MT_REQUIRE(crc32(base() + r.offset, r.size) == r.crc, "PyTorch checkpoint '", path_,
               "': record '", archive_, "/", name,
               "' fails its CRC-32 check (the file is corrupt; copy or save it again)");
    r.verified = true;
  }
  return r;
}

std::string_view TorchZipReader::record(const std::string& name) const {
  const Record& r = find(name);
  return {reinterpret_cast<const char*>(base() + r.offset), size_t(r.size)};
}

uint8_t* TorchZipReader::writable_record(const std::string& name) const {
  const Record& r = find(name);
  return file_->writable_data() + window_ + r.offset;
}

// ---- writer -------------------------------------------------------------------------------------

TorchZipWriter::TorchZipWriter(const std::string& path, std::string archive_name)
    : archive_(std::move(archive_name)),
      own_file_(std::make_unique<DurableFile>(path)),
      file_(*own_file_) {
  MT_CHECK(!archive_.empty() && archive_.find('/') == std::string::npos,
           "a torch archive folder is one non-empty path component");
}

TorchZipWriter::TorchZipWriter(DurableFile& file, std::string archive_name)
    : archive_(std::move(archive_name)), file_(file) {
  MT_CHECK(!archive_.empty() && archive_.find('/') == std::string::npos,
           "a torch archive folder is one non-empty path component");
}

void TorchZipWriter::write(const std::string& bytes) {
  file_.write(bytes.data(), bytes.size());
  offset_ += bytes.size();
}

void TorchZipWriter::add_record(const std::string& name, const void* data, size_t size) {
  MT_CHECK(!finished_, "add_record after finish");
  const std::string full = archive_ + "/" + name;
  const bool zip64 = size >= kMax32 || offset_ >= kMax32;
  // Local zip64 extra: the sizes when the record is large, the header offset when it lies past
  // 4 GiB (PyTorch's writer puts both where they apply).
  std::string zip64_extra;
  if (zip64) {
    std::string fields;
    if (size >= kMax32) {
      put64(fields, size);
      put64(fields, size);
    }
    if (offset_ >= kMax32) put64(fields, offset_);
    put16(zip64_extra, kZip64ExtraId);
    put16(zip64_extra, uint16_t(fields.size()));
    zip64_extra += fields;
  }
  const uint64_t unpadded = offset_ + kLocalHeaderSize + full.size() + zip64_extra.size() + 4;
  const uint64_t padding = (kAlignment - unpadded % kAlignment) % kAlignment;
  std::string header;
  put32(header, kLocalHeaderSig);
  put16(header, 0);  // version needed (PyTorch writes 0)
  put16(header, torch_flags(size));
  put16(header, 0);  // stored
  put32(header, 0);  // DOS time and date: zero, so files are reproducible
  put32(header, 0);  // CRC and sizes follow the data (flag bit 3), or are 0 (empty)
  put32(header, zip64 ? kMax32 : 0);
  put32(header, zip64 ? kMax32 : 0);
  put16(header, uint16_t(full.size()));
  put16(header, uint16_t(zip64_extra.size() + 4 + padding));
  header += full;
  header += zip64_extra;
  header += "FB";
  put16(header, uint16_t(padding));
  header.append(padding, 'Z');
  const uint64_t header_offset = offset_;
  write(header);
  file_.write(data, size);
  offset_ += size;
  const uint32_t crc = crc32(data, size);
  entries_.push_back({full, header_offset, size, crc});
  if (size == 0) return;
  std::string descriptor;
  put32(descriptor, kDataDescriptorSig);
  put32(descriptor, crc);
  if (zip64) {
    put64(descriptor, size);
    put64(descriptor, size);
  } else {
    put32(descriptor, uint32_t(size));
    put32(descriptor, uint32_t(size));
  }
  write(descriptor);
}

void TorchZipWriter::finish() {
  MT_CHECK(!finished_, "finish called twice");
  const uint64_t cd_offset = offset_;
  std::string cd;
  for (const Entry& e : entries_) {
    std::string fields;
    if (e.size >= kMax32) {
      put64(fields, e.size);
      put64(fields, e.size);
    }
    if (e.header_offset >= kMax32) put64(fields, e.header_offset);
    std::string extra;
    if (!fields.empty()) {
      put16(extra, kZip64ExtraId);
      put16(extra, uint16_t(fields.size()));
      extra += fields;
    }
    put32(cd, kCentralHeaderSig);
    put16(cd, 0);  // version made by
    put16(cd, 0);  // version needed
    put16(cd, torch_flags(e.size));
    put16(cd, 0);  // stored
    put32(cd, 0);  // time and date
    put32(cd, e.crc);
    put32(cd, uint32_t(std::min<uint64_t>(e.size, kMax32)));
    put32(cd, uint32_t(std::min<uint64_t>(e.size, kMax32)));
    put16(cd, uint16_t(e.name.size()));
    put16(cd, uint16_t(extra.size()));
    put16(cd, 0);  // comment
    put16(cd, 0);  // disk
    put16(cd, 0);  // internal attributes
    put32(cd, 0);  // external attributes
    put32(cd, uint32_t(std::min<uint64_t>(e.header_offset, kMax32)));
    cd += e.name;
    cd += extra;
  }
  write(cd);
  // PyTorch always writes the zip64 end record and its locator, then the classic end record.
  const uint64_t z64 = offset_;
  std::string end;
  put32(end, kZip64EndSig);
  put64(end, kZip64EndSize - 12);
  put16(end, 0x031e);  // made by: Unix, spec 3.0
  put16(end, 0x002d);  // needs: 4.5 (zip64)
  put32(end, 0);
  put32(end, 0);
  put64(end, entries_.size());
  put64(end, entries_.size());
  put64(end, cd.size());
  put64(end, cd_offset);
  put32(end, kZip64LocatorSig);
  put32(end, 0);
  put64(end, z64);
  put32(end, 1);
  put32(end, kEndSig);
  put16(end, 0);
  put16(end, 0);
  put16(end, uint16_t(std::min<size_t>(entries_.size(), 0xFFFF)));
  put16(end, uint16_t(std::min<size_t>(entries_.size(), 0xFFFF)));
  put32(end, uint32_t(std::min<uint64_t>(cd.size(), kMax32)));
  put32(end, uint32_t(std::min<uint64_t>(cd_offset, kMax32)));
  put16(end, 0);
  write(end);
  if (own_file_) file_.close();
  finished_ = true;
}

}  // namespace megatron
