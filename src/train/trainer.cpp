#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <set>

#include "checkpoint/async_save.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/housekeeping.h"
#include "checkpoint/layout.h"
#include "checkpoint/megatron_lm_torch_dist_writer.h"
#include "checkpoint/model_shape.h"
#include "checkpoint/save_lock.h"
#include "core/device_runtime.h"
#include "core/host_name.h"
#include "core/logging.h"
#include "core/number_format.h"
#include "core/timer.h"
#include "distributed/agreement.h"
#include "distributed/communication_timer.h"
#include "distributed/observed_communicator.h"
#include "distributed/parallel_state.h"
#include "distributed/watchdog.h"
#include "kernels/elementwise.h"
#include "optim/distributed_optimizer.h"
#include "optim/divergence_guard.h"
#include "optim/grad_buckets.h"
#include "optim/grad_reduction.h"
#include "optim/layer_grad_norms.h"
#include "optim/replica_check.h"
#include "train/exit_signal.h"
#include "train/log/named_timers.h"
#include "train/log/straggler_report.h"
#include "train/log/training_log.h"
#include "train/rerun_state_machine.h"

namespace megatron {

namespace {

// Megatron's name of multi-token prediction depth k + 1's loss.
std::string mtp_loss_name(size_t k) {
  return "mtp_" + std::to_string(k + 1) + " loss";
}

// `device`, after binding this process to it (before the first allocation there).
Device bound(Device device) {
  use_device(device);
  return device;
}

// The run's hang detection (collective: every rank makes the heartbeat directory together),
// or null when cfg turns it off or the world is one process (nothing to wait for).
std::shared_ptr<CollectiveWatchdog> start_watchdog(const TrainerConfig& cfg, Communicator& world) {
  if (cfg.distributed_timeout_seconds <= 0 || world.size() == 1) return nullptr;
  WatchdogOptions options;
  options.timeout_seconds = cfg.distributed_timeout_seconds;
  options.timeout_flag = cfg.distributed_timeout_flag;
  options.heartbeat_dir = make_heartbeat_dir(world, cfg.heartbeat_dir);
  options.rank = world.rank();
  options.world_size = world.size();
  // Several beats per timeout, at most one a second: a few small files per second per host.
  options.heartbeat_seconds = std::min(1.0, cfg.distributed_timeout_seconds / 4);
  return std::make_shared<CollectiveWatchdog>(std::move(options));
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// `world` observed by `observer` (every group split from it too), or `world` when it is null.
std::shared_ptr<Communicator> observed(std::shared_ptr<Communicator> world,
                                       std::shared_ptr<CommunicationObserver> observer) {
  if (!observer) return world;
  return std::make_shared<ObservedCommunicator>(std::move(world), std::move(observer));
}

// Every rank's `text` (shorter than 256 bytes), in rank order.
std::vector<std::string> all_gather_strings(Communicator& world, const std::string& text) {
  constexpr int64_t kWidth = 256;
  MT_REQUIRE(int64_t(text.size()) < kWidth, "the name '", text, "' is longer than ", kWidth - 1,
             " bytes");
  std::vector<int32_t> mine(kWidth, 0), all(size_t(kWidth * world.size()), 0);
  for (size_t i = 0; i < text.size(); ++i) mine[i] = static_cast<unsigned char>(text[i]);
  Tensor out = Tensor::from_blob(all.data(), {kWidth * world.size()}, DType::I32);
  world.all_gather(Tensor::from_blob(mine.data(), {kWidth}, DType::I32), out);
  std::vector<std::string> texts(size_t(world.size()));
  for (size_t r = 0; r < texts.size(); ++r)
    for (int64_t i = 0; i < kWidth && all[r * kWidth + size_t(i)] != 0; ++i)
      texts[r] += char(all[r * kWidth + size_t(i)]);
  return texts;
}

}  // namespace

struct Trainer::Impl {
  TrainerConfig cfg;
  // Hang detection: observes every communication of `ps`'s groups (null when turned off).
  std::shared_ptr<CollectiveWatchdog> watchdog;
  // --log-straggler: the time spent communicating, and where the current report window began.
  std::shared_ptr<CommunicationTimer> communication_time;
  double straggler_window_wall = 0, straggler_window_communication = 0;
  ParallelState ps;
  ParameterStore store;
  std::unique_ptr<ModelStep> model;
  // The optimizer of every parameter, or with the distributed optimizer of this rank's shard of
  // the dense part (the whole flat space without an expert grid of its own); the expert part's
  // shard has an optimizer of its own (null otherwise): AdamW owns one range of the flat space.
  std::unique_ptr<AdamW> optimizer, expert_optimizer;
  // --use-distributed-optimizer: this rank's shards (their ranges of the flat gradients hold the
  // reduced sums after the reduction).
  std::optional<DistributedShards> shards;
  // The data-parallel reduction of the gradients (only the shards' ranges with shards).
  std::unique_ptr<GradBuckets> grad_buckets;
  GradScaler scaler;
  LrSchedule schedule;
  TrainingLog log;
  NamedTimers timers;  // --timing-log-level
  // Micro-batches per rank of one evaluation iteration (cfg.global_batch), and of the current
  // training step with its global batch (cfg.batch_sizes at consumed_train_samples).
  int64_t eval_micro_batches;
  BatchSizeSchedule batch_sizes;
  int64_t num_micro_batches = 0;
  int64_t global_batch = 0;

  int64_t iteration = 0;
  int64_t consumed_train_samples = 0;
  int64_t consumed_valid_samples = 0;
  uint64_t seed;
  // The loaded checkpoint's record of the HF model it was imported from, saved again so that
  // an export after training still writes that model's config.json and dtype.
  nlohmann::json converted_from;

  // Accumulated between two log lines.
  Timer interval_timer;
  int64_t interval_iterations = 0;
  LossTerms interval_loss_sum;
  int64_t interval_loss_count = 0, interval_skipped = 0, interval_nans = 0;
  bool memory_reported = false;  // Megatron's memory report, once per run
  std::optional<double> last_grad_norm;
  // --log-num-zeros-in-grad: the zeros of the last step's gradients (none when skipped).
  std::optional<int64_t> step_num_zeros, last_num_zeros;

  DivergenceGuard guard;
  // Megatron's rerun state machine (--rerun-mode), and the trainer state a re-run of an
  // iteration starts from (the data position is consumed_train_samples, unchanged until the
  // iteration ends).
  std::unique_ptr<RerunStateMachine> rerun;
  nlohmann::json scaler_before_iteration;
  // 1-based iterations not trained (--iterations-to-skip, the tracker file's verdicts).
  std::set<int64_t> iterations_to_skip;
  // The newest checkpoint saved or loaded, and its directory (for the guard's message).
  std::optional<int64_t> last_checkpoint;
  std::optional<double> best_score;  // the best end-of-epoch score (checkpointed)
  int64_t last_saved = -1;           // the iteration this run last saved to --save (-1: none)
  std::string last_checkpoint_dir;
  // Rank 0's lock on --save for the job's life (checkpoint/save_lock.h).
  std::optional<SaveLock> save_lock;
  // --async-save: the save being written in the background, if any (at most one).
  std::unique_ptr<AsyncCheckpointSave> async_save;
  std::optional<int64_t> async_save_previous;  // its --save-retain-interval predecessor
  int64_t consecutive_skips = 0, next_skip_warning = kFirstSkipWarning;
  static constexpr int64_t kFirstSkipWarning = 10;

