// The process-wide distributed runtime: MPI's lifetime, the world communicator, and
// job-wide failure.
//
// main() constructs one DistRuntime before anything communicates. When the process was
// started by an MPI launcher (mpirun/mpiexec, or srun with PMI/PMIx) it initialises MPI and
// the world is an MpiCommunicator; otherwise it does not touch MPI at all and the world is a
// SoloCommunicator. Why not MPI singleton init: OpenMPI's singleton mode forks a helper
// daemon, which is slow and fails in some containers, for a world that is one process
// anyway. MEGATRON_FORCE_MPI=1 forces MPI initialisation for launchers we do not recognise.
//
// Failure: abort_job prints "error: <message>" once on the failing rank and, when the world
// has more than one process, calls MPI_Abort so that no other rank waits forever in a
// collective the failed rank will never join.
#pragma once

#include <exception>
#include <memory>
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

 private:
  bool owns_mpi_ = false;
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

// Prints "error: <message>" on this rank, then ends the whole job with `exit_code`
// (MPI_Abort when more than one process runs). Safe to call from any thread.
[[noreturn]] void abort_job(const std::string& message, int exit_code = 1);

}  // namespace megatron
