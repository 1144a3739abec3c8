#include "convert/hf_gelu.h"

#include "core/error.h"

namespace megatron {

kernels::GeluForm gelu_form_from_hf(const std::string& name, const char* model_name,
                                    const char* key) {
  if (name == "gelu") return kernels::GeluForm::kErf;
  for (const char* tanh_name : {"gelu_new", "gelu_pytorch_tanh", "gelu_fast"})
    if (name == tanh_name) return kernels::GeluForm::kTanh;
  MT_THROW("HF ", model_name, " config.json: ", key, " '", name,
           "' is not supported (expected gelu, or gelu_new / gelu_pytorch_tanh / gelu_fast)");
}

const char* hf_gelu_name(kernels::GeluForm form) {
  return form == kernels::GeluForm::kErf ? "gelu" : "gelu_new";
}

}  // namespace megatron
