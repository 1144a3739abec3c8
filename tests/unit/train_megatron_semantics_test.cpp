// Validation advances through the validation set as Megatron's iterator does: each evaluation
// scores the next --eval-iters global batches. Checked with a frozen model (learning rate 0):
// three evaluations of one batch each must average to one evaluation of three batches, and
// must not all be equal (they would be if every evaluation re-scored the first batch).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/temp_dir.h"
#include "data/mock_gpt_dataset.h"
#include "distributed/solo_communicator.h"
#include "train/gpt_step.h"
#include "train/trainer.h"

namespace megatron {
namespace {

constexpr int64_t kSeq = 16, kVocab = 64, kMicro = 2, kGlobal = 4;

// The validation losses a frozen tiny GPT logs over `train_iters` iterations.
std::vector<double> validation_losses(const std::string& metrics, int64_t train_iters,
                                      int64_t eval_interval, int64_t eval_iters) {
  GptStepConfig step;
  GptConfig& m = step.model;
  m.num_layers = 1;
  m.hidden_size = 32;
  m.num_attention_heads = 2;
  m.vocab_size = kVocab;
  m.padded_vocab_size = kVocab;
  m.max_position_embeddings = int(kSeq);
  m.seq_length = int(kSeq);
  TrainerConfig c;
  c.micro_batch = kMicro;
  c.global_batch = kGlobal;
  c.train_iters = train_iters;
  c.seed = 7;
  c.lr = {.max_lr = 0.0,
          .min_lr = 0.0,
          .warmup_steps = 0,
          .decay_steps = 100,
          .style = LrDecayStyle::Constant};
  c.log_interval = 1;
  c.eval_interval = eval_interval;
  c.eval_iters = eval_iters;
  c.metrics_file = metrics;
  auto train = std::make_shared<MockGptDataset>(train_iters * kGlobal, kSeq, kVocab, 7);
  auto valid = std::make_shared<MockGptDataset>(3 * kGlobal, kSeq, kVocab, 8);
  Trainer trainer(std::move(c), std::make_shared<SoloCommunicator>(),
                  gpt_step_factory(step, train, valid));
  trainer.run();
  std::vector<double> losses;
  std::ifstream in(metrics);
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
  const std::vector<double> each = validation_losses(dir.path() + "/a.jsonl", 2, 1, 1);
  // One final evaluation of batches 0, 1, 2.
  const std::vector<double> all = validation_losses(dir.path() + "/b.jsonl", 1, 1000, 3);
  ASSERT_EQ(each.size(), 3u);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_NEAR((each[0] + each[1] + each[2]) / 3.0, all[0], 1e-6 * all[0]);
  EXPECT_FALSE(each[0] == each[1] && each[1] == each[2]);
}

}  // namespace
}  // namespace megatron
