// OpenAI's API of `megatron serve` without HTTP: request checks (types and ranges before any
// arithmetic), the mapping to Megatron's request, choice texts (stop strings, stop tokens,
// finish_reason), streamed text (whole UTF-8 characters only, stop strings held back) equal to
// the whole text, the JSON depth guard and the access checks.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../common/source_dir.h"
#include "data/tokenizers/huggingface_tokenizer.h"
#include "tasks/serve/access.h"
#include "tasks/serve/chat_template.h"
#include "tasks/serve/json_body.h"
#include "tasks/serve/openai_api.h"

namespace megatron {
namespace {

using nlohmann::json;

// Token i is the byte i (ids 0..255), so multi-byte characters span several tokens; 256 is the
// end of document.
class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    for (char c : text) ids.push_back(int32_t(static_cast<unsigned char>(c)));
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string s;
    for (int32_t id : ids)
      if (id < 256) s += char(id);
    return s;
  }
  int64_t vocab_size() const override { return 257; }
  int32_t eod() const override { return 256; }
};

std::string error_of(const json& body, bool chat = false) {
  OpenAIRequest r;
  const OpenAIError e = parse_openai_request(body, chat, "tiny", r);
  return e ? std::to_string(e.status) + " " + e.param + ": " + e.message : "";
}

TEST(OpenAIApi, ChecksEveryFieldBeforeUse) {
  EXPECT_EQ(error_of({{"prompt", "a"}}), "");
  EXPECT_EQ(error_of(json::array()), "400 : the request body must be a JSON object");
  EXPECT_EQ(error_of({{"model", "other"}, {"prompt", "a"}}).substr(0, 10), "404 model:");
  EXPECT_EQ(error_of({{"model", 3}, {"prompt", "a"}}), "400 model: model must be a string");
  EXPECT_EQ(error_of({{"max_tokens", 4}}),
            "400 prompt: prompt is required (a string or a list of strings)");
  EXPECT_EQ(error_of({{"prompt", json::array()}}),
            "400 prompt: prompt must be a string or a list of 1 to 128 strings");
  EXPECT_EQ(error_of({{"prompt", {1, 2}}}),
            "400 prompt: prompt must be a string or a list of strings");
  // Integers beyond int64 and negative ones are refused before any arithmetic.
  EXPECT_EQ(error_of(json::parse(R"({"prompt": "a", "max_tokens": 18446744073709551615})")),
            "400 max_tokens: max_tokens must be an integer from 1 to 1099511627776 (got "
            "18446744073709551615)");
  EXPECT_EQ(error_of({{"prompt", "a"}, {"max_tokens", 0}}),
            "400 max_tokens: max_tokens must be an integer from 1 to 1099511627776 (got 0)");
  EXPECT_EQ(error_of({{"prompt", "a"}, {"max_tokens", 2.5}}),
            "400 max_tokens: max_tokens must be an integer from 1 to 1099511627776");
  EXPECT_EQ(error_of({{"prompt", "a"}, {"n", 129}}),
            "400 n: n must be an integer from 1 to 128 (got 129)");
  EXPECT_EQ(error_of({{"prompt", {"a", "b", "c"}}, {"n", 50}}),
            "400 n: n × the number of prompts must be at most 128 (got 150)");
  EXPECT_EQ(error_of({{"prompt", "a"}, {"temperature", 2.5}}),
            "400 temperature: temperature must be a number from 0.0 to 2.0");
  EXPECT_EQ(error_of({{"prompt", "a"}, {"temperature", "hot"}}),
            "400 temperature: temperature must be a number from 0.0 to 2.0");
  EXPECT_EQ(error_of({{"prompt", "a"}, {"top_p", 0}}),
            "400 top_p: top_p must be greater than 0 (1: off)");
  EXPECT_EQ(error_of({{"prompt", "a"}, {"top_k", 5}, {"top_p", 0.5}}),
            "400 top_k: top_k and top_p cannot both be set (Megatron's sampler takes one)");
  EXPECT_EQ(error_of({{"prompt", "a"}, {"stop", {"a", "b", "c", "d", "e"}}}),
            "400 stop: stop must be a string or a list of at most 4 strings");
  EXPECT_EQ(error_of({{"prompt", "a"}, {"stop", ""}}),
            "400 stop: stop must be a string or a list of at most 4 non-empty strings");
  EXPECT_EQ(error_of({{"prompt", "a"}, {"logprobs", 6}}),
            "400 logprobs: logprobs must be an integer from 0 to 5 (got 6)");
  EXPECT_EQ(error_of({{"prompt", "a"}, {"echo", 1}}), "400 echo: echo must be true or false");
  EXPECT_EQ(error_of({{"prompt", "a"}, {"logprobs", 1}, {"stream", true}, {"echo", true}}),
            "400 echo: a streamed answer does not repeat the prompt's log-probabilities: send "
            "echo with stream: false, or logprobs without echo");
  EXPECT_EQ(error_of({{"prompt", "a"}, {"stream_options", {{"include_usage", true}}}}),
            "400 stream_options: stream_options needs stream: true");
  EXPECT_EQ(error_of({{"prompt", "a"}, {"presence_penalty", 0.5}}),
            "400 presence_penalty: presence_penalty is not supported; send 0");
  EXPECT_EQ(error_of({{"prompt", "a"}, {"seed", -5}}), "");
  EXPECT_EQ(error_of({{"messages", json::array()}}, true),
            "400 messages: messages must be a non-empty list of {\"role\", \"content\"}");
  EXPECT_EQ(
      error_of({{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}}, true),
      "400 messages: only text parts ({\"type\": \"text\", \"text\": ...}) are served");
  EXPECT_EQ(
      error_of({{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"top_logprobs", 3}}, true),
      "400 top_logprobs: top_logprobs needs logprobs: true");
}

