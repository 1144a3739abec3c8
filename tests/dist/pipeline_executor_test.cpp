// The pipeline executor (pipeline/pipeline_executor.h) under mpirun: the world is one pipeline
// of p ∈ {2, 4} ranks, each virtual stage s an affine map y = a_s·x + s with a_s = s + 2, so the
// last stage's output and the first stage's input gradient have closed forms computed here in
// double. Every schedule (1F1B; interleaved with 2 chunks; forward only) for m ∈ {1, p, 3p}
// micro-batches must finish (no deadlock: the harness's watchdog would abort it) and deliver
// each micro-batch's data to the right stage — also with every tag dropped, as NCCL (which has
// no tags) matches messages between two ranks: in the order they were posted.
#include "pipeline/pipeline_executor.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "forwarding_communicator.h"
#include "mpi_test_util.h"

namespace megatron {
namespace {

// [3, 1000] f32, 12 KB: above Open MPI's shared-memory eager limit (4 KB), so the sends go by
// rendezvous and a sender waiting for its receiver would show.
constexpr int64_t kElements = 3 * 1000;

// The world with NCCL's point-to-point matching: every tag is 0, so MPI matches the messages
// between two ranks in posting order (its non-overtaking rule), as NCCL does.
class TaglessCommunicator final : public test::ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;
  void send(const Tensor& t, int dst, int) override { ForwardingCommunicator::send(t, dst, 0); }
  void recv(Tensor& t, int src, int) override { ForwardingCommunicator::recv(t, src, 0); }
  std::unique_ptr<CommRequest> isend(const Tensor& t, int dst, int) override {
    return ForwardingCommunicator::isend(t, dst, 0);
  }
  std::unique_ptr<CommRequest> irecv(Tensor& t, int src, int) override {
    return ForwardingCommunicator::irecv(t, src, 0);
  }
};

double slope(int stage) {
  return double(stage + 2);
}

// Micro-batch m's input element i on virtual stage 0.
double input_value(int64_t m, int64_t i) {
  return double(m + 1) + double(i % 7) / 8.0;
}

void check_schedule(int v, int64_t m, bool backward, bool tagless = false) {
  std::shared_ptr<Communicator> world = test::world();
  if (tagless) world = std::make_shared<TaglessCommunicator>(world);
  const int p = world->size(), r = world->rank();
  const int last_stage = p * v - 1;
  const Shape shape = {3, kElements / 3};
  std::map<int64_t, std::vector<float>> outputs, input_grads;  // by micro-batch
  PipelineStageFunctions fns;
  fns.forward = [&](int c, int64_t mb, const Tensor& input) {
    const int s = c * p + r;
    std::vector<float> x(static_cast<size_t>(kElements));
    if (s == 0) {
      EXPECT_FALSE(input.defined());
      for (int64_t i = 0; i < kElements; ++i) x[size_t(i)] = float(input_value(mb, i));
    } else {
      x = input.to_vector<float>();
    }
    for (float& e : x) e = float(slope(s) * e + s);
    if (s == last_stage) outputs[mb] = x;
    return Tensor::from_vector(x, shape);
  };
  fns.backward = [&](int c, int64_t mb, const Tensor& grad_output) {
    const int s = c * p + r;
    std::vector<float> g(static_cast<size_t>(kElements), 1.0f);
    if (s != last_stage) g = grad_output.to_vector<float>();
    for (float& e : g) e = float(slope(s) * e);
    if (s == 0) input_grads[mb] = g;
    return Tensor::from_vector(g, shape);
  };
  const std::vector<PipelineOp> ops =
      backward ? training_schedule(p, r, v, m) : forward_only_schedule(v, m);
  run_pipeline_schedule(ops, world.get(), v, {shape, DType::F32, Device::CPU}, fns);

  if (r == p - 1) {  // holds the last virtual stage
    EXPECT_EQ(int64_t(outputs.size()), m);
    for (const auto& [mb, y] : outputs)
      for (int64_t i = 0; i < kElements; i += 97) {
        // The chain in the stages' own rounding (f32 after each stage).
        float want = float(input_value(mb, i));
        for (int s = 0; s <= last_stage; ++s) want = float(slope(s) * want + s);
        EXPECT_EQ(y[size_t(i)], want) << "micro-batch " << mb << " element " << i;
      }
  }
  if (r == 0 && backward) {  // holds virtual stage 0
    double want = 1.0;
    for (int s = 0; s <= last_stage; ++s) want *= slope(s);
    EXPECT_EQ(int64_t(input_grads.size()), m);
    for (const auto& [mb, g] : input_grads) EXPECT_EQ(double(g[0]), want) << "micro-batch " << mb;
  }
}

TEST(PipelineExecutor, OneFOneBDeliversEveryMicroBatch) {
  SKIP_UNLESS_WORLD_SIZE_AT_LEAST(2);
  const int p = test::world_size();
  for (int64_t m : {int64_t(1), int64_t(p), int64_t(3 * p)}) check_schedule(1, m, true);
}

TEST(PipelineExecutor, InterleavedDeliversEveryMicroBatch) {
  SKIP_UNLESS_WORLD_SIZE_AT_LEAST(2);
  const int p = test::world_size();
  for (int64_t m : {int64_t(p), int64_t(3 * p)}) check_schedule(2, m, true);
}

TEST(PipelineExecutor, EverySchedulePostsInTheOrderItsPeerMatches) {
  SKIP_UNLESS_WORLD_SIZE_AT_LEAST(2);
  const int p = test::world_size();
  for (int v : {1, 2})
    for (int64_t m : {int64_t(p), int64_t(3 * p)}) {
      check_schedule(v, m, /*backward=*/true, /*tagless=*/true);
      check_schedule(v, m, /*backward=*/false, /*tagless=*/true);
    }
}

TEST(PipelineExecutor, ForwardOnlyDeliversEveryMicroBatch) {
  SKIP_UNLESS_WORLD_SIZE_AT_LEAST(2);
  const int p = test::world_size();
  for (int v : {1, 2})
    for (int64_t m : {int64_t(1), int64_t(p), int64_t(3 * p)}) check_schedule(v, m, false);
}

}  // namespace
}  // namespace megatron
