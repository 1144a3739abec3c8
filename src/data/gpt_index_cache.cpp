#include "data/gpt_index_cache.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/error.h"
#include "data/atomic_file.h"

namespace megatron {

namespace {

constexpr char kMagic[8] = {'M', 'T', 'G', 'P', 'T', 'I', 'X', '1'};

struct Fnv1a {
  uint64_t h = 0xcbf29ce484222325ull;
  void add(const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      h ^= static_cast<const uint8_t*>(p)[i];
      h *= 0x100000001b3ull;
    }
  }
  template <typename T>
  void add_value(T v) {
    add(&v, sizeof(T));
  }
};

void add_file_identity(Fnv1a& h, const std::string& path) {
  struct stat st {};
  MT_REQUIRE(::stat(path.c_str(), &st) == 0, "cannot stat '", path, "'");
  h.add_value<int64_t>(st.st_size);
  h.add_value<int64_t>(st.st_mtim.tv_sec);
  h.add_value<int64_t>(st.st_mtim.tv_nsec);
}

bool read_array(FILE* f, std::vector<int64_t>& v, int64_t n) {
  if (n < 0 || n > (int64_t(1) << 40)) return false;
  v.resize(size_t(n));
  return std::fread(v.data(), sizeof(int64_t), v.size(), f) == v.size();
}

}  // namespace

std::string gpt_index_cache_path(const GptIndexKey& key) {
  Fnv1a h;
  h.add(kMagic, sizeof(kMagic));
  add_file_identity(h, key.prefix + ".idx");
  add_file_identity(h, key.prefix + ".bin");
  h.add_value(key.first_document);
  h.add_value(key.end_document);
  h.add_value(key.num_samples);
  h.add_value(key.seq_length);
  h.add_value(key.seed);
  char hash[17];
  std::snprintf(hash, sizeof(hash), "%016llx", static_cast<unsigned long long>(h.h));
  const std::string stem =
      key.cache_dir.empty()
          ? key.prefix
          : (std::filesystem::path(key.cache_dir) / std::filesystem::path(key.prefix).filename())
                .string();
  return stem + "_" + key.name + "_indexmap_" + std::to_string(key.num_samples) + "ns_" +
         std::to_string(key.seq_length) + "sl_" + std::to_string(key.seed) + "s_" + hash +
         ".gptidx";
}

std::optional<GptIndex> load_gpt_index(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return std::nullopt;
  char magic[8];
  int64_t header[5];
  if (std::fread(magic, 1, 8, f.get()) != 8 || std::memcmp(magic, kMagic, 8) != 0 ||
      std::fread(header, sizeof(int64_t), 5, f.get()) != 5)
    return std::nullopt;
  GptIndex index;
  index.num_epochs = header[0];
  index.separate_last_epoch = header[1] != 0;
  if (!read_array(f.get(), index.doc_idx, header[2]) ||
      !read_array(f.get(), index.sample_idx, header[3]) ||
      !read_array(f.get(), index.shuffle_idx, header[4]) || std::fgetc(f.get()) != EOF)
    return std::nullopt;
  if (index.sample_idx.size() != (index.shuffle_idx.size() + 1) * 2) return std::nullopt;
  return index;
}

void save_gpt_index(const std::string& path, const GptIndex& index) {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  MT_REQUIRE(!ec, "cannot create the directory '", dir.string(), "' for '", path,
             "': ", ec.message());
  AtomicFile f(path);
  f.write(kMagic, sizeof(kMagic));
  f.write_value<int64_t>(index.num_epochs);
  f.write_value<int64_t>(index.separate_last_epoch ? 1 : 0);
  f.write_value<int64_t>(int64_t(index.doc_idx.size()));
  f.write_value<int64_t>(int64_t(index.sample_idx.size()));
  f.write_value<int64_t>(int64_t(index.shuffle_idx.size()));
  f.write(index.doc_idx.data(), index.doc_idx.size() * sizeof(int64_t));
  f.write(index.sample_idx.data(), index.sample_idx.size() * sizeof(int64_t));
  f.write(index.shuffle_idx.data(), index.shuffle_idx.size() * sizeof(int64_t));
  f.commit();
}

}  // namespace megatron
