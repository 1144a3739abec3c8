#include "optim/divergence_guard.h"

#include <algorithm>
#include <cmath>

#include "distributed/agreement.h"
#include "kernels/elementwise.h"

namespace megatron {

namespace {

// "a, b, c and 4 more"
std::string list_names(const std::vector<std::string>& names, size_t shown = 3) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < shown; ++i) out += (i == 0 ? "" : ", ") + names[i];
  if (names.size() > shown) out += " and " + std::to_string(names.size() - shown) + " more";
  return out;
}

std::string stop_note(const std::string& where_saved) {
  return " Stopped without saving" +
         (where_saved.empty() ? std::string(".") : "; " + where_saved + ".") +
         " Lower --lr (or check the data), then resume from a checkpoint saved before the loss"
         " began to rise — the newest one may already hold diverging (huge but finite)"
         " weights: look at the losses logged before it;"
         " --no-check-for-nan-in-loss-and-grad turns this check off.";
}

}  // namespace

std::vector<std::string> non_finite_parameters(const ParameterStore& store, const Tensor& flat,
                                               FlatRange range) {
  std::vector<std::string> names;
  if (flat.defined() && !kernels::has_inf_or_nan(flat)) return names;
  const int64_t end = range.end < 0 ? store.flat_values().numel() : range.end;
  for (const Parameter& p : store.params()) {
    if (!flat.defined()) {
      if (kernels::has_inf_or_nan(p.value)) names.push_back(p.spec.name);
      continue;
    }
    // The parameter's elements within the range.
    const int64_t lo = std::max(p.flat_offset, range.begin);
    const int64_t hi = std::min(p.flat_offset + shape_numel(p.local_shape), end);
    if (lo < hi && kernels::has_inf_or_nan(flat.slice(0, lo - range.begin, hi - range.begin)))
      names.push_back(p.spec.name);
  }
  return names;
}

void DivergenceGuard::check_loss_and_grad(
    int64_t iteration, const std::vector<std::pair<std::string, double>>& quantities,
    const ParallelState& ps, const std::string& where_saved) const {
  if (!enabled_ || fp16_) return;
  std::string bad;
  for (const auto& [name, value] : quantities) {
    if (std::isfinite(value)) continue;
    bad += (bad.empty() ? "" : " and ") + std::string("the ") + name + " is " +
           format_number(value, "%g");
  }
  if (bad.empty()) return;
  throw_collective_error(*ps.world, 0,
                         "training diverged at iteration " + std::to_string(iteration) + ": " +
                             bad + " (before the optimizer step)." + stop_note(where_saved));
}

void DivergenceGuard::check_weights(int64_t iteration, ParameterStore& store, const Tensor& master,
                                    const ParallelState& ps, const std::string& where_saved) const {
  if (!enabled_) return;
  const bool local_bad = kernels::has_inf_or_nan(store.flat_values()) ||
                         (master.defined() && kernels::has_inf_or_nan(master));
  // Every rank learns whether any failed; rank 0's names are reported when it has some.
  const bool any = ps.world->all_reduce_scalar(local_bad ? 1.0 : 0.0, ReduceOp::MAX) > 0.0;
  if (!any) return;
  std::vector<std::string> names = non_finite_parameters(store, store.flat_values());
  if (master.defined() && names.empty()) names = non_finite_parameters(store, master);
  std::string what =
      names.empty() ? std::string("weights on another rank")
                    : "parameter" + std::string(names.size() > 1 ? "s " : " ") + list_names(names);
  throw_collective_error(*ps.world, 0,
                         "training diverged at iteration " + std::to_string(iteration) + ": " +
                             what + " hold inf or nan after the optimizer step" +
                             (fp16_ ? " (--fp16: the f16 weights overflowed ±65504)" : "") + "." +
                             stop_note(where_saved));
}

void check_finite_for_checkpoint(int64_t iteration, const ParameterStore& store,
                                 const std::map<std::string, Tensor>& optimizer_flat_buffers,
                                 FlatRange optimizer_range) {
  auto check = [&](const std::string& what, const Tensor& flat) {
    const std::vector<std::string> names = non_finite_parameters(store, flat, optimizer_range);
    MT_REQUIRE(names.empty(), "refusing to save the checkpoint of iteration ", iteration, ": ",
               what, " of ", list_names(names),
               " hold inf or nan (a checkpoint must hold finite values only)");
  };
  check("the weights", Tensor());
  const int64_t end = optimizer_range.end < 0 ? store.flat_values().numel() : optimizer_range.end;
  for (const auto& [name, flat] : optimizer_flat_buffers) {
    // A buffer of another layout is the writer's to report (write_optimizer_shard).
    if (!flat.defined() || flat.dim() != 1 || flat.numel() != end - optimizer_range.begin) continue;
    check("optimizer state '" + name + "'", flat);
  }
}

}  // namespace megatron
