// Trainer: the pretraining loop (Megatron's pretrain()/train()), the same for every model.
//
// Builds the rank grid (TP × PP × DP), the model (a ModelStep: GPT or BERT, model_step.h), AdamW,
// the loss scaler and LR schedule and the data loaders, optionally loads a checkpoint, then
// runs iterations: the global batch's micro-batches (gradient accumulation, in the model's
// pipeline schedule) → all-reduce of the tied embedding over the first and last pipeline stage →
// DP all-reduce of the flat gradients in buckets (optim/grad_buckets.h; with
// --overlap-grad-reduce started during the last micro-batch's backward) → overflow check
// (fp16) → clip → the rerun state machine's checks of the loss and gradient norm (which may
// run the iteration again, or end the job: rerun_state_machine.h) → AdamW → schedule; logs
// `lm loss` (and BERT's `sop loss`), evaluates and saves at the configured intervals (and at the
// end of each epoch, keeping the best, when training in epochs) and exits at
// --exit-interval / --exit-duration-in-mins. Every decision (skip, clip, save, exit) is taken
// from values that are identical on all ranks, so no rank ever waits for another.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "distributed/communicator.h"
#include "optim/grad_buckets.h"
#include "optim/grad_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "train/batch_size_schedule.h"
#include "train/model_step.h"
#include "train/rerun_state_machine.h"

namespace megatron {

struct TrainerConfig {
  // Where this rank computes: the parameter store's flat buffers (values, gradients, master
  // weights, Adam moments) and the activations live there; batches are uploaded to it.
  Device device = Device::CPU;
  int tensor_parallel = 1;
  int context_parallel = 1;   // --context-parallel-size (ParallelState::cp_size)
  int cp_a2a_size = 0;        // --hierarchical-context-parallel-sizes' first (0: not given)
  int pipeline_parallel = 1;  // the model step builds this rank's stage (ParallelState::pp_rank)
  RankOrder rank_order = RankOrder::kTpDpPp;  // --use-tp-pp-dp-mapping: kTpPpDp
  // The expert grid (ParallelState's ep and etp; docs/moe.md): --expert-model-parallel-size and
  // --expert-tensor-parallel-size (0: the TP size).
  int expert_model_parallel = 1;
  int expert_tensor_parallel = 0;
  // --check-weight-hash-across-dp-replicas-interval: every this many iterations the DP
  // replicas' parameters must agree (optim/replica_check.h); 0 never.
  int64_t check_weight_hash_interval = 0;
  // --test-mode (Megatron's real-time consistency tests): after every iteration the DP replicas'
  // parameters, and the TP ranks' replicated parameters, must agree (optim/replica_check.h).
  bool test_mode = false;
  int64_t micro_batch = 1;
  // Megatron's args.global_batch_size: the samples of one evaluation iteration (and, with a
  // constant batch size, of every training step).
  int64_t global_batch = 1;
  // --eval-global-batch-size: the samples of one evaluation iteration instead (0: global_batch).
  int64_t eval_global_batch = 0;
  // The global batch of each training step (--step-batch-size-schedule); none: global_batch.
  std::optional<BatchSizeSchedule> batch_sizes;
  int64_t train_iters = 0;
  // Training in epochs (finetuning): after every this many iterations an epoch ends — the
  // checkpoint is saved (with --save), ModelStep::end_of_epoch evaluates, and a checkpoint
  // with a better score than every earlier epoch's is also saved to SAVE/best. 0: no epochs.
  int64_t iterations_per_epoch = 0;
  int64_t exit_interval = 0;         // 0: never
  double exit_duration_seconds = 0;  // 0: never; else stop training after this wall time
  uint64_t seed = 1234;
  bool fp16 = false;  // f16-rounded weights + dynamic loss scaling (docs/training.md)
  // bf16 parameters (the store's values), fp32 master weights in the optimizer — sharded with
  // the distributed optimizer (docs/training.md). The model must compute in bf16.
  bool bf16 = false;
  // --calculate-per-token-loss: the model's losses are sums with token counts (LossTerms); the
  // gradients are summed over micro-batches and DP ranks, then divided by the global batch's
  // token count, and the logged loss is Σ loss / Σ tokens — Megatron's per-token loss.
  bool per_token_loss = false;

  LrScheduleConfig lr;
  // How a loaded checkpoint's schedule settings meet `lr` (optim/lr_schedule.h): checked
  // (Megatron's default), overridden, or taken from the checkpoint.
  ScheduleRestore schedule_restore = ScheduleRestore::kCheck;
  AdamWConfig adam;
  // --use-distributed-optimizer: Adam state sharded over DP (optim/distributed_optimizer.h).
  bool distributed_optimizer = false;
  // --overlap-grad-reduce: each gradient bucket's DP reduction starts during the backward, as
  // soon as the last micro-batch completed it (optim/grad_buckets.h). The same result either way.
  bool overlap_grad_reduce = false;
  int64_t ddp_bucket_size = kDefaultGradBucketElements;  // --ddp-bucket-size (elements)
  double clip_grad = 1.0;
  GradScalerConfig scaler;

