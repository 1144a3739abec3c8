#include "optim/replica_check.h"

#include <string>
#include <vector>

#include "core/crc32c.h"
#include "core/error.h"

namespace megatron {

uint32_t parameter_hash(ParameterStore& store, bool experts) {
  Tensor values = store.flat_values();
  if (!values.device().is_cpu()) {
    Tensor host = Tensor::empty(values.shape(), values.dtype());
    host.copy_from(values);
    values = host;
  }
  // The CRC of consecutive parameters extended one by one is the CRC of their bytes together.
  uint32_t crc = 0;
  const char* base = static_cast<const char*>(values.raw_data());
  const size_t element = dtype_size(values.dtype());
  for (const Parameter& p : store.params())
    if (p.spec.expert == experts)
      crc = crc32c_extend(crc, base + size_t(p.flat_offset) * element,
                          size_t(shape_numel(p.local_shape)) * element);
  return crc;
}

namespace {

// The ranks of `group` (1, 2, ...) whose `hash` differs from rank 0's, as "1, 3"; "" if none.
std::string ranks_differing_from_first(uint32_t hash, Communicator& group) {
  const Tensor mine = Tensor::from_vector<int64_t>({int64_t(hash)}, {1});
  Tensor all = Tensor::empty({group.size()}, DType::I64);
  group.all_gather(mine, all);
  const std::vector<int64_t> hashes = all.to_vector<int64_t>();
  std::string differing;
  for (size_t r = 1; r < hashes.size(); ++r)
    if (hashes[r] != hashes[0]) differing += (differing.empty() ? "" : ", ") + std::to_string(r);
  return differing;
}

const char* plural(const std::string& ranks) {
  return ranks.find(',') == std::string::npos ? " " : "s ";
}

}  // namespace

void check_replicas_agree(ParameterStore& store, Communicator& dp, Communicator& edp,
                          int64_t iteration, const char* flag) {
  const std::string differing = ranks_differing_from_first(parameter_hash(store), dp);
  const std::string experts_differing =
      ranks_differing_from_first(parameter_hash(store, /*experts=*/true), edp);
  MT_REQUIRE(differing.empty(), flag, ": at iteration ", iteration,
             " the parameters of data-parallel replica", plural(differing), differing,
             " differ from replica 0's: the replicas have diverged (a hardware fault, a broken "
             "collective or a non-deterministic kernel); resume from the last checkpoint");
  MT_REQUIRE(experts_differing.empty(), flag, ": at iteration ", iteration,
             " the expert parameters of expert-data-parallel replica", plural(experts_differing),
             experts_differing,
             " differ from replica 0's: the replicas have diverged (a hardware fault, a broken "
             "collective or a non-deterministic kernel); resume from the last checkpoint");
}

uint32_t replicated_parameter_hash(ParameterStore& store) {
  uint32_t crc = 0;
  for (const Parameter& p : store.params()) {
    if (p.spec.partition_dim != -1 || p.spec.expert) continue;
    Tensor host = p.value;
    if (!host.device().is_cpu()) {
      host = Tensor::empty(p.value.shape(), p.value.dtype());
      host.copy_from(p.value);
    }
    crc = crc32c_extend(crc, host.raw_data(), host.nbytes());
  }
  return crc;
}

void check_tp_replicated_agree(ParameterStore& store, Communicator& tp, int64_t iteration) {
  const std::string differing = ranks_differing_from_first(replicated_parameter_hash(store), tp);
  MT_REQUIRE(differing.empty(), "--test-mode: at iteration ", iteration,
             " the replicated parameters (LayerNorms, QK norms, replicated biases) of "
             "tensor-parallel rank",
             plural(differing), differing,
             " differ from TP rank 0's: the TP ranks have diverged (a hardware fault, a broken "
             "collective or a non-deterministic kernel); resume from the last checkpoint");
}

}  // namespace megatron
