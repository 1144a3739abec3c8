// DistRuntime without a launcher (a world of one, MPI untouched) and job-wide failure:
// abort_job's message and exit code, and the terminate handler that turns an uncaught
// exception in any thread into the same clean abort. Death tests run in a child process.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "core/logging.h"
#include "distributed/runtime.h"

namespace megatron {
namespace {

using ::testing::HasSubstr;

// A runtime that ignores any launcher variables the test process may have inherited.
class SoloRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override { setenv("MEGATRON_FORCE_MPI", "0", 1); }
  void TearDown() override { unsetenv("MEGATRON_FORCE_MPI"); }
  int argc_ = 1;
  char arg0_[9] = "megatron";
  char* argv0_[2] = {arg0_, nullptr};
  char** argv_ = argv0_;
};

TEST_F(SoloRuntimeTest, WorldIsOneProcessWithoutALauncher) {
  EXPECT_FALSE(launched_by_mpi());
  DistRuntime runtime(argc_, argv_);
  auto world = world_communicator();
  EXPECT_EQ(world->size(), 1);
  EXPECT_EQ(world->rank(), 0);
  EXPECT_EQ(log_rank(), 0);
  EXPECT_EQ(world->all_reduce_scalar(2.5), 2.5);
}

TEST_F(SoloRuntimeTest, WorldCommunicatorNeedsARuntime) {
  try {
    world_communicator();
    ADD_FAILURE() << "world_communicator() without a DistRuntime";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("no DistRuntime exists"));
  }
}

TEST_F(SoloRuntimeTest, OnlyOneRuntimeAtATime) {
  DistRuntime runtime(argc_, argv_);
  EXPECT_THROW(DistRuntime second(argc_, argv_), Error);
}

TEST_F(SoloRuntimeTest, ForceVariableDecidesLauncherDetection) {
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  EXPECT_FALSE(launched_by_mpi());  // MEGATRON_FORCE_MPI=0 wins
  unsetenv("MEGATRON_FORCE_MPI");
  EXPECT_TRUE(launched_by_mpi());
  unsetenv("OMPI_COMM_WORLD_SIZE");
}

// A build configured without MPI (e.g. on a machine without OpenMPI) runs as one process;
// started by a launcher it must say so, not run N unconnected copies of the job.
TEST_F(SoloRuntimeTest, LauncherStartInASingleProcessBuildFailsClearly) {
  if (mpi_built()) GTEST_SKIP() << "this build has MPI";
  setenv("MEGATRON_FORCE_MPI", "1", 1);
  try {
    DistRuntime runtime(argc_, argv_);
    ADD_FAILURE() << "a DistRuntime started by a launcher in a build without MPI";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("built without MPI"));
    EXPECT_THAT(e.message(), HasSubstr("single process"));
  }
  DistRuntime runtime_after_failure((setenv("MEGATRON_FORCE_MPI", "0", 1), argc_), argv_);
  EXPECT_EQ(world_communicator()->size(), 1);
}

TEST_F(SoloRuntimeTest, LocalRankIsZeroWithoutALauncher) {
  DistRuntime runtime(argc_, argv_);
  EXPECT_EQ(runtime.local_rank(), 0);
  EXPECT_EQ(local_rank(), 0);
}

TEST_F(SoloRuntimeTest, LocalRankNeedsARuntime) {
  EXPECT_THROW(local_rank(), Error);
}

