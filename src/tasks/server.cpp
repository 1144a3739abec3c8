#include "tasks/server.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <ctime>
#include <exception>
#include <fstream>
#include <optional>

#include "core/logging.h"
#include "distributed/broadcast_bytes.h"
#include "tasks/continuous_batch.h"
#include "tasks/serve/access.h"
#include "tasks/serve/http_server.h"
#include "tasks/serve/json_body.h"
#include "tasks/serve/openai_routes.h"
#include "tasks/serve/row_scheduler.h"
#include "tasks/serve/serve_context.h"
#include "tasks/text_api.h"

namespace megatron {

namespace {

using nlohmann::json;

volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int) {
  g_stop_signal = 1;
}

// A sequence's rules as the ranks exchange them: tokens and options, nothing the tokenizer
// must redo.
json options_json(const GenerationOptions& o) {
  return {{"tokens_to_generate", o.tokens_to_generate},
          {"temperature", o.sampling.temperature},
          {"top_k", o.sampling.top_k},
          {"top_p", o.sampling.top_p},
          {"seed", o.sampling.seed},
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
          {"max_tokens", o.max_tokens}};
}

GenerationOptions options_from_json(const json& j) {
  GenerationOptions o;
  o.tokens_to_generate = j.at("tokens_to_generate");
  o.sampling.temperature = j.at("temperature");
  o.sampling.top_k = j.at("top_k");
  o.sampling.top_p = j.at("top_p");
  o.sampling.seed = j.at("seed");
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
  o.max_tokens = j.at("max_tokens");
  return o;
}

constexpr const char* kStop = "stop";

// One token boundary's changes to the running batch, as rank 0 broadcasts them: the slots to
// end (clients that left) and the sequences that start, with their slots.
struct BoundaryPlan {
  std::vector<int64_t> cancel;
  std::vector<std::pair<int64_t, SequenceRequest>> add;
};

std::string plan_json(const BoundaryPlan& plan) {
  json added = json::array();
  for (const auto& [slot, seq] : plan.add)
    added.push_back({{"slot", slot},
                     {"prompt", seq.prompt},
                     {"request", seq.request},
                     {"index", seq.index},
                     {"options", options_json(seq.options)}});
  return json{{"cancel", plan.cancel}, {"add", added}}.dump();
}

BoundaryPlan plan_from_json(const std::string& message) {
  const json j = json::parse(message);
  BoundaryPlan plan;
  plan.cancel = j.at("cancel").get<std::vector<int64_t>>();
  for (const json& a : j.at("add")) {
    SequenceRequest seq;
    seq.prompt = a.at("prompt").get<std::vector<int32_t>>();
    seq.request = a.at("request");
    seq.index = a.at("index");
    seq.options = options_from_json(a.at("options"));
    plan.add.emplace_back(a.at("slot").get<int64_t>(), std::move(seq));
  }
  return plan;
}

// The running batch of this rank: every rank makes the same calls, so every rank's batch is
// the same. A step that throws (on every rank alike: the checks before it are the same) leaves
// the batch unusable, so it is built anew.
class RankBatch {
 public:
  RankBatch(GptModel& model, int64_t slots) : model_(model), slots_(slots) { reset(); }
  ContinuousBatch& get() { return *batch_; }
  void reset() { batch_.emplace(model_, slots_, model_.config().max_position_embeddings); }
  // Applies rank 0's plan (the slots it names are the ones add() picks on every rank) and runs
  // the step; "" or the error every rank hit alike.
  std::string step(const BoundaryPlan& plan, StepReport& report) {
    try {
      for (int64_t slot : plan.cancel) batch_->cancel(slot);
      for (const auto& [slot, seq] : plan.add)
        MT_CHECK(batch_->add(seq) == slot, "serve: the ranks' batches disagree on slot ", slot);
      report = batch_->step();
      return "";
    } catch (const Error& e) {
      reset();
      return e.message();
    } catch (const std::exception& e) {
      reset();
      return std::string("the generation failed: ") + e.what();
    }
  }

