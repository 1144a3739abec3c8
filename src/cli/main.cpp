// `megatron SUBCOMMAND [flags]` — the one binary.
#include <malloc.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <string>

#include "cli/subcommands.h"
#include "cli/version.h"
#include "core/error.h"
#include "core/logging.h"
#include "distributed/runtime.h"

namespace {

struct Subcommand {
  const char* name;
  int (*run)(int, char**);
  const char* help;
};

const Subcommand kSubcommands[] = {
    {"preprocess", megatron::cli::run_preprocess,
     "tokenize loose JSON into an indexed dataset (.bin/.idx)"},
    {"merge-datasets", megatron::cli::run_merge_datasets,
     "concatenate the indexed datasets of a directory (tools/merge_datasets.py)"},
    {"bench", megatron::cli::run_bench, "measure kernel and step throughput, TFLOP/s, MFU"},
    {"convert", megatron::cli::run_convert,
     "import/export HF GPT-2, change the tensor-parallel size of a checkpoint"},
    {"comm-check", megatron::cli::run_comm_check,
     "verify collectives and the rank grid on all ranks; all-reduce bandwidth"},
    {"pretrain-gpt", megatron::cli::run_pretrain_gpt,
     "pretrain GPT with tensor x data parallelism (Megatron-LM flags)"},
    {"pretrain-bert", megatron::cli::run_pretrain_bert,
     "pretrain BERT (MLM + sentence order) with tensor x data parallelism"},
    {"generate", megatron::cli::run_generate,
     "generate text from a GPT checkpoint (KV cache, tensor parallel, streaming)"},
    {"serve", megatron::cli::run_serve,
     "Megatron's text generation REST API (PUT /api) and a web page, rank 0 speaking HTTP"},
    {"plan", megatron::cli::run_plan,
     "predict memory and step time of a model x machine x layout; --search for layouts"},
    {"plot", megatron::cli::run_plot,
     "draw training and validation loss from --metrics-file (SVG + terminal)"},
    {"eval", megatron::cli::run_eval,
     "zero-shot GPT evaluation: WikiText-103 perplexity, LAMBADA accuracy (Megatron's tasks)"},
    {"finetune", megatron::cli::run_finetune,
     "finetune a BERT on RACE, MNLI or QQP; per-epoch validation accuracy (Megatron's tasks)"},
    {"launch", megatron::cli::run_launch,
     "run a training job, restarting it from its newest checkpoint when it fails"},
};

void print_usage() {
  std::printf(
      "usage: megatron SUBCOMMAND [flags]   (megatron SUBCOMMAND --help for flags)\n"
      "       megatron --version            (version, build, this CPU and its GEMM kernels)\n\n");
  for (const Subcommand& s : kSubcommands) std::printf("  %-14s %s\n", s.name, s.help);
}

// Debian's OpenBLAS 0.3.21 misdetects recent (AVX-512) Xeons as Prescott and runs its f32
// GEMM 5-8x slower unless OPENBLAS_CORETYPE is set before the library initialises, i.e. before
// main(). So on AVX-512 CPUs it is set; a user's own setting is respected. Other CPUs (e.g. AMD
// Zen, no AVX-512) are detected correctly, and forcing SkylakeX there would crash with SIGILL.
bool set_openblas_coretype() {
#ifdef MEGATRON_HAS_OPENBLAS
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr || !__builtin_cpu_supports("avx512f"))
    return false;
  setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
  return true;
#else
  return false;  // built without OpenBLAS: nothing to tune
#endif
}

// How many processes of this job the launcher started on this machine (1 without one):
// OpenMPI's mpirun and MPICH's hydra say so; srun lists the global ids of this node's tasks in
// SLURM_GTIDS ("0,1,2,3"). OpenMPI sets its variable inside MPI_Init when srun starts the
// ranks, too late for the libraries that read OMP_NUM_THREADS as they load.
int processes_on_this_machine() {
  if (const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) return std::atoi(local);
  if (const char* local = std::getenv("MPI_LOCALNRANKS")) return std::atoi(local);
  if (const char* tasks = std::getenv("SLURM_GTIDS"); tasks != nullptr && *tasks != '\0')
    return 1 + int(std::count(tasks, tasks + std::strlen(tasks), ','));
  return 1;
}

