// Broadcasting variable-length host data (a request, a prompt typed on rank 0's terminal) from
// one rank to every member of a group: the length first, then the bytes.
#pragma once

#include <string>

#include "distributed/communicator.h"

namespace megatron {

// Collective: every member calls it; `text` is read on `root` and returned everywhere.
std::string broadcast_string(Communicator& comm, const std::string& text, int root);

}  // namespace megatron
