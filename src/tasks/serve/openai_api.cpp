#include "tasks/serve/openai_api.h"

#include <algorithm>

namespace megatron {

using nlohmann::json;

namespace {

constexpr int64_t kMaxRows = 128;  // Megatron's largest batch of prompts
constexpr size_t kMaxStops = 4;    // OpenAI's

OpenAIError bad(const std::string& param, const std::string& message) {
  return {400, message, param, ""};
}

// The field, or nullptr when it is absent or null (OpenAI treats null as "not given").
const json* field(const json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

OpenAIError read_bool(const json& body, const char* name, bool& out) {
  if (const json* v = field(body, name)) {
    if (!v->is_boolean()) return bad(name, std::string(name) + " must be true or false");
    out = v->get<bool>();
  }
  return {};
}

// An integer field in [lo, hi]; the range is checked on the JSON value before it is used.
OpenAIError read_int(const json& body, const char* name, int64_t lo, int64_t hi,
                     std::optional<int64_t>& out) {
  if (const json* v = field(body, name)) {
    const std::string range = "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
    if (!v->is_number_integer()) return bad(name, std::string(name) + " must be " + range);
    // JSON's non-negative integers may exceed int64: compared as unsigned before any cast.
    const bool in_range =
        v->is_number_unsigned()
            ? v->get<uint64_t>() <= uint64_t(hi) && (lo <= 0 || v->get<uint64_t>() >= uint64_t(lo))
            : v->get<int64_t>() >= lo && v->get<int64_t>() <= hi;
    if (!in_range)
      return bad(name, std::string(name) + " must be " + range + " (got " + v->dump() + ")");
    out = v->get<int64_t>();
  }
  return {};
}

OpenAIError read_number(const json& body, const char* name, double lo, double hi, double& out) {
  if (const json* v = field(body, name)) {
    if (!v->is_number() || !(v->get<double>() >= lo && v->get<double>() <= hi))
      return bad(name, std::string(name) + " must be a number from " + json(lo).dump() + " to " +
                           json(hi).dump());
    out = v->get<double>();
  }
  return {};
}

// Chat content: a string, or OpenAI's list of parts of which only {"type": "text"} is read.
OpenAIError read_content(const json& message, std::string& out) {
  const json* content = field(message, "content");
  if (content == nullptr) return {};
  if (content->is_string()) {
    out = content->get<std::string>();
    return {};
  }
  if (!content->is_array())
    return bad("messages", "a message's content must be a string or a list of text parts");
  for (const json& part : *content) {
    if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") ||
        !part["text"].is_string())
      return bad("messages", "only text parts ({\"type\": \"text\", \"text\": ...}) are served");
    out += part["text"].get<std::string>();
  }
  return {};
}

}  // namespace

json openai_error_json(const OpenAIError& e) {
  return {{"error",
           {{"message", e.message},
            {"type", e.status >= 500 ? "server_error" : "invalid_request_error"},
            {"param", e.param.empty() ? json() : json(e.param)},
            {"code", e.code.empty() ? json() : json(e.code)}}}};
}

OpenAIError parse_openai_request(const json& body, bool chat, const std::string& model,
                                 OpenAIRequest& out) {
  out = OpenAIRequest{};
  out.chat = chat;
  if (!body.is_object()) return bad("", "the request body must be a JSON object");
  if (const json* m = field(body, "model")) {
    if (!m->is_string()) return bad("model", "model must be a string");
    if (m->get<std::string>() != model)
      return {404,
              "The model '" + m->get<std::string>().substr(0, 200) +
                  "' does not exist: this server serves '" + model + "' (GET /v1/models)",
              "model", "model_not_found"};
  }
  if (chat) {
    const json* messages = field(body, "messages");
    if (messages == nullptr || !messages->is_array() || messages->empty())
      return bad("messages", "messages must be a non-empty list of {\"role\", \"content\"}");
    if (messages->size() > 1024) return bad("messages", "at most 1024 messages are served");
    for (const json& m : *messages) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
        return bad("messages", "each message must be an object with a string role");
      ChatMessage message{m["role"].get<std::string>(), ""};
      if (OpenAIError e = read_content(m, message.content)) return e;
      out.messages.push_back(std::move(message));
    }
  } else {
    const json* prompt = field(body, "prompt");
    if (prompt == nullptr)
      return bad("prompt", "prompt is required (a string or a list of strings)");
    if (prompt->is_string()) {
      out.prompts.push_back(prompt->get<std::string>());
    } else if (prompt->is_array() && !prompt->empty() && int64_t(prompt->size()) <= kMaxRows) {
      for (const json& p : *prompt) {
        if (!p.is_string()) return bad("prompt", "prompt must be a string or a list of strings");
        out.prompts.push_back(p.get<std::string>());
      }
    } else {
      return bad("prompt", "prompt must be a string or a list of 1 to 128 strings");
    }
  }
  std::optional<int64_t> v;
  const char* max_name =
      chat && field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (OpenAIError e = read_int(body, max_name, 1, int64_t(1) << 40, out.max_tokens)) return e;
  if (!chat && !out.max_tokens) out.max_tokens = 16;  // OpenAI's default for completions
  if (OpenAIError e = read_number(body, "temperature", 0.0, 2.0, out.temperature)) return e;
  if (OpenAIError e = read_number(body, "top_p", 0.0, 1.0, out.top_p)) return e;
  if (out.top_p == 0.0) return bad("top_p", "top_p must be greater than 0 (1: off)");
  if (OpenAIError e = read_int(body, "top_k", -1, 1000, v)) return e;
  out.top_k = v ? std::max<int64_t>(*v, 0) : 0;  // -1 (vLLM's "off") is 0 here
  if (out.top_k > 0 && out.top_p < 1.0 && out.temperature > 0.0)
    return bad("top_k", "top_k and top_p cannot both be set (Megatron's sampler takes one)");
  v.reset();
  if (OpenAIError e = read_int(body, "n", 1, kMaxRows, v)) return e;
  out.n = v.value_or(1);
  const int64_t prompts = chat ? 1 : int64_t(out.prompts.size());
  if (out.n * prompts > kMaxRows)
    return bad("n", "n × the number of prompts must be at most 128 (got " +
                        std::to_string(out.n * prompts) + ")");
  if (const json* stop = field(body, "stop")) {
    const json list = stop->is_string() ? json::array({*stop}) : *stop;
    if (!list.is_array() || list.size() > kMaxStops)
      return bad("stop", "stop must be a string or a list of at most 4 strings");
    for (const json& s : list) {
      if (!s.is_string() || s.get<std::string>().empty())
        return bad("stop", "stop must be a string or a list of at most 4 non-empty strings");
      out.stop.push_back(s.get<std::string>());
    }
  }
  if (OpenAIError e = read_int(body, "seed", INT64_MIN, INT64_MAX, out.seed)) return e;
  if (chat) {
    if (OpenAIError e = read_bool(body, "logprobs", out.logprobs)) return e;
    v.reset();
    if (OpenAIError e = read_int(body, "top_logprobs", 0, 20, v)) return e;
    if (v && *v > 0 && !out.logprobs)
      return bad("top_logprobs", "top_logprobs needs logprobs: true");
    out.top_logprobs = int(v.value_or(0));
  } else {
    v.reset();
    if (OpenAIError e = read_int(body, "logprobs", 0, 5, v)) return e;
    out.logprobs = v.has_value();
    out.top_logprobs = int(v.value_or(0));
    if (OpenAIError e = read_bool(body, "echo", out.echo)) return e;
    if (field(body, "suffix")) return bad("suffix", "suffix (insertion) is not supported");
    v.reset();
    if (OpenAIError e = read_int(body, "best_of", 1, kMaxRows, v)) return e;
    if (v && *v != out.n) return bad("best_of", "best_of other than n is not supported");
  }
  for (const char* penalty : {"presence_penalty", "frequency_penalty"}) {
    double p = 0.0;
    if (OpenAIError e = read_number(body, penalty, -2.0, 2.0, p)) return e;
    if (p != 0.0) return bad(penalty, std::string(penalty) + " is not supported; send 0");
  }
  if (const json* bias = field(body, "logit_bias"); bias != nullptr && !bias->empty())
    return bad("logit_bias", "logit_bias is not supported");
  if (OpenAIError e = read_bool(body, "stream", out.stream)) return e;
  if (out.stream && out.logprobs && out.echo)
    return bad("echo",
               "a streamed answer does not repeat the prompt's log-probabilities: send echo with "
               "stream: false, or logprobs without echo");
  if (const json* options = field(body, "stream_options")) {
    if (!out.stream) return bad("stream_options", "stream_options needs stream: true");
    if (!options->is_object()) return bad("stream_options", "stream_options must be an object");
    if (OpenAIError e = read_bool(*options, "include_usage", out.include_usage)) return e;
  }
  return {};
}

