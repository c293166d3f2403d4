#include "tools/dlm-serve/ServedModel.h"

#include "runtime/program/DecodeProgramSet.h"
#include "runtime/session/Session.h"

#include <algorithm>
#include <filesystem>

namespace dlm::serve {

namespace {

std::string normalizedPolicy(std::string name) {
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

std::optional<artifact::AttributeValue> knobValue(const program::KnobDeclaration &knob) {
  if (!knob.value.defined)
    return std::nullopt;
  switch (knob.type) {
  case program::ValueType::integer:
    return artifact::AttributeValue(knob.value.integer);
  case program::ValueType::real:
    return artifact::AttributeValue(knob.value.real);
  case program::ValueType::boolean:
    return artifact::AttributeValue(knob.value.boolean);
  case program::ValueType::text:
    return artifact::AttributeValue(knob.value.text);
  default:
    return std::nullopt;
  }
}

} // namespace

const ServedPolicy *ServedModel::policy(const std::string &name) const {
  if (policies.empty())
    return nullptr;
  if (name.empty())
    return &policies.front();
  for (const ServedPolicy &candidate : policies)
    if (normalizedPolicy(candidate.name) == normalizedPolicy(name))
      return &candidate;
  return nullptr;
}

bool ServedModel::declaresKnob(const std::string &knob) const {
  return std::any_of(policies.begin(), policies.end(),
                     [&](const ServedPolicy &policy) { return policy.declared.count(knob) > 0; });
}

ServedModel describeModel(const LoadedModel &model, std::string id) {
  ServedModel served;
  served.id = std::move(id);
  served.maxPositions = model.config().maxPositions;
  served.vocabSize = model.config().vocabSize;
  const program::DecodeProgramSet &programs = model.decodePrograms();
  for (size_t i = 0; i < programs.names().size(); ++i) {
    ServedPolicy policy;
    policy.name = programs.names()[i];
    for (const program::KnobDeclaration &knob : programs.program(i).knobs()) {
      policy.declared.insert(knob.name);
      if (std::optional<artifact::AttributeValue> value = knobValue(knob))
        policy.defaults[knob.name] = *value;
    }
    served.policies.push_back(std::move(policy));
  }
  const LoadedModel *loaded = &model;
  if (const Tokenizer *tokenizer = model.tokenizer())
    served.encode = [tokenizer](const std::string &text, bool parseSpecialTokens) {
      return tokenizer->encode(text, /*addSpecialTokens=*/true,
                               /*specialTokensAsText=*/!parseSpecialTokens);
    };
  if (model.chat())
    served.encodeChat = [loaded](const ChatRequest &request) { return loaded->encodeChat(request); };
  return served;
}

std::string modelIdFromPath(const std::string &path) {
  return std::filesystem::path(path).stem().string();
}

} // namespace dlm::serve
