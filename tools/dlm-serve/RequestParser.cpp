#include "tools/dlm-serve/RequestParser.h"

#include "runtime/model/ModelSpec.h"
#include "runtime/sampling/Decoding.h"
#include "support/JsonText.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <set>

namespace dlm::serve {

namespace {

using Json = nlohmann::json;

// Thrown inside this file only: the first problem found refuses the request.
struct Refusal {
  ApiError error;
};

[[noreturn]] void refuse(std::string message, std::string param = "", std::string code = "") {
  throw Refusal{badRequest(std::move(message), std::move(param), std::move(code))};
}

const std::set<std::string> &commonFields() {
  static const std::set<std::string> fields = {"model",
                                               "stream",
                                               "stream_options",
                                               "max_tokens",
                                               "temperature",
                                               "top_p",
                                               "seed",
                                               "stop",
                                               "n",
                                               "user",
                                               "logprobs",
                                               "top_logprobs",
                                               "presence_penalty",
                                               "frequency_penalty",
                                               "logit_bias",
                                               "policy",
                                               "parse_special_tokens"};
  return fields;
}
const std::set<std::string> &endpointFields(Endpoint endpoint) {
  static const std::set<std::string> completions = {"prompt", "echo", "best_of", "suffix"};
  static const std::set<std::string> chat = {"messages", "max_completion_tokens", "tools",
                                             "tool_choice"};
  return endpoint == Endpoint::completions ? completions : chat;
}

bool isNull(const Json &body, const char *field) {
  return !body.contains(field) || body[field].is_null();
}

// nlohmann holds a non-negative integer as unsigned: one past int64's range is refused by its
// real value instead of wrapping to a negative one.
int64_t integerField(const Json &value, const std::string &field) {
  if (value.is_number_unsigned()) {
    if (value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      refuse("'" + field + "' is " + value.dump() + ", above the largest integer accepted (" +
                 std::to_string(INT64_MAX) + ")",
             field);
    return static_cast<int64_t>(value.get<uint64_t>());
  }
  if (value.is_number_integer())
    return value.get<int64_t>();
  if (value.is_number_float()) {
    double real = value.get<double>();
    if (std::isfinite(real) && real == std::floor(real)) {
      if (std::fabs(real) < 9e15)
        return static_cast<int64_t>(real);
      refuse("'" + field + "' is " + value.dump() + ", outside the integers accepted", field);
    }
  }
  refuse("'" + field + "' must be an integer", field);
}

double realField(const Json &value, const std::string &field) {
  if (!value.is_number())
    refuse("'" + field + "' must be a number", field);
  return value.get<double>();
}

bool boolField(const Json &value, const std::string &field) {
  if (!value.is_boolean())
    refuse("'" + field + "' must be a boolean", field);
  return value.get<bool>();
}

artifact::AttributeValue knobFromJson(const Json &value, const std::string &field) {
  if (value.is_boolean())
    return value.get<bool>();
  if (value.is_number_integer())
    return integerField(value, field);
  if (value.is_number_float())
    return value.get<double>();
  if (value.is_string())
    return value.get<std::string>();
  refuse("'" + field + "' must be a number, a boolean or a string", field);
}


// Request fields and knobs may be anywhere in int64's range; their sums and products are checked.
std::optional<int64_t> checkedAdd(int64_t a, int64_t b) {
  int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum))
    return std::nullopt;
  return sum;
}

void checkUnsupported(const Json &body) {
  if (!isNull(body, "n") && integerField(body["n"], "n") != 1)
    refuse("'n' other than 1 is not supported: send one request per completion", "n");
  if (!isNull(body, "best_of") && integerField(body["best_of"], "best_of") != 1)
    refuse("'best_of' other than 1 is not supported", "best_of");
  if (!isNull(body, "logprobs") && !(body["logprobs"].is_boolean() && !body["logprobs"].get<bool>()))
    refuse("'logprobs' is not supported", "logprobs");
  if (!isNull(body, "top_logprobs"))
    refuse("'top_logprobs' is not supported", "top_logprobs");
  if (!isNull(body, "echo") && boolField(body["echo"], "echo"))
    refuse("'echo' is not supported", "echo");
  if (!isNull(body, "suffix"))
    refuse("'suffix' is not supported", "suffix");
  if (!isNull(body, "tools") || !isNull(body, "tool_choice"))
    refuse("'tools' are not supported", isNull(body, "tools") ? "tool_choice" : "tools");
  for (const char *penalty : {"presence_penalty", "frequency_penalty"})
    if (!isNull(body, penalty) && realField(body[penalty], penalty) != 0)
      refuse(std::string("'") + penalty + "' is not supported (only 0)", penalty);
  if (!isNull(body, "logit_bias") && !(body["logit_bias"].is_object() && body["logit_bias"].empty()))
    refuse("'logit_bias' is not supported", "logit_bias");
}

std::vector<int32_t> tokenIds(const Json &list, const ServedModel &model) {
  std::vector<int32_t> ids;
  for (const Json &item : list) {
    if (!item.is_number_integer())
      refuse("'prompt' must be a string or a list of token ids", "prompt");
    // Compared as the JSON holds it: an unsigned id past int64 must not wrap into range.
    const bool inside = item.is_number_unsigned()
                            ? item.get<uint64_t>() < static_cast<uint64_t>(model.vocabSize) ||
                                  (model.vocabSize <= 0 && item.get<uint64_t>() <= INT32_MAX)
                            : item.get<int64_t>() >= 0 &&
                                  (model.vocabSize > 0 ? item.get<int64_t>() < model.vocabSize
                                                       : item.get<int64_t>() <= INT32_MAX);
    if (!inside)
      refuse("token id " + item.dump() + " in 'prompt' is outside the vocabulary of " +
                 std::to_string(model.vocabSize),
             "prompt");
    ids.push_back(static_cast<int32_t>(item.get<int64_t>()));
  }
  return ids;
}

// A text too long for the context whatever its tokens is refused before it is tokenized (a
// prompt of megabytes would otherwise be tokenized whole first).
void checkTextFits(const ServedModel &model, size_t bytes, const char *param) {
  if (model.maxPromptBytes > 0 && static_cast<int64_t>(bytes) > model.maxPromptBytes)
    throw Refusal{contextLengthExceeded(
        std::string("the ") + (std::string(param) == "prompt" ? "prompt" : "messages' text") +
            " is " + std::to_string(bytes) + " bytes, more than any " +
            std::to_string(model.maxPositions) + " tokens of this model's context can hold (" +
            std::to_string(model.maxPromptBytes) + " bytes)",
        param)};
}

std::vector<int32_t> completionPrompt(const Json &body, const ServedModel &model,
                                      bool parseSpecial) {
  if (isNull(body, "prompt"))
    refuse("'prompt' is required", "prompt");
  Json prompt = body["prompt"];
  // A list holding one prompt is that prompt; several are a batch, which is n > 1.
  if (prompt.is_array() && !prompt.empty() && (prompt[0].is_string() || prompt[0].is_array())) {
    if (prompt.size() != 1)
      refuse("a list of several prompts is not supported: send one request per prompt",
             "prompt");
    prompt = Json(prompt[0]);
  }
  std::vector<int32_t> ids;
  if (prompt.is_string()) {
    if (!model.encode)
      refuse("the model has no tokenizer: give the prompt as token ids", "prompt");
    checkTextFits(model, prompt.get_ref<const std::string &>().size(), "prompt");
    ids = model.encode(prompt.get<std::string>(), parseSpecial);
  } else if (prompt.is_array()) {
    ids = tokenIds(prompt, model);
  } else {
    refuse("'prompt' must be a string or a list of token ids", "prompt");
  }
  if (ids.empty())
    refuse("'prompt' is empty", "prompt");
  return ids;
}

std::vector<int32_t> chatPrompt(const Json &body, const ServedModel &model, bool parseSpecial) {
  if (!model.encodeChat)
    refuse("the model '" + model.id +
               "' has no chat template (its checkpoint had none): use /v1/completions",
           "messages", "no_chat_template");
  if (isNull(body, "messages") || !body["messages"].is_array() || body["messages"].empty())
    refuse("'messages' must be a non-empty list", "messages");
  ChatRequest chat;
  chat.addGenerationPrompt = true;
  chat.parseSpecialTokensInInput = parseSpecial;
  size_t textBytes = 0;
  for (const Json &message : body["messages"]) {
    if (!message.is_object() || !message.contains("role") || !message["role"].is_string())
      refuse("each message needs a 'role'", "messages");
    nlohmann::ordered_json rendered = {{"role", message["role"].get<std::string>()}};
    const Json content = message.value("content", Json());
    if (content.is_string()) {
      rendered["content"] = content.get<std::string>();
    } else if (content.is_array()) {
      // Content parts: only text.
      std::string text;
      for (const Json &part : content) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string())
          refuse("only text content parts are supported", "messages");
        text += part["text"].get<std::string>();
      }
      rendered["content"] = text;
    } else if (content.is_null()) {
      rendered["content"] = "";
    } else {
      refuse("a message's 'content' must be a string or a list of text parts", "messages");
    }
    textBytes += rendered["content"].get_ref<const std::string &>().size();
    checkTextFits(model, textBytes, "messages");
    chat.messages.push_back(std::move(rendered));
  }
  StatusOr<std::vector<int32_t>> ids = model.encodeChat(chat);
  if (!ids)
    refuse(ids.status().message(), "messages");
  return std::move(*ids);
}

