// `megatron bench --mode moe`: one mixture-of-experts layer (model/moe_layer.h) on random
// tokens — Mixtral's shape by default: 8 SwiGLU experts of width 3584, top-2 softmax routing,
// hidden 1024, 4096 tokens per rank, no load-balancing loss (HF's MixtralSparseMoeBlock has none
// inside the block) — reporting per dtype:
//   - the training step of the layer (forward with routing, backward with every weight
//     gradient), best of --repeats, and with expert parallelism the part of it spent inside the
//     token exchange's all-to-all (exposed: the layer waits for it);
//   - the experts' grouped GEMM (kernels/grouped_gemm.h, fc1 on the step's own routed groups)
//     against one dense GEMM of the same rows and FLOPs measured in the same process (its
//     ceiling), as GFLOP/s and a ratio.
// Under `mpirun -np N` the N ranks form an expert-parallel group of N (TP 1, data parallel N,
// EP N). bench/moe_layer.sh runs it beside tools/reference/bench_pytorch_moe_layer.py.
#pragma once

namespace megatron::cli {

int run_moe_layer_bench(int argc, char** argv);

}  // namespace megatron::cli
