#include "model/stage_range.h"

#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace megatron {

namespace {

constexpr const char* kFirst = "--decoder-first-pipeline-num-layers";
constexpr const char* kLast = "--decoder-last-pipeline-num-layers";

// " with 2 virtual stages per pipeline rank ..." when interleaved (two flags can set v).
std::string chunks_clause(int chunks) {
  return chunks > 1 ? " with " + std::to_string(chunks) +
                          " virtual stages per pipeline rank (the interleaved schedule)"
                    : std::string();
}

// What the account-for flags add to the layers of an even split.
int accounted(const PipelineSplit& s) {
  return int(s.account_for_embedding) + int(s.account_for_loss);
}

std::string accounted_clause(const PipelineSplit& s) {
  if (accounted(s) == 0) return "";
  return std::string(" (+ ") + std::to_string(accounted(s)) + " for " +
         (s.account_for_embedding && s.account_for_loss ? "the embedding and the loss"
          : s.account_for_embedding                     ? "the embedding"
                                                        : "the loss") +
         ", --account-for-*-in-pipeline-split)";
}

void check_uneven(const PipelineSplit& s) {
  const int v = s.chunks;
  MT_REQUIRE(!s.account_for_embedding && !s.account_for_loss, kFirst, " / ", kLast,
             " set the stages' layers themselves: they cannot be combined with "
             "--account-for-embedding-in-pipeline-split or --account-for-loss-in-pipeline-split");
  MT_REQUIRE(s.pipeline_size > 1, kFirst, " / ", kLast,
             " need --pipeline-model-parallel-size > 1 (one stage holds every layer)");
  int middle_layers = s.num_layers, middle_ranks = s.pipeline_size;
  for (const auto& [count, flag] :
       {std::pair{s.first_stage_layers, kFirst}, std::pair{s.last_stage_layers, kLast}}) {
    if (count == 0) continue;
    MT_REQUIRE(count % v == 0, flag, " ", count, " must be a multiple of the ", v,
               " virtual stages per pipeline rank: each of the rank's model chunks holds ",
               "the same number of its layers");
    middle_layers -= count;
    --middle_ranks;
  }
  MT_REQUIRE(middle_layers >= 0, kFirst, " ", s.first_stage_layers, " and ", kLast, " ",
             s.last_stage_layers, " ask for more than the ", s.num_layers,
             " layers of --num-layers");
  MT_REQUIRE(middle_ranks > 0 || middle_layers == 0, "--num-layers ", s.num_layers, " leaves ",
             middle_layers, " layers after ", kFirst, " ", s.first_stage_layers, " and ", kLast,
             " ", s.last_stage_layers, ", but --pipeline-model-parallel-size ", s.pipeline_size,
             " has no stage between the first and the last to hold them");
  MT_REQUIRE(middle_ranks == 0 || (middle_layers > 0 && middle_layers % (middle_ranks * v) == 0),
             "--num-layers ", s.num_layers, " leaves ", middle_layers, " layers after ", kFirst,
             " / ", kLast, " for the other ", middle_ranks,
             " pipeline stages, which must split them evenly, at least one layer each",
             chunks_clause(v), "; change the counts or --num-layers");
}

void check_layout(const PipelineSplit& s) {
  constexpr const char* kLayout = "--pipeline-model-parallel-layout";
  MT_REQUIRE(s.first_stage_layers == 0 && s.last_stage_layers == 0 && !s.account_for_embedding &&
                 !s.account_for_loss,
             kLayout, " sets every stage's layers itself: it cannot be combined with ", kFirst,
             ", ", kLast,
             ", --account-for-embedding-in-pipeline-split or --account-for-loss-in-pipeline-split");
  MT_REQUIRE(int(s.layout.size()) == s.virtual_stages(), kLayout, " has ", s.layout.size(),
             " stages, but --pipeline-model-parallel-size ", s.pipeline_size, " x ", s.chunks,
             " virtual stages per pipeline rank makes ", s.virtual_stages());
  int layers = 0;
  for (int n : s.layout) {
    MT_CHECK(n >= 0, "a stage of ", kLayout, " holds ", n, " layers");
    layers += n;
  }
  MT_REQUIRE(layers == s.num_layers, kLayout, " holds ", layers, " transformer layers, but ",
             "--num-layers is ", s.num_layers);
}

}  // namespace

