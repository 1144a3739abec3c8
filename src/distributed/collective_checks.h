// Argument checks shared by every Communicator implementation, so that a wrong shape or
// dtype gets the same message whichever communicator runs (and single-process runs catch
// the bugs multi-process runs would).
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor.h"

namespace megatron {

// A defined, contiguous tensor, on any device: each implementation decides how it moves the
// tensors of a device (MpiCommunicator stages CUDA tensors through host memory,
// NcclCommunicator hands CPU tensors to its MPI twin).
void check_comm_tensor(const Tensor& t, const char* op, const char* what);
// whole.shape == [group_size · chunk.shape[0], chunk.shape[1:]...], both have one dtype and
// both live on one device: the shapes of all_gather (chunk = input, whole = output) and
// reduce_scatter (the reverse).
void check_chunked_dim0(const Tensor& chunk, const char* chunk_name, const Tensor& whole,
                        const char* whole_name, int group_size, const char* op);
// The dtype of a non-blocking reduction (iall_reduce, ireduce_scatter): f32, f64, i32 or i64.
void check_nonblocking_reduction(const Tensor& t, const char* op);
// ireduce_scatter's shapes: `counts` has group_size entries, each >= 0, and `t` is 1-D with
// their sum.
void check_scatter_counts(const Tensor& t, std::span<const int64_t> counts, int group_size,
                          const char* op);
// all_to_all_v's shapes: size group_size for both count lists, each >= 0, `in` and `out` with
// one dtype and device, at least one dimension, equal trailing dims and dim 0 the counts' sums.
// Returns the elements of one row (the product of the trailing dims).
int64_t check_all_to_all_v(const Tensor& in, std::span<const int64_t> send_rows, const Tensor& out,
                           std::span<const int64_t> recv_rows, int group_size);
// 0 <= r < size, naming the argument (root, dst, src).
void check_peer_rank(int r, int size, const char* op, const char* what);
// split() colors must be non-negative (negative values are reserved by MPI).
void check_split_color(int color);

}  // namespace megatron
