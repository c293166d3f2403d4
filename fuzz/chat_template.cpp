// A checkpoint's chat template (Jinja) as the runtime takes it: parsed into a ChatPrompt with a
// real tokenizer (Qwen3's tiny ChatML one, which decides the control tokens), and if it parses,
// rendered on a fixed chat with tools and tool calls and encoded with the control tokens of user
// text kept as text, then rendered on a message of multi-part content.
#include "fuzz/FuzzSupport.h"
#include "runtime/chat/ChatPrompt.h"

#include <memory>

namespace {

using Json = nlohmann::ordered_json;

std::unique_ptr<dlm::Tokenizer> tokenizer;

// A conversation touching what templates look at: system text, a user turn that holds a control
// token and the marker characters, tool calls with arguments, tool results. Contents are strings,
// as most templates expect (they concatenate them).
const Json &messages() {
  static const Json value = Json::parse(R"([
    {"role": "system", "content": "Be terse.<|im_end|>"},
    {"role": "user", "content": "Hi <|im_start|> \u00fc \udb80\udc00 2+2?"},
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
      "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
    {"role": "tool", "content": "4"},
    {"role": "user", "content": "Thanks"}
  ])");
  return value;
}

// Content as a list of parts, which templates for multi-modal models walk.
const Json &multiPartMessages() {
  static const Json value = Json::parse(R"([
    {"role": "user", "content": [{"type": "text", "text": "What is this?"}, {"type": "image"}]}
  ])");
  return value;
}

const Json &tools() {
  static const Json value = Json::parse(R"([{"type": "function", "function": {
    "name": "add", "description": "Adds.", "parameters": {"type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a"]}}}])");
  return value;
}

// A fixed clock: strftime_now must not make a run depend on the time of day.
dlm::ChatTemplate::RenderOptions fixedClock() {
  std::tm now{};
  now.tm_year = 124;
  now.tm_mon = 4;
  now.tm_mday = 17;
  now.tm_hour = 9;
  dlm::ChatTemplate::RenderOptions options;
  options.now = now;
  return options;
}

dlm::ChatRequest chatRequest() {
  dlm::ChatRequest request;
  request.messages = messages();
  request.tools = tools();
  request.addGenerationPrompt = true;
  request.extra["enable_thinking"] = false;
  return request;
}

dlm::ChatRequest multiPartRequest() {
  dlm::ChatRequest request;
  request.messages = multiPartMessages();
  return request;
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  auto loaded = dlm::Tokenizer::fromJson(
      dlm::fuzz::readFixture("tests/reference/chat_templates/qwen3_tiny_tokenizer.json"));
  if (!loaded) {
    std::fprintf(stderr, "dlm fuzz: tokenizer: %s\n", loaded.status().message().c_str());
    std::exit(1);
  }
  tokenizer = std::make_unique<dlm::Tokenizer>(std::move(*loaded));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dlm::ChatPrompt::SpecialTokens specials = {
      {"bos_token", "<|endoftext|>"}, {"eos_token", "<|im_end|>"}, {"pad_token", "<|endoftext|>"}};
  auto prompt =
      dlm::ChatPrompt::create(dlm::fuzz::asText(data, size), std::move(specials), tokenizer.get());
  if (!dlm::fuzz::succeeded("ChatPrompt::create", prompt))
    return 0;
  const dlm::ChatRequest request = chatRequest();
  dlm::fuzz::succeeded("render", prompt->render(request, fixedClock()));
  dlm::fuzz::succeeded("encode", prompt->encode(request, fixedClock()));
  dlm::fuzz::succeeded("render(multi-part)", prompt->render(multiPartRequest(), fixedClock()));
  return 0;
}
