// Train/valid/test split of a dataset's documents from Megatron's --split string.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace megatron {

// Parses "949,50,1" (or "949/50/1", or fewer parts, missing ones are 0) into three
// non-negative weights with a positive sum. Throws Error naming the string otherwise.
std::array<double, 3> parse_split(const std::string& split);

// Megatron's current rule (megatron/core/datasets, since Nov 2023): boundaries [0, a, b, size]
// such that split k is documents [bounds[k], bounds[k+1]), bounds[k] = round(c_k · size) with
// c_k the cumulative sum of the normalised weights (in doubles, in order) and Python's
// round-half-to-even. (The older get_train_valid_test_split_ rounded each part and took the
// excess off every boundary: "90,5,5" on 233 documents gave train [0, 209), now [0, 210).)
std::array<int64_t, 4> split_boundaries(const std::string& split, int64_t size);

// Python 3's round(): to nearest, ties to even (Megatron's arithmetic relies on it).
int64_t round_half_even(double x);

}  // namespace megatron