 private:
  GptModel& model_;
  int64_t slots_;
  std::optional<ContinuousBatch> batch_;
};

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

  RankBatch batch(model, opt.max_num_seqs);
  RowScheduler scheduler(opt.max_num_seqs);
  int64_t taken = 0;  // requests taken from the queue
  const auto all_taken = [&] { return opt.max_requests > 0 && taken >= opt.max_requests; };
  while (!g_stop_signal && !(all_taken() && scheduler.open_requests() == 0)) {
    // A token boundary: rows whose clients left end, queued rows start in the free slots.
    BoundaryPlan plan;
    for (int64_t slot : scheduler.cancelled_slots()) {
      const SequenceState& seq = batch.get().sequence(slot);
      log_info("serve: a request was cancelled (its client left); its row ended at ",
               seq.tokens.size(), " of up to ",
               int64_t(seq.spec.prompt.size()) + seq.spec.options.tokens_to_generate, " positions");
      plan.cancel.push_back(slot);
    }
    const int64_t running = scheduler.running_rows() - int64_t(plan.cancel.size());
    std::vector<int64_t> free;
    for (int64_t slot = 0; slot < batch.get().slots(); ++slot)
      if (!batch.get().used(slot)) free.push_back(slot);
    for (int64_t slot : free) {
      // Wait for work only when nothing runs.
      const bool wait = running == 0 && plan.add.empty() && plan.cancel.empty();
      const std::optional<RowScheduler::Row> row =
          scheduler.next_row([&]() -> std::shared_ptr<Job> {
            while (!all_taken()) {
              std::shared_ptr<Job> job = queue.pop(std::chrono::milliseconds(wait ? 200 : 0));
              if (!job) return nullptr;
              ++taken;
              // Checked before queueing; a row that still cannot fit a slot answers its request
              // alone rather than failing the step of every running row.
              std::string error;
              for (size_t r = 0; r < job->prompts.size() && error.empty(); ++r)
                error = batch.get().fit_error({job->prompts[r], job->options, 0, 0});
              if (error.empty()) return job;
              job->finish(error, {});
            }
            return nullptr;
          });
      if (!row) break;
      SequenceRequest seq{row->job->prompts[row->row], row->job->options, row->job->options.request,
                          uint64_t(row->row)};
      plan.add.emplace_back(slot, std::move(seq));
      scheduler.started(slot, *row);
    }
    if (plan.add.empty() && plan.cancel.empty() && running == 0) continue;
    if (!plan.add.empty() && running > 0)
      log_info("serve: ", plan.add.size(), " row(s) join the running batch of ", running,
               " at a token boundary");
    broadcast_string(world, plan_json(plan), 0);
    StepReport report;
    if (std::string error = batch.step(plan, report); !error.empty()) {
      scheduler.fail_all(error);
      continue;
    }
    for (int64_t slot : report.advanced) scheduler.advanced(slot, batch.get().sequence(slot));
    for (auto& [slot, output] : report.finished) scheduler.finished(slot, std::move(output));
  }
  log_info("serve: stopping after ", taken, " request(s)");
  // Requests running or still queued (and any arriving now) get an answer rather than a
  // dropped connection; then every connection is closed and its thread joined.
  scheduler.fail_all("the server is shutting down");
  queue.close();
  broadcast_string(world, kStop, 0);
  server.stop();
}

void serve_other_rank(GptModel& model, int64_t slots) {
  Communicator& world = *model.parallel_state().world;
  RankBatch batch(model, slots);
  while (true) {
    const std::string message = broadcast_string(world, "", 0);
    if (message == kStop) return;
    StepReport ignored;
    batch.step(plan_from_json(message), ignored);
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
    serve_other_rank(model, options.max_num_seqs);
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}

}  // namespace megatron
