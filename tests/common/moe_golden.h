// The PyTorch golden fixtures of the mixture-of-experts layer (tests/data/moe/<name>, written by
// tools/reference/moe_reference.py): one MoE layer (hidden 16, 8 experts of width 12) on an
// input [6, 3, 16], its output for a random upstream gradient, the router losses, and the
// gradients of the input and of every weight, in our names (model/moe_layer.h).
//   softmax   top-2 post-softmax, aux_loss 1e-2, z-loss 1e-3, GeLU, linear biases
//   sigmoid   top-4 sigmoid, 4 groups of which 2 are used, scaling factor 2.5, seq_aux_loss
//             1e-2, SwiGLU, no biases, a shared expert of width 20
//   capacity  top-2 pre-softmax, capacity factor 1 (probs policy), padded, aux_loss 1e-2, GeLU,
//             linear biases
//   sinkhorn  top-2 sinkhorn balancing, z-loss 1e-3, GeLU, no biases, a gated shared expert of
//             width 20 (out_eval: the evaluation output, routed by plain top-k)
//   sinkhorn_top1  top-1 sinkhorn balancing, GeLU, linear biases (and out_eval)
// Builds the layer at any tensor-parallel rank (with or without sequence parallelism), on any
// expert grid (ParallelState's ep and etp), on the CPU or a GPU, and compares this rank's output,
// input gradient and gradient slices.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "../common/gpt2_golden.h"  // max_relative_error, SafetensorsReader
#include "kernels/elementwise.h"
#include "model/moe_layer.h"
#include "optim/grad_reduction.h"

