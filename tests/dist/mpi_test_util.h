// Helpers for tests in tests/dist/, which run under mpirun with 1, 2 and 4 processes (see
// tests/dist/main.cpp for the harness).
//
// Rules for writing a dist test:
// - Every rank runs every TEST. Skip a world size you do not support with the macros below;
//   the condition must be the same on all ranks so they all skip together.
// - Do all collectives before asserting: an ASSERT that fails on one rank returns early and
//   leaves the others waiting in the next collective (the harness's watchdog then aborts the
//   job after MEGATRON_DIST_TEST_TIMEOUT seconds, naming the test, but that is slow).
//   Prefer EXPECT_* and compute everything first.
// - Only rank 0 prints gtest's normal output; failures on other ranks are printed with a
//   "[rank N]" prefix, and the binary exits non-zero if any rank failed.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "distributed/communicator.h"
#include "distributed/runtime.h"

namespace megatron::test {

// The job's world communicator (MpiCommunicator under mpirun).
inline std::shared_ptr<Communicator> world() {
  return world_communicator();
}
inline int world_size() {
  return world_communicator()->size();
}
inline int world_rank() {
  return world_communicator()->rank();
}

}  // namespace megatron::test

// Skips the current test unless exactly `n` processes run.
#define SKIP_UNLESS_WORLD_SIZE(n)                                                                \
  do {                                                                                           \
    if (::megatron::test::world_size() != (n)) {                                                 \
      GTEST_SKIP() << "needs world size " << (n) << ", have " << ::megatron::test::world_size(); \
    }                                                                                            \
  } while (0)

// Skips the current test unless the number of processes is a multiple of `k`.
#define SKIP_UNLESS_WORLD_SIZE_DIVISIBLE_BY(k)                               \
  do {                                                                       \
    if (::megatron::test::world_size() % (k) != 0) {                         \
      GTEST_SKIP() << "needs a world size divisible by " << (k) << ", have " \
                   << ::megatron::test::world_size();                        \
    }                                                                        \
  } while (0)

// Skips the current test unless at least `n` processes run.
#define SKIP_UNLESS_WORLD_SIZE_AT_LEAST(n)                       \
  do {                                                           \
    if (::megatron::test::world_size() < (n)) {                  \
      GTEST_SKIP() << "needs world size >= " << (n) << ", have " \
                   << ::megatron::test::world_size();            \
    }                                                            \
  } while (0)
