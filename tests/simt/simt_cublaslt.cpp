// cuBLASLt for the emulated GPU: a shared library with the 15 functions megatron resolves
// (kernels/cuda/cublaslt_library.h), computing what cuBLASLt's documentation promises, so that
// kernels/cuda/gemm.cu's use of it — the transposes, the column-major layouts that swap our A
// and B, the leading dimensions, batch strides, alpha/beta, alignments — is checked without a
// GPU. The emulated build (megatron_simt) opens this library where the real build opens
// libcublasLt.
//
// D = alpha · op(A) · op(B) + beta · C, column-major: element (i, j) of a rows × cols layout
// with leading dimension ld is at i + j·ld, entry b of a batch at b · batch stride. Products
// accumulate in f32 in k order (CUBLAS_COMPUTE_32F); under CUBLAS_COMPUTE_32F_FAST_TF32 the f32
// inputs are first rounded to TF32 (10 mantissa bits), as the tensor cores do; D is rounded to
// its type once. CUBLAS_COMPUTE_64F takes f64 matrices and f64 alpha/beta only, and
// accumulates in f64. With beta = 0, C is not read (it may hold NaN). Every attribute megatron does
// not set is refused (CUBLAS_STATUS_NOT_SUPPORTED), so a new use fails loudly until it is
// emulated; pointers must meet the alignments the algorithm was chosen for, as on a GPU.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <bit>
#include <cstdint>
#include <cstring>

#include "simt_streams.h"

namespace {

struct Handle {};

struct MatmulDesc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  int32_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
};

struct Layout {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch = 1;
  int64_t stride = 0;
};

// Minimum alignments requested, kept in the algorithm the heuristic returns.
struct Preference {
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D: cuBLASLt's defaults
  uint64_t workspace = 0;
};

template <typename T, typename Opaque>
T* as(Opaque* p) {
  return reinterpret_cast<T*>(p);
}

template <typename V>
bool read_attribute(const void* buf, size_t bytes, V& out) {
  if (bytes != sizeof(V)) return false;
  std::memcpy(&out, buf, sizeof(V));
  return true;
}

float load(cudaDataType type, const void* base, int64_t index) {
  switch (type) {
    case CUDA_R_32F:
      return static_cast<const float*>(base)[index];
    case CUDA_R_16BF:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[index]);
    default:
      return __half2float(static_cast<const __half*>(base)[index]);
  }
}

void store(cudaDataType type, void* base, int64_t index, float v) {
  switch (type) {
    case CUDA_R_32F:
      static_cast<float*>(base)[index] = v;
      break;
    case CUDA_R_16BF:
      static_cast<__nv_bfloat16*>(base)[index] = __float2bfloat16_rn(v);
      break;
    default:
      static_cast<__half*>(base)[index] = __float2half_rn(v);
  }
}

// Round-to-nearest-even to TF32's 10 explicit mantissa bits (finite values).
float to_tf32(float v) {
  uint32_t bits = std::bit_cast<uint32_t>(v);
  if ((bits & 0x7f800000u) == 0x7f800000u) return v;
  bits += 0xfffu + ((bits >> 13) & 1u);
  return std::bit_cast<float>(bits & 0xffffe000u);
}

bool supported_type(cudaDataType t) {
  return t == CUDA_R_32F || t == CUDA_R_16BF || t == CUDA_R_16F || t == CUDA_R_64F;
}

size_t type_bytes(cudaDataType t) {
  return t == CUDA_R_64F ? 8 : t == CUDA_R_32F ? 4 : 2;
}

bool aligned(const void* p, int64_t ld, const Layout& l, uint32_t alignment) {
  const size_t bytes = type_bytes(l.type);
  const auto ok = [&](uint64_t v) { return v % alignment == 0; };
  return ok(reinterpret_cast<uintptr_t>(p)) && ok(uint64_t(ld) * bytes) &&
         (l.batch == 1 || ok(uint64_t(l.stride) * bytes));
}

}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = reinterpret_cast<cublasLtHandle_t>(new Handle);
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    default:
      return "CUBLAS_STATUS_(emulated)";
  }
}

