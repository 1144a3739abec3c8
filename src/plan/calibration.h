// Calibration: set a machine's large-GEMM efficiency from one measured run, so that the
// planner predicts exactly the measured throughput for that run; every other prediction on
// that machine then follows from the model (the paper validation in tests/unit/
// plan_validation_test.cpp uses one such calibration for a whole table).
#pragma once

#include <vector>

#include "plan/step_time.h"

namespace megatron::plan {

enum class FlopCounting { kModel, kHardware };  // plan/flops.h

// Finds the gemm_efficiency (of the layout's GEMM dtype) at which (model, layout) predicts
// `tflops_per_device` TFLOP/s counted as `counting`, stores it in `machine` and returns it.
// Throws when the target is out of reach even with GEMMs at the dtype's peak (then the time
// goes to communication or memory-bound kernels the GEMM efficiency cannot buy back).
double calibrate_gemm_efficiency(Machine& machine, const ModelSpec& model, const Layout& layout,
                                 Implementation impl, double tflops_per_device,
                                 FlopCounting counting);

// One measured GEMM (or batch of equal GEMMs): batch x [m x k]·[k x n] in `seconds`.
struct GemmSample {
  double m = 0, n = 0, k = 0, batch = 1;
  double seconds = 0;
};

// Fits machine.h's GEMM model to measurements: with efficiency_i = flops_i / (seconds_i·peak),
//     1 / efficiency_i = 1/η + (c/η)·(1/m + 1/n + 1/k)
// is linear in x = 1/m + 1/n + 1/k, so η and c come from a least-squares line, each sample
// weighted by its FLOPs (a step's time is mostly its large GEMMs). η is capped at 1 (the peak
// is the best rate measured; c is then fitted alone); when noise tilts the line the wrong way,
// c = 0 and η is the samples' aggregate rate over the peak. Needs two distinct shapes.
ComputeSpec fit_gemm_model(double peak_flops, const std::vector<GemmSample>& samples);

}  // namespace megatron::plan
