// The divergence guard: Megatron's --check-for-nan-in-loss-and-grad (on by default), and the
// rule that no checkpoint holding a non-finite value is ever written.
//
// A run that diverges (the learning rate too high, a bad batch) turns its loss, gradients and
// then weights into inf/NaN and would otherwise go on training — and saving — garbage. So,
// on every iteration:
//   - fp32 / bf16: a non-finite loss or gradient norm stops the run *before* the optimizer
//     step, so the weights stay those of the previous iteration;
//   - every precision: non-finite weights after the optimizer step stop the run (--fp16: the
//     loss scaler already skips steps whose gradients overflow, but the f16-rounded weights
//     themselves can still overflow 65504).
// Every rank takes the same decision (the loss and the norm are all-reduced; the weight
// check is all-reduced too), so the run ends on all ranks at once with one message naming
// the iteration and the quantity, exit code 1, and without saving.
//
// Independently of the flag, check_finite_for_checkpoint refuses to write a checkpoint whose
// weights or optimizer state hold a non-finite value.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/number_format.h"
#include "core/tensor.h"
#include "distributed/parallel_state.h"
#include "optim/optimizer.h"
#include "parallel/parameter.h"

namespace megatron {

// Names of the parameters whose slice of `flat` (laid out like elements `range` of
// store.flat_values(), f32; undefined: the parameters' own values) holds an inf or NaN on this
// rank, in store order; empty when all are finite.
std::vector<std::string> non_finite_parameters(const ParameterStore& store, const Tensor& flat,
                                               FlatRange range = {});

class DivergenceGuard {
 public:
  // `fp16`: the loss scaler handles non-finite losses and gradients (skipped steps), so only
  // the weights are checked. `save_dir`, `last_saved`: named in the message.
  DivergenceGuard(bool enabled, bool fp16) : enabled_(enabled), fp16_(fp16) {}
  bool enabled() const { return enabled_; }

  // Before the optimizer step: `quantities` are (name, value) pairs identical on every rank
  // ("lm loss", "grad norm", ...). Throws a collective Error on every rank when one of them
  // is not finite (fp32/bf16 only).
  void check_loss_and_grad(int64_t iteration,
                           const std::vector<std::pair<std::string, double>>& quantities,
                           const ParallelState& ps, const std::string& where_saved) const;

  // After the optimizer step: every model weight (and, for fp16, the fp32 master weights in
  // `master`, when defined). All-reduced over the world; throws a collective Error on every
  // rank when any rank holds a non-finite weight.
  void check_weights(int64_t iteration, ParameterStore& store, const Tensor& master,
                     const ParallelState& ps, const std::string& where_saved) const;

 private:
  bool enabled_, fp16_;
};

// Throws Error (on this rank) naming the buffer and the parameters when a parameter value or
// an optimizer buffer (name -> flat f32, laid out like elements `optimizer_range` of the
// values: the distributed optimizer's shard, or all) holds an inf or NaN.
void check_finite_for_checkpoint(int64_t iteration, const ParameterStore& store,
                                 const std::map<std::string, Tensor>& optimizer_flat_buffers,
                                 FlatRange optimizer_range = {});

}  // namespace megatron
