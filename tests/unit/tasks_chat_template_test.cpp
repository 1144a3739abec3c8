// The chat-template renderer against python3-jinja2 (configured as transformers renders chat
// templates): tests/data/chat_templates/golden.json, written by
// tools/reference/chat_template_reference.py from the real templates of Llama-3, Qwen2, Mistral
// and ChatML models and small templates for each construct of the subset.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "../common/source_dir.h"
#include "core/error.h"
#include "tasks/serve/chat_template.h"
#include "tasks/serve/chat_template_file.h"

namespace megatron {
namespace {

using json = nlohmann::ordered_json;

TEST(ChatTemplate, MatchesJinja2OnRealAndFeatureTemplates) {
  std::ifstream in(testing::source_dir() + "/tests/data/chat_templates/golden.json");
  ASSERT_TRUE(in.good());
  const json cases = json::parse(in);
  ASSERT_GE(cases.size(), 80u);
  for (const json& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const std::string source = c["template"];
    if (c.contains("error")) {
      try {
        render_chat_template(source, c["context"]);
        ADD_FAILURE() << "no error; jinja2 raised " << c["error"];
      } catch (const Error& e) {
        EXPECT_EQ(e.message(), c["error"].get<std::string>());
      }
    } else {
      EXPECT_EQ(render_chat_template(source, c["context"]), c["output"].get<std::string>());
    }
  }
}

TEST(ChatTemplate, RefusesWhatItDoesNotRenderByName) {
  const json context = {{"messages", json::array()}};
  const auto message = [&](const std::string& source) {
    try {
      render_chat_template(source, context);
    } catch (const Error& e) {
      return e.message();
    }
    return std::string("no error");
  };
  EXPECT_EQ(message("{% macro m() %}{% endmacro %}"),
            "chat template: the statement {% macro %} is not supported");
  EXPECT_EQ(message("{{ x | wordwrap }}"), "chat template: the filter wordwrap is not supported");
  EXPECT_EQ(message("{% if true %}x"),
            "chat template: the template ends inside a block: {% endif %} missing");
  EXPECT_EQ(message("{{ 'a' + 1 }}"), "chat template: cannot apply '+' to 'a' and 1");
  EXPECT_EQ(message("{{ strftime_now('%Y') }}"),
            "chat template: the function strftime_now() is not supported");
  EXPECT_EQ(message("{{ x.y }}"), "chat template: 'y' of an undefined value");
}

TEST(ChatTemplate, ReadsTokenizerConfigAndJinjaFiles) {
  const std::string dir = testing::source_dir() + "/tests/data/chat_templates/";
  const ChatTemplateFile llama = read_chat_template_file(dir + "llama3_tokenizer_config.json");
  EXPECT_EQ(llama.bos_token, "<|begin_of_text|>");
  EXPECT_EQ(llama.eos_token, "<|eot_id|>");
  EXPECT_NE(llama.source.find("start_header_id"), std::string::npos);
  const ChatTemplateFile qwen = read_chat_template_file(dir + "qwen2_tokenizer_config.json");
  EXPECT_EQ(qwen.bos_token, "");  // null in the file
  EXPECT_EQ(chat_template_beside(dir + "no_such_dir/tokenizer.json"), "");
  try {
    read_chat_template_file(dir + "golden.json");  // JSON without a chat_template
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("has no \"chat_template\" string"), std::string::npos);
  }
}

}  // namespace
}  // namespace megatron
