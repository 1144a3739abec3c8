// `megatron bench --mode generate`: KV-cache generation speed of a GPT (GPT-2 124M by default,
// random weights) — prefill tokens/s and decode ms/token at each batch size and dtype — and,
// for decode, the GB/s of weights read per step against the machine's copy bandwidth measured
// in the same run (decode at batch 1 reads every weight once per token: memory-bound).
#pragma once

namespace megatron::cli {

int run_generate_bench(int argc, char** argv);

}  // namespace megatron::cli
