// One micro-batch's activations on a pipeline stage, shared by every model's stage interface
// (GptModel, BertModel, BertClassifier: make_stage_ctx, forward_stage, backward_stage,
// release_stage). A schedule keeps one context per micro-batch in flight; each holds an arena
// of its own and the model's per-micro-batch state (what its backward needs), alive from one
// forward_stage to the next.
//
// A model declares `class StageCtx;` and `using StageCtxPtr = StagePtr<StageCtx>;` in its class,
// `extern template struct StageDelete<Model::StageCtx>;` after it, and completes both in its .cpp
// only, where its state type is known:
//   class GptModel::StageCtx : public StageContext<Ctx> { using StageContext::StageContext; };
//   template struct StageDelete<GptModel::StageCtx>;
#pragma once

#include <memory>
#include <optional>
#include <type_traits>

#include "core/arena.h"
#include "core/error.h"
#include "parallel/random.h"

namespace megatron {

// The deleter of a StageCtx that is complete only in its model's .cpp: operator() is
// instantiated there only (the explicit instantiation), every other file calling that one
// (the header's extern template declaration), so that nothing deletes an incomplete type.
template <typename Ctx>
struct StageDelete {
  void operator()(Ctx* ctx) const;
};
template <typename Ctx>
using StagePtr = std::unique_ptr<Ctx, StageDelete<Ctx>>;

// State: the model's per-micro-batch state, built on the arena (State(Arena&)) or default.
template <typename State>
class StageContext {
 public:
  explicit StageContext(Device device) : arena_(device) {}

  // Drops the micro-batch last run here (the next start() would): the state's tensors go
  // first, since they pin the arena's blocks, which reset() then frees before it allocates the
  // merged one (not both alive at once). Between steps a context so holds its steady-state
  // arena, from the first step on, when the memory report runs.
  void release() {
    state_.reset();
    arena_.reset();
  }
  // The opening of forward_stage: release(), then a fresh state for this micro-batch.
  State& start() {
    release();
    if constexpr (std::is_constructible_v<State, Arena&>)
      return state_.emplace(arena_);
    else
      return state_.emplace();
  }
  bool started() const { return state_.has_value(); }
  // The state of the micro-batch forward_stage ran; `caller` names the entry point that needs it.
  State& state(const char* caller) {
    MT_CHECK(state_.has_value(), caller, " before forward_stage");
    return *state_;
  }
  const State& state(const char* caller) const {
    MT_CHECK(state_.has_value(), caller, " before forward_stage");
    return *state_;
  }
  Arena& arena() { return arena_; }
  // Peak bytes of this micro-batch's activations.
  size_t activation_bytes() const { return arena_.high_water(); }

 private:
  Arena arena_;
  std::optional<State> state_;  // since the last start()
};

template <typename Ctx>
void StageDelete<Ctx>::operator()(Ctx* ctx) const {
  delete ctx;
}

// The dropout of a micro-batch: on (keyed by the seed, the iteration and the batch's first
// sample) when training, off when evaluating.
inline DropoutScope stage_dropout(bool train, uint64_t seed, int64_t iteration,
                                  int64_t first_sample) {
  return train ? DropoutScope{true, seed, iteration, first_sample} : DropoutScope{};
}

}  // namespace megatron
