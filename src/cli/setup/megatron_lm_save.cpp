#include "cli/setup/megatron_lm_save.h"

#include "convert/megatron_lm_checkpoint.h"
#include "core/logging.h"

namespace megatron::cli {

void use_megatron_lm_save(TrainerConfig& config, const Args& args, MegatronLmFamily family) {
  if (args.ckpt_format != "torch") return;
  const int tp = args.tensor_model_parallel_size, pp = args.pipeline_model_parallel_size;
  config.save_as = [tp, pp, family](const std::string& staged, int64_t iteration,
                                    const std::string& save_dir) {
    (family == MegatronLmFamily::kBert ? export_megatron_lm_bert : export_megatron_lm_gpt)(
        staged, iteration, save_dir, tp, pp, MegatronLmNaming::kCore);
    log_info("  wrote iteration ", iteration,
             " in Megatron-LM's torch format (--ckpt-format "
             "torch, ",
             tp, " tensor x ", pp, " pipeline ranks)");
  };
}

}  // namespace megatron::cli
