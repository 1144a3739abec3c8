#include "model/bert_pooler.h"

#include "kernels/bias_tanh.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"

namespace megatron {

BertPooler::BertPooler(int64_t hidden_size, float init_std, ParameterStore& store,
                       const ComputeWeights& weights)
    : hidden_size_(hidden_size),
      init_std_(init_std),
      weights_(weights),
      weight_(store.add({"pooler.dense.weight", {hidden_size, hidden_size}, -1, true})),
      bias_(store.add({"pooler.dense.bias", {hidden_size}, -1, false})) {}

void BertPooler::init_weights(ParameterStore& store, uint64_t seed) const {
  init_normal(store.params()[weight_], seed, init_std_);
  init_constant(store.params()[bias_], 0.0f);
}

Tensor BertPooler::forward(Ctx& ctx, const Tensor& hidden, Arena& arena) const {
  const int64_t b = hidden.size(1), h = hidden_size_;
  ctx.cls = arena.alloc({b, h}, DType::F32);  // [b, h]
  const Tensor cls = hidden.select(0, 0);     // [b, h], compute dtype
  if (cls.dtype() == DType::F32)
    ctx.cls.copy_from(cls);
  else
    kernels::cast(cls, ctx.cls);
  ctx.pooled = arena.alloc({b, h}, DType::F32);  // [b, h]
  kernels::gemm(ctx.cls, false, weights_.master(weight_), true, ctx.pooled);
  kernels::bias_tanh_forward(ctx.pooled, weights_.master(bias_), ctx.pooled);
  return ctx.pooled;
}

void BertPooler::backward(const Ctx& ctx, const Tensor& dpooled, Tensor& dhidden,
                          Arena& arena) const {
  const int64_t b = ctx.pooled.size(0), h = hidden_size_;
  check_shape(dpooled, {b, h}, "BERT pooler output gradient");
  Tensor dpre = arena.alloc({b, h}, DType::F32);  // [b, h], before tanh
  kernels::bias_tanh_backward(dpooled, ctx.pooled, dpre, weights_.grad(bias_));
  kernels::gemm(dpre, true, ctx.cls, false, weights_.grad(weight_), 1.0f, 1.0f);
  Tensor dcls = arena.alloc({b, h}, DType::F32);  // [b, h]
  kernels::gemm(dpre, false, weights_.master(weight_), false, dcls);
  Tensor dcls_rows = dhidden.select(0, 0);  // [b, h], contiguous rows of position 0
  kernels::axpy(1.0f, dcls, dcls_rows);
}

}  // namespace megatron
