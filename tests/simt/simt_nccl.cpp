// NCCL for the emulated GPU: the 17 functions megatron's NcclCommunicator calls, over MPI, so
// that the communicator megatron uses by default on GPUs (distributed/nccl_communicator.cpp)
// runs under mpirun in CI — its bootstrap, splits, groups, in-place conventions, counts and
// roots. Device memory is host memory on the emulated GPU, so MPI moves it directly.
//
// NCCL's contracts, as computed here:
//   * ncclCommInitRank: collective over the ranks that share the id; here they must be the
//     whole MPI world (megatron makes its NCCL world from the world and every group by
//     ncclCommSplit, which maps onto MPI_Comm_split), or one process without MPI (a run not
//     launched by mpirun). Splits with NCCL_SPLIT_NOCOLOR get null.
//   * Reductions: every rank's contribution is gathered and reduced in rank order, in f32 for
//     f16/bf16 (rounded once) and in the type itself otherwise, so every rank gets the same
//     bits (real NCCL rounds 16-bit sums at each hop of its ring: tests allow for that).
//     Buffers may alias as NCCL allows (in place: recvbuff == sendbuff, or this rank's block of
//     it for all-gather / reduce-scatter); outputs are written after all inputs are read.
//   * Groups (ncclGroupStart/End, nestable): point-to-point sends and receives are posted at
//     once and completed at the outermost ncclGroupEnd; collectives run when called (every
//     rank calls them in the same order, as NCCL requires). A send or receive outside a group
//     completes before it returns, which deadlocks where NCCL would too. Inside a group a rank
//     may send to itself (all_to_all_v's own block): its k-th send to itself fills its k-th
//     receive from itself at ncclGroupEnd, sizes equal, as NCCL pairs them.
// Each call first runs what its stream queued before it (simt_streams.h), then runs at once: its
// inputs are stream-ordered, its outputs are not delayed.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mpi.h>
#include <nccl.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "simt_device_memory.h"
#include "simt_streams.h"

using megatron::simt::DeviceAccess;

struct ncclComm {
  MPI_Comm mpi = MPI_COMM_NULL;  // null for a communicator of one rank
  int rank = 0, size = 0;
  std::string last_error;
};

namespace {

constexpr int kPointToPointTag = 0x5a17;

int group_depth = 0;
std::vector<MPI_Request> group_requests;
// A group's sends to and receives from the rank itself, in the order posted.
struct SelfTransfer {
  void* buffer;
  size_t bytes;
};
std::vector<SelfTransfer> group_self_sends, group_self_receives;
// Device memory stays accessible from the outermost ncclGroupStart to its ncclGroupEnd: MPI
// may read or write the posted buffers until then.
std::unique_ptr<DeviceAccess> group_access;

ncclResult_t invalid(ncclComm* comm, std::string why) {
  if (comm) comm->last_error = std::move(why);
  return ncclInvalidArgument;
}

ncclResult_t mpi_result(ncclComm* comm, int code, const char* call) {
  if (code == MPI_SUCCESS) return ncclSuccess;
  if (comm) comm->last_error = std::string(call) + " failed in the emulated NCCL's MPI";
  return ncclSystemError;
}

size_t type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclFloat64:
      return 8;
    default:
      return 0;  // not a type megatron sends
  }
}

template <typename T, typename Acc>
void reduce_as(const char* parts, size_t stride, int n, size_t count, ncclRedOp_t op, char* out,
               Acc (*widen)(T), T (*narrow)(Acc)) {
  for (size_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, parts + i * sizeof(T), sizeof(T));
    Acc acc = widen(v);
    for (int r = 1; r < n; ++r) {
      std::memcpy(&v, parts + size_t(r) * stride + i * sizeof(T), sizeof(T));
      const Acc x = widen(v);
      acc = op == ncclSum ? Acc(acc + x) : (x > acc ? x : acc);
    }
    const T result = narrow(acc);
    std::memcpy(out + i * sizeof(T), &result, sizeof(T));
  }
}

template <typename T>
T same(T v) {
  return v;
}
float half_to_float(__half v) {
  return __half2float(v);
}
__half float_to_half(float v) {
  return __float2half_rn(v);
}
float bf16_to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
__nv_bfloat16 float_to_bf16(float v) {
  return __float2bfloat16_rn(v);
}

