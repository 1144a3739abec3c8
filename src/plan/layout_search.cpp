#include "plan/layout_search.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "core/error.h"

namespace megatron::plan {

namespace {

std::vector<int64_t> divisors(int64_t n, int64_t limit) {
  std::vector<int64_t> out;
  for (int64_t i = 1; i <= n && i <= limit; ++i)
    if (n % i == 0) out.push_back(i);
  return out;
}

bool faster(const Candidate& a, const Candidate& b) {
  if (a.time.tokens_per_second != b.time.tokens_per_second)
    return a.time.tokens_per_second > b.time.tokens_per_second;
  return a.memory.peak() < b.memory.peak();
}

}  // namespace

SearchResult search_layouts(const ModelSpec& model, const Layout& base, const Machine& machine,
                            Implementation impl, int devices, int top, double headroom) {
  MT_REQUIRE(devices > 0, "--search needs the number of devices: give --world-size N");
  MT_REQUIRE(base.global_batch > 0,
             "--search needs --global-batch-size (the batch every layout must reach)");
  MT_REQUIRE(top > 0, "--search-top must be positive, got ", top);
  MT_REQUIRE(headroom >= 0 && headroom < 1, "--memory-headroom must be in [0, 1), got ", headroom);
  const double usable = machine.memory_bytes * (1.0 - headroom);
  // validate_layout drops what an implementation does not run (megatron-lm-2019 and
  // megatron-cpp's BERT: selective recompute).
  const std::vector<Recompute> recomputes = {Recompute::kNone, Recompute::kSelective,
                                             Recompute::kFull};

  SearchResult result;
  std::vector<Candidate> fitting;
  bool have_smallest = false;
  // Predicts one layout (nullopt when the implementation does not run it) and files it.
  auto evaluate = [&](const Layout& l) -> std::optional<Candidate> {
    try {
      validate_layout(model, l, impl);
    } catch (const Error&) {
      return std::nullopt;
    }
    Candidate c;
    c.layout = l;
    c.memory = estimate_memory(model, l, machine, impl);
    c.time = predict_step_time(model, l, machine, impl);
    c.fits = c.memory.peak() <= usable;
    ++result.evaluated;
    if (!have_smallest || c.memory.peak() < result.smallest.memory.peak()) {
      result.smallest = c;
      have_smallest = true;
    }
    if (c.fits) fitting.push_back(c);
    return c;
  };
  for (int64_t t : divisors(devices, devices)) {
    if (model.num_attention_heads % t || model.query_groups() % t || model.ffn_size() % t) continue;
    // megatron-lm-2019 had no pipeline; the other two split GPT and BERT into stages.
    const bool pipelines = impl != Implementation::kMegatronLm2019;
    // Context-parallel sizes whose 2c chunks split the sequence (validate_layout drops what an
    // implementation or model does not run with CP).
    for (int64_t cp : divisors(devices / t, devices / t)) {
      if (model.seq_length % (2 * cp) && cp > 1) continue;
      for (int64_t p : divisors(devices / (t * cp), pipelines ? model.num_layers : 1)) {
        if (model.num_layers % p) continue;
        const int64_t d = devices / (t * cp * p);
        if (base.global_batch % d) continue;
        for (int64_t b : divisors(base.global_batch / d, 16)) {
          const int64_t m = base.global_batch / (b * d);
          std::vector<int64_t> chunks = {1};
          if (p > 1 && m % p == 0)
            for (int64_t v : divisors(model.num_layers / p, 8))
              if (v > 1) chunks.push_back(v);
          // MoE models: the expert grid's EP sizes dividing the experts and the d·c ranks the
          // dense layers replicate over, each expert split over TP or whole (ETP = TP or 1).
          std::vector<std::pair<int, int>> expert_grids = {{1, 0}};
          if (model.arch.moe.enabled()) {
            expert_grids.clear();
            for (int64_t ep : divisors(d * cp, d * cp))
              if (model.arch.moe.num_experts % ep == 0) {
                expert_grids.push_back({int(ep), int(t)});
                if (t > 1) expert_grids.push_back({int(ep), 1});
              }
          }
          for (int64_t v : chunks)
            for (Recompute rc : recomputes)
              for (int sp = 0; sp <= (t > 1 ? 1 : 0); ++sp)
                for (int dist = 0; dist <= (d * cp > 1 ? 1 : 0); ++dist)
                  for (const auto& [ep, et] : expert_grids) {
                    Layout l = base;
                    l.expert_parallel = ep;
                    l.expert_tensor_parallel = et;
                    l.tensor_parallel = int(t);
                    l.context_parallel = int(cp);
                    l.pipeline_parallel = int(p);
                    l.data_parallel = int(d);
                    l.virtual_stages = int(v);
                    // The search ranks even splits in the default micro-batch groups.
                    l.first_stage_layers = l.last_stage_layers = 0;
                    l.account_for_embedding = l.account_for_loss = false;
                    l.pipeline_layout.clear();
                    l.microbatch_group = 0;
                    l.micro_batch = b;
                    l.recompute = rc;
                    l.recompute_block_layers = 0;
                    l.sequence_parallel = sp;
                    l.distributed_optimizer = dist;
                    if (!l.distributed_optimizer) l.overlap_param_gather = false;
                    const std::optional<Candidate> c = evaluate(l);
                    if (!c || !c->fits || rc != Recompute::kFull) continue;
                    // Full recompute fits and no recompute does not: block recompute of the fewest
                    // layers of each chunk that still fits is faster (memory only falls as more
                    // layers recompute).
                    Layout kept = l;
                    kept.recompute = Recompute::kNone;
                    if (estimate_memory(model, kept, machine, impl).peak() <= usable) continue;
                    int lo = 1, hi = int(model.num_layers / (p * v)) - 1, fewest = 0;
                    while (lo <= hi) {
                      const int mid = (lo + hi) / 2;
                      l.recompute_block_layers = mid;
                      if (estimate_memory(model, l, machine, impl).peak() <= usable) {
                        fewest = mid;
                        hi = mid - 1;
                      } else {
                        lo = mid + 1;
                      }
                    }
                    if (fewest > 0) {
                      l.recompute_block_layers = fewest;
                      evaluate(l);
                    }
                  }
        }
      }
    }
  }
  MT_REQUIRE(result.evaluated > 0, "no layout of this model fits the rules on ", devices,
             " devices: the TP size must divide the heads (", model.num_attention_heads,
             ") and FFN width, PP the layers (", model.num_layers, "), 2 x CP the sequence (",
             model.seq_length, ") and DP the global batch (", base.global_batch, ")");
  result.fitting = int64_t(fitting.size());
  std::sort(fitting.begin(), fitting.end(), faster);
  if (int64_t(fitting.size()) > top) fitting.resize(size_t(top));
  result.best = std::move(fitting);
  return result;
}

}  // namespace megatron::plan
