#include "tasks/text_api.h"

#include <algorithm>

namespace megatron {

namespace {

using nlohmann::json;

// JSON integers (not booleans, not floats); Python's isinstance(x, int).
bool is_int(const json& v) {
  return v.is_number_integer();
}
bool is_number(const json& v) {
  return v.is_number();
}

}  // namespace

std::string parse_api_request(const json& body, ApiRequest& out) {
  out = ApiRequest{};
  if (!body.is_object()) return "the request body must be a JSON object";
  if (!body.contains("prompts")) return "prompts argument required";
  if (body.contains("max_len"))
    return "max_len is no longer used.  Replace with tokens_to_generate";
  if (body.contains("sentences")) return "sentences is no longer used.  Replace with prompts";
  const json& prompts = body["prompts"];
  if (!prompts.is_array()) return "prompts is not a list of strings";
  if (prompts.empty()) return "prompts is empty";
  if (prompts.size() > 128) return "Maximum number of prompts is 128";
  for (const json& p : prompts) {
    if (!p.is_string()) return "prompts is not a list of strings";
    out.prompts.push_back(p.get<std::string>());
  }

  if (body.contains("tokens_to_generate")) {
    const json& v = body["tokens_to_generate"];
    if (!is_int(v)) return "tokens_to_generate must be an integer greater than 0";
    if (v.get<int64_t>() < 0)
      return "tokens_to_generate must be an integer greater than or equal to 0";
    out.tokens_to_generate = v.get<int64_t>();
  }
  if (body.contains("logprobs")) {
    if (!body["logprobs"].is_boolean()) return "logprobs must be a boolean value";
    out.logprobs = body["logprobs"].get<bool>();
  }
  if (out.tokens_to_generate == 0 && !out.logprobs)
    return "tokens_to_generate=0 implies logprobs should be True";
  if (body.contains("temperature")) {
    const json& v = body["temperature"];
    if (!is_number(v)) return "temperature must be a positive number less than or equal to 100.0";
    const double t = v.get<double>();
    if (!(0.0 < t && t <= 100.0))
      return "temperature must be a positive number less than or equal to 100.0";
    out.temperature = float(t);
  }
  if (body.contains("top_k")) {
    const json& v = body["top_k"];
    if (!is_int(v))
      return "top_k must be an integer equal to or greater than 0 and less than or equal to 1000";
    if (!(0 <= v.get<int64_t>() && v.get<int64_t>() <= 1000))
      return "top_k must be equal to or greater than 0 and less than or equal to 1000";
    out.top_k = int(v.get<int64_t>());
  }
  if (body.contains("top_p")) {
    const json& v = body["top_p"];
    if (!is_number(v)) return "top_p must be a positive float less than or equal to 1.0";
    const double p = v.get<double>();
    if (p > 0.0 && out.top_k > 0) return "cannot set both top-k and top-p samplings.";
    if (!(0.0 <= p && p <= 1.0)) return "top_p must be less than or equal to 1.0";
    out.top_p = float(p);
  }
  if (body.contains("top_p_decay")) {
    const json& v = body["top_p_decay"];
    if (!is_number(v)) return "top_p_decay must be a positive float less than or equal to 1.0";
    if (out.top_p == 0.0f) return "top_p_decay cannot be set without top_p";
    if (!(0.0 <= v.get<double>() && v.get<double>() <= 1.0))
      return "top_p_decay must be less than or equal to 1.0";
    out.top_p_decay = float(v.get<double>());
  }
  if (body.contains("top_p_bound")) {
    const json& v = body["top_p_bound"];
    if (!is_number(v)) return "top_p_bound must be a positive float less than or equal to top_p";
    if (out.top_p == 0.0f) return "top_p_bound cannot be set without top_p";
    if (!(0.0 < v.get<double>() && v.get<double>() <= out.top_p))
      return "top_p_bound must be greater than 0 and less than top_p";
    out.top_p_bound = float(v.get<double>());
  }
  if (body.contains("add_BOS")) {
    if (!body["add_BOS"].is_boolean()) return "add_BOS must be a boolean value";
    out.add_bos = body["add_BOS"].get<bool>();
  }
  if (!out.add_bos && std::any_of(out.prompts.begin(), out.prompts.end(),
                                  [](const std::string& p) { return p.empty(); }))
    return "Empty prompts require add_BOS=true";
  if (body.contains("stop_on_double_eol")) {
    if (!body["stop_on_double_eol"].is_boolean())
      return "stop_on_double_eol must be a boolean value";
    out.stop_on_double_eol = body["stop_on_double_eol"].get<bool>();
  }
  if (body.contains("stop_on_eol")) {
    if (!body["stop_on_eol"].is_boolean()) return "stop_on_eol must be a boolean value";
    out.stop_on_eol = body["stop_on_eol"].get<bool>();
  }
  if (body.contains("prevent_newline_after_colon")) {
    if (!body["prevent_newline_after_colon"].is_boolean())
      return "prevent_newline_after_colon must be a boolean value";
    if (body["prevent_newline_after_colon"].get<bool>())
      return "prevent_newline_after_colon is not implemented by megatron-cpp";
  }
  if (body.contains("random_seed")) {
    const json& v = body["random_seed"];
    if (!is_int(v)) return "random_seed must be integer";
    if (v.get<int64_t>() < 0) return "random_seed must be a positive integer";
    out.random_seed = uint64_t(v.get<int64_t>());
  }
  if (body.contains("no_log")) {
    if (!body["no_log"].is_boolean()) return "no_log must be a boolean value";
    out.no_log = body["no_log"].get<bool>();
  }
  if (body.contains("beam_width")) {
    const json& v = body["beam_width"];
    if (!is_int(v)) return "beam_width must be integer";
    if (v.get<int64_t>() < 1) return "beam_width must be an integer > 1";
    if (out.prompts.size() > 1) return "When doing beam_search, batch size must be 1";
    return "beam search (beam_width) is not implemented by megatron-cpp";
  }
  if (body.contains("stop_token")) {
    if (!is_int(body["stop_token"])) return "stop_token must be an integer";
    out.stop_token = body["stop_token"].get<int64_t>();
  }
  if (body.contains("length_penalty")) {
    if (!body["length_penalty"].is_number_float()) return "length_penalty must be a float";
  }
  return "";
}

namespace {

// The id of `text` when the tokenizer encodes it as one token, else -1.
int32_t single_token(const Tokenizer& tokenizer, const std::string& text) {
  const std::vector<int32_t> ids = tokenizer.encode(text);
  return ids.size() == 1 ? ids[0] : -1;
}

}  // namespace

std::string prepare_generation(const ApiRequest& r, const Tokenizer& tokenizer,
                               const GptConfig& model, int64_t max_tokens, uint64_t seed,
                               uint64_t request_number, std::vector<std::vector<int32_t>>& prompts,
                               GenerationOptions& o) {
  prompts.clear();
  const int32_t eod = tokenizer.eod();
  if (r.add_bos && eod < 0) return "add_BOS needs a tokenizer with an end-of-document token";
  for (const std::string& text : r.prompts) {
    std::vector<int32_t> ids;
    if (r.add_bos) ids.push_back(eod);
    std::vector<int32_t> encoded;
    try {
      encoded = tokenizer.encode(text);
    } catch (const Error& e) {
      return "a prompt cannot be tokenized: " + e.message();
    }
    ids.insert(ids.end(), encoded.begin(), encoded.end());
    if (ids.empty()) return "a prompt has no tokens: send add_BOS=true or a longer prompt";
    prompts.push_back(std::move(ids));
  }
  o = GenerationOptions{};
  o.tokens_to_generate = r.tokens_to_generate;
  o.logprobs = r.logprobs;
  // Megatron: top_k = 1 is greedy and ignores the temperature.
  o.sampling = {r.temperature, r.top_k, r.top_p, r.random_seed ? *r.random_seed : seed};
  o.request = r.random_seed ? 0 : request_number;
  if (r.stop_token) {
    if (*r.stop_token < 0 || *r.stop_token >= model.vocab_size)
      return "stop_token " + std::to_string(*r.stop_token) + " is outside the vocabulary [0, " +
             std::to_string(model.vocab_size) + ")";
    o.stop_tokens = {int32_t(*r.stop_token)};
  } else if (eod >= 0) {
    o.stop_tokens = {eod};
  }
  o.stop_on_eol = r.stop_on_eol;
  o.stop_on_double_eol = r.stop_on_double_eol;
  if (o.stop_on_eol || o.stop_on_double_eol) {
    o.eol_token = single_token(tokenizer, "\n");
    o.double_eol_token = single_token(tokenizer, "\n\n");
  }
  o.top_p_decay = r.top_p_decay;
  o.top_p_bound = r.top_p_bound;
  o.pad_token = eod >= 0 ? eod : 0;
  o.max_tokens = max_tokens;
  return generation_request_error(prompts, o, model);
}

std::vector<std::string> token_segments(const Tokenizer& tokenizer,
                                        const std::vector<int32_t>& tokens) {
  std::vector<std::string> out;
  out.reserve(tokens.size());
  for (int32_t t : tokens) out.push_back(tokenizer.decode({t}));
  return out;
}

json api_response(const GenerationOutput& output, const Tokenizer& tokenizer, bool logprobs) {
  json text = json::array(), segments = json::array();
  for (const std::vector<int32_t>& tokens : output.tokens) {
    text.push_back(tokenizer.decode(tokens));
    segments.push_back(token_segments(tokenizer, tokens));
  }
  json response = {{"text", text}, {"segments", segments}, {"logprobs", nullptr}};
  if (logprobs) response["logprobs"] = output.logprobs;
  return response;
}

}  // namespace megatron
