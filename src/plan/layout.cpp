#include "plan/layout.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"
#include "distributed/parallel_state.h"
#include "pipeline/schedule.h"

namespace megatron::plan {

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
  }
  return "?";
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
  }
  return "?";
}

int activation_bytes(Precision p) {
  return p == Precision::kFp32 ? 4 : 2;
}

PipelineSplit Layout::pipeline_split(int num_layers) const {
  return {.num_layers = num_layers,
          .pipeline_size = pipeline_parallel,
          .chunks = virtual_stages,
          .first_stage_layers = first_stage_layers,
          .last_stage_layers = last_stage_layers,
          .account_for_embedding = account_for_embedding,
          .account_for_loss = account_for_loss,
          .layout = pipeline_layout};
}

std::vector<int> Layout::virtual_stage_layers(int num_layers) const {
  return megatron::virtual_stage_layers(pipeline_split(num_layers));
}

int Layout::rank_layers(int num_layers, int rank) const {
  const std::vector<int> layers = virtual_stage_layers(num_layers);
  int sum = 0;
  for (int chunk = 0; chunk < virtual_stages; ++chunk)
    sum += layers[size_t(chunk * pipeline_parallel + rank)];
  return sum;
}

int Layout::max_rank_layers(int num_layers) const {
  int most = 0;
  for (int rank = 0; rank < pipeline_parallel; ++rank)
    most = std::max(most, rank_layers(num_layers, rank));
  return most;
}

double Layout::recomputed_layer_fraction(int num_layers) const {
  double recomputed = 0;
  for (int layers : virtual_stage_layers(num_layers))
    recomputed += recomputed_layers_per_chunk(layers);
  return recomputed / double(num_layers);
}

int Layout::cp_a2a_ranks() const {
  if (context_parallel == 1) return 1;
  if (cp_comm == CpCommType::kA2A) return context_parallel;
  return cp_comm == CpCommType::kA2AP2P ? cp_a2a_size : 1;
}

int Layout::cp_ring_ranks() const {
  if (context_parallel == 1) return 1;
  if (cp_comm == CpCommType::kP2P) return context_parallel;
  return cp_comm == CpCommType::kA2AP2P ? context_parallel / cp_a2a_size : 1;
}

std::string Layout::describe() const {
  std::ostringstream os;
  os << "TP " << tensor_parallel;
  if (context_parallel > 1) {
    os << " x CP " << context_parallel << " (" << cp_comm_type_name(cp_comm);
    if (cp_comm == CpCommType::kA2AP2P) os << ", " << cp_a2a_size << " x " << cp_ring_ranks();
    os << ")";
  }
  os << " x PP " << pipeline_parallel << " x DP " << data_parallel;
  if (!expert_grid_folded())
    os << " (experts: EP " << expert_parallel << " x ETP " << expert_tp() << " x EDP "
       << expert_data_parallel() << ")";
  if (virtual_stages > 1) os << " (interleaved, v " << virtual_stages << ")";
  if (first_stage_layers > 0) os << ", first stage " << first_stage_layers << " layers";
  if (last_stage_layers > 0) os << ", last stage " << last_stage_layers << " layers";
  if (account_for_embedding) os << ", embedding counted as a layer";
  if (account_for_loss) os << ", loss counted as a layer";
  if (!pipeline_layout.empty()) {
    os << ", stages of";
    for (size_t i = 0; i < pipeline_layout.size(); ++i)
      os << (i ? ", " : " ") << pipeline_layout[i];
    os << " layers (layout)";
  }
  if (microbatch_group > 0) os << ", micro-batch groups of " << microbatch_group;
  os << ", micro-batch " << micro_batch << ", global batch " << effective_global_batch()
     << ", recompute " << recompute_name(recompute);
  if (recompute == Recompute::kFull && recompute_block_layers > 0)
    os << " (block: " << recompute_block_layers << " layers per chunk)";
  if (recompute_layernorm) os << " + layernorm";
  if (recompute_mlp) os << " + mlp";
  if (sequence_parallel) os << ", sequence-parallel";
  if (distributed_optimizer) os << ", distributed optimizer";
  os << ", " << precision_name(precision);
  return os.str();
}

