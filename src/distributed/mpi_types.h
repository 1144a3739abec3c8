// MPI's view of megatron's types, and MPI errors as megatron::Error (internal to the MPI
// communicator and its collectives: mpi_communicator.cpp, ring_reduction.cpp).
#pragma once

#include <mpi.h>

#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "distributed/communicator.h"

namespace megatron {

// Throws "<op>: MPI error <code>: <MPI's text>" unless code is MPI_SUCCESS.
inline void mpi_check(int code, const char* op) {
  if (code == MPI_SUCCESS) [[likely]]
    return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  MT_THROW(op, ": MPI error ", code, ": ", std::string(text, length));
}

// bf16/f16 travel as 16-bit words; they are only reduced after staging through f32.
inline MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32:
      return MPI_FLOAT;
    case DType::F64:
      return MPI_DOUBLE;
    case DType::BF16:
    case DType::F16:
      return MPI_UINT16_T;
    case DType::I32:
      return MPI_INT32_T;
    case DType::I64:
      return MPI_INT64_T;
    case DType::U8:
      return MPI_UINT8_T;
  }
  MT_THROW("no MPI type for dtype ", dtype_name(t));
}

inline MPI_Op mpi_op(ReduceOp op) {
  return op == ReduceOp::SUM ? MPI_SUM : MPI_MAX;
}

}  // namespace megatron
