#include "tasks/server.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <ctime>
#include <exception>
#include <fstream>

#include "core/logging.h"
#include "distributed/broadcast_bytes.h"
#include "tasks/generation.h"
#include "tasks/serve/access.h"
#include "tasks/serve/batch.h"
#include "tasks/serve/http_server.h"
#include "tasks/serve/json_body.h"
#include "tasks/serve/openai_routes.h"
#include "tasks/serve/serve_context.h"
#include "tasks/text_api.h"

namespace megatron {

namespace {

using nlohmann::json;

volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int) {
  g_stop_signal = 1;
}

// A request as the ranks exchange it: tokens and options, nothing the tokenizer must redo.
json job_json(const std::vector<std::vector<int32_t>>& prompts, const GenerationOptions& o) {
  return {{"prompts", prompts},
          {"tokens_to_generate", o.tokens_to_generate},
          {"temperature", o.sampling.temperature},
          {"top_k", o.sampling.top_k},
          {"top_p", o.sampling.top_p},
          {"seed", o.sampling.seed},
          {"request", o.request},
          {"logprobs", o.logprobs},
          {"top_logprobs", o.top_logprobs},
          {"stop_tokens", o.stop_tokens},
          {"stop_sequences", o.stop_sequences},
          {"stop_on_eol", o.stop_on_eol},
          {"stop_on_double_eol", o.stop_on_double_eol},
          {"eol_token", o.eol_token},
          {"double_eol_token", o.double_eol_token},
          {"top_p_decay", o.top_p_decay},
          {"top_p_bound", o.top_p_bound},
          {"pad_token", o.pad_token},
          {"max_tokens", o.max_tokens},
          {"row_requests", o.row_requests},
          {"row_indices", o.row_indices},
          {"row_tokens_to_generate", o.row_tokens_to_generate},
          {"cancellable", o.cancellable}};
}

void from_job_json(const json& j, std::vector<std::vector<int32_t>>& prompts,
                   GenerationOptions& o) {
  prompts = j.at("prompts").get<std::vector<std::vector<int32_t>>>();
  o.tokens_to_generate = j.at("tokens_to_generate");
  o.sampling.temperature = j.at("temperature");
  o.sampling.top_k = j.at("top_k");
  o.sampling.top_p = j.at("top_p");
  o.sampling.seed = j.at("seed");
  o.request = j.at("request");
  o.logprobs = j.at("logprobs");
  o.top_logprobs = j.at("top_logprobs");
  o.stop_tokens = j.at("stop_tokens").get<std::vector<int32_t>>();
  o.stop_sequences = j.at("stop_sequences").get<std::vector<std::vector<int32_t>>>();
  o.stop_on_eol = j.at("stop_on_eol");
  o.stop_on_double_eol = j.at("stop_on_double_eol");
  o.eol_token = j.at("eol_token");
  o.double_eol_token = j.at("double_eol_token");
  o.top_p_decay = j.at("top_p_decay");
  o.top_p_bound = j.at("top_p_bound");
  o.pad_token = j.at("pad_token");
  o.max_tokens = j.at("max_tokens");
  o.row_requests = j.at("row_requests").get<std::vector<uint64_t>>();
  o.row_indices = j.at("row_indices").get<std::vector<uint64_t>>();
  o.row_tokens_to_generate = j.at("row_tokens_to_generate").get<std::vector<int64_t>>();
  o.cancellable = j.at("cancellable");
}

constexpr const char* kStop = "stop";

// Runs one broadcast job on this rank; "" or the error every rank hit alike. Requests were
// checked before they were queued, so an error here is one the checks missed: it answers that
// request and the server goes on.
std::string run_job(GptModel& model, const std::vector<std::vector<int32_t>>& prompts,
                    const GenerationOptions& o, GenerationOutput& out,
                    const GenerationStepCallback& on_step = {},
                    const GenerationCancelCheck& cancelled = {}) {
  try {
    out = generate_tokens(model, prompts, o, on_step, cancelled);
    return "";
  } catch (const Error& e) {
    return e.message();
  } catch (const std::exception& e) {
    return std::string("the generation failed: ") + e.what();
  }
}

std::string json_string(const std::string& s) {
  return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

// Megatron's API answers errors with the message as a JSON string.
void reply_error(HttpResponder& res, int status, const std::string& message) {
  res.send(status, "application/json", json_string(message) + "\n");
}

bool is_openai_path(std::string_view path) {
  return path.substr(0, 4) == "/v1/";
}

// Any refusal, in the error format of the API the path belongs to.
void reply_refusal(HttpResponder& res, std::string_view path, int status,
                   const std::string& message) {
  if (is_openai_path(path))
    reply_openai_error(res, {status, message, "", status == 401 ? "invalid_api_key" : ""});
  else
    reply_error(res, status, message);
}

std::string now_string() {
  const std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  return buf;
}

// PUT /api: Megatron's API.
void serve_megatron_api(const HttpRequest& req, HttpResponder& res, ServeContext& c) {
  json body;
  if (std::string error = parse_json_body(req.body, body); !error.empty())
    return reply_error(res, 400, error);
  ApiRequest api;
  if (std::string error = parse_api_request(body, api); !error.empty())
    return reply_error(res, 400, error);
  auto job = std::make_shared<Job>();
  if (std::string error =
          prepare_generation(api, c.tokenizer, c.config, c.options.max_tokens, c.options.seed,
                             c.request_number++, job->prompts, job->options);
      !error.empty())
    return reply_error(res, 400, error);
  if (!api.no_log)
    log_info("request IP: ", req.remote_addr, "\n", json_log_summary(body),
             "\nstart time: ", now_string());
  if (std::string busy = c.queue.submit(job); !busy.empty()) return reply_error(res, 503, busy);
  if (!job->wait([&res] { return res.peer_closed(); })) return;  // the client left
  if (!job->error.empty()) return reply_error(res, 400, job->error);
  res.send(200, "application/json",
           api_response(job->output, c.tokenizer, api.logprobs)
                   .dump(-1, ' ', false, json::error_handler_t::replace) +
               "\n");
}

// Routes one well-framed request, after the access checks.
void route(const HttpRequest& req, HttpResponder& res, ServeContext& c, bool loopback) {
  if (loopback)
    if (std::string why = loopback_request_error(req); !why.empty())
      return reply_refusal(res, req.path, 403, why);
  const bool page = req.path == "/";
  if (!c.options.api_key.empty() && !page)
    if (std::string why = api_key_error(req, c.options.api_key); !why.empty())
      return reply_refusal(res, req.path, 401, why);
  struct Route {
    const char* path;
    const char* method;
  };
  static constexpr Route kRoutes[] = {{"/", "GET"},
                                      {"/api", "PUT"},
                                      {"/v1/models", "GET"},
                                      {"/v1/completions", "POST"},
                                      {"/v1/chat/completions", "POST"}};
  for (const Route& r : kRoutes) {
    if (req.path != r.path) continue;
    if (req.method != r.method) {
      res.send(405, "application/json",
               is_openai_path(req.path)
                   ? openai_error_json({405, std::string("use ") + r.method + " " + r.path, "", ""})
                             .dump() +
                         "\n"
                   : json_string(std::string("use ") + r.method + " " + r.path +
                                 (req.path == "/api" ? " with a JSON body" : "")) +
                         "\n",
               {{"Allow", r.method}});
      return;
    }
    if (page) {
      const json model = {{"name", c.options.model_name},
                          {"parameters", c.options.parameters},
                          {"context_length", c.config.max_position_embeddings},
                          {"api_key_required", !c.options.api_key.empty()}};
      res.send(200, "text/html; charset=utf-8", server_page_html(model));
    } else if (req.path == "/api") {
      serve_megatron_api(req, res, c);
    } else if (req.path == "/v1/models") {
      serve_openai_models(res, c);
    } else {
      serve_openai_completion(req, res, c, req.path == "/v1/chat/completions");
    }
    return;
  }
  reply_refusal(res, req.path, 404, "no such endpoint: " + req.path.substr(0, 200));
}

void serve_rank0(GptModel& model, const Tokenizer& tokenizer, const ServerOptions& opt) {
  Communicator& world = *model.parallel_state().world;
  JobQueue queue(opt.max_queued);
  ServeContext context{queue, tokenizer, model.config(), opt, int64_t(std::time(nullptr))};
  const bool loopback = is_loopback_host(opt.host);
  HttpLimits limits;
  limits.request_timeout_seconds = opt.timeout_seconds;
  limits.max_body_bytes = opt.max_request_bytes;
  limits.max_connections = opt.max_connections;
  HttpServer server(
      limits,
      [&](const HttpRequest& req, HttpResponder& res) {
        // The request boundary: whatever a handler throws answers this request only.
        try {
          route(req, res, context, loopback);
        } catch (const Error& e) {
          if (!res.responded()) reply_refusal(res, req.path, 500, "internal error: " + e.message());
        } catch (const std::exception& e) {
          if (!res.responded())
            reply_refusal(res, req.path, 500, std::string("internal error: ") + e.what());
        }
      },
      [](std::string_view path, int status, const std::string& reason, HttpResponder& res) {
        reply_refusal(res, path, status, reason);
      });

  int port = -1;
  try {
    port = server.bind(opt.host, opt.port);
  } catch (const Error&) {
    broadcast_string(world, kStop, 0);
    throw;
  }
  if (!opt.port_file.empty()) std::ofstream(opt.port_file) << port << "\n";
  if (!loopback && opt.api_key.empty())
    log_warning(
        "serve: listening on " + opt.host +
        ", beyond this machine, WITHOUT AUTHENTICATION: anyone who can reach port " +
        std::to_string(port) +
        " can use this model. Give --api-key KEY (clients send 'Authorization: Bearer KEY'), "
        "or listen on 127.0.0.1.");
  log_info("serve: listening on http://", opt.host, ":", port,
           "/  (PUT /api, POST /v1/completions, POST /v1/chat/completions, GET /v1/models; the "
           "web page at /)");
  server.start();

  int64_t served = 0;
  while (!g_stop_signal && (opt.max_requests == 0 || served < opt.max_requests)) {
    // The oldest queued request and every other that can run beside it.
    Batch batch;
    const size_t taken = queue.take([&](const std::shared_ptr<Job>& job) {
      return (opt.max_requests == 0 || served + int64_t(batch.jobs.size()) < opt.max_requests) &&
             batch.try_join(job, model.config());
    });
    if (taken == 0) continue;
    if (taken > 1)
      log_info("serve: ", taken, " requests run as one batch of ", batch.prompts.size(), " rows");
    broadcast_string(world, job_json(batch.prompts, batch.options).dump(), 0);
    GenerationOutput output;
    GenerationStepCallback on_step;
    if (batch.streaming())
      on_step = [&batch](int64_t, const std::vector<int32_t>& tokens,
                         const std::vector<char>& generated) {
        batch.record_step(tokens, generated);
      };
    const std::string error = run_job(model, batch.prompts, batch.options, output, on_step,
                                      [&batch] { return batch.cancelled_rows(); });
    if (const size_t left = batch.cancelled_jobs()) {
      size_t ended = 0, longest_prompt = 0;
      for (const auto& row : output.tokens) ended = std::max(ended, row.size());
      for (const auto& p : batch.prompts) longest_prompt = std::max(longest_prompt, p.size());
      log_info("serve: ", left, " request(s) cancelled (their clients left); the batch ended at ",
               ended, " of up to ", int64_t(longest_prompt) + batch.options.tokens_to_generate,
               " positions");
    }
    batch.finish(error, output);
    served += int64_t(taken);
  }
  log_info("serve: stopping after ", served, " request(s)");
  // Requests still queued (and any arriving now) get an answer rather than a dropped
  // connection; then every connection is closed and its thread joined.
  queue.close();
  broadcast_string(world, kStop, 0);
  server.stop();
}

void serve_other_rank(GptModel& model) {
  Communicator& world = *model.parallel_state().world;
  while (true) {
    const std::string message = broadcast_string(world, "", 0);
    if (message == kStop) return;
    std::vector<std::vector<int32_t>> prompts;
    GenerationOptions options;
    from_job_json(json::parse(message), prompts, options);
    GenerationOutput ignored;
    run_job(model, prompts, options, ignored);
  }
}

}  // namespace

void run_text_generation_server(GptModel& model, const Tokenizer& tokenizer,
                                const ServerOptions& options) {
  MT_CHECK(model.parallel_state().world->size() == model.parallel_state().tp_size,
           "serve: every process must be a tensor-parallel rank of the one model");
  g_stop_signal = 0;
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  if (model.parallel_state().world->rank() == 0)
    serve_rank0(model, tokenizer, options);
  else
    serve_other_rank(model);
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}

}  // namespace megatron