TEST(OpenAIApi, MapsToMegatronsRequest) {
  OpenAIRequest r;
  ASSERT_FALSE(parse_openai_request({{"prompt", {"a", "b"}},
                                     {"n", 3},
                                     {"temperature", 0},
                                     {"seed", 9},
                                     {"max_tokens", 5},
                                     {"top_p", 0.5}},
                                    false, "tiny", r));
  ApiRequest api = to_api_request(r, 1, 64);
  ASSERT_EQ(api.prompts.size(), 6u);
  EXPECT_EQ(api.prompts[2], "a");  // prompt × n + j
  EXPECT_EQ(api.prompts[3], "b");
  EXPECT_EQ(api.top_k, 1);  // temperature 0: greedy
  EXPECT_EQ(api.top_p, 0.0f);
  EXPECT_EQ(api.tokens_to_generate, 5);
  EXPECT_EQ(*api.random_seed, 9u);
  // Chat without max_tokens: up to the model's context.
  ASSERT_FALSE(parse_openai_request({{"messages", {{{"role", "user"}, {"content", "hi"}}}}}, true,
                                    "tiny", r));
  EXPECT_EQ(to_api_request(r, 10, 64).tokens_to_generate, 54);
  ASSERT_FALSE(parse_openai_request({{"prompt", "a"}, {"top_p", 1}}, false, "tiny", r));
  EXPECT_EQ(to_api_request(r, 1, 64).top_p, 0.0f);  // 1: off
}

std::vector<int32_t> bytes(const std::string& s) {
  return ByteTokenizer().encode(s);
}

TEST(OpenAIApi, ChoiceTextStopsAndFinishReasons) {
  ByteTokenizer t;
  auto with_eod = bytes("hello");
  with_eod.push_back(256);
  EXPECT_EQ(choice_text(t, with_eod, {}, {256}, 10).text, "hello");
  EXPECT_EQ(choice_text(t, with_eod, {}, {256}, 10).finish_reason, "stop");
  EXPECT_EQ(choice_text(t, bytes("hello"), {}, {256}, 5).finish_reason, "length");
  EXPECT_EQ(choice_text(t, bytes("hel"), {}, {256}, 5).finish_reason, "stop");  // stop sequence
  const ChoiceText cut = choice_text(t, bytes("one. two. three"), {". t", "ee"}, {256}, 15);
  EXPECT_EQ(cut.text, "one");
  EXPECT_EQ(cut.finish_reason, "stop");
}

