// `megatron serve` — Megatron-LM's text generation server: loads a GPT checkpoint at the job's
// tensor-parallel size (mpirun -np T), rank 0 answers PUT /api (Megatron's API) and serves a web
// page at /, every rank generates. Binds 127.0.0.1 unless --host says otherwise.
#include <CLI/CLI.hpp>

#include "cli/args/arg_table.h"
#include "cli/setup/inference_setup.h"
#include "cli/subcommands.h"
#include "core/logging.h"
#include "tasks/server.h"

namespace megatron::cli {

int run_serve(int argc, char** argv) {
  CLI::App app{"Serve Megatron's text generation API (PUT /api) and a web page", "megatron serve"};
  InferenceArgs ia;
  add_inference_args(app, ia);
  ServerOptions so;
  app.add_option("--host", so.host, "address to listen on (default 127.0.0.1: this machine only)");
  app.add_option("--port", so.port, "port to listen on (0: any free port)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--port-file", so.port_file, "write the port listened on to this file");
  app.add_option("--max-request-bytes", so.max_request_bytes,
                 "largest request body accepted (larger: 413)");
  app.add_option("--request-timeout", so.timeout_seconds,
                 "seconds allowed to read a request or write a response")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-queued-requests", so.max_queued,
                 "requests waiting for the model beyond this are answered 503")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-requests", so.max_requests,
                 "stop after this many generations (default 0: serve until SIGINT/SIGTERM)");
  if (int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;

  InferenceModel m = load_inference_model(ia);
  so.max_tokens = ia.max_tokens_to_oom;
  so.seed = ia.seed;
  log_info("serve: ", m.description);
  run_text_generation_server(*m.model, *m.tokenizer, so);
  return 0;
}

}  // namespace megatron::cli