void validate_layout(const ModelSpec& m, const Layout& l, Implementation impl) {
  const int t = l.tensor_parallel, p = l.pipeline_parallel, d = l.data_parallel,
            v = l.virtual_stages;
  MT_REQUIRE(t > 0, "--tensor-model-parallel-size must be positive, got ", t);
  MT_REQUIRE(p > 0, "--pipeline-model-parallel-size must be positive, got ", p);
  MT_REQUIRE(d > 0, "the data-parallel size must be positive, got ", d);
  MT_REQUIRE(v > 0, "the number of virtual pipeline stages must be positive, got ", v);
  const int c = l.context_parallel;
  MT_REQUIRE(c > 0, "--context-parallel-size must be positive, got ", c);
  if (c > 1) {
    MT_REQUIRE(m.seq_length % (2 * c) == 0, "--context-parallel-size ", c, ": --seq-length ",
               m.seq_length, " must be divisible by 2 x CP = ", 2 * c,
               " (each rank holds 2 equal chunks)");
    MT_REQUIRE(!l.sequence_parallel || (m.seq_length / c) % t == 0,
               "--sequence-parallel with --context-parallel-size ", c, ": each rank's ",
               m.seq_length / c, " positions must be divisible by --tensor-model-parallel-size ",
               t);
    MT_REQUIRE(l.cp_comm != CpCommType::kA2AP2P || (l.cp_a2a_size > 0 && c % l.cp_a2a_size == 0),
               "--cp-comm-type a2a+p2p needs --hierarchical-context-parallel-sizes A P with A x P "
               "= --context-parallel-size ",
               c, " (got A = ", l.cp_a2a_size, ")");
    MT_REQUIRE((m.query_groups() / t) % l.cp_a2a_ranks() == 0, "--cp-comm-type ",
               cp_comm_type_name(l.cp_comm), ": the ", m.query_groups() / t,
               " query groups of a TP rank must be divisible by the ", l.cp_a2a_ranks(),
               " ranks of its all-to-all (each takes whole groups)");
    MT_REQUIRE(m.family == ModelFamily::kGpt || impl != Implementation::kMegatronCpp,
               "--context-parallel-size: megatron-cpp's BERT attends with a padding mask, which "
               "context parallelism does not split (use --context-parallel-size 1)");
    MT_REQUIRE(impl != Implementation::kMegatronLm2019,
               "megatron-lm-2019 had no context parallelism (use --context-parallel-size 1)");
  }
  MT_REQUIRE(l.micro_batch > 0, "--micro-batch-size must be given and positive, got ",
             l.micro_batch);
  MT_REQUIRE(m.num_attention_heads % t == 0, "--num-attention-heads ", m.num_attention_heads,
             " must be divisible by --tensor-model-parallel-size ", t,
             ": each rank computes whole heads (try a TP size that divides ", m.num_attention_heads,
             ")");
  MT_REQUIRE(m.query_groups() % t == 0, "--num-query-groups ", m.query_groups(),
             " must be divisible by --tensor-model-parallel-size ", t);
  MT_REQUIRE(m.ffn_size() % t == 0, "--ffn-hidden-size ", m.ffn_size(),
             " must be divisible by --tensor-model-parallel-size ", t);
  check_pipeline_split(l.pipeline_split(m.num_layers));
  // The expert grid, by training's own checks (distributed/parallel_state.h).
  MT_REQUIRE(l.expert_tensor_parallel >= 0, "--expert-tensor-parallel-size must be >= 1, got ",
             l.expert_tensor_parallel);
  check_expert_count(int(m.arch.moe.num_experts), l.expert_parallel);
  check_expert_parallel_sizes(l.world_size(), l.expert_parallel, l.expert_tp(), p);
  MT_REQUIRE(!m.arch.moe.enabled() || m.expert_ffn_size() % l.expert_tp() == 0,
             "the experts' hidden width ", m.expert_ffn_size(),
             " (--moe-ffn-hidden-size, else --ffn-hidden-size) is not divisible by "
             "--expert-tensor-parallel-size ",
             l.expert_tp(), "; choose a width that is a multiple of it");
  // The fewest layers of a model chunk that holds any (megatron-cpp's Transformer refuses a
  // block larger than its chunk).
  int fewest = m.num_layers;
  for (int layers : l.virtual_stage_layers(m.num_layers))
    if (layers > 0) fewest = std::min(fewest, layers);
  MT_REQUIRE(l.recompute_block_layers == 0 ||
                 (l.recompute == Recompute::kFull && l.recompute_block_layers > 0 &&
                  l.recompute_block_layers <= fewest),
             "--recompute-method block --recompute-num-layers ", l.recompute_block_layers,
             " needs --recompute-granularity full and at most the ", fewest,
             " layers of a model chunk");
  const int64_t per_step = l.micro_batch * d;
  MT_REQUIRE(l.global_batch == 0 || (l.global_batch > 0 && l.global_batch % per_step == 0),
             "--global-batch-size ", l.global_batch, " must be a positive multiple of ",
             "--micro-batch-size ", l.micro_batch, " x data-parallel size ", d, " (= ", per_step,
             ")");
  if (v > 1) check_interleaved_micro_batches(p, l.num_micro_batches(), l.microbatch_group);
  MT_REQUIRE(!l.sequence_parallel || t > 1,
             "--sequence-parallel needs --tensor-model-parallel-size",
             " > 1 (it splits the replicated activations over the TP group)");
  MT_REQUIRE(!l.overlap_param_gather || l.distributed_optimizer,
             "--overlap-param-gather needs --use-distributed-optimizer");

  if (impl == Implementation::kMegatronCpp) {
    const char* use_lm = " (plan for Megatron-LM with --implementation megatron-lm)";
    MT_REQUIRE(!l.sequence_parallel || m.seq_length % t == 0, "--sequence-parallel: --seq-length ",
               m.seq_length, " must be divisible by --tensor-model-parallel-size ", t,
               " (each TP rank holds a whole shard of the sequence)");
    MT_REQUIRE(m.norm_order() != NormOrder::kPreResidualFromNorm || m.family == ModelFamily::kBert,
               "--apply-residual-connection-post-layernorm: megatron-cpp's GPT keeps the "
               "residual before the LayerNorm (a pretrain-bert option there)",
               use_lm);
    MT_REQUIRE(!l.overlap_param_gather && !l.tp_comm_overlap,
               "--overlap-param-gather / --tp-comm-overlap: megatron-cpp runs these collectives ",
               "after the compute they follow", use_lm);
    // megatron-cpp runs the Llama-family options in its GPT (model/transformer_config.h); its
    // BERT has the original architecture only.
    MT_REQUIRE(m.family == ModelFamily::kGpt ||
                   (m.query_groups() == m.num_attention_heads && !m.arch.swiglu &&
                    m.arch.normalization == Normalization::kLayerNorm &&
                    m.arch.position_embedding == PositionEmbedding::kLearnedAbsolute &&
                    m.arch.add_bias_linear && !m.arch.untie_embeddings_and_output_weights &&
                    m.head_dim() * m.num_attention_heads == m.hidden_size),
               "the Llama-family options (--num-query-groups, --swiglu, --normalization RMSNorm, "
               "--position-embedding-type rope, --disable-bias-linear, "
               "--untie-embeddings-and-output-weights, --kv-channels): megatron-cpp's BERT has the "
               "original architecture (they are GPT options there)",
               use_lm);
  }
  // Megatron-Core's MoE layers with TP route each rank's sequence shard (its arguments check).
  MT_REQUIRE(
      impl != Implementation::kMegatronLm || !m.arch.moe.enabled() || t == 1 || l.sequence_parallel,
      "--num-experts with --tensor-model-parallel-size ", t,
      ": Megatron-LM's MoE layers need --sequence-parallel");
  MT_REQUIRE(impl != Implementation::kMegatronLm2019 || !m.arch.moe.enabled(),
             "--num-experts: megatron-lm-2019 had no mixture of experts");
  // Megatron-LM's layers are pre-LN (with or without residuals from the norms); the
  // original BERT's order is megatron-cpp's import format.
  MT_REQUIRE(impl == Implementation::kMegatronCpp || m.norm_order() != NormOrder::kPost,
             "--post-layernorm: ", implementation_name(impl),
             " has no post-LayerNorm order (its BERT is pre-LN); plan it with --implementation "
             "megatron-cpp");
  MT_REQUIRE(!l.recompute_layernorm || m.norm_order() != NormOrder::kPost,
             "--recompute-modules layernorm recomputes a pre-LayerNorm layer's norms; a "
             "post-LayerNorm layer's norm outputs are its residual stream: drop layernorm");
  MT_REQUIRE(l.recompute != Recompute::kFull || (!l.recompute_layernorm && !l.recompute_mlp),
             "selective and full recompute exclude each other: choose one "
             "--recompute-granularity");
  if (impl == Implementation::kMegatronLm2019) {
    MT_REQUIRE(p == 1 && !l.sequence_parallel && !l.distributed_optimizer &&
                   l.recompute != Recompute::kSelective && l.recompute_block_layers == 0 &&
                   !l.flash_attention && !l.overlap_param_gather && !l.tp_comm_overlap,
               "megatron-lm-2019 had tensor and data parallelism and whole-layer checkpointing "
               "of every layer only (no pipeline, sequence parallelism, selective or block "
               "recompute or distributed optimizer, no fused attention or TP overlap)");
  }
}

}  // namespace megatron::plan
