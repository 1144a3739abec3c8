// TransformerConfig: the shape and options of a transformer stack, shared by GPT and BERT.
// Nothing here is GPT-specific: the mask type, the LayerNorm order and the final LayerNorm
// are options.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/gelu.h"
#include "kernels/rotary.h"     // Llama3RopeScaling
#include "kernels/yarn_rope.h"  // YarnRopeScaling
#include "model/moe_options.h"
#include "parallel/context_parallel_attention.h"  // CpCommType

namespace megatron {

enum class AttnMaskType {
  kCausal,   // GPT: key j > query i is masked
  kPadding,  // BERT: bidirectional, keys marked as padding are masked
};

enum class LayerNormOrder {
  // GPT-2 and Megatron-LM: x → LN → attn → +x → LN → MLP → +·
  kPreLayerNorm,
  // the original BERT: x → attn → +x → LN → MLP → +· → LN
  kPostLayerNorm,
};

// Megatron-Core's architecture options of the Llama family (Mistral, Qwen2, ...), on the one
// transformer: the defaults give GPT-2 (LayerNorm, GeLU, learned positions, biases, MHA).
enum class Normalization { kLayerNorm, kRMSNorm };  // --normalization
// --position-embedding-type; kYarn is RoPE with YaRN's frequencies and concentration factor
// (ArchitectureOptions::yarn, kernels/yarn_rope.h).
enum class PositionEmbedding { kLearnedAbsolute, kRope, kYarn, kNone };

// --recompute-method, with --recompute-granularity full: which layers of each model chunk (a
// pipeline stage's layers, or one virtual stage's with the interleaved schedule) recompute.
// kUniform: every layer, each from its own input (Megatron's uniform with
// --recompute-num-layers 1; its chunks of several layers are not implemented). kBlock: the
// first --recompute-num-layers layers of the chunk; the others keep their activations
// (Megatron's block: memory traded for compute layer by layer).
enum class RecomputeMethod { kUniform, kBlock };

// Multi-latent attention (DeepSeek-V2, --multi-latent-attention; model/mla_projection.h):
// queries (optionally through a low-rank latent) and keys/values through a shared low-rank
// latent, each head's query and key made of a content part (qk_head_dim) and a RoPE part
// (qk_pos_emb_head_dim; one rotated key shared by all heads), values of v_head_dim.
struct MlaOptions {
  bool enabled = false;
  int64_t q_lora_rank = 0;  // --q-lora-rank; 0 (Megatron's None): a direct query projection
  int64_t kv_lora_rank = 32;
  int64_t qk_head_dim = 128;
  int64_t qk_pos_emb_head_dim = 64;
  int64_t v_head_dim = 128;
  // --rope-type yarn (Megatron-Core's default for MLA: YaRN with ArchitectureOptions::yarn's
  // factor and mscales, its other fields at their defaults) or rope.
  bool yarn = true;
  bool operator==(const MlaOptions&) const = default;
};

// DeepSeek sparse attention (DeepSeek-V3.2, --experimental-attention-variant dsa, on top of MLA;
// model/dsa_indexer.h): a lightning indexer scores every key for every query, each query attends
// to its top-k causal keys only, and the indexer learns from a KL loss against the main
// attention's distribution.
struct DsaOptions {
  bool enabled = false;
  int64_t indexer_heads = 0;      // --dsa-indexer-n-heads
  int64_t indexer_head_dim = 0;   // --dsa-indexer-head-dim
  int64_t topk = 0;               // --dsa-indexer-topk
  float loss_coeff = 0.0f;        // --dsa-indexer-loss-coeff (Megatron's None: 0, no loss)
  bool sparse_loss = false;       // --dsa-indexer-use-sparse-loss: the KL over the top-k keys
  bool scoring_relu = true;       // cleared by --no-dsa-indexer-scoring-relu
  bool rope_interleaved = false;  // --dsa-indexer-rope-interleaved: RoPE pairs (2j, 2j + 1)
  // Cleared by --no-dsa-indexer-rotate-activation. The Hadamard rotation of the indexer's
  // queries and keys is orthogonal, so their products (all the indexer uses) are the same
  // without it; it needs a power-of-two --dsa-indexer-head-dim to be orthogonal.
  bool rotate_activation = true;
  float k_norm_epsilon = 0.0f;  // --dsa-indexer-k-norm-epsilon; 0: --layernorm-epsilon
  bool operator==(const DsaOptions&) const = default;
};

// Megatron-Core's flag values ("rope", "RMSNorm", "block", ...) ↔ the enums; an unknown name is
// an Error naming the flag and the accepted values.
PositionEmbedding position_embedding_from_name(const std::string& name);
const char* position_embedding_name(PositionEmbedding p);
Normalization normalization_from_name(const std::string& name);
const char* normalization_name(Normalization n);
RecomputeMethod recompute_method_from_name(const std::string& name);
// Throws Error naming the flags unless `num_layers` >= 1, and 1 with the uniform method.
void validate_recompute_method(RecomputeMethod method, int num_layers);

// Megatron-Core's muP (--use-mup; Yang et al. 2022, "Tensor Programs V"): the width multiplier
// m = hidden_size / --mup-base-hidden-size rescales what depends on the width so that the
// hyperparameters tuned at the base width transfer: the hidden matrices' init std σ/√m (the
// residual output projections' σ/(√(2L)·√m); the embeddings and the output layer keep σ), the
// attention softmax scale √base_head_dim / d^power (1/d by default, instead of 1/√d), the
// embedding output × embedding_mult and the logits × output_mult (1/m when left at 1). The
// optimizer's share (the hidden matrices' learning rate and Adam eps / m) is optim/optimizer.h's.
struct MupOptions {
  bool enabled = false;          // --use-mup
  int64_t base_hidden_size = 0;  // --mup-base-hidden-size; 0: hidden_size (m = 1)
  float embedding_mult = 1.0f;   // --mup-embedding-mult
  float output_mult = 1.0f;      // --mup-output-mult; 1: 1/m
  std::optional<double> base_head_dim = std::nullopt;  // --mup-base-head-dim
  double attn_scale_power = 1.0;                       // --mup-attn-scale-power
};

// hidden_size / base_hidden_size with muP, else 1.
double mup_width_mult(const MupOptions& mup, int64_t hidden_size);

// Multi-token prediction (DeepSeek-V3, Megatron-Core's MultiTokenPredictionBlock;
// model/multi_token_prediction.h): after the decoder, num_layers depths each predict one token
// further ahead from the previous depth's hidden states and the embedding of the input shifted
// once more; their losses, averaged over the depths and scaled by loss_scaling_factor, join the
// main loss in the gradient (reported apart as `mtp_k loss`). Training only: inference ignores it.
struct MtpOptions {
  int num_layers = 0;                // --mtp-num-layers; 0 (Megatron's None): none
  float loss_scaling_factor = 0.1f;  // --mtp-loss-scaling-factor
  bool enabled() const { return num_layers > 0; }
  bool operator==(const MtpOptions&) const = default;
};

struct ArchitectureOptions {
  Normalization normalization = Normalization::kLayerNorm;
  PositionEmbedding position_embedding = PositionEmbedding::kLearnedAbsolute;
  float rotary_base = 10000.0f;  // --rotary-base (HF rope_theta)
  float rotary_percent = 1.0f;   // --rotary-percent: rotated share of a head
  float rotary_seq_len_interpolation_factor = 1.0f;
  // --use-rope-scaling --rope-scaling-factor (Llama 3.1+); the other three fields only come
  // from an HF import (rope_scaling of rope_type "llama3") through the checkpoint's arguments.
  kernels::Llama3RopeScaling rope_scaling;
  bool swiglu = false;           // --swiglu: gated MLP, ffn_hidden_size is the gate width
  int64_t num_query_groups = 0;  // --num-query-groups (GQA); 0 → one group per head
  int64_t kv_channels = 0;       // --kv-channels (head dim); 0 → hidden / heads
  bool add_bias_linear = true;   // cleared by --disable-bias-linear
  bool add_qkv_bias = false;     // --add-qkv-bias: QKV biases even without linear biases
  bool untie_embeddings_and_output_weights = false;
  // Nemotron's options (Megatron-Core names):
  bool apply_layernorm_1p = false;  // --apply-layernorm-1p: zero-centred gains (layer_norm.h)
  bool squared_relu = false;        // --squared-relu: relu(x)² MLP activation instead of GeLU
  // --qk-layernorm: each head's query and key normalised (--normalization) over its channels
  // after the projection, before RoPE (Qwen3, OLMo-2-style; model/attention.h). With MLA:
  // Megatron-Core's switch for the query and key/value latent norms, which MLA has here with
  // or without it (model/mla_projection.h).
  bool qk_layernorm = false;
  bool rotary_interleaved = false;  // --rotary-interleaved: RoPE pairs (2j, 2j + 1)
  // YaRN's flags (--rotary-scaling-factor, --mscale, --mscale-all-dim, --yarn-*): the RoPE of
  // --position-embedding-type yarn, or of MLA with --rope-type yarn; MLA's softmax scale takes
  // the factor and mscale_all_dim whatever its rope type (TransformerConfig::softmax_scale).
  kernels::YarnRopeScaling yarn;
  MlaOptions mla;  // --multi-latent-attention
  DsaOptions dsa;  // --experimental-attention-variant dsa (with MLA)
  MupOptions mup;  // --use-mup
  MoeOptions moe;  // --num-experts, --moe-* (model/moe_layer.h)
  MtpOptions mtp;  // --mtp-num-layers, --mtp-loss-scaling-factor
};

struct TransformerConfig {
  int num_layers = 0;
  int64_t hidden_size = 0;
  int64_t num_attention_heads = 0;
  int64_t ffn_hidden_size = 0;  // 0 → 4 · hidden_size
  float hidden_dropout = 0.1f;
  float attention_dropout = 0.1f;
  float init_method_std = 0.02f;
  float layernorm_epsilon = 1e-5f;
  AttnMaskType attn_mask_type = AttnMaskType::kCausal;
  LayerNormOrder layernorm_order = LayerNormOrder::kPreLayerNorm;
  // Megatron's --apply-residual-connection-post-layernorm (pre-LN only): the residual
  // branches start from the LayerNorm outputs instead of the LayerNorm inputs.
  bool apply_residual_connection_post_layernorm = false;
  bool final_layernorm = true;         // pre-LN stacks end with a LayerNorm ("final_layernorm")
  bool recompute_activations = false;  // full recompute (--recompute-granularity full)
  RecomputeMethod recompute_method = RecomputeMethod::kUniform;  // which layers (see above)
  int recompute_num_layers = 1;                                  // --recompute-num-layers
  // --recompute-granularity selective: Megatron's --recompute-modules, each a region whose
  // activations die with the forward and are recomputed by the backward from its kept inputs
  // (same kernels, same inputs, same dropout keys: bit-identical results).
  // core_attn (Megatron's default): the attention core (model/attention.h).
  bool selective_recompute = false;
  // moe_act: the MoE experts' activation (model/moe_layer.h).
  bool recompute_moe_act = false;
  // layernorm: the pre-LN layers' input_layernorm and pre_mlp_layernorm outputs
  // (model/transformer_layer.h).
  bool recompute_layernorm = false;
  // mlp: a dense layer's whole MLP (model/transformer_layer.h; MoE layers: `moe`).
  bool recompute_mlp = false;
  // moe: a MoE layer's whole mixture of experts, router and exchange included.
  bool recompute_moe = false;
  // shared_experts: the MoE layer's shared expert, its gate included (model/moe_layer.h).
  bool recompute_shared_experts = false;
  // mla_up_proj: multi-latent attention's up projections, their norms and RoPE (Q, K, V of
  // the core; model/attention.h).
  bool recompute_mla_up_proj = false;
  // Whether any --recompute-modules region is recomputed.
  bool recomputes_modules() const {
    return selective_recompute || recompute_moe_act || recompute_layernorm || recompute_mlp ||
           recompute_moe || recompute_shared_experts || recompute_mla_up_proj;
  }
  // --use-flash-attn / --attention-backend flash: the fused attention core (model/attention.h).
  bool flash_attention = false;
  // --cp-comm-type with --context-parallel-size > 1: one for every layer, or one per layer
  // (global layer index; parallel/context_parallel_attention.h).
  std::vector<CpCommType> cp_comm_type = {CpCommType::kP2P};
  CpCommType cp_comm_type_of(int layer) const {
    return cp_comm_type.size() == 1 ? cp_comm_type[0] : cp_comm_type.at(size_t(layer));
  }
  // --sequence-parallel (needs TP > 1): the activations outside the tensor-parallel regions
  // (LayerNorms, dropouts, residuals) are sequence shards [s/t, b, h] (parallel/mappings.h).
  bool sequence_parallel = false;
  // --calculate-per-token-loss (Megatron's per-token loss, GPT): the backward starts from the
  // micro-batch's masked loss SUM (dloss = mask · grad_scale), not its mean, the MoE router's
  // losses are scaled to match (model/moe_router.h), and the trainer divides the accumulated
  // gradients by the global batch's token count.
  bool per_token_loss = false;
  // The MLP's GeLU: erf by default as in Megatron, tanh with --openai-gelu (and GPT-2).
  kernels::GeluForm gelu = kernels::GeluForm::kErf;
  std::string name_prefix;  // prepended to every parameter name ("" for GPT)
  ArchitectureOptions arch;