std::vector<std::string> stopStrings(const Json &stop) {
  std::vector<std::string> strings;
  if (stop.is_string()) {
    strings.push_back(stop.get<std::string>());
  } else if (stop.is_array()) {
    if (stop.size() > 4)
      refuse("'stop' takes at most 4 strings", "stop");
    for (const Json &item : stop) {
      if (!item.is_string())
        refuse("'stop' must be a string or a list of strings", "stop");
      strings.push_back(item.get<std::string>());
    }
  } else if (!stop.is_null()) {
    refuse("'stop' must be a string or a list of strings", "stop");
  }
  for (const std::string &text : strings)
    if (text.empty())
      refuse("'stop' strings must not be empty", "stop");
  return strings;
}

// temperature / top_p: the policy's knob, or only its neutral value.
void samplingKnob(const Json &body, const char *field, std::optional<double> neutral,
                  const ServedPolicy &policy, artifact::Attributes &knobs) {
  if (isNull(body, field))
    return;
  const double value = realField(body[field], field);
  if (policy.knobs.names.count(field)) {
    knobs[field] = value;
    return;
  }
  if (neutral && value == *neutral)
    return;
  refuse("the policy '" + policy.name + "' has no '" + field + "' knob" +
             (neutral ? " (only the neutral value is accepted)" : ""),
         field);
}