// out[i] = op over r of parts[r·stride + i], i < count, in rank order.
void reduce(const char* parts, size_t stride, int n, size_t count, ncclDataType_t t, ncclRedOp_t op,
            char* out) {
  switch (t) {
    case ncclUint8:
      return reduce_as<uint8_t, uint8_t>(parts, stride, n, count, op, out, same, same);
    case ncclInt32:
      return reduce_as<int32_t, int32_t>(parts, stride, n, count, op, out, same, same);
    case ncclInt64:
      return reduce_as<int64_t, int64_t>(parts, stride, n, count, op, out, same, same);
    case ncclFloat32:
      return reduce_as<float, float>(parts, stride, n, count, op, out, same, same);
    case ncclFloat64:
      return reduce_as<double, double>(parts, stride, n, count, op, out, same, same);
    case ncclFloat16:
      return reduce_as<__half, float>(parts, stride, n, count, op, out, half_to_float,
                                      float_to_half);
    default:
      return reduce_as<__nv_bfloat16, float>(parts, stride, n, count, op, out, bf16_to_float,
                                             float_to_bf16);
  }
}

// Every rank's `bytes` from `send`, concatenated in rank order (MPI counts are ints: the
// emulator is for test sizes).
int gather_all(ncclComm* comm, const void* send, size_t bytes, std::vector<char>& all) {
  if (bytes * size_t(comm->size) > size_t(INT32_MAX)) return MPI_ERR_COUNT;
  all.resize(bytes * size_t(comm->size));
  std::vector<char> mine(static_cast<const char*>(send), static_cast<const char*>(send) + bytes);
  if (comm->size == 1) {
    all = std::move(mine);
    return MPI_SUCCESS;
  }
  return MPI_Allgather(mine.data(), int(bytes), MPI_BYTE, all.data(), int(bytes), MPI_BYTE,
                       comm->mpi);
}

// Runs what `stream` queued before the collective, then gathers every rank's `bytes` of `send`.
ncclResult_t gather_inputs(ncclComm* comm, cudaStream_t stream, const void* send, size_t bytes,
                           std::vector<char>& all) {
  megatron::simt::synchronize(stream);
  DeviceAccess access;
  return mpi_result(comm, gather_all(comm, send, bytes, all), "MPI_Allgather");
}

ncclResult_t check_call(ncclComm* comm, ncclDataType_t t, ncclRedOp_t op, bool reduces) {
  if (!comm) return ncclInvalidArgument;
  if (type_bytes(t) == 0) return invalid(comm, "a data type the emulated NCCL does not know");
  if (reduces && op != ncclSum && op != ncclMax)
    return invalid(comm, "a reduction the emulated NCCL does not know");
  return ncclSuccess;
}

ncclResult_t point_to_point(bool send, void* buf, size_t count, ncclDataType_t t, int peer,
                            ncclComm* comm, cudaStream_t stream) {
  if (const ncclResult_t r = check_call(comm, t, ncclSum, false); r != ncclSuccess) return r;
  if (peer < 0 || peer >= comm->size || (peer == comm->rank && group_depth == 0))
    return invalid(comm,
                   "a send or receive whose peer is not another rank of the communicator (or the "
                   "rank itself, inside a group)");
  MPI_Request request = MPI_REQUEST_NULL;
  const int bytes = int(count * type_bytes(t));
  megatron::simt::synchronize(stream);  // what the stream queued before the send or receive
  if (peer == comm->rank) {
    (send ? group_self_sends : group_self_receives).push_back({buf, size_t(bytes)});
    return ncclSuccess;
  }
  DeviceAccess access;  // a lone send or receive completes within it
  const int code =
      send ? MPI_Isend(buf, bytes, MPI_BYTE, peer, kPointToPointTag, comm->mpi, &request)
           : MPI_Irecv(buf, bytes, MPI_BYTE, peer, kPointToPointTag, comm->mpi, &request);
  if (code != MPI_SUCCESS) return mpi_result(comm, code, send ? "MPI_Isend" : "MPI_Irecv");
  if (group_depth > 0) {
    group_requests.push_back(request);
    return ncclSuccess;
  }
  return mpi_result(comm, MPI_Wait(&request, MPI_STATUS_IGNORE), "MPI_Wait");
}

}  // namespace