  Impl(TrainerConfig c, std::shared_ptr<Communicator> world, const ModelStepFactory& make_model)
      : cfg(std::move(c)),
        watchdog(start_watchdog(cfg, *world)),
        communication_time(cfg.log_straggler ? std::make_shared<CommunicationTimer>() : nullptr),
        ps(ParallelState::create(observed(observed(std::move(world), communication_time), watchdog),
                                 cfg.tensor_parallel, cfg.pipeline_parallel, cfg.rank_order,
                                 cfg.context_parallel, cfg.cp_a2a_size, cfg.expert_model_parallel,
                                 cfg.expert_tensor_parallel)),
        store(ps.tp_rank, ps.tp_size, bound(cfg.device)),
        scaler(cfg.scaler),
        schedule(cfg.lr),
        log(ps.rank == 0, cfg.metrics_file, cfg.tensorboard_dir,
            cfg.log_validation_ppl_to_tensorboard, cfg.log_loss_scale_to_tensorboard),
        timers(cfg.timing_log_level, timing_log_option_from_name(cfg.timing_log_option),
               cfg.device),
        batch_sizes(cfg.batch_sizes.value_or(BatchSizeSchedule::constant(cfg.global_batch))),
        seed(cfg.seed),
        guard(cfg.check_for_nan_in_loss_and_grad, cfg.fp16) {
    const int64_t per_step = cfg.micro_batch * ps.dp_size;
    MT_CHECK(cfg.global_batch % per_step == 0, "--global-batch-size ", cfg.global_batch,
             " must be a multiple of --micro-batch-size x data-parallel size (", per_step, ")");
    MT_CHECK(eval_global_batch() % per_step == 0, "--eval-global-batch-size ", eval_global_batch(),
             " must be a multiple of --micro-batch-size x data-parallel size (", per_step, ")");
    eval_micro_batches = eval_global_batch() / per_step;
    store.set_expert_grid(ps.ep_rank, ps.ep_size, ps.etp_rank, ps.etp_size);
    model = make_model(ps, store);
    MT_CHECK(!(cfg.bf16 && cfg.fp16), "bf16 and fp16 training exclude each other");
    // Context-parallel ranks hold the same weights as data-parallel ones: the distributed
    // optimizer shards over dp × cp, as Megatron's does — and the experts, on a grid of their
    // own, over the expert data-parallel group.
    const bool expert_shards = cfg.distributed_optimizer && ps.own_expert_grid();
    store.allocate(cfg.distributed_optimizer ? ps.dp_cp_size : 1,
                   cfg.bf16 ? DType::BF16 : DType::F32, expert_shards ? ps.edp->size() : 0);
    model->init_weights(cfg.seed);
    if (cfg.distributed_optimizer) shards = DistributedShards::of(store, ps);
    grad_buckets = std::make_unique<GradBuckets>(
        store, ps, cfg.ddp_bucket_size, cfg.overlap_grad_reduce, shards ? &*shards : nullptr);
    // Muon gathers a TP-split matrix over its TP group, and a sharded one over dp × cp (an
    // expert shard's over edp).
    const FlatRange dense_part = expert_shards ? store.dense_part() : FlatRange{};
    optimizer =
        std::make_unique<AdamW>(store, cfg.adam, shards ? shards->dense.range : FlatRange{},
                                MuonGroups{ps.tp, ps.etp, shards ? ps.dp_cp : nullptr, dense_part});
    if (expert_shards)
      expert_optimizer =
          std::make_unique<AdamW>(store, cfg.adam, shards->experts->range,
                                  MuonGroups{ps.tp, ps.etp, ps.edp, store.expert_part()});
    if (cfg.torch_dist_save) choose_torch_dist_save();
    // --fp16: each rank rounded its shards of the store to f16 (AdamW); every rank gets all of it.
    if (shards && cfg.fp16) all_gather_shards(store, ps, *shards);
    if (cfg.fp16) model->refresh_compute_weights();  // the store now holds f16-rounded values
    RerunConfig rerun_config = cfg.rerun;
    rerun_config.seed = cfg.seed;
    rerun = std::make_unique<RerunStateMachine>(
        rerun_config,
        RerunPlacement{ps.rank, all_gather_strings(*ps.world, host_name()),
                       all_gather_strings(*ps.world, cfg.device.str())},
        [this] { scaler_before_iteration = scaler.state(); },
        [this] {
          scaler.load_state(scaler_before_iteration);
          model->start_training_data(placement(consumed_train_samples, cfg.global_batch));
        });
    iterations_to_skip.insert(cfg.iterations_to_skip.begin(), cfg.iterations_to_skip.end());
    if (!cfg.rerun.tracker_file.empty())
      for (int64_t i : iterations_to_skip_from_tracker(cfg.rerun.tracker_file))
        iterations_to_skip.insert(i);
    // The dense and the expert part (not the distributed optimizer's padding between them).
    const FlatRange dense = store.dense_part(), experts = store.expert_part();
    log_info(" > number of parameters on (tensor, pipeline) model parallel rank (", ps.tp_rank,
             ", ", ps.pp_rank, "): ", dense.end - dense.begin + experts.end - experts.begin);
    log_info(" > training on ", cfg.device.str());
    if (shards) log_shards();
  }

  // The distributed optimizer's shards on rank 0 (the elements whose optimizer state it keeps).
  void log_shards() const {
    const DpShard& d = shards->dense;
    std::string line =
        " > distributed optimizer state on rank 0: " + std::to_string(d.range.end - d.range.begin) +
        " of " + std::to_string(d.total) + (shards->experts ? " dense" : "") +
        " elements (dp x cp " + std::to_string(ps.dp_cp_size) + ")";
    if (const std::optional<DpShard>& e = shards->experts)
      line += ", " + std::to_string(e->range.end - e->range.begin) + " of " +
              std::to_string(e->total) + " expert elements (expert data-parallel " +
              std::to_string(ps.edp->size()) + ")";
    log_info(line);
  }

  nlohmann::json state_json() const {
    nlohmann::json state = {{"iteration", iteration},
                            {"consumed_train_samples", consumed_train_samples},
                            {"consumed_valid_samples", consumed_valid_samples},
                            {"scheduler", schedule.state()},
                            {"grad_scaler", scaler.state()},
                            {"optimizer", optimizer->state()},
                            {"rng", {{"seed", seed}, {"iteration", iteration}}},
                            {"model", model->shape_json()},
                            {"args", cfg.args}};
    if (best_score) state["best_score"] = *best_score;
    if (nlohmann::json r = rerun->state_json(layout_name()); !r.is_null())
      state["rerun_state_machine"] = std::move(r);
    if (!cfg.tokenizer.is_null()) state["tokenizer"] = cfg.tokenizer;
    if (!converted_from.is_null()) state["converted_from"] = converted_from;
    // As Megatron's --no-save-optim / --no-save-rng: the state is left out, and a load then
    // starts the optimizer afresh (with --no-load-optim) / keeps the run's own seed.
    if (cfg.no_save_optim) {
      state.erase("optimizer");
      state.erase("scheduler");
      state.erase("grad_scaler");
    }
    if (cfg.no_save_rng) state.erase("rng");
    return state;
  }

