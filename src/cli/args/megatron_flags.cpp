#include "cli/args/megatron_flags.h"

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>

#include "cli/args/arg_table.h"
#include "cli/args/checkpoint_model_flags.h"
#include "core/error.h"
#include "core/logging.h"

namespace megatron::cli {

namespace {

// Reasons shared by many flags.
constexpr const char* kGpuImpl =
    "selects a GPU kernel, fusion or communication-overlap implementation; the computed function "
    "is the same here";
constexpr const char* kCudaGraphs = "CUDA graphs are a GPU launch optimisation";
constexpr const char* kOffload = "moves GPU memory to the host; the computed function is the same";
// Refused on a GPU by check_megatron_flags (cli/args/training_config.cpp).
constexpr const char* kActivationOffload =
    "offloads saved activations to host memory; on the CPU backend activations already live in "
    "host memory, so it is the identity there (refused on a GPU, where it is not implemented)";
constexpr const char* kCheckpointFormat =
    "checkpoints are saved in megatron-cpp's layout (docs/checkpoints.md): written atomically by "
    "every rank, resharded on load; `megatron convert --to megatron-lm` writes Megatron-LM's "
    "torch format, `--from megatron-lm` reads it";
constexpr const char* kFsdp =
    "configures FSDP / distributed-optimizer internals, which are not used here";
constexpr const char* kInference =
    "configures Megatron's inference engine; pretraining does not use it (see `megatron generate` "
    "and `megatron serve`)";
constexpr const char* kProfiler = "drives the CUDA / PyTorch profiler";
constexpr const char* kTelemetry = "an NVIDIA service client (telemetry, straggler detection)";
constexpr const char* kMoe =
    "not implemented: mixture of experts is pretrain-gpt's --num-experts and the --moe-* flags "
    "it implements (docs/moe.md)";
constexpr const char* kFp8 = "FP8 / FP4 training is not supported";
constexpr const char* kRl = "reinforcement learning (megatron/rl) is not supported";
constexpr const char* kPipeline =
    "pipeline stages here are contiguous ranges of layers, split evenly or as "
    "--decoder-first/last-pipeline-num-layers, --account-for-*-in-pipeline-split or "
    "--pipeline-model-parallel-layout say, with the interleaved schedule (pretrain-gpt and "
    "pretrain-bert; docs/parallelism.md); this option is not supported";
constexpr const char* kPipelineSplit =
    "pretrain-gpt and pretrain-bert implement Megatron's pipeline splits and the interleaved "
    "schedule (docs/parallelism.md); this command runs equal pipeline stages with 1F1B";
constexpr const char* kLlama =
    "not supported here: pretrain-gpt implements --position-embedding-type, --rotary-base, "
    "--rotary-percent, --rotary-seq-len-interpolation-factor, --use-rope-scaling, "
    "--rope-scaling-factor, --normalization, --swiglu, "
    "--group-query-attention, --num-query-groups, --kv-channels, --disable-bias-linear, "
    "--add-qkv-bias, --untie-embeddings-and-output-weights, --apply-layernorm-1p, --squared-relu, "
    "--qk-layernorm and --rotary-interleaved (docs/model.md); pretrain-bert none of them";
constexpr const char* kMla =
    "multi-latent attention is implemented by pretrain-gpt (docs/model.md); pretrain-bert does "
    "not take it";
constexpr const char* kDsa =
    "DeepSeek sparse attention (--experimental-attention-variant dsa) is trained by pretrain-gpt "
    "on multi-latent attention (docs/model.md); pretrain-bert does not take it, and generating "
    "with it is not implemented";
constexpr const char* kHybrid = "Mamba / hybrid / linear-attention models are not supported";
constexpr const char* kVision = "vision models are not supported";
constexpr const char* kRetrieval = "ICT / biencoder retrieval models are not supported";
constexpr const char* kAsyncWriter =
    "--async-save writes with megatron-cpp's own background thread (checkpoint/async_save.h)";
constexpr const char* kResilience =
    "in-process restart, fault tolerance and fault injection are not supported";
constexpr const char* kCheckpointExtra = "this checkpoint option is not supported";
constexpr const char* kTokenizerExtra = "this tokenizer option is not supported";
constexpr const char* kDistillation =
    "distillation from cached logit files is not supported (distillation from a teacher "
    "checkpoint is: --export-kd-teacher-load, docs/distillation.md)";
constexpr const char* kBertOnly = "a BERT flag (pretrain-bert); it does not apply to this model";
constexpr const char* kGptOnly = "a GPT flag (pretrain-gpt); it does not apply to this model";

struct Rule {
  const char* pattern;  // a flag, or a prefix ending in '*'
  bool rejected;
  const char* reason;
  const char* neutral = "";  // see ForeignFlagRule::neutral_value
};

// First match wins, so specific flags come before the prefixes that would also match them.
// The rules cover flags the subcommand does not register; a registered flag is implemented.
constexpr Rule kRules[] = {
    // Implementations and fusions of the same function.
    {"--attention-backend", false, kGpuImpl},
    {"--flash-attention-version", false, kGpuImpl},
    {"--transformer-impl", false, kGpuImpl},
    {"--use-flash-attn", false, kGpuImpl},
    {"--use-mcore-models", false, "Megatron-Core models are the only models here"},
    {"--no-masked-softmax-fusion", false, kGpuImpl},
    {"--no-bias-gelu-fusion", false, kGpuImpl},
    {"--no-bias-swiglu-fusion", false, kGpuImpl},
    {"--no-bias-dropout-fusion", false, kGpuImpl},
    {"--no-rope-fusion", false, kGpuImpl},
    {"--no-persist-layer-norm", false, kGpuImpl},
    {"--no-gradient-accumulation-fusion", false, kGpuImpl},
    {"--use-transformer-engine-op-fuser", false, kGpuImpl},
    {"--fused-residual-rmsnorm", false, kGpuImpl},
    {"--use-fused-weighted-squared-relu", false, kGpuImpl},
    {"--use-te-activation-func", false, kGpuImpl},
    {"--disable-jit-fuser", false, kGpuImpl},
    {"--cross-entropy-loss-fusion", false, kGpuImpl},
    {"--cross-entropy-fusion-impl", false, kGpuImpl},
    {"--tp-comm-*", false, kGpuImpl},
    {"--no-tp-comm-*", false, kGpuImpl},
    {"--disable-tp-comm-*", false, kGpuImpl},
    {"--symmetric-ar-type", false, kGpuImpl},
    {"--high-priority-a2a-comm-stream", false, kGpuImpl},
    {"--delay-wgrad-compute", false, kGpuImpl},
    {"--mlp-chunks-for-training", false, kGpuImpl},
    {"--disable-bf16-reduced-precision-matmul", false,
     "bf16 GEMMs accumulate in fp32 here, whatever the flag"},
    {"--attention-softmax-in-fp32", false, "softmax statistics are always fp32 here"},
    {"--accumulate-allreduce-grads-in-fp32", false,
     "gradients are always accumulated and reduced in fp32 here"},
    {"--apply-query-key-layer-scaling", false,
     "an fp16 overflow guard that cancels out; softmax is computed in fp32 here"},
    {"--no-clone-scatter-output-in-embedding", false, kGpuImpl},
    {"--disable-clone-scatter-output-in-embedding", false, kGpuImpl},
    {"--deterministic-mode", false, "CPU runs are deterministic by construction"},
    {"--use-cpu-initialization", false,
     "initialisation is the same on every device (TP-invariant Philox streams)"},
    {"--init-model-with-meta-device", false, kGpuImpl},
    {"--te-rng-tracker", false, kGpuImpl},
    {"--inference-rng-tracker", false, kGpuImpl},
    {"--enable-experimental", false, "gates Megatron's experimental features, none used here"},
    {"--onnx-safe", false, "an ONNX-export workaround"},

    // CUDA graphs and memory placement.
    {"--enable-cuda-graph", false, kCudaGraphs},
    {"--external-cuda-graph", false, kCudaGraphs},
    {"--cuda-graph-*", false, kCudaGraphs},
    {"--inference-cuda-graph-scope", false, kCudaGraphs},
    {"--decode-only-cuda-graphs", false, kCudaGraphs},
    {"--optimizer-cuda-graph", false, kCudaGraphs},
    {"--cpu-offloading-*", false, kOffload},
    {"--fine-grained-activation-offloading", false, kActivationOffload},
    {"--fine-grained-offloading-max-inflight-offloads", false, kActivationOffload},
    {"--offload-modules", false, kActivationOffload},
    {"--min-offloaded-tensor-size", false, kOffload},
    {"--delay-offload-until-cuda-graph", false, kOffload},
    {"--delta-offload-bytes-across-pp-ranks", false, kOffload},
    {"--activation-offload-fraction", false, kOffload},
    {"--optimizer-cpu-offload", false, kOffload},
    {"--optimizer-offload-fraction", false, kOffload},
    {"--use-torch-optimizer-for-cpu-offload", false, kOffload},
    {"--overlap-cpu-optimizer-d2h-h2d", false, kOffload},
    {"--no-pin-cpu-grads", false, kOffload},
    {"--no-pin-cpu-params", false, kOffload},
    {"--empty-unused-memory-level", false, "releases PyTorch's cached GPU memory"},
    {"--manual-gc", false, "controls Python's garbage collector"},
    {"--manual-gc-interval", false, "controls Python's garbage collector"},
    {"--no-manual-gc-eval", false, "controls Python's garbage collector"},
    {"--disable-manual-gc-eval", false, "controls Python's garbage collector"},

    // Distributed runtime.
    {"--local-rank", false, "set by torchrun; ranks come from MPI here"},
    {"--lazy-mpu-init", false, "for external process-group setup; MPI sets it up here"},
    {"--nccl-communicator-config-path", false, kGpuImpl},
    {"--disable-gloo-process-groups", false, kGpuImpl},
    {"--use-sharp", false, kGpuImpl},
    {"--sharp-enabled-group", false, kGpuImpl},
    {"--high-priority-stream-groups", false, kGpuImpl},
    {"--flight-recorder-*", false, "configures NCCL's flight recorder"},
    {"--no-flight-recorder-*", false, "configures NCCL's flight recorder"},
    {"--disable-flight-recorder-*", false, "configures NCCL's flight recorder"},
    {"--overlap-grad-reduce", false,
     "the overlap is implemented for pretrain-gpt, pretrain-bert and finetune; here the "
     "gradients are reduced after the backward (the same numbers)"},
    {"--overlap-param-gather", false, kGpuImpl},
    {"--overlap-param-gather-with-optimizer-step", false, kGpuImpl},
    {"--no-align-grad-reduce", false, kGpuImpl},
    {"--disable-align-grad-reduce", false, kGpuImpl},
    {"--no-align-param-gather", false, kGpuImpl},
    {"--ddp-bucket-size", false,
     "implemented for pretrain-gpt, pretrain-bert and finetune; here the gradients are reduced "
     "in buckets of the default size (the same numbers)"},
    {"--ddp-*", false, kGpuImpl},
    {"--use-distributed-optimizer", false,
     "the distributed optimizer is implemented for pretrain-gpt, pretrain-bert and finetune; "
     "here the Adam state is replicated on every data-parallel rank (more memory, the same "
     "numbers)"},
    {"--num-distributed-optimizer-instances", false, kFsdp},
    {"--megatron-fsdp-*", false, kFsdp},
    {"--fsdp-*", false, kFsdp},
    {"--torch-fsdp2-no-reshard-after-forward", false, kFsdp},
    {"--data-parallel-sharding-strategy", false, kFsdp},
    {"--outer-dp-sharding-strategy", false, kFsdp},
    {"--no-gradient-reduce-div-fusion", false, kFsdp},
    {"--suggested-communication-unit-size", false, kFsdp},
    {"--enable-full-sharding-in-hsdp", false, kFsdp},
    {"--use-nccl-ub", false, kFsdp},
    {"--disable-symmetric-registration", false, kFsdp},
    {"--create-all-gather-group", false, kFsdp},
    {"--no-use-layer-wise-param-layout", false, kFsdp},
    {"--keep-fp8-transpose-cache", false, kFsdp},
    {"--use-megatron-fsdp", true, "FSDP is not supported; use data parallelism"},
    {"--use-torch-fsdp2", true, "FSDP is not supported; use data parallelism"},
    {"--fake-process-group", true, "a Megatron testing aid; not supported"},
    {"--model-parallel-size", true, "Megatron's old name; use --tensor-model-parallel-size"},
    {"--tensor-parallel-num-weight-shards", true,
     "generalized tensor parallelism is not supported"},
    {"--gtp-*", true, "generalized tensor parallelism is not supported"},
    {"--context-parallel-size", true,
     "context parallelism is implemented for pretrain-gpt only (causal attention)", "1"},
    {"--hierarchical-context-parallel-sizes", true,
     "context parallelism is implemented for pretrain-gpt only"},
    {"--max-seqlen-per-dp-cp-rank", true,
     "dynamic context parallelism is not supported; use --context-parallel-size"},
    {"--hybrid-context-parallel", true,
     "dynamic context parallelism is not supported; use --context-parallel-size"},
    {"--cp-comm-type", false, "context parallelism is implemented for pretrain-gpt only"},

    // Pipeline and sequence parallelism (pretrain-gpt, pretrain-bert and finetune).
    {"--sequence-parallel", true,
     "sequence parallelism is implemented for pretrain-gpt, pretrain-bert and finetune only "
     "(docs/parallelism.md)"},
    {"--pipeline-model-parallel-comm-backend", true, kPipeline},
    {"--pipeline-model-parallel-layout", true, kPipelineSplit},
    {"--decoder-first-pipeline-num-layers", true, kPipelineSplit},
    {"--decoder-last-pipeline-num-layers", true, kPipelineSplit},
    {"--num-layers-per-virtual-pipeline-stage", true, kPipelineSplit},
    {"--num-virtual-stages-per-pipeline-rank", true, kPipelineSplit},
    {"--microbatch-group-size-per-virtual-pipeline-stage", true, kPipelineSplit},
    {"--account-for-embedding-in-pipeline-split", true, kPipelineSplit},
    {"--account-for-loss-in-pipeline-split", true, kPipelineSplit},
    {"--no-overlap-p2p-communication", false,
     "pipeline communication overlap; the computed function is the same"},
    {"--overlap-p2p-communication-warmup-flush", false,
     "pipeline communication overlap; the computed function is the same"},
    {"--use-ring-exchange-p2p", false,
     "pipeline communication implementation; the computed function is the same"},
    {"--defer-embedding-wgrad-compute", false,
     "pipeline scheduling of the embedding's gradient; the computed function is the same"},
    {"--wgrad-deferral-limit", false,
     "pipeline scheduling of the embedding's gradient; the computed function is the same"},
    {"--distribute-saved-activations", true, kPipeline},

    // Mixture of experts (pretrain-gpt registers the implemented flags; docs/moe.md).
    {"--num-experts", true,
     "mixture of experts is implemented by pretrain-gpt (docs/moe.md); this command does not "
     "take it"},
    {"--moe-pad-experts-for-cuda-graph-inference", false, kCudaGraphs},
    {"--moe-use-legacy-grouped-gemm", false, kGpuImpl},
    {"--moe-use-grouped-tensor", false, kGpuImpl},
    {"--moe-single-grouped-weight", false, kGpuImpl},
    {"--moe-single-grouped-bias", false, kGpuImpl},
    {"--moe-shared-expert-overlap", false, kGpuImpl},
    {"--moe-deepep-num-sms", false, kGpuImpl},
    {"--moe-flex-dispatcher-num-sms", false, kGpuImpl},
    {"--moe-hybridep-*", false, kGpuImpl},
    {"--moe-permute-fusion-into-hybridep", false, kGpuImpl},
    {"--moe-ncclep-zero-copy", false, kGpuImpl},
    {"--moe-per-layer-logging", false,
     "logs each layer's load-balancing and z-loss; the average over MoE layers is logged here"},
    {"--moe-router-padding-for-fp8", false, kFp8},
    {"--moe-router-padding-for-quantization", false, kFp8},
    {"--moe-*", true, kMoe},
    {"--expert-model-parallel-size", true,
     "expert parallelism is implemented by pretrain-gpt (docs/moe.md); this command does not "
     "take it",
     "1"},
    {"--expert-tensor-parallel-size", false,
     "sizes the tensor parallelism of expert layers, which pretrain-gpt implements (docs/moe.md); "
     "this command splits the experts over the tensor-parallel group like the dense MLP, which "
     "computes the same function"},
    {"--expert-tensor-parallel-num-weight-shards", true, kMoe},
    {"--overlap-moe-expert-parallel-comm", false, kGpuImpl},
    {"--overlap-dispatch-backward-with-experts-wgrad", false, kGpuImpl},
    {"--ep-overlap-early-attn-memory-release", false, kGpuImpl},
    {"--use-grouped-gemm-for-shared-expert", false, kGpuImpl},
    {"--use-grouped-gemm-for-dense-mlp", false, kGpuImpl},

    // Multi-token prediction, MLA, hybrid and exotic architectures.
    {"--mtp-loss-scaling-factor", false,
     "weights multi-token prediction's loss in training (pretrain-gpt); nothing else uses it"},
    {"--mtp-*", true,
     "not implemented: multi-token prediction is pretrain-gpt's --mtp-num-layers and "
     "--mtp-loss-scaling-factor (docs/model.md); its repeated layer, detached heads, hidden-state "
     "mixing, standalone placement and hybrid patterns are not"},
    {"--multi-latent-attention", true, kMla},
    {"--q-lora-rank", true, kMla},
    {"--kv-lora-rank", true, kMla},
    {"--qk-head-dim", true, kMla},
    {"--qk-pos-emb-head-dim", true, kMla},
    {"--v-head-dim", true, kMla},
    {"--rotary-scaling-factor", true, kMla},
    {"--mscale", true, kMla},
    {"--mscale-all-dim", true, kMla},
    {"--cache-mla-latents", true,
     "caches MLA's latents in Megatron's dynamic inference engine (flash MLA decoding), which "
     "is not implemented; Megatron rejects it in training; `megatron generate` caches MLA's "
     "keys and values"},
    {"--mla-down-proj-fusion", false, kGpuImpl},
    {"--experimental-attention-variant", true, kDsa},
    {"--dsa-*", true, kDsa},
    {"--no-dsa-*", true, kDsa},
    {"--disable-dsa-*", true, kDsa},
    {"--linear-*", true, kHybrid},
    {"--is-hybrid-model", true, kHybrid},
    {"--hybrid-*", true, kHybrid},
    {"--mamba-*", true, kHybrid},
    {"--gdp-*", true, kHybrid},
    {"--disable-mamba-mem-eff-path", true, kHybrid},
    {"--spec", true,
     "custom layer specs are not supported; `local` (Megatron-Core's own layers instead of "
     "Transformer Engine's) is the same model here",
     "local"},
    {"--enable-mhc-connections", true, "hyper-connections are not supported"},
    {"--mhc-*", true, "hyper-connections are not supported"},
    {"--heterogeneous-*", true, "heterogeneous layer configurations are not supported"},
    {"--encoder-num-layers", true, "encoder-decoder (T5) models are not supported"},
    {"--decoder-num-layers", true, "encoder-decoder (T5) models are not supported"},
    {"--encoder-seq-length", true,
     "encoder-decoder (T5) models are not supported; use --seq-length"},
    {"--decoder-seq-length", true, "encoder-decoder (T5) models are not supported"},
    {"--vocab-extra-ids", true, "T5 sentinel tokens are not supported"},

    // Architecture options of today's GPTs (issue 13).
    {"--num-query-groups", true, kLlama},
    {"--group-query-attention", true, kLlama},
    {"--position-embedding-type", true, kLlama},
    {"--no-position-embedding", true, kLlama},
    {"--use-rotary-position-embeddings", true, kLlama},
    {"--rotary-*", true, kLlama},
    {"--rope-type", true, kMla},
    {"--use-rope-scaling", true, kLlama},
    {"--rope-scaling-factor", true, kLlama},
    {"--no-rope-freq", true, kLlama},
    {"--yarn-*", true, kLlama},
    {"--no-yarn-*", true, kLlama},
    {"--mrope-section", true, kLlama},
    {"--normalization", true, kLlama},
    {"--swiglu", true, kLlama},
    {"--disable-bias-linear", true, kLlama},
    {"--add-qkv-bias", true, kLlama},
    {"--untie-embeddings-and-output-weights", true, kLlama},
    {"--kv-channels", true, kLlama},
    {"--qk-layernorm", true, kLlama},
    {"--apply-layernorm-1p", true, kLlama},
    {"--norm-epsilon", true,
     "Megatron's name for --layernorm-epsilon: pretrain-bert takes --layernorm-epsilon"},
    {"--apply-wd-to-qk-layernorm", true,
     "weight decay on the QK LayerNorm is not supported (as Megatron's default, it has none)"},
    {"--squared-relu", true, kLlama},
    {"--quick-geglu", true, "GeGLU MLPs are not supported"},
    {"--glu-linear-offset", true, "GLU MLPs are not supported"},
    {"--activation-func-clamp-value", true, "activation clamping is not supported"},
    {"--qk-l2-norm", true, "QK L2 normalisation is not supported"},
    {"--qk-clip", true, "QK clipping is not supported"},
    {"--qk-clip-*", true, "QK clipping is not supported"},
    {"--attention-output-gate", true, "gated attention output is not supported"},
    {"--softmax-type", true, "only the vanilla softmax exists here", "vanilla"},
    {"--window-size", true, "sliding-window attention is not supported"},
    {"--window-attn-skip-freq", true, "sliding-window attention is not supported"},
    {"--relative-attention-*", true, "relative position buckets (T5) are not supported"},
    {"--fp32-residual-connection", true, "the residual stream follows the compute dtype here"},
    {"--embedding-init-method-std", true, "the embedding uses --init-method-std here"},
    {"--init-method-xavier-uniform", true, "only the normal initialisation exists here"},
    {"--use-mup", true, "muP is implemented by pretrain-gpt (docs/training.md)"},
    {"--mup-width-mult", false,
     "Megatron overwrites it: the width multiplier is --hidden-size / --mup-base-hidden-size"},
    {"--mup-*", true, "muP is implemented by pretrain-gpt (docs/training.md)"},
    {"--calculate-per-token-loss", true, kGptOnly},
    {"--no-initialization", true, "weights are always initialised"},
    {"--data-parallel-random-init", true,
     "every data-parallel replica starts from the same weights"},

    // Optimizer.
    {"--optimizer", false,
     "selects the training optimizer (adam, muon); this command does not train"},
    {"--sgd-momentum", false, "used with --optimizer sgd only"},
    {"--muon-*", false, "configures the training optimizer muon; this command does not train"},
    {"--lion-*", false, "used with --optimizer lion only"},
    {"--use-precision-aware-optimizer", true,
     "master weights, gradients and Adam moments are always fp32 here"},
    {"--main-grads-dtype", true, "main gradients are always fp32 here", "fp32"},
    {"--main-params-dtype", true, "master weights are always fp32 here", "fp32"},
    {"--exp-avg-dtype", true, "Adam moments are always fp32 here", "fp32"},
    {"--exp-avg-sq-dtype", true, "Adam moments are always fp32 here", "fp32"},
    {"--no-weight-decay-cond-type", true, "weight decay applies to weights, never biases or norms"},
    {"--freeze-all-layers", true, "freezing parameters is not supported"},
    {"--dump-param-to-param-group-map", true, "not supported"},
    {"--grad-reduce-in-bf16", true, "gradients are reduced in fp32 here"},
    {"--fp16-lm-cross-entropy", true, "the cross-entropy is computed in fp32 here"},
    {"--output-logit-dtype", true, "logits are kept in the compute dtype, the loss in fp32"},
    {"--fp8-*", true, kFp8},
    {"--no-fp8-*", true, kFp8},
    {"--disable-fp8-*", true, kFp8},
    {"--fp4-*", true, kFp8},
    {"--first-last-layers-bf16", true, kFp8},
    {"--num-layers-at-start-in-bf16", true, kFp8},
    {"--num-layers-at-end-in-bf16", true, kFp8},
    {"--use-kitchen-attention", true, kFp8},
    {"--kitchen-attention-backend", true, kFp8},
    {"--te-precision-config-file", true, kFp8},
    {"--reuse-grad-buf-for-mxfp8-param-ag", true, kFp8},

    // Learning rate, weight decay and batch schedules.
    {"--warmup", true, "Megatron's old name; use --lr-warmup-fraction"},
    {"--rampup-batch-size", false,
     "deprecated: Megatron-LM's current main ignores it too (its calculator only warns); use "
     "--step-batch-size-schedule"},
    {"--decrease-batch-size-if-needed", true,
     "rounding the global batch size down to a multiple of micro-batch x DP is not supported"},
    {"--batch-size", true, "Megatron's old name; use --micro-batch-size"},
    {"--checkpoint-activations", true, "Megatron's old name; use --recompute-activations"},
    {"--phase-transition-iterations", true, "phased data schedules are not supported"},

    // Checkpoints.
    {"--ckpt-format", false, kCheckpointFormat},
    {"--auto-detect-ckpt-format", false, kCheckpointFormat},
    {"--use-dist-ckpt", false, kCheckpointFormat},
    {"--dist-ckpt-*", false, kCheckpointFormat},
    {"--ckpt-fully-parallel-*", false, kCheckpointFormat},
    {"--no-ckpt-fully-parallel-save", false, kCheckpointFormat},
    {"--ckpt-assume-constant-structure", false, kCheckpointFormat},
    {"--ckpt-drop-redundant-extra-state", false, kCheckpointFormat},
    {"--ckpt-pg-tensors-cache-*", false, kCheckpointFormat},
    {"--no-ckpt-load-validate-sharding-integrity", false, kCheckpointFormat},
    {"--disable-ckpt-load-validate-sharding-integrity", false, kCheckpointFormat},
    {"--no-strict-fsdp-dtensor-load", false, kCheckpointFormat},
    {"--disable-strict-fsdp-dtensor-load", false, kCheckpointFormat},
    {"--distrib-optim-fully-reshardable-mem-efficient", false, kCheckpointFormat},
    {"--async-strategy", false, kAsyncWriter},
    {"--async-ckpt-*", false, kAsyncWriter},
    {"--use-persistent-ckpt-worker", false, kAsyncWriter},
    {"--no-save-tokenizer-assets", false, "the tokenizer is recorded by identity, not copied"},
    {"--disable-save-tokenizer-assets", false, "the tokenizer is recorded by identity, not copied"},
    {"--no-use-tokenizer-model-from-checkpoint-args", false, "tokenizers come from the flags here"},
    {"--disable-use-tokenizer-model-from-checkpoint-args", false,
     "tokenizers come from the flags here"},
    {"--ckpt-convert-format", true, "convert checkpoints with `megatron convert`"},
    {"--ckpt-convert-save", true, "convert checkpoints with `megatron convert`"},
    {"--ckpt-convert-update-legacy-dist-opt-format", true,
     "convert checkpoints with `megatron convert`"},
    {"--ckpt-step", true, kCheckpointExtra},
    {"--non-persistent-*", true, "non-persistent (local) checkpoints are not supported"},
    {"--save-params-interval", true, "debug dumps are not supported"},
    {"--save-activations-interval", true, "debug dumps are not supported"},
    {"--save-tokens-per-expert-interval", true, "debug dumps are not supported"},
    {"--save-wgrads-interval", true, "debug dumps are not supported"},
    {"--save-dgrads-interval", true, "debug dumps are not supported"},
    {"--load-main-params-from-ckpt", true, kCheckpointExtra},
    {"--pretrained-checkpoint", true,
     "a task head on a pretrained body is `megatron finetune --pretrained-checkpoint`; to "
     "continue pretraining from a checkpoint's weights use --load with --finetune"},
    {"--use-checkpoint-args", true,
     "finetune takes the model flags from the command line: give them as the pretraining run "
     "did"},
    {"--use-mp-args-from-checkpoint-args", true, kCheckpointExtra},
    {"--override-ckpt-iteration", true, kCheckpointExtra},
    {"--replication", true, kCheckpointExtra},
    {"--replication-jump", true, kCheckpointExtra},
    {"--replication-factor", true, kCheckpointExtra},
    {"--verify-integrity", false,
     "always on here: every checkpoint tensor and state.json carry a CRC-32C written at save and "
     "verified at every load (docs/reliability.md)"},

    // Data.
    {"--num-workers", false, "data is read by the training process here"},
    {"--dataloader-type", true,
     "only Megatron's default sampler exists here (each sample once per epoch, in order)",
     "single"},
    {"--dataloader-fast-cache-load", false, "data loading implementation"},
    {"--dataloader-defer-npy-index-mmap", false, "data loading implementation"},
    {"--no-mmap-bin-files", false, "data loading implementation"},
    {"--num-dataset-builder-threads", false, "data loading implementation"},
    {"--object-storage-cache-path", false, "data loading implementation"},
    {"--no-create-attention-mask-in-dataloader", false, "the causal mask is implicit here"},
    {"--allow-ambiguous-pad-tokens", false, "no padding ids are shared with real tokens here"},
    {"--data-cache-path", false,
     "pretrain-bert builds its samples mapping in memory at each start: it writes no cache"},
    {"--data-args-path", true, "data paths are given on the command line here"},
    {"--per-split-data-args-path", true, "data paths are given on the command line here"},
    {"--per-dataset-sequences-path", true, "data paths are given on the command line here"},
    {"--mid-level-dataset-surplus", true, "the blending surplus is Megatron's default here",
     "0.005"},
    {"--sample-rate", true, "sub-sampling the data is not supported", "1.0"},
    {"--reset-position-ids", true, "position ids restart per sequence only here"},
    {"--reset-attention-mask", true, "attention is not masked at document boundaries here"},
    {"--dataloader-inter-document-masking", true,
     "attention is not masked at document boundaries here"},
    {"--fim-*", true, "fill-in-the-middle data is implemented by pretrain-gpt (docs/data.md)"},
    {"--mask-prob", false, kBertOnly},
    {"--short-seq-prob", false, kBertOnly},
    {"--bert-no-binary-head", false, kBertOnly},
    {"--eod-mask-loss", false, kGptOnly},
    {"--apply-residual-connection-post-layernorm", true,
     "implemented by pretrain-bert only; GPT models keep the residual before the LayerNorm"},
    {"--full-validation", true, "validation uses --eval-iters batches here"},
    {"--multiple-validation-sets", true, "one validation set is supported"},
    {"--validation-set-names", true, "one validation set is supported"},
    {"--start-eval-at-iter", true, "validation runs every --eval-interval iterations here"},
    {"--eval-micro-batch-size", true, "validation uses --micro-batch-size here"},

    // Tokenizers.
    {"--tokenizer-metadata", true, kTokenizerExtra},
    {"--tokenizer-special-tokens", true, kTokenizerExtra},
    {"--tokenizer-sentencepiece-legacy", true, kTokenizerExtra},
    {"--no-tokenizer-sentencepiece-ignore-extra-whitespaces", true, kTokenizerExtra},
    {"--disable-tokenizer-sentencepiece-ignore-extra-whitespaces", true, kTokenizerExtra},
    {"--tokenizer-hf-*", true, kTokenizerExtra},
    {"--trust-remote-code", true, kTokenizerExtra},
    {"--null-tokenizer-*", true, kTokenizerExtra},
    {"--chat-template", true, kTokenizerExtra},
    {"--use-gigatoken", true, kTokenizerExtra},
    {"--padded-vocab-size", true, "the padded size follows --make-vocab-size-divisible-by"},
    {"--no-pad-vocab-size", true, "the vocabulary is always padded (Megatron's rule)"},
    {"--disable-pad-vocab-size", true, "the vocabulary is always padded (Megatron's rule)"},

    // Logging.
    {"--no-barrier-with-level-1-timing", false,
     "the level-1 timers synchronise the device but never take a barrier here"},
    {"--tensorboard-queue-size", false, "TensorBoard events are written synchronously here"},
    {"--log-memory-interval", true,
     "memory goes to TensorBoard at --tensorboard-log-interval (--log-memory-to-tensorboard); a "
     "separate interval is not supported"},
    {"--log-device-memory-used", true,
     "the device memory logged is --log-memory-to-tensorboard's (the allocator and the resident "
     "set); NVML's whole-device figure is not"},
    {"--log-world-size-to-tensorboard", true, "not logged"},
    {"--log-max-attention-logit", true, "not logged"},
    {"--log-energy", true, "energy is not measured"},
    {"--log-progress", true, "progress.txt is not written"},
    {"--logging-level", false, "Python's logging level; this program's log is fixed"},
    {"--wandb-*", false,
     "Weights & Biases logging needs its Python client; the same metrics go to --tensorboard-dir "
     "and --metrics-file"},
    {"--otel-*", true, "OpenTelemetry tracing is not supported"},
    {"--config-logger-dir", true, "module configurations are not logged"},
    {"--profile", false, kProfiler},
    {"--profile-*", false, kProfiler},
    {"--use-pytorch-profiler", false, kProfiler},
    {"--pytorch-profiler-*", false, kProfiler},
    {"--record-memory-history", false, kProfiler},
    {"--memory-snapshot-path", false, kProfiler},
    {"--record-shapes", false, kProfiler},
    {"--nvtx-ranges", false, kProfiler},
    {"--one-logger-*", false, kTelemetry},
    {"--no-one-logger", false, kTelemetry},
    {"--app-tag-*", false, kTelemetry},
    {"--straggler-ctrlr-port", false, kTelemetry},
    {"--disable-straggler-on-startup", false, kTelemetry},
    {"--run-workload-inspector-server", false, kTelemetry},
    {"--enable-msc", false, "NVIDIA's multi-storage client; files are local paths here"},
    {"--disable-msc", false, "NVIDIA's multi-storage client; files are local paths here"},
    {"--logits-*", true, kDistillation},

    // Reliability.
    {"--exit-signal", true, "the signal handler catches SIGTERM and SIGINT here", "SIGTERM"},
    {"--exit-signal-handler-for-dataloader", false, "data is read by the training process here"},
    {"--exit-signal-handler-for-training", false, "see --exit-signal-handler"},
    {"--gpu-sniff-test-interval", false, "a GPU health check"},
    {"--train-sync-interval", false, "a GPU/CPU synchronisation aid"},
    {"--inprocess-*", true, kResilience},
    {"--enable-ft-package", true, kResilience},
    {"--calc-ft-timeouts", true, kResilience},
    {"--ft-num-warmup-iters", true, kResilience},
    {"--fault-injector-*", true, kResilience},
    {"--adlr-autoresume", true, "ADLR autoresume is not supported; see --exit-signal-handler"},
    {"--adlr-autoresume-interval", true, "ADLR autoresume is not supported"},

    // Inference engine (used by Megatron's RL and text-generation server, not by pretraining).
    {"--inference-*", false, kInference},
    {"--no-inference-*", false, kInference},
    {"--flash-decode", false, kInference},
    {"--batch-invariant-mode", false, kInference},
    {"--batch-invariant-backend", false, kInference},
    {"--nccl-all-reduce-for-prefill", false, kInference},
    {"--mlp-chunks-for-prefill", false, kInference},
    {"--use-legacy-static-engine", false, kInference},
    {"--max-tokens-to-oom", false, kInference},
    {"--output-bert-embeddings", false, kInference},
    {"--bert-embedder-type", false, kInference},
    {"--enable-chunked-prefill", false, kInference},
    {"--num-speculative-tokens", false, kInference},
    {"--use-same-sampling-seed-across-dp-ranks", false, kInference},

    // Other model families and training modes.
    {"--perform-rl-step", true, kRl},
    {"--rl-*", true, kRl},
    {"--no-rl-*", true, kRl},
    {"--grpo-*", true, kRl},
    {"--langrl-env-config", true, kRl},
    {"--refit-method", true, kRl},
    {"--sft", true, "supervised finetuning is not supported"},
    {"--sft-tokenizer-prompt-format", true, "supervised finetuning is not supported"},
    {"--yaml-cfg", true, "YAML configurations are not supported: give the flags"},
    {"--ict-*", true, kRetrieval},
    {"--biencoder-*", true, kRetrieval},
    {"--bert-load", true, kRetrieval},
    {"--titles-data-path", true, kRetrieval},
    {"--query-in-block-prob", true, kRetrieval},
    {"--use-one-sent-docs", true, kRetrieval},
    {"--evidence-data-path", true, kRetrieval},
    {"--retriever-*", true, kRetrieval},
    {"--block-data-path", true, kRetrieval},
    {"--embedding-path", true, kRetrieval},
    {"--indexer-*", true, kRetrieval},
    {"--num-classes", true, kVision},
    {"--img-h", true, kVision},
    {"--img-w", true, kVision},
    {"--num-channels", true, kVision},
    {"--patch-dim", true, kVision},
    {"--classes-fraction", true, kVision},
    {"--data-per-class-fraction", true, kVision},
    {"--no-data-sharding", true, kVision},
    {"--head-lr-mult", true, kVision},
    {"--vision-*", true, kVision},
    {"--swin-backbone-type", true, kVision},
    {"--mask-type", true, kVision},
    {"--mask-factor", true, kVision},
    {"--iter-per-epoch", true, kVision},
    {"--dino-*", true, kVision},
};

// FlagContext::kCheckpointModel (generate): the model and its weights come from a checkpoint.
constexpr const char* kFromCheckpoint =
    "the model is the checkpoint's: a value given must equal the checkpoint's, or "
    "--use-checkpoint-args takes the checkpoint's";
constexpr const char* kTrainingOnly =
    "a training option; this command does not train (the model and its weights are the "
    "checkpoint's)";
constexpr const char* kInferenceEngine =
    "configures Megatron's inference engine (batching, memory, CUDA graphs, logging); the tokens "
    "generated here are the same without it";
constexpr const char* kWeightsOnly = "this command loads the checkpoint's weights only";
constexpr Rule kCheckpointModelRules[] = {
    {"--pipeline-model-parallel-size", true,
     "generation runs on tensor-parallel ranks only (mpirun -np TP): a pipeline-parallel "
     "checkpoint is resharded on load, so give --pipeline-model-parallel-size 1",
     "1"},
    {"--fp16", true, "generation computes in fp32, or in bf16 with --bf16"},
    {"--sequence-parallel", false,
     "splits training activations over the TP ranks; generation computes the same tokens "
     "without it"},
    {"--no-load-optim", false, kWeightsOnly},
    {"--no-load-rng", false, kWeightsOnly},
    {"--finetune", false, kWeightsOnly},
    {"--make-vocab-size-divisible-by", false,
     "the embedding rows are the checkpoint's, re-padded on load for this TP size"},
};

bool matches(std::string_view pattern, std::string_view flag) {
  if (!pattern.empty() && pattern.back() == '*')
    return flag.substr(0, pattern.size() - 1) == pattern.substr(0, pattern.size() - 1);
  return flag == pattern;
}

// "1" equals "1.0" and "1e0": neutral values compare as numbers when both parse as numbers.
bool same_value(const std::string& given, const std::string& neutral) {
  if (given == neutral) return true;
  char* end_given = nullptr;
  char* end_neutral = nullptr;
  const double a = std::strtod(given.c_str(), &end_given);
  const double b = std::strtod(neutral.c_str(), &end_neutral);
  return !given.empty() && *end_given == '\0' && *end_neutral == '\0' && a == b;
}

}  // namespace

std::optional<ForeignFlagRule> classify_megatron_flag(std::string_view flag, FlagContext context) {
  if (context == FlagContext::kCheckpointModel) {
    for (const Rule& r : kCheckpointModelRules)
      if (matches(r.pattern, flag)) return ForeignFlagRule{r.rejected, r.reason, r.neutral, false};
    if (is_model_flag(flag)) return ForeignFlagRule{false, kFromCheckpoint, "", true};
    // The other MoE flags (the losses, the dispatcher, fusions) train the model.
    if (matches("--moe-*", flag)) return ForeignFlagRule{false, kTrainingOnly, "", false};
  }
  for (const Rule& r : kRules) {
    if (!matches(r.pattern, flag)) continue;
    const bool engine = context == FlagContext::kCheckpointModel && r.reason == kInference;
    return ForeignFlagRule{r.rejected, engine ? kInferenceEngine : r.reason, r.neutral, false};
  }
  // What the pretrain commands implement and the table therefore does not list: training.
  if (context == FlagContext::kCheckpointModel)
    return ForeignFlagRule{false, kTrainingOnly, "", false};
  return std::nullopt;
}

const std::vector<MegatronFlag>& megatron_flag_list() {
  static const std::vector<MegatronFlag> flags = {
#include "cli/args/megatron_flag_list.inc"
  };
  return flags;
}

MegatronFlags::MegatronFlags(CLI::App& app, FlagContext context) : app_(app) {
  app.add_flag("--print-megatron-flags", print_table_,
               "print how this command treats each Megatron-LM flag, then exit");
  // Reserved: the options keep pointers into each entry's `values`.
  foreign_.reserve(megatron_flag_list().size());
  for (const MegatronFlag& f : megatron_flag_list()) {
    if (app.get_option_no_throw(f.name) != nullptr) continue;
    std::optional<ForeignFlagRule> rule = classify_megatron_flag(f.name, context);
    MT_CHECK(rule.has_value(), "Megatron flag ", f.name,
             " is not classified in megatron_flags.cpp");
    Foreign& entry = foreign_.emplace_back(Foreign{f.name, nullptr, std::move(*rule), {}});
    const std::string help =
        "Megatron-LM flag without an implementation here: " + entry.rule.reason;
    if (f.arity == 0) {
      entry.option = app.add_flag(f.name, help);
    } else {
      entry.option = app.add_option(f.name, entry.values, help);
      if (f.arity == kMegatronList)
        entry.option->expected(1, CLI::detail::expected_max_vector_size);
      else
        entry.option->expected(f.arity)->allow_extra_args(false);  // argparse: exactly N
    }
    entry.option->group("Megatron-LM flags (docs/megatron-compat.md)");
  }
}

int MegatronFlags::parse(int argc, char** argv) {
  if (int rc = parse_command_line(app_, argc, argv); rc >= 0) return rc;
  if (print_table_) {
    std::cout << table();
    return 0;
  }
  return -1;
}

void MegatronFlags::check() const {
  for (const Foreign& f : foreign_) {
    if (f.option->count() == 0) continue;
    const ForeignFlagRule& r = f.rule;
    const bool neutral = !r.neutral_value.empty() && f.values.size() == 1 &&
                         same_value(f.values[0], r.neutral_value);
    if (r.model) continue;  // check_model_flags, once the model is known
    if (neutral) {
      log_info(" > ", f.name, " ", f.values[0], " has no effect here: it is the only choice");
    } else if (r.rejected) {
      std::string given = f.name;
      for (const std::string& v : f.values) given += " " + v;
      MT_THROW(given, ": ", r.reason,
               r.neutral_value.empty() ? "" : " (only " + r.neutral_value + " is accepted)");
    } else {
      log_info(" > ", f.name, " has no effect here: ", r.reason);
    }
  }
}

void MegatronFlags::check_model_flags(const LanguageModelConfig& config, bool use_checkpoint_args,
                                      const std::string& load) const {
  std::vector<GivenModelFlag> given;
  for (const Foreign& f : foreign_)
    if (f.rule.model && f.option->count() > 0) given.push_back({f.name, f.values});
  const std::vector<std::string> mismatches = model_flag_mismatches(given, config);
  if (use_checkpoint_args) {
    for (const std::string& m : mismatches)
      log_info(" > ", m, " in ", load, ": the checkpoint's is used (--use-checkpoint-args)");
    return;
  }
  if (mismatches.empty()) return;
  std::string all;
  for (const std::string& m : mismatches) all += (all.empty() ? "" : "; ") + m;
  MT_THROW(all, " in ", load,
           ": the model comes from the checkpoint; drop the flag, add --use-checkpoint-args (as "
           "Megatron's inference scripts do), or load the checkpoint you meant");
}

bool MegatronFlags::given(std::string_view flag) const {
  for (const Foreign& f : foreign_)
    if (f.name == flag) return f.option->count() > 0;
  return false;
}

std::string MegatronFlags::table() const {
  std::string out;
  for (const MegatronFlag& f : megatron_flag_list()) {
    const CLI::Option* option = app_.get_option_no_throw(f.name);
    const Foreign* foreign = nullptr;
    for (const Foreign& x : foreign_)
      if (x.option == option) foreign = &x;
    std::string status;
    std::string note;
    if (foreign == nullptr) {
      status = "supported";
      note = option->get_description();
    } else if (foreign->rule.model) {
      status = "checked against the checkpoint";
      note = foreign->rule.reason;
    } else if (!foreign->rule.neutral_value.empty()) {
      status = "no effect if " + foreign->rule.neutral_value;
      note = "else rejected: " + foreign->rule.reason;
    } else {
      status = foreign->rule.rejected ? "rejected" : "no effect";
      note = foreign->rule.reason;
    }
    out += std::string(f.name) + "\t" + status + "\t" + note + "\n";
  }
  return out;
}

}  // namespace megatron::cli
