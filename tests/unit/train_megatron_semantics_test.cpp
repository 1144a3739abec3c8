// The Trainer's Megatron semantics, on a tiny GPT over mock data:
// - validation advances through the validation set as Megatron's iterator does: each
//   evaluation scores the next --eval-iters global batches. Checked with a frozen model
//   (learning rate 0): three evaluations of one batch each must average to one evaluation of
//   three batches, and must not all be equal (as they were when every evaluation re-scored the
//   first batch);
// - TensorBoard gets Megatron's tags every --tensorboard-log-interval iterations, each also
//   "vs samples": the event file is read back with a protobuf decoder written here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "../common/temp_dir.h"
#include "core/safetensors.h"
#include "data/mock_gpt_dataset.h"
#include "distributed/solo_communicator.h"
#include "train/gpt_step.h"
#include "train/trainer.h"

namespace megatron {
namespace {

constexpr int64_t kSeq = 16, kVocab = 64, kMicro = 2, kGlobal = 4;

struct TinyRun {
  std::string metrics{};
  int64_t train_iters = 1;
  int64_t eval_interval = 1000;
  int64_t eval_iters = 1;
  double lr = 0.0;
  std::string tensorboard_dir{};
  int64_t tensorboard_log_interval = 1;
  bool validation_ppl = false;
  bool log_params_norm = false;
  std::string save{};
  bool loss_scale_tag = true;
  bool log_num_zeros = false;
  bool log_throughput = false;
  int timing_log_level = 0;
  bool timers_to_tensorboard = false;
  int64_t vocab = kVocab;  // the real vocabulary; the embedding has kVocab rows
  bool linear_biases = true;
};

// Trains a tiny GPT; returns the validation losses it logged.
std::vector<double> run(const TinyRun& r) {
  GptStepConfig step;
  GptConfig& m = step.model;
  m.num_layers = 1;
  m.hidden_size = 32;
  m.num_attention_heads = 2;
  m.vocab_size = r.vocab;
  m.padded_vocab_size = kVocab;
  m.max_position_embeddings = int(kSeq);
  m.seq_length = int(kSeq);
  m.arch.add_bias_linear = r.linear_biases;
  TrainerConfig c;
  c.micro_batch = kMicro;
  c.global_batch = kGlobal;
  c.train_iters = r.train_iters;
  c.seed = 7;
  c.lr = {.max_lr = r.lr,
          .min_lr = 0.0,
          .warmup_steps = 0,
          .decay_steps = 100,
          .style = LrDecayStyle::Constant};
  c.log_interval = 1;
  c.eval_interval = r.eval_interval;
  c.eval_iters = r.eval_iters;
  c.metrics_file = r.metrics;
  c.tensorboard_dir = r.tensorboard_dir;
  c.tensorboard_log_interval = r.tensorboard_log_interval;
  c.log_validation_ppl_to_tensorboard = r.validation_ppl;
  c.log_params_norm = r.log_params_norm;
  c.log_loss_scale_to_tensorboard = r.loss_scale_tag;
  c.log_num_zeros_in_grad = r.log_num_zeros;
  c.log_throughput = r.log_throughput;
  c.timing_log_level = r.timing_log_level;
  c.log_timers_to_tensorboard = r.timers_to_tensorboard;
  c.save = r.save;
  auto train = std::make_shared<MockGptDataset>(r.train_iters * kGlobal, kSeq, r.vocab, 7);
  auto valid = std::make_shared<MockGptDataset>(3 * kGlobal, kSeq, r.vocab, 8);
  Trainer trainer(std::move(c), std::make_shared<SoloCommunicator>(),
                  gpt_step_factory(step, train, valid));
  trainer.run();
  std::vector<double> losses;
  std::ifstream in(r.metrics);
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.at("type") == "validation") losses.push_back(j.at("lm_loss").get<double>());
  }
  return losses;
}

TEST(TrainValidation, EvaluationsAdvanceThroughTheValidationSet) {
  testing::TempDir dir;
  // Evaluations after iterations 1 and 2, and the final one: batches 0, 1, 2.
  const std::vector<double> each = run(
      {.metrics = dir.path() + "/a.jsonl", .train_iters = 2, .eval_interval = 1, .eval_iters = 1});
  // One final evaluation of batches 0, 1, 2.
  const std::vector<double> all = run({.metrics = dir.path() + "/b.jsonl",
                                       .train_iters = 1,
                                       .eval_interval = 1000,
                                       .eval_iters = 3});
  ASSERT_EQ(each.size(), 3u);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_NEAR((each[0] + each[1] + each[2]) / 3.0, all[0], 1e-6 * all[0]);
  EXPECT_FALSE(each[0] == each[1] && each[1] == each[2]);
}

