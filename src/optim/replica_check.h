// Checking that the data-parallel replicas of a model hold the same parameters (Megatron-LM's
// --check-weight-hash-across-dp-replicas-interval): each replica must end every step with the
// same weights — the same gradients were all-reduced and the same update applied — so a replica
// that differs has met silent corruption (a bit flip, a broken collective, a non-deterministic
// kernel). Each rank hashes its parameter values (CRC-32C of the stored bytes) and the hashes
// are gathered over the DP group; every rank sees all of them, so all stop together.
// Megatron's --test-mode adds the tensor-parallel side: the parameters every TP rank holds
// whole (LayerNorms, replicated biases, the QK norms) must be the same on all of them.
// Expert parameters (ParamSpec::expert) are replicated over another group, the expert
// data-parallel one (ParallelState::edp): their hash is compared there, and they take no part
// in the TP check (with expert parallelism the TP ranks may hold different experts).
#pragma once

#include <cstdint>

#include "distributed/communicator.h"
#include "parallel/parameter.h"

namespace megatron {

// CRC-32C of this rank's dense parameter values (experts false: every parameter that is not an
// expert one; without experts, the store's whole flat value buffer) or of its expert parameter
// values, in store order (copied to the host when they live on a device).
uint32_t parameter_hash(ParameterStore& store, bool experts = false);

// Collective over `dp` (the dense parameters' replicas) and then over `edp` (the expert
// parameters'; the same group as dp without expert parallelism). Throws Error, on every rank of
// the group, naming `flag` (the option that asked for the check), the iteration and the
// replicas whose parameters differ from replica 0's.
void check_replicas_agree(ParameterStore& store, Communicator& dp, Communicator& edp,
                          int64_t iteration,
                          const char* flag = "--check-weight-hash-across-dp-replicas-interval");

// CRC-32C of this rank's TP-replicated dense parameters (partition_dim -1), in store order.
uint32_t replicated_parameter_hash(ParameterStore& store);

// Collective over `tp` (--test-mode). Throws Error, on every rank of the group, naming the
// iteration and the TP ranks whose replicated parameters differ from TP rank 0's.
void check_tp_replicated_agree(ParameterStore& store, Communicator& tp, int64_t iteration);

}  // namespace megatron
