// `megatron convert` — Megatron-LM's tools/checkpoint/convert.py: import/export HuggingFace
// GPT-2 and Llama-family (Llama, Mistral, Qwen2, Qwen3, and the mixtures of experts Mixtral,
// Qwen2-MoE, Qwen3-MoE; recognised from config.json or from the checkpoint's architecture
// arguments) checkpoints and change the tensor-parallel size of our
// checkpoints offline.
//
//   megatron convert --model-type gpt --from hf --load HF_DIR --save CKPT
//                    --target-tensor-parallel-size T
//   megatron convert --model-type gpt --from megatron --to hf --load CKPT --save HF_DIR
//   megatron convert --model-type gpt --load CKPT --save CKPT2 --target-tensor-parallel-size T
//                    [--target-pipeline-parallel-size P]
//                    [--use-distributed-optimizer --target-data-parallel-size D]
//   megatron convert --model-type gpt|bert --from megatron-lm --load MLM_CKPT --save CKPT|HF_DIR
//                    [--to megatron|hf] [--target-tensor-parallel-size T] [--vocab-size V]
//   megatron convert --model-type gpt|bert --to megatron-lm|megatron-lm-core --load CKPT|HF_DIR
//                    --save MLM_CKPT [--from megatron|hf] [--target-tensor-parallel-size T]
//                    [--target-pipeline-parallel-size P] [--ckpt-format torch|torch_dist]
//   megatron convert --model-type gpt --to gguf --load CKPT|HF_DIR|MLM_CKPT --save MODEL.gguf
//                    [--from megatron|hf|megatron-lm] [--gguf-dtype f32|f16|bf16]
//
// megatron-lm is Megatron-LM's legacy `torch` checkpoint format (mp_rank_*/model_optim_rng.pt),
// read in either parameter naming (legacy or Megatron-Core, detected) and written in the legacy
// naming (megatron-lm) or Megatron-Core's (megatron-lm-core), or — read only — its `torch_dist`
// format (metadata.json, .metadata, __R_K.distcp; detected; GPT family only), which
// --ckpt-format torch_dist writes (Megatron-Core's names); weights,
// iteration and model arguments cross, and the non-distributed optimizer's state and scheduler
// where the source has them (convert/megatron_lm_checkpoint.h), not the RNG state. A BERT
// (--model-type bert) is Megatron-LM's pre-LayerNorm BertModel, whose HF counterpart is
// MegatronBertForPreTraining. Between megatron-lm and HF the conversion goes through a
// megatron-cpp checkpoint in SAVE.megatron-cpp.tmp, removed after.
//
// With --use-distributed-optimizer the optimizer state is written as the D data-parallel ranks
// of a --use-distributed-optimizer run at the target TP × PP save it (one shard file each);
// without it, as whole buffers (which load at any DP size, sharded or not, all the same).
//
// gguf is llama.cpp's one-file format (convert/gguf_export.h), written, never read.
//
// Megatron's spellings work too: --model-type GPT | BERT, --loader / --saver (megatron, mcore
// or hf) for --from / --to, --load-dir / --save-dir, --true-vocab-size for --vocab-size;
// --megatron-path and --max-queue-size are accepted and have no effect here.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <map>
#include <optional>

#include "checkpoint/checkpoint.h"
#include "checkpoint/shards.h"
#include "cli/args/arg_table.h"
#include "cli/subcommands.h"
#include "convert/bert_checkpoint.h"
#include "convert/gguf_export.h"
#include "convert/gpt_checkpoint.h"
#include "convert/llama_checkpoint.h"
#include "convert/megatron_lm_checkpoint.h"
#include "core/logging.h"

