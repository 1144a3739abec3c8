// Offline conversion between Megatron-LM's legacy `torch` checkpoints
// (checkpoint/megatron_lm_torch.h) and megatron-cpp's, for GPT-family models (GPT-2 and the
// Llama-style options its arguments describe) and BERT, behind `megatron convert --from
// megatron-lm` / `--to megatron-lm`, `pretrain-gpt|bert --load` of a Megatron-LM directory and
// `--ckpt-format torch` saves. One process, no MPI; both directions write atomically (a
// CheckpointTransaction), at any tensor × pipeline layout in and out.
//
// What crosses: the weights, the iteration, the model's shape and architecture (Megatron's
// `args`); from a checkpoint of the non-distributed optimizer (torch or, GPT only, torch_dist)
// or of the distributed one (torch: distrib_optim.pt, checkpoint/megatron_lm_distrib_optim.h;
// torch_dist: its fully_reshardable layout) also Adam's moments, the fp32 master weights, the
// step, the loss scaler, the LR scheduler and the consumed samples
// (checkpoint/megatron_lm_trainer_state.h), so that a run resumes from the import; an export of a
// checkpoint with that state writes it back in Megatron's spelling
// (checkpoint/megatron_lm_rank_state.h), as the distributed optimizer saves it (distrib_optim.pt)
// when args.use_distributed_optimizer. Not yet: torch_dist's dp_reshardable layout and the RNG
// states (an export has no rng_state: Megatron-LM loads it with --no-load-rng).
#pragma once

#include <cstdint>
#include <string>

#include "checkpoint/megatron_lm_torch.h"
#include "model/bert_config.h"
#include "model/gpt_model.h"

namespace megatron {

// Whether iteration `iteration` (-1: the tracker's) of the Megatron-LM checkpoint in `load_dir`
// carries the state import_megatron_lm_gpt turns into a resumable checkpoint: a torch one with
// Adam's state or distrib_optim.pt files and opt_param_scheduler; a torch_dist one
// with Adam's moments (optimizer.state.exp_avg.*, optimizer.state.exp_avg_sq.*), the optimizer's
// common state and opt_param_scheduler. Reads the metadata and the common state only.
bool megatron_lm_checkpoint_is_resumable(const std::string& load_dir, int64_t iteration);

// Reads iteration `iteration` (-1: the tracker's) of the Megatron-LM checkpoint in `load_dir`
// and writes it to `save_dir` at `target_tp` tensor-parallel ranks — as megatron-cpp iteration 0
// with the weights alone, or, when it carries the optimizer state (above), as the checkpoint's
// own iteration with that state (optimizer.safetensors: exp_avg, exp_avg_sq and, from a bf16 /
// fp16 run, fp32_master; state.json: iteration, consumed samples, optimizer step, loss scaler,
// scheduler) — the vocabulary re-padded for `target_tp` (args.make_vocab_size_divisible_by). The
// real vocabulary size is `vocab_size` when > 0, else args.vocab_size, else 50257 for
// args.tokenizer_type GPT2BPETokenizer; otherwise an Error asks for --vocab-size.
// state.json records the source ("converted_from": format, path, iteration,
// checkpoint_version) and Megatron's args in megatron-cpp's spelling.
// Throws Error naming the file and the problem: tensors missing, unknown or misshaped for the
// model the args describe; an unsupported option (in the torch format experts, multi-latent
// attention, QK norms and MTP — torch_dist reads them: checkpoint/megatron_core_keys.h —,
// uneven pipeline stages, virtual pipeline chunks; a BERT checkpoint).
void import_megatron_lm_gpt(const std::string& load_dir, int64_t iteration,
                            const std::string& save_dir, int target_tp, int64_t vocab_size);
// The same for a BERT (Megatron-LM's legacy or Megatron-Core BertModel, torch format only): a
// pre-LayerNorm megatron-cpp BERT with the pooler and binary head when args.bert_binary_head
// (the default). Megatron's GeLU form is recorded as for GPT (tanh with its fused bias-GeLU or
// --openai-gelu, else erf) and used by the whole model, its LM head included.
void import_megatron_lm_bert(const std::string& load_dir, int64_t iteration,
                             const std::string& save_dir, int target_tp, int64_t vocab_size);

// Writes iteration `iteration` (-1: latest) of megatron-cpp's checkpoint in `load_dir` as a
// Megatron-LM torch checkpoint in `save_dir` (same iteration) at `target_tp` × `target_pp`
// ranks, parameters named per `naming`, the vocabulary padded as Megatron pads it for
// `target_tp` (padding rows zero). Each rank file holds "args" (the checkpoint's args in
// Megatron's spelling, the target layout and padded vocabulary), "checkpoint_version" 3.0,
// "iteration", "model" and "num_floating_point_operations_so_far" 0; when the checkpoint holds
// the optimizer state and scheduler (a training run's save), also "optimizer" (the
// non-distributed optimizer's, checkpoint/megatron_lm_rank_state.h; with
// args.use_distributed_optimizer the distributed optimizer's, and its distrib_optim.pt beside the
// rank file, laid out by args.overlap_grad_reduce / ddp_bucket_size,
// checkpoint/megatron_lm_distrib_optim.h), "opt_param_scheduler" and
// args.consumed_train_samples / consumed_valid_samples. Throws Error for a BERT checkpoint.
void export_megatron_lm_gpt(const std::string& load_dir, int64_t iteration,
                            const std::string& save_dir, int target_tp, int target_pp,
                            MegatronLmNaming naming);
// Throws Error when a model of `config` has no Megatron-LM counterpart export_megatron_lm_*
// writes (GPT: experts, multi-latent attention, multi-token prediction; BERT: post-LayerNorm),
// naming `what` (the checkpoint, the run).
void check_megatron_lm_exportable(const GptConfig& config, const std::string& what);
void check_megatron_lm_exportable(const BertConfig& config, const std::string& what);

// The same for a pre-LayerNorm BERT checkpoint (Megatron-LM has no post-LayerNorm BERT: an
// Error), in Megatron's BertModel names.
void export_megatron_lm_bert(const std::string& load_dir, int64_t iteration,
                             const std::string& save_dir, int target_tp, int target_pp,
                             MegatronLmNaming naming);

// Writes iteration `iteration` (-1: latest) of megatron-cpp's checkpoint in `load_dir` in
// Megatron-LM's torch_dist format (checkpoint/megatron_lm_torch_dist_writer.h) in `save_dir`
// (same iteration), as a run at `target_tp` × `target_pp` saves it: one __R_0.distcp per
// model-parallel rank R = pp · target_tp + tp, the vocabulary padded for `target_tp`, f32
// weights, and the optimizer state, scheduler and consumed samples when the checkpoint has them.
// MoE, QK-norm, MLA (its rope rows in Megatron's order) and MTP models included
// (checkpoint/megatron_core_keys.h). Throws Error for a model Megatron-Core's GPT keys do not
// describe here (DeepSeek sparse attention's indexer).
void export_megatron_lm_gpt_torch_dist(const std::string& load_dir, int64_t iteration,
                                       const std::string& save_dir, int target_tp, int target_pp);

}  // namespace megatron