// Streams `generated` token by token; returns the concatenated deltas, checking that each is
// whole UTF-8 and never shows text past a stop string.
std::string stream(const std::vector<int32_t>& generated, const std::vector<std::string>& stop,
                   int64_t max_tokens, std::string& reason) {
  ByteTokenizer t;
  ChoiceTextStream s(t, stop, {256}, max_tokens);
  std::string text;
  for (size_t k = 1; k <= generated.size(); ++k) {
    const std::string delta = s.update({generated.begin(), generated.begin() + k});
    EXPECT_EQ(utf8_complete_prefix(delta), delta.size()) << "a split character: " << delta;
    text += delta;
  }
  return text + s.finish(generated, reason);
}

TEST(OpenAIApi, StreamedTextEqualsTheWholeText) {
  ByteTokenizer t;
  const std::vector<std::string> texts = {"Grüße, 世界 🙂!", "one. two. three", "ab", "a.",
                                          ""};
  for (const std::string& s : texts)
    for (const std::vector<std::string>& stop :
         {std::vector<std::string>{}, {". t"}, {"🙂", "界"}, {"."}}) {
      std::string reason;
      const ChoiceText whole = choice_text(t, bytes(s), stop, {256}, 100);
      EXPECT_EQ(stream(bytes(s), stop, 100, reason), whole.text) << s;
      EXPECT_EQ(reason, whole.finish_reason);
    }
  // A stop string's first characters are held back until they can no longer start it.
  ChoiceTextStream s(t, {"END"}, {256}, 100);
  EXPECT_EQ(s.update(bytes("abcE")), "abc");
  EXPECT_EQ(s.update(bytes("abcEN")), "");
  EXPECT_EQ(s.update(bytes("abcENx")), "ENx");
  EXPECT_EQ(utf8_complete_prefix("a\xE4\xB8"), 1u);
  EXPECT_EQ(utf8_complete_prefix("a\xE4\xB8\x96"), 4u);
  EXPECT_EQ(utf8_complete_prefix("\xF0\x9F\x99"), 0u);
}

