// On-disk cache of a GptIndex next to the data (Megatron caches its doc/sample/shuffle
// .npy files the same way), so large datasets are indexed once, not at every start.
//
// The file name carries a 64-bit FNV-1a hash of everything the index depends on — the .idx
// and .bin sizes and modification times, the document range, num_samples, seq_length, seed
// and the format version — so changed data or parameters select a new file and a stale one
// is never read:  PREFIX_NAME_indexmap_{ns}ns_{sl}sl_{seed}s_{hash}.gptidx, or, with
// --data-cache-path DIR (for data in a read-only place, as Megatron's flag), the same name in DIR:
// DIR/BASENAME_NAME_indexmap_... (BASENAME: the prefix's file name).
//
// File layout (little-endian): char[8] "MTGPTIX1", i64 num_epochs, i64 separate_last_epoch,
// i64 |doc_idx|, i64 |sample_idx|, i64 |shuffle_idx|, then the three i64 arrays.
#pragma once

#include <optional>
#include <string>

#include "data/gpt_index.h"

namespace megatron {

struct GptIndexKey {
  std::string prefix;  // dataset prefix (PREFIX.idx / PREFIX.bin)
  std::string name;    // "train", "valid", "test"
  int64_t first_document = 0;
  int64_t end_document = 0;
  int64_t num_samples = 0;
  int64_t seq_length = 0;
  uint64_t seed = 0;
  std::string cache_dir;  // --data-cache-path; "": next to the data
};

std::string gpt_index_cache_path(const GptIndexKey& key);
// The cached index, or nothing when the file is absent or unreadable/inconsistent.
std::optional<GptIndex> load_gpt_index(const std::string& path);
// Writes atomically (temporary file + rename), creating the directory if needed; concurrent
// writers of one path are safe.
void save_gpt_index(const std::string& path, const GptIndex& index);

}  // namespace megatron