namespace megatron::cli {

namespace {

// The megatron-cpp checkpoint SAVE.megatron-cpp.tmp that a conversion from HF or Megatron-LM
// passes through: `load` (`from` "hf" or "megatron-lm") imported at TP 1, removed again when
// this goes out of scope.
class IntermediateCheckpoint {
 public:
  IntermediateCheckpoint(const std::string& from, const std::string& load, int64_t load_iteration,
                         const std::string& save, int64_t vocab_size, int divisible_by,
                         bool bert = false)
      : path_(save + ".megatron-cpp.tmp") {
    MT_REQUIRE(!std::filesystem::exists(path_), "'", path_,
               "' exists (left by an interrupted conversion?): remove it and run again");
    try {
      if (from == "megatron-lm" && bert)
        import_megatron_lm_bert(load, load_iteration, path_, 1, vocab_size);
      else if (from == "megatron-lm")
        import_megatron_lm_gpt(load, load_iteration, path_, 1, vocab_size);
      else if (bert)
        import_hf_bert(load, path_, 1, divisible_by);
      else if (is_hf_llama_directory(load))
        import_hf_llama(load, path_, 1, divisible_by);
      else
        import_hf_gpt2(load, path_, 1, divisible_by);
    } catch (...) {
      std::filesystem::remove_all(path_);
      throw;
    }
  }
  ~IntermediateCheckpoint() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  IntermediateCheckpoint(const IntermediateCheckpoint&) = delete;
  IntermediateCheckpoint& operator=(const IntermediateCheckpoint&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Conversions to or from Megatron-LM's torch format (GPT family, or `bert`). Between it and HF
// the model passes through a megatron-cpp checkpoint at TP 1 in SAVE.megatron-cpp.tmp (removed
// after).
void convert_megatron_lm(const std::string& from, const std::string& to, const std::string& load,
                         const std::string& save, int64_t load_iteration, int target_tp,
                         int target_pp, int64_t vocab_size, int divisible_by,
                         int64_t max_shard_size, const TokenizerFileOverrides& tokenizer_files,
                         bool bert, const std::string& ckpt_format) {
  const bool to_megatron_lm = to == "megatron-lm" || to == "megatron-lm-core";
  if (from == "megatron-lm" && to == "megatron") {
    if (bert)
      import_megatron_lm_bert(load, load_iteration, save, target_tp, vocab_size);
    else
      import_megatron_lm_gpt(load, load_iteration, save, target_tp, vocab_size);
    log_info("converted Megatron-LM checkpoint ", load, " into checkpoint ", save,
             " (iteration 0, tensor-parallel size ", target_tp, ")");
    return;
  }
  std::string source = load;  // a megatron-cpp checkpoint
  int64_t source_iteration = load_iteration;
  std::optional<IntermediateCheckpoint> intermediate;
  if (from != "megatron") {
    intermediate.emplace(from, load, load_iteration, save, vocab_size, divisible_by, bert);
    source = intermediate->path();
    source_iteration = -1;
  }
  MT_REQUIRE(!(to_megatron_lm && bert && ckpt_format == "torch_dist"),
             "--ckpt-format torch_dist: a BERT is written in Megatron-LM's torch format only; "
             "leave out --ckpt-format");
  if (to_megatron_lm && ckpt_format == "torch_dist") {
    export_megatron_lm_gpt_torch_dist(source, source_iteration, save, target_tp, target_pp);
    log_info("wrote ", load, " as a Megatron-LM torch_dist checkpoint ", save, " (", target_tp,
             " tensor x ", target_pp, " pipeline ranks)");
  } else if (to_megatron_lm) {
    (bert ? export_megatron_lm_bert : export_megatron_lm_gpt)(
        source, source_iteration, save, target_tp, target_pp,
        to == "megatron-lm" ? MegatronLmNaming::kLegacy : MegatronLmNaming::kCore);
    log_info("wrote ", load, " as a Megatron-LM torch checkpoint ", save, " (",
             to == "megatron-lm" ? "legacy" : "Megatron-Core", " names, ", target_tp, " tensor x ",
             target_pp, " pipeline ranks)");
  } else {
    MT_REQUIRE(to == "hf", "--from megatron-lm --to ", to, " is not a conversion");
    if (bert)
      export_hf_bert(source, source_iteration, save, tokenizer_files);
    else if (is_llama_checkpoint(
                 CheckpointShardReader(checkpoint_iteration_dir(source, source_iteration))
                     .state(0, 0)))
      export_hf_llama(source, source_iteration, save, max_shard_size, tokenizer_files);
    else
      export_hf_gpt2(source, source_iteration, save, vocab_size, tokenizer_files);
    log_info("exported Megatron-LM checkpoint ", load, " as HF model ", save);
  }
}

// `--to gguf`: the checkpoint (or, --from hf / megatron-lm, the import of `load` into
// SAVE.megatron-cpp.tmp, removed after) as the GGUF file `save`.
void convert_to_gguf(const std::string& from, const std::string& load, const std::string& save,
                     int64_t load_iteration, int divisible_by, GgufExportOptions options) {
  std::string source = load;
  std::optional<IntermediateCheckpoint> intermediate;
  if (from != "megatron") {
    if (from == "hf") options.tokenizer_identity = hf_tokenizer_identity(load);
    intermediate.emplace(from, load, load_iteration, save, options.vocab_size, divisible_by);
    source = intermediate->path();
    load_iteration = -1;
  }
  // general.name: the directory the model came from.
  options.name = std::filesystem::absolute(load).lexically_normal().filename().string();
  if (options.name.empty())
    options.name =
        std::filesystem::absolute(load).lexically_normal().parent_path().filename().string();
  const std::filesystem::path parent = std::filesystem::absolute(save).parent_path();
  std::filesystem::create_directories(parent);
  const std::string arch = export_gguf(source, load_iteration, save, options);
  log_info("exported ", load, " as GGUF file ", save, " (llama.cpp architecture ", arch, ")");
}

}  // namespace

int run_convert(int argc, char** argv) {
  CLI::App app{"Convert checkpoints: HF GPT-2 <-> megatron-cpp, or change the TP size"};
  app.name("megatron convert");
  std::string model_type, from = "megatron", to = "megatron", load, save;
  TokenizerFileOverrides tokenizer_files;
  int target_tp = 1, target_pp = 1, target_dp = 1, divisible_by = 128;
  bool distributed_optimizer = false;
  int64_t load_iteration = -1, vocab_size = 0;
  std::string megatron_path;
  int max_queue_size = 0;
  // Megatron's --loader / --saver names: its own checkpoints are "megatron" or "mcore".
  const auto format_name = CLI::CheckedTransformer(
      std::map<std::string, std::string>{{"hf", "hf"},
                                         {"megatron", "megatron"},
                                         {"mcore", "megatron"},
                                         {"megatron-lm", "megatron-lm"},
                                         {"megatron-lm-core", "megatron-lm-core"},
                                         {"gguf", "gguf"}},
      CLI::ignore_case);
  app.add_option("--model-type", model_type, "model family: gpt or bert (GPT, BERT)")
      ->required()
      ->transform(CLI::Transformer(
          std::map<std::string, std::string>{{"gpt", "gpt"}, {"bert", "bert"}}, CLI::ignore_case));
  app.add_option("--from,--loader", from,
                 "format of --load: hf, megatron (or mcore: megatron-cpp's checkpoints) or "
                 "megatron-lm (Megatron-LM's torch or torch_dist format)")
      ->transform(format_name);
  app.add_option("--to,--saver", to,
                 "format of --save: megatron (or mcore), hf, or megatron-lm / megatron-lm-core "
                 "(Megatron-LM's torch format, legacy or Megatron-Core parameter names) or gguf "
                 "(one file for llama.cpp)")
      ->transform(format_name);
  app.add_option("--load,--load-dir", load, "directory to read (HF model directory or checkpoint)")
      ->required();
  app.add_option("--save,--save-dir", save, "directory to write")->required();
  app.add_option("--megatron-path", megatron_path,
                 "Megatron-LM's source directory (no effect: nothing is imported from it)");
  app.add_option("--max-queue-size", max_queue_size,
                 "Megatron's loader-saver queue (no effect: conversion runs in one process)");
  app.add_option("--target-tensor-parallel-size", target_tp,
                 "tensor-parallel size of the written checkpoint");
  app.add_option("--target-pipeline-parallel-size", target_pp,
                 "pipeline-parallel size of the written checkpoint (megatron to megatron)");
  CLI::Option* target_dp_option =
      app.add_option("--target-data-parallel-size", target_dp,
                     "with --use-distributed-optimizer: data-parallel ranks whose optimizer "
                     "shards are written (megatron to megatron)");
  app.add_flag("--use-distributed-optimizer", distributed_optimizer,
               "write the optimizer state as a --use-distributed-optimizer run's DP shards");
  app.add_option("--make-vocab-size-divisible-by", divisible_by,
                 "HF import (and HF to Megatron-LM): pad the vocabulary to a multiple of this x "
                 "TP size");
  app.add_option("--load-iteration", load_iteration,
                 "checkpoint iteration to read (default: the latest)");
  app.add_option("--vocab-size,--true-vocab-size", vocab_size,
                 "HF export: real vocabulary size when state.json does not record it");
  app.add_option("--vocab-file", tokenizer_files.vocab_file,
                 "HF export: the tokenizer's vocabulary, when it moved since training");
  app.add_option("--merge-file", tokenizer_files.merge_file,
                 "HF export: the GPT-2 BPE merges, when they moved since training");
  app.add_option("--tokenizer-model", tokenizer_files.tokenizer_model,
                 "HF and GGUF export: the SentencePiece model, when it moved since training");
  int64_t max_shard_size = 5000000000;
  app.add_option("--max-shard-size", max_shard_size,
                 "HF export of Llama-family models: bytes per safetensors shard (HF's 5GB)");
  std::string ckpt_format = "torch";
  app.add_option("--ckpt-format", ckpt_format,
                 "--to megatron-lm / megatron-lm-core: Megatron-LM's torch format "
                 "(mp_rank_*/model_optim_rng.pt, the default) or torch_dist (.metadata + "
                 "__R_0.distcp, Megatron-Core's names)")
      ->check(CLI::IsMember({"torch", "torch_dist"}));
  std::string gguf_dtype = "f32";
  app.add_option("--gguf-dtype,--outtype", gguf_dtype,
                 "GGUF export: the matrices' type, f32 (lossless, the default), f16 or bf16 "
                 "(norms, biases and position embeddings stay f32)");
  if (int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;
  // --from megatron-lm reads either naming; "megatron-lm-core" only chooses what is written.
  if (from == "megatron-lm-core") from = "megatron-lm";
  const bool megatron_lm = from == "megatron-lm" || to == "megatron-lm" || to == "megatron-lm-core";

  MT_REQUIRE(model_type == "gpt" || model_type == "bert", "--model-type ", model_type,
             " is not supported by convert (expected gpt or bert)");
  MT_REQUIRE(target_tp >= 1, "--target-tensor-parallel-size must be >= 1, got ", target_tp);
  MT_REQUIRE(target_pp >= 1, "--target-pipeline-parallel-size must be >= 1, got ", target_pp);
  MT_REQUIRE(
      target_pp == 1 || (from == "megatron" && to == "megatron") || to.rfind("megatron-lm", 0) == 0,
      "--target-pipeline-parallel-size ", target_pp,
      " is supported when resharding checkpoints (megatron to megatron) and when writing "
      "Megatron-LM's format; imports write pipeline size 1");
  MT_REQUIRE(target_dp >= 1, "--target-data-parallel-size must be >= 1, got ", target_dp);
  MT_REQUIRE(distributed_optimizer || target_dp_option->count() == 0,
             "--target-data-parallel-size ", target_dp,
             " needs --use-distributed-optimizer: whole optimizer buffers load at any "
             "data-parallel size, only the distributed optimizer's shards depend on it");
  MT_REQUIRE(!distributed_optimizer || (from == "megatron" && to == "megatron"),
             "--use-distributed-optimizer is supported when resharding checkpoints (megatron to "
             "megatron): HF imports have no optimizer state, and HF exports none");
  MT_REQUIRE(from != "hf" || to != "hf", "--from hf --to hf is not a conversion");
  MT_REQUIRE(ckpt_format == "torch" || to == "megatron-lm" || to == "megatron-lm-core",
             "--ckpt-format ", ckpt_format,
             " chooses the Megatron-LM format written by --to megatron-lm-core (or megatron-lm); "
             "--to ",
             to, " writes no Megatron-LM checkpoint");
  MT_REQUIRE(from != "gguf", "--from gguf: GGUF files are written (--to gguf), not read");
  MT_REQUIRE(std::filesystem::weakly_canonical(load) != std::filesystem::weakly_canonical(save),
             "--load and --save are both '", load, "': write the conversion elsewhere");
  if (to == "gguf") {
    MT_REQUIRE(model_type == "gpt", "--model-type ", model_type,
               ": llama.cpp has no BERT architecture this export writes; only GPT-family models "
               "(GPT-2 and Llama-style) convert to GGUF");
    MT_REQUIRE(target_tp == 1 && target_pp == 1,
               "--to gguf writes one file for one process: leave out --target-tensor-parallel-size "
               "and --target-pipeline-parallel-size");
    convert_to_gguf(
        from, load, save, load_iteration, divisible_by,
        {gguf_tensor_type_from_name(gguf_dtype), vocab_size, "", tokenizer_files, nullptr});
  } else if (megatron_lm) {
    convert_megatron_lm(from, to, load, save, load_iteration, target_tp, target_pp, vocab_size,
                        divisible_by, max_shard_size, tokenizer_files, model_type == "bert",
                        ckpt_format);
  } else if (model_type == "bert" && from == "hf") {
    import_hf_bert(load, save, target_tp, divisible_by);
    log_info("converted HF BERT ", load, " into checkpoint ", save,
             " (iteration 0, tensor-parallel size ", target_tp, ")");
  } else if (model_type == "bert" && to == "hf") {
    export_hf_bert(load, load_iteration, save, tokenizer_files);
    log_info("exported checkpoint ", load, " as HF BERT ", save);
  } else if (from == "hf" && is_hf_llama_directory(load)) {
    import_hf_llama(load, save, target_tp, divisible_by);
    log_info("converted HF Llama-family model ", load, " into checkpoint ", save,
             " (iteration 0, tensor-parallel size ", target_tp, ")");
  } else if (to == "hf" && is_llama_checkpoint(
                               CheckpointShardReader(checkpoint_iteration_dir(load, load_iteration))
                                   .state(0, 0))) {
    export_hf_llama(load, load_iteration, save, max_shard_size, tokenizer_files);
    log_info("exported checkpoint ", load, " as an HF Llama-family model ", save);
  } else if (from == "hf") {
    import_hf_gpt2(load, save, target_tp, divisible_by);
    log_info("converted HF GPT-2 ", load, " into checkpoint ", save,
             " (iteration 0, tensor-parallel size ", target_tp, ")");
  } else if (to == "hf") {
    export_hf_gpt2(load, load_iteration, save, vocab_size, tokenizer_files);
    log_info("exported checkpoint ", load, " as HF GPT-2 ", save);
  } else {
    reshard_checkpoint(
        load, load_iteration, save, target_tp, target_pp,
        distributed_optimizer
            ? DistributedOptimizerTarget{target_dp, model_type == "bert" ? bert_rank_parameters
                                                                         : gpt_rank_parameters}
            : DistributedOptimizerTarget{});
    log_info("resharded checkpoint ", load, " into ", save, " at tensor-parallel size ", target_tp,
             ", pipeline-parallel size ", target_pp,
             distributed_optimizer && target_dp > 1
                 ? ", the optimizer state as the distributed optimizer's " +
                       std::to_string(target_dp) + " data-parallel shards"
                 : std::string());
  }
  return 0;
}

}  // namespace megatron::cli
