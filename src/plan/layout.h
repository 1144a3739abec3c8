// Layout: how one training job splits a model over devices — tensor (TP), context (CP),
// pipeline (PP), data (DP) and, for mixture-of-experts layers, expert (EP, ETP) parallel sizes, the
// interleaved schedule, batch sizes, recompute, sequence parallelism, the distributed optimizer,
// precision and the communication overlaps — with the Megatron-LM flag of each field.
// validate_layout() holds every rule that ties the layout to a model and to the implementation that
// will run it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/stage_range.h"
#include "model/transformer_config.h"
#include "parallel/expert_token_exchange.h"
#include "plan/implementation.h"
#include "plan/model_spec.h"

namespace megatron::plan {

enum class Recompute { kNone, kSelective, kFull };
enum class Precision { kFp32, kBf16, kFp16 };

struct Layout {
  int tensor_parallel = 1;    // --tensor-model-parallel-size, t
  int pipeline_parallel = 1;  // --pipeline-model-parallel-size, p
  int data_parallel = 1;      // world size / (t·c·p), d
  // --context-parallel-size c: every sequence split into 2c chunks, rank r holding chunks r and
  // 2c − 1 − r (parallel/context_parallel_layout.h); gradients are reduced over d·c ranks.
  int context_parallel = 1;
  // --cp-comm-type (one for every layer; a per-layer list is planned as its first entry) and,
  // for a2a+p2p, the all-to-all level A of --hierarchical-context-parallel-sizes A P.
  CpCommType cp_comm = CpCommType::kP2P;
  int cp_a2a_size = 0;
  // The expert grid of the MoE layers (docs/parallelism.md "The expert grid"): the experts
  // split over e = --expert-model-parallel-size ranks, each expert's weights over et =
  // --expert-tensor-parallel-size ranks (0: the dense TP size), and their gradients reduced
  // over the expert-data-parallel group of ed = world / (et·e·p) ranks.
  int expert_parallel = 1;
  int expert_tensor_parallel = 0;
  // --moe-token-dispatcher-type: how routed tokens reach their experts' ranks.
  TokenDispatcher dispatcher = TokenDispatcher::kAllGather;
  int virtual_stages = 1;  // model chunks per pipeline rank, v (interleaved schedule if > 1)
  // An uneven split of the layers over the stages (model/stage_range.h; 0 / false: even):
  // --decoder-first-pipeline-num-layers, --decoder-last-pipeline-num-layers,
  // --account-for-embedding-in-pipeline-split, --account-for-loss-in-pipeline-split.
  int first_stage_layers = 0;
  int last_stage_layers = 0;
  bool account_for_embedding = false;
  bool account_for_loss = false;
  // --pipeline-model-parallel-layout: the transformer layers of each virtual stage c·p + r
  // (model/pipeline_layout.h); empty: not given.
  std::vector<int> pipeline_layout{};
  // --microbatch-group-size-per-virtual-pipeline-stage (interleaved; 0: p).
  int64_t microbatch_group = 0;
  int64_t micro_batch = 1;                 // --micro-batch-size, b
  int64_t global_batch = 0;                // --global-batch-size, B; 0 → b·d
  bool sequence_parallel = false;          // --sequence-parallel
  Recompute recompute = Recompute::kNone;  // --recompute-granularity (or --recompute-activations)
  // --recompute-method block --recompute-num-layers N: full recompute of only the first N
  // layers of each model chunk (L/(p·v) layers); 0: every layer (uniform).
  int recompute_block_layers = 0;
  // With --recompute-granularity selective, --recompute-modules beyond core_attn (which is
  // `recompute` kSelective): layernorm (the two norms' outputs in the norm-output slot) and mlp
  // (a dense layer's MLP in the workspace; model/transformer_layer.h). Memory only: their
  // recomputed FLOPs are not counted. The MoE and MLA regions (moe, moe_act, shared_experts,
  // mla_up_proj) have no model here: their activations are planned as kept.
  bool recompute_layernorm = false;
  bool recompute_mlp = false;
  bool distributed_optimizer = false;      // --use-distributed-optimizer
  Precision precision = Precision::kFp32;  // --bf16 / --fp16
  bool overlap_grad_reduce = false;        // --overlap-grad-reduce
  bool overlap_param_gather = false;       // --overlap-param-gather (distributed optimizer)
  bool tp_comm_overlap = false;            // --tp-comm-overlap
  bool flash_attention = false;            // --use-flash-attn (no s x s activations)

