#include "distributed/comm_check.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "core/device_runtime.h"
#include "core/timer.h"

namespace megatron {

namespace {

constexpr DType kCheckedDtypes[] = {DType::F32, DType::F64, DType::BF16, DType::I32, DType::I64};

// Element-wise conversion between doubles and any dtype, rounding as the dtype's own
// conversion does (bf16/f16 to nearest even), so expected values are rounded exactly once.
Tensor tensor_of(const std::vector<double>& values, const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  for (size_t i = 0; i < values.size(); ++i) {
    const double v = values[i];
    switch (dtype) {
      case DType::F32:
        t.data<float>()[i] = float(v);
        break;
      case DType::F64:
        t.data<double>()[i] = v;
        break;
      case DType::BF16:
        t.data<bf16>()[i] = bf16(float(v));
        break;
      case DType::F16:
        t.data<f16>()[i] = f16(float(v));
        break;
      case DType::I32:
        t.data<int32_t>()[i] = int32_t(v);
        break;
      case DType::I64:
        t.data<int64_t>()[i] = int64_t(v);
        break;
      case DType::U8:
        t.data<uint8_t>()[i] = uint8_t(v);
        break;
    }
  }
  return t;
}

double element(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::F32:
      return t.data<float>()[i];
    case DType::F64:
      return t.data<double>()[i];
    case DType::BF16:
      return float(t.data<bf16>()[i]);
    case DType::F16:
      return float(t.data<f16>()[i]);
    case DType::I32:
      return t.data<int32_t>()[i];
    case DType::I64:
      return double(t.data<int64_t>()[i]);
    case DType::U8:
      return t.data<uint8_t>()[i];
  }
  return 0;
}

// The value a dtype stores for v (so expected values carry the same input rounding).
double stored(double v, DType dtype) {
  return element(tensor_of({v}, {1}, dtype), 0);
}

void expect_elements(const Tensor& got, const std::vector<double>& expected, const char* op,
                     int rank) {
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double want = stored(expected[size_t(i)], got.dtype());
    const double have = element(got, i);
    MT_CHECK(have == want, "comm-check: ", op, " of ", dtype_name(got.dtype()), " on rank ", rank,
             ": element ", i, " is ", have, ", expected ", want);
  }
}

// Rank r's input element i: small integers, distinct per rank, exact in every dtype.
double input(int r, int64_t i) {
  return double((r * 7 + i * 3) % 17) - 8.0;
}

std::vector<double> inputs(int r, int64_t n, int64_t offset = 0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = input(r, i + offset);
  return v;
}

std::vector<double> reduced(int ranks, int64_t n, int64_t offset, ReduceOp op) {
  std::vector<double> v(size_t(n), op == ReduceOp::SUM ? 0.0 : -INFINITY);
  for (int r = 0; r < ranks; ++r)
    for (int64_t i = 0; i < n; ++i)
      v[size_t(i)] = op == ReduceOp::SUM ? v[size_t(i)] + input(r, i + offset)
                                         : std::max(v[size_t(i)], input(r, i + offset));
  return v;
}

void verify_dtype(Communicator& comm, DType dtype) {
  const int n = comm.size(), me = comm.rank();
  const int64_t rows = 5, cols = 3, block = rows * cols;  // odd sizes on purpose

  for (ReduceOp op : {ReduceOp::SUM, ReduceOp::MAX}) {
    const char* name = op == ReduceOp::SUM ? "all_reduce SUM" : "all_reduce MAX";
    Tensor t = tensor_of(inputs(me, block), {rows, cols}, dtype);
    comm.all_reduce(t, op);
    expect_elements(t, reduced(n, block, 0, op), name, me);

    Tensor whole = tensor_of(inputs(me, n * block), {n * rows, cols}, dtype);
    Tensor part = Tensor::empty({rows, cols}, dtype);
    comm.reduce_scatter(whole, part, op);
    expect_elements(part, reduced(n, block, me * block, op),
                    op == ReduceOp::SUM ? "reduce_scatter SUM" : "reduce_scatter MAX", me);
  }

  Tensor mine = tensor_of(inputs(me, block), {rows, cols}, dtype);
  Tensor gathered = Tensor::empty({n * rows, cols}, dtype);
  comm.all_gather(mine, gathered);
  std::vector<double> expected_gather;
  for (int r = 0; r < n; ++r) {
    std::vector<double> block_of_r = inputs(r, block);
    expected_gather.insert(expected_gather.end(), block_of_r.begin(), block_of_r.end());
  }
  expect_elements(gathered, expected_gather, "all_gather", me);

  const int root = n - 1;
  Tensor b = tensor_of(inputs(me, block), {block}, dtype);
  comm.broadcast(b, root);
  expect_elements(b, inputs(root, block), "broadcast", me);

  if (n > 1) {
    const int next = (me + 1) % n, prev = (me + n - 1) % n;
    Tensor out = tensor_of(inputs(me, block), {block}, dtype);
    Tensor in = Tensor::empty({block}, dtype);
    if (me % 2 == 0) {  // even ranks send first: no reliance on eager buffering
      comm.send(out, next);
      comm.recv(in, prev);
    } else {
      comm.recv(in, prev);
      comm.send(out, next);
    }
    expect_elements(in, inputs(prev, block), "send/recv", me);
  }
}

