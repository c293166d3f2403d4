#include "tools/dlm-run/RequestLength.h"

#include "runtime/model/ModelSpec.h"
#include "runtime/program/DecodeProgram.h"

#include <algorithm>
#include <cmath>

namespace dlm::tools {

using program::KnobDeclaration;
using program::ValueType;

namespace {

std::optional<artifact::AttributeValue> declaredValue(const KnobDeclaration &knob) {
  if (!knob.value.defined)
    return std::nullopt;
  switch (knob.type) {
  case ValueType::integer:
    return artifact::AttributeValue(knob.value.integer);
  case ValueType::real:
    return artifact::AttributeValue(knob.value.real);
  case ValueType::boolean:
    return artifact::AttributeValue(knob.value.boolean);
  case ValueType::text:
    return artifact::AttributeValue(knob.value.text);
  default:
    return std::nullopt;
  }
}

std::optional<int64_t> checkedMultiply(int64_t a, int64_t b) {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product))
    return std::nullopt;
  return product;
}

} // namespace

DeclaredKnobs declaredKnobs(const program::DecodeProgram &program) {
  DeclaredKnobs declared;
  for (const KnobDeclaration &knob : program.knobs()) {
    declared.names.insert(knob.name);
    if (std::optional<artifact::AttributeValue> value = declaredValue(knob))
      declared.values[knob.name] = *value;
  }
  return declared;
}

std::string textKnob(const artifact::Attributes &knobs, std::string_view name) {
  auto found = knobs.find(name);
  const std::string *text =
      found == knobs.end() ? nullptr : std::get_if<std::string>(&found->second);
  return text ? *text : std::string();
}

std::optional<int64_t> integerKnob(const artifact::Attributes &knobs, std::string_view name) {
  auto found = knobs.find(name);
  if (found == knobs.end())
    return std::nullopt;
  if (const int64_t *integer = std::get_if<int64_t>(&found->second))
    return *integer;
  // A whole real outside int64's range has no integer value (the cast would be undefined).
  if (const double *real = std::get_if<double>(&found->second))
    if (*real == std::floor(*real) && std::fabs(*real) < 9e18)
      return static_cast<int64_t>(*real);
  return std::nullopt;
}

Status setRequestLength(std::string_view programName, const DeclaredKnobs &program,
                        int64_t maxNewTokens, bool stepsGiven, artifact::Attributes &knobs) {
  const std::string genLength(spec::kKnobGenLength), maxNew(spec::kKnobMaxNewTokens),
      blockLength(spec::kKnobBlockLength), steps(spec::kKnobSteps);
  if (program.names.count(maxNew)) {
    knobs[maxNew] = maxNewTokens;
    return Status::ok();
  }
  if (!program.names.count(genLength))
    return Status::error("the decode program '" + std::string(programName) +
                         "' has no length knob (gen_length or max_new_tokens)");
  auto requestOrDefault = [&](const std::string &name) {
    std::optional<int64_t> value = integerKnob(knobs, name);
    return value ? value : integerKnob(program.values, name);
  };
  const Status tooLarge = Status::error(std::to_string(maxNewTokens) +
                                        " new tokens are too many for the model");
  int64_t length = maxNewTokens;
  std::optional<int64_t> block = requestOrDefault(blockLength);
  // The programs whose blocks must fill gen_length (they spread `steps` over the blocks) take it
  // in whole blocks; the others (block-refinement) generate any length as it is.
  if (block && *block > 0 && program.names.count(blockLength) && program.names.count(steps)) {
    const int64_t blocks = maxNewTokens / *block + (maxNewTokens % *block != 0);
    std::optional<int64_t> rounded = checkedMultiply(blocks, *block);
    if (!rounded)
      return tooLarge;
    length = *rounded;
  }
  knobs[genLength] = length;
  std::optional<int64_t> defaultGen = integerKnob(program.values, genLength);
  std::optional<int64_t> defaultBlock = integerKnob(program.values, blockLength);
  std::optional<int64_t> defaultSteps = integerKnob(program.values, steps);
  if (!stepsGiven && program.names.count(steps) && block && *block > 0 && defaultGen &&
      defaultBlock && defaultSteps && *defaultGen > 0 && *defaultBlock > 0) {
    const int64_t defaultBlocks = std::max<int64_t>(1, *defaultGen / *defaultBlock);
    const int64_t perBlock = std::max<int64_t>(1, *defaultSteps / defaultBlocks);
    std::optional<int64_t> scaledSteps = checkedMultiply(perBlock, length / *block);
    if (!scaledSteps)
      return tooLarge;
    knobs[steps] = *scaledSteps;
  }
  return Status::ok();
}

Status checkGenLengthKnob(std::string_view programName, const DeclaredKnobs &program,
                          const artifact::Attributes &knobs) {
  const std::string genLength(spec::kKnobGenLength);
  if (!knobs.count(genLength) || program.names.count(genLength) ||
      !program.names.count(std::string(spec::kKnobMaxNewTokens)))
    return Status::ok();
  return Status::error("the decode program '" + std::string(programName) +
                       "' has no gen_length: it generates max_new_tokens tokens, which "
                       "--max-new-tokens (max_tokens in a request) sets for every program");
}

} // namespace dlm::tools
