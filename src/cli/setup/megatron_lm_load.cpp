#include "cli/setup/megatron_lm_load.h"

#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "checkpoint/layout.h"
#include "checkpoint/megatron_lm_torch.h"
#include "checkpoint/megatron_lm_torch_dist.h"
#include "checkpoint/shards.h"
#include "convert/megatron_lm_checkpoint.h"
#include "core/error.h"
#include "core/logging.h"

namespace megatron::cli {

namespace {

// Whether `copy` is megatron-cpp's conversion of iteration `iteration` of `source`, with the
// optimizer state when `resumable` (a copy made by a version that converted the weights alone is
// made again).
bool is_conversion_of(const std::string& copy, const std::string& source, int64_t iteration,
                      bool resumable) {
  if (!read_latest_iteration(copy)) return false;
  const nlohmann::json state =
      CheckpointShardReader(checkpoint_iteration_dir(copy, -1)).state(0, 0);
  const nlohmann::json from = state.value("converted_from", nlohmann::json::object());
  const std::string format = from.value("format", std::string());
  return (format == "megatron-lm-torch" || format == "megatron-lm-torch_dist") &&
         from.value("path", std::string()) == source &&
         from.value("iteration", int64_t(-1)) == iteration &&
         state.contains("optimizer") == resumable;
}

}  // namespace

void use_megatron_lm_load(Args& args, bool writer, MegatronLmFamily family, int64_t vocab_size) {
  if (args.load.empty()) return;
  const bool torch_dist = is_megatron_lm_torch_dist_checkpoint(args.load);
  if (!torch_dist && !is_megatron_lm_torch_checkpoint(args.load)) return;
  const std::string source = std::filesystem::path(args.load).lexically_normal().string();
  const std::string copy = source + ".megatron-cpp";
  const int64_t iteration = resolve_checkpoint_iteration(source, -1);
  const bool resumable = megatron_lm_checkpoint_is_resumable(source, iteration);
  MT_REQUIRE(args.finetune || (args.no_load_optim && args.no_load_rng) || resumable, "--load ",
             args.load, " is a Megatron-LM ", torch_dist ? "torch_dist" : "torch",
             "-format checkpoint without optimizer state megatron-cpp reads (",
             torch_dist ? "it holds no optimizer.state.exp_avg.* tensors or no opt_param_scheduler"
                        : "it holds no Adam state and no distrib_optim.pt: saved with "
                          "--no-save-optim",
             "): its weights are loaded, not its optimizer, scheduler or RNG state. Add "
             "--finetune (start from iteration 0), or --no-load-optim --no-load-rng");
  if (writer && !is_conversion_of(copy, source, iteration, resumable)) {
    (family == MegatronLmFamily::kBert ? import_megatron_lm_bert : import_megatron_lm_gpt)(
        source, iteration, copy, args.tensor_model_parallel_size,
        vocab_size > 0 ? vocab_size : args.vocab_size);
    log_info("converted Megatron-LM checkpoint ", source, " (iteration ", iteration,
             ") into megatron-cpp's format: ", copy);
  }
  args.load = copy;
}

}  // namespace megatron::cli
