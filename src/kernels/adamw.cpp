// Fused AdamW (contract: kernels/adamw.h): argument checks, then the device's backend.
#include "kernels/adamw.h"

#include <initializer_list>

#include "kernels/dispatch.h"

namespace megatron::kernels {

void adamw_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                  const AdamWHyper& h, const std::vector<AdamWRun>& runs) {
  MT_CHECK(h.step >= 1, "adamw_update step must be >= 1, got ", h.step);
  for (const Tensor* t :
       std::initializer_list<const Tensor*>{&param, &grad, &exp_avg, &exp_avg_sq}) {
    check_defined(*t, "adamw_update param/grad/exp_avg/exp_avg_sq");
    check_dtype(*t, DType::F32, "adamw_update param/grad/exp_avg/exp_avg_sq");
    check_contiguous(*t, "adamw_update param/grad/exp_avg/exp_avg_sq");
    MT_CHECK(t->numel() == param.numel(), "adamw_update operands differ in size: ", t->describe(),
             " vs param ", param.describe());
  }
  int64_t previous_end = 0;
  for (const AdamWRun& r : runs) {
    MT_CHECK(previous_end <= r.begin && r.begin <= r.end && r.end <= param.numel(),
             "adamw_update run [", r.begin, ", ", r.end, ") overlaps the previous run (ending at ",
             previous_end, ") or lies outside the ", param.numel(), " elements");
    previous_end = r.end;
  }
  const Device device = operand_device("adamw_update", {&param, &grad, &exp_avg, &exp_avg_sq});
  MT_DISPATCH(device, adamw_update, param, grad, exp_avg, exp_avg_sq, h, runs);
}

void adamw_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                  const AdamWHyper& h) {
  adamw_update(param, grad, exp_avg, exp_avg_sq, h, {{0, param.numel(), true}});
}

}  // namespace megatron::kernels
