// PieceCache: what is inserted is found (appended to the caller's ids); misses say so; many
// threads inserting and finding at once see only complete entries.
#include <gtest/gtest.h>

#include <thread>

#include "data/tokenizers/piece_cache.h"

namespace megatron {
namespace {

TEST(PieceCache, FindsWhatWasInsertedAndAppends) {
  PieceCache cache;
  std::vector<int32_t> out = {7};
  EXPECT_FALSE(cache.find("hello", StringHash{}("hello"), out));
  EXPECT_EQ(out, (std::vector<int32_t>{7}));
  cache.insert("hello", StringHash{}("hello"), {31373, 1});
  EXPECT_TRUE(cache.find("hello", StringHash{}("hello"), out));
  EXPECT_EQ(out, (std::vector<int32_t>{7, 31373, 1}));
}

TEST(PieceCache, ConcurrentUseBeyondCapacityStaysConsistent) {
  // 4 threads insert 5000 distinct keys each, 20000 in all, past a 64 x 64 = 4096-entry
  // capacity (so shards are cleared), while each also reads the keys its neighbour thread
  // inserts; every hit must return exactly the ids stored for its key.
  constexpr int kThreads = 4, kKeysPerThread = 5000, kShardCapacity = 64;
  PieceCache cache(kShardCapacity);
  const auto ids_of = [](int key) { return std::vector<int32_t>{key, -key}; };
  std::vector<std::thread> threads;
  std::vector<int> bad(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kKeysPerThread; ++i) {
        const std::string mine = std::to_string(i * kThreads + t);
        cache.insert(mine, StringHash{}(mine), ids_of(i * kThreads + t));
        const int other_key = i * kThreads + (t + 1) % kThreads;
        const std::string other = std::to_string(other_key);
        std::vector<int32_t> out;
        if (cache.find(other, StringHash{}(other), out)) {
          bad[t] += out != ids_of(other_key);
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(bad, std::vector<int>(kThreads, 0));
  // A full shard is cleared to make room: a new entry is always kept.
  const std::string fresh = "fresh";
  cache.insert(fresh, StringHash{}(fresh), {1, 2});
  std::vector<int32_t> out;
  EXPECT_TRUE(cache.find(fresh, StringHash{}(fresh), out));
  int evicted = 0;
  for (int key = 0; key < kThreads * kKeysPerThread; ++key) {
    const std::string piece = std::to_string(key);
    out.clear();
    evicted += !cache.find(piece, StringHash{}(piece), out);
  }
  // The capacity bounds what is kept.
  EXPECT_GE(evicted,
            kThreads * kKeysPerThread - static_cast<int>(PieceCache::kShards) * kShardCapacity);
}

}  // namespace
}  // namespace megatron