  int world_size() const {
    return tensor_parallel * context_parallel * pipeline_parallel * data_parallel;
  }
  // Ranks that reduce each gradient and share the distributed optimizer's state: d·c.
  int gradient_group() const { return data_parallel * context_parallel; }
  // The experts' tensor-parallel size et (the dense t unless given).
  int expert_tp() const {
    return expert_tensor_parallel > 0 ? expert_tensor_parallel : tensor_parallel;
  }
  // Ranks holding the same expert shard, which reduce the expert gradients and share their
  // distributed-optimizer state: ed = world / (et·e·p).
  int expert_data_parallel() const {
    return world_size() / (expert_tp() * expert_parallel * pipeline_parallel);
  }
  // Whether the expert grid is the dense one folded (e = 1, et = t: the expert gradients are
  // reduced with the dense ones, over d·c).
  bool expert_grid_folded() const { return expert_parallel == 1 && expert_tp() == tensor_parallel; }
  // The ranks of a CP group that exchange by all-to-all (a2a: all c; a2a+p2p: A), and those
  // that pass K/V round a ring (p2p: c; a2a+p2p: P = c / A); 1 where none does.
  int cp_a2a_ranks() const;
  int cp_ring_ranks() const;
  // Tokens of a sequence one rank holds: s / c.
  double local_sequence(int64_t seq_length) const {
    return double(seq_length) / double(context_parallel);
  }
  // Whether attention runs the fused kernel: --use-flash-attn, or context parallelism (whose
  // exchanges run its blocks, parallel/context_parallel_blocks.h).
  bool fused_attention() const { return flash_attention || context_parallel > 1; }
  // How `num_layers` layers split over the p·v virtual stages under this layout.
  PipelineSplit pipeline_split(int num_layers) const;
  // Transformer layers of each virtual stage (chunk c of rank r at c·p + r).
  std::vector<int> virtual_stage_layers(int num_layers) const;
  // Transformer layers pipeline rank `rank` holds, over its model chunks.
  int rank_layers(int num_layers, int rank) const;
  // The most layers a pipeline rank holds: the stage that sets the pipeline's pace.
  int max_rank_layers(int num_layers) const;
  // The share of the `num_layers` layers that full recompute re-runs: all, or with block
  // recompute the first recompute_block_layers of each model chunk; 0 without full recompute.
  double recomputed_layer_fraction(int num_layers) const;
  int64_t effective_global_batch() const {
    return global_batch > 0 ? global_batch : micro_batch * data_parallel;
  }
  // Micro-batches per iteration on each data-parallel rank, m = B / (b·d).
  int64_t num_micro_batches() const {
    return effective_global_batch() / (micro_batch * data_parallel);
  }
  // Layers of a model chunk that full recompute re-runs, of `layers_per_chunk`: all, none, or
  // with block recompute the first recompute_block_layers.
  double recomputed_layers_per_chunk(double layers_per_chunk) const {
    if (recompute != Recompute::kFull) return 0;
    if (recompute_block_layers == 0) return layers_per_chunk;
    return double(recompute_block_layers) < layers_per_chunk ? double(recompute_block_layers)
                                                             : layers_per_chunk;
  }
  // One line: "TP 8 x PP 16 x DP 8, v 1, mb 1, GB 1536, recompute selective, SP, dist-opt, bf16"
  // (and an expert grid of its own, an uneven split or a micro-batch group when set).
  std::string describe() const;
};

const char* recompute_name(Recompute r);
const char* precision_name(Precision p);
// Bytes of one activation element in this precision (4, or 2 for bf16/fp16).
int activation_bytes(Precision p);

// Throws megatron::Error naming the flag and the rule: sizes positive; the expert grid as
// training checks it (check_expert_parallel_sizes, check_expert_count; the experts' width
// divisible by ETP); the sequence divisible
// by 2·CP (and its s/CP positions by TP with sequence parallelism), the query groups per TP rank by
// the all-to-all's ranks, a2a+p2p's A dividing CP, no CP in BERT (megatron-cpp) or the 2019 code;
// heads, query groups and the FFN width divisible by TP; a pipeline split Megatron-LM accepts
// (check_pipeline_split: L divisible by p·v unless uneven); the global batch a multiple of b·d; the
// interleaved schedule's micro-batch count and group (check_interleaved_micro_batches); sequence
// parallelism only with TP > 1; and what `impl` does not implement (megatron-cpp: the distributed
// optimizer with fp16, overlaps, flash attention, a sequence not divisible by TP under SP,
// residuals from the norms in GPT, the Llama options in BERT; Megatron-LM: the post-LayerNorm
// order, MoE with TP but without sequence parallelism; the 2019 code: MoE).
void validate_layout(const ModelSpec& model, const Layout& layout, Implementation impl);

}  // namespace megatron::plan
