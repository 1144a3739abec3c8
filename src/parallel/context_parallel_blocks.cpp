#include "parallel/context_parallel_blocks.h"

#include "kernels/attention_merge.h"
#include "kernels/elementwise.h"

namespace megatron {

namespace {

// One block: local query chunk `qa` against local key chunk `kb` of the K/V's owner.
struct Block {
  int qa, kb;
  int64_t query_chunk, key_chunk;  // global chunk indices
  bool causal() const { return query_chunk == key_chunk; }
};

// The blocks against `source`'s K/V in the order their results are merged (the diagonal
// first, so every query chunk's running result starts with a block that reaches all of its
// rows).
std::vector<Block> blocks_of(const ContextParallelLayout& layout, int source) {
  const ContextParallelLayout owner = ContextParallelLayout::of(layout.seq, layout.cp_size, source);
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
kernels::FlashAttentionParams block_params(const CpAttentionParams& p, const CpBlockShape& shape,
                                           const Block& blk, std::vector<kernels::MaskRow>& rows) {
  kernels::FlashAttentionParams f;
  f.queries_per_group = p.queries_per_group;
  f.scale = p.scale;
  f.causal = blk.causal();
  if (p.scope.enabled && p.dropout_p > 0.0f) {
    rows = attention_block_dropout_rows(p.scope, p.layer, shape.b, p.head_begin, shape.heads(),
                                        p.layout.seq, blk.query_chunk * shape.chunk,
                                        blk.key_chunk * shape.chunk, shape.chunk);
    f.dropout_p = p.dropout_p;
    f.seed = p.scope.seed;
    f.dropout_rows = &rows;
  }
  return f;
}

// packed [C, b, G, q + 2, d] ← the queries of local chunk blk.qa and the K/V chunk blk.kb.
void pack_block(const Tensor& qkv, const Tensor& kv, const Block& blk, const CpBlockShape& shape,
                Tensor& packed) {
  Tensor queries = packed.slice(3, 0, shape.q), keys_values = packed.slice(3, shape.q, shape.q + 2);
  kernels::copy(chunk_of(qkv, blk.qa, shape.chunk).slice(3, 0, shape.q), queries);
  kernels::copy(chunk_of(kv, blk.kb, shape.chunk), keys_values);
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

}  // namespace

CpBlockShape::CpBlockShape(const Tensor& qkv, const CpAttentionParams& p)
    : chunk(p.layout.chunk()),
      b(qkv.size(1)),
      groups(qkv.size(2)),
      q(p.queries_per_group),
      d(qkv.size(4)) {
  MT_CHECK(p.layout.split(), "context-parallel attention needs a CP layout of 2 or more ranks");
  MT_CHECK(qkv.dim() == 5 && qkv.size(0) == p.layout.local_seq() && qkv.size(3) == q + 2 &&
               qkv.is_contiguous(),
           "context-parallel attention: qkv must be contiguous [", p.layout.local_seq(), ", b, G, ",
           q + 2, ", d], got ", qkv.describe());
}

CpBlocksForward::CpBlocksForward(const Tensor& qkv, const CpAttentionParams& p, Tensor& out,
                                 Tensor& lse, Arena& workspace)
    : qkv_(qkv), p_(p), shape_(qkv, p), out_(out), lse_(lse) {
  const int64_t c = shape_.chunk, hd = shape_.heads() * shape_.d;
  check_shape(out, {2 * c, shape_.b, hd}, "context-parallel attention out");
  check_shape(lse, {2, shape_.b, shape_.heads(), c}, "context-parallel attention lse");
  packed_ = workspace.alloc({c, shape_.b, shape_.groups, shape_.q + 2, shape_.d}, qkv.dtype());
  block_out_ = workspace.alloc({c, shape_.b, hd}, qkv.dtype());
  block_lse_ = workspace.alloc({shape_.b, shape_.heads(), c}, DType::F32);
}

void CpBlocksForward::meet(const Tensor& kv, int source, const std::function<void()>& between) {
  check_shape(kv, shape_.kv_shape(), "context-parallel attention K/V");
  MT_CHECK(source == p_.layout.cp_rank || (started_[0] && started_[1]),
           "context-parallel attention: this rank's own K/V must be met first");
  for (const Block& blk : blocks_of(p_.layout, source)) {
    pack_block(qkv_, kv, blk, shape_, packed_);
    const kernels::FlashAttentionParams f = block_params(p_, shape_, blk, rows_);
    Tensor chunk_out = chunk_of(out_, blk.qa, shape_.chunk), chunk_lse = lse_.select(0, blk.qa);
    if (!started_[blk.qa]) {  // the chunk's first block writes its result directly
      kernels::flash_attention_forward(packed_, f, chunk_out, chunk_lse);
      started_[blk.qa] = true;
    } else {
      kernels::flash_attention_forward(packed_, f, block_out_, block_lse_);
      kernels::attention_merge(chunk_out, chunk_lse, block_out_, block_lse_);
    }
    between();
  }
}

CpBlocksBackward::CpBlocksBackward(const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                   const Tensor& dout, const CpAttentionParams& p, Arena& arena)
    : qkv_(qkv), out_(out), lse_(lse), dout_(dout), p_(p), shape_(qkv, p) {
  const int64_t c = shape_.chunk, hd = shape_.heads() * shape_.d;
  check_shape(out, {2 * c, shape_.b, hd}, "context-parallel attention out");
  check_shape(dout, out.shape(), "context-parallel attention dout");
  check_shape(lse, {2, shape_.b, shape_.heads(), c}, "context-parallel attention lse");
  const DType dt = qkv.dtype();
  const Shape q_shape = {2 * c, shape_.b, shape_.groups, shape_.q, shape_.d};
  const Shape block = {c, shape_.b, shape_.groups, shape_.q + 2, shape_.d};
  dq_ = arena.zeros(q_shape, DType::F32);  // Σ over blocks of the local queries' grads
  packed_ = arena.alloc(block, dt);
  dpacked_ = arena.alloc(block, dt);
  q_staging_ = arena.alloc({c, shape_.b, shape_.groups, shape_.q, shape_.d}, DType::F32);
  kv_staging_ = arena.alloc({c, shape_.b, shape_.groups, 2, shape_.d}, DType::F32);
  if (dt != DType::F32) {
    q_narrow_ = arena.alloc(q_shape, dt);
    kv_narrow_ = arena.alloc(shape_.kv_shape(), dt);
  }
}

void CpBlocksBackward::meet(const Tensor& kv, int source, Tensor& dkv,
                            const std::function<void()>& between) {
  check_shape(kv, shape_.kv_shape(), "context-parallel attention K/V");
  check_shape(dkv, shape_.kv_shape(), "context-parallel attention dK/dV");
  check_dtype(dkv, DType::F32, "context-parallel attention dK/dV");
  const int64_t c = shape_.chunk;
  const bool narrow = qkv_.dtype() != DType::F32;
  for (const Block& blk : blocks_of(p_.layout, source)) {
    pack_block(qkv_, kv, blk, shape_, packed_);
    const kernels::FlashAttentionParams f = block_params(p_, shape_, blk, rows_);
    kernels::flash_attention_backward(packed_, chunk_of(out_, blk.qa, c), lse_.select(0, blk.qa),
                                      chunk_of(dout_, blk.qa, c), f, dpacked_);
    Tensor dq_chunk = chunk_of(dq_, blk.qa, c), dkv_chunk = chunk_of(dkv, blk.kb, c);
    Tensor q_narrow_chunk = narrow ? q_narrow_.slice(0, 0, c) : Tensor();
    Tensor kv_narrow_chunk = narrow ? kv_narrow_.slice(0, 0, c) : Tensor();
    accumulate(dpacked_.slice(3, 0, shape_.q), dq_chunk, q_staging_, q_narrow_chunk);
    accumulate(dpacked_.slice(3, shape_.q, shape_.q + 2), dkv_chunk, kv_staging_, kv_narrow_chunk);
    between();
  }
}

void CpBlocksBackward::finish(const Tensor& own_dkv, Tensor& dqkv) {
  check_shape(dqkv, qkv_.shape(), "context-parallel attention dqkv");
  check_shape(own_dkv, shape_.kv_shape(), "context-parallel attention dK/dV");
  Tensor dq_out = dqkv.slice(3, 0, shape_.q), dkv_out = dqkv.slice(3, shape_.q, shape_.q + 2);
  store(dq_, dq_out, q_narrow_);
  store(own_dkv, dkv_out, kv_narrow_);
}

}  // namespace megatron