TEST(OpenAIApi, ResponsesAndUsage) {
  OpenAIRequest r;
  ASSERT_FALSE(parse_openai_request(
      {{"prompt", "ab"}, {"n", 2}, {"max_tokens", 3}, {"echo", true}, {"logprobs", 0}}, false,
      "tiny", r));
  GenerationOutput out;
  out.tokens = {{'a', 'b', 'c', 'd', 'e'}, {'a', 'b', 'x', 256}};
  out.prompt_lengths = {2, 2};
  out.logprobs = {{-1, -2, -3, -4}, {-1, -5, -6}};
  const json res = openai_response(r, out, ByteTokenizer(), {256}, "cmpl-1", "tiny", 7);
  EXPECT_EQ(res["object"], "text_completion");
  EXPECT_EQ(res["choices"][0]["text"], "abcde");
  EXPECT_EQ(res["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(res["choices"][1]["text"], "abx");
  EXPECT_EQ(res["choices"][1]["finish_reason"], "stop");
  EXPECT_EQ(res["choices"][1]["logprobs"]["token_logprobs"],
            json::parse("[null, -1.0, -5.0, -6.0]"));
  EXPECT_EQ(res["choices"][1]["logprobs"]["text_offset"], json::parse("[0, 1, 2, 3]"));
  EXPECT_EQ(res["choices"][1]["logprobs"]["top_logprobs"], nullptr);  // logprobs 0: none
  // logprobs 2: the two most likely tokens at each position, as {text: logprob}; chat as a list.
  ASSERT_FALSE(parse_openai_request({{"prompt", "ab"}, {"max_tokens", 3}, {"logprobs", 2}}, false,
                                    "tiny", r));
  out.top_logprobs = {
      {{{'c', -0.5f}, {'z', -1.5f}},
       {{'d', -0.25f}, {'q', -2.0f}},
       {{'e', -0.75f}, {'d', -1.0f}},
       {{'f', -1.0f}, {'g', -1.25f}}},
      {{{'x', -0.5f}, {'y', -0.75f}}, {{'x', -1.0f}, {256, -2.0f}}, {{'q', -1.0f}, {'r', -1.5f}}}};
  const json top = openai_response(r, out, ByteTokenizer(), {256}, "c", "tiny", 7);
  EXPECT_EQ(top["choices"][0]["logprobs"]["top_logprobs"],
            json::parse(R"([{"d": -0.25, "q": -2.0}, {"e": -0.75, "d": -1.0},
                            {"f": -1.0, "g": -1.25}])"));
  ASSERT_FALSE(parse_openai_request({{"messages", {{{"role", "user"}, {"content", "x"}}}},
                                     {"logprobs", true},
                                     {"top_logprobs", 2}},
                                    true, "tiny", r));
  r.prompts = {"ab"};
  const json chat = openai_response(r, out, ByteTokenizer(), {256}, "c", "tiny", 7);
  EXPECT_EQ(chat["choices"][0]["logprobs"]["content"][0]["top_logprobs"],
            json::parse(R"([{"token": "d", "logprob": -0.25, "bytes": [100]},
                            {"token": "q", "logprob": -2.0, "bytes": [113]}])"));
  // The prompt counts once, the completions all their tokens (the end of document included).
  EXPECT_EQ(res["usage"], json::parse(R"({"prompt_tokens": 2, "completion_tokens": 5,
                                          "total_tokens": 7})"));
  const json chunk = openai_stream_chunk(true, "c", "tiny", 7, 1, "hi", "", true);
  EXPECT_EQ(chunk["choices"][0]["delta"], json::parse(R"({"role": "assistant", "content": "hi"})"));
  EXPECT_EQ(openai_error_json({401, "no key", "", "invalid_api_key"}),
            json::parse(R"({"error": {"message": "no key", "type": "invalid_request_error",
                                      "param": null, "code": "invalid_api_key"}})"));
}

// The logprobs of a stream's chunks, joined list by list, are the whole answer's.
TEST(OpenAIApi, StreamedLogprobsJoinToTheWholeAnswers) {
  GenerationOutput out;
  out.tokens = {{'a', 'b', 'c', 'd', 'e'}};
  out.prompt_lengths = {2};
  out.logprobs = {{-1, -2, -3, -4}};
  out.top_logprobs = {{{{'b', -0.5f}, {'z', -1.5f}},
                       {{'d', -0.25f}, {'c', -2.0f}},
                       {{'e', -0.75f}, {'d', -1.0f}},
                       {{'f', -1.0f}, {'e', -1.25f}}}};
  for (const bool chat : {false, true}) {
    OpenAIRequest r;
    const json body = chat ? json{{"messages", {{{"role", "user"}, {"content", "x"}}}},
                                  {"logprobs", true},
                                  {"top_logprobs", 2},
                                  {"stream", true}}
                           : json{{"prompt", "ab"}, {"logprobs", 2}, {"stream", true}};
    ASSERT_FALSE(parse_openai_request(body, chat, "tiny", r));
    r.prompts = {"ab"};
    const json whole =
        openai_response(r, out, ByteTokenizer(), {256}, "c", "tiny", 7)["choices"][0]["logprobs"];
    // Chunks of tokens {c}, then {d, e}: generated token k has logprobs[prompt − 1 + k].
    const auto tops = out.top_logprobs[0];
    const json first = openai_stream_logprobs(r, ByteTokenizer(), {'c'}, {-2}, {tops[1]}, 0);
    const json second =
        openai_stream_logprobs(r, ByteTokenizer(), {'d', 'e'}, {-3, -4}, {tops[2], tops[3]}, 1);
    json joined = first;
    for (auto& [key, list] : joined.items())
      for (const json& item : second[key]) list.push_back(item);
    EXPECT_EQ(joined, whole) << (chat ? "chat" : "completions");
    const json chunk = openai_stream_chunk(chat, "c", "tiny", 7, 0, "c", "", false, first);
    EXPECT_EQ(chunk["choices"][0]["logprobs"], first);
  }
}

TEST(OpenAIApi, JsonDepthIsCappedWithoutRecursion) {
  json out;
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_EQ(parse_json_body(deep, out),
            "the request body nests arrays and objects deeper than 32 levels");
  const std::string ok = std::string(32, '[') + std::string(32, ']');
  EXPECT_EQ(parse_json_body(ok, out), "");
  // Brackets inside strings (escaped quotes included) do not count.
  EXPECT_EQ(parse_json_body(R"({"a": "[[[[\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["})", out), "");
  EXPECT_EQ(parse_json_body("{", out).substr(0, 35), "the request body is not valid JSON:");
  EXPECT_EQ(json_log_summary(json(std::string(5000, 'x')), 100).size(), 100u + 16u);
}

// Llama 3's template writes <|begin_of_text|> and Llama 3's tokenizer adds it to every text:
// the chat prompt has it once, as transformers' apply_chat_template(tokenize=True) gives.
TEST(OpenAIApi, ChatPromptHasOneBos) {
  const HuggingFaceTokenizer llama(testing::source_dir() +
                                   "/tests/data/tokenizers/hf_llama3_style/tokenizer.json");
  const int32_t bos = *llama.token_to_id("<|begin_of_text|>");
  const nlohmann::ordered_json context = {{"messages", {{{"role", "user"}, {"content", "Hello"}}}},
                                          {"add_generation_prompt", true},
                                          {"bos_token", "<|begin_of_text|>"},
                                          {"eos_token", "<|eot_id|>"}};
  const std::string rendered = render_chat_template(
      "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}", context);
  ASSERT_EQ(rendered, "<|begin_of_text|>Hello");
  const std::vector<int32_t> ids =
      llama.encode(chat_prompt_text(rendered, "<|begin_of_text|>", llama));
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0], bos);
  EXPECT_NE(ids[1], bos);
  EXPECT_EQ(ids, llama.encode("Hello"));
  // A tokenizer that adds nothing keeps the template's text.
  EXPECT_EQ(chat_prompt_text(rendered, "<|begin_of_text|>", ByteTokenizer()), rendered);
}

HttpRequest with_headers(std::vector<std::pair<std::string, std::string>> headers) {
  HttpRequest r;
  r.headers = std::move(headers);
  return r;
}

TEST(OpenAIApi, AccessChecks) {
  EXPECT_TRUE(is_loopback_host("127.0.0.1"));
  EXPECT_TRUE(is_loopback_host("127.8.9.10"));
  EXPECT_TRUE(is_loopback_host("localhost"));
  EXPECT_TRUE(is_loopback_host("::1"));
  EXPECT_TRUE(is_loopback_host("[::1]"));
  EXPECT_FALSE(is_loopback_host("0.0.0.0"));
  EXPECT_FALSE(is_loopback_host("evil.example"));
  EXPECT_EQ(loopback_request_error(with_headers({{"host", "localhost:5000"}})), "");
  EXPECT_EQ(loopback_request_error(with_headers({{"host", "[::1]:80"}})), "");
  EXPECT_NE(loopback_request_error(with_headers({{"host", "evil.example:5000"}})), "");
  EXPECT_NE(loopback_request_error(with_headers({})), "");
  EXPECT_EQ(loopback_request_error(
                with_headers({{"host", "127.0.0.1:5"}, {"origin", "http://localhost:5"}})),
            "");
  EXPECT_NE(loopback_request_error(
                with_headers({{"host", "127.0.0.1:5"}, {"origin", "http://evil.example"}})),
            "");
  EXPECT_NE(loopback_request_error(with_headers({{"host", "127.0.0.1:5"}, {"origin", "null"}})),
            "");
  EXPECT_EQ(api_key_error(with_headers({{"authorization", "Bearer s3cret"}}), "s3cret"), "");
  EXPECT_EQ(api_key_error(with_headers({{"authorization", "Bearer s3cre"}}), "s3cret"),
            "incorrect API key in the Authorization header");
  EXPECT_EQ(api_key_error(with_headers({{"authorization", "Bearer s3cretX"}}), "s3cret"),
            "incorrect API key in the Authorization header");
  EXPECT_NE(api_key_error(with_headers({{"authorization", "Basic s3cret"}}), "s3cret"), "");
  EXPECT_NE(api_key_error(with_headers({}), "s3cret"), "");
}

}  // namespace
}  // namespace megatron
