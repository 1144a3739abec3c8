// `megatron bench`: throughput measurements. Modes are chosen with --mode so each one (kernel
// GEMM/bandwidth table now, whole training steps later) keeps its own file and flags group.
#include <CLI/CLI.hpp>
#include <cstring>

#include "cli/args/arg_table.h"
#include "cli/bench/generate_bench.h"
#include "cli/bench/kernel_bench.h"
#include "cli/bench/machine_bench.h"
#include "cli/bench/moe_layer_bench.h"
#include "cli/bench/step_bench.h"
#include "cli/subcommands.h"

namespace megatron::cli {

int run_bench(int argc, char** argv) {
  // `--mode step` takes every pretrain-gpt flag (some share names with the kernel flags), so
  // it parses its own command line (cli/bench/step_bench.h).
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--mode") && !std::strcmp(argv[i + 1], "step"))
      return run_step_bench(argc, argv);
    if (!std::strcmp(argv[i], "--mode") && !std::strcmp(argv[i + 1], "generate"))
      return run_generate_bench(argc, argv);  // cli/bench/generate_bench.h
    if (!std::strcmp(argv[i], "--mode") && !std::strcmp(argv[i + 1], "machine"))
      return run_machine_bench(argc, argv);  // cli/bench/machine_bench.h, for `megatron plan`
    if (!std::strcmp(argv[i], "--mode") && !std::strcmp(argv[i + 1], "moe"))
      return run_moe_layer_bench(argc, argv);  // cli/bench/moe_layer_bench.h
  }
  CLI::App app{"megatron bench: measure kernel throughput against the machine's own ceilings",
               "megatron bench"};
  std::string mode = "kernels";
  app.add_option(
         "--mode", mode,
         "what to measure (step: whole training steps; generate: KV-cache decoding; "
         "machine: a machine file for `megatron plan`; moe: one mixture-of-experts layer; each "
         "with its own flags)")
      ->check(CLI::IsMember({"kernels"}))
      ->capture_default_str();
  KernelBenchOptions k;
  auto* kg = app.add_option_group("kernels", "--mode kernels");
  kg->add_option("--tokens", k.tokens, "GEMM rows, b·s")->capture_default_str();
  kg->add_option("--hidden-size", k.hidden, "h")->capture_default_str();
  kg->add_option("--ffn-hidden-size", k.ffn, "MLP width (4h)")->capture_default_str();
  kg->add_option("--seq-length", k.seq_length, "attention sequence length s (divides --tokens)")
      ->capture_default_str();
  kg->add_option("--num-attention-heads", k.heads, "attention heads (divides --hidden-size)")
      ->capture_default_str();
  kg->add_option("--vocab-size", k.vocab, "cross-entropy columns and embedding rows")
      ->capture_default_str();
  kg->add_option("--flat-buffer-elements", k.flat_buffer_elements,
                 "parameters of the flat buffers AdamW and the norms pass over")
      ->capture_default_str();
  kg->add_option("--ceiling-size", k.ceiling_size, "size of the square ceiling GEMM")
      ->capture_default_str();
  kg->add_option("--copy-mb", k.copy_mb, "memcpy size for copy bandwidth")->capture_default_str();
  kg->add_option("--min-time", k.min_time, "seconds per measurement")->capture_default_str();
  kg->add_option("--dtype", k.dtypes, "GEMM input dtypes (f32, bf16; f16 on a GPU)")
      ->capture_default_str();
  kg->add_option("--device", k.device, "cpu, cuda, cuda:N")->capture_default_str();
  if (int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;
  return run_kernel_bench(k);
}

}  // namespace megatron::cli
