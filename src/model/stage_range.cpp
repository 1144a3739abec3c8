#include "model/stage_range.h"

#include "core/error.h"

namespace megatron {

void check_pipeline_split(int num_layers, int pipeline_size, int chunks) {
  MT_REQUIRE(pipeline_size >= 1, "--pipeline-model-parallel-size must be >= 1, got ",
             pipeline_size);
  MT_REQUIRE(num_layers % pipeline_size == 0, "--num-layers ", num_layers,
             " is not divisible by --pipeline-model-parallel-size ", pipeline_size,
             ": every pipeline stage must hold the same number of layers");
  if (chunks == 1) return;
  MT_REQUIRE(pipeline_size > 1,
             "--num-layers-per-virtual-pipeline-stage (the interleaved "
             "schedule) needs --pipeline-model-parallel-size > 1");
  MT_REQUIRE(chunks >= 1 && num_layers % (pipeline_size * chunks) == 0, "--num-layers ", num_layers,
             " is not divisible into ", pipeline_size * chunks,
             " virtual pipeline stages (--pipeline-model-parallel-size ", pipeline_size, " x ",
             chunks, " model chunks per stage)");
}

StageRange stage_range(int num_layers, int pipeline_size, int pipeline_rank, int chunks,
                       int chunk) {
  check_pipeline_split(num_layers, pipeline_size, chunks);
  MT_CHECK(pipeline_rank >= 0 && pipeline_rank < pipeline_size && chunk >= 0 && chunk < chunks,
           "stage_range: chunk ", chunk, " of pipeline rank ", pipeline_rank, " is outside ",
           chunks, " chunks x ", pipeline_size, " ranks");
  const int stages = pipeline_size * chunks, per_stage = num_layers / stages;
  const int virtual_stage = chunk * pipeline_size + pipeline_rank;
  return {virtual_stage * per_stage, per_stage, virtual_stage == 0, virtual_stage == stages - 1};
}

int pipeline_rank_of_parameter(const std::string& name, int num_layers, int pipeline_size) {
  check_pipeline_split(num_layers, pipeline_size, 1);
  const size_t at = name.find("layers.");
  if (at != std::string::npos && (at == 0 || name[at - 1] == '.')) {
    const size_t digits = at + 7, end = name.find('.', digits);
    const std::string index = name.substr(digits, end - digits);
    if (!index.empty() && index.find_first_not_of("0123456789") == std::string::npos) {
      const int layer = std::stoi(index);
      MT_REQUIRE(layer < num_layers, "parameter '", name, "' belongs to layer ", layer,
                 " but the model has ", num_layers, " layers");
      return layer / (num_layers / pipeline_size);
    }
  }
  return name.rfind("embedding.", 0) == 0 ? 0 : pipeline_size - 1;
}

}  // namespace megatron
