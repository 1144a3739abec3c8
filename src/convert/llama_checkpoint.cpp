#include "convert/llama_checkpoint.h"

#include "checkpoint/architecture_json.h"
#include "checkpoint/model_shape.h"
#include "convert/convert_common.h"
#include "convert/gpt_checkpoint.h"
#include "convert/hf_directory.h"
#include "convert/hf_llama.h"
#include "convert/hf_model_card.h"
#include "convert/hf_moe.h"
#include "core/logging.h"
#include "kernels/elementwise.h"

namespace megatron {

namespace {

// The dtype HF's config.json names ("torch_dtype"); f32 when absent or unknown.
DType hf_dtype(const nlohmann::json& config) {
  const std::string name = config.value("torch_dtype", std::string("float32"));
  return name == "bfloat16" ? DType::BF16 : name == "float16" ? DType::F16 : DType::F32;
}

}  // namespace

bool is_hf_llama_directory(const std::string& hf_dir) {
  return !hf_llama_architecture(read_hf_directory(hf_dir).config).empty();
}

void import_hf_llama(const std::string& hf_dir, const std::string& save_dir, int target_tp,
                     int make_vocab_size_divisible_by) {
  MT_REQUIRE(target_tp >= 1, "--target-tensor-parallel-size must be >= 1, got ", target_tp);
  HfDirectory hf = read_hf_directory(hf_dir);
  const int64_t real_vocab = hf.config.value("vocab_size", int64_t(0));
  GptConfig config = gpt_config_from_hf_llama(
      hf.config, padded_vocab_size(real_vocab, make_vocab_size_divisible_by, target_tp));
  const TensorMap full = gpt_tensors_from_hf_llama(hf.tensors, config);

  nlohmann::json state = imported_checkpoint_state(
      gpt_model_shape_json(config), gpt_imported_args(config), make_vocab_size_divisible_by,
      target_tp, "hf-llama", hf_dir, hf.config_text);
  state["converted_from"]["architecture"] = hf_llama_architecture(hf.config);
  state["converted_from"]["torch_dtype"] = hf.config.value("torch_dtype", std::string("float32"));
  write_imported_checkpoint<GptModel>(save_dir, config, full, state, target_tp);
}

bool is_llama_checkpoint(const nlohmann::json& state) {
  const ArchitectureOptions a =
      architecture_from_args_json(state.value("args", nlohmann::json::object()));
  // An MLA model is none (its HF export is refused on the GPT-2 path).
  return a.swiglu && a.normalization == Normalization::kRMSNorm &&
         a.position_embedding == PositionEmbedding::kRope && !a.mla.enabled;
}

void export_hf_llama(const std::string& load_dir, int64_t iteration, const std::string& hf_dir,
                     int64_t max_shard_bytes, const TokenizerFileOverrides& tokenizer_files) {
  CheckpointShardReader reader(checkpoint_iteration_dir(load_dir, iteration));
  const nlohmann::json state = reader.state(0, 0);
  const GptConfig c = gpt_config_from_checkpoint_state(state, reader.iteration_dir());
  warn_mtp_not_exported(c, "HF Llama");
  const nlohmann::json from = state.value("converted_from", nlohmann::json::object());
  const std::string architecture =
      from.value("architecture", c.arch.moe.enabled()  ? hf_moe_architecture_of(c)
                                 : c.arch.add_qkv_bias ? std::string("Qwen2ForCausalLM")
                                 : c.arch.qk_layernorm ? std::string("Qwen3ForCausalLM")
                                                       : std::string("LlamaForCausalLM"));

  const TensorMap full =
      read_full_model_tensors(reader, registered_parameter_store<GptModel>(c, 0, 1));
  HfDirectory out;
  out.config = hf_llama_config_from_gpt(c, architecture);
  const DType dtype = hf_dtype(from);
  out.config["torch_dtype"] = from.value("torch_dtype", std::string("float32"));
  const std::string config_text =
      exported_hf_config_text(state, out.config, [&](const nlohmann::json& j) {
        nlohmann::json d = gpt_hf_description(gpt_config_from_hf_llama(j, c.padded_vocab_size));
        d["architecture"] = hf_llama_architecture(j);
        d["torch_dtype"] = j.value("torch_dtype", std::string("float32"));
        return d;
      });
  for (auto& [name, t] : hf_llama_tensors_from_gpt(full, c)) {
    Tensor stored = t;
    if (dtype != DType::F32) {
      stored = Tensor::empty(t.shape(), dtype);
      kernels::cast(t, stored);
    }
    out.tensors[name] = stored;
  }
  write_hf_directory(hf_dir, out, max_shard_bytes, config_text);
  // An HF import records no tokenizer (its files stay in the source directory).
  if (const nlohmann::json tokenizer = checkpoint_tokenizer(state); !tokenizer.is_null())
    write_hf_tokenizer_files(hf_dir, tokenizer, c.vocab_size, c.max_position_embeddings,
                             tokenizer_files);
  write_hf_model_card(hf_dir, state, reader.iteration_dir());
}

}  // namespace megatron
