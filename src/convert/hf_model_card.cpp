#include "convert/hf_model_card.h"

#include <cstdio>
#include <filesystem>
#include <sstream>
#include <vector>

#include "convert/hf_directory.h"
#include "convert/hf_tokenizer_files.h"
#include "core/durable_file.h"

namespace megatron {

namespace {

// A recorded argument as the card prints it, or "" when the checkpoint does not record it
// (absent, null, Megatron's "None", or an empty list or string).
std::string arg(const nlohmann::json& args, const char* key) {
  if (!args.contains(key)) return "";
  const nlohmann::json& v = args[key];
  if (v.is_null()) return "";
  if (v.is_string()) return v.get<std::string>() == "None" ? "" : v.get<std::string>();
  if (v.is_array()) {
    std::string out;
    for (const nlohmann::json& e : v)
      out.append(out.empty() ? "" : " ").append(e.is_string() ? e.get<std::string>() : e.dump());
    return out;
  }
  return v.dump();
}

// 6967680 → "6,967,680".
std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0 && digits[i - 1] != '-') out += ',';
    out += digits[i];
  }
  return out;
}

// 6967680 → "7.0 M", 124439808 → "124.4 M", 1.3e9 → "1.30 B".
std::string short_count(int64_t n) {
  char buf[32];
  if (n >= 1000000000)
    std::snprintf(buf, sizeof buf, "%.2f B", double(n) / 1e9);
  else if (n >= 1000000)
    std::snprintf(buf, sizeof buf, "%.1f M", double(n) / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.1f k", double(n) / 1e3);
  return buf;
}

// "| name | value |" for each recorded (non-empty) value.
void table_row(std::ostringstream& out, const std::string& name, const std::string& value) {
  if (!value.empty()) out << "| " << name << " | " << value << " |\n";
}

bool is_encoder(const nlohmann::json& hf_config) {
  return hf_config.value("model_type", std::string()) == "bert";
}

void architecture(std::ostringstream& out, const nlohmann::json& state,
                  const nlohmann::json& hf_config, int64_t parameters) {
  const nlohmann::json model = state.value("model", nlohmann::json::object());
  const nlohmann::json args = state.value("args", nlohmann::json::object());
  out << "## Architecture\n\n| | |\n|---|---|\n";
  table_row(out, "layers", arg(model, "num_layers"));
  table_row(out, "hidden size", arg(model, "hidden_size"));
  table_row(out, "attention heads", arg(model, "num_attention_heads"));
  if (args.value("group_query_attention", false))
    table_row(out, "key/value head groups", arg(args, "num_query_groups"));
  table_row(out, "MLP hidden size", arg(model, "ffn_hidden_size"));
  table_row(out, "positions (longest context)", arg(model, "max_position_embeddings"));
  table_row(out, "position embedding", arg(args, "position_embedding_type"));
  table_row(out, "normalization", arg(args, "normalization"));
  if (args.value("swiglu", false)) table_row(out, "MLP activation", "SwiGLU");
  table_row(out, "vocabulary", arg(hf_config, "vocab_size"));
  table_row(out, "parameters", with_commas(parameters) + " (" + short_count(parameters) + ")");
  out << "\n";
}

void training(std::ostringstream& out, const nlohmann::json& state) {
  const nlohmann::json args = state.value("args", nlohmann::json::object());
  const int64_t iteration = state.value("iteration", int64_t(0));
  const nlohmann::json from = state.value("converted_from", nlohmann::json());
  out << "## Training\n\n";
  if (from.is_object())
    out << "The weights were imported from " << from.value("format", std::string("another format"))
        << " (`" << from.value("path", std::string("?")) << "`)"
        << (iteration == 0 ? " and not trained further by megatron-cpp: that model's own card "
                             "says how it was trained.\n\n"
                           : ", then trained further by megatron-cpp:\n\n");
  if (iteration == 0) {
    if (!from.is_object()) out << "Not trained: iteration 0 holds the initial weights.\n\n";
    return;
  }

  const int64_t samples = state.value("consumed_train_samples", int64_t(0));
  const std::string seq = arg(args, "seq_length");
  out << "Trained with megatron-cpp (Megatron-LM's training loop, flags and checkpoint layout, "
         "in C++) for "
      << with_commas(iteration) << " iterations";
  if (const std::string total = arg(args, "train_iters"); !total.empty())
    out << " (`--train-iters " << total << "`)";
  out << ".\n\n| | |\n|---|---|\n";
  std::string data = arg(args, "data_path");
  if (data.empty()) data = arg(args, "train_data_path");
  if (data.empty() && args.value("mock_data", false)) data = "synthetic tokens (`--mock-data`)";
  table_row(out, "training data", data.empty() ? "" : "`" + data + "`");
  table_row(out, "split (train, validation, test)", arg(args, "split"));
  table_row(out, "sequence length", seq);
  if (!seq.empty()) {
    const int64_t tokens = samples * std::stoll(seq);
    table_row(
        out, "tokens seen",
        with_commas(tokens) + " (" + with_commas(samples) + " sequences of " + seq + " tokens)");
  } else {
    table_row(out, "sequences seen", with_commas(samples));
  }
  const nlohmann::json tokenizer = checkpoint_tokenizer(state);
  if (tokenizer.is_object()) {
    std::string files;
    const nlohmann::json recorded = tokenizer.value("files", nlohmann::json::object());
    for (const auto& [key, file] : recorded.items())
      files += std::string(files.empty() ? "" : ", ") + "`" +
               (file.is_object() ? file.value("path", std::string()) : std::string()) + "`";
    table_row(out, "tokenizer",
              tokenizer.value("type", std::string()) + (files.empty() ? "" : " (" + files + ")"));
  }
  table_row(out, "global batch (sequences)", arg(args, "global_batch_size"));
  table_row(out, "micro-batch (sequences)", arg(args, "micro_batch_size"));
  std::string lr = arg(args, "lr");
  if (!lr.empty()) {
    const std::string min_lr = arg(args, "min_lr"), style = arg(args, "lr_decay_style");
    const std::string warmup = arg(args, "lr_warmup_iters"),
                      fraction = arg(args, "lr_warmup_fraction");
    if (!min_lr.empty()) lr += " to " + min_lr;
    if (!style.empty()) lr += ", " + style + " decay";
    if (!fraction.empty())
      lr += ", warm-up over a fraction " + fraction + " of the schedule";
    else if (!warmup.empty() && warmup != "0")
      lr += ", warm-up " + warmup + " iterations";
    table_row(out, "learning rate", lr);
  }
  table_row(out, "weight decay", arg(args, "weight_decay"));
  table_row(out, "gradient clipping (norm)", arg(args, "clip_grad"));
  table_row(out, "precision",
            args.value("bf16", false)           ? "bf16 (mixed)"
            : args.value("fp16", false)         ? "fp16 (mixed)"
            : args.is_object() && !args.empty() ? "fp32"
                                                : "");
  const std::string tp = arg(args, "tensor_model_parallel_size"),
                    pp = arg(args, "pipeline_model_parallel_size");
  if (!tp.empty())
    table_row(out, "parallel layout",
              "tensor-parallel " + tp + (pp.empty() ? "" : ", pipeline-parallel " + pp) +
                  " (the exported weights are whole)");
  table_row(out, "seed", arg(args, "seed"));
  out << "\n";
}

}  // namespace

