#include "optim/replica_check.h"

#include <string>
#include <vector>

#include "core/crc32c.h"
#include "core/error.h"

namespace megatron {

uint32_t parameter_hash(ParameterStore& store) {
  const Tensor& values = store.flat_values();
  if (values.device().is_cpu()) return crc32c(values.raw_data(), values.nbytes());
  Tensor host = Tensor::empty(values.shape(), values.dtype());
  host.copy_from(values);
  return crc32c(host.raw_data(), host.nbytes());
}

void check_replicas_agree(ParameterStore& store, Communicator& dp, int64_t iteration) {
  const Tensor mine = Tensor::from_vector<int64_t>({int64_t(parameter_hash(store))}, {1});
  Tensor all = Tensor::empty({dp.size()}, DType::I64);
  dp.all_gather(mine, all);
  const std::vector<int64_t> hashes = all.to_vector<int64_t>();
  std::string differing;
  for (size_t r = 1; r < hashes.size(); ++r)
    if (hashes[r] != hashes[0]) differing += (differing.empty() ? "" : ", ") + std::to_string(r);
  MT_REQUIRE(differing.empty(), "--check-weight-hash-across-dp-replicas-interval: at iteration ",
             iteration, " the parameters of data-parallel replica",
             differing.find(',') == std::string::npos ? " " : "s ", differing,
             " differ from replica 0's: the replicas have diverged (a hardware fault, a broken "
             "collective or a non-deterministic kernel); resume from the last checkpoint");
}

}  // namespace megatron