// A protobuf field reader over `bytes` (wire types 0, 1, 2 and 5: all an Event uses).
struct ProtoReader {
  const std::string& bytes;
  size_t pos = 0;
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      const uint8_t b = uint8_t(bytes.at(pos++));
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
  }
  // Next field: its number, and its payload (varint value, or the raw bytes).
  bool next(int& field, uint64_t& value, std::string& payload) {
    if (pos >= bytes.size()) return false;
    const uint64_t key = varint();
    field = int(key >> 3);
    switch (key & 7) {
      case 0:
        value = varint();
        break;
      case 1:
        payload = bytes.substr(pos, 8);
        pos += 8;
        break;
      case 2: {
        const uint64_t n = varint();
        payload = bytes.substr(pos, n);
        pos += n;
        break;
      }
      case 5:
        payload = bytes.substr(pos, 4);
        pos += 4;
        break;
      default:
        ADD_FAILURE() << "wire type " << (key & 7);
        return false;
    }
    return true;
  }
};

// (tag, step) → value of every scalar in the TFRecord event files of `dir`.
std::map<std::pair<std::string, int64_t>, float> read_scalars(const std::string& dir) {
  std::map<std::pair<std::string, int64_t>, float> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (size_t pos = 0; pos + 12 <= file.size();) {
      uint64_t length = 0;
      std::memcpy(&length, file.data() + pos, 8);
      const std::string event = file.substr(pos + 12, length);
      pos += 12 + length + 4;  // length, its CRC, the data, its CRC
      ProtoReader e{event};
      int field = 0;
      uint64_t value = 0;
      std::string payload;
      int64_t step = 0;
      std::vector<std::pair<std::string, float>> scalars;
      while (e.next(field, value, payload)) {
        if (field == 2) step = int64_t(value);
        if (field != 5) continue;  // Summary
        ProtoReader summary{payload};
        std::string v;
        while (summary.next(field, value, v)) {
          if (field != 1) continue;  // Summary.Value
          ProtoReader sv{v};
          std::string tag, x;
          float simple = 0;
          while (sv.next(field, value, x)) {
            if (field == 1) tag = x;
            if (field == 2) std::memcpy(&simple, x.data(), 4);
          }
          scalars.emplace_back(tag, simple);
        }
      }
      for (const auto& [tag, simple] : scalars) out[{tag, step}] = simple;
    }
  }
  return out;
}

TEST(TrainTensorBoard, MegatronsTagsAtIterationsAndSamples) {
  testing::TempDir dir;
  run({.metrics = dir.path() + "/m.jsonl",
       .train_iters = 4,
       .eval_interval = 1000,
       .eval_iters = 1,
       .lr = 1e-3,
       .tensorboard_dir = dir.path() + "/tb",
       .tensorboard_log_interval = 2});
  const auto scalars = read_scalars(dir.path() + "/tb");
  std::set<std::pair<std::string, int64_t>> keys;
  for (const auto& [key, value] : scalars) keys.insert(key);
  std::set<std::pair<std::string, int64_t>> expected;
  for (int64_t it : {2, 4}) {  // every 2nd iteration
    for (const char* tag : {"learning-rate", "batch-size", "lm loss", "loss-scale", "grad-norm"}) {
      expected.insert({tag, it});
      expected.insert({std::string(tag) + " vs samples", it * kGlobal});
    }
  }
  expected.insert({"lm loss validation", 4});  // the final evaluation
  expected.insert({"lm loss validation vs samples", 4 * kGlobal});
  EXPECT_EQ(keys, expected);
  EXPECT_EQ(scalars.at({"batch-size", 2}), float(kGlobal));
  EXPECT_EQ(scalars.at({"learning-rate vs samples", 2 * kGlobal}), 1e-3f);
  EXPECT_EQ(scalars.at({"loss-scale", 4}), 1.0f);
  // The iteration's own loss, as in the metrics file (logged every iteration there).
  std::ifstream in(dir.path() + "/m.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.at("type") == "train" && j.at("iteration") == 4) {
      EXPECT_EQ(scalars.at({"lm loss", 4}), float(j.at("lm_loss").get<double>()));
    }
  }
}

TEST(TrainTensorBoard, ValidationPerplexityOnRequest) {
  testing::TempDir dir;
  run({.metrics = dir.path() + "/m.jsonl",
       .tensorboard_dir = dir.path() + "/tb",
       .validation_ppl = true});
  const auto scalars = read_scalars(dir.path() + "/tb");
  const float loss = scalars.at({"lm loss validation", 1});
  EXPECT_FLOAT_EQ(scalars.at({"lm loss validation ppl", 1}), std::exp(loss));
  EXPECT_EQ(scalars.count({"lm loss validation ppl vs samples", kGlobal}), 1u);
}

// --no-log-loss-scale-to-tensorboard drops "loss-scale" (and its "vs samples") only.
TEST(TrainTensorBoard, LossScaleCanBeLeftOut) {
  testing::TempDir dir;
  run({.metrics = dir.path() + "/m.jsonl",
       .tensorboard_dir = dir.path() + "/tb",
       .loss_scale_tag = false});
  const auto scalars = read_scalars(dir.path() + "/tb");
  EXPECT_EQ(scalars.count({"loss-scale", 1}), 0u);
  EXPECT_EQ(scalars.count({"loss-scale vs samples", kGlobal}), 0u);
  EXPECT_EQ(scalars.count({"learning-rate", 1}), 1u);
}

