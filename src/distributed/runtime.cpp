#include "distributed/runtime.h"

#ifdef MEGATRON_HAS_MPI
#include <mpi.h>
#endif

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <thread>

#include "core/error.h"
#include "core/logging.h"
#ifdef MEGATRON_HAS_MPI
#include "distributed/mpi_communicator.h"
#endif
#include "distributed/solo_communicator.h"

namespace megatron {

namespace {

std::shared_ptr<Communicator> g_world;  // set while a DistRuntime is alive
int g_local_rank = 0;
std::atomic<bool> g_aborting{false};  // abort_job's message is printed once per process

#ifdef MEGATRON_HAS_MPI
bool mpi_active() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}
#endif

bool env_set(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0';
}

// An uncaught exception (in main or in a helper thread) must still take the job down with
// a message, not leave the other ranks hanging.
[[noreturn]] void terminate_handler() {
  std::string message = "terminate called without an active exception";
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      message = std::string("uncaught exception: ") + ex.what();
    } catch (...) {
      message = "uncaught exception of unknown type";
    }
  }
  abort_job(message, 1);
}

std::optional<int> env_rank(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(value, &end, 10);
  MT_REQUIRE(errno == 0 && *end == '\0' && v >= 0 && v <= INT_MAX, "environment variable ", name,
             "='", value, "' is not a rank (a non-negative integer)");
  return int(v);
}

#ifdef MEGATRON_HAS_MPI
// The rank of this process among the world's processes that share its memory (its node).
int shared_memory_rank() {
  MPI_Comm node = MPI_COMM_NULL;
  int rank = 0;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) !=
      MPI_SUCCESS) {
    MT_THROW("MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) failed: cannot tell the local rank");
  }
  MPI_Comm_rank(node, &rank);
  MPI_Comm_free(&node);
  return rank;
}
#endif

// srun starts each task with SLURM_STEP_NUM_TASKS and SLURM_PROCID; only its MPI plugin
// (srun --mpi=pmix) adds the variables MPI bootstraps from. Without one (--mpi=none, Slurm's
// default MpiDefault) the tasks cannot find each other: each would train alone, at world size
// 1, into the same --save. Every task finds this at once, so task 0 alone reports it.
void refuse_srun_without_mpi() {
  const std::optional<int> tasks = env_rank("SLURM_STEP_NUM_TASKS");
  const std::optional<int> task = env_rank("SLURM_PROCID");
  if (!tasks || *tasks <= 1 || !task) return;
  Error error(
      detail::concat("this process is task ", *task, " of ", *tasks,
                     " that srun started without MPI (srun --mpi=none, the default where "
                     "slurm.conf sets no MpiDefault), so the tasks cannot reach each other and "
                     "each would run the whole job alone. Start it with srun --mpi=pmix (srun "
                     "--mpi=list names this Slurm's plugins), or with mpirun inside the "
                     "allocation; MEGATRON_FORCE_MPI=0 runs every task alone on purpose"),
      __FILE__, __LINE__);
  throw error.mark_collective(/*reporting=*/*task == 0);
}

}  // namespace

bool mpi_built() {
#ifdef MEGATRON_HAS_MPI
  return true;
#else
  return false;
#endif
}

std::optional<int> local_rank_from_environment(int world_rank) {
  if (std::optional<int> r = env_rank("OMPI_COMM_WORLD_LOCAL_RANK")) return r;
  std::optional<int> slurm = env_rank("SLURM_LOCALID");
  if (slurm && env_rank("SLURM_PROCID") == world_rank) return slurm;
  return std::nullopt;
}

int local_rank() {
  MT_CHECK(g_world != nullptr,
           "local_rank: no DistRuntime exists; construct one at the start of main()");
  return g_local_rank;
}

