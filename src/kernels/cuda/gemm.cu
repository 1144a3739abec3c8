// kernels::gemm / batched_gemm on CUDA (contract: kernels/gemm.h) through cuBLASLt.
//
// Row-major to column-major: a row-major matrix with row stride ld is, byte for byte, the
// column-major matrix of its transpose with leading dimension ld. So the row-major problem
//   C[M,N] = alpha · op(A)[M,K] · op(B)[K,N] + beta · C
// is handed to cuBLASLt (column-major) as its transpose
//   Cᵀ[N,M] = alpha · op(B)ᵀ[N,K] · op(A)ᵀ[K,M] + beta · Cᵀ
// with cuBLASLt's "A" = our B and its "B" = our A, each keeping its own transpose flag:
//   cuBLASLt A = our B: trans_b ? (K×N stored, ld ldb, op T) : (N×K stored, ld ldb, op N)
//   cuBLASLt B = our A: trans_a ? (M×K stored, ld lda, op T) : (K×M stored, ld lda, op N)
//   cuBLASLt C = D = our C: N×M stored, ld ldc
// (rows×cols of the column-major storage before op). Batches use the strided-batch layout
// attributes; a batch stride of 0 broadcasts an operand.
//
// Numerics: every product accumulates in f32 (CUBLAS_COMPUTE_32F, f32 alpha/beta); f32
// inputs multiply in full f32 unless kernels::set_allow_tf32(true) (then
// CUBLAS_COMPUTE_32F_FAST_TF32). f64 operands (the MoE router's --moe-router-dtype fp64)
// multiply and accumulate in f64 (CUBLAS_COMPUTE_64F, f64 alpha/beta). For a 16-bit C, split-K
// algorithms that add partial sums in C's type (reduction schemes INPLACE, OUTPUT_TYPE) are
// excluded from the heuristic's choice (CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, checked again
// on the result), so C is rounded once, as on the CPU.
//
// Determinism: one algorithm per problem signature, chosen once by the heuristic and cached,
// and one fixed workspace, so the same problem gives the same bits on every call (cuBLASLt's
// split-K reductions are ordered, see cublasLtReductionScheme_t).
//
// State: the cuBLASLt library, opened on the first GEMM (kernels/cuda/cublaslt_library.h: a
// process that never multiplies on the GPU never maps it), one cuBLASLt handle and one 32 MiB
// workspace per process (never freed: the driver may be gone during static destruction), and
// a cache from problem signature to descriptors and algorithm, so steady-state training makes
// no heuristic query. Everything is queued on the compute stream.
#include <cublasLt.h>

#include <cstring>
#include <mutex>
#include <unordered_map>

#include "core/device_runtime.h"
#include "kernels/cuda/cublaslt_library.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/float_bits.cuh"
#include "kernels/gemm_options.h"