std::string hf_model_card(const nlohmann::json& state, const nlohmann::json& hf_config,
                          int64_t parameters, const std::string& checkpoint_dir,
                          const std::string& hf_dir) {
  const std::string cls = hf_config.contains("architectures") && !hf_config["architectures"].empty()
                              ? hf_config["architectures"][0].get<std::string>()
                              : std::string("AutoModel");
  const std::string type = hf_config.value("model_type", std::string("unknown"));
  const bool encoder = is_encoder(hf_config);
  std::ostringstream out;
  out << "---\nlibrary_name: transformers\npipeline_tag: "
      << (encoder ? "fill-mask" : "text-generation") << "\ntags:\n- megatron-cpp\n- " << type
      << "\n---\n\n";
  out << "# " << std::filesystem::path(hf_dir).filename().string() << "\n\n";
  out << "A `" << cls << "` (model type `" << type << "`) of " << short_count(parameters)
      << " parameters, exported by megatron-cpp's `megatron convert --to hf` from the "
         "checkpoint `"
      << checkpoint_dir << "` (iteration " << state.value("iteration", int64_t(0)) << ").\n\n";
  architecture(out, state, hf_config, parameters);
  training(out, state);
  const bool hf_tokenizer =
      std::filesystem::exists(std::filesystem::path(hf_dir) / "tokenizer_config.json");
  out << "## How to load it\n\nWith HuggingFace `transformers`:\n\n```python\n"
      << "from transformers import " << cls << (hf_tokenizer ? ", AutoTokenizer" : "") << "\n\n"
      << "model = " << cls << ".from_pretrained(\"" << hf_dir << "\")\n";
  if (hf_tokenizer) out << "tokenizer = AutoTokenizer.from_pretrained(\"" << hf_dir << "\")\n";
  out << "```\n\nWith megatron-cpp (back to its checkpoint format, to train further or to "
         "serve at any tensor-parallel size):\n\n```bash\n"
      << "megatron convert --model-type " << (encoder ? "bert" : "gpt") << " --from hf --load "
      << hf_dir << " --save CHECKPOINT_DIR\n```\n";
  if (!hf_tokenizer)
    out << "\nNo tokenizer files for HF here (HF has none for this tokenizer type, or the "
           "checkpoint records none): tokenize with the tokenizer the model was trained with"
        << (state.contains("tokenizer") ? " (Training, above)" : "") << ".\n";
  return out.str();
}

void write_hf_model_card(const std::string& hf_dir, const nlohmann::json& state,
                         const std::string& checkpoint_dir) {
  const HfDirectory hf = read_hf_directory(hf_dir);
  int64_t parameters = 0;
  for (const auto& [name, tensor] : hf.tensors) parameters += tensor.numel();
  write_file_durably(hf_dir + "/README.md",
                     hf_model_card(state, hf.config, parameters, checkpoint_dir, hf_dir));
}

}  // namespace megatron