std::string chat_prompt_text(std::string rendered, const std::string& bos_token,
                             const Tokenizer& tokenizer) {
  if (bos_token.empty() || rendered.compare(0, bos_token.size(), bos_token) != 0) return rendered;
  std::vector<int32_t> added;
  try {
    added = tokenizer.encode("");  // what the tokenizer adds to any text
  } catch (const Error&) {
    return rendered;  // a tokenizer that cannot encode "" adds nothing
  }
  if (!added.empty() && tokenizer.token_to_id(bos_token) == added.front())
    rendered.erase(0, bos_token.size());
  return rendered;
}

ApiRequest to_api_request(const OpenAIRequest& r, int64_t longest_prompt, int64_t context) {
  ApiRequest api;
  for (const std::string& p : r.prompts)
    for (int64_t j = 0; j < r.n; ++j) api.prompts.push_back(p);
  api.tokens_to_generate =
      r.max_tokens ? *r.max_tokens : std::max<int64_t>(context - longest_prompt, 1);
  api.logprobs = r.logprobs;
  if (r.temperature == 0.0) {
    api.top_k = 1;  // greedy: the temperature does not matter
  } else {
    api.temperature = float(r.temperature);
    api.top_k = int(r.top_k);
    api.top_p = r.top_p < 1.0 ? float(r.top_p) : 0.0f;
  }
  if (r.seed) api.random_seed = uint64_t(*r.seed);
  return api;
}