  // Saves to `dir` (default: --save); with --async-save, a save to --save is only started
  // here and committed at a later step boundary (finish_async_save).
  void save(const std::string& dir = "") {
    const std::string& to = dir.empty() ? cfg.save : dir;
    finish_async_save(/*wait=*/true);  // at most one save in flight
    // The distributed optimizer's DP ranks each write their own shard: no gather (but with
    // expert shards the state is gathered whole, as the expert save path needs it).
    std::map<std::string, Tensor> buffers;
    if (!cfg.no_save_optim)
      buffers = expert_optimizer ? gathered_optimizer_state() : optimizer->flat_buffers();
    // --save-retain-interval: the checkpoint the tracker named before this save.
    const bool retain = to == cfg.save && cfg.save_retain_interval > 0 && ps.rank == 0;
    const std::optional<int64_t> previous = retain ? read_latest_iteration(to) : std::nullopt;
    check_save_lock();
    const OptimizerShard optimizer_shard =
        shards && !expert_optimizer
            ? OptimizerShard{shards->dense.range, ps.dp_cp_rank, ps.dp_cp_size}
            : OptimizerShard{};
    if (cfg.async_save && to == cfg.save) {
      Timer snapshot;
      snapshot.start();
      async_save = std::make_unique<AsyncCheckpointSave>(to, iteration, store, buffers,
                                                         state_json(), ps, optimizer_shard);
      async_save_previous = previous;
      log_info("  started saving the checkpoint of iteration ", iteration, " to ", to,
               " in the background (--async-save; training stalled ",
               format_number(snapshot.seconds(), "%.3f"), " s for the snapshot)");
      return;
    }
    if (cfg.torch_dist_save && to == cfg.save) {
      save_megatron_lm_torch_dist(to, iteration, store, buffers, state_json(), ps, optimizer_shard);
    } else if (cfg.save_as) {
      // Staged in megatron-cpp's format, then rewritten by rank 0; every rank fails together.
      MT_CHECK(!cfg.async_save, "--async-save with another checkpoint format");
      const std::string staged = to + ".megatron-cpp-staging";
      run_on_all_ranks(*ps.world, "", [&] {
        if (ps.rank == 0) std::filesystem::remove_all(staged);
      });
      save_checkpoint(staged, iteration, store, buffers, state_json(), ps, optimizer_shard);
      run_on_all_ranks(*ps.world, "", [&] {
        if (ps.rank != 0) return;
        try {
          cfg.save_as(staged, iteration, to);
        } catch (...) {
          std::filesystem::remove_all(staged);
          throw;
        }
        std::filesystem::remove_all(staged);
      });
    } else {
      save_checkpoint(to, iteration, store, buffers, state_json(), ps, optimizer_shard);
    }
    saved(to, iteration, previous);
  }

  // With expert shards (DistributedShards::experts): the optimizer's flat buffers whole, laid
  // out like the store's values — each shard's state copied in and all-gathered over its group,
  // as the values are — for the checkpoint's expert path, which brings the experts to its own
  // layout (checkpoint/checkpoint.h). Transient: one full-size buffer per state.
  std::map<std::string, Tensor> gathered_optimizer_state() {
    std::map<std::string, Tensor> whole;
    const std::map<std::string, Tensor> dense = optimizer->flat_buffers();
    const std::map<std::string, Tensor> experts = expert_optimizer->flat_buffers();
    for (const auto& [name, mine] : dense) {
      Tensor padded =
          Tensor::zeros({store.padded_flat_values().numel()}, DType::F32, store.device());
      for (const auto& [shard, part, group] :
           {std::tuple(&shards->dense, &mine, ps.dp_cp.get()),
            std::tuple(&*shards->experts, &experts.at(name), ps.edp.get())}) {
        const int64_t begin = shard->begin + int64_t(group->rank()) * shard->size;
        Tensor block = padded.slice(0, begin, begin + shard->size);
        Tensor head = block.slice(0, 0, part->numel());
        head.copy_from(*part);
        Tensor all = padded.slice(0, shard->begin, shard->begin + shard->size * group->size());
        if (group->size() > 1) group->all_gather(block, all);
      }
      whole.emplace(name, padded.slice(0, 0, store.flat_values().numel()));
    }
    return whole;
  }

  // No other job may have taken --save over since this one started.
  void check_save_lock() {
    run_on_all_ranks(*ps.world, "", [&] {
      if (save_lock) save_lock->check_held();
    });
  }

  // A committed save of `at` to `to`; `previous`: the checkpoint the tracker named before it,
  // when --save-retain-interval may retire it.
  void saved(const std::string& to, int64_t at, const std::optional<int64_t>& previous) {
    last_checkpoint = at;
    last_checkpoint_dir = to;
    log_info("  successfully saved checkpoint at iteration ", at, " to ", to);
    if (previous && retire_previous_checkpoint(to, previous, at, cfg.save_retain_interval))
      log_info("  removed the checkpoint of iteration ", *previous, " from ", to,
               " (--save-retain-interval ", cfg.save_retain_interval, " keeps every ",
               cfg.save_retain_interval, "th and the newest)");
  }

  // Collective: commits the save in flight once every rank has written it (with `wait`,
  // after waiting for it). A failed background write ends the run here, with its reason.
  // --ckpt-format torch_dist is Megatron-LM's default, so Megatron's command lines carry it for
  // every model: a model or optimizer state the format cannot hold here is saved in megatron-cpp's
  // format instead (warned), and --async-save does not apply to torch_dist saves (written
  // synchronously, warned).
  void choose_torch_dist_save() {
    std::vector<std::string> buffer_names;
    if (!cfg.no_save_optim)
      for (const auto& [name, buffer] : optimizer->flat_buffers()) buffer_names.push_back(name);
    const std::string unwritable = megatron_lm_torch_dist_unwritable(store, buffer_names);
    if (!unwritable.empty()) {
      if (ps.rank == 0)
        log_warning("--ckpt-format torch_dist: " + unwritable +
                    "; the checkpoints are saved in megatron-cpp's format (--load reads both)");
      cfg.torch_dist_save = false;
    } else if (cfg.async_save) {
      if (ps.rank == 0)
        log_warning("--async-save: torch_dist checkpoints are written synchronously");
      cfg.async_save = false;
    }
  }

  void finish_async_save(bool wait) {
    if (!async_save) return;
    if (!async_save->try_commit(wait, [&] { check_save_lock(); })) return;
    saved(async_save->save_dir(), async_save->iteration(), async_save_previous);
    async_save.reset();
  }

  // Saves to --save unless it is unset or this iteration is saved there already.
  void save_unless_saved() {
    if (cfg.save.empty() || last_saved == iteration) return;
    save();
    last_saved = iteration;
  }

  // The end of an epoch (Megatron's finetuning): evaluate, save, keep the best checkpoint.
  // The score comes first so that the epoch's checkpoint records the best score including
  // this epoch's: a run resumed from it keeps comparing against the right best.
  void end_epoch(int64_t epoch) {
    const std::optional<double> score = model->end_of_epoch(epoch);
    const bool improved = score && (!best_score || *score > *best_score);
    if (improved) best_score = score;
    save_unless_saved();
    if (!improved || cfg.save.empty()) return;
    const std::string best_dir = (std::filesystem::path(cfg.save) / "best").string();
    log_info(" > best score so far (", format_number(*score, "%.4f"), ", epoch ", epoch,
             "): keeping its checkpoint in ", best_dir);
    save(best_dir);
  }

  // Where the last good weights are, for the divergence guard's message.
  std::string where_saved() const {
    if (!last_checkpoint) return "no checkpoint was saved or loaded";
    return "the newest checkpoint is iteration " + std::to_string(*last_checkpoint) + " in '" +
           last_checkpoint_dir + "'";
  }

