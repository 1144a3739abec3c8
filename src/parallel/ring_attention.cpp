#include "parallel/ring_attention.h"

#include <memory>
#include <vector>

#include "kernels/attention_merge.h"
#include "kernels/elementwise.h"
#include "kernels/flash_attention.h"

namespace megatron {

namespace {

// The shape of the problem and the ring's geometry.
struct Ring {
  int64_t chunk, b, groups, q, d;  // chunk: C positions per local chunk
  int size, rank;

  Ring(const Tensor& qkv, const RingAttentionParams& p, const Communicator& cp)
      : chunk(p.layout.chunk()),
        b(qkv.size(1)),
        groups(qkv.size(2)),
        q(p.queries_per_group),
        d(qkv.size(4)),
        size(cp.size()),
        rank(cp.rank()) {
    MT_CHECK(size >= 2, "ring attention needs a context-parallel group of 2 or more ranks");
    MT_CHECK(p.layout.cp_size == size && p.layout.cp_rank == rank, "ring attention: layout of CP ",
             p.layout.cp_rank, "/", p.layout.cp_size, " on group rank ", rank, "/", size);
    MT_CHECK(qkv.dim() == 5 && qkv.size(0) == p.layout.local_seq() && qkv.size(3) == q + 2 &&
                 qkv.is_contiguous(),
             "ring attention: qkv must be contiguous [", p.layout.local_seq(), ", b, G, ", q + 2,
             ", d], got ", qkv.describe());
  }
  int64_t heads() const { return groups * q; }
  Shape kv_shape() const { return {2 * chunk, b, groups, 2, d}; }
  Shape block_shape() const { return {chunk, b, groups, q + 2, d}; }
  // The rank whose K/V this rank holds at step i.
  int source(int step) const { return (rank - step + size) % size; }
  int next() const { return (rank + 1) % size; }
  int prev() const { return (rank - 1 + size) % size; }
};

// One block: local query chunk `qa` against local key chunk `kb` of the K/V's owner.
struct Block {
  int qa, kb;
  int64_t query_chunk, key_chunk;  // global chunk indices
  bool causal() const { return query_chunk == key_chunk; }
};

// The blocks of step `step` in the order their results are merged (the diagonal first, so
// every query chunk's running result starts with a block that reaches all of its rows).
std::vector<Block> blocks_of(const Ring& ring, const ContextParallelLayout& layout, int step) {
  const ContextParallelLayout owner =
      ContextParallelLayout::of(layout.seq, ring.size, ring.source(step));
  std::vector<Block> blocks;
  for (int qa = 0; qa < 2; ++qa)
    for (int kb = 0; kb < 2; ++kb) {
      const Block blk{qa, kb, layout.chunk_index(qa), owner.chunk_index(kb)};
      if (blk.key_chunk <= blk.query_chunk) blocks.push_back(blk);  // later keys: masked
    }
  return blocks;
}

// Rows [k·C, (k + 1)·C) of a sequence-major tensor.
Tensor chunk_of(const Tensor& t, int k, int64_t chunk) {
  return t.slice(0, k * chunk, (k + 1) * chunk);
}

// The fused kernel's parameters for one block; `rows` receives its dropout mask rows.
kernels::FlashAttentionParams block_params(const RingAttentionParams& p, const Ring& ring,
                                           const Block& blk, std::vector<kernels::MaskRow>& rows) {
  kernels::FlashAttentionParams f;
  f.queries_per_group = p.queries_per_group;
  f.scale = p.scale;
  f.causal = blk.causal();
  if (p.scope.enabled && p.dropout_p > 0.0f) {
    rows = attention_block_dropout_rows(p.scope, p.layer, ring.b, p.head_begin, ring.heads(),
                                        p.layout.seq, blk.query_chunk * ring.chunk,
                                        blk.key_chunk * ring.chunk, ring.chunk);
    f.dropout_p = p.dropout_p;
    f.seed = p.scope.seed;
    f.dropout_rows = &rows;
  }
  return f;
}

// packed [C, b, G, q + 2, d] ← the queries of local chunk blk.qa and the K/V chunk blk.kb.
void pack_block(const Tensor& qkv, const Tensor& kv, const Block& blk, const Ring& ring,
                Tensor& packed) {
  Tensor queries = packed.slice(3, 0, ring.q), keys_values = packed.slice(3, ring.q, ring.q + 2);
  kernels::copy(chunk_of(qkv, blk.qa, ring.chunk).slice(3, 0, ring.q), queries);
  kernels::copy(chunk_of(kv, blk.kb, ring.chunk), keys_values);
}

// dst (f32, contiguous) += src (any float dtype, any strides), through `staging` (src's shape,
// f32, contiguous) and, for a 16-bit src, `narrow` (src's shape and dtype, contiguous).
void accumulate(const Tensor& src, Tensor& dst, Tensor& staging, Tensor& narrow) {
  if (src.dtype() == DType::F32) {
    kernels::copy(src, staging);
  } else {
    kernels::copy(src, narrow);
    kernels::cast(narrow, staging);
  }
  kernels::axpy(1.0f, staging, dst);
}

// dst (any float dtype, any strides) ← src (f32, contiguous), through `narrow` as above.
void store(const Tensor& src, Tensor& dst, Tensor& narrow) {
  if (dst.dtype() == DType::F32) {
    kernels::copy(src, dst);
  } else {
    kernels::cast(src, narrow);
    kernels::copy(narrow, dst);
  }
}

// Posts the exchange of one step: `out` to the next rank, `in` from the previous one.
std::vector<std::unique_ptr<CommRequest>> shift(Communicator& cp, const Ring& ring,
                                                const Tensor& out, Tensor& in) {
  std::vector<std::unique_ptr<CommRequest>> requests;
  requests.push_back(cp.irecv(in, ring.prev()));
  requests.push_back(cp.isend(out, ring.next()));
  return requests;
}

void wait_all(std::vector<std::unique_ptr<CommRequest>>& requests) {
  for (auto& r : requests) r->wait();
  requests.clear();
}

void progress_all(const std::vector<std::unique_ptr<CommRequest>>& requests) {
  for (const auto& r : requests) r->progress();
}

}  // namespace

void ring_attention_forward(Communicator& cp, const Tensor& qkv, const RingAttentionParams& p,
                            Tensor& out, Tensor& lse, Arena& workspace) {
  const Ring ring(qkv, p, cp);
  const int64_t c = ring.chunk, hd = ring.heads() * ring.d;
  check_shape(out, {2 * c, ring.b, hd}, "ring attention out");
  check_shape(lse, {2, ring.b, ring.heads(), c}, "ring attention lse");

  Tensor kv[2] = {workspace.alloc(ring.kv_shape(), qkv.dtype()),
                  workspace.alloc(ring.kv_shape(), qkv.dtype())};
  kernels::copy(qkv.slice(3, ring.q, ring.q + 2), kv[0]);
  Tensor packed = workspace.alloc(ring.block_shape(), qkv.dtype());
  Tensor block_out = workspace.alloc({c, ring.b, hd}, qkv.dtype());
  Tensor block_lse = workspace.alloc({ring.b, ring.heads(), c}, DType::F32);
  bool started[2] = {false, false};
  std::vector<kernels::MaskRow> rows;
  for (int step = 0; step < ring.size; ++step) {
    const Tensor& current = kv[step % 2];
    std::vector<std::unique_ptr<CommRequest>> requests;
    if (step + 1 < ring.size) requests = shift(cp, ring, current, kv[(step + 1) % 2]);
    for (const Block& blk : blocks_of(ring, p.layout, step)) {
      pack_block(qkv, current, blk, ring, packed);
      const kernels::FlashAttentionParams f = block_params(p, ring, blk, rows);
      Tensor chunk_out = chunk_of(out, blk.qa, c), chunk_lse = lse.select(0, blk.qa);
      if (!started[blk.qa]) {  // the chunk's first block writes its result directly
        kernels::flash_attention_forward(packed, f, chunk_out, chunk_lse);
        started[blk.qa] = true;
      } else {
        kernels::flash_attention_forward(packed, f, block_out, block_lse);
        kernels::attention_merge(chunk_out, chunk_lse, block_out, block_lse);
      }
      progress_all(requests);
    }
    wait_all(requests);
  }
}

void ring_attention_backward(Communicator& cp, const Tensor& qkv, const Tensor& out,
                             const Tensor& lse, const Tensor& dout, const RingAttentionParams& p,
                             Tensor& dqkv, Arena& arena) {
  const Ring ring(qkv, p, cp);
  const int64_t c = ring.chunk, hd = ring.heads() * ring.d;
  check_shape(out, {2 * c, ring.b, hd}, "ring attention out");
  check_shape(dout, out.shape(), "ring attention dout");
  check_shape(lse, {2, ring.b, ring.heads(), c}, "ring attention lse");
  check_shape(dqkv, qkv.shape(), "ring attention dqkv");
  const DType dt = qkv.dtype();
  const Shape q_shape = {2 * c, ring.b, ring.groups, ring.q, ring.d};
  const Shape q_chunk = {c, ring.b, ring.groups, ring.q, ring.d};
  const Shape kv_chunk = {c, ring.b, ring.groups, 2, ring.d};

  Tensor kv[2] = {arena.alloc(ring.kv_shape(), dt), arena.alloc(ring.kv_shape(), dt)};
  Tensor dkv[2] = {arena.zeros(ring.kv_shape(), DType::F32),
                   arena.alloc(ring.kv_shape(), DType::F32)};
  kernels::copy(qkv.slice(3, ring.q, ring.q + 2), kv[0]);
  Tensor dq = arena.zeros(q_shape, DType::F32);  // Σ over blocks of the local queries' grads
  Tensor packed = arena.alloc(ring.block_shape(), dt);
  Tensor dpacked = arena.alloc(ring.block_shape(), dt);
  Tensor q_staging = arena.alloc(q_chunk, DType::F32),
         kv_staging = arena.alloc(kv_chunk, DType::F32);
  Tensor q_narrow = dt == DType::F32 ? Tensor() : arena.alloc(q_shape, dt);
  Tensor kv_narrow = dt == DType::F32 ? Tensor() : arena.alloc(ring.kv_shape(), dt);
  std::vector<kernels::MaskRow> rows;
  for (int step = 0; step < ring.size; ++step) {
    const Tensor& current = kv[step % 2];
    Tensor& gradient = dkv[step % 2];
    std::vector<std::unique_ptr<CommRequest>> requests;
    if (step + 1 < ring.size) requests = shift(cp, ring, current, kv[(step + 1) % 2]);
    for (const Block& blk : blocks_of(ring, p.layout, step)) {
      pack_block(qkv, current, blk, ring, packed);
      const kernels::FlashAttentionParams f = block_params(p, ring, blk, rows);
      kernels::flash_attention_backward(packed, chunk_of(out, blk.qa, c), lse.select(0, blk.qa),
                                        chunk_of(dout, blk.qa, c), f, dpacked);
      Tensor dq_chunk = chunk_of(dq, blk.qa, c), dkv_chunk = chunk_of(gradient, blk.kb, c);
      Tensor q_narrow_chunk = dt == DType::F32 ? Tensor() : q_narrow.slice(0, 0, c);
      Tensor kv_narrow_chunk = dt == DType::F32 ? Tensor() : kv_narrow.slice(0, 0, c);
      accumulate(dpacked.slice(3, 0, ring.q), dq_chunk, q_staging, q_narrow_chunk);
      accumulate(dpacked.slice(3, ring.q, ring.q + 2), dkv_chunk, kv_staging, kv_narrow_chunk);
      progress_all(requests);
    }
    wait_all(requests);
    // This step's dK/dV go on to the next rank, which holds their K/V next; the gradient
    // arriving is that of the K/V this rank holds next (after the last step: its own). It is
    // complete only once this step's blocks are, so this transfer is not overlapped (the K/V's
    // is).
    Tensor& arriving = dkv[(step + 1) % 2];
    requests = shift(cp, ring, gradient, arriving);
    wait_all(requests);
  }
  Tensor dq_out = dqkv.slice(3, 0, ring.q), dkv_out = dqkv.slice(3, ring.q, ring.q + 2);
  store(dq, dq_out, q_narrow);
  store(dkv[ring.size % 2], dkv_out, kv_narrow);
}

}  // namespace megatron