std::vector<std::vector<int32_t>> stop_token_sequences(const OpenAIRequest& r,
                                                       const Tokenizer& tokenizer) {
  std::vector<std::vector<int32_t>> out;
  for (const std::string& s : r.stop) {
    try {
      out.push_back(tokenizer.encode(s));
    } catch (const Error&) {
      // Not tokenizable alone (e.g. not a token id for the NullTokenizer): only the text check.
    }
  }
  return out;
}

size_t utf8_complete_prefix(const std::string& text) {
  const size_t n = text.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? n - back : n;
  }
  return n;
}

namespace {

// The generated tokens without a final stop token, decoded; `ended` says whether one was there.
std::string decode_generated(const Tokenizer& tokenizer, const std::vector<int32_t>& generated,
                             const std::vector<int32_t>& stop_tokens, bool& ended) {
  std::vector<int32_t> g = generated;
  ended = !g.empty() &&
          std::find(stop_tokens.begin(), stop_tokens.end(), g.back()) != stop_tokens.end();
  if (ended) g.pop_back();
  return g.empty() ? std::string() : tokenizer.decode(g);
}

size_t first_stop(const std::string& text, const std::vector<std::string>& stop) {
  size_t cut = std::string::npos;
  for (const std::string& s : stop) cut = std::min(cut, text.find(s));
  return cut;
}

}  // namespace

ChoiceText choice_text(const Tokenizer& tokenizer, const std::vector<int32_t>& generated,
                       const std::vector<std::string>& stop,
                       const std::vector<int32_t>& stop_tokens, int64_t max_tokens) {
  bool ended = false;
  ChoiceText c{decode_generated(tokenizer, generated, stop_tokens, ended), ""};
  if (const size_t cut = first_stop(c.text, stop); cut != std::string::npos) {
    c.text.resize(cut);
    ended = true;
  }
  c.finish_reason = ended || int64_t(generated.size()) < max_tokens ? "stop" : "length";
  return c;
}