  // Before any compute: what --load resolves to, and that --save can be written (by every
  // rank that writes) and holds no other run's checkpoints. Every rank fails together.
  std::optional<int64_t> check_checkpoint_directories() {
    LoadPlan plan;
    run_on_all_ranks(*ps.world, "", [&] {
      if (!cfg.load.empty()) plan = plan_load(cfg.load, cfg.finetune);
      MT_REQUIRE(plan.warning.empty() || !cfg.exit_on_missing_checkpoint, plan.warning,
                 " is refused: --exit-on-missing-checkpoint (check the --load path)");
      if (cfg.save.empty()) return;
      if (ps.dp_cp_rank == 0 || shards) check_save_dir_writable(cfg.save, ps.rank);
      if (ps.rank == 0) save_lock.emplace(cfg.save);
      if (ps.rank == 0) check_save_dir_not_foreign(cfg.save, plan.iteration ? cfg.load : "");
    });
    if (!plan.warning.empty()) log_warning(plan.warning);
    return plan.iteration;
  }

  // `release`: Megatron's release checkpoint, loaded as --finetune loads (weights only, from
  // iteration 0).
  void load(bool release) {
    const bool weights_only = cfg.finetune || release;
    const bool load_optim = !cfg.no_load_optim && !weights_only;
    // The optimizer's own buffers (views): the distributed optimizer's hold its shard only, and
    // only the stored pieces that overlap it are read.
    // With expert shards the state is read whole (the expert load path reads every expert) and
    // each shard's range copied out of it.
    std::map<std::string, Tensor> buffers = optimizer->flat_buffers();
    if (expert_optimizer)
      for (auto& [name, buffer] : buffers)
        buffer = Tensor::zeros({store.flat_values().numel()}, DType::F32, store.device());
    nlohmann::json state;
    // Each rank reads its own files; a missing or corrupt one fails every rank together.
    run_on_all_ranks(*ps.world, "", [&] {
      state = load_checkpoint(cfg.load, -1, store, load_optim ? &buffers : nullptr, ps,
                              expert_optimizer ? FlatRange{} : optimizer->range());
      check_model_shape(state);
    });
    if (expert_optimizer && load_optim)
      for (AdamW* o : {optimizer.get(), expert_optimizer.get()})
        for (auto& [name, mine] : o->flat_buffers())
          mine.copy_from(buffers.at(name).slice(0, o->range().begin, o->range().end));
    last_checkpoint = state.at("iteration").get<int64_t>();
    last_checkpoint_dir = cfg.load;
    converted_from = state.value("converted_from", nlohmann::json());
    // An imported HF checkpoint has no optimizer state: start the optimizer afresh.
    if (load_optim && state.contains("optimizer")) {
      for (AdamW* o : optimizers()) o->load_state(state.at("optimizer"));
      // A run that trains nothing (--skip-train, finetune --epochs 0) never uses the schedule:
      // checking its settings would only refuse an evaluation.
      schedule.load_state(state.at("scheduler"),
                          cfg.skip_train ? ScheduleRestore::kOverride : cfg.schedule_restore);
      scaler.load_state(state.at("grad_scaler"));
      for (AdamW* o : optimizers()) o->write_model_weights();
    } else {
      for (AdamW* o : optimizers()) o->reset_master_from_store();
    }
    if (!weights_only) {
      iteration = state.at("iteration").get<int64_t>();
      consumed_train_samples = state.value("consumed_train_samples", int64_t(0));
      consumed_valid_samples = state.value("consumed_valid_samples", int64_t(0));
      if (state.contains("best_score")) best_score = state.at("best_score").get<double>();
      if (state.contains("rerun_state_machine"))
        rerun->load_state_json(state.at("rerun_state_machine"), layout_name());
      if (!cfg.no_load_rng && state.contains("rng"))
        seed = state.at("rng").at("seed").get<uint64_t>();
    }
    model->refresh_compute_weights();
    log_info("  loaded checkpoint from ", cfg.load, " at iteration ",
             state.at("iteration").get<int64_t>(),
             release        ? " (release: weights only)"
             : cfg.finetune ? " (finetune: weights only)"
                            : "");
  }

  // The parallel layout, as the rerun state machine's checkpointed state names it.
  std::string layout_name() const {
    return "tp" + std::to_string(ps.tp_size) + " cp" + std::to_string(ps.cp_size) + " pp" +
           std::to_string(ps.pp_size) + " dp" + std::to_string(ps.dp_size);
  }

  // Fields the checkpoint does not record (e.g. an importer's) cannot be checked. The padded
  // vocabulary size depends on the TP size; its padding rows were re-padded on load.
  void check_model_shape(const nlohmann::json& state) const {
    if (!state.contains("model")) return;
    const std::string differences =
        model_shape_differences(state["model"], model->shape_json(), {"padded_vocab_size"});
    MT_REQUIRE(differences.empty(), "the checkpoint in --load ", cfg.load,
               " has another model shape than the flags:", differences);
  }

  // This rank's place in Megatron's sample order of global batches of `global_batch`
  // samples, resuming after `consumed_samples`.
  LoaderPlacement placement(int64_t consumed_samples, int64_t global_batch) const {
    return {cfg.micro_batch, global_batch, ps.dp_rank, ps.dp_size, consumed_samples};
  }

  // The samples of one evaluation iteration.
  int64_t eval_global_batch() const {
    return cfg.eval_global_batch > 0 ? cfg.eval_global_batch : cfg.global_batch;
  }

  // Mean of per-rank sums of `micro_batches_per_rank` micro-batches' losses over all DP
  // ranks, identical on every rank: per micro-batch, or with the per-token loss per token
  // (context-parallel ranks already share their sequences' losses and token counts). The sums
  // come from the last pipeline stage, which computes the loss; it broadcasts the mean to the
  // other stages.
  LossTerms average_over_dp(const LossTerms& sum, int64_t micro_batches_per_rank) const {
    // Logged host scalars: one all-reduce of a host f64 [11 + MTP depths]. The loss terms are
    // the last stage's (zeros on the others); the indexer and MoE ones every stage's share, so a
    // sum over the pipeline stages gives each.
    std::vector<double> sums = {sum.lm,
                                sum.sop,
                                sum.tokens,
                                sum.total,
                                sum.logits_distillation,
                                sum.intermediate_distillation,
                                sum.indexer,
                                sum.load_balancing,
                                sum.seq_load_balancing,
                                sum.z_loss,
                                sum.global_load_balancing};
    const size_t depths = size_t(model->mtp_depths());
    for (size_t k = 0; k < depths; ++k) sums.push_back(k < sum.mtp.size() ? sum.mtp[k] : 0.0);
    Tensor t = Tensor::from_blob(sums.data(), {int64_t(sums.size())}, DType::F64);
    ps.dp->all_reduce(t);
    if (ps.pp_size > 1) ps.pp->all_reduce(t);
    const double n = cfg.per_token_loss ? (sums[2] > 0 ? sums[2] : 1.0)
                                        : double(micro_batches_per_rank * ps.dp_size);
    LossTerms mean{.lm = sums[0] / n, .sop = sums[1] / n};
    if (cfg.per_token_loss) {
      mean.sop = 0;
      mean.tokens = sums[2];
    }
    mean.total = sums[3] / n;
    mean.logits_distillation = sums[4] / n;
    mean.intermediate_distillation = sums[5] / n;
    mean.indexer = sums[6] / double(micro_batches_per_rank * ps.dp_size);
    // Megatron's MoE metrics: per micro-batch, averaged over data-parallel ranks and MoE layers.
    const int moe_layers = model->moe_loss_log().layers;
    if (moe_layers > 0) {
      const double per = double(micro_batches_per_rank * ps.dp_size) * moe_layers;
      mean.load_balancing = sums[7] / per;
      mean.seq_load_balancing = sums[8] / per;
      mean.z_loss = sums[9] / per;
      // Every data-parallel rank holds the sum of the ranks' shares (model/moe_router.h):
      // their mean over dp is that sum, as Megatron's (reduced without the dp average).
      mean.global_load_balancing = sums[10] / per;
    }
    // Megatron's MTP metrics: each depth's per-micro-batch mean, averaged over micro-batches and
    // data-parallel ranks (with the per-token loss too).
    for (size_t k = 0; k < depths; ++k)
      mean.mtp.push_back(sums[11 + k] / double(micro_batches_per_rank * ps.dp_size));
    return mean;
  }

