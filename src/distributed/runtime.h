// The process-wide distributed runtime: MPI's lifetime, the world communicator, and
// job-wide failure.
//
// main() constructs one DistRuntime before anything communicates. When the process was
// started by an MPI launcher (mpirun/mpiexec, or srun with PMI/PMIx) it initialises MPI and
// the world is an MpiCommunicator; otherwise it does not touch MPI at all and the world is a
// SoloCommunicator — unless srun started this process as one of several tasks without an MPI
// plugin (srun --mpi=none): then the tasks could not reach each other and each would run the job
// alone, so the constructor throws an Error saying to use srun --mpi=pmix (collective: only
// task 0 reports it). Why not MPI singleton init: OpenMPI's singleton mode forks a helper
// daemon, which is slow and fails in some containers, for a world that is one process
// anyway. MEGATRON_FORCE_MPI=1 forces MPI initialisation for launchers we do not recognise.
//
// Local rank: the rank of this process among the job's processes on its node, which picks the
// GPU a rank drives (default_device(local_rank()), one rank per GPU). From the launcher's
// environment when it says (OpenMPI's OMPI_COMM_WORLD_LOCAL_RANK; Slurm's SLURM_LOCALID when
// srun started this task), else from an MPI shared-memory split of the world
// (MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)); 0 for a process without a launcher.
//
// Failure: abort_job prints "error: <message>" once on the failing rank and, when the world
// has more than one process, calls MPI_Abort so that no other rank waits forever in a
// collective the failed rank will never join.
#pragma once

#include <exception>
#include <memory>
#include <optional>
#include <string>

#include "distributed/communicator.h"

namespace megatron {

class DistRuntime {
 public:
  // Initialises MPI (thread level MPI_THREAD_SERIALIZED: only one thread at a time calls
  // MPI; the data-loader thread never does) when launched by an MPI launcher, sets the
  // logging rank, and installs a terminate handler that aborts the job on an uncaught
  // exception in any thread. Only one DistRuntime may exist at a time.
  DistRuntime(int& argc, char**& argv);
  // Releases the world communicator, MPI_Finalize if it initialised MPI, and restores the
  // previous terminate handler.
  ~DistRuntime();
  DistRuntime(const DistRuntime&) = delete;
  DistRuntime& operator=(const DistRuntime&) = delete;

  int local_rank() const { return local_rank_; }

 private:
  bool owns_mpi_ = false;
  int local_rank_ = 0;
  std::terminate_handler previous_terminate_ = nullptr;
};

// True when the environment shows an MPI launcher started this process (or
// MEGATRON_FORCE_MPI=1).
bool launched_by_mpi();

// False in a single-process build (configured without MPI): there the world is always a
// SoloCommunicator, and a DistRuntime started by an MPI launcher throws Error saying so.
bool mpi_built();

// The communicator over every process of the job. Throws Error when no DistRuntime exists.
std::shared_ptr<Communicator> world_communicator();

// This process's rank on its node (see above). Throws Error when no DistRuntime exists.
int local_rank();

// The local rank the launcher's environment gives, if it gives one: OMPI_COMM_WORLD_LOCAL_RANK,
// else SLURM_LOCALID when SLURM_PROCID equals `world_rank` (srun started this task; under
// mpirun inside an allocation the batch script's SLURM_LOCALID=0 is inherited by every rank and
// must not be believed). A value that is not a non-negative integer is an Error naming it.
std::optional<int> local_rank_from_environment(int world_rank);

// Prints "error: <message>" on this rank, then ends the whole job with `exit_code`
// (MPI_Abort when more than one process runs). Safe to call from any thread.
[[noreturn]] void abort_job(const std::string& message, int exit_code = 1);

}  // namespace megatron
