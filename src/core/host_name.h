// The name of the machine this process runs on, as jobs and locks record it.
#pragma once

#include <string>

namespace megatron {

// gethostname(2); the test hook MEGATRON_TEST_NODE_NAME replaces it, so that one machine can
// play another node (a job restarted elsewhere: tests/e2e/reruns.sh, tests/e2e/save_lock.sh).
std::string host_name();

}  // namespace megatron