std::string ChoiceTextStream::update(const std::vector<int32_t>& generated) {
  if (stopped_) return "";
  bool ended = false;
  const std::string text = decode_generated(tokenizer_, generated, stop_tokens_, ended);
  size_t end = utf8_complete_prefix(text);
  if (const size_t cut = first_stop(text.substr(0, end), stop_); cut != std::string::npos) {
    stopped_ = true;
    end = cut;
  } else {
    // Hold back an end of the text that a stop string starts with: it may complete next.
    size_t hold = 0;
    for (const std::string& s : stop_)
      for (size_t k = std::min(s.size() - 1, end); k > hold; --k)
        if (text.compare(end - k, k, s, 0, k) == 0) {
          hold = k;
          break;
        }
    end -= hold;
  }
  if (end <= sent_) return "";
  std::string delta = text.substr(sent_, end - sent_);
  sent_ = end;
  return delta;
}

std::string ChoiceTextStream::finish(const std::vector<int32_t>& generated,
                                     std::string& finish_reason) {
  ChoiceText c = choice_text(tokenizer_, generated, stop_, stop_tokens_, max_tokens_);
  finish_reason = c.finish_reason;
  return sent_ < c.text.size() ? c.text.substr(sent_) : std::string();
}

namespace {

// Per row: the generated tokens (after the prompt).
std::vector<int32_t> generated_tokens(const GenerationOutput& output, size_t row) {
  const auto& t = output.tokens[row];
  return {t.begin() + output.prompt_lengths[row], t.end()};
}

// OpenAI's logprobs object for `tokens`: values[k] the log-probability of tokens[k] (null for
// a sequence's first token), tops[k] the most likely tokens at its position (null: none), and
// text offsets from `offset`; completions' legacy shape (tokens, token_logprobs, top_logprobs,
// text_offset) or chat's (content: [{token, logprob, bytes, top_logprobs}]).
json tokens_logprobs(const OpenAIRequest& r, const Tokenizer& tokenizer,
                     const std::vector<int32_t>& tokens, const std::vector<json>& values,
                     const std::vector<const TopTokens*>& tops, size_t offset) {
  json pieces = json::array(), lps = json::array(), offsets = json::array(),
       content = json::array(), top_maps = json::array();
  const auto bytes_of = [](const std::string& piece) {
    return std::vector<int>(piece.begin(), piece.end());
  };
  for (size_t k = 0; k < tokens.size(); ++k) {
    const std::string piece = tokenizer.decode({tokens[k]});
    // The most likely tokens at this position: completions as {text: logprob} (OpenAI's
    // legacy shape), chat as [{token, logprob, bytes}].
    json top_map = values[k].is_null() ? json() : json::object(), top_list = json::array();
    if (r.top_logprobs > 0 && tops[k])
      for (const auto& [id, lp] : *tops[k]) {
        const std::string text = tokenizer.decode({id});
        if (!top_map.contains(text)) top_map[text] = lp;
        top_list.push_back({{"token", text}, {"logprob", lp}, {"bytes", bytes_of(text)}});
      }
    pieces.push_back(piece);
    lps.push_back(values[k]);
    offsets.push_back(offset);
    top_maps.push_back(top_map);
    offset += piece.size();
    content.push_back({{"token", piece},
                       {"logprob", values[k]},
                       {"bytes", bytes_of(piece)},
                       {"top_logprobs", top_list}});
  }
  if (r.chat) return {{"content", content}};
  return {{"tokens", pieces},
          {"token_logprobs", lps},
          {"top_logprobs", r.top_logprobs > 0 ? top_maps : json()},
          {"text_offset", offsets}};
}

// The chosen tokens' log-probabilities of one row (with echo the prompt's tokens first, the
// first one null).
json row_logprobs(const OpenAIRequest& r, const GenerationOutput& output, size_t row,
                  const Tokenizer& tokenizer) {
  const auto& tokens = output.tokens[row];
  const size_t first = r.echo ? 0 : size_t(output.prompt_lengths[row]);
  // A generation that lacks what was asked is a bug: an Error (500), never a read out of range.
  MT_CHECK(row < output.logprobs.size() && output.logprobs[row].size() + 1 >= tokens.size() &&
               (r.top_logprobs == 0 || (row < output.top_logprobs.size() &&
                                        output.top_logprobs[row].size() + 1 >= tokens.size())),
           "the generation has no log-probabilities for choice ", row);
  std::vector<json> values;
  std::vector<const TopTokens*> tops;
  for (size_t j = first; j < tokens.size(); ++j) {
    values.push_back(j == 0 ? json() : json(output.logprobs[row][j - 1]));
    tops.push_back(j > 0 && r.top_logprobs > 0 ? &output.top_logprobs[row][j - 1] : nullptr);
  }
  return tokens_logprobs(r, tokenizer, {tokens.begin() + first, tokens.end()}, values, tops, 0);
}

}  // namespace

