#include "tasks/serve/openai_routes.h"

#include <algorithm>

#include "core/logging.h"
#include "tasks/serve/chat_template.h"
#include "tasks/serve/json_body.h"

namespace megatron {

using nlohmann::json;

namespace {

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// The conversation as the model's prompt text, by its chat template.
OpenAIError render_chat(const ServeContext& c, OpenAIRequest& r) {
  if (c.options.chat_template.empty())
    return {400,
            "this model has no chat template: serve it with --chat-template (a "
            "tokenizer_config.json or a Jinja file), or use /v1/completions",
            "messages", ""};
  // Ordered as the client sent them (a template may loop over a message's keys).
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  for (const ChatMessage& m : r.messages)
    messages.push_back({{"role", m.role}, {"content", m.content}});
  try {
    const std::string rendered =
        render_chat_template(c.options.chat_template, {{"messages", messages},
                                                       {"add_generation_prompt", true},
                                                       {"bos_token", c.options.bos_token},
                                                       {"eos_token", c.options.eos_token}});
    r.prompts = {chat_prompt_text(rendered, c.options.bos_token, c.tokenizer)};
  } catch (const Error& e) {
    return {400, "the chat template refused the conversation: " + e.message(), "messages", ""};
  }
  return {};
}

bool send_event(HttpResponder& responder, const json& data) {
  return responder.write_chunk("data: " + dump(data) + "\n\n");
}

// Streams the job's choices as they are generated; returns when the job finished or the client
// left (the job is then cancelled: its rows end at the next step).
void stream_job(HttpResponder& responder, Job& job, const OpenAIRequest& r, const ServeContext& c,
                const std::string& id) {
  // However this returns: a client that could not be written to has left, and its rows end.
  struct CancelWhenGone {
    Job& job;
    const HttpResponder& responder;
    ~CancelWhenGone() {
      if (responder.client_gone()) job.cancelled = true;
    }
  } cancel_when_gone{job, responder};
  const std::string& model = c.options.model_name;
  const size_t rows = job.prompts.size();
  const int64_t max_tokens = job.options.tokens_to_generate;
  std::vector<ChoiceTextStream> streams;
  for (size_t row = 0; row < rows; ++row)
    streams.emplace_back(c.tokenizer, r.stop, job.options.stop_tokens, max_tokens);
  if (!responder.begin_stream(200, "text/event-stream; charset=utf-8")) return;
  for (size_t row = 0; row < rows; ++row)
    if (r.chat || r.echo)
      if (!send_event(responder,
                      openai_stream_chunk(r.chat, id, model, c.started, int64_t(row),
                                          r.echo ? r.prompts[row / size_t(r.n)] : "", "", true)))
        return;
  // Log-probabilities go out with the tokens they belong to, except the last tokens that may
  // still turn out to be a stop sequence (the answer drops those); the rest come at the end.
  size_t hold = 0;
  for (const auto& stop : job.options.stop_sequences)
    if (!stop.empty()) hold = std::max(hold, stop.size() - 1);
  std::vector<size_t> scored(rows, 0), offset(rows, 0);  // per row: tokens sent, their bytes
  const auto logprobs_of = [&](size_t row, const std::vector<int32_t>& tokens,
                               const std::vector<float>& logprobs,
                               const std::vector<TopTokens>& top, size_t end) -> json {
    if (!r.logprobs || end <= scored[row]) return nullptr;
    const auto part = [&](const auto& v) {
      using V = std::decay_t<decltype(v)>;
      return v.empty() ? V() : V(v.begin() + scored[row], v.begin() + end);
    };
    const std::vector<int32_t> sent = part(tokens);
    json lp = openai_stream_logprobs(r, c.tokenizer, sent, part(logprobs), part(top), offset[row]);
    for (int32_t t : sent) offset[row] += c.tokenizer.decode({t}).size();
    scored[row] = end;
    return lp;
  };
  uint64_t seen = 0;
  while (true) {
    std::vector<std::vector<int32_t>> generated;
    std::vector<std::vector<float>> generated_logprobs;
    std::vector<std::vector<TopTokens>> generated_top;
    bool finished = false;
    std::string error;
    GenerationOutput output;
    {
      std::unique_lock lock(job.mutex);
      job.changed.wait(lock, [&] { return job.finished || job.steps != seen; });
      seen = job.steps;
      generated = job.generated;
      generated_logprobs = job.generated_logprobs;
      generated_top = job.generated_top_logprobs;
      finished = job.finished;
      error = job.error;
      if (finished) output = job.output;
    }
    generated.resize(rows);
    generated_logprobs.resize(rows);
    generated_top.resize(rows);
    if (finished && !error.empty()) {
      send_event(responder, openai_error_json({400, error, "", ""}));
      break;
    }
    for (size_t row = 0; row < rows; ++row) {
      const std::string delta = streams[row].update(generated[row]);
      const size_t final_tokens = generated[row].size() > hold ? generated[row].size() - hold : 0;
      const json lp = finished ? json()
                               : logprobs_of(row, generated[row], generated_logprobs[row],
                                             generated_top[row], final_tokens);
      if ((!delta.empty() || !lp.is_null()) &&
          !send_event(responder, openai_stream_chunk(r.chat, id, model, c.started, int64_t(row),
                                                     delta, "", false, lp)))
        return;
    }
    if (!finished) continue;
    for (size_t row = 0; row < rows; ++row) {
      const auto& tokens = output.tokens[row];
      const int64_t prompt = output.prompt_lengths[row];
      const std::vector<int32_t> tail(tokens.begin() + prompt, tokens.end());
      std::string reason;
      const std::string rest = streams[row].finish(tail, reason);
      json lp;
      if (r.logprobs) {
        // generate_tokens' layout: logprobs[j] is that of tokens[j + 1].
        const std::vector<float> values(output.logprobs[row].begin() + (prompt - 1),
                                        output.logprobs[row].end());
        const std::vector<TopTokens> top =
            r.top_logprobs > 0
                ? std::vector<TopTokens>(output.top_logprobs[row].begin() + (prompt - 1),
                                         output.top_logprobs[row].end())
                : std::vector<TopTokens>();
        lp = logprobs_of(row, tail, values, top, tail.size());
      }
      if ((!rest.empty() || !lp.is_null()) &&
          !send_event(responder, openai_stream_chunk(r.chat, id, model, c.started, int64_t(row),
                                                     rest, "", false, lp)))
        return;
      if (!send_event(responder, openai_stream_chunk(r.chat, id, model, c.started, int64_t(row), "",
                                                     reason, false)))
        return;
    }
    if (r.include_usage) {
      json usage = openai_stream_chunk(r.chat, id, model, c.started, 0, "", "", false);
      usage["choices"] = json::array();
      usage["usage"] = openai_usage(r, output);
      if (!send_event(responder, usage)) return;
    }
    break;
  }
  if (responder.write_chunk("data: [DONE]\n\n")) responder.end_stream();
}

}  // namespace

void reply_openai_error(HttpResponder& responder, const OpenAIError& error) {
  HttpHeaders headers;
  if (error.status == 401) headers.emplace_back("WWW-Authenticate", "Bearer");
  responder.send(error.status, "application/json", dump(openai_error_json(error)) + "\n", headers);
}

void serve_openai_completion(const HttpRequest& request, HttpResponder& responder, ServeContext& c,
                             bool chat) {
  json body;
  if (std::string error = parse_json_body(request.body, body); !error.empty())
    return reply_openai_error(responder, {400, error, "", ""});
  OpenAIRequest r;
  if (OpenAIError e = parse_openai_request(body, chat, c.options.model_name, r))
    return reply_openai_error(responder, e);
  if (chat)
    if (OpenAIError e = render_chat(c, r)) return reply_openai_error(responder, e);
  // The longest prompt's tokens bound a chat request's default max_tokens; prepare_generation
  // tokenizes again (cheap beside the generation) and checks every length.
  int64_t longest = 0;
  for (const std::string& p : r.prompts) {
    try {
      longest = std::max<int64_t>(longest, int64_t(c.tokenizer.encode(p).size()));
    } catch (const Error& e) {
      return reply_openai_error(
          responder, {400, "a prompt cannot be tokenized: " + e.message(), "prompt", ""});
    }
  }
  auto job = std::make_shared<Job>();
  const ApiRequest api = to_api_request(r, longest, c.config.max_position_embeddings);
  r.max_tokens = api.tokens_to_generate;
  const uint64_t number = c.request_number++;
  if (std::string error = prepare_generation(api, c.tokenizer, c.config, c.options.max_tokens,
                                             c.options.seed, number, job->prompts, job->options);
      !error.empty())
    return reply_openai_error(responder, {400, error, "", ""});
  job->options.stop_sequences = stop_token_sequences(r, c.tokenizer);
  job->options.top_logprobs = r.top_logprobs;
  job->streaming = r.stream;
  const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(number);
  log_info("request IP: ", request.remote_addr, " ", request.path, "\n", json_log_summary(body));
  if (std::string busy = c.queue.submit(job); !busy.empty())
    return reply_openai_error(responder, {503, busy, "", ""});
  if (r.stream) return stream_job(responder, *job, r, c, id);
  if (!job->wait([&responder] { return responder.peer_closed(); })) return;  // the client left
  if (!job->error.empty()) return reply_openai_error(responder, {400, job->error, "", ""});
  responder.send(200, "application/json",
                 dump(openai_response(r, job->output, c.tokenizer, job->options.stop_tokens, id,
                                      c.options.model_name, c.started)) +
                     "\n");
}

void serve_openai_models(HttpResponder& responder, const ServeContext& c) {
  json models = openai_models(c.options.model_name, c.started);
  // vLLM's field, read by clients that size their requests to the model.
  models["data"][0]["max_model_len"] = c.config.max_position_embeddings;
  responder.send(200, "application/json", dump(models) + "\n");
}

}  // namespace megatron
