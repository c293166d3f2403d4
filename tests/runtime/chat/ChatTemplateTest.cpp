// Chat templates against transformers 5.23: every case of fixtures.json (made by
// tests/reference/chat_templates/make_fixtures.py) renders byte for byte as transformers renders
// it, fails with raise_exception's message where the template raises, and fails where jinja2 fails.
// Unit tests check the named errors for unsupported constructs and syntax errors.
#include "runtime/chat/ChatTemplate.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <ctime>
#include <fstream>
#include <iomanip>
#include <map>
#include <sstream>

namespace dlm {
namespace {

using Json = nlohmann::ordered_json;

const Json &fixtures() {
  static const Json json = [] {
    std::ifstream in(DLM_CHAT_TEMPLATE_FIXTURES);
    std::stringstream text;
    text << in.rdbuf();
    return Json::parse(text.str());
  }();
  return json;
}

std::tm fixtureClock() {
  std::tm now{};
  std::istringstream(fixtures()["now"].get<std::string>()) >> std::get_time(&now, "%Y-%m-%dT%H:%M:%S");
  now.tm_isdst = -1;
  std::mktime(&now); // fills in the weekday and day of the year
  return now;
}

Json caseContext(const Json &testCase) {
  Json context = Json::object();
  context["messages"] = fixtures()["conversations"][testCase["conversation"].get<std::string>()];
  context["tools"] = testCase["tools"].get<bool>() ? fixtures()["tools"] : Json(nullptr);
  context["documents"] = nullptr;
  context["add_generation_prompt"] = testCase["add_generation_prompt"];
  for (const auto &[key, value] : fixtures()["special_tokens"].items())
    context[key] = value;
  for (const auto &[key, value] : testCase["variables"].items())
    context[key] = value;
  return context;
}

TEST(ChatTemplateFixtures, RenderLikeTransformers) {
  std::map<std::string, ChatTemplate> templates;
  for (const auto &[name, source] : fixtures()["templates"].items()) {
    auto parsed = ChatTemplate::parse(source.get<std::string>());
    ASSERT_TRUE(parsed.isOk()) << name << ": " << parsed.status().message();
    templates.emplace(name, std::move(*parsed));
  }
  ChatTemplate::RenderOptions options;
  options.now = fixtureClock();
  int checked = 0;
  for (const Json &testCase : fixtures()["cases"]) {
    std::string name = testCase["name"];
    const ChatTemplate &chatTemplate = templates.at(testCase["template"].get<std::string>());
    auto rendered = chatTemplate.render(caseContext(testCase), options);
    if (testCase.contains("expected")) {
      EXPECT_TRUE(rendered.isOk()) << name << ": " << rendered.status().message();
      if (rendered.isOk())
        EXPECT_EQ(*rendered, testCase["expected"].get<std::string>()) << name;
    } else if (testCase.contains("raised")) {
      EXPECT_FALSE(rendered.isOk()) << name;
      EXPECT_EQ(rendered.status().message(), testCase["raised"].get<std::string>()) << name;
    } else {
      EXPECT_FALSE(rendered.isOk()) << name << ": jinja2 failed with " << testCase["error"];
    }
    ++checked;
  }
  EXPECT_GE(checked, 100);
}

TEST(ChatTemplateFixtures, RefusedConstructsAreNamed) {
  for (const char *section : {"refused", "syntax_errors"})
    for (const Json &entry : fixtures()[section]) {
      std::string source = entry["source"];
      auto parsed = ChatTemplate::parse(source);
      ASSERT_FALSE(parsed.isOk()) << source;
      EXPECT_NE(parsed.status().message().find(entry["error"].get<std::string>()), std::string::npos)
          << source << "\n  got: " << parsed.status().message();
    }
}

std::string render(const std::string &source, const Json &context = Json::object()) {
  auto parsed = ChatTemplate::parse(source);
  if (!parsed.isOk())
    return "PARSE ERROR: " + parsed.status().message();
  auto rendered = parsed->render(context);
  return rendered.isOk() ? *rendered : "RENDER ERROR: " + rendered.status().message();
}

TEST(ChatTemplate, UnsupportedConstructNamesLineAndConstruct) {
  EXPECT_EQ(render("x\n\n{% macro m() %}{% endmacro %}"),
            "PARSE ERROR: chat template line 3: not supported yet: the 'macro' tag");
  EXPECT_EQ(render("{{ x | wordwrap(3) }}"),
            "PARSE ERROR: chat template line 1: not supported yet: the 'wordwrap' filter");
  EXPECT_EQ(render("{{ joiner() }}"),
            "PARSE ERROR: chat template line 1: not supported yet: the function 'joiner'");
}

TEST(ChatTemplate, SyntaxErrorsNameTheLine) {
  EXPECT_EQ(render("{% for m in messages %}\n{{ m }}"),
            "PARSE ERROR: chat template line 2: unexpected end of template: expected 'endfor'");
  EXPECT_EQ(render("\n{% if %}{% endif %}"),
            "PARSE ERROR: chat template line 2: unexpected end of statement block '%}'");
  EXPECT_EQ(render("{{ 'abc }}"), "PARSE ERROR: chat template line 1: unterminated string");
}

TEST(ChatTemplate, RaiseExceptionGivesTheMessage) {
  EXPECT_EQ(render("a{{ raise_exception('Only user and assistant roles are supported!') }}"),
            "RENDER ERROR: Only user and assistant roles are supported!");
}

TEST(ChatTemplate, RenderErrorsNameTheLine) {
  EXPECT_EQ(render("\n{{ x.y }}"), "RENDER ERROR: chat template line 2: 'x' is undefined");
  EXPECT_EQ(render("{{ 'a' + 1 }}"),
            "RENDER ERROR: chat template line 1: unsupported operand type(s) for +: 'str' and 'int'");
  EXPECT_EQ(render("{% set n = 1 %}{% set n.a = 2 %}"),
            "RENDER ERROR: chat template line 1: cannot assign attribute on non-namespace object");
}

// Found by fuzz/chat_template: an integer literal past 64 bits threw out of the parser
// (std::stoll), and integer arithmetic past 64 bits was undefined (INT64_MIN % -1 traps; 2 **
// 2**62 looped 2^62 times). Python's ints have no bound; here such values are named errors.
TEST(ChatTemplate, IntegersBeyond64BitsAreNamedErrors) {
  EXPECT_EQ(render("{{ range(88888888888888888888888) }}"),
            "PARSE ERROR: chat template line 1: not supported yet: the integer "
            "88888888888888888888888 (beyond 64 bits)");
  EXPECT_EQ(render("{{ x.99999999999999999999 }}"),
            "PARSE ERROR: chat template line 1: not supported yet: the integer "
            "99999999999999999999 (beyond 64 bits)");
  EXPECT_EQ(render("{{ 1e999 }} {{ 1e-999 }} {{ 9223372036854775807 }}"),
            "inf 0.0 9223372036854775807");
  EXPECT_EQ(render("{{ 9223372036854775807 + 1 }}"),
            "RENDER ERROR: chat template line 1: not supported yet: 9223372036854775807 + 1 is "
            "beyond 64-bit integers");
  EXPECT_EQ(render("{{ -(-9223372036854775807 - 1) }}"),
            "RENDER ERROR: chat template line 1: not supported yet: 0 - -9223372036854775808 is "
            "beyond 64-bit integers");
  EXPECT_EQ(render("{{ 3037000500 * 3037000500 }}"),
            "RENDER ERROR: chat template line 1: not supported yet: 3037000500 * 3037000500 is "
            "beyond 64-bit integers");
  EXPECT_EQ(render("{{ 2 ** 4611686018427387904 }}"),
            "RENDER ERROR: chat template line 1: not supported yet: 2 ** 4611686018427387904 is "
            "beyond 64-bit integers");
  EXPECT_EQ(render("{{ 2 ** 62 }} {{ (-2) ** 63 }} {{ 1 ** 4611686018427387904 }} {{ 2 ** -1 }}"),
            "4611686018427387904 -9223372036854775808 1 0.5");
  const std::string min = "(-9223372036854775807 - 1)";
  EXPECT_EQ(render("{{ " + min + " % -1 }} {{ 7 // -1 }} {{ -7 // 2 }} {{ -7 % 3 }}"), "0 -7 -4 2");
  EXPECT_EQ(render("{{ " + min + " // -1 }}"),
            "RENDER ERROR: chat template line 1: not supported yet: 0 - -9223372036854775808 is "
            "beyond 64-bit integers");
  EXPECT_EQ(render("{{ " + min + " is divisibleby(-1) }}"), "True");
  EXPECT_EQ(render("{{ " + min + " | abs }}"),
            "RENDER ERROR: chat template line 1: not supported yet: abs(-9223372036854775808) is "
            "beyond 64-bit integers");
  EXPECT_EQ(render("{{ 1e300 | int }}"),
            "RENDER ERROR: chat template line 1: not supported yet: int(1e+300) is beyond 64-bit "
            "integers");
  EXPECT_EQ(render("{{ (1e999 - 1e999) | int(7) }} {{ 2.9 | int }} {{ '1e300' | int(5) }}"),
            "7 2 5");
  EXPECT_EQ(render("{{ range(9223372036854775806, 9223372036854775807, 5) | list }}"),
            "[9223372036854775806]");
}

TEST(ChatTemplate, RepetitionIsBounded) {
  EXPECT_EQ(render("{{ ('ab' * 3) ~ ([1] * 2) | string }}"), "ababab[1, 1]");
  EXPECT_EQ(render("{{ 'ab' * 1000000000000000000 }}"),
            "RENDER ERROR: chat template line 1: not supported yet: repeating 2 bytes "
            "1000000000000000000 times (more than 4194304)");
  // An empty sequence repeats to empty at once, however many times (the fuzzer's timeout).
  EXPECT_EQ(render("{{ ('' * 500000000000000000) ~ ([] * 500000000000000000) | length }}"), "0");
  EXPECT_EQ(render("{{ 'ab' * -3 }}{{ [1] * 0 }}"), "[]");
  EXPECT_EQ(render("{{ [1, 2] * 4000000 }}"),
            "RENDER ERROR: chat template line 1: not supported yet: repeating 2 items 4000000 "
            "times (more than 4194304)");
  // What a template renders is bounded too: encoding megabytes of prompt took seconds.
  EXPECT_EQ(render("{{ 'ab' * 1000000 }}"),
            "RENDER ERROR: chat template line 1: not supported yet: a rendered chat prompt of "
            "more than 1048576 bytes");
  EXPECT_EQ(render("{% for i in range(60000) %}{{ 'ab' * 10 }}{% endfor %}"),
            "RENDER ERROR: chat template line 1: not supported yet: a rendered chat prompt of "
            "more than 1048576 bytes");
  EXPECT_EQ(render("{{ ('ab' * 500000) | length }}"), "1000000");
}

TEST(ChatTemplate, ContextKeyOrderShowsInTojson) {
  Json context = Json::parse(R"({"tool": {"name": "f", "arguments": {"z": 1, "a": [1.0, "é"]}}})");
  EXPECT_EQ(render("{{ tool | tojson }}", context),
            R"({"name": "f", "arguments": {"z": 1, "a": [1.0, "é"]}})");
  // A plain nlohmann::json sorts keys, so the order is lost but the text otherwise the same.
  auto parsed = ChatTemplate::parse("{{ tool | tojson }}");
  ASSERT_TRUE(parsed.isOk());
  auto rendered = parsed->render(nlohmann::json::parse(context.dump()));
  ASSERT_TRUE(rendered.isOk());
  EXPECT_EQ(*rendered, R"({"arguments": {"a": [1.0, "é"], "z": 1}, "name": "f"})");
}

TEST(ChatTemplate, StrftimeNowUsesTheInjectedClock) {
  auto parsed = ChatTemplate::parse("{{ strftime_now('%d %b %Y') }}");
  ASSERT_TRUE(parsed.isOk());
  ChatTemplate::RenderOptions options;
  std::tm now{};
  now.tm_year = 2025 - 1900;
  now.tm_mon = 0;
  now.tm_mday = 2;
  options.now = now;
  auto rendered = parsed->render(Json::object(), options);
  ASSERT_TRUE(rendered.isOk());
  EXPECT_EQ(*rendered, "02 Jan 2025");
}

TEST(ChatTemplate, ContextMustBeAnObject) {
  auto parsed = ChatTemplate::parse("x");
  ASSERT_TRUE(parsed.isOk());
  EXPECT_FALSE(parsed->render(Json::array()).isOk());
}

} // namespace
} // namespace dlm