void check_pipeline_split(const PipelineSplit& s) {
  MT_REQUIRE(s.num_layers >= 1, "--num-layers must be >= 1, got ", s.num_layers);
  MT_REQUIRE(s.pipeline_size >= 1, "--pipeline-model-parallel-size must be >= 1, got ",
             s.pipeline_size);
  MT_REQUIRE(s.chunks >= 1, "the virtual stages per pipeline rank must be >= 1, got ", s.chunks);
  MT_REQUIRE(s.chunks == 1 || s.pipeline_size > 1,
             "virtual pipeline stages (the interleaved schedule: "
             "--num-layers-per-virtual-pipeline-stage, --num-virtual-stages-per-pipeline-rank, or "
             "a --pipeline-model-parallel-layout of more stages than pipeline ranks) need "
             "--pipeline-model-parallel-size > 1");
  MT_REQUIRE(s.first_stage_layers >= 0 && s.last_stage_layers >= 0, kFirst, " and ", kLast,
             " must be positive, got ", s.first_stage_layers, " and ", s.last_stage_layers);
  if (!s.layout.empty()) return check_layout(s);
  if (s.first_stage_layers > 0 || s.last_stage_layers > 0) return check_uneven(s);
  const int slots = s.num_layers + accounted(s);
  MT_REQUIRE(slots % s.pipeline_size == 0, "--num-layers ", s.num_layers, accounted_clause(s),
             " is not divisible by --pipeline-model-parallel-size ", s.pipeline_size,
             ": every pipeline stage holds the same number of layers unless ", kFirst, " / ", kLast,
             " say otherwise");
  MT_REQUIRE(slots % s.virtual_stages() == 0, "--num-layers ", s.num_layers, accounted_clause(s),
             " is not divisible into ", s.virtual_stages(),
             " virtual pipeline stages (--pipeline-model-parallel-size ", s.pipeline_size, " x ",
             s.chunks, " virtual stages per pipeline rank)");
}

std::vector<int> virtual_stage_layers(const PipelineSplit& s) {
  check_pipeline_split(s);
  if (!s.layout.empty()) return s.layout;
  const int p = s.pipeline_size, v = s.chunks, stages = s.virtual_stages();
  std::vector<int> layers(size_t(stages), 0);
  if (s.even() || accounted(s) > 0) {
    const int per_stage = (s.num_layers + accounted(s)) / stages;
    layers.assign(size_t(stages), per_stage);
    if (s.account_for_embedding) --layers.front();
    if (s.account_for_loss) --layers.back();
    return layers;
  }
  const int ends = int(s.first_stage_layers > 0) + int(s.last_stage_layers > 0);
  const int middle =
      p > ends ? (s.num_layers - s.first_stage_layers - s.last_stage_layers) / ((p - ends) * v) : 0;
  for (int stage = 0; stage < stages; ++stage) {
    const int rank = stage % p;
    layers[size_t(stage)] = rank == 0 && s.first_stage_layers > 0      ? s.first_stage_layers / v
                            : rank == p - 1 && s.last_stage_layers > 0 ? s.last_stage_layers / v
                                                                       : middle;
  }
  return layers;
}

StageRange stage_range(const PipelineSplit& s, int pipeline_rank, int chunk) {
  const std::vector<int> layers = virtual_stage_layers(s);
  MT_CHECK(pipeline_rank >= 0 && pipeline_rank < s.pipeline_size && chunk >= 0 && chunk < s.chunks,
           "stage_range: chunk ", chunk, " of pipeline rank ", pipeline_rank, " is outside ",
           s.chunks, " chunks x ", s.pipeline_size, " ranks");
  const int stage = chunk * s.pipeline_size + pipeline_rank;
  int first = 0;
  for (int before = 0; before < stage; ++before) first += layers[size_t(before)];
  return {first, layers[size_t(stage)], stage == 0, stage == s.virtual_stages() - 1};
}

int pipeline_rank_of_parameter(const std::string& name, const PipelineSplit& s) {
  // Multi-token prediction's depths ("mtp.layers.<k>....") follow the loss, on the last rank.
  if (name.rfind("mtp.", 0) == 0) return s.pipeline_size - 1;
  const std::vector<int> layers = virtual_stage_layers(s);
  const size_t at = name.find("layers.");
  if (at != std::string::npos && (at == 0 || name[at - 1] == '.')) {
    const size_t digits = at + 7, end = name.find('.', digits);
    const std::string index = name.substr(digits, end - digits);
    if (!index.empty() && index.find_first_not_of("0123456789") == std::string::npos) {
      const int layer = std::stoi(index);
      MT_REQUIRE(layer < s.num_layers, "parameter '", name, "' belongs to layer ", layer,
                 " but the model has ", s.num_layers, " layers");
      int stage = 0;
      for (int end_layer = layers[0]; end_layer <= layer; end_layer += layers[size_t(stage)])
        ++stage;
      return stage % s.pipeline_size;
    }
  }
  return name.rfind("embedding.", 0) == 0 ? 0 : s.pipeline_size - 1;
}

}  // namespace megatron