#define MT_CUBLAS_CHECK(expr)                                                                     \
  do {                                                                                            \
    const cublasStatus_t mt_cublas_status_ = (expr);                                              \
    if (mt_cublas_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                                  \
      MT_THROW(                                                                                   \
          "cuBLASLt call `", #expr, "` failed: ",                                                 \
          ::megatron::kernels::cuda::cublaslt().cublasLtGetStatusString(mt_cublas_status_), " (", \
          ::megatron::kernels::cuda::cublaslt().cublasLtGetStatusName(mt_cublas_status_), ")");   \
  } while (0)

namespace megatron::kernels::cuda {

namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;
constexpr size_t kMaxCachedProblems = 1024;  // inference grows attention shapes step by step
constexpr int kHeuristicResults = 8;

cudaDataType_t cuda_type(DType dtype, const char* what) {
  switch (dtype) {
    case DType::F32:
      return CUDA_R_32F;
    case DType::BF16:
      return CUDA_R_16BF;
    case DType::F16:
      return CUDA_R_16F;
    case DType::F64:
      return CUDA_R_64F;
    default:
      MT_THROW("gemm ", what, " has dtype ", dtype_name(dtype), ", expected f32, bf16, f16 or f64");
  }
}

// The alignment (bytes, a power of two <= 256) that every matrix of an operand has: the base
// address, each batch entry's offset and each row's offset. cuBLASLt's heuristic assumes 256
// unless told, and would otherwise pick vectorised kernels for sliced (e.g. per-head) operands.
uint32_t alignment(const void* p, int64_t ld, int64_t batch, int64_t batch_stride, size_t elem) {
  uint64_t bits = uint64_t(reinterpret_cast<uintptr_t>(p)) | 256u | uint64_t(ld) * elem;
  if (batch > 1) bits |= uint64_t(batch_stride) * elem;
  return uint32_t(bits & (~bits + 1));  // lowest set bit
}

// Everything the descriptors and the algorithm choice depend on.
struct Key {
  int64_t batch, m, n, k, lda, ldb, ldc, batch_a, batch_b, batch_c;
  uint32_t align_a, align_b, align_c;
  bool trans_a, trans_b, tf32;
  DType ab, c;
  bool operator==(const Key&) const = default;
};

struct KeyHash {
  size_t operator()(const Key& key) const {
    const int64_t words[] = {key.batch,
                             key.m,
                             key.n,
                             key.k,
                             key.lda,
                             key.ldb,
                             key.ldc,
                             key.batch_a,
                             key.batch_b,
                             key.batch_c,
                             key.align_a,
                             key.align_b,
                             key.align_c,
                             int64_t(key.trans_a) | int64_t(key.trans_b) << 1 |
                                 int64_t(key.tf32) << 2 | int64_t(key.ab) << 8 |
                                 int64_t(key.c) << 16};
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
    for (int64_t w : words) {
      h ^= uint64_t(w);
      h *= 1099511628211ull;
      h ^= h >> 29;
    }
    return size_t(h);
  }
};

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLASLt's A, B, C (= D)
  cublasLtMatmulAlgo_t algo{};
};

void destroy(Plan& plan) {
  const CublasLtApi& lt = cublaslt();
  // Host-side descriptors: matmuls already queued with them do not need them any more.
  if (plan.a) lt.cublasLtMatrixLayoutDestroy(plan.a);
  if (plan.b) lt.cublasLtMatrixLayoutDestroy(plan.b);
  if (plan.c) lt.cublasLtMatrixLayoutDestroy(plan.c);
  if (plan.op) lt.cublasLtMatmulDescDestroy(plan.op);
  plan = Plan{};
}

struct State {
  std::mutex mutex;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::unordered_map<Key, Plan, KeyHash> plans;
};

// Created on first use under the lock; never destroyed (see the file comment).
State& state() {
  static State* s = new State();
  return *s;
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                                   int64_t batch, int64_t batch_stride) {
  // A single column's leading dimension is never used; cuBLASLt still wants it >= rows.
  if (cols <= 1 && ld < rows) ld = rows;
  const CublasLtApi& lt = cublaslt();
  cublasLtMatrixLayout_t layout = nullptr;
  MT_CUBLAS_CHECK(lt.cublasLtMatrixLayoutCreate(&layout, type, uint64_t(rows), uint64_t(cols), ld));
  if (batch > 1) {
    const int32_t count = int32_t(batch);
    MT_CUBLAS_CHECK(lt.cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                        &count, sizeof(count)));
    MT_CUBLAS_CHECK(lt.cublasLtMatrixLayoutSetAttribute(
        layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &batch_stride, sizeof(batch_stride)));
  }
  return layout;
}

// True when the algorithm's split-K partial sums are reduced in the compute type (f32) or not
// split at all.
bool reduces_in_f32(const cublasLtMatmulAlgo_t& algo) {
  const CublasLtApi& lt = cublaslt();
  uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
  size_t written = 0;
  if (lt.cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                              sizeof(scheme), &written) != CUBLAS_STATUS_SUCCESS)
    return false;
  return scheme == CUBLASLT_REDUCTION_SCHEME_NONE ||
         scheme == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
}

std::string describe(const GemmProblem& p) {
  return detail::concat(dtype_name(p.ab_dtype), " [", p.batch, " x ", p.m, " x ", p.k, "] · [", p.k,
                        " x ", p.n, "] -> ", dtype_name(p.c_dtype), " (trans_a ", p.trans_a,
                        ", trans_b ", p.trans_b, ", lda ", p.lda, ", ldb ", p.ldb, ", ldc ", p.ldc,
                        ", batch strides ", p.batch_a, "/", p.batch_b, "/", p.batch_c, ")");
}

