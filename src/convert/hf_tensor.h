// The tensors of a HuggingFace checkpoint as every family's converter sees them: a map from
// name to tensor, and hf_tensor_to_f32, an HF tensor (F32, F16, BF16 or F64, any strides) as a
// fresh contiguous f32 tensor — the one dtype conversion the HF GPT-2 and BERT importers share.
#pragma once

#include <map>
#include <string>

#include "core/tensor.h"

namespace megatron {

// HF or megatron-cpp parameter name → tensor.
using TensorMap = std::map<std::string, Tensor>;

// A contiguous f32 copy of `t` (same shape); `model_name` ("GPT-2", "BERT") names the model in
// the Error thrown for a non-float dtype.
Tensor hf_tensor_to_f32(const Tensor& t, const char* model_name);

// A contiguous copy of the matrix `t` [a, b] transposed to [b, a]: HF GPT-2's Conv1D weights
// are stored [in, out], the transpose of a linear layer's [out, in].
Tensor transposed_matrix(const Tensor& t);

}  // namespace megatron