  // The global batch and micro-batches per rank of the step after consumed_train_samples.
  void set_step_batch() {
    num_micro_batches =
        batch_sizes.num_micro_batches_at(consumed_train_samples, cfg.micro_batch, ps.dp_size);
    global_batch = num_micro_batches * cfg.micro_batch * ps.dp_size;
  }

  // How an iteration ended.
  enum class StepOutcome {
    kStepped,
    kSkipped,  // --fp16: the gradients overflowed
    kStopped,  // the rerun state machine ends the job (`stop` says how)
  };

  // One iteration: its gradients (computed again when the rerun state machine asks for it),
  // then the optimizer step.
  StepOutcome train_step(LossTerms& loss, std::optional<double>& grad_norm, RerunExit& stop) {
    const RerunBatch batch{iteration, consumed_train_samples, global_batch};
    bool overflow = false;
    while (rerun->should_run_forward_backward(batch)) {
      overflow = !compute_gradients(loss, grad_norm);
      validate_results(loss, grad_norm);
    }
    stop = rerun->should_checkpoint_and_exit();
    if (stop.exit) return StepOutcome::kStopped;
    model->apply_step_statistics();
    if (overflow) return StepOutcome::kSkipped;
    optimizer_step(loss, *grad_norm);
    return StepOutcome::kStepped;
  }

  // The iteration's gradients: forward and backward over the global batch, reduced over DP
  // (with the distributed optimizer: this rank's shard), --fp16: checked for overflow and
  // unscaled, clipped. False when they overflowed (the step is skipped). Changes nothing but
  // the gradients, `loss`, `grad_norm` and the loss scaler, so that it can run again.
  bool compute_gradients(LossTerms& loss, std::optional<double>& grad_norm) {
    store.zero_grads();
    model->reset_step_statistics();
    step_num_zeros.reset();
    grad_norm.reset();
    const double loss_scale = scaler.scale();
    // Each micro-batch's loss is a mean; Megatron averages them over the global batch. With the
    // per-token loss they are sums, summed over micro-batches and DP ranks, and the gradients
    // are divided by the global token count once it is known (below).
    const float grad_scale =
        float(cfg.per_token_loss ? loss_scale : loss_scale / double(num_micro_batches));
    // fp16 checks for overflow while the gradients are still scaled (as fp16 gradients would
    // be), then unscales; otherwise the loss scale is 1 and the average is one pass.
    // The sum over dp × cp divided by the data-parallel size alone: the context-parallel
    // ranks' gradients are parts of one replica's (GptModel's loss), not replicas.
    const double dp_average = cfg.per_token_loss ? 1.0 : 1.0 / double(ps.dp_size);
    grad_buckets->start(num_micro_batches, cfg.fp16 ? dp_average : dp_average / loss_scale);
    // With --overlap-grad-reduce the buckets' reductions start inside the backward.
    const LossTerms local = timers.time("forward-backward", 1, [&] {
      return model->train_micro_batches(num_micro_batches, grad_scale, seed, iteration);
    });
    // The tied embedding's two copies are summed first (their buckets wait for it), then the
    // buckets not reduced yet go, and all are waited for. Sequence parallelism's replicated
    // parameters are summed over TP per bucket, before its DP reduction.
    timers.time("embedding-grads-all-reduce", 1, [&] { reduce_tied_gradients(store, ps); });
    timers.time("all-grads-sync", 1, [&] { grad_buckets->finish(); });
    loss = average_over_dp(local, num_micro_batches);
    if (cfg.per_token_loss && loss.tokens > 0)
      kernels::scale(store.flat_grads(), float(1.0 / loss.tokens));
    NamedTimers::Scope optimizer_time(timers, "optimizer", 1);
    // The distributed optimizer's DP ranks each hold the reduced gradients of their shards.
    std::vector<GradShard> range;
    for (AdamW* o : optimizers())
      if (shards)
        range.push_back(
            {store.flat_grads().slice(0, o->range().begin, o->range().end), o->range()});
    if (cfg.fp16 && overflowed(range, loss_scale)) return false;
    if (log_layer_grad_norms_now() && !rerun->rerunning_in_place())
      log.layer_grad_norms(iteration, layer_grad_norms(store, ps, range));
    grad_norm = timers.time("optimizer-clip-main-grad", 1,
                            [&] { return clip_grad_norm(store, ps, cfg.clip_grad, range); });
    if (cfg.log_num_zeros_in_grad)
      step_num_zeros = timers.time("optimizer-count-zeros", 1,
                                   [&] { return count_zero_grads(store, ps, range); });
    return true;
  }

  // --fp16, before the optimizer step: true (the step is skipped) when the reduced, still
  // scaled gradients overflow f16 on any rank — the whole buffer, or each rank's shards (`shards`
  // of compute_gradients), whose OR over the world is the same decision — else unscales them.
  // The scaler learns the outcome either way.
  bool overflowed(const std::vector<GradShard>& sharded, double loss_scale) {
    NamedTimers::Scope unscale_time(timers, "optimizer-unscale-and-check-inf", 1);
    std::vector<OverflowCheckPart> parts;
    if (sharded.empty()) parts.push_back({store.flat_grads(), &optimizer->f16_scratch()});
    for (size_t i = 0; i < sharded.size(); ++i)
      parts.push_back({sharded[i].grads, &optimizers()[i]->f16_scratch()});
    const bool overflow = found_overflow_anywhere(parts, *ps.world, true);
    scaler.update(overflow);
    if (!overflow)
      for (OverflowCheckPart& part : parts) kernels::scale(part.grads, float(1.0 / loss_scale));
    return overflow;
  }

  // The optimizers of this rank's parameters: the one, or (expert shards) the dense part's and
  // the expert part's.
  std::vector<AdamW*> optimizers() const {
    if (expert_optimizer) return {optimizer.get(), expert_optimizer.get()};
    return {optimizer.get()};
  }

  // The optimizer step on the gradients of compute_gradients (the divergence guard first).
  // With the distributed optimizer each DP rank updates its shard, and the shards are
  // all-gathered.
  void optimizer_step(const LossTerms& loss, double grad_norm) {
    NamedTimers::Scope optimizer_time(timers, "optimizer", 1);
    check_loss_and_grad(loss, grad_norm);
    apply_optimizer_schedule();
    if (shards) {
      timers.time("optimizer-inner-step", 1, [&] {
        for (AdamW* o : optimizers())
          o->step(schedule.lr(), store.flat_grads().slice(0, o->range().begin, o->range().end));
      });
      timers.time("params-all-gather", 1, [&] { all_gather_shards(store, ps, *shards); });
      // --fp16 / --bf16: the gathered 16-bit values are the casts of every shard's fp32
      // master, so an inf/NaN master shows in them; the guard checks them.
      finish_step(Tensor());
      return;
    }
    timers.time("optimizer-inner-step", 1, [&] { optimizer->step(schedule.lr()); });
    Tensor master;  // --fp16 / --bf16: the fp32 master weights beside the store's 16-bit ones
    if (optimizer->separate_master() && guard.enabled())
      master = optimizer->flat_buffers().at(kMasterWeightsBuffer);
    finish_step(master);
  }

