#include "cli/checkpoint_args.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/logging.h"
#include "train/checkpoint_layout.h"

namespace megatron::cli {

namespace {

// Megatron's _set_arg: an unforced value only fills an unset (0) field.
template <typename T>
void set_arg(const nlohmann::json& saved, const char* name, T& field, bool force) {
  if (!force && field != T{}) return;
  auto it = saved.find(name);
  if (it == saved.end() || it->is_null()) {
    log_info("Checkpoint did not provide arguments ", name);
    return;
  }
  field = it->get<T>();
  log_info("Setting ", name, " to ", it->dump(), " from checkpoint");
}

}  // namespace

void load_args_from_checkpoint(Args& a) {
  MT_REQUIRE(!a.load.empty(), "--use-checkpoint-args needs --load DIR (the checkpoint to read)");
  const std::optional<int64_t> iteration = read_latest_iteration(a.load);
  MT_REQUIRE(iteration.has_value(), "--use-checkpoint-args: --load '", a.load, "' has no ",
             kTrackerFileName, "; expected a checkpoint directory");
  const std::string path =
      a.load + "/" + iteration_dir_name(*iteration) + "/" + rank_dir_name(0, 0, 1) + "/state.json";
  std::ifstream in(path);
  MT_REQUIRE(in.good(), "--use-checkpoint-args: cannot read '", path, "'");
  const nlohmann::json state = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  MT_REQUIRE(!state.is_discarded() && state.contains("args") && state["args"].is_object(),
             "--use-checkpoint-args: '", path, "' holds no arguments (\"args\")");
  const nlohmann::json& saved = state["args"];
  set_arg(saved, "num_layers", a.num_layers, false);
  set_arg(saved, "hidden_size", a.hidden_size, false);
  set_arg(saved, "ffn_hidden_size", a.ffn_hidden_size, false);
  set_arg(saved, "seq_length", a.seq_length, false);
  set_arg(saved, "num_attention_heads", a.num_attention_heads, false);
  set_arg(saved, "max_position_embeddings", a.max_position_embeddings, false);
  set_arg(saved, "attention_dropout", a.attention_dropout, true);
  set_arg(saved, "hidden_dropout", a.hidden_dropout, true);
}

}  // namespace megatron::cli
