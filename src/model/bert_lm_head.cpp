#include "model/bert_lm_head.h"

#include "kernels/bias_add.h"
#include "kernels/elementwise.h"
#include "kernels/gelu.h"
#include "kernels/gemm.h"
#include "parallel/mappings.h"

namespace megatron {

BertLmHead::BertLmHead(const BertConfig& config, const ParallelState& ps, ParameterStore& store,
                       const ComputeWeights& weights, const VocabParallelEmbedding& word_embeddings)
    : config_(config),
      tp_(ps.tp),
      weights_(weights),
      word_(word_embeddings),
      dense_weight_(
          store.add({"lm_head.dense.weight", {config.hidden_size, config.hidden_size}, -1, true})),
      dense_bias_(store.add({"lm_head.dense.bias", {config.hidden_size}, -1, false})),
      bias_(store.add({"lm_head.bias", {config.padded_vocab_size}, 0, false, config.vocab_size})),
      layernorm_("lm_head.layernorm", config.hidden_size, config.layernorm_epsilon, store,
                 weights) {}

void BertLmHead::init_weights(ParameterStore& store, uint64_t seed) const {
  init_normal(store.params()[dense_weight_], seed, config_.init_method_std);
  init_constant(store.params()[dense_bias_], 0.0f);
  init_constant(store.params()[bias_], 0.0f);
  layernorm_.init_weights(store);
}

Tensor BertLmHead::forward(Ctx& ctx, const Tensor& x, Arena& arena) const {
  const int64_t n = x.size(0), h = config_.hidden_size;
  check_shape(x, {n, h}, "BERT LM head input");
  ctx.input = x;
  ctx.pre_activation = arena.alloc({n, h}, x.dtype());  // [n, h]
  kernels::gemm(x, false, weights_.weight(dense_weight_), true, ctx.pre_activation);
  Tensor activated = arena.alloc({n, h}, x.dtype());  // [n, h]
  kernels::bias_gelu_forward(ctx.pre_activation, weights_.weight(dense_bias_), activated,
                             config_.gelu);
  ctx.normed = CopyToTpRegion::forward(layernorm_.forward(ctx.layernorm, activated, arena));

  const Tensor& table = word_.weight();                         // [V/t, h]
  Tensor logits = arena.alloc({n, table.size(0)}, DType::F32);  // [n, V/t]
  kernels::gemm(ctx.normed, false, table, true, logits);
  // The bias is added in f32 from the master copy: the logits are f32 for the cross-entropy.
  kernels::bias_add_forward(logits, weights_.master(bias_));
  return logits;
}

Tensor BertLmHead::backward(const Ctx& ctx, const Tensor& dlogits, Arena& arena) const {
  const int64_t n = ctx.input.size(0), h = config_.hidden_size;
  kernels::bias_add_backward(dlogits, weights_.grad(bias_));
  Tensor dl = dlogits;  // [n, V/t] in the compute dtype for the GEMMs
  if (weights_.dtype() != DType::F32) {
    dl = arena.alloc(dlogits.shape(), weights_.dtype());
    kernels::cast(dlogits, dl);
  }
  kernels::gemm(dl, true, ctx.normed, false, word_.weight_grad(), 1.0f, 1.0f);
  Tensor dnormed = arena.alloc({n, h}, weights_.dtype());  // [n, h]
  kernels::gemm(dl, false, word_.weight(), false, dnormed);
  CopyToTpRegion::backward(*tp_, dnormed);

  Tensor dactivated = arena.alloc({n, h}, weights_.dtype());  // [n, h]
  layernorm_.backward(ctx.layernorm, dnormed, dactivated, 0.0f);
  Tensor dpre = arena.alloc({n, h}, weights_.dtype());  // [n, h]
  kernels::bias_gelu_backward(dactivated, ctx.pre_activation, weights_.weight(dense_bias_), dpre,
                              weights_.grad(dense_bias_), config_.gelu);
  kernels::gemm(dpre, true, ctx.input, false, weights_.grad(dense_weight_), 1.0f, 1.0f);
  Tensor dx = arena.alloc({n, h}, weights_.dtype());  // [n, h]
  kernels::gemm(dpre, false, weights_.weight(dense_weight_), false, dx);
  return dx;
}

}  // namespace megatron
