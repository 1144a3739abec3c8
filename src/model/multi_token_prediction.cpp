#include "model/multi_token_prediction.h"

#include <string>

#include "kernels/elementwise.h"
#include "kernels/indexing.h"
#include "parallel/mappings.h"

namespace megatron {

namespace {

// The MTP layer's configuration: the decoder's, with one context-parallel communication type
// (a per-layer list has no entry past the decoder's layers; MTP runs without CP).
TransformerConfig depth_layer_config(const TransformerConfig& decoder) {
  TransformerConfig c = decoder;
  c.cp_comm_type = {decoder.cp_comm_type_of(decoder.num_layers - 1)};
  return c;
}

}  // namespace

struct MultiTokenPrediction::Depth {
  Depth(int d, const TransformerConfig& c, bool moe, const ParallelState& ps, ParameterStore& store,
        const ComputeWeights& weights)
      : first_param(store.params().size()),
        enorm(prefix(d) + "enorm", c.hidden_size, c.layernorm_epsilon, store, weights,
              transformer_norm_options(c)),
        hnorm(prefix(d) + "hnorm", c.hidden_size, c.layernorm_epsilon, store, weights,
              transformer_norm_options(c)),
        eh_proj({.name = prefix(d) + "eh_proj",
                 .input_size = 2 * c.hidden_size,
                 .output_size = c.hidden_size,
                 .bias = false,
                 .sequence_parallel = c.sequence_parallel,
                 .init_std = c.hidden_init_std()},
                ps, store, weights),
        layer(c.num_layers + d, prefix(d) + "transformer_layer.", moe, depth_layer_config(c), ps,
              store, weights),
        final_ln(prefix(d) + "final_layernorm", c.hidden_size, c.layernorm_epsilon, store, weights,
                 transformer_norm_options(c)),
        end_param(store.params().size()) {}

  static std::string prefix(int d) { return "mtp.layers." + std::to_string(d) + "."; }

