#include "tasks/server.h"

#ifdef MEGATRON_HAS_HTTPLIB
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <ctime>
#include <deque>
#include <fstream>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/logging.h"
#include "distributed/broadcast_bytes.h"
#include "tasks/generation.h"
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
          {"stop_tokens", o.stop_tokens},
          {"stop_on_eol", o.stop_on_eol},
          {"stop_on_double_eol", o.stop_on_double_eol},
          {"eol_token", o.eol_token},
          {"double_eol_token", o.double_eol_token},
          {"top_p_decay", o.top_p_decay},
          {"top_p_bound", o.top_p_bound},
          {"pad_token", o.pad_token},
          {"max_tokens", o.max_tokens}};
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
  o.stop_tokens = j.at("stop_tokens").get<std::vector<int32_t>>();
  o.stop_on_eol = j.at("stop_on_eol");
  o.stop_on_double_eol = j.at("stop_on_double_eol");
  o.eol_token = j.at("eol_token");
  o.double_eol_token = j.at("double_eol_token");
  o.top_p_decay = j.at("top_p_decay");
  o.top_p_bound = j.at("top_p_bound");
  o.pad_token = j.at("pad_token");
  o.max_tokens = j.at("max_tokens");
}

constexpr const char* kStop = "stop";

// Runs one broadcast job on this rank; "" or the error every rank hit alike.
std::string run_job(GptModel& model, const std::vector<std::vector<int32_t>>& prompts,
                    const GenerationOptions& o, GenerationOutput& out) {
  try {
    out = generate_tokens(model, prompts, o);
    return "";
  } catch (const Error& e) {
    return e.message();
  }
}

struct Job {
  std::vector<std::vector<int32_t>> prompts;
  GenerationOptions options;
  std::promise<std::pair<std::string, GenerationOutput>> done;  // (error, output)
};

std::string json_string(const std::string& s) {
  return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

void reply_error(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  res.set_content(json_string(message) + "\n", "application/json");
}

std::string now_string() {
  const std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  return buf;
}

void serve_rank0(GptModel& model, const Tokenizer& tokenizer, const ServerOptions& opt) {
  Communicator& world = *model.parallel_state().world;
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<std::shared_ptr<Job>> queue;
  std::atomic<uint64_t> request_number{0};
  bool stopping = false;  // guarded by mutex

  httplib::Server server;
  server.set_payload_max_length(opt.max_request_bytes);
  server.set_read_timeout(opt.timeout_seconds, 0);
  server.set_write_timeout(opt.timeout_seconds, 0);
  server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(server_page_html(), "text/html; charset=utf-8");
  });
  const auto wrong_method = [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Allow", "PUT");
    reply_error(res, 405, "use PUT /api with a JSON body");
  };
  server.Get("/api", wrong_method);
  server.Post("/api", wrong_method);
  server.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr error) {
        std::string what = "unknown error";
        try {
          std::rethrow_exception(error);
        } catch (const Error& e) {
          what = e.message();
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        reply_error(res, 500, "internal error: " + what);
      });
  server.Put("/api", [&](const httplib::Request& req, httplib::Response& res) {
    json body;
    try {
      body = json::parse(req.body);
    } catch (const json::exception& e) {
      return reply_error(res, 400, std::string("the request body is not valid JSON: ") + e.what());
    }
    ApiRequest api;
    if (std::string error = parse_api_request(body, api); !error.empty())
      return reply_error(res, 400, error);
    auto job = std::make_shared<Job>();
    if (std::string error =
            prepare_generation(api, tokenizer, model.config(), opt.max_tokens, opt.seed,
                               request_number++, job->prompts, job->options);
        !error.empty())
      return reply_error(res, 400, error);
    if (!api.no_log)
      log_info("request IP: ", req.remote_addr, "\n",
               body.dump(-1, ' ', false, json::error_handler_t::replace),
               "\nstart time: ", now_string());
    std::future<std::pair<std::string, GenerationOutput>> result = job->done.get_future();
    {
      std::lock_guard lock(mutex);
      if (stopping) return reply_error(res, 503, "the server is shutting down");
      if (int64_t(queue.size()) >= opt.max_queued)
        return reply_error(res, 503, "the server is busy: too many queued requests");
      queue.push_back(job);
    }
    ready.notify_one();
    auto [error, output] = result.get();
    if (!error.empty()) return reply_error(res, 400, error);
    res.set_content(api_response(output, tokenizer, api.logprobs)
                            .dump(-1, ' ', false, json::error_handler_t::replace) +
                        "\n",
                    "application/json");
  });

  const int port = opt.port == 0 ? server.bind_to_any_port(opt.host)
                                 : (server.bind_to_port(opt.host, opt.port) ? opt.port : -1);
  if (port < 0) {
    broadcast_string(world, kStop, 0);
    MT_THROW("serve: cannot listen on ", opt.host, ":", opt.port,
             " (in use, or not an address of this machine); choose --host/--port");
  }
  if (!opt.port_file.empty()) std::ofstream(opt.port_file) << port << "\n";
  log_info("serve: listening on http://", opt.host, ":", port, "/  (PUT /api; the web page at /)");
  std::thread listener([&] { server.listen_after_bind(); });

  int64_t served = 0;
  while (!g_stop_signal && (opt.max_requests == 0 || served < opt.max_requests)) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(mutex);
      ready.wait_for(lock, std::chrono::milliseconds(200), [&] { return !queue.empty(); });
      if (queue.empty()) continue;
      job = queue.front();
      queue.pop_front();
    }
    broadcast_string(world, job_json(job->prompts, job->options).dump(), 0);
    GenerationOutput output;
    std::string error = run_job(model, job->prompts, job->options, output);
    job->done.set_value({std::move(error), std::move(output)});
    ++served;
  }
  log_info("serve: stopping after ", served, " request(s)");
  {
    // Requests still queued (and any arriving now) get an answer rather than a dropped
    // connection; the listener's handler threads must all return before it stops.
    std::lock_guard lock(mutex);
    stopping = true;
    for (auto& job : queue) job->done.set_value({"the server is shutting down", {}});
    queue.clear();
  }
  broadcast_string(world, kStop, 0);
  server.stop();
  listener.join();
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

#else  // MEGATRON_HAS_HTTPLIB

namespace megatron {

void run_text_generation_server(GptModel&, const Tokenizer&, const ServerOptions&) {
  MT_THROW(
      "megatron serve: this binary was built without cpp-httplib; install Debian's "
      "libcpp-httplib-dev (scripts/setup.sh) and rebuild");
}

}  // namespace megatron

#endif  // MEGATRON_HAS_HTTPLIB