  // Megatron's validations of an iteration's results (pretrain_gpt.py's loss checks, the
  // DDP's gradient checks), on the values every rank shares: the loss terms and the gradient
  // norm (none when fp16 overflowed).
  void validate_results(const LossTerms& loss, const std::optional<double>& grad_norm) {
    RerunStateMachine& m = *rerun;
    const auto is_nan = [](double v) { return std::isnan(v); };
    const auto is_inf = [](double v) { return std::isinf(v); };
    std::vector<std::pair<std::string, double>> losses = {{"lm loss", loss.lm}};
    if (model->has_sop_loss()) losses.emplace_back("sop loss", loss.sop);
    if (model->has_distillation_loss()) losses.emplace_back("total loss", loss.total);
    if (model->has_indexer_loss()) losses.emplace_back("indexer loss", loss.indexer);
    // Forward computations are deterministic: no tolerance. The backward may not be (Megatron
    // allows 0.1% for non-deterministic attention backward kernels).
    if (cfg.check_for_nan_in_loss_and_grad)
      for (const auto& [name, value] : losses) {
        m.validate_result(value, is_nan, "found NaN in the " + name, 0.0, true);
        m.validate_result(value, is_inf, "found Inf in the " + name, 0.0, true);
      }
    if (cfg.check_for_spiky_loss)
      m.validate_result(
          loss.lm, [&](double v) { return m.is_unexpectedly_large(v, kSpikeFactor, "loss"); },
          "Spiky loss", 0.0, false);
    if (!grad_norm) return;
    if (cfg.check_for_nan_in_loss_and_grad) {
      m.validate_result(*grad_norm, is_nan, "found NaN in the grad norm", kGradTolerance, true);
      m.validate_result(*grad_norm, is_inf, "found Inf in the grad norm", kGradTolerance, true);
    }
    if (cfg.check_for_large_grads)
      m.validate_result(
          *grad_norm, [&](double v) { return m.is_unexpectedly_large(v, kSpikeFactor, "grads"); },
          "found unexpected large grads", kGradTolerance, false);
  }
  // Megatron's: a loss or gradient norm 10x the largest of the first 100 is unexpected; 0.1%.
  static constexpr double kSpikeFactor = 10.0, kGradTolerance = 0.001;

  // Knowledge distillation's logged terms of `loss`, when the model has them.
  std::optional<DistillationLog> distillation_log(const LossTerms& loss) const {
    if (!model->has_distillation_loss()) return std::nullopt;
    return DistillationLog{loss.total, loss.logits_distillation, loss.intermediate_distillation};
  }

  void check_loss_and_grad(const LossTerms& loss, double grad_norm) {
    std::vector<std::pair<std::string, double>> checked = {{"lm loss", loss.lm}};
    if (model->has_sop_loss()) checked.emplace_back("sop loss", loss.sop);
    if (model->has_distillation_loss()) checked.emplace_back("total loss", loss.total);
    checked.emplace_back("grad norm", grad_norm);
    guard.check_loss_and_grad(iteration, checked, ps, where_saved());
  }

  // --log-layer-grad-norms: at iteration 1 and every log interval.
  bool log_layer_grad_norms_now() const {
    return cfg.log_layer_grad_norms && (iteration == 1 || iteration % cfg.log_interval == 0);
  }

  // Megatron's weight-decay increments (lr_schedule.h), before the optimizer step.
  // The schedule's values for this step beside the learning rate: the weight decay (when it
  // varies), the embedding and output layer's --decoupled-lr and muP's hidden matrices'.
  void apply_optimizer_schedule() {
    for (AdamW* o : optimizers()) {
      if (schedule.varies_weight_decay()) o->set_weight_decay(schedule.wd());
      o->set_decoupled_lr(schedule.decoupled_lr());
      o->set_mup_hidden_lr(schedule.mup_hidden_lr());
    }
  }

  void finish_step(const Tensor& master) {
    guard.check_weights(iteration, store, master, ps, where_saved());
    schedule.step(global_batch);  // Megatron's increment: this step's global batch
    timers.time("optimizer-copy-main-to-model-params", 1,
                [&] { model->refresh_compute_weights(); });
  }

  // --log-params-norm: Megatron's calc_params_l2_norm, over the fp32 master weights when the
  // store holds 16-bit ones; every rank takes part (an all-reduce over the model-parallel
  // group, TP × PP).
  std::optional<double> params_norm() const {
    if (!cfg.log_params_norm) return std::nullopt;
    if (optimizer->separate_master()) {
      const Tensor master = optimizer->flat_buffers().at(kMasterWeightsBuffer);
      if (!shards) return global_norm(master, store, ps);
      // Each rank holds its shards of the master: the same counted sum, over the world.
      std::vector<GradShard> master_shards;
      for (AdamW* o : optimizers())
        master_shards.push_back({o->flat_buffers().at(kMasterWeightsBuffer), o->range()});
      return global_grad_norm(store, ps, master_shards);
    }
    return global_norm(store.flat_values(), store, ps);
  }

  LossTerms evaluate() {
    // As Megatron's validation iterator: each evaluation scores the next eval_iters global
    // batches of the validation set (sized for every evaluation of the run), continuing
    // across evaluations and across a resume (consumed_valid_samples is checkpointed).
    model->start_validation_data(placement(consumed_valid_samples, eval_global_batch()));
    const LossTerms loss = evaluate_loaded();
    consumed_valid_samples += cfg.eval_iters * eval_global_batch();
    return loss;
  }

  // eval_iters global batches of the evaluation loader started last (in the model's schedule),
  // averaged over DP.
  LossTerms evaluate_loaded() {
    const int64_t micro_batches = cfg.eval_iters * eval_micro_batches;
    const LossTerms local = model->valid_micro_batches(micro_batches, iteration);
    return average_over_dp(local, micro_batches);
  }

  // Megatron's final "on test set" evaluation: the first eval_iters global batches of the
  // test split.
  void log_test(TrainingResult& result) {
    model->start_test_data(placement(/*consumed_samples=*/0, eval_global_batch()));
    const LossTerms loss = evaluate_loaded();
    result.last_test_loss = loss.lm;
    log.test("iteration " + std::to_string(iteration) + " on test set", iteration,
             consumed_train_samples, consumed_train_samples * model->seq_length(), loss.lm,
             model->has_sop_loss() ? std::optional<double>(loss.sop) : std::nullopt);
  }

  // An evaluation every --eval-interval iterations, or (final) Megatron's evaluation "on
  // validation set" after the last iteration.
  void log_validation(TrainingResult& result, bool final) {
    const LossTerms loss = evaluate();
    result.last_validation_loss = loss.lm;
    const std::optional<double> sop =
        model->has_sop_loss() ? std::optional<double>(loss.sop) : std::nullopt;
    const int64_t tokens = consumed_train_samples * model->seq_length();
    const std::string prefix = "iteration " + std::to_string(iteration);
    if (final) {
      log.final_validation(prefix + " on validation set", iteration, consumed_train_samples, tokens,
                           loss.lm, sop);
    } else {
      log.validation(prefix, iteration, consumed_train_samples, tokens, loss.lm, sop);
    }
  }