// Under mpirun or srun every process of a machine would start one OpenMP (and OpenBLAS) thread
// per core: with 2 processes on 2 cores, 4 spinning threads on 2 cores, several times slower.
// Unless the user set OMP_NUM_THREADS, each process gets the cores it may run on, shared with
// the other processes of its machine when the launcher did not bind them apart.
bool set_threads_per_process() {
  if (std::getenv("OMP_NUM_THREADS") != nullptr) return false;
  const int processes = processes_on_this_machine();
  if (processes <= 1) return false;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return false;
  const int mine = CPU_COUNT(&set);
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  const int threads = mine < online ? mine : std::max(1, mine / processes);
  setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 1);
  return true;
}

// With OpenMP's default (active) wait an idle OpenMP worker keeps spinning on a core that
// another thread pool (Debian's pthreads build of OpenBLAS, when the build could not link the
// OpenMP one) or another process needs: on a loaded 2-core machine the 1 process x 2 threads
// GPT-2 step ran 2.7x slower than with passive waiting, its small OpenMP kernels at 10-40x
// their byte floor (bench/RESULTS.md). With OpenBLAS on OpenMP's own pool active waiting no
// longer costs that much (within noise of passive, §6), but processes sharing cores under
// mpirun still do, so passive stays the default. Passive waiting puts idle workers to sleep at
// once; a user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT is respected.
bool set_passive_omp_wait() {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr)
    return false;
  setenv("OMP_WAIT_POLICY", "passive", 1);
  return true;
}

// glibc's malloc raises its mmap threshold to the size of each mmapped block it frees (up to
// 32 MiB) and its trim threshold with it. The arenas free such blocks when they merge in the
// first steps, after which allocations below the raised threshold go to the brk heap, which
// does not shrink: block recompute's peak RSS grew by 400 MiB over its tensors' peak
// (bench/RESULTS.md, "Block recompute"). Fixed thresholds keep every block of 1 MiB or more
// in its own mapping (returned when freed); the 256 MiB trim threshold keeps the heap's
// smaller per-step allocations resident, so a step still takes no page faults. A user's own
// MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ is respected.
void fix_malloc_thresholds() {
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr ||
      std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr)
    return;
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

// These variables are read when the libraries load, before main(): the binary re-executes
// itself once with them set.
void prepare_environment(char** argv) {
  const bool coretype = set_openblas_coretype();
  const bool threads = set_threads_per_process();
  const bool wait = set_passive_omp_wait();
  if (coretype || threads || wait) execv("/proc/self/exe", argv);
  // execv only returns on failure; carry on with the defaults rather than fail.
}

}  // namespace

int main(int argc, char** argv) {
  prepare_environment(argv);
  fix_malloc_thresholds();
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::fputs(megatron::cli::version_report().c_str(), stdout);
    return 0;
  }
  for (const Subcommand& s : kSubcommands) {
    if (std::strcmp(argv[1], s.name) != 0) continue;
    // The runtime (MPI) must outlive the try block: a failing rank reports and aborts the
    // job with MPI still running, instead of finalizing while other ranks wait on it.
    std::optional<megatron::DistRuntime> runtime;
    try {
      runtime.emplace(argc, argv);
    } catch (const megatron::Error& e) {
      if (!e.collective() || e.reporting()) megatron::log_error(e.report());
      return 1;
    }
    try {
      return s.run(argc - 1, argv + 1);
    } catch (const megatron::Error& e) {
      // Every rank raised a collective error together: one of them reports it, and all end
      // cleanly (MPI_Finalize as `runtime` goes) with the same exit code.
      if (e.collective()) {
        if (e.reporting()) megatron::log_error(e.report());
        return 1;
      }
      megatron::abort_job(e.report(), 1);
    } catch (const std::exception& e) {
      megatron::abort_job(std::string("unexpected error: ") + e.what(), 1);
    }
  }
  std::fprintf(stderr, "error: unknown subcommand '%s'\n\n", argv[1]);
  print_usage();
  return 2;
}