bool launched_by_mpi() {
  // OpenMPI's mpirun sets OMPI_COMM_WORLD_SIZE; PMIx launchers (OpenMPI 5, srun --mpi=pmix)
  // set PMIX_RANK; MPICH's hydra and srun --mpi=pmi2 set PMI_RANK.
  if (const char* force = std::getenv("MEGATRON_FORCE_MPI")) return std::string(force) == "1";
  return env_set("OMPI_COMM_WORLD_SIZE") || env_set("PMIX_RANK") || env_set("PMI_RANK");
}

DistRuntime::DistRuntime(int& argc, char**& argv) {
  MT_CHECK(g_world == nullptr, "DistRuntime: only one may exist per process");
  if (launched_by_mpi()) {
#ifndef MEGATRON_HAS_MPI
    MT_THROW(
        "this megatron was built without MPI (no MPI was found when it was configured, or "
        "-DMEGATRON_USE_MPI=OFF), so it runs as a single process only, but it was started "
        "by an MPI launcher (mpirun, srun). Run it without the launcher, or rebuild with "
        "OpenMPI (Debian's libopenmpi-dev, or scripts/gpu_bundle.sh on a machine without "
        "it)");
#else
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      if (MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
        MT_THROW("MPI_Init_thread failed; check the mpirun command line and the MPI install");
      }
      owns_mpi_ = true;
      // FUNNELED is what we strictly need: every MPI call comes from the main thread.
      MT_CHECK(provided >= MPI_THREAD_FUNNELED, "MPI provides thread level ", provided,
               ", expected at least MPI_THREAD_FUNNELED");
    }
    // Every rank takes part in the split (it is collective) whether or not its environment
    // names the local rank, so the ranks never disagree about making the call.
    const int from_mpi = shared_memory_rank();
    int world_rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    local_rank_ = local_rank_from_environment(world_rank).value_or(from_mpi);
    g_world = std::shared_ptr<Communicator>(MpiCommunicator::duplicate(MPI_COMM_WORLD));
#endif
  } else {
    if (!env_set("MEGATRON_FORCE_MPI")) refuse_srun_without_mpi();
    g_world = std::make_shared<SoloCommunicator>();
    local_rank_ = 0;
  }
  g_local_rank = local_rank_;
  set_log_rank(g_world->rank());
  previous_terminate_ = std::set_terminate(terminate_handler);
}

DistRuntime::~DistRuntime() {
  std::set_terminate(previous_terminate_);
  g_world.reset();
#ifdef MEGATRON_HAS_MPI
  if (owns_mpi_ && mpi_active()) MPI_Finalize();
#endif
}

std::shared_ptr<Communicator> world_communicator() {
  MT_CHECK(g_world != nullptr,
           "world_communicator: no DistRuntime exists; construct one at the start of main()");
  return g_world;
}

void abort_job(const std::string& message, int exit_code) {
  // A second failure while aborting (e.g. a helper thread failing too) gives the first a
  // moment to end the job instead of printing again; the bound covers a re-entrant call.
  if (g_aborting.exchange(true)) {
    std::this_thread::sleep_for(std::chrono::seconds(10));
    std::_Exit(exit_code);
  }
  // Bad arguments or files usually fail every rank at once. Rank 0 reports and aborts; the
  // others give it a moment to end the job first, so that the message is printed once and only
  // one MPI_Abort reaches mpirun (several at once make OpenMPI print its banner more than once
  // and an ORTE_ERROR_LOG line). A rank that failed alone reports after that moment.
  if (mpi_active()) {
    int rank = 0, world_size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    if (rank != 0 && world_size > 1) std::this_thread::sleep_for(std::chrono::seconds(2));
  }
  log_error(message);
  std::fflush(nullptr);
#ifdef MEGATRON_HAS_MPI
  if (mpi_active()) {
    int world_size = 1, is_main_thread = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    MPI_Is_thread_main(&is_main_thread);
    if (world_size > 1 || !is_main_thread) MPI_Abort(MPI_COMM_WORLD, exit_code);
    // A job of one process ends cleanly, so mpirun reports our exit code without a
    // "process exited without finalize" warning.
    MPI_Finalize();
  }
#endif
  std::_Exit(exit_code);
}

}  // namespace megatron
