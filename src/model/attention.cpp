#include "model/attention.h"

#include "core/upload.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/flash_attention.h"
#include "kernels/gemm.h"
#include "kernels/softmax.h"
#include "kernels/sparse_attention.h"
#include "parallel/mappings.h"

namespace megatron {

namespace {

// [batch, s, d] view into a buffer whose rows are positions: element (n, i, k) lives at
// offset + n·batch_stride + i·row_stride + k.
Tensor head_view(const Tensor& buffer, int64_t offset, int64_t batch, int64_t s, int64_t d,
                 int64_t batch_stride, int64_t row_stride) {
  return Tensor(buffer.storage(), buffer.offset() + offset, {batch, s, d},
                {batch_stride, row_stride, 1}, buffer.dtype());
}

// The [b·gl, sq, sk] slice of query index i of scores/probs [b, gl·q, sq, sk] (group-major
// heads: head = group·q + i).
Tensor query_scores(const Tensor& t, int64_t i, int64_t bg, int64_t q, int64_t sq, int64_t sk) {
  return Tensor(t.storage(), t.offset() + i * sq * sk, {bg, sq, sk}, {q * sq * sk, sk, 1},
                t.dtype());
}

}  // namespace

ParallelAttention::ParallelAttention(const std::string& prefix, int layer_number,
                                     const TransformerConfig& config, const ParallelState& ps,
                                     ParameterStore& store, const ComputeWeights& weights)
    : layer_number_((config.validate(ps.tp_size), layer_number)),
      heads_local_(config.num_attention_heads / ps.tp_size),
      head_dim_(config.head_dim()),
      value_dim_(config.value_head_dim()),
      head_begin_(int64_t(ps.tp_rank) * (config.num_attention_heads / ps.tp_size)),
      scale_(config.softmax_scale()),
      dropout_p_(config.attention_dropout),
      mask_type_(config.attn_mask_type),
      rope_(config.attention_rope()),
      rope_offset_(config.arch.mla.enabled ? config.arch.mla.qk_head_dim : 0),
      dense_bias_(config.arch.add_bias_linear),
      selective_recompute_(config.selective_recompute),
      recompute_mla_up_(config.recompute_mla_up_proj),
      flash_attention_(config.flash_attention),
      cp_size_(ps.cp_size),
      cp_rank_(ps.cp_rank),
      rotary_{.rotary_dim = config.rotary_dim(),
              .base = config.arch.rotary_base,
              .seq_interpolation_factor = config.arch.rotary_seq_len_interpolation_factor,
              .llama3 = config.arch.rope_scaling,
              .yarn = config.yarn_rope(),
              .interleaved = config.arch.rotary_interleaved},
      query_key_value_(config.arch.mla.enabled ? std::nullopt
                                               : std::optional<QkvProjection>(
                                                     std::in_place, prefix + ".query_key_value",
                                                     config, ps, store, weights)),
      mla_(config.arch.mla.enabled
               ? std::optional<MlaProjection>(std::in_place, prefix, config, ps, store, weights)
               : std::nullopt),
      // With MLA, --qk-layernorm is Megatron-Core's switch for the latent norms, which
      // MlaProjection has: no per-head norm.
      qk_norm_(config.arch.qk_layernorm && !config.arch.mla.enabled
                   ? std::optional<QkLayerNorm>(std::in_place, prefix, config, store, weights)
                   : std::nullopt),
      indexer_(config.arch.dsa.enabled
                   ? std::optional<DsaIndexer>(std::in_place, prefix + ".core_attention.indexer",
                                               config, store, weights)
                   : std::nullopt),
      dsa_(config.arch.dsa),
      sequence_parallel_(config.sequence_parallel),
      tp_(ps.tp),
      dense_({.name = prefix + ".dense",
              .input_size = config.num_attention_heads * config.value_head_dim(),
              .output_size = config.hidden_size,
              .bias = config.arch.add_bias_linear,
              .input_is_parallel = true,
              .skip_bias_add = true,
              .sequence_parallel = config.sequence_parallel,
              .init_std = config.output_layer_init_std()},
             ps, store, weights) {
  groups_local_ = mla_ ? heads_local_ : query_key_value_->groups_local();
  queries_ = mla_ ? 1 : query_key_value_->queries_per_group_local();
  MT_REQUIRE(cp_size_ == 1 || mask_type_ == AttnMaskType::kCausal, "--context-parallel-size ",
             cp_size_,
             " splits causal attention (GPT and Llama-family models) only; BERT's padding-masked "
             "attention needs --context-parallel-size 1");
  MT_REQUIRE(cp_size_ == 1 || !indexer_,
             "--experimental-attention-variant dsa with --context-parallel-size ", cp_size_,
             " is not implemented (Megatron-Core's takes --cp-comm-type allgather only); use "
             "--context-parallel-size 1");
  if (cp_size_ == 1) return;
  cp_.emplace(config.cp_comm_type_of(layer_number), ps);
  const int a2a = cp_->a2a_size();
  // Ulysses splits each rank's heads over its all-to-all group, KV groups whole.
  MT_REQUIRE(groups_local_ % a2a == 0, "--cp-comm-type ", cp_comm_type_name(cp_->type()),
             " splits the attention heads over ", a2a, " ranks, but this tensor-parallel rank has ",
             groups_local_,
             " key/value heads (--num-query-groups, or --num-attention-heads, / "
             "--tensor-model-parallel-size); make them divisible by ",
             a2a, " or use --cp-comm-type p2p");
}

void ParallelAttention::init_weights(ParameterStore& store, uint64_t seed) const {
  if (mla_) mla_->init_weights(store, seed);
  if (query_key_value_) query_key_value_->init_weights(store, seed);
  if (qk_norm_) qk_norm_->init_weights(store);
  if (indexer_) indexer_->init_weights(store, seed);
  dense_.init_weights(store, seed);
}

const Tensor& ParallelAttention::dense_bias() const {
  return dense_bias_ ? dense_.bias() : no_bias_;
}

Tensor& ParallelAttention::dense_bias_grad() const {
  return dense_bias_ ? dense_.bias_grad() : no_bias_;
}

void ParallelAttention::rotate_qk(Tensor& qkv, int64_t position_start, bool inverse) const {
  if (!rope_) return;
  // The rotated channels: a whole head, its first rotary_dim, or MLA's RoPE part (the last).
  Tensor queries = qkv_query_heads(qkv).slice(4, rope_offset_, head_dim_),
         keys = qkv_key_heads(qkv).slice(3, rope_offset_, head_dim_);
  kernels::rotary_embedding(queries, position_start, rotary_, inverse, queries);
  kernels::rotary_embedding(keys, position_start, rotary_, inverse, keys);
}

void ParallelAttention::rotate_local_qk(Tensor& qkv, bool inverse) const {
  const ContextParallelLayout layout =
      ContextParallelLayout::of_local(qkv.size(0), cp_size_, cp_rank_);
  if (!layout.split()) {
    rotate_qk(qkv, 0, inverse);
    return;
  }
  // A context-parallel rank's two chunks continue from their own first positions.
  for (int k = 0; k < 2; ++k) {
    Tensor chunk = qkv.slice(0, k * layout.chunk(), (k + 1) * layout.chunk());
    rotate_qk(chunk, layout.chunk_begin(k), inverse);
  }
}

CpAttentionParams ParallelAttention::cp_params(int64_t seq, const DropoutScope& scope) const {
  return {.layout = ContextParallelLayout::of_local(seq, cp_size_, cp_rank_),
          .queries_per_group = queries_,
          .scale = scale_,
          .dropout_p = dropout_p_,
          .scope = scope,
          .layer = layer_number_,
          .head_begin = head_begin_};
}

kernels::FlashAttentionParams ParallelAttention::flash_params(
    int64_t batch, int64_t seq, const Tensor& pad_mask, const DropoutScope& scope,
    std::vector<kernels::MaskRow>& dropout_rows) const {
  kernels::FlashAttentionParams p;
  p.queries_per_group = queries_;
  p.scale = scale_;
  p.causal = mask_type_ == AttnMaskType::kCausal;
  p.pad_mask = pad_mask;
  if (scope.enabled && dropout_p_ > 0.0f) {
    // The rows the unfused path draws its mask from (core_probs): the same elements kept.
    dropout_rows =
        attention_dropout_rows(scope, layer_number_, batch, head_begin_, heads_local_, seq);
    p.dropout_p = dropout_p_;
    p.seed = scope.seed;
    p.dropout_rows = &dropout_rows;
  }
  return p;
}

Tensor ParallelAttention::dropped_probs(const CoreProbs& core, Arena& arena) const {
  if (!core.dropout_mask.defined()) return core.probs;
  Tensor dropped = arena.alloc(core.probs.shape(), core.probs.dtype());
  kernels::dropout_forward(core.probs, core.dropout_mask, dropout_p_, dropped);
  return dropped;
}

ParallelAttention::CoreProbs ParallelAttention::core_probs(const Tensor& qkv, DType dtype,
                                                           const Tensor& pad_mask,
                                                           const DropoutScope& scope, Arena& arena,
                                                           Arena& workspace) const {
  const int64_t s = qkv.size(0), b = qkv.size(1), hl = heads_local_, d = head_dim_,
                gl = groups_local_, q = queries_, bg = b * gl;
  const int64_t group = (q + 2) * d, qkv_row = bg * group;     // strides of a group, a position
  Tensor k = head_view(qkv, q * d, bg, s, d, group, qkv_row);  // [b·gl, s, d]
  Tensor scores = workspace.alloc({b, hl, s, s}, dtype);
  for (int64_t i = 0; i < q; ++i) {
    Tensor scores_i = query_scores(scores, i, bg, q, s, s);
    kernels::batched_gemm(head_view(qkv, i * d, bg, s, d, group, qkv_row), false, k, true,
                          scores_i);
  }
  CoreProbs core;
  core.probs = arena.alloc({b, hl, s, s}, dtype);
  kernels::scaled_masked_softmax_forward(scores, scale_, mask_type_ == AttnMaskType::kCausal,
                                         pad_mask, core.probs);
  if (scope.enabled && dropout_p_ > 0.0f) {
    core.dropout_mask = arena.alloc({b * hl * s, s}, DType::U8);
    kernels::dropout_mask(scope.seed,
                          attention_dropout_rows(scope, layer_number_, b, head_begin_, hl, s),
                          dropout_p_, core.dropout_mask);
  }
  return core;
}

Tensor ParallelAttention::forward(Ctx& ctx, const Tensor& x, const Tensor& pad_mask,
                                  const DropoutScope& scope, Arena& arena, Arena& workspace) const {
  MT_CHECK(x.dim() == 3, "attention input must be [s, b, h], got ", x.describe());
  if (recompute_mla_up_) {  // the latents are kept; Q, K, V die with the workspace
    mla_->down(ctx.mla, x, arena);
    ctx.qkv = mla_up_and_rope(ctx, workspace);
  } else {
    ctx.qkv = project(ctx, x, arena);  // [s, b, gl, q+2, d]
    if (qk_norm_) qk_norm_->forward(ctx.qk_norm, ctx.qkv, arena);
    rotate_local_qk(ctx.qkv, false);
  }
  // The whole sequence (a sequence-parallel x is a shard; the projection gathered it).
  const int64_t s = ctx.qkv.size(0), b = x.size(1), hl = heads_local_, d = head_dim_,
                gl = groups_local_, q = queries_, bg = b * gl;
  if (mask_type_ == AttnMaskType::kPadding) {
    check_shape(pad_mask, {b, s}, "attention padding mask");
    check_dtype(pad_mask, DType::U8, "attention padding mask");
  } else {
    MT_CHECK(!pad_mask.defined(), "a causal attention takes no padding mask");
  }
  ctx.pad_mask = pad_mask;
  ctx.scope = scope;
  if (indexer_) select_keys(ctx, x, scope, arena, workspace);
  if (cp_) {
    ctx.context = arena.alloc({s, b, hl * d}, x.dtype());  // [s, b, hl·d]
    cp_->forward(ctx.qkv, cp_params(s, scope), ctx.context, ctx.cp, arena, workspace);
    return dense_forward(ctx.dense, ctx.context, arena);
  }
  if (flash_attention_ && !indexer_) {
    std::vector<kernels::MaskRow> dropout_rows;
    ctx.context = arena.alloc({s, b, hl * d}, x.dtype());  // [s, b, hl·d]
    ctx.lse = arena.alloc({b, hl, s}, DType::F32);
    kernels::flash_attention_forward(ctx.qkv, flash_params(b, s, pad_mask, scope, dropout_rows),
                                     ctx.context, ctx.lse);
    return dense_forward(ctx.dense, ctx.context, arena);
  }
  const int64_t group = (q + 2) * d, qkv_row = bg * group;
  Tensor v = head_view(ctx.qkv, (q + 1) * d, bg, s, d, group, qkv_row);  // [b·gl, s, d]

  // With selective recompute the probabilities and the mask die with the forward.
  const CoreProbs core = core_probs(ctx.qkv, ctx.qkv.dtype(), key_mask(ctx), scope,
                                    selective_recompute_ ? workspace : arena, workspace);
  ctx.probs = selective_recompute_ ? Tensor() : core.probs;
  ctx.dropout_mask = selective_recompute_ ? Tensor() : core.dropout_mask;
  Tensor probs_dropped = dropped_probs(core, workspace);  // [b, hl, s, s]

  Tensor context = arena.alloc({s, b, hl * d}, x.dtype());  // [s, b, hl·d]
  for (int64_t i = 0; i < q; ++i) {
    Tensor context_i = head_view(context, i * d, bg, s, d, q * d, b * hl * d);
    kernels::batched_gemm(query_scores(probs_dropped, i, bg, q, s, s), false, v, false, context_i);
  }
  return dense_forward(ctx.dense, context, arena);
}

void ParallelAttention::select_keys(Ctx& ctx, const Tensor& x, const DropoutScope& scope,
                                    Arena& arena, Arena& workspace) const {
  const int64_t s = ctx.qkv.size(0), b = ctx.qkv.size(1);
  const bool loss = scope.enabled && dsa_.loss_coeff > 0;
  Arena& kept = loss ? arena : workspace;  // the indexer's state lives on for its backward
  // The whole sequence: the indexer's own gather of a sequence shard; MLA's query projection
  // already gathered its input (the query latent, or x without --q-lora-rank).
  const Tensor whole = sequence_parallel_ ? gather_first_dim(*tp_, x, kept) : x;
  const Tensor& latent = mla_->query_input(ctx.mla);  // [s·b, rq]
  const Tensor scores =
      indexer_->forward(ctx.indexer, whole, latent.view({s, b, latent.size(1)}), kept);
  ctx.topk_mask = arena.alloc({b, s, s}, DType::U8);
  kernels::topk_key_mask(scores, dsa_.topk, ctx.topk_mask);
  if (loss) indexer_loss(ctx, scores, arena, workspace);
}

void ParallelAttention::indexer_loss(Ctx& ctx, const Tensor& scores, Arena& arena,
                                     Arena& workspace) const {
  const int64_t s = ctx.qkv.size(0), b = ctx.qkv.size(1), hl = heads_local_;
  // The target: this rank's heads' probabilities (no dropout) summed, then every rank's.
  const Tensor& loss_mask = dsa_.sparse_loss ? ctx.topk_mask : Tensor();
  const Tensor probs =
      core_probs(ctx.qkv, DType::F32, loss_mask, DropoutScope{}, workspace, workspace).probs;
  Tensor ones = workspace.alloc({hl}, probs.dtype());
  kernels::fill(ones, 1.0f);
  Tensor target = workspace.alloc({b, s, s}, DType::F32);
  Tensor target_rows = target.view({b, 1, s * s});
  kernels::batched_gemm(Tensor(ones.storage(), ones.offset(), {b, 1, hl}, {0, hl, 1}, ones.dtype()),
                        false, probs.view({b, hl, s * s}), false, target_rows);
  tp_->all_reduce(target);

  Tensor kl = workspace.alloc({b, s}, DType::F32);
  ctx.indexer_dscores = arena.alloc({b, s, s}, DType::F32);
  kernels::indexer_kl(scores, target, loss_mask, kl, ctx.indexer_dscores);
  // The mean over the b·s queries, times the coefficient (Megatron's indexer loss).
  const float per_query = dsa_.loss_coeff / float(b * s);
  kernels::scale(ctx.indexer_dscores, per_query);
  Tensor row_weights = workspace.alloc({b, s}, DType::F32);
  kernels::fill(row_weights, 1.0f);
  ctx.indexer_loss = kernels::weighted_sum(kl, row_weights).weighted * double(per_query);
}

Tensor ParallelAttention::forward_cached(const Tensor& x, LayerKv& kv, const CacheRows& rows,
                                         Arena& arena) const {
  MT_CHECK(mask_type_ == AttnMaskType::kCausal,
           "incremental decoding needs causal attention (a GPT), not a padding mask");
  MT_CHECK(!indexer_, "incremental decoding with DeepSeek sparse attention is not implemented");
  MT_CHECK(x.dim() == 3, "attention input must be [s, b, h], got ", x.describe());
  const int64_t s = x.size(0), b = x.size(1), hl = heads_local_, d = head_dim_, gl = groups_local_,
                q = queries_;
  MT_CHECK(rows.size() == b && int64_t(rows.starts.size()) == b, "the step has ", b, " rows but ",
           rows.size(), " cache rows");
  MT_CHECK(kv.k.dim() == 4 && kv.k.size(1) == gl && kv.k.size(3) == d, "KV cache ", kv.k.describe(),
           " does not fit ", gl, " local KV heads of ", d);
  check_shape(kv.v, kv.k.shape(), "KV cache values");
  check_dtype(kv.k, x.dtype(), "KV cache keys");
  check_dtype(kv.v, x.dtype(), "KV cache values");
  const int64_t cache_rows = kv.k.size(0), max_s = kv.k.size(2);
  for (int64_t r = 0; r < b; ++r) {
    const int64_t slot = rows.slots[size_t(r)], start = rows.starts[size_t(r)];
    MT_CHECK(slot >= 0 && slot < cache_rows, "cache row ", slot, " is outside the KV cache's ",
             cache_rows);
    MT_CHECK(start >= 0 && start + s <= max_s, "positions [", start, ", ", start + s,
             ") do not fit the KV cache of ", max_s);
  }

  Ctx discarded;                              // no backward
  Tensor qkv = project(discarded, x, arena);  // [s, b, gl, q+2, d]
  if (qk_norm_) qk_norm_->forward_inference(qkv, arena);
  const int64_t group = (q + 2) * d, qkv_row = b * gl * group;
  Tensor context = arena.alloc({s, b, hl * d}, x.dtype());  // [s, b, hl·d]
  const auto start_of = [&](int64_t r) { return rows.starts[size_t(r)]; };
  // Attention of the `n` step rows from `first`, whose cache rows are consecutive from `slot`:
  // one batched GEMM per query of a group over the n·gl heads. Their new keys and values go to
  // positions [start_r, start_r + s) of their cache rows ([B·gl, max_s, d]). Rows at one start
  // use the causal mask (Sq ≤ Sk); decode rows (s = 1) at different starts attend over the
  // longest row's keys with the keys past each row's own masked out (exp(−inf) = 0 exactly).
  const auto attend = [&](int64_t first, int64_t n, int64_t slot) {
    int64_t lo = start_of(first), hi = lo;
    for (int64_t r = first; r < first + n; ++r) {
      lo = std::min(lo, start_of(r));
      hi = std::max(hi, start_of(r));
    }
    const int64_t ng = n * gl, sk = hi + s, qkv_at = first * gl * group,
                  cache_at = slot * gl * max_s * d;
    for (int64_t r = first; r < first + n;) {  // runs of rows at one start
      int64_t e = r + 1;
      while (e < first + n && start_of(e) == start_of(r)) ++e;
      const int64_t at = (slot + r - first) * gl * max_s * d + start_of(r) * d,
                    from = qkv_at + (r - first) * gl * group, heads = (e - r) * gl;
      Tensor k_new = head_view(kv.k, at, heads, s, d, max_s * d, d);
      Tensor v_new = head_view(kv.v, at, heads, s, d, max_s * d, d);
      kernels::copy(head_view(qkv, from + q * d, heads, s, d, group, qkv_row), k_new);
      kernels::copy(head_view(qkv, from + (q + 1) * d, heads, s, d, group, qkv_row), v_new);
      r = e;
    }
    Tensor k = head_view(kv.k, cache_at, ng, sk, d, max_s * d, d);  // [n·gl, sk, d]
    Tensor v = head_view(kv.v, cache_at, ng, sk, d, max_s * d, d);
    Tensor scores = arena.alloc({n, hl, s, sk}, x.dtype());
    for (int64_t i = 0; i < q; ++i) {
      Tensor scores_i = query_scores(scores, i, ng, q, s, sk);
      kernels::batched_gemm(head_view(qkv, qkv_at + i * d, ng, s, d, group, qkv_row), false, k,
                            true, scores_i);
    }
    Tensor probs = arena.alloc({n, hl, s, sk}, x.dtype());
    if (lo == hi) {
      // Causal with Sq < Sk: query i (position start + i) sees keys j <= start + i.
      kernels::scaled_masked_softmax_forward(scores, scale_, true, Tensor(), probs);
    } else {
      std::vector<uint8_t> past(size_t(n * sk), 0);  // [n, sk]: 1 = a key after the row's own
      for (int64_t r = 0; r < n; ++r)
        for (int64_t j = start_of(first + r) + 1; j < sk; ++j) past[size_t(r * sk + j)] = 1;
      const Tensor mask = upload({Tensor::from_vector(past, {n, sk})}, arena)[0];
      kernels::scaled_masked_softmax_forward(scores, scale_, false, mask, probs);
    }
    for (int64_t i = 0; i < q; ++i) {
      Tensor context_i = head_view(context, first * hl * d + i * d, ng, s, d, q * d, b * hl * d);
      kernels::batched_gemm(query_scores(probs, i, ng, q, s, sk), false, v, false, context_i);
    }
  };
  // RoPE over runs of rows at one start: the new positions continue from each row's length.
  for (int64_t r = 0; r < b;) {
    int64_t e = r + 1;
    while (e < b && start_of(e) == start_of(r)) ++e;
    Tensor run = qkv.slice(1, r, e);
    rotate_qk(run, start_of(r), false);
    r = e;
  }
  // Runs of rows whose cache rows are consecutive (decode rows at any starts; others at one).
  for (int64_t r = 0; r < b;) {
    int64_t e = r + 1;
    while (e < b && rows.slots[size_t(e)] == rows.slots[size_t(e - 1)] + 1 &&
           (s == 1 || start_of(e) == start_of(r)))
      ++e;
    attend(r, e - r, rows.slots[size_t(r)]);
    r = e;
  }
  return dense_forward(discarded.dense, context, arena);
}

Tensor ParallelAttention::mla_up_and_rope(Ctx& ctx, Arena& arena) const {
  Tensor qkv = mla_->up(ctx.mla, arena);
  if (qk_norm_) qk_norm_->forward(ctx.qk_norm, qkv, arena);
  rotate_local_qk(qkv, false);
  return qkv;
}

Tensor ParallelAttention::backward(const Ctx& ctx, const Tensor& dout, Arena& arena) const {
  if (!recompute_mla_up_) return backward_from_qkv(ctx, dout, arena);
  Ctx again = ctx;  // --recompute-modules mla_up_proj: Q, K, V once more, from the latents
  again.qkv = mla_up_and_rope(again, arena);
  // DSA's indexer reads the query latent after q_layernorm, which the up projection keeps.
  if (again.indexer.qr.defined())
    again.indexer.qr = mla_->query_input(again.mla).view(ctx.indexer.qr.shape());
  return backward_from_qkv(again, dout, arena);
}

Tensor ParallelAttention::backward_from_qkv(const Ctx& ctx, const Tensor& dout,
                                            Arena& arena) const {
  const int64_t s = ctx.qkv.size(0), b = ctx.qkv.size(1), hl = heads_local_, d = head_dim_,
                gl = groups_local_, q = queries_, bg = b * gl;
  const int64_t group = (q + 2) * d, qkv_row = bg * group;
  Tensor k = head_view(ctx.qkv, q * d, bg, s, d, group, qkv_row);
  Tensor v = head_view(ctx.qkv, (q + 1) * d, bg, s, d, group, qkv_row);

  if (ctx.indexer_dscores.defined()) {  // the indexer's loss, scaled as the LM loss
    Tensor dscores = ctx.indexer_dscores;
    kernels::scale(dscores, ctx.indexer_grad_scale);
    indexer_->backward(ctx.indexer, dscores, arena);
  }
  Tensor dcontext = dense_backward(ctx.dense, dout, arena);  // [s, b, hl·d]
  if (cp_) {
    Tensor dqkv = arena.alloc(ctx.qkv.shape(), dout.dtype());
    cp_->backward(ctx.qkv, ctx.context, ctx.cp, dcontext, cp_params(s, ctx.scope), dqkv, arena);
    return qkv_backward(ctx, dqkv, arena);
  }
  if (flash_attention_ && !indexer_) {
    std::vector<kernels::MaskRow> dropout_rows;
    Tensor dqkv = arena.alloc(ctx.qkv.shape(), dout.dtype());
    kernels::flash_attention_backward(ctx.qkv, ctx.context, ctx.lse, dcontext,
                                      flash_params(b, s, ctx.pad_mask, ctx.scope, dropout_rows),
                                      dqkv);
    return qkv_backward(ctx, dqkv, arena);
  }
  const CoreProbs core = selective_recompute_ ? core_probs(ctx.qkv, ctx.qkv.dtype(), key_mask(ctx),
                                                           ctx.scope, arena, arena)
                                              : CoreProbs{ctx.probs, ctx.dropout_mask};
  // dqkv is fully written by the GEMMs below (dQ_i, dK, dV views tile it).
  Tensor dqkv = arena.alloc(ctx.qkv.shape(), dout.dtype());
  Tensor dk = head_view(dqkv, q * d, bg, s, d, group, qkv_row);
  Tensor dv = head_view(dqkv, (q + 1) * d, bg, s, d, group, qkv_row);

  // K and V serve the q query heads of their group: their gradients sum over i.
  Tensor probs_dropped = dropped_probs(core, arena);
  Tensor dprobs = arena.alloc({b, hl, s, s}, dout.dtype());
  for (int64_t i = 0; i < q; ++i) {
    Tensor dcontext_i = head_view(dcontext, i * d, bg, s, d, q * d, b * hl * d);
    kernels::batched_gemm(query_scores(probs_dropped, i, bg, q, s, s), true, dcontext_i, false, dv,
                          1.0f, i == 0 ? 0.0f : 1.0f);
    Tensor dprobs_i = query_scores(dprobs, i, bg, q, s, s);
    kernels::batched_gemm(dcontext_i, false, v, true, dprobs_i);
  }
  if (core.dropout_mask.defined()) {
    Tensor undropped = arena.alloc({b, hl, s, s}, dout.dtype());
    kernels::dropout_backward(dprobs, core.dropout_mask, dropout_p_, undropped);
    dprobs = undropped;
  }
  Tensor dscores = arena.alloc({b, hl, s, s}, dout.dtype());
  kernels::scaled_masked_softmax_backward(dprobs, core.probs, scale_, dscores);
  for (int64_t i = 0; i < q; ++i) {
    const Tensor dscores_i = query_scores(dscores, i, bg, q, s, s);
    Tensor dq_i = head_view(dqkv, i * d, bg, s, d, group, qkv_row);
    kernels::batched_gemm(dscores_i, false, k, false, dq_i);
    kernels::batched_gemm(dscores_i, true, head_view(ctx.qkv, i * d, bg, s, d, group, qkv_row),
                          false, dk, 1.0f, i == 0 ? 0.0f : 1.0f);
  }
  return qkv_backward(ctx, dqkv, arena);
}

Tensor ParallelAttention::qkv_backward(const Ctx& ctx, Tensor& dqkv, Arena& arena) const {
  rotate_local_qk(dqkv, true);  // gradients w.r.t. Q and K before RoPE
  if (qk_norm_) qk_norm_->backward(ctx.qk_norm, dqkv, arena);
  return mla_ ? mla_->backward(ctx.mla, dqkv, arena)
              : query_key_value_->backward(ctx.qkv_linear, dqkv, arena);
}

Tensor ParallelAttention::project(Ctx& ctx, const Tensor& x, Arena& arena) const {
  return mla_ ? mla_->forward(ctx.mla, x, arena)
              : query_key_value_->forward(ctx.qkv_linear, x, arena);
}

Tensor ParallelAttention::dense_forward(RowParallelLinear::Ctx& ctx, const Tensor& context,
                                        Arena& arena) const {
  if (value_dim_ == head_dim_) return dense_.forward(ctx, context, arena);
  // MLA: the first value_dim_ channels of each head (the rest are the zero padding's).
  const int64_t n = context.size(0) * context.size(1) * heads_local_;
  Tensor values =
      arena.alloc({context.size(0), context.size(1), heads_local_ * value_dim_}, context.dtype());
  Tensor rows = values.view({n, value_dim_});
  kernels::copy(context.view({n, head_dim_}).slice(1, 0, value_dim_), rows);
  return dense_.forward(ctx, values, arena);
}

Tensor ParallelAttention::dense_backward(const RowParallelLinear::Ctx& ctx, const Tensor& dout,
                                         Arena& arena) const {
  Tensor dvalues = dense_.backward(ctx, dout, arena);  // [s, b, hl·dv]
  if (value_dim_ == head_dim_) return dvalues;
  const int64_t s = dvalues.size(0), b = dvalues.size(1), n = s * b * heads_local_;
  Tensor dcontext = arena.alloc({s, b, heads_local_ * head_dim_}, dvalues.dtype());
  kernels::fill(dcontext, 0.0f);  // the padding channels' (they feed nothing)
  Tensor rows = dcontext.view({n, head_dim_}).slice(1, 0, value_dim_);
  kernels::copy(dvalues.view({n, value_dim_}), rows);
  return dcontext;
}

}  // namespace megatron
