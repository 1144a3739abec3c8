// The GeLU forms (kernels/gelu.h) under their HuggingFace activation names, shared by the GPT-2
// and BERT importers/exporters: "gelu" is the exact (erf) form, Megatron's default; "gelu_new",
// "gelu_pytorch_tanh" and "gelu_fast" are the tanh form, Megatron's --openai-gelu.
#pragma once

#include <string>

#include "kernels/gelu.h"

namespace megatron {

// Throws Error naming `key` ("activation_function", "hidden_act") of `model_name`'s config.json
// and the accepted names when `name` is none of the above.
kernels::GeluForm gelu_form_from_hf(const std::string& name, const char* model_name,
                                    const char* key);
// "gelu" or "gelu_new".
const char* hf_gelu_name(kernels::GeluForm form);

}  // namespace megatron
