#include "cli/setup/megatron_lm_save.h"

#include "convert/megatron_lm_checkpoint.h"
#include "core/logging.h"
#include "model/stage_range.h"

namespace megatron::cli {

namespace {

template <typename ConfigT>
void save_as_megatron_lm(TrainerConfig& config, const Args& args, const ConfigT& model) {
  if (args.ckpt_format != "torch") return;
  constexpr bool bert = std::is_same_v<ConfigT, BertConfig>;
  check_megatron_lm_exportable(model, "--ckpt-format torch: the model");
  const int tp = args.tensor_model_parallel_size, pp = args.pipeline_model_parallel_size;
  MT_REQUIRE(model.num_layers % pp == 0, "--ckpt-format torch writes ", model.num_layers,
             " layers as ", pp,
             " equal pipeline stages, which they do not divide into; "
             "leave --ckpt-format out (megatron-cpp's format)");
  config.save_as = [tp, pp](const std::string& staged, int64_t iteration,
                            const std::string& save_dir) {
    (bert ? export_megatron_lm_bert : export_megatron_lm_gpt)(staged, iteration, save_dir, tp, pp,
                                                              MegatronLmNaming::kCore);
    log_info("  wrote iteration ", iteration,
             " in Megatron-LM's torch format (--ckpt-format torch, ", tp, " tensor x ", pp,
             " pipeline ranks)");
  };
}

}  // namespace

void use_megatron_lm_save(TrainerConfig& config, const Args& args, const GptConfig& model) {
  save_as_megatron_lm(config, args, model);
}

void use_megatron_lm_save(TrainerConfig& config, const Args& args, const BertConfig& model) {
  save_as_megatron_lm(config, args, model);
}

}  // namespace megatron::cli