namespace megatron::testing {

inline TransformerConfig moe_golden_config(const std::string& name) {
  TransformerConfig c;
  c.num_layers = 1;
  c.hidden_size = 16;
  c.num_attention_heads = 4;
  c.ffn_hidden_size = 12;
  c.hidden_dropout = c.attention_dropout = 0.0f;
  MoeOptions& m = c.arch.moe;
  m.num_experts = 8;
  if (name == "softmax") {
    m.topk = 2;
    m.aux_loss_coeff = 1e-2;
    m.z_loss_coeff = 1e-3;
  } else if (name == "sigmoid") {
    m.topk = 4;
    m.score_function = MoeScoreFunction::kSigmoid;
    m.num_groups = 4;
    m.group_topk = 2;
    m.topk_scaling_factor = 2.5;
    m.seq_aux_loss_coeff = 1e-2;
    m.shared_expert_ffn = 20;
    c.arch.swiglu = true;
    c.arch.add_bias_linear = false;
  } else if (name == "sinkhorn") {
    m.topk = 2;
    m.sinkhorn = true;
    m.z_loss_coeff = 1e-3;
    m.shared_expert_ffn = 20;
    m.shared_expert_gate = true;
    c.arch.add_bias_linear = false;
  } else if (name == "sinkhorn_top1") {
    m.topk = 1;
    m.sinkhorn = true;
  } else {
    m.topk = 2;
    m.pre_softmax = true;
    m.capacity_factor = 1.0;
    m.pad_to_capacity = true;
    m.aux_loss_coeff = 1e-2;
  }
  return c;
}

struct MoeGolden {
  std::string name;
  std::unique_ptr<SafetensorsReader> file;
  std::map<std::string, Tensor> weights;  // "mlp.router.weight", ...
};

inline MoeGolden load_moe_golden(const std::string& name) {
  MoeGolden g;
  g.name = name;
  g.file = std::make_unique<SafetensorsReader>(source_dir() + "/tests/data/moe/" + name +
                                               "/golden.safetensors");
  for (const std::string& n : g.file->names())
    if (n.rfind("w.", 0) == 0) g.weights[n.substr(2)] = g.file->get(n);
  return g;
}

// This rank's rows of a sequence-first [s, b, h] tensor: with context parallelism its CP rank's
// block of s/c positions (the layer is token-wise, so which positions a CP rank holds does not
// matter to it; the model's load-balanced chunks are another choice of them), within that its
// sequence shard with sequence parallelism, else all of it.
inline Tensor sequence_rows(const Tensor& full, const ParallelState& ps, bool sp) {
  const int64_t c = full.size(0) / ps.cp_size;
  const Tensor mine = full.slice(0, ps.cp_rank * c, (ps.cp_rank + 1) * c);
  if (!sp) return mine.clone();
  const int64_t s = c / ps.tp_size;
  return mine.slice(0, ps.tp_rank * s, (ps.tp_rank + 1) * s).clone();
}

// The layer "mlp" of the fixture on this rank: output (<= 1e-5 relative), router losses
// (<= 1e-5), tokens per expert (exact), input gradient and every gradient slice (<= 1e-4), with
// the parameters and activations on `device`. At any context-parallel rank too: the losses are
// the micro-batch's, the token counts and the gradients summed over the CP group. Every
// data-parallel replica computes on the fixture's micro-batch; the gradients are reduced as the
// trainer does (dense ones over dp × cp, expert ones over edp, which together saw every
// replica's rows) and divided by the replicas.
template <typename Adjust>
void expect_matches_moe_golden(const MoeGolden& g, const ParallelState& ps, Adjust adjust,
                               Device device = Device::CPU) {
  TransformerConfig c = moe_golden_config(g.name);
  adjust(c);
  ParameterStore store(ps.tp_rank, ps.tp_size, device);
  store.set_expert_grid(ps.ep_rank, ps.ep_size, ps.etp_rank, ps.etp_size);
  ComputeWeights weights(store, DType::F32);
  MoeLayer layer("mlp", c, ps, store, weights);
  store.allocate();
  assign_from_full_tensors(g.weights, store);
  weights.refresh();

  Arena arena(device);
  MoeLayer::Ctx ctx;
  const bool sp = c.sequence_parallel;
  const Tensor x = sequence_rows(g.file->get("x"), ps, sp).to(device);
  if (g.file->contains("out_eval")) {  // evaluation routes differently (sinkhorn)
    MoeLayer::Ctx eval;
    const Tensor out = layer.forward(eval, x, /*train=*/false, arena).to(Device::CPU);
    EXPECT_LE(max_relative_error(out, sequence_rows(g.file->get("out_eval"), ps, sp)), 1e-5);
  }
  const Tensor out = layer.forward(ctx, x, /*train=*/true, arena).to(Device::CPU);
  EXPECT_LE(max_relative_error(out, sequence_rows(g.file->get("out"), ps, sp)), 1e-5);
  const MoeLosses& losses = ctx.router.losses;
  for (const auto& [key, value] : {std::pair{"loss.load_balancing", losses.load_balancing},
                                   std::pair{"loss.seq_load_balancing", losses.seq_load_balancing},
                                   std::pair{"loss.z_loss", losses.z_loss}}) {
    SCOPED_TRACE(key);
    const std::string name = key;
    const double expected =
        g.file->contains(name) ? g.file->get(name).to_vector<double>().at(0) : 0.0;
    EXPECT_NEAR(value, expected, 1e-5 * std::fabs(expected));
  }
  // A CP rank routes its own tokens: the counts add up over the CP group.
  Tensor counts =
      Tensor::from_vector(ctx.tokens_per_expert, {int64_t(ctx.tokens_per_expert.size())});
  ps.cp->all_reduce(counts);
  const std::vector<int64_t> tokens = g.file->get("tokens_per_expert").to_vector<int64_t>();
  EXPECT_EQ(counts.to_vector<int64_t>(), tokens);

  store.zero_grads();
  const Tensor dx =
      layer.backward(ctx, sequence_rows(g.file->get("dout"), ps, sp).to(device), 1.0f, arena)
          .to(Device::CPU);
  EXPECT_LE(max_relative_error(dx, sequence_rows(g.file->get("grad.x"), ps, sp)), 1e-4);
  reduce_sequence_parallel_gradients(store, ps, nullptr, 0, store.params().size());
  // The CP ranks' gradients are parts of the micro-batch's (the trainer sums them over dp × cp).
  for (Parameter& p : store.params()) {
    (p.spec.expert ? ps.edp : ps.dp_cp)->all_reduce(p.grad);
    kernels::scale(p.grad, 1.0f / float(ps.dp_size));
  }
  ASSERT_EQ(store.params().size(), g.weights.size());
  for (const Parameter& p : store.params()) {
    SCOPED_TRACE(p.spec.name);
    EXPECT_TRUE(p.spec.expert || p.spec.name.find(".experts.") == std::string::npos);
    EXPECT_LE(max_relative_error(p.grad.to(Device::CPU),
                                 local_slice(p, g.file->get("grad." + p.spec.name)).clone()),
              1e-4);
  }
}

}  // namespace megatron::testing
