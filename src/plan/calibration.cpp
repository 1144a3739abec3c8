#include "plan/calibration.h"

#include "core/error.h"

namespace megatron::plan {

double calibrate_gemm_efficiency(Machine& machine, const ModelSpec& model, const Layout& layout,
                                 Implementation impl, double tflops_per_device,
                                 FlopCounting counting) {
  MT_CHECK(tflops_per_device > 0, "the calibration target must be positive TFLOP/s, got ",
           tflops_per_device);
  const Precision dtype = gemm_precision(layout, impl);
  ComputeSpec& spec = const_cast<ComputeSpec&>(machine.compute(dtype));
  auto predicted = [&](double efficiency) {
    spec.gemm_efficiency = efficiency;
    const StepTime t = predict_step_time(model, layout, machine, impl);
    return counting == FlopCounting::kModel ? t.model_tflops_per_device
                                            : t.hardware_tflops_per_device;
  };
  const double at_peak = predicted(1.0);
  MT_CHECK(at_peak >= tflops_per_device, "cannot calibrate to ", tflops_per_device,
           " TFLOP/s per device: even with GEMMs at the machine's peak the model predicts ",
           at_peak,
           " (the rest of the step is communication and memory-bound kernels; check "
           "the machine's bandwidths)");
  double lo = 1e-4, hi = 1.0;
  for (int i = 0; i < 100; ++i) {
    const double mid = 0.5 * (lo + hi);
    (predicted(mid) < tflops_per_device ? lo : hi) = mid;
  }
  spec.gemm_efficiency = 0.5 * (lo + hi);
  return spec.gemm_efficiency;
}

ComputeSpec fit_gemm_model(double peak_flops, const std::vector<GemmSample>& samples) {
  MT_CHECK(peak_flops > 0, "fit_gemm_model: the peak must be positive");
  MT_CHECK(samples.size() >= 2, "fit_gemm_model: needs at least two measured GEMM shapes");
  // Weighted by FLOPs: a step's time is mostly its large GEMMs, and on a busy machine the small
  // ones carry the most noise.
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0, flops_sum = 0, seconds_sum = 0;
  for (const GemmSample& g : samples) {
    MT_CHECK(g.m > 0 && g.n > 0 && g.k > 0 && g.batch > 0 && g.seconds > 0,
             "fit_gemm_model: a sample has a non-positive size or time");
    const double flops = g.batch * 2.0 * g.m * g.n * g.k;
    const double efficiency = flops / (g.seconds * peak_flops);
    const double x = 1.0 / g.m + 1.0 / g.n + 1.0 / g.k, y = 1.0 / efficiency;
    sw += flops;
    sx += flops * x;
    sy += flops * y;
    sxx += flops * x * x;
    sxy += flops * x * y;
    flops_sum += flops;
    seconds_sum += g.seconds;
  }
  const double mx = sx / sw, my = sy / sw;
  const double var = sxx / sw - mx * mx;
  MT_CHECK(var > 0, "fit_gemm_model: the samples need at least two different shapes");
  double slope = (sxy / sw - mx * my) / var;
  double intercept = my - slope * mx;
  if (intercept < 1.0) {
    // Above the peak at infinite size: the peak is the best rate measured, so hold η = 1 and
    // fit c alone (least squares of y − 1 = c·x).
    intercept = 1.0;
    slope = (sxy - sx) / sxx;
  }
  if (slope < 0) {  // noise tilted the line the wrong way: one aggregate efficiency
    slope = 0;
    intercept = seconds_sum * peak_flops / flops_sum;
  }
  ComputeSpec c;
  c.peak_flops = peak_flops;
  c.gemm_efficiency = 1.0 / intercept;
  c.gemm_half_dim = slope / intercept;
  return c;
}

}  // namespace megatron::plan
