// A tiny GPT pretraining run in this process (the Trainer over mock data, one rank), on a
// chosen device, and the per-iteration metrics it logged: what the CPU-vs-GPU and resume
// tests compare. The run is the layout-invariance one (tests/e2e/layout_invariance.sh) at
// TP 1: dropout on, fp32, AdamW with weight decay, cosine schedule, clipping.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "checkpoint/layout.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "data/mock_gpt_dataset.h"
#include "distributed/solo_communicator.h"
#include "train/gpt_step.h"
#include "train/trainer.h"

namespace megatron::testing {

struct TinyGptRun {
  Device device = Device::CPU;
  std::string metrics_file;  // required: the metrics are read back from it
  int64_t train_iters = 10;
  int64_t exit_interval = 0;     // 0: never
  std::string save, load;        // checkpoint directories ("": none)
  bool flash_attention = false;  // the fused attention core (--use-flash-attn)
};

// A run of `train_iters` iterations on `device`; set exit_interval, save, load as needed.
inline TinyGptRun tiny_run(Device device, const std::string& metrics_file,
                           int64_t train_iters = 10) {
  TinyGptRun r;
  r.device = device;
  r.metrics_file = metrics_file;
  r.train_iters = train_iters;
  return r;
}

struct TrainMetrics {
  double lm_loss = 0;
  double grad_norm = 0;
};

// iteration -> metrics of every "train" line in a --metrics-file (the last line wins).
inline std::map<int64_t, TrainMetrics> read_train_metrics(const std::string& path) {
  std::map<int64_t, TrainMetrics> out;
  std::ifstream in(path);
  MT_CHECK(in.good(), "cannot read metrics file ", path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.at("type") != "train") continue;
    out[j.at("iteration").get<int64_t>()] = {j.at("lm_loss").get<double>(),
                                             j.at("grad_norm").get<double>()};
  }
  return out;
}

inline std::map<int64_t, TrainMetrics> run_tiny_gpt(const TinyGptRun& run) {
  constexpr int64_t kSeq = 32, kVocab = 128, kMicro = 4, kGlobal = 8, kTotalIters = 12;
  GptStepConfig step;
  GptConfig& m = step.model;
  m.num_layers = 2;
  m.hidden_size = 64;
  m.num_attention_heads = 4;
  m.vocab_size = kVocab;
  m.padded_vocab_size = kVocab;
  m.max_position_embeddings = int(kSeq);
  m.seq_length = int(kSeq);
  m.flash_attention = run.flash_attention;
  step.split = {.num_layers = m.num_layers};  // one pipeline stage

  TrainerConfig c;
  c.device = run.device;
  c.micro_batch = kMicro;
  c.global_batch = kGlobal;
  c.train_iters = run.train_iters;
  c.exit_interval = run.exit_interval;
  c.seed = 42;
  // The schedule spans kTotalIters whatever train_iters is, so that a run that stops early
  // and its resumption follow the uninterrupted run's learning rates.
  c.lr = {.max_lr = 1e-3,
          .min_lr = 1e-4,
          .warmup_steps = 2 * kGlobal,
          .decay_steps = kTotalIters * kGlobal,
          .style = LrDecayStyle::Cosine};
  c.adam.weight_decay = 0.1;
  c.clip_grad = 1.0;
  c.log_interval = 1;
  c.eval_interval = 1000;
  c.eval_iters = 0;
  c.metrics_file = run.metrics_file;
  c.save = run.save;
  c.load = run.load;

  auto train = std::make_shared<MockGptDataset>(kTotalIters * kGlobal, kSeq, kVocab, 42);
  Trainer trainer(std::move(c), std::make_shared<SoloCommunicator>(),
                  gpt_step_factory(step, train, nullptr));
  trainer.run();
  return read_train_metrics(run.metrics_file);
}

// Number of tensors of `file` (model.safetensors or optimizer.safetensors of rank 0 at
// `iteration`) that differ by a single bit between two checkpoint directories, or are missing
// from either; -1 when the two files do not hold the same tensor names.
inline int64_t checkpoint_tensors_differing(const std::string& dir_a, const std::string& dir_b,
                                            int64_t iteration, const std::string& file) {
  std::string rel = "/";  // appended piecewise: GCC 12 warns (-Wrestrict) on "/" + string
  rel.append(iteration_dir_name(iteration)).append("/").append(rank_dir_name(0, 0, 1));
  rel.append("/").append(file);
  SafetensorsReader a(dir_a + rel), b(dir_b + rel);
  if (a.names() != b.names()) return -1;
  int64_t differing = 0;
  for (const std::string& name : a.names()) {
    const Tensor x = a.get(name), y = b.get(name);
    differing += x.dtype() != y.dtype() || x.shape() != y.shape() ||
                 std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) != 0;
  }
  return differing;
}

}  // namespace megatron::testing