Plan make_plan(State& s, const GemmProblem& p, const Key& key) {
  const cudaDataType_t ab = cuda_type(p.ab_dtype, "A/B"), c = cuda_type(p.c_dtype, "C");
  const bool f64 = p.ab_dtype == DType::F64;
  const cublasComputeType_t compute = f64        ? CUBLAS_COMPUTE_64F
                                      : key.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                 : CUBLAS_COMPUTE_32F;
  const CublasLtApi& lt = cublaslt();
  Plan plan;
  try {
    MT_CUBLAS_CHECK(lt.cublasLtMatmulDescCreate(&plan.op, compute, f64 ? CUDA_R_64F : CUDA_R_32F));
    const int32_t op_a = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our B
    const int32_t op_b = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's B is our A
    MT_CUBLAS_CHECK(lt.cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a,
                                                      sizeof(op_a)));
    MT_CUBLAS_CHECK(lt.cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b,
                                                      sizeof(op_b)));
    plan.a = p.trans_b ? make_layout(ab, p.k, p.n, p.ldb, p.batch, p.batch_b)
                       : make_layout(ab, p.n, p.k, p.ldb, p.batch, p.batch_b);
    plan.b = p.trans_a ? make_layout(ab, p.m, p.k, p.lda, p.batch, p.batch_a)
                       : make_layout(ab, p.k, p.m, p.lda, p.batch, p.batch_a);
    plan.c = make_layout(c, p.n, p.m, p.ldc, p.batch, p.batch_c);

    cublasLtMatmulPreference_t pref = nullptr;
    MT_CUBLAS_CHECK(lt.cublasLtMatmulPreferenceCreate(&pref));
    cublasLtMatmulHeuristicResult_t results[kHeuristicResults];
    int found = 0;
    cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
    {
      const uint64_t workspace = kWorkspaceBytes;
      // cuBLASLt's A is our B and vice versa.
      const uint32_t align_a = key.align_b, align_b = key.align_a, align_c = key.align_c;
      status = lt.cublasLtMatmulPreferenceSetAttribute(
          pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace));
      if (status == CUBLAS_STATUS_SUCCESS)
        status = lt.cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a));
      if (status == CUBLAS_STATUS_SUCCESS)
        status = lt.cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b));
      if (status == CUBLAS_STATUS_SUCCESS)
        status = lt.cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c));
      if (status == CUBLAS_STATUS_SUCCESS)
        status = lt.cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(align_c));
      if (status == CUBLAS_STATUS_SUCCESS && dtype_size(p.c_dtype) == 2) {
        // Split-K only with f32 partial sums (or none): C is rounded once.
        const uint32_t schemes =
            CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
        status = lt.cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof(schemes));
      }
      if (status == CUBLAS_STATUS_SUCCESS)
        status =
            lt.cublasLtMatmulAlgoGetHeuristic(s.handle, plan.op, plan.a, plan.b, plan.c, plan.c,
                                              pref, kHeuristicResults, results, &found);
    }
    lt.cublasLtMatmulPreferenceDestroy(pref);
    MT_CHECK(status == CUBLAS_STATUS_SUCCESS || status == CUBLAS_STATUS_NOT_SUPPORTED,
             "cuBLASLt heuristic query failed for ", describe(p), ": ",
             lt.cublasLtGetStatusString(status));
    // Results come fastest first; take the first that rounds a 16-bit C only once, else (not
    // expected: unsplit algorithms qualify) the fastest usable one rather than no GEMM at all.
    int chosen = -1, usable = -1;
    for (int i = 0; i < found && status == CUBLAS_STATUS_SUCCESS; ++i) {
      if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
      if (results[i].workspaceSize > kWorkspaceBytes) continue;
      if (usable < 0) usable = i;
      if (dtype_size(p.c_dtype) == 2 && !reduces_in_f32(results[i].algo)) continue;
      chosen = i;
      break;
    }
    if (chosen < 0) chosen = usable;
    MT_CHECK(chosen >= 0, "cuBLASLt has no algorithm for ", describe(p),
             " (alignments A/B/C: ", key.align_a, "/", key.align_b, "/", key.align_c, " bytes)");
    plan.algo = results[chosen].algo;
  } catch (...) {
    destroy(plan);
    throw;
  }
  return plan;
}

