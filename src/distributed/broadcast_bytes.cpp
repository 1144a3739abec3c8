#include "distributed/broadcast_bytes.h"

#include <cstring>
#include <vector>

namespace megatron {

std::string broadcast_string(Communicator& comm, const std::string& text, int root) {
  if (comm.size() == 1) return text;
  Tensor length = Tensor::from_vector(std::vector<int64_t>{int64_t(text.size())}, {1});
  comm.broadcast(length, root);
  const int64_t n = length.to_vector<int64_t>()[0];
  if (n == 0) return "";
  Tensor bytes = Tensor::empty({n}, DType::U8);
  if (comm.rank() == root) std::memcpy(bytes.raw_data(), text.data(), size_t(n));
  comm.broadcast(bytes, root);
  return std::string(static_cast<const char*>(bytes.raw_data()), size_t(n));
}

}  // namespace megatron