  size_t first_param;  // [first_param, end_param): this depth's parameters in the store
  LayerNorm enorm, hnorm;
  ColumnParallelLinear eh_proj;
  TransformerLayer layer;
  LayerNorm final_ln;
  size_t end_param;
};

MultiTokenPrediction::MultiTokenPrediction(const TransformerConfig& config, const ParallelState& ps,
                                           ParameterStore& store, const ComputeWeights& weights)
    : num_layers_(config.num_layers),
      hidden_size_(config.hidden_size),
      sequence_parallel_(config.sequence_parallel),
      moe_(config.is_moe_layer(config.num_layers - 1)),
      tp_(ps.tp),
      store_(&store) {
  MT_CHECK(config.arch.mtp.enabled(), "MultiTokenPrediction needs --mtp-num-layers >= 1");
  MT_REQUIRE(ps.cp_size == 1,
             "multi-token prediction (--mtp-num-layers) with --context-parallel-size > 1 is not "
             "implemented: give --context-parallel-size 1");
  for (int d = 0; d < config.arch.mtp.num_layers; ++d)
    depths_.push_back(std::make_unique<Depth>(d, config, moe_, ps, store, weights));
}

MultiTokenPrediction::~MultiTokenPrediction() = default;

void MultiTokenPrediction::init_weights(ParameterStore& store, uint64_t seed) const {
  for (const auto& depth : depths_) {
    depth->enorm.init_weights(store);
    depth->hnorm.init_weights(store);
    depth->eh_proj.init_weights(store, seed);
    depth->layer.init_weights(store, seed);
    depth->final_ln.init_weights(store);
  }
}

std::vector<Tensor> MultiTokenPrediction::forward(Ctx& ctx, const Tensor& hidden,
                                                  const Tensor& tokens,
                                                  const InputEmbedding& embedding,
                                                  const DropoutScope& scope, Arena& arena,
                                                  Arena& scratch) const {
  const int64_t h = hidden_size_;
  MT_CHECK(hidden.dim() == 3 && hidden.size(2) == h, "the MTP block's input must be [s, b, ", h,
           "], got ", hidden.describe());
  ctx.depths.assign(depths_.size(), {});
  ctx.moe_losses = {};
  ctx.aux_loss = 0;
  std::vector<Tensor> outputs;
  Tensor previous = hidden;  // h_{k−1}
  for (size_t d = 0; d < depths_.size(); ++d) {
    const Depth& depth = *depths_[d];
    DepthCtx& c = ctx.depths[d];
    const Tensor embedded = embedding.forward_shifted(c.embedding, tokens, int64_t(d) + 1,
                                                      num_layers_ + int(d), scope, arena);
    MT_CHECK(embedded.shape() == previous.shape(), "the shifted embedding ", embedded.describe(),
             " does not match the hidden states ", previous.describe());
    const Tensor e = depth.enorm.forward(c.enorm, embedded, arena);
    const Tensor p = depth.hnorm.forward(c.hnorm, previous, arena);
    // [enorm(e), hnorm(h)] along the channels (Megatron's order: the embedding first).
    const int64_t rows = e.numel() / h;
    Tensor cat = arena.alloc({previous.size(0), previous.size(1), 2 * h}, e.dtype());
    Tensor cat_rows = cat.view({rows, 2 * h});
    Tensor left = cat_rows.slice(1, 0, h), right = cat_rows.slice(1, h, 2 * h);
    kernels::copy(e.view({rows, h}), left);
    kernels::copy(p.view({rows, h}), right);
    // This rank's output columns of the whole sequence [s, b, h/t] → all of them → with
    // sequence parallelism this rank's shard again.
    Tensor x =
        GatherFromTpRegion::forward(*tp_, depth.eh_proj.forward(c.eh_proj, cat, arena), arena);
    if (sequence_parallel_) x = ScatterToSequenceParallelRegion::forward(*tp_, x, arena);
    scratch.reset();
    const Tensor y = depth.layer.forward(c.layer, x, Tensor(), scope, arena, scratch);
    ctx.moe_losses += depth.layer.moe_losses(c.layer);
    ctx.aux_loss += c.layer.attention.indexer_loss;
    previous = depth.final_ln.forward(c.final_ln, y, arena);
    outputs.push_back(previous);
  }
  return outputs;
}

Tensor MultiTokenPrediction::backward(Ctx& ctx, std::vector<Tensor> douts,
                                      const InputEmbedding& embedding, float loss_scale,
                                      Arena& arena, Arena& scratch) const {
  MT_CHECK(douts.size() == depths_.size() && ctx.depths.size() == depths_.size(),
           "the MTP backward takes one output gradient per depth after a forward");
  const int64_t h = hidden_size_;
  Tensor dprevious;  // the gradient of h_{k−1} from depth k's hnorm
  for (size_t d = depths_.size(); d-- > 0;) {
    const Depth& depth = *depths_[d];
    DepthCtx& c = ctx.depths[d];
    Tensor dout = douts[d];  // h_k's gradient: its head's, plus depth k + 1's
    if (dprevious.defined()) kernels::axpy(1.0f, dprevious, dout);
    Tensor dy = arena.alloc(dout.shape(), dout.dtype());
    depth.final_ln.backward(c.final_ln, dout, dy, 0.0f);
    scratch.reset();
    c.layer.attention.indexer_grad_scale = loss_scale;
    Tensor dx = kernels::copy_into(arena, depth.layer.backward(c.layer, dy, loss_scale, scratch));
    if (sequence_parallel_) dx = ScatterToSequenceParallelRegion::backward(*tp_, dx, arena);
    const Tensor dcat = depth.eh_proj.backward(
        c.eh_proj, GatherFromTpRegion::backward(*tp_, dx, arena), arena);  // [s, b, 2h]
    const int64_t rows = dcat.numel() / (2 * h);
    const Tensor dcat_rows = dcat.view({rows, 2 * h});
    Tensor de = kernels::copy_into(arena, dcat_rows.slice(1, 0, h));
    Tensor dp = kernels::copy_into(arena, dcat_rows.slice(1, h, 2 * h));
    Tensor dembedded = arena.alloc({rows, h}, de.dtype());
    depth.enorm.backward(c.enorm, de, dembedded, 0.0f);
    embedding.backward(c.embedding, dembedded.view(dout.shape()), arena);
    dprevious = arena.alloc(dout.shape(), dout.dtype());
    Tensor dprevious_rows = dprevious.view({rows, h});
    depth.hnorm.backward(c.hnorm, dp, dprevious_rows, 0.0f);
    store_->grads_accumulated(depth.first_param, depth.end_param);
  }
  return dprevious;
}

Tensor shift_sequence_left(const Tensor& x, int64_t shift, Arena& arena) {
  MT_CHECK(x.dim() == 2 && x.is_contiguous() && shift >= 1 && shift < x.size(0),
           "shift_sequence_left: a contiguous [s, b] tensor and 1 <= shift < s, got ", x.describe(),
           " and ", shift);
  const int64_t s = x.size(0);
  Tensor out = arena.alloc(x.shape(), x.dtype());
  Tensor head = out.slice(0, 0, s - shift), tail = out.slice(0, s - shift, s);
  kernels::copy(x.slice(0, shift, s), head);
  if (x.dtype() == DType::I32)
    kernels::fill_positions(tail, tail.numel(), 0);  // one "sample" of all the rows: zeros
  else
    kernels::fill(tail, 0.0f);
  return out;
}

}  // namespace megatron
