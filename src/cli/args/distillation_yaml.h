// --export-kd-cfg: Megatron-LM's distillation config YAML (ModelOpt's DistillationConfig
// fields) read into model/distillation.h's DistillationConfig:
//   logit_layers: ["output_layer", "output_layer"]        (student, teacher)
//   intermediate_layer_pairs: [["decoder.final_layernorm", "decoder.final_layernorm"], ...]
//   skip_lm_loss: true          kd_loss_scale: 1.0          logit_kl_temperature: 1.0
// Absent keys keep Megatron's defaults. A bad file — unreadable, not YAML, an unknown key, a
// value of the wrong type, a module this implementation does not map — is an Error naming the
// file, the key and what is expected.
#pragma once

#include <string>

#include "model/distillation.h"

namespace megatron::cli {

DistillationConfig read_distillation_config(const std::string& path);

// The same from YAML text; `source` names it in errors.
DistillationConfig parse_distillation_config(const std::string& text, const std::string& source);

}  // namespace megatron::cli