  int64_t log_interval = 100;
  int64_t eval_interval = 1000;
  int64_t eval_iters = 100;
  std::string metrics_file;
  std::string tensorboard_dir;
  // Each transformer layer's gradient norm (before clipping) into the metrics file, at the
  // first iteration (the gradients at initialisation) and every log_interval.
  bool log_layer_grad_norms = false;
  bool log_params_norm = false;        // the parameters' L2 norm in the log line and TensorBoard
  bool log_num_zeros_in_grad = false;  // zero gradient elements in the log line and TensorBoard
  bool log_throughput = false;         // TFLOP/s per process as Megatron's "throughput"
  // Megatron's per-operation timers (train/log/named_timers.h): --timing-log-level 0|1|2,
  // --timing-log-option minmax|max|all; --log-timers-to-tensorboard writes "<name>-time",
  // "iteration-time" and (with log_throughput) "throughput".
  int timing_log_level = 0;
  std::string timing_log_option = "minmax";
  bool log_timers_to_tensorboard = false;
  // --log-memory-to-tensorboard: Megatron's "mem-*-bytes" scalars of this process's device
  // (core/device_runtime.h, DeviceMemoryStats) every --tensorboard-log-interval iterations.
  bool log_memory_to_tensorboard = false;
  // Megatron's theoretical memory report (cli/setup/theoretical_memory.h): lines rank 0 prints
  // once, before the first memory report. Empty: none.
  std::string theoretical_memory_report;
  int64_t tensorboard_log_interval = 1;            // TensorBoard scalars every this many iterations
  bool log_validation_ppl_to_tensorboard = false;  // also "lm loss validation ppl"
  bool log_loss_scale_to_tensorboard = true;       // "loss-scale"

  std::string save;
  std::string load;
  int64_t save_interval = 0;  // 0: only at the end / exit
  // --save-retain-interval: after each save to --save, the previous checkpoint there is removed
  // unless its iteration is a multiple of this (0: keep every checkpoint).
  int64_t save_retain_interval = 0;
  bool no_load_optim = false;
  bool no_load_rng = false;
  bool no_save_optim = false;  // weights only: no optimizer.safetensors, scheduler or scaler
  bool no_save_rng = false;
  // Another format for the saves (--ckpt-format torch): each save is written in megatron-cpp's
  // format to SAVE_DIR.megatron-cpp-staging, then rank 0 calls save_as(staged, iteration,
  // save_dir), which must write that iteration of `staged` into save_dir atomically (a failure
  // leaves save_dir's checkpoints as they were), and removes the staging directory. Empty:
  // megatron-cpp's format, written directly. Not with async_save.
  std::function<void(const std::string& staged, int64_t iteration, const std::string& save_dir)>
      save_as;
  // --ckpt-format torch_dist: saves to `save` are written in Megatron-LM's torch_dist format
  // (checkpoint/megatron_lm_torch_dist_writer.h) by every rank, not in megatron-cpp's. Only for
  // parameters Megatron-Core's GPT has keys for (checked when the trainer is built).
  bool torch_dist_save = false;
  bool finetune = false;
  bool exit_on_missing_checkpoint = false;  // --load without a checkpoint: stop, not random init
  bool skip_train = false;  // load, evaluate on the validation set, exit (no training, no save)

  // Reliability (docs/reliability.md).
  bool check_for_nan_in_loss_and_grad = true;  // the divergence guard (divergence_guard.h)
  bool async_save = false;           // --async-save: periodic saves written in the background
  bool exit_signal_handler = false;  // SIGTERM/SIGINT: finish the iteration, save, exit 0
  // Hang detection (distributed/watchdog.h): a rank waiting longer than this in one
  // communication ends the job with a report; 0 turns the watchdog off. The flag that set it,
  // for the report; the base directory of the heartbeat files ("": $TMPDIR or /tmp).
  double distributed_timeout_seconds = 600;
  std::string distributed_timeout_flag = "--distributed-timeout-minutes 10";
  std::string heartbeat_dir;
  // --log-straggler: every rank's compute and communication time per iteration, after each log
  // interval (train/log/straggler_report.h), naming --straggler-minmax-count ranks each way.
  bool log_straggler = false;
  int straggler_minmax_count = 1;
  // Megatron's rerun state machine (--rerun-mode, --error-injection-*, the tracker file;
  // train/rerun_state_machine.h); its seed is `seed`. --check-for-spiky-loss and
  // --check-for-large-grads add its non-fatal checks of the loss and the gradient norm.
  RerunConfig rerun;
  bool check_for_spiky_loss = false;
  bool check_for_large_grads = false;
  // --iterations-to-skip: 1-based iterations whose global batch is consumed without training.
  std::vector<int64_t> iterations_to_skip;

  nlohmann::json args;  // every argument, stored in each checkpoint's state.json
  // The tokenizer's identity (tokenizer_identity(), data/), stored in state.json as
  // "tokenizer" when set: HF export writes its files next to the weights.
  nlohmann::json tokenizer;
  // Called on every rank after each iteration's optimizer step (e.g. by the step benchmark).
  std::function<void(int64_t iteration)> on_iteration_end;
  // --sample-interval: every this many iterations (0: never), after that iteration's log line
  // and evaluation, `sample` lets the model being trained write. Called on every rank (it is
  // collective); it returns a JSON array of {"prompt", "text"}, which rank 0 prints and writes
  // to the metrics file (TrainingLog::samples).
  int64_t sample_interval = 0;
  std::function<nlohmann::json(ModelStep& model, int64_t iteration)> sample;
};

struct TrainingResult {
  int64_t iteration = 0;             // last iteration run
  double last_validation_loss = -1;  // -1 when no validation ran
  double last_test_loss = -1;        // -1 when no test evaluation ran
  int exit_signal = 0;               // the signal that stopped the run (--exit-signal-handler)
  // The process's exit code: 0, or the rerun state machine's (kExitResumeToDisambiguate,
  // kExitFailedOnResultValidation).
  int exit_code = 0;
};

class Trainer {
 public:
  // `make_model` builds the model once the rank grid and parameter store exist
  // (gpt_step_factory, bert_step_factory).
  Trainer(TrainerConfig config, std::shared_ptr<Communicator> world, ModelStepFactory make_model);
  ~Trainer();
  TrainingResult run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace megatron