// C = beta · C (0 when beta is 0, whatever C held) over batch × M × N, for K = 0.
template <typename T>
__global__ void scale_c_kernel(T* c, int64_t batch_c, int64_t ldc, int64_t m, int64_t n,
                               int64_t total, float beta) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t col = i % n, row = (i / n) % m, entry = i / (n * m);
    T* x = c + entry * batch_c + row * ldc + col;
    *x = exact_from_f32<T>(beta == 0.f ? 0.f : __fmul_rn(beta, exact_to_f32(*x)));
  }
}

void scale_c_only(const GemmProblem& p) {
  const int64_t total = p.batch * p.m * p.n;
  dispatch_float(p.c_dtype, "gemm C", [&](auto tag) {
    using T = decltype(tag);
    scale_c_kernel<T><<<blocks_for(total), kThreads, 0, stream()>>>(static_cast<T*>(p.c), p.batch_c,
                                                                    p.ldc, p.m, p.n, total, p.beta);
    megatron::cuda::check_launch("gemm scale_c");
  });
}

}  // namespace

void gemm(const GemmProblem& p) {
  if (p.batch == 0 || p.m == 0 || p.n == 0) return;
  if (p.k == 0) return scale_c_only(p);
  constexpr int64_t kIntMax = 2147483647;
  MT_CHECK(p.m <= kIntMax && p.n <= kIntMax && p.k <= kIntMax && p.batch <= kIntMax,
           "gemm dimensions exceed cuBLASLt's int32 range: ", describe(p));

  const size_t ab_size = dtype_size(p.ab_dtype), c_size = dtype_size(p.c_dtype);
  Key key{};
  key.batch = p.batch;
  key.m = p.m;
  key.n = p.n;
  key.k = p.k;
  key.lda = p.lda;
  key.ldb = p.ldb;
  key.ldc = p.ldc;
  // Batch strides mean nothing for one entry: drop them so such problems share a plan.
  key.batch_a = p.batch > 1 ? p.batch_a : 0;
  key.batch_b = p.batch > 1 ? p.batch_b : 0;
  key.batch_c = p.batch > 1 ? p.batch_c : 0;
  key.align_a = alignment(p.a, p.lda, p.batch, p.batch_a, ab_size);
  key.align_b = alignment(p.b, p.ldb, p.batch, p.batch_b, ab_size);
  key.align_c = alignment(p.c, p.ldc, p.batch, p.batch_c, c_size);
  key.trans_a = p.trans_a;
  key.trans_b = p.trans_b;
  key.tf32 = p.ab_dtype == DType::F32 && allow_tf32();
  key.ab = p.ab_dtype;
  key.c = p.c_dtype;

  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const CublasLtApi& lt = cublaslt();  // opens libcublasLt on the process's first GEMM
  if (!s.handle) MT_CUBLAS_CHECK(lt.cublasLtCreate(&s.handle));
  if (!s.workspace)
    s.workspace = device_allocate(kWorkspaceBytes, Device::cuda(megatron::cuda::bound_device()));
  auto it = s.plans.find(key);
  if (it == s.plans.end()) {
    if (s.plans.size() >= kMaxCachedProblems) {
      for (auto& entry : s.plans) destroy(entry.second);
      s.plans.clear();
    }
    Plan plan = make_plan(s, p, key);
    it = s.plans.emplace(key, plan).first;
  }
  const Plan& plan = it->second;
  // alpha and beta in the scale type: f64 for f64 problems, else f32.
  const float alpha = p.alpha, beta = p.beta;
  const double alpha64 = p.alpha, beta64 = p.beta;
  const bool f64 = p.ab_dtype == DType::F64;
  // cuBLASLt's A is our B, its B our A; C is read (beta != 0) and written in place.
  MT_CUBLAS_CHECK(
      lt.cublasLtMatmul(s.handle, plan.op, f64 ? static_cast<const void*>(&alpha64) : &alpha, p.b,
                        plan.a, p.a, plan.b, f64 ? static_cast<const void*>(&beta64) : &beta, p.c,
                        plan.c, p.c, plan.c, &plan.algo, s.workspace, kWorkspaceBytes, stream()));
}

}  // namespace megatron::kernels::cuda
