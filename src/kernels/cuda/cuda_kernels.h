// The CUDA backend's entry points: one twin per kernel contract, same name and signature, called
// only by kernels/<concept>.cpp after it validated the operands (see kernels/dispatch.h).
// Operands are device tensors of the current GPU. Every launch goes on this process's compute
// stream (core/cuda/cuda_context.h); nothing here synchronises the host except the kernels that
// return a host value (sum_squares, has_inf_or_nan, count_zeros, weighted_sum,
// first_out_of_range, sample_candidates).
// Implementations live in kernels/cuda/<concept>.cu; built only with MEGATRON_CUDA.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/adamw.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/flash_attention.h"
#include "kernels/gelu.h"
#include "kernels/gemm_problem.h"
#include "kernels/rotary.h"

namespace megatron::kernels::cuda {

// kernels/gemm.h (gemm and batched_gemm both arrive as one GemmProblem)
void gemm(const GemmProblem& p);

// kernels/elementwise.h
void cast(const Tensor& src, Tensor& dst);
void copy(const Tensor& src, Tensor& dst);
void fill(Tensor& t, float value);
void scale(Tensor& t, float factor);
void axpy(float alpha, const Tensor& x, Tensor& y);
double sum_squares(const Tensor& t);
bool has_inf_or_nan(const Tensor& t);
int64_t count_zeros(const Tensor& t);
WeightedSum weighted_sum(const Tensor& values, const Tensor& weights);

// kernels/indexing.h
void fill_positions(Tensor& ids, int64_t batch, int64_t start);
int64_t first_out_of_range(const Tensor& ids, int64_t lo, int64_t hi);

// kernels/layernorm.h
void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                       Tensor& y, Tensor& mean, Tensor& rstd);
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                        float beta_dx);

// kernels/rmsnorm.h
void rmsnorm_forward(const Tensor& x, const Tensor& gamma, float eps, Tensor& y, Tensor& rstd);
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd,
                      Tensor& dx, Tensor& dgamma, float beta_dx);

// kernels/rotary.h
void rotary_embedding(const Tensor& x, int64_t position_start, const RotaryParams& p, bool inverse,
                      Tensor& y);

// kernels/swiglu.h
void swiglu_forward(const Tensor& x, Tensor& y);
void swiglu_backward(const Tensor& dy, const Tensor& x, Tensor& dx);

// kernels/bias_add.h
void bias_add_forward(Tensor& y, const Tensor& bias);
void bias_add_backward(const Tensor& dy, Tensor& dbias);

// kernels/gelu.h
void bias_gelu_forward(const Tensor& x, const Tensor& bias, Tensor& y, GeluForm form);
void bias_gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& bias, Tensor& dx,
                        Tensor& dbias, GeluForm form);

// kernels/bias_tanh.h
void bias_tanh_forward(const Tensor& x, const Tensor& bias, Tensor& y);
void bias_tanh_backward(const Tensor& dy, const Tensor& y, Tensor& dx, Tensor& dbias);

// kernels/dropout.h
void dropout_mask(uint64_t seed, const std::vector<MaskRow>& rows, float p, Tensor& mask);
void dropout_forward(const Tensor& x, const Tensor& mask, float p, Tensor& y);
void dropout_backward(const Tensor& dy, const Tensor& mask, float p, Tensor& dx);
void bias_dropout_add_forward(const Tensor& x, const Tensor& bias, const Tensor& residual,
                              const Tensor& mask, float p, Tensor& y);
void bias_dropout_add_backward(const Tensor& dy, const Tensor& mask, float p, Tensor& dx,
                               Tensor& dbias);

// kernels/softmax.h
void scaled_masked_softmax_forward(const Tensor& scores, float scale, bool causal,
                                   const Tensor& pad_mask, Tensor& probs);
void scaled_masked_softmax_backward(const Tensor& dprobs, const Tensor& probs, float scale,
                                    Tensor& dscores);

// kernels/flash_attention.h
void flash_attention_forward(const Tensor& qkv, const FlashAttentionParams& params, Tensor& out,
                             Tensor& lse);
void flash_attention_backward(const Tensor& qkv, const Tensor& out, const Tensor& lse,
                              const Tensor& dout, const FlashAttentionParams& params, Tensor& dqkv);

// kernels/cross_entropy.h
void cross_entropy_row_max(const Tensor& logits, int64_t valid_cols, Tensor& row_max);
void cross_entropy_sum_exp_target(const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                                  int64_t valid_cols, const Tensor& row_max, Tensor& sum_exp,
                                  Tensor& target_logit);
void cross_entropy_loss(const Tensor& row_max, const Tensor& sum_exp, const Tensor& target_logit,
                        Tensor& loss);
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                            int64_t valid_cols, const Tensor& row_max, const Tensor& sum_exp,
                            const Tensor& dloss, Tensor& dlogits);

// kernels/embedding.h
void embedding_forward(const Tensor& ids, const Tensor& table, int64_t vocab_start, Tensor& out);
void embedding_backward(const Tensor& dout, const Tensor& ids, int64_t vocab_start, Tensor& dtable);

// kernels/sampling.h
void topk_rows(const Tensor& values, const Tensor& ids, int64_t id_offset, int64_t valid_cols,
               Tensor& out_values, Tensor& out_ids);
void gumbel_max_rows(const Tensor& values, int64_t id_offset, int64_t valid_cols, uint64_t seed,
                     const std::vector<uint64_t>& row_keys, Tensor& out_values, Tensor& out_ids);
int64_t sample_candidates(const Tensor& values, const Tensor& ids, const Tensor& row_max,
                          const Tensor& sum_exp, float top_p, bool whole_vocabulary, uint64_t seed,
                          const std::vector<uint64_t>& row_keys, Tensor& out_ids);

// kernels/adamw.h
void adamw_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                  const AdamWHyper& h, const std::vector<AdamWRun>& runs);

}  // namespace megatron::kernels::cuda