extern "C" {

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclInvalidArgument:
      return "invalid argument (emulated NCCL)";
    case ncclInvalidUsage:
      return "invalid usage (emulated NCCL)";
    case ncclSystemError:
      return "system error (emulated NCCL over MPI)";
    default:
      return "error (emulated NCCL)";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  return comm ? comm->last_error.c_str() : "";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::random_device random;
  for (char& c : id->internal) c = char(random());
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* out, int nranks, ncclUniqueId, int rank) {
  int mpi = 0, world = 1, world_rank = 0;
  MPI_Initialized(&mpi);
  if (mpi) {
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  }
  if (nranks != world || rank != world_rank) return ncclInvalidUsage;  // see the contract above
  auto* comm = new ncclComm;
  if (nranks > 1 && MPI_Comm_dup(MPI_COMM_WORLD, &comm->mpi) != MPI_SUCCESS) {
    delete comm;
    return ncclSystemError;
  }
  comm->rank = rank;
  comm->size = nranks;
  *out = comm;
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* out, ncclConfig_t*) {
  if (!comm) return ncclInvalidArgument;
  if (comm->size == 1) {
    *out = color == NCCL_SPLIT_NOCOLOR ? nullptr : new ncclComm{MPI_COMM_NULL, 0, 1, {}};
    return ncclSuccess;
  }
  MPI_Comm sub = MPI_COMM_NULL;
  const int code =
      MPI_Comm_split(comm->mpi, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &sub);
  if (code != MPI_SUCCESS) return mpi_result(comm, code, "MPI_Comm_split");
  if (sub == MPI_COMM_NULL) {
    *out = nullptr;
    return ncclSuccess;
  }
  auto* split = new ncclComm;
  MPI_Comm_rank(sub, &split->rank);
  MPI_Comm_size(sub, &split->size);
  if (split->size > 1)
    split->mpi = sub;
  else
    MPI_Comm_free(&sub);
  *out = split;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
  if (comm->mpi != MPI_COMM_NULL) MPI_Comm_free(&comm->mpi);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  return ncclCommDestroy(comm);
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (!comm) return ncclInvalidArgument;
  *count = comm->size;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (!comm) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  if (group_depth++ == 0) group_access = std::make_unique<DeviceAccess>();
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return ncclInvalidUsage;
  if (--group_depth > 0) return ncclSuccess;
  std::vector<MPI_Request> requests;
  requests.swap(group_requests);
  const int code = MPI_Waitall(int(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
  std::vector<SelfTransfer> sends, receives;
  sends.swap(group_self_sends);
  receives.swap(group_self_receives);
  bool paired = sends.size() == receives.size();
  for (size_t i = 0; paired && i < sends.size(); ++i) {
    paired = sends[i].bytes == receives[i].bytes;
    if (paired) std::memmove(receives[i].buffer, sends[i].buffer, sends[i].bytes);
  }
  group_access.reset();
  if (!paired) return ncclInvalidUsage;  // a send to itself without its matching receive
  return code == MPI_SUCCESS ? ncclSuccess : ncclSystemError;
}

ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return point_to_point(true, const_cast<void*>(send), count, t, peer, comm, stream);
}

ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return point_to_point(false, recv, count, t, peer, comm, stream);
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (const ncclResult_t r = check_call(comm, t, op, true); r != ncclSuccess) return r;
  const size_t bytes = count * type_bytes(t);
  std::vector<char> all;
  if (const ncclResult_t r = gather_inputs(comm, stream, send, bytes, all); r != ncclSuccess)
    return r;
  DeviceAccess access;
  reduce(all.data(), bytes, comm->size, count, t, op, static_cast<char*>(recv));
  return ncclSuccess;
}

ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t t,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  if (const ncclResult_t r = check_call(comm, t, op, true); r != ncclSuccess) return r;
  if (root < 0 || root >= comm->size) return invalid(comm, "a root outside the communicator");
  const size_t bytes = count * type_bytes(t);
  std::vector<char> all;
  if (const ncclResult_t r = gather_inputs(comm, stream, send, bytes, all); r != ncclSuccess)
    return r;
  DeviceAccess access;
  if (comm->rank == root)
    reduce(all.data(), bytes, comm->size, count, t, op, static_cast<char*>(recv));
  return ncclSuccess;
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t t,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (const ncclResult_t r = check_call(comm, t, op, true); r != ncclSuccess) return r;
  const size_t block = count * type_bytes(t), bytes = block * size_t(comm->size);
  std::vector<char> all;
  if (const ncclResult_t r = gather_inputs(comm, stream, send, bytes, all); r != ncclSuccess)
    return r;
  DeviceAccess access;
  reduce(all.data() + size_t(comm->rank) * block, bytes, comm->size, count, t, op,
         static_cast<char*>(recv));
  return ncclSuccess;
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t t,
                           ncclComm_t comm, cudaStream_t stream) {
  if (const ncclResult_t r = check_call(comm, t, ncclSum, false); r != ncclSuccess) return r;
  const size_t bytes = count * type_bytes(t);
  std::vector<char> all;
  if (const ncclResult_t r = gather_inputs(comm, stream, send, bytes, all); r != ncclSuccess)
    return r;
  DeviceAccess access;
  std::memcpy(recv, all.data(), all.size());
  return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  if (const ncclResult_t r = check_call(comm, t, ncclSum, false); r != ncclSuccess) return r;
  if (root < 0 || root >= comm->size) return invalid(comm, "a root outside the communicator");
  megatron::simt::synchronize(stream);  // the collective runs after its stream's queue
  DeviceAccess access;
  const size_t bytes = count * type_bytes(t);
  if (comm->rank == root && send != recv) std::memmove(recv, send, bytes);
  if (comm->size == 1) return ncclSuccess;
  return mpi_result(comm, MPI_Bcast(recv, int(bytes), MPI_BYTE, root, comm->mpi), "MPI_Bcast");
}

}  // extern "C"