  bool do_valid() const { return model->has_validation_data() && cfg.eval_iters > 0; }
  bool do_test() const { return model->has_test_data() && cfg.eval_iters > 0; }

  // `reset`: start a new interval. Megatron also logs the first iteration of every run, without
  // resetting, so that the next line still covers its whole interval.
  // `first_of_run`: the first iteration of this run (Megatron writes no "iteration-time" then).
  // `resumed`: the run started from a checkpoint (its first line, unless it ends an interval,
  // stays out of the metrics file: IterationStats::console_only).
  // --log-straggler: the report window starts now.
  void start_straggler_window() {
    straggler_window_wall = steady_seconds();
    straggler_window_communication = communication_time->seconds();
  }

  // Every rank's compute and communication time per iteration since the window began, printed
  // by rank 0 (a collective over the world: every rank ends its log interval together).
  void report_stragglers(int64_t iterations) {
    const double now = steady_seconds(), communication = communication_time->seconds();
    const double communication_ms =
        (communication - straggler_window_communication) * 1000.0 / double(iterations);
    const double wall_ms = (now - straggler_window_wall) * 1000.0 / double(iterations);
    // times [2, world]: row 0 compute, row 1 communication; each rank fills its column.
    Tensor times = Tensor::zeros({2, ps.world_size}, DType::F64);
    double* t = times.data<double>();
    t[ps.rank] = std::max(0.0, wall_ms - communication_ms);
    t[ps.world_size + ps.rank] = communication_ms;
    ps.world->all_reduce(times);
    if (ps.rank == 0)
      log_line(straggler_report(iteration, iterations, {t, size_t(ps.world_size)},
                                {t + ps.world_size, size_t(ps.world_size)},
                                cfg.straggler_minmax_count));
    start_straggler_window();
  }

  void log_interval_stats(bool reset, bool first_of_run, bool resumed) {
    interval_timer.stop();
    IterationStats s;
    s.iteration = iteration;
    s.train_iters = cfg.train_iters;
    s.consumed_samples = consumed_train_samples;
    s.consumed_tokens = consumed_train_samples * model->seq_length();
    const double seconds = interval_timer.seconds() / double(interval_iterations);
    s.elapsed_ms = seconds * 1000.0;
    s.learning_rate = schedule.lr();
    s.global_batch = global_batch;
    if (interval_loss_count > 0) {
      s.lm_loss = interval_loss_sum.lm / double(interval_loss_count);
      if (model->has_sop_loss()) s.sop_loss = interval_loss_sum.sop / double(interval_loss_count);
      if (model->has_indexer_loss())
        s.indexer_loss = interval_loss_sum.indexer / double(interval_loss_count);
      if (const auto d = distillation_log(interval_loss_sum))
        s.distillation = DistillationLog{d->total / double(interval_loss_count),
                                         d->logits / double(interval_loss_count),
                                         d->intermediate / double(interval_loss_count)};
      for (const auto& [name, field] : model->moe_loss_log().losses)
        s.named_losses.emplace_back(name, interval_loss_sum.*field / double(interval_loss_count));
      for (size_t k = 0; k < interval_loss_sum.mtp.size(); ++k)
        s.named_losses.emplace_back(mtp_loss_name(k),
                                    interval_loss_sum.mtp[k] / double(interval_loss_count));
    }
    s.loss_scale = scaler.scale();
    s.grad_norm = last_grad_norm;
    s.num_zeros = last_num_zeros;
    s.params_norm = params_norm();
    s.skipped_iterations = interval_skipped;
    s.nan_iterations = interval_nans;
    s.tokens_per_second = double(global_batch * model->seq_length()) / seconds;
    s.tflops_per_process =
        model->flops_per_iteration(global_batch) / seconds / double(ps.world_size) / 1e12;
    s.log_throughput = cfg.log_throughput;
    s.timers_to_tensorboard = cfg.log_timers_to_tensorboard;
    s.first_of_run = first_of_run;
    s.console_only = first_of_run && resumed && !reset;
    log.iteration(s);
    // Megatron's memory report, once per run at the end of its first log interval (the
    // optimizer state exists by then, and from the second iteration on each activation arena
    // is one block of its high-water size), by every data-parallel rank 0: each model-parallel
    // rank's own.
    if (reset && !memory_reported) {
      memory_reported = true;
      if (ps.rank == 0) std::printf("%s", cfg.theoretical_memory_report.c_str());
      if (ps.dp_cp_rank == 0) {
        std::printf(
            "%s\n",
            format_memory_report(ps.rank, iteration, device_memory_stats(store.device())).c_str());
        std::fflush(stdout);
      }
    }
    // Megatron's timer block after the iteration line (a collective: every rank reports).
    const NamedTimers::Report times = timers.report(*ps.world, interval_iterations, reset);
    if (!times.text.empty()) log_line(times.text);
    if (cfg.log_timers_to_tensorboard) log.timers(iteration, times.max_ms);
    if (reset && communication_time) report_stragglers(interval_iterations);
    if (reset) {
      interval_timer.reset();
      interval_iterations = interval_loss_count = interval_skipped = interval_nans = 0;
      interval_loss_sum = {};
    }
    interval_timer.start();
  }

  // --fp16 with a loss scale that overflows on every step trains nothing: say so after 10,
  // 100, 1000, ... consecutive skipped steps — when the scaler cannot lower the scale itself
  // (a constant --loss-scale, or the dynamic scale at --min-loss-scale).
  void warn_on_consecutive_skips(bool stepped) {
    if (stepped) {
      consecutive_skips = 0;
      next_skip_warning = kFirstSkipWarning;
      return;
    }
    if (++consecutive_skips < next_skip_warning) return;
    next_skip_warning *= 10;
    const bool stuck = !cfg.scaler.dynamic || scaler.scale() <= cfg.scaler.min_scale;
    if (!stuck) return;
    log_warning("the last " + std::to_string(consecutive_skips) +
                " iterations were all skipped: the gradients overflow at loss scale " +
                format_number(scaler.scale(), "%g") +
                (cfg.scaler.dynamic ? " (--min-loss-scale)" : " (--loss-scale)") +
                " and the weights do not change. Lower the loss scale (or --lr).");
  }

  // Megatron's skipped iteration: its global batch is consumed without training (no
  // optimizer or schedule step, no log line), and a re-run pending for it is abandoned.
  void skip_iteration() {
    ++iteration;
    rerun->abandon_pending_rerun(iteration);
    log_info("skipping iteration ", iteration, " (samples ", consumed_train_samples, "..",
             consumed_train_samples + global_batch - 1, ")");
    consumed_train_samples += global_batch;
    model->start_training_data(placement(consumed_train_samples, cfg.global_batch));
  }

  // The rerun state machine ends the job. The iteration did not happen: the state is that
  // before it, and is saved when the machine asks (with the machine's pending re-run in it).
  void stop_for_rerun(const RerunExit& stop, TrainingResult& result) {
    --iteration;
    if (stop.checkpoint && cfg.save.empty())
      log_warning("no --save: the checkpoint to re-run the iteration from is not saved");
    if (stop.checkpoint && !cfg.save.empty()) {
      save();
      last_saved = iteration;
    }
    result.iteration = iteration;
    result.exit_code = stop.code;
  }