ParsedRequest parse(Endpoint endpoint, const Json &body, const ServedModel &model,
                    const GenerateRequest &base) {
  if (!body.is_object())
    refuse("the request body must be a JSON object");
  // Unknown fields first: a misspelt knob must not pass silently.
  for (const auto &[field, value] : body.items()) {
    if (commonFields().count(field) || endpointFields(endpoint).count(field))
      continue;
    if (model.declaresKnob(field))
      continue;
    refuse("unknown parameter '" + field + "': not an OpenAI field this server takes nor a knob "
               "of the model's decode programs",
           field);
  }
  if (!isNull(body, "model")) {
    if (!body["model"].is_string())
      refuse("'model' must be a string", "model");
    if (body["model"].get<std::string>() != model.id)
      throw Refusal{modelNotFound(body["model"].get<std::string>())};
  }
  checkUnsupported(body);

  ParsedRequest parsed;
  parsed.request = base;
  GenerateRequest &request = parsed.request;
  request.promptText.reset();
  request.promptIds.clear();

  if (!isNull(body, "stream"))
    parsed.stream = boolField(body["stream"], "stream");
  if (!isNull(body, "stream_options")) {
    const Json &options = body["stream_options"];
    if (!options.is_object())
      refuse("'stream_options' must be an object", "stream_options");
    if (!parsed.stream)
      refuse("'stream_options' goes with 'stream': true", "stream_options");
    if (options.contains("include_usage") && !options["include_usage"].is_null())
      parsed.includeUsage = boolField(options["include_usage"], "stream_options.include_usage");
  }

  std::string policyName;
  if (auto found = request.knobs.find(spec::kKnobPolicy); found != request.knobs.end())
    if (const std::string *name = std::get_if<std::string>(&found->second))
      policyName = *name;
  if (!isNull(body, "policy")) {
    if (!body["policy"].is_string())
      refuse("'policy' must be a string", "policy");
    policyName = body["policy"].get<std::string>();
  }
  const ServedPolicy *policy = model.policy(policyName);
  if (!policy) {
    std::string names;
    for (size_t i = 0; i < model.policies.size(); ++i)
      names += (i ? (i + 1 == model.policies.size() ? " or " : ", ") : "") + model.policies[i].name;
    refuse(model.policies.empty() ? "the artifact has no decode program"
                                  : "unknown policy '" + policyName + "' (expected " + names + ")",
           "policy");
  }
  request.knobs.erase(std::string(spec::kKnobPolicy));
  if (!policyName.empty())
    request.knobs[std::string(spec::kKnobPolicy)] = policyName;

  if (!isNull(body, "seed")) {
    // Any 64-bit seed: the unsigned range whole.
    if (body["seed"].is_number_unsigned()) {
      request.seed = body["seed"].get<uint64_t>();
    } else {
      const int64_t seed = integerField(body["seed"], "seed");
      if (seed < 0)
        refuse("'seed' must not be negative, got " + std::to_string(seed), "seed");
      request.seed = static_cast<uint64_t>(seed);
    }
  }
  if (!isNull(body, "stop"))
    parsed.stop = stopStrings(body["stop"]);

  // Knobs by name (after the OpenAI fields that share a name with one are handled below).
  bool stepsGiven = request.knobs.count(std::string(spec::kKnobSteps)) > 0;
  for (const auto &[field, value] : body.items()) {
    if (commonFields().count(field) || endpointFields(endpoint).count(field) || value.is_null())
      continue;
    request.knobs[field] = knobFromJson(value, field);
    // Checked against the chosen program's declaration (type, range, choices) here, so that the
    // error names the field.
    if (policy->checkKnob && policy->knobs.names.count(field))
      if (Status status = policy->checkKnob(field, request.knobs[field]); !status.isOk())
        refuse(status.message(), field);
    if (field == spec::kKnobSteps)
      stepsGiven = true;
  }
  samplingKnob(body, "temperature", std::nullopt, *policy, request.knobs);
  samplingKnob(body, "top_p", 1.0, *policy, request.knobs);

  // max_tokens -> the policy's length knobs (tools/dlm-run/RequestLength.h, as dlm-run's
  // --max-new-tokens).
  const char *maxField = "max_tokens";
  if (endpoint == Endpoint::chatCompletions && isNull(body, maxField) &&
      !isNull(body, "max_completion_tokens"))
    maxField = "max_completion_tokens";
  const std::string genLength(spec::kKnobGenLength), maxNew(spec::kKnobMaxNewTokens);
  auto knobOrDefault = [&](const std::string &name) {
    std::optional<int64_t> value = tools::integerKnob(request.knobs, name);
    return value ? value : tools::integerKnob(policy->knobs.values, name);
  };
  if (!isNull(body, maxField)) {
    const int64_t maxTokens = integerField(body[maxField], maxField);
    if (maxTokens < 1)
      refuse(std::string("'") + maxField + "' must be at least 1, got " +
                 std::to_string(maxTokens),
             maxField);
    parsed.maxTokens = maxTokens;
    if (Status status =
            tools::setRequestLength(policy->name, policy->knobs, maxTokens, stepsGiven,
                                      request.knobs);
        !status.isOk())
      refuse(std::string("'") + maxField + "': " + status.message(), maxField);
  }

  bool parseSpecial = false;
  if (!isNull(body, "parse_special_tokens"))
    parseSpecial = boolField(body["parse_special_tokens"], "parse_special_tokens");
  request.promptIds = endpoint == Endpoint::completions ? completionPrompt(body, model, parseSpecial)
                                                        : chatPrompt(body, model, parseSpecial);

  std::optional<int64_t> generated = policy->knobs.names.count(genLength) ? knobOrDefault(genLength)
                                                                       : knobOrDefault(maxNew);
  const int64_t promptTokens = static_cast<int64_t>(request.promptIds.size());
  const int64_t requested =
      generated ? checkedAdd(promptTokens, *generated).value_or(INT64_MAX) : promptTokens;
  if (model.maxPositions > 0 && generated && requested > model.maxPositions)
    throw Refusal{contextLengthExceeded(
        "This model's maximum context length is " + std::to_string(model.maxPositions) +
        " tokens. However, you requested " + std::to_string(requested) +
        " tokens (" + std::to_string(promptTokens) + " in the prompt, " +
        std::to_string(*generated) + " for the completion). Please reduce the prompt or " +
        maxField + ".",
        endpoint == Endpoint::completions ? "prompt" : "messages")};
  return parsed;
}

} // namespace

std::variant<ParsedRequest, ApiError> parseRequest(Endpoint endpoint, const std::string &body,
                                                   const ServedModel &model,
                                                   const GenerateRequest &base) {
  StatusOr<Json> parsed = parseJsonText<Json>(body, "the request body");
  if (!parsed)
    return badRequest(parsed.status().message());
  Json &json = *parsed;
  try {
    return parse(endpoint, json, model, base);
  } catch (const Refusal &refusal) {
    return refusal.error;
  } catch (const nlohmann::json::exception &error) {
    return badRequest(std::string("bad request: ") + error.what());
  }
}

} // namespace dlm::serve
