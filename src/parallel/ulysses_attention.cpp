#include "parallel/ulysses_attention.h"

#include <memory>
#include <vector>

#include "kernels/elementwise.h"
#include "kernels/flash_attention.h"
#include "parallel/ring_attention.h"

namespace megatron {

namespace {

// The geometry of the exchange and of the attention after it.
struct Ulysses {
  int a, member, p, group;         // A, this rank's rank in its a2a group, P, its group
  int64_t chunk, b, groups, q, d;  // C, batch, local KV groups G, queries per group, head dim

  Ulysses(const Communicator& a2a, const Communicator* p2p, const Shape& qkv,
          const CpAttentionParams& params)
      : a(a2a.size()),
        member(a2a.rank()),
        p(p2p ? p2p->size() : 1),
        group(p2p ? p2p->rank() : 0),
        chunk(params.layout.chunk()),
        b(qkv[1]),
        groups(qkv[2]),
        q(params.queries_per_group),
        d(qkv[4]) {
    const ContextParallelLayout& l = params.layout;
    MT_CHECK(l.split() && a * p == l.cp_size && l.cp_rank == group * a + member,
             "Ulysses attention: a2a group rank ", member, "/", a, " and p2p group rank ", group,
             "/", p, " do not tile CP rank ", l.cp_rank, "/", l.cp_size);
    MT_CHECK(qkv.size() == 5 && qkv[0] == l.local_seq() && qkv[3] == q + 2,
             "Ulysses attention: qkv must be [", l.local_seq(), ", b, G, ", q + 2, ", d]");
    MT_CHECK(groups % a == 0, "Ulysses attention: ", groups, " KV groups over an a2a group of ", a);
  }
  int64_t share() const { return groups / a; }  // KV groups per member after the exchange
  int64_t heads() const { return share() * q; }
  int64_t rows() const { return 2 * a * chunk; }  // the a2a group's positions
  // The first row, after the exchange, of member i's local chunk k (the layout of CP size P).
  int64_t row_of(int i, int k) const { return (k == 0 ? i : 2 * a - 1 - i) * chunk; }
  // The attention's parameters after the exchange: the group's layout, this member's heads.
  CpAttentionParams inner(const CpAttentionParams& params) const {
    CpAttentionParams in = params;
    in.layout = ContextParallelLayout::of(params.layout.seq, p, group);
    in.head_begin = params.head_begin + member * heads();
    return in;
  }
};

// x [2C, b, G, F] (this rank's chunks, every group) → y [2AC, b, G/A, F] (the a2a group's
// chunks in the layout of CP size P, this member's groups). Temporaries in `arena`.
void sequence_to_heads(Communicator& a2a, const Ulysses& u, const Tensor& x, Tensor& y,
                       Arena& arena) {
  const int64_t c = u.chunk, share = u.share();
  CommRequests requests;
  for (int i = 0; i < u.a; ++i)
    for (int k = 0; k < 2 && i != u.member; ++k) {
      Tensor rows = y.slice(0, u.row_of(i, k), u.row_of(i, k) + c);
      requests.push_back(a2a.irecv(rows, i, k));
    }
  std::vector<Tensor> sends;
  for (int i = 0; i < u.a; ++i) {
    const Tensor theirs = x.slice(2, i * share, (i + 1) * share);
    if (i == u.member) {
      for (int k = 0; k < 2; ++k) {
        Tensor dst = y.slice(0, u.row_of(i, k), u.row_of(i, k) + c);
        kernels::copy(theirs.slice(0, k * c, (k + 1) * c), dst);
      }
      continue;
    }
    sends.push_back(arena.alloc(theirs.shape(), x.dtype()));
    kernels::copy(theirs, sends.back());
    for (int k = 0; k < 2; ++k)
      requests.push_back(a2a.isend(sends.back().slice(0, k * c, (k + 1) * c), i, k));
  }
  wait_all(requests);
}

// The inverse: y [2AC, b, G/A, F] → x [2C, b, G, F]. Temporaries in `arena`.
void heads_to_sequence(Communicator& a2a, const Ulysses& u, const Tensor& y, Tensor& x,
                       Arena& arena) {
  const int64_t c = u.chunk, share = u.share();
  Shape shape = x.shape();
  shape[2] = share;
  std::vector<Tensor> received(size_t(u.a));
  CommRequests requests;
  for (int i = 0; i < u.a; ++i) {
    if (i == u.member) continue;
    received[size_t(i)] = arena.alloc(shape, x.dtype());
    for (int k = 0; k < 2; ++k) {
      Tensor half = received[size_t(i)].slice(0, k * c, (k + 1) * c);
      requests.push_back(a2a.irecv(half, i, k));
    }
  }
  for (int i = 0; i < u.a; ++i)
    for (int k = 0; k < 2; ++k) {
      const Tensor rows = y.slice(0, u.row_of(i, k), u.row_of(i, k) + c);
      if (i != u.member) {
        requests.push_back(a2a.isend(rows, i, k));
      } else {
        Tensor dst = x.slice(0, k * c, (k + 1) * c).slice(2, i * share, (i + 1) * share);
        kernels::copy(rows, dst);
      }
    }
  wait_all(requests);
  for (int i = 0; i < u.a; ++i) {
    if (i == u.member) continue;
    Tensor dst = x.slice(2, i * share, (i + 1) * share);
    kernels::copy(received[size_t(i)], dst);
  }
}

// The fused kernel's parameters for the whole sequence (P = 1); `rows` receives the dropout
// mask rows of this member's heads.
kernels::FlashAttentionParams whole_params(const CpAttentionParams& in, const Ulysses& u,
                                           std::vector<kernels::MaskRow>& rows) {
  kernels::FlashAttentionParams f;
  f.queries_per_group = in.queries_per_group;
  f.scale = in.scale;
  f.causal = true;
  if (in.scope.enabled && in.dropout_p > 0.0f) {
    rows = attention_dropout_rows(in.scope, in.layer, u.b, in.head_begin, u.heads(), in.layout.seq);
    f.dropout_p = in.dropout_p;
    f.seed = in.scope.seed;
    f.dropout_rows = &rows;
  }
  return f;
}

// [s, b, G, F] view of a contiguous [s, b, G·F] or [s, b, G, q + 2, d] tensor with G groups.
Tensor by_group(const Tensor& t, int64_t groups) {
  return t.view({t.size(0), t.size(1), groups, -1});
}

}  // namespace

void ulysses_attention_forward(Communicator& a2a, Communicator* p2p, const Tensor& qkv,
                               const CpAttentionParams& p, Tensor& out, UlyssesCtx& saved,
                               Arena& arena, Arena& workspace) {
  const Ulysses u(a2a, p2p, qkv.shape(), p);
  MT_CHECK(qkv.is_contiguous(), "Ulysses attention: qkv must be contiguous");
  check_shape(out, {2 * u.chunk, u.b, u.groups * u.q * u.d}, "Ulysses attention out");
  const DType dt = qkv.dtype();
  saved.qkv = arena.alloc({u.rows(), u.b, u.share(), u.q + 2, u.d}, dt);
  Tensor heads_qkv = by_group(saved.qkv, u.share());
  sequence_to_heads(a2a, u, by_group(qkv, u.groups), heads_qkv, workspace);
  saved.out = arena.alloc({u.rows(), u.b, u.heads() * u.d}, dt);
  const CpAttentionParams in = u.inner(p);
  if (u.p > 1) {
    saved.lse = arena.alloc({2, u.b, u.heads(), u.a * u.chunk}, DType::F32);
    ring_attention_forward(*p2p, saved.qkv, in, saved.out, saved.lse, workspace);
  } else {
    saved.lse = arena.alloc({u.b, u.heads(), p.layout.seq}, DType::F32);
    std::vector<kernels::MaskRow> rows;
    kernels::flash_attention_forward(saved.qkv, whole_params(in, u, rows), saved.out, saved.lse);
  }
  Tensor seq_out = by_group(out, u.groups);
  heads_to_sequence(a2a, u, by_group(saved.out, u.share()), seq_out, workspace);
}

void ulysses_attention_backward(Communicator& a2a, Communicator* p2p, const UlyssesCtx& saved,
                                const Tensor& dout, const CpAttentionParams& p, Tensor& dqkv,
                                Arena& arena) {
  const Ulysses u(a2a, p2p, dqkv.shape(), p);
  MT_CHECK(dqkv.is_contiguous() && dout.is_contiguous(),
           "Ulysses attention: dout and dqkv must be contiguous");
  check_shape(dout, {2 * u.chunk, u.b, u.groups * u.q * u.d}, "Ulysses attention dout");
  const DType dt = dqkv.dtype();
  Tensor heads_dout = arena.alloc(saved.out.shape(), dt);
  Tensor heads_dout_groups = by_group(heads_dout, u.share());
  sequence_to_heads(a2a, u, by_group(dout, u.groups), heads_dout_groups, arena);
  Tensor heads_dqkv = arena.alloc(saved.qkv.shape(), dt);
  const CpAttentionParams in = u.inner(p);
  if (u.p > 1) {
    ring_attention_backward(*p2p, saved.qkv, saved.out, saved.lse, heads_dout, in, heads_dqkv,
                            arena);
  } else {
    std::vector<kernels::MaskRow> rows;
    kernels::flash_attention_backward(saved.qkv, saved.out, saved.lse, heads_dout,
                                      whole_params(in, u, rows), heads_dqkv);
  }
  Tensor seq_dqkv = by_group(dqkv, u.groups);
  heads_to_sequence(a2a, u, by_group(heads_dqkv, u.share()), seq_dqkv, arena);
}

}  // namespace megatron