  // Every save this run started is committed before it returns.
  TrainingResult run() {
    TrainingResult result = run_training();
    finish_async_save(/*wait=*/true);
    return result;
  }

  TrainingResult run_training() {
    const std::optional<int64_t> to_load = check_checkpoint_directories();
    if (to_load) load(*to_load == kReleaseIteration);
    log.start_at(iteration);
    // Every batch size still ahead must split into micro-batches: Megatron's check when it
    // reaches each one, made before the first step.
    batch_sizes.check_divisible_from(consumed_train_samples, cfg.micro_batch, ps.dp_size);
    set_step_batch();
    model->start_training_data(placement(consumed_train_samples, cfg.global_batch));
    const int64_t start_iteration = iteration;
    std::optional<ExitSignalHandler> exit_signal;
    if (cfg.exit_signal_handler) exit_signal.emplace();

    TrainingResult result;
    if (cfg.skip_train) {
      // Megatron's --skip-train: no iteration, no save; only the evaluation.
      log_info("skipping training (--skip-train) ...");
      if (do_valid()) log_validation(result, /*final=*/true);
      if (do_test()) log_test(result);
      if (cfg.iterations_per_epoch > 0) {
        log_info("evaluation only mode, setting epoch to -1");
        model->end_of_epoch(-1);
      }
      result.iteration = iteration;
      return result;
    }
    log_info("training ...");
    if (communication_time) start_straggler_window();
    interval_timer.start();
    Timer training_time;
    training_time.start();
    while (iteration < cfg.train_iters) {
      if (watchdog) watchdog->set_iteration(iteration + 1);
      finish_async_save(/*wait=*/false);
      if (cfg.iterations_per_epoch > 0 && iteration % cfg.iterations_per_epoch == 0)
        log_info("working on epoch ", iteration / cfg.iterations_per_epoch + 1, " ...");
      // As Megatron: when the schedule changes the number of micro-batches, a checkpoint of
      // the run so far is saved first.
      const int64_t previous_micro_batches = num_micro_batches;
      set_step_batch();
      if (num_micro_batches != previous_micro_batches && iteration != 0) save_unless_saved();
      if (iterations_to_skip.contains(iteration + 1)) {
        skip_iteration();
        continue;
      }
      ++iteration;
      LossTerms loss;
      std::optional<double> grad_norm;
      RerunExit stop;
      const StepOutcome outcome = train_step(loss, grad_norm, stop);
      if (outcome == StepOutcome::kStopped) {
        stop_for_rerun(stop, result);
        return result;
      }
      const bool stepped = outcome == StepOutcome::kStepped;
      consumed_train_samples += global_batch;
      ++interval_iterations;
      if (!stepped) ++interval_skipped;
      warn_on_consecutive_skips(stepped);
      if (!loss.finite()) {
        ++interval_nans;
      } else if (stepped) {
        interval_loss_sum += loss;
        ++interval_loss_count;
      }
      last_grad_norm = grad_norm;
      last_num_zeros = step_num_zeros;
      if (cfg.check_weight_hash_interval > 0 && iteration % cfg.check_weight_hash_interval == 0)
        run_on_all_ranks(*ps.world, "",
                         [&] { check_replicas_agree(store, *ps.dp_cp, *ps.edp, iteration); });
      if (cfg.test_mode)
        run_on_all_ranks(*ps.world, "", [&] {
          check_replicas_agree(store, *ps.dp_cp, *ps.edp, iteration, "--test-mode");
          check_tp_replicated_agree(store, *ps.tp, iteration);
        });
      if (cfg.on_iteration_end) cfg.on_iteration_end(iteration);
      if (iteration % cfg.tensorboard_log_interval == 0) {
        IterationStats s;  // this iteration's values, as Megatron writes them
        s.iteration = iteration;
        s.consumed_samples = consumed_train_samples;
        s.learning_rate = schedule.lr();
        s.global_batch = global_batch;
        if (stepped && loss.finite()) {
          s.lm_loss = loss.lm;
          if (model->has_sop_loss()) s.sop_loss = loss.sop;
          if (model->has_indexer_loss()) s.indexer_loss = loss.indexer;
          s.distillation = distillation_log(loss);
          for (const auto& [name, field] : model->moe_loss_log().losses)
            s.named_losses.emplace_back(name, loss.*field);
          for (size_t k = 0; k < loss.mtp.size(); ++k)
            s.named_losses.emplace_back(mtp_loss_name(k), loss.mtp[k]);
        }
        s.loss_scale = scaler.scale();
        s.grad_norm = grad_norm;
        s.num_zeros = step_num_zeros;
        s.params_norm = params_norm();
        if (cfg.log_memory_to_tensorboard) s.memory = device_memory_stats(store.device());
        log.tensorboard_iteration(s);
      }

      const bool interval_end = iteration % cfg.log_interval == 0;
      if (interval_end || iteration == start_iteration + 1) {
        log_interval_stats(/*reset=*/interval_end, iteration == start_iteration + 1,
                           /*resumed=*/start_iteration > 0);
        log.progress({iteration, start_iteration, cfg.train_iters, training_time.seconds(),
                      cfg.exit_duration_seconds});
      }
      if (do_valid() && iteration % cfg.eval_interval == 0) log_validation(result, /*final=*/false);
      if (cfg.sample_interval > 0 && iteration % cfg.sample_interval == 0)
        log.samples(iteration, cfg.sample(*model, iteration));
      // The epoch's end first: its save then records the epoch's score (end_epoch).
      if (cfg.iterations_per_epoch > 0 && iteration % cfg.iterations_per_epoch == 0)
        end_epoch(iteration / cfg.iterations_per_epoch - 1);
      if (cfg.save_interval > 0 && iteration % cfg.save_interval == 0) save_unless_saved();
      if (cfg.exit_interval > 0 && iteration % cfg.exit_interval == 0) {
        save_unless_saved();
        log_info("exiting program at iteration ", iteration);
        result.iteration = iteration;
        return result;
      }
      if (exit_signal) {
        // The signal may have reached only some ranks, or at different iterations: all agree.
        if (const int sig = exit_signal->agreed(*ps.world, iteration)) {
          save_unless_saved();
          log_info("exiting program after receiving ", signal_name(sig), " at iteration ",
                   iteration, cfg.save.empty() ? " (no --save: nothing saved)" : "");
          result.iteration = iteration;
          result.exit_signal = sig;
          return result;
        }
      }
      if (cfg.exit_duration_seconds > 0) {
        // Clocks differ between ranks: rank decisions are merged (MAX) so all stop together.
        const double over = training_time.seconds() > cfg.exit_duration_seconds ? 1.0 : 0.0;
        if (ps.world->all_reduce_scalar(over, ReduceOp::MAX) > 0.0) {
          log_info("exiting training after ", cfg.exit_duration_seconds / 60.0,
                   " minutes at iteration ", iteration);
          break;
        }
      }
    }
    if (iteration > 0) save_unless_saved();
    if (do_valid() && iteration > 0) log_validation(result, /*final=*/true);
    if (do_test() && iteration > 0) log_test(result);
    result.iteration = iteration;
    return result;
  }
};

Trainer::Trainer(TrainerConfig config, std::shared_ptr<Communicator> world,
                 ModelStepFactory make_model)
    : impl_(std::make_unique<Impl>(std::move(config), std::move(world), make_model)) {}

Trainer::~Trainer() = default;

TrainingResult Trainer::run() {
  return impl_->run();
}

}  // namespace megatron
