#include "model/kv_cache.h"

namespace megatron {

KvCache::KvCache(int num_layers, int64_t batch, int64_t heads_local, int64_t max_seq,
                 int64_t head_dim, DType dtype, Device device)
    : batch_(batch), max_seq_(max_seq) {
  MT_CHECK(num_layers >= 0 && batch >= 1 && heads_local >= 1 && max_seq >= 1 && head_dim >= 1,
           "KV cache: layers ", num_layers, ", batch ", batch, ", local heads ", heads_local,
           ", max sequence ", max_seq, ", head dim ", head_dim, " must be positive");
  for (int i = 0; i < num_layers; ++i)
    layers_.push_back({Tensor::empty({batch, heads_local, max_seq, head_dim}, dtype, device),
                       Tensor::empty({batch, heads_local, max_seq, head_dim}, dtype, device)});
}

void KvCache::advance(int64_t n) {
  MT_CHECK(n >= 0 && length_ + n <= max_seq_, "KV cache: ", length_, " + ", n,
           " positions exceed its ", max_seq_);
  length_ += n;
}

size_t KvCache::bytes() const {
  size_t total = 0;
  for (const LayerKv& l : layers_) total += l.k.nbytes() + l.v.nbytes();
  return total;
}

}  // namespace megatron
