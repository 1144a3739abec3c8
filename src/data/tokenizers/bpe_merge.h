// bpe_merge: the merge loop of byte-pair encoding, shared by GPT-2's, HuggingFace's and
// tiktoken's BPE. They differ only in how a pair of adjacent tokens is looked up (a merges
// table, or the rank of the concatenated bytes), which the caller supplies.
//
// All three repeatedly merge the adjacent pair of lowest rank, leftmost first. Done literally
// that is O(n^2) per piece, which stalls on long runs of letters (DNA, base64, "aaaa...").
// A heap ordered by (rank, position) pops the same merges in the same order in O(n log n): a
// merge never recreates the pair just merged (the merged token is longer than either part, and
// ranks are per token), so all occurrences of one rank are popped left to right before any
// higher rank, and an occurrence that overlaps a merged one is found stale.
#pragma once

#include <cstdint>
#include <optional>
#include <queue>
#include <vector>

namespace megatron {

// The key of a merges table: the pair (left id, right id) in one integer.
inline uint64_t bpe_pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

struct BpeMerge {
  int32_t rank;    // lower merges first
  int32_t merged;  // id of the token the pair becomes
};

// ids: [n] the piece's initial symbols (one per byte), replaced by the merged ids.
// lookup(left_id, right_id) -> std::optional<BpeMerge>, nullopt when the pair never merges.
template <typename Lookup>
void bpe_merge(std::vector<int32_t>& ids, Lookup&& lookup) {
  const auto n = static_cast<int32_t>(ids.size());
  if (n < 2) return;
  struct Symbol {
    int32_t id;    // token id; -1 once merged into its left neighbour
    int32_t prev;  // index of the previous live symbol, -1 at the start
    int32_t next;  // index of the next live symbol, -1 at the end
  };
  // symbols: [n] a doubly linked list of the live ones.
  std::vector<Symbol> symbols(n);
  for (int32_t i = 0; i < n; ++i) symbols[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1};
  struct Candidate {
    int32_t rank, left, left_id, right_id, merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> candidates;
  const auto consider = [&](int32_t left) {
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    const std::optional<BpeMerge> merge = lookup(symbols[left].id, symbols[right].id);
    if (!merge) return;
    candidates.push({merge->rank, left, symbols[left].id, symbols[right].id, merge->merged});
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);
  while (!candidates.empty()) {
    const Candidate c = candidates.top();
    candidates.pop();
    Symbol& left = symbols[c.left];
    // Stale when either symbol has changed since the pair was seen.
    if (left.id != c.left_id || left.next < 0 || symbols[left.next].id != c.right_id) continue;
    Symbol& right = symbols[left.next];
    left.id = c.merged;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    right.id = -1;
    if (left.prev >= 0) consider(left.prev);
    consider(c.left);
  }
  ids.clear();
  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
}

}  // namespace megatron
