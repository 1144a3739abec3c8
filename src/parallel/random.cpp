#include "parallel/random.h"

#include "core/philox.h"

namespace megatron {

std::vector<kernels::MaskRow> hidden_dropout_rows(const DropoutScope& scope, int64_t layer,
                                                  DropoutSite site, int64_t seq, int64_t batch,
                                                  int64_t hidden, int64_t seq_begin,
                                                  const ContextParallelLayout& layout) {
  std::vector<uint64_t> sample_keys(batch);  // [b]
  for (int64_t r = 0; r < batch; ++r)
    sample_keys[r] = philox_key({uint64_t(scope.iteration), uint64_t(scope.first_sample + r),
                                 uint64_t(layer), uint64_t(site)});
  std::vector<kernels::MaskRow> rows(seq * batch);  // [s·b]
  for (int64_t i = 0; i < seq; ++i)
    for (int64_t r = 0; r < batch; ++r)
      rows[i * batch + r] = {sample_keys[r], uint64_t(layout.position(seq_begin + i) * hidden)};
  return rows;
}

std::vector<kernels::MaskRow> attention_dropout_rows(const DropoutScope& scope, int64_t layer,
                                                     int64_t batch, int64_t head_begin,
                                                     int64_t heads_local, int64_t seq) {
  return attention_block_dropout_rows(scope, layer, batch, head_begin, heads_local, seq, 0, 0, seq);
}

std::vector<kernels::MaskRow> attention_block_dropout_rows(const DropoutScope& scope, int64_t layer,
                                                           int64_t batch, int64_t head_begin,
                                                           int64_t heads_local, int64_t seq,
                                                           int64_t query_begin, int64_t key_begin,
                                                           int64_t block) {
  std::vector<kernels::MaskRow> rows(batch * heads_local * block);  // [b·heads_local·block]
  for (int64_t r = 0; r < batch; ++r)
    for (int64_t j = 0; j < heads_local; ++j) {
      const uint64_t key =
          philox_key({uint64_t(scope.iteration), uint64_t(scope.first_sample + r), uint64_t(layer),
                      uint64_t(DropoutSite::kAttentionProbs), uint64_t(head_begin + j)});
      kernels::MaskRow* row = &rows[(r * heads_local + j) * block];
      for (int64_t q = 0; q < block; ++q)
        row[q] = {key, uint64_t((query_begin + q) * seq + key_begin)};
    }
  return rows;
}

}  // namespace megatron
