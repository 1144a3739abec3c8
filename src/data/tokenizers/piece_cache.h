// PieceCache: piece (UTF-8 bytes) -> token ids, shared by all threads that encode with one
// tokenizer: GPT-2's BPE caches each pre-tokenized piece (as encoder.py does), WordPiece each
// word. Natural text repeats a small set of words, so most pieces are one probe here.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizers/string_hash.h"

namespace megatron {

// Sharded by the piece's hash so threads rarely contend for a mutex; a shard that reaches its
// capacity is cleared, which bounds memory on unbounded corpora (hot words come back at once).
class PieceCache {
 public:
  static constexpr size_t kShards = 64;
  static constexpr size_t kDefaultShardCapacity = 8192;  // 512K pieces in all
  // Pieces longer than this are not cached (long pieces are rare and would crowd out words).
  static constexpr size_t kMaxPieceBytes = 256;

  explicit PieceCache(size_t shard_capacity = kDefaultShardCapacity)
      : shard_capacity_(shard_capacity) {}

  // Appends the cached ids of piece to out and returns true, or returns false. `hash` is
  // StringHash{}(piece), computed once by the caller for both find and insert.
  bool find(std::string_view piece, size_t hash, std::vector<int32_t>& out) {
    Shard& shard = shards_[hash % kShards];
    std::lock_guard lock(shard.mutex);
    auto it = shard.map.find(piece);
    if (it == shard.map.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }
  void insert(std::string_view piece, size_t hash, std::vector<int32_t> ids) {
    Shard& shard = shards_[hash % kShards];
    std::lock_guard lock(shard.mutex);
    if (shard.map.size() >= shard_capacity_) shard.map.clear();
    shard.map.emplace(std::string(piece), std::move(ids));
  }

 private:
  size_t shard_capacity_;
  struct alignas(64) Shard {
    std::mutex mutex;
    StringMap<std::vector<int32_t>> map;
  };
  std::array<Shard, kShards> shards_;
};

}  // namespace megatron
