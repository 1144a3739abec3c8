// Scaled, masked softmax (contract: kernels/softmax.h): argument checks, then the device's
// backend.
#include "kernels/softmax.h"

#include <initializer_list>

#include "kernels/dispatch.h"

namespace megatron::kernels {

void scaled_masked_softmax_forward(const Tensor& scores, float scale, bool causal,
                                   const Tensor& pad_mask, Tensor& probs) {
  check_float_contiguous(scores, "softmax scores");
  MT_CHECK(scores.dim() == 4, "softmax scores must be [B, H, Sq, Sk], got ", scores.describe());
  const int64_t b = scores.size(0), sq = scores.size(2), sk = scores.size(3);
  MT_CHECK(!causal || sq <= sk, "causal softmax needs Sq <= Sk, got scores ", scores.describe());
  check_shape(probs, scores.shape(), "softmax probs");
  check_dtype(probs, scores.dtype(), "softmax probs");
  check_contiguous(probs, "softmax probs");
  if (pad_mask.defined()) {
    check_shape(pad_mask, pad_mask.dim() == 3 ? Shape{b, sq, sk} : Shape{b, sk},
                "softmax pad_mask");
    check_dtype(pad_mask, DType::U8, "softmax pad_mask");
    check_contiguous(pad_mask, "softmax pad_mask");
  }
  const Device device =
      operand_device("scaled_masked_softmax_forward", {&scores, &pad_mask, &probs});
  MT_DISPATCH(device, scaled_masked_softmax_forward, scores, scale, causal, pad_mask, probs);
}

void scaled_masked_softmax_backward(const Tensor& dprobs, const Tensor& probs, float scale,
                                    Tensor& dscores) {
  check_float_contiguous(probs, "softmax backward probs");
  MT_CHECK(probs.dim() >= 1, "softmax backward probs must be [B, H, Sq, Sk], got ",
           probs.describe());
  for (const Tensor* t : std::initializer_list<const Tensor*>{&dprobs, &dscores}) {
    check_shape(*t, probs.shape(), "softmax backward dprobs/dscores");
    check_dtype(*t, probs.dtype(), "softmax backward dprobs/dscores");
    check_contiguous(*t, "softmax backward dprobs/dscores");
  }
  const Device device =
      operand_device("scaled_masked_softmax_backward", {&dprobs, &probs, &dscores});
  MT_DISPATCH(device, scaled_masked_softmax_backward, dprobs, probs, scale, dscores);
}

}  // namespace megatron::kernels
