// oneDNN matmul backend (see onednn_matmul.h). Creating a matmul primitive costs far more
// than running a small one, so primitives are built once per signature (shape, transposes,
// strides, dtypes, alpha, beta) and kept in a process-wide, mutex-guarded map. Data pointers
// are not part of the signature: they are bound at execution time.
#include "kernels/cpu/onednn_matmul.h"

#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>

#include "core/error.h"

namespace megatron::kernels::cpu {

namespace {

using Signature = std::tuple<int64_t, int64_t, int64_t, int64_t, bool, bool, int64_t, int64_t,
                             int64_t, int64_t, int64_t, int64_t, DType, DType, float, float>;

Signature signature_of(const GemmProblem& p) {
  return {p.batch, p.m,       p.n,       p.k,       p.trans_a,  p.trans_b, p.lda,   p.ldb,
          p.ldc,   p.batch_a, p.batch_b, p.batch_c, p.ab_dtype, p.c_dtype, p.alpha, p.beta};
}

dnnl::memory::data_type dnnl_type(DType t) {
  switch (t) {
    case DType::F32:
      return dnnl::memory::data_type::f32;
    case DType::BF16:
      return dnnl::memory::data_type::bf16;
    default:
      MT_THROW("oneDNN matmul: unsupported dtype ", dtype_name(t));
  }
}

// A row-major matrix [rows, cols] with row stride ld (or its transpose, stored [cols, rows]),
// batched with batch stride bs: the descriptor oneDNN multiplies (2-D when batch is 1, where
// the batch stride means nothing).
dnnl::memory::desc matrix_desc(int64_t batch, int64_t rows, int64_t cols, bool trans, int64_t ld,
                               int64_t bs, DType t) {
  const dnnl::memory::dims strides2 = trans ? dnnl::memory::dims{1, ld} : dnnl::memory::dims{ld, 1};
  if (batch == 1) return dnnl::memory::desc({rows, cols}, dnnl_type(t), strides2);
  return dnnl::memory::desc({batch, rows, cols}, dnnl_type(t), {bs, strides2[0], strides2[1]});
}

struct Entry {
  std::unique_ptr<dnnl::matmul> primitive;  // null: only the reference implementation exists
  dnnl::memory::desc a, b, c;
  std::string impl;
};

struct Cache {
  std::mutex mutex;
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  std::map<Signature, Entry> entries;
};

Cache& cache() {
  static Cache c;
  return c;
}

const Entry& entry_for(const GemmProblem& p) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  auto [it, inserted] = c.entries.try_emplace(signature_of(p));
  Entry& e = it->second;
  if (!inserted) return e;
  e.a = matrix_desc(p.batch, p.m, p.k, p.trans_a, p.lda, p.batch_a, p.ab_dtype);
  e.b = matrix_desc(p.batch, p.k, p.n, p.trans_b, p.ldb, p.batch_b, p.ab_dtype);
  e.c = matrix_desc(p.batch, p.m, p.n, false, p.ldc, p.batch_c, p.c_dtype);
  dnnl::primitive_attr attr;
  if (p.alpha != 1.f) attr.set_output_scales(0, {p.alpha});
  if (p.beta != 0.f) {
    dnnl::post_ops ops;
    ops.append_sum(p.beta);
    attr.set_post_ops(ops);
  }
  try {
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(e.a, e.b, e.c), attr, c.engine);
    e.impl = pd.impl_info_str();
    if (e.impl.rfind("ref", 0) != 0) e.primitive = std::make_unique<dnnl::matmul>(pd);
  } catch (const dnnl::error&) {
    e.impl = "none";  // e.g. bf16 on a CPU without AVX-512: oneDNN has no kernel at all
  }
  return e;
}

}  // namespace

bool onednn_matmul(const GemmProblem& p) {
  const Entry& e = entry_for(p);
  if (!e.primitive) return false;
  const dnnl::engine& engine = cache().engine;
  dnnl::stream stream(engine);
  dnnl::memory a(e.a, engine, const_cast<void*>(p.a));
  dnnl::memory b(e.b, engine, const_cast<void*>(p.b));
  dnnl::memory c(e.c, engine, p.c);
  e.primitive->execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
  stream.wait();
  return true;
}

std::string onednn_matmul_impl(const GemmProblem& p) {
  return entry_for(p).impl;
}

}  // namespace megatron::kernels::cpu