// World ranks of the members of `group`, in group order.
std::vector<int64_t> members(Communicator& group, int world_rank) {
  Tensor mine = Tensor::from_vector<int64_t>({world_rank}, {1});
  Tensor all = Tensor::empty({group.size()}, DType::I64);
  group.all_gather(mine, all);
  return all.to_vector<int64_t>();
}

}  // namespace

void verify_collectives(Communicator& comm) {
  for (DType dtype : kCheckedDtypes) verify_dtype(comm, dtype);

  // split: the even and the odd ranks, each in reverse rank order.
  const int n = comm.size(), me = comm.rank();
  std::unique_ptr<Communicator> parity = comm.split(me % 2, -me);
  std::vector<int64_t> expected;
  for (int r = n - 1; r >= 0; --r)
    if (r % 2 == me % 2) expected.push_back(r);
  MT_CHECK(members(*parity, me) == expected, "comm-check: split by parity on rank ", me,
           " produced the wrong members");

  const double scalar = comm.all_reduce_scalar(me + 1.0);
  MT_CHECK(scalar == n * (n + 1) / 2.0, "comm-check: all_reduce_scalar on rank ", me, " gave ",
           scalar, ", expected ", n * (n + 1) / 2.0);
  comm.barrier();
}

void verify_groups(const ParallelState& s) {
  const int t = s.tp_size, d = s.dp_size, p = s.pp_size;
  auto world_rank = [&](int tp, int dp, int pp) { return int64_t(pp * t * d + dp * t + tp); };
  std::vector<int64_t> tp, dp, pp, mp;
  for (int i = 0; i < t; ++i) tp.push_back(world_rank(i, s.dp_rank, s.pp_rank));
  for (int i = 0; i < d; ++i) dp.push_back(world_rank(s.tp_rank, i, s.pp_rank));
  for (int i = 0; i < p; ++i) pp.push_back(world_rank(s.tp_rank, s.dp_rank, i));
  for (int j = 0; j < p; ++j)
    for (int i = 0; i < t; ++i) mp.push_back(world_rank(i, s.dp_rank, j));
  const struct {
    const char* name;
    Communicator& group;
    const std::vector<int64_t>& expected;
  } groups[] = {{"tensor-parallel", *s.tp, tp},
                {"data-parallel", *s.dp, dp},
                {"pipeline-parallel", *s.pp, pp},
                {"model-parallel", *s.mp, mp}};
  for (const auto& g : groups) {
    MT_CHECK(members(g.group, s.rank) == g.expected, "comm-check: the ", g.name, " group of rank ",
             s.rank, " does not hold the expected world ranks");
  }
}

AllReduceBandwidth measure_all_reduce_bandwidth(Communicator& comm, int64_t bytes, int iterations,
                                                Device device) {
  MT_CHECK(bytes >= 4 && iterations >= 1, "all-reduce bandwidth: need at least 4 bytes and ",
           "one iteration, got ", bytes, " bytes and ", iterations, " iterations");
  Tensor buffer = Tensor::zeros({bytes / 4}, DType::F32, device);
  comm.all_reduce(buffer);  // warm-up: connection setup and page faults are not bandwidth
  synchronize(device);
  comm.barrier();
  Timer timer;
  timer.start();
  for (int i = 0; i < iterations; ++i) comm.all_reduce(buffer);
  synchronize(device);
  timer.stop();
  AllReduceBandwidth bw;
  bw.bytes = buffer.numel() * 4;
  bw.seconds = comm.all_reduce_scalar(timer.seconds() / iterations, ReduceOp::MAX);
  const int n = comm.size();
  bw.algbw_gbps = double(bw.bytes) / bw.seconds / 1e9;
  bw.busbw_gbps = bw.algbw_gbps * 2.0 * (n - 1) / n;
  return bw;
}

}  // namespace megatron
