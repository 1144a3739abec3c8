// `megatron bench --mode step`: whole training steps of a GPT on mock data, reporting
// tokens/s, TFLOP/s per process (Megatron's FLOP formula), MFU against a GEMM ceiling measured
// in the same run and compute dtype, and the share of step time spent in communication.
#pragma once

namespace megatron::cli {

// argv: the bench flags (every pretrain-gpt flag, plus --warmup-iters, --timed-iters and
// --mode step). Returns the exit code.
int run_step_bench(int argc, char** argv);

}  // namespace megatron::cli
