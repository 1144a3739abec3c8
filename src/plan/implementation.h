// Implementation: which training software the plan is for. The same model and layout keep
// different activations, move different bytes and store different optimizer state depending
// on the code that runs them, so the planner models each one explicitly:
//
//   megatron-cpp     this project: activations in arenas (model/), fused bias+dropout+residual
//                    and bias+GeLU kernels, f32 logits, full recompute only, TP x PP (GPT) x
//                    DP with the distributed optimizer, the Llama options in GPT (no sequence
//                    parallelism, selective recompute or communication overlap).
//   megatron-lm      NVIDIA's Megatron-LM today: Korthikanti et al. (2022) activation
//                    accounting (as megatron/training/theoretical_memory_usage.py), fused
//                    kernels, fp32 main gradients, every layout option.
//   megatron-lm-2019 Megatron-LM as in Shoeybi et al. (2019): unfused PyTorch element-wise ops,
//                    fp16 gradients reduced in fp16, apex fp16 optimizer; for the paper's
//                    weak-scaling validation.
#pragma once

#include <string>

namespace megatron::plan {

enum class Implementation { kMegatronCpp, kMegatronLm, kMegatronLm2019 };

const char* implementation_name(Implementation impl);

// "megatron-cpp" | "megatron-lm" | "megatron-lm-2019"; throws naming the accepted values.
Implementation implementation_from_name(const std::string& name);

}  // namespace megatron::plan