json openai_usage(const OpenAIRequest& r, const GenerationOutput& output) {
  int64_t prompt = 0, completion = 0;
  for (size_t row = 0; row < output.tokens.size(); ++row) {
    if (int64_t(row) % r.n == 0) prompt += output.prompt_lengths[row];
    completion += int64_t(output.tokens[row].size()) - output.prompt_lengths[row];
  }
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion}};
}

json openai_response(const OpenAIRequest& r, const GenerationOutput& output,
                     const Tokenizer& tokenizer, const std::vector<int32_t>& stop_tokens,
                     const std::string& id, const std::string& model, int64_t created) {
  json choices = json::array();
  for (size_t row = 0; row < output.tokens.size(); ++row) {
    ChoiceText c =
        choice_text(tokenizer, generated_tokens(output, row), r.stop, stop_tokens, *r.max_tokens);
    json logprobs = r.logprobs ? row_logprobs(r, output, row, tokenizer) : json();
    json choice = {{"index", row}, {"logprobs", logprobs}, {"finish_reason", c.finish_reason}};
    if (r.chat)
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    else
      choice["text"] = r.echo ? r.prompts[row / size_t(r.n)] + c.text : c.text;
    choices.push_back(std::move(choice));
  }
  return {{"id", id},           {"object", r.chat ? "chat.completion" : "text_completion"},
          {"created", created}, {"model", model},
          {"choices", choices}, {"usage", openai_usage(r, output)}};
}

json openai_stream_logprobs(const OpenAIRequest& request, const Tokenizer& tokenizer,
                            const std::vector<int32_t>& tokens, const std::vector<float>& logprobs,
                            const std::vector<TopTokens>& top_logprobs, size_t text_offset) {
  MT_CHECK(logprobs.size() == tokens.size() &&
               (request.top_logprobs == 0 || top_logprobs.size() == tokens.size()),
           "streamed log-probabilities need one per token");
  std::vector<json> values(logprobs.begin(), logprobs.end());
  std::vector<const TopTokens*> tops;
  for (size_t k = 0; k < tokens.size(); ++k)
    tops.push_back(request.top_logprobs > 0 ? &top_logprobs[k] : nullptr);
  return tokens_logprobs(request, tokenizer, tokens, values, tops, text_offset);
}

json openai_stream_chunk(bool chat, const std::string& id, const std::string& model,
                         int64_t created, int64_t index, const std::string& text,
                         const std::string& finish_reason, bool first, const json& logprobs) {
  json choice = {{"index", index},
                 {"logprobs", logprobs},
                 {"finish_reason", finish_reason.empty() ? json() : json(finish_reason)}};
  if (chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (first || !text.empty()) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  return {{"id", id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({choice})}};
}

json openai_models(const std::string& model, int64_t created) {
  return {{"object", "list"},
          {"data", json::array({{{"id", model},
                                 {"object", "model"},
                                 {"created", created},
                                 {"owned_by", "megatron-cpp"}}})}};
}

}  // namespace megatron