// --log-params-norm: with a frozen model the logged norm is the L2 norm of the saved weights,
// summed here in double over the checkpoint's tensors.
TEST(TrainParamsNorm, IsTheNormOfTheWeights) {
  testing::TempDir dir;
  run({.metrics = dir.path() + "/m.jsonl", .log_params_norm = true, .save = dir.path() + "/ckpt"});
  SafetensorsReader weights(dir.path() + "/ckpt/iter_0000001/mp_rank_00/model.safetensors");
  double sum = 0;
  for (const std::string& name : weights.names()) {
    const Tensor t = weights.get(name);
    ASSERT_EQ(t.dtype(), DType::F32) << name;
    const float* x = static_cast<const float*>(t.raw_data());
    for (int64_t i = 0; i < t.numel(); ++i) sum += double(x[i]) * double(x[i]);
  }
  std::ifstream in(dir.path() + "/m.jsonl");
  std::string line;
  int rows = 0;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.at("type") != "train") continue;
    EXPECT_NEAR(j.at("params_norm").get<double>(), std::sqrt(sum), 1e-6 * std::sqrt(sum));
    ++rows;
  }
  EXPECT_EQ(rows, 1);
}

// --log-num-zeros-in-grad: the vocabulary padding rows of the (tied) word embedding are never
// looked up nor predicted, so their gradients are exactly zero: 4 rows × h 32 = 128 zeros, and
// no other gradient element of a trained step is exactly zero — without linear biases: the key
// bias's gradient is zero in exact arithmetic (softmax ignores a shift shared by a row's
// scores), so its elements are rounding noise, exactly 0.0 under some GEMM kernels (OpenBLAS's
// Haswell/Zen ones here) and not under others. Written to the metrics file and
// as Megatron's "num-zeros" TensorBoard tag. --log-throughput with --log-timers-to-tensorboard
// adds "throughput", and --timing-log-level 1 the timers' "<name>-time" tags, as in Megatron.
TEST(TrainNumZerosAndThroughput, CountThePaddingRowsAndWriteMegatronsTags) {
  testing::TempDir dir;
  run({.metrics = dir.path() + "/m.jsonl",
       .train_iters = 2,
       .lr = 1e-3,
       .tensorboard_dir = dir.path() + "/tb",
       .log_num_zeros = true,
       .log_throughput = true,
       .timing_log_level = 1,
       .timers_to_tensorboard = true,
       .vocab = kVocab - 4,
       .linear_biases = false});
  std::ifstream in(dir.path() + "/m.jsonl");
  std::string line;
  int rows = 0;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.at("type") != "train") continue;
    EXPECT_EQ(j.at("num_zeros").get<int64_t>(), 4 * 32) << line;
    ++rows;
  }
  EXPECT_EQ(rows, 2);
  const auto scalars = read_scalars(dir.path() + "/tb");
  for (int64_t it : {1, 2}) {
    EXPECT_EQ(scalars.at({"num-zeros", it}), 128.0f);
    EXPECT_EQ(scalars.at({"num-zeros vs samples", it * kGlobal}), 128.0f);
    EXPECT_GT(scalars.at({"throughput", it}), 0.0f);
    for (const char* timer :
         {"forward-backward", "all-grads-sync", "embedding-grads-all-reduce",
          "optimizer-clip-main-grad", "optimizer-count-zeros", "optimizer-inner-step",
          "optimizer-copy-main-to-model-params", "optimizer"})
      EXPECT_GT(scalars.at({std::string(timer) + "-time", it}), 0.0f) << timer;
    // The fp16 check and the distributed optimizer's all-gather do not run here.
    EXPECT_EQ(scalars.count({"optimizer-unscale-and-check-inf-time", it}), 0u);
    EXPECT_EQ(scalars.count({"params-all-gather-time", it}), 0u);
  }
  // Megatron writes no iteration time for the first iteration of a run.
  EXPECT_EQ(scalars.count({"iteration-time", 1}), 0u);
  EXPECT_GT(scalars.at({"iteration-time", 2}), 0.0f);
}

// Without the flags neither is logged.
TEST(TrainNumZerosAndThroughput, OffByDefault) {
  testing::TempDir dir;
  run({.metrics = dir.path() + "/m.jsonl", .tensorboard_dir = dir.path() + "/tb"});
  const auto scalars = read_scalars(dir.path() + "/tb");
  EXPECT_EQ(scalars.count({"num-zeros", 1}), 0u);
  EXPECT_EQ(scalars.count({"throughput", 1}), 0u);
  EXPECT_EQ(scalars.count({"forward-backward-time", 1}), 0u);
  std::ifstream in(dir.path() + "/m.jsonl");
  std::string line;
  while (std::getline(in, line)) EXPECT_EQ(nlohmann::json::parse(line).count("num_zeros"), 0u);
}

}  // namespace
}  // namespace megatron