  int64_t ffn_size() const { return ffn_hidden_size > 0 ? ffn_hidden_size : 4 * hidden_size; }
  // A routed expert's hidden width: --moe-ffn-hidden-size, else the dense ffn_size().
  int64_t expert_ffn_size() const {
    return arch.moe.ffn_hidden_size > 0 ? arch.moe.ffn_hidden_size : ffn_size();
  }
  // Whether the (0-based, global) layer's MLP is a mixture of experts.
  bool is_moe_layer(int layer) const { return arch.moe.is_moe_layer(layer, num_layers); }
  // The attention core's head dim: of queries and keys (and of values, which MLA zero-pads to
  // it; model/attention.h).
  int64_t head_dim() const {
    if (arch.mla.enabled) return arch.mla.qk_head_dim + arch.mla.qk_pos_emb_head_dim;
    return arch.kv_channels > 0 ? arch.kv_channels : hidden_size / num_attention_heads;
  }
  // A head's value (and context) channels: head_dim(), or MLA's v_head_dim.
  int64_t value_head_dim() const { return arch.mla.enabled ? arch.mla.v_head_dim : head_dim(); }
  // The attention softmax's scale: 1/√head_dim(), or muP's √base_head_dim / head_dim^power;
  // with MLA times Megatron-Core's yarn_mscale(factor, mscale_all_dim)² (1 at factor 1).
  float softmax_scale() const;
  // Whether the attention rotates queries and keys: --position-embedding-type rope or yarn, or
  // MLA (its RoPE part, whatever the position embedding type, as Megatron-Core).
  bool attention_rope() const {
    return arch.mla.enabled || arch.position_embedding == PositionEmbedding::kRope ||
           arch.position_embedding == PositionEmbedding::kYarn;
  }
  // YaRN's scaling of the attention's RoPE (--position-embedding-type yarn, or MLA's
  // --rope-type yarn); none for plain RoPE.
  std::optional<kernels::YarnRopeScaling> yarn_rope() const;
  int64_t query_groups() const {
    return arch.num_query_groups > 0 ? arch.num_query_groups : num_attention_heads;
  }
  bool qkv_bias() const { return arch.add_bias_linear || arch.add_qkv_bias; }
  // Channels of a head that RoPE rotates: head_dim · rotary_percent (Megatron rounds down).
  // With MLA: its RoPE part, the last qk_pos_emb_head_dim channels of a query and key head.
  int64_t rotary_dim() const {
    if (arch.mla.enabled) return arch.mla.qk_pos_emb_head_dim;
    return int64_t(float(head_dim()) * arch.rotary_percent);
  }
  // The init std of the hidden matrices (QKV, dense_h_to_4h): init_method_std, / √m with muP.
  float hidden_init_std() const;
  // hidden_init_std()/√(2L) for the two residual-branch output projections (attention dense,
  // dense_4h_to_h).
  float output_layer_init_std() const;
  // muP's width multiplier hidden_size / base_hidden_size (1 without muP).
  double mup_width_mult() const { return megatron::mup_width_mult(arch.mup, hidden_size); }
  // The factors of the input embedding's output and of the logits (1 without muP).
  float embedding_mult() const { return arch.mup.enabled ? arch.mup.embedding_mult : 1.0f; }
  float logit_mult() const;
  // Whether full recompute re-runs the layer at `index_in_chunk` (0 = the chunk's first).
  bool recomputes_layer(int index_in_chunk) const {
    return recompute_activations &&
           (recompute_method == RecomputeMethod::kUniform || index_in_chunk < recompute_num_layers);
  }
  // Throws Error naming the option when the shape does not fit the TP size.
  void validate(int tp_size) const;
};

}  // namespace megatron