// Sets (or with nullptr unsets) an environment variable for one scope, restoring it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value ? setenv(name, value, 1) : unsetenv(name);
  }
  ~ScopedEnv() { old_ ? setenv(name_, old_->c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(LocalRankFromEnvironment, LauncherVariables) {
  ScopedEnv ompi("OMPI_COMM_WORLD_LOCAL_RANK", nullptr);
  ScopedEnv local_id("SLURM_LOCALID", nullptr);
  ScopedEnv proc_id("SLURM_PROCID", nullptr);
  EXPECT_EQ(local_rank_from_environment(5), std::nullopt);
  {
    // srun: SLURM_PROCID is this task's world rank.
    ScopedEnv id("SLURM_LOCALID", "1");
    ScopedEnv proc("SLURM_PROCID", "5");
    EXPECT_EQ(local_rank_from_environment(5), 1);
    // mpirun inside an allocation: the batch step's SLURM_PROCID=0 reached rank 5.
    EXPECT_EQ(local_rank_from_environment(3), std::nullopt);
    // OpenMPI's variable wins.
    ScopedEnv o("OMPI_COMM_WORLD_LOCAL_RANK", "3");
    EXPECT_EQ(local_rank_from_environment(3), 3);
  }
  ScopedEnv bad("OMPI_COMM_WORLD_LOCAL_RANK", "two");
  try {
    local_rank_from_environment(0);
    ADD_FAILURE() << "a local rank of 'two' accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("OMPI_COMM_WORLD_LOCAL_RANK='two' is not a rank"));
  }
}

// srun --mpi=none (Slurm's default plugin) starts N tasks that cannot reach each other: each
// would train alone at world size 1 into the same --save. Refused, reported by task 0 only.
TEST(SrunWithoutMpi, SeveralTasksWithoutAnMpiPluginAreRefused) {
  ScopedEnv force("MEGATRON_FORCE_MPI", nullptr);
  ScopedEnv ompi("OMPI_COMM_WORLD_SIZE", nullptr);
  ScopedEnv pmix("PMIX_RANK", nullptr);
  ScopedEnv pmi("PMI_RANK", nullptr);
  ScopedEnv tasks("SLURM_STEP_NUM_TASKS", "4");
  int argc = 1;
  char arg0[9] = "megatron";
  char* args[2] = {arg0, nullptr};
  char** argv = args;
  for (const char* task : {"0", "2"}) {
    ScopedEnv proc("SLURM_PROCID", task);
    try {
      DistRuntime runtime(argc, argv);
      ADD_FAILURE() << "task " << task << " of srun --mpi=none ran alone";
    } catch (const Error& e) {
      EXPECT_THAT(e.message(), HasSubstr("task " + std::string(task) +
                                         " of 4 that srun started "
                                         "without MPI"));
      EXPECT_THAT(e.message(), HasSubstr("srun --mpi=pmix"));
      EXPECT_TRUE(e.collective());
      EXPECT_EQ(e.reporting(), std::string(task) == "0");
    }
  }
  {  // srun -n 1, and a batch script (no step variables): one process is the whole job
    ScopedEnv one("SLURM_STEP_NUM_TASKS", "1");
    ScopedEnv proc("SLURM_PROCID", "0");
    DistRuntime runtime(argc, argv);
    EXPECT_EQ(world_communicator()->size(), 1);
  }
  {
    ScopedEnv proc("SLURM_PROCID", nullptr);
    DistRuntime runtime(argc, argv);
    EXPECT_EQ(world_communicator()->size(), 1);
  }
  {  // running every task alone on purpose
    ScopedEnv proc("SLURM_PROCID", "1");
    ScopedEnv solo("MEGATRON_FORCE_MPI", "0");
    DistRuntime runtime(argc, argv);
    EXPECT_EQ(world_communicator()->size(), 1);
  }
}

TEST_F(SoloRuntimeTest, AbortJobPrintsTheMessageAndExitsWithTheCode) {
  EXPECT_EXIT(abort_job("the data file x.bin is missing", 7), ::testing::ExitedWithCode(7),
              "^error: the data file x.bin is missing\n$");
}

TEST_F(SoloRuntimeTest, UncaughtExceptionInAThreadAbortsTheJob) {
  EXPECT_EXIT(
      {
        DistRuntime runtime(argc_, argv_);
        std::thread worker([] { throw std::runtime_error("loader failed"); });
        worker.join();
      },
      ::testing::ExitedWithCode(1), "error: uncaught exception: loader failed");
}

}  // namespace
}  // namespace megatron
