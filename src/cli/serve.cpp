// `megatron serve` — Megatron-LM's text generation server and OpenAI's API: loads a GPT
// checkpoint at the job's tensor-parallel size (mpirun -np T), rank 0 answers HTTP
// (tasks/server.h), every rank generates. Binds 127.0.0.1 unless --host says otherwise.
#include <CLI/CLI.hpp>
#include <filesystem>

#include "cli/args/arg_table.h"
#include "cli/setup/inference_setup.h"
#include "cli/subcommands.h"
#include "core/logging.h"
#include "tasks/serve/chat_template_file.h"
#include "tasks/server.h"

namespace megatron::cli {

namespace {

// The model's parameters as if unsplit (the vocabulary without its padding).
int64_t parameter_count(const ParameterStore& store) {
  int64_t total = 0;
  for (const Parameter& p : store.params()) {
    int64_t n = 1;
    for (size_t d = 0; d < p.spec.full_shape.size(); ++d)
      n *= d == 0 && p.spec.vocab_rows > 0 ? p.spec.vocab_rows : p.spec.full_shape[d];
    total += n;
  }
  return total;
}

}  // namespace

int run_serve(int argc, char** argv) {
  CLI::App app{
      "Serve Megatron's text generation API (PUT /api), OpenAI's API (/v1/completions, "
      "/v1/chat/completions, /v1/models) and a web page",
      "megatron serve"};
  InferenceArgs ia;
  add_inference_args(app, ia);
  ServerOptions so;
  std::string chat_template;
  app.add_option("--host", so.host, "address to listen on (default 127.0.0.1: this machine only)");
  app.add_option("--port", so.port, "port to listen on (0: any free port)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--port-file", so.port_file, "write the port listened on to this file");
  app.add_option("--max-request-bytes", so.max_request_bytes,
                 "largest request body accepted (larger: 413)");
  app.add_option("--request-timeout", so.timeout_seconds,
                 "seconds allowed to receive a whole request, and for each write of an answer")
      ->check(CLI::Range(1, 3600));
  app.add_option("--max-connections", so.max_connections,
                 "connections served at once; more are answered 503 (default 64)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--max-queued-requests", so.max_queued,
                 "requests waiting for the model beyond this are answered 503")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-num-seqs", so.max_num_seqs,
                 "sequences decoded together (continuous batching: the KV cache's slots, each "
                 "of the model's context; default 32; 1 serves one sequence at a time)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--max-requests", so.max_requests,
                 "stop after this many generations (default 0: serve until SIGINT/SIGTERM)");
  app.add_option("--api-key", so.api_key,
                 "require 'Authorization: Bearer KEY' on every request but the web page");
  app.add_option("--served-model-name", so.model_name,
                 "the model's name in /v1/models and OpenAI requests (default: the --load "
                 "directory's name)");
  app.add_option("--chat-template", chat_template,
                 "the chat template for /v1/chat/completions: a tokenizer_config.json or a Jinja "
                 "file (default: the tokenizer_config.json beside an HF --tokenizer-model)");
  if (int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;

  InferenceModel m = load_inference_model(ia);
  if (chat_template.empty()) chat_template = chat_template_beside(ia.tokenizer_model);
  if (!chat_template.empty()) {
    const ChatTemplateFile t = read_chat_template_file(chat_template);
    so.chat_template = t.source;
    so.bos_token = t.bos_token;
    so.eos_token = t.eos_token;
  }
  so.max_tokens = ia.max_tokens_to_oom;
  so.seed = ia.seed;
  so.parameters = parameter_count(*m.store);
  if (so.model_name.empty()) {
    std::filesystem::path load = std::filesystem::path(ia.load).lexically_normal();
    if (!load.has_filename()) load = load.parent_path();  // "ckpt/" names "ckpt"
    so.model_name = load.filename().string();
  }
  if (so.model_name.empty() || so.model_name == ".") so.model_name = "megatron";
  log_info("serve: ", m.description);
  run_text_generation_server(*m.model, *m.tokenizer, so);
  return 0;
}

}  // namespace megatron::cli
