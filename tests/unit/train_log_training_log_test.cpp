// Iteration line / validation block formats and Megatron's FLOP count.
#include <gtest/gtest.h>

#include <cmath>

#include "model/gpt_model.h"
#include "train/log/training_log.h"
#include "train/model_step_common.h"

namespace megatron {
namespace {

TEST(TrainingLog, FlopFormula) {
  // GPT-2 small, B=8, s=1024: 72·8·1024·12·768²·(1 + 1024/4608 + 50304/110592), by hand.
  const double expected =
      72.0 * 8 * 1024 * 12 * 768.0 * 768.0 * (1.0 + 1024.0 / 4608.0 + 50304.0 / 110592.0);
  EXPECT_DOUBLE_EQ(gpt_flops_per_iteration(8, 1024, 12, 768, 50304, 0.0), expected);
  EXPECT_DOUBLE_EQ(gpt_flops_per_iteration(8, 1024, 12, 768, 50304, 1.0), expected * 96 / 72);
  // A quarter of the layers recomputed (block recompute): 72 + 24/4 = 78.
  EXPECT_DOUBLE_EQ(gpt_flops_per_iteration(8, 1024, 12, 768, 50304, 0.25), expected * 78 / 72);
  // Tiny numbers checked digit by digit: B=1,s=6,L=1,h=1,V=12 → 72·6·(1+1+1) = 1296.
  EXPECT_DOUBLE_EQ(gpt_flops_per_iteration(1, 6, 1, 1, 12, 0.0), 1296.0);
}

TEST(TrainingLog, RecomputedLayerFractionCountsBlockLayersPerChunk) {
  GptConfig c;
  c.num_layers = 8;
  const PipelineSplit one{.num_layers = 8}, two{.num_layers = 8, .pipeline_size = 2},
      four{.num_layers = 8, .pipeline_size = 2, .chunks = 2};
  EXPECT_EQ(recomputed_layer_fraction(c, one), 0.0);  // no full recompute
  c.recompute_activations = true;
  EXPECT_EQ(recomputed_layer_fraction(c, four), 1.0);  // uniform: every layer
  c.recompute_method = RecomputeMethod::kBlock;
  c.recompute_num_layers = 1;
  EXPECT_EQ(recomputed_layer_fraction(c, one), 1.0 / 8);  // the first of 8
  EXPECT_EQ(recomputed_layer_fraction(c, two), 2.0 / 8);  // the first of each 4-layer chunk
  c.recompute_num_layers = 2;
  EXPECT_EQ(recomputed_layer_fraction(c, four), 1.0);  // 2 of each chunk's 2
  // Uneven chunks: 2 of the first stage's 3 layers, and the 1 of the last.
  const PipelineSplit uneven{.num_layers = 4, .pipeline_size = 2, .first_stage_layers = 3};
  c.num_layers = 4;
  EXPECT_EQ(recomputed_layer_fraction(c, uneven), 3.0 / 4);
}

TEST(TrainingLog, IterationLineMatchesMegatronLayout) {
  IterationStats s;
  s.iteration = 10;
  s.train_iters = 100;
  s.consumed_samples = 640;
  s.elapsed_ms = 123.44;
  s.learning_rate = 1.5e-4;
  s.global_batch = 64;
  s.lm_loss = 10.23456;
  s.loss_scale = 1.0;
  s.grad_norm = 3.4561;
  s.tokens_per_second = 1000.0;
  s.tflops_per_process = 0.5;
  EXPECT_EQ(format_iteration_line(s),
            " iteration       10/     100 | consumed samples:          640 |"
            " elapsed time per iteration (ms): 123.4 | learning rate: 1.500000E-04 |"
            " global batch size:    64 | lm loss: 1.023456E+01 | loss scale: 1.0 |"
            " grad norm: 3.456 | number of skipped iterations:   0 |"
            " number of nan iterations:   0 | tokens/s: 1000.0 | TFLOP/s: 0.500 |");
  // --log-throughput and --log-num-zeros-in-grad: Megatron's fields, at Megatron's places.
  s.log_throughput = true;
  s.num_zeros = 12;
  EXPECT_EQ(format_iteration_line(s),
            " iteration       10/     100 | consumed samples:          640 |"
            " elapsed time per iteration (ms): 123.4 | throughput per GPU (TFLOP/s/GPU): 0.5 |"
            " learning rate: 1.500000E-04 |"
            " global batch size:    64 | lm loss: 1.023456E+01 | loss scale: 1.0 |"
            " grad norm: 3.456 | num zeros: 12 | number of skipped iterations:   0 |"
            " number of nan iterations:   0 | tokens/s: 1000.0 | TFLOP/s: 0.500 |");
  s.grad_norm.reset();
  s.lm_loss.reset();  // an interval of skipped iterations only
  EXPECT_EQ(format_iteration_line(s).find("grad norm"), std::string::npos);
  EXPECT_EQ(format_iteration_line(s).find("lm loss"), std::string::npos);
}

TEST(TrainingLog, ValidationBlock) {
  const std::string block = format_validation_block("iteration 100", 2.0);
  const std::string body =
      " validation loss at iteration 100 | lm loss value: 2.000000E+00 | lm loss PPL: "
      "7.389056E+00 | ";
  const std::string rule(body.size() + 1, '-');
  EXPECT_EQ(block, rule + "\n" + body + "\n" + rule);
}

// Megatron's report_memory line (training.py), MB = 2^20 bytes.
TEST(TrainingLog, MemoryReportMatchesMegatronLayout) {
  DeviceMemoryStats m;
  m.allocated = size_t(512) << 20;
  m.max_allocated = (size_t(768) << 20) + (size_t(1) << 19);
  m.reserved = size_t(1024) << 20;
  m.max_reserved = (size_t(1100) << 20) + (size_t(3) << 18);
  EXPECT_EQ(format_memory_report(3, 1, m),
            "[Rank 3] (after 1 iterations) memory (MB) | allocated: 512.00 | max allocated: "
            "768.50 | reserved: 1024.00 | max reserved: 1100.75");
}

// --log-memory-to-tensorboard: Megatron's four tags, at the iteration only.
TEST(TrainingLog, MemoryScalarsOnlyWhenAsked) {
  IterationStats s;
  s.iteration = 7;
  s.consumed_samples = 56;
  auto tags = [](const std::vector<TensorBoardScalar>& scalars) {
    std::vector<std::string> out;
    for (const TensorBoardScalar& x : scalars)
      if (x.tag.rfind("mem-", 0) == 0) out.push_back(x.tag);
    return out;
  };
  EXPECT_TRUE(tags(tensorboard_iteration_scalars(s)).empty());
  DeviceMemoryStats m;
  m.allocated = 100;
  m.max_allocated = 200;
  m.reserved = 300;
  m.allocations = 4;
  s.memory = m;
  const std::vector<TensorBoardScalar> scalars = tensorboard_iteration_scalars(s);
  EXPECT_EQ(tags(scalars),
            (std::vector<std::string>{"mem-reserved-bytes", "mem-allocated-bytes",
                                      "mem-max-allocated-bytes", "mem-allocated-count"}));
  for (const TensorBoardScalar& x : scalars) {
    if (x.tag == "mem-reserved-bytes") {
      EXPECT_EQ(x.value, 300.0f);
    }
    if (x.tag == "mem-max-allocated-bytes") {
      EXPECT_EQ(x.value, 200.0f);
    }
    if (x.tag == "mem-allocated-count") {
      EXPECT_EQ(x.value, 4.0f);
    }
    if (x.tag.rfind("mem-", 0) == 0) {
      EXPECT_EQ(x.step, 7);
    }
  }
}

}  // namespace
}  // namespace megatron