const char* cublasLtGetStatusString(cublasStatus_t status) {
  return cublasLtGetStatusName(status);
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  if (compute == CUBLAS_COMPUTE_64F) {
    if (scale != CUDA_R_64F) return CUBLAS_STATUS_NOT_SUPPORTED;
  } else {
    if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32)
      return CUBLAS_STATUS_NOT_SUPPORTED;
    if (scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  *desc = reinterpret_cast<cublasLtMatmulDesc_t>(new MatmulDesc{compute, scale});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete as<MatmulDesc>(desc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t bytes) {
  MatmulDesc* d = as<MatmulDesc>(desc);
  int32_t op = 0;
  if (attr != CUBLASLT_MATMUL_DESC_TRANSA && attr != CUBLASLT_MATMUL_DESC_TRANSB)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (!read_attribute(buf, bytes, op) || (op != CUBLAS_OP_N && op != CUBLAS_OP_T))
    return CUBLAS_STATUS_INVALID_VALUE;
  (attr == CUBLASLT_MATMUL_DESC_TRANSA ? d->trans_a : d->trans_b) = op;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (!supported_type(type)) return CUBLAS_STATUS_NOT_SUPPORTED;
  // cuBLASLt: ld >= rows for a column-major matrix.
  if (ld < int64_t(rows) || ld <= 0) return CUBLAS_STATUS_INVALID_VALUE;
  *layout = reinterpret_cast<cublasLtMatrixLayout_t>(new Layout{type, rows, cols, ld});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete as<Layout>(layout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t bytes) {
  Layout* l = as<Layout>(layout);
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return read_attribute(buf, bytes, l->batch) && l->batch >= 1 ? CUBLAS_STATUS_SUCCESS
                                                                   : CUBLAS_STATUS_INVALID_VALUE;
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return read_attribute(buf, bytes, l->stride) ? CUBLAS_STATUS_SUCCESS
                                                   : CUBLAS_STATUS_INVALID_VALUE;
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(new Preference);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete as<Preference>(pref);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t bytes) {
  Preference* p = as<Preference>(pref);
  uint32_t value = 0;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return read_attribute(buf, bytes, p->workspace) ? CUBLAS_STATUS_SUCCESS
                                                      : CUBLAS_STATUS_INVALID_VALUE;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      if (!read_attribute(buf, bytes, value) || value == 0 || (value & (value - 1)) != 0)
        return CUBLAS_STATUS_INVALID_VALUE;
      p->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = value;
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
      return read_attribute(buf, bytes, value) ? CUBLAS_STATUS_SUCCESS
                                               : CUBLAS_STATUS_INVALID_VALUE;
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int* found) {
  const MatmulDesc* op = as<MatmulDesc>(desc);
  const Layout *la = as<Layout>(a), *lb = as<Layout>(b), *lc = as<Layout>(c), *ld = as<Layout>(d);
  // The shapes must agree: op(A) m × k, op(B) k × n, C and D m × n.
  const uint64_t m = op->trans_a == CUBLAS_OP_N ? la->rows : la->cols;
  const uint64_t k = op->trans_a == CUBLAS_OP_N ? la->cols : la->rows;
  const uint64_t kb = op->trans_b == CUBLAS_OP_N ? lb->rows : lb->cols;
  const uint64_t n = op->trans_b == CUBLAS_OP_N ? lb->cols : lb->rows;
  if (k != kb || lc->rows != m || lc->cols != n || ld->rows != m || ld->cols != n)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (la->batch != lc->batch || lb->batch != lc->batch || ld->batch != lc->batch)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (la->type != lb->type) return CUBLAS_STATUS_NOT_SUPPORTED;
  // f64 matrices with the f64 compute type only, and the other way round.
  const bool f64 = op->compute == CUBLAS_COMPUTE_64F;
  for (const Layout* l : {la, lb, lc, ld})
    if ((l->type == CUDA_R_64F) != f64) return CUBLAS_STATUS_NOT_SUPPORTED;
  *found = 0;
  if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  cublasLtMatmulHeuristicResult_t& r = results[0];
  std::memset(&r, 0, sizeof r);
  std::memcpy(r.algo.data, as<Preference>(pref)->align, sizeof(Preference::align));
  r.workspaceSize = 0;
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.f;
  *found = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t*,
                                                    cublasLtMatmulAlgoConfigAttributes_t attr,
                                                    void* buf, size_t bytes, size_t* written) {
  if (attr != CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME) return CUBLAS_STATUS_NOT_SUPPORTED;
  const uint32_t none = CUBLASLT_REDUCTION_SCHEME_NONE;  // one pass over k: no split
  if (written) *written = sizeof none;
  if (bytes < sizeof none) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(buf, &none, sizeof none);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t a, const void* B,
                              cublasLtMatrixLayout_t b, const void* beta, const void* C,
                              cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t* algo, void*, size_t,
                              cudaStream_t stream) {
  const MatmulDesc op = *as<MatmulDesc>(desc);
  const Layout la = *as<Layout>(a), lb = *as<Layout>(b), lc = *as<Layout>(c), ld = *as<Layout>(d);
  if (!algo) return CUBLAS_STATUS_NOT_SUPPORTED;  // the heuristic's algorithm is required here
  uint32_t align[4];
  std::memcpy(align, algo->data, sizeof align);
  if (!aligned(A, la.ld, la, align[0]) || !aligned(B, lb.ld, lb, align[1]) ||
      !aligned(C, lc.ld, lc, align[2]) || !aligned(D, ld.ld, ld, align[3]))
    return CUBLAS_STATUS_INVALID_VALUE;  // misaligned for the algorithm
  // Host pointer mode: alpha and beta are read now; the product runs in stream order (through
  // the executable's simt_streams.h: this library is loaded into an emulated-GPU executable).
  if (op.compute == CUBLAS_COMPUTE_64F) {
    const double al = *static_cast<const double*>(alpha), be = *static_cast<const double*>(beta);
    megatron::simt::enqueue(stream, [=] {
      const bool ta = op.trans_a == CUBLAS_OP_T, tb = op.trans_b == CUBLAS_OP_T;
      const int64_t m = int64_t(ld.rows), n = int64_t(ld.cols);
      const int64_t k = int64_t(ta ? la.rows : la.cols);
      const double* a64 = static_cast<const double*>(A);
      const double* b64 = static_cast<const double*>(B);
      for (int32_t e = 0; e < ld.batch; ++e)
        for (int64_t j = 0; j < n; ++j)
          for (int64_t i = 0; i < m; ++i) {
            double acc = 0;
            for (int64_t p = 0; p < k; ++p)
              acc += a64[e * la.stride + (ta ? p + i * la.ld : i + p * la.ld)] *
                     b64[e * lb.stride + (tb ? j + p * lb.ld : p + j * lb.ld)];
            double out = al * acc;
            if (be != 0) out += be * static_cast<const double*>(C)[e * lc.stride + i + j * lc.ld];
            static_cast<double*>(D)[e * ld.stride + i + j * ld.ld] = out;
          }
    });
    return CUBLAS_STATUS_SUCCESS;
  }
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  megatron::simt::enqueue(stream, [=] {
    const bool ta = op.trans_a == CUBLAS_OP_T, tb = op.trans_b == CUBLAS_OP_T;
    const int64_t m = int64_t(ld.rows), n = int64_t(ld.cols);
    const int64_t k = int64_t(ta ? la.rows : la.cols);
    const bool tf32 = op.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
    const auto input = [&](cudaDataType type, const void* base, int64_t index) {
      const float v = load(type, base, index);
      return tf32 && type == CUDA_R_32F ? to_tf32(v) : v;
    };
    for (int32_t e = 0; e < ld.batch; ++e)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t i = 0; i < m; ++i) {
          float acc = 0.f;
          for (int64_t p = 0; p < k; ++p) {
            // op(A)(i, p) and op(B)(p, j).
            const int64_t ia = e * la.stride + (ta ? p + i * la.ld : i + p * la.ld);
            const int64_t ib = e * lb.stride + (tb ? j + p * lb.ld : p + j * lb.ld);
            acc += input(la.type, A, ia) * input(lb.type, B, ib);
          }
          float out = al * acc;
          if (be != 0.f) out += be * load(lc.type, C, e * lc.stride + i + j * lc.ld);
          store(ld.type, D, e * ld.stride + i + j * ld.ld, out);
        }
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
