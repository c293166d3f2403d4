#include "runtime/program/ProgramKnobs.h"

#include "runtime/program/DecodeProgramSpec.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace dlm::program {

namespace dspec = spec::decode;

namespace {

std::string typeWord(ValueType type) {
  switch (type) {
  case ValueType::integer:
    return "an integer";
  case ValueType::real:
    return "a number";
  case ValueType::boolean:
    return "a boolean";
  default:
    return "a string";
  }
}

// A text given for a number or boolean hints at the text that is accepted, as DecodingKnobs.cpp
// does: "knob 'threshold' must be a number or \"none\"".
Status wrongType(const KnobDeclaration &knob, const artifact::AttributeValue &value) {
  std::string expected = typeWord(knob.type);
  if (knob.optional && knob.type != ValueType::text && std::holds_alternative<std::string>(value))
    expected += " or \"" + std::string(dspec::kKnobUnset) + "\"";
  return Status::error("knob '" + knob.name + "' must be " + expected);
}

std::string replacePlaceholder(const std::string &message, const std::string &value) {
  const size_t at = message.find("{}");
  return at == std::string::npos ? message : message.substr(0, at) + value + message.substr(at + 2);
}

Status checkChoice(const KnobDeclaration &knob, const std::string &value) {
  if (knob.oneOf.empty() || dspec::choiceIndex(knob.oneOf, value) >= 0)
    return Status::ok();
  if (!knob.error.empty())
    return Status::error(replacePlaceholder(knob.error, value));
  return Status::error("knob '" + knob.name + "' must be one of " + knob.oneOf + ", got \"" +
                       value + "\"");
}

// "at least" / "at most" `limit`, for the knob's type.
Status outOfRange(const KnobDeclaration &knob, const KnobValue &value, const char *relation,
                  double limit) {
  if (knob.type == ValueType::integer)
    return Status::error("knob '" + knob.name + "' must be " + relation + " " +
                         std::to_string(static_cast<int64_t>(limit)) + ", got " +
                         std::to_string(value.integer));
  return Status::error("knob '" + knob.name + "' must be " + relation + " " +
                       artifact::attributeValueText(limit) + ", got " +
                       artifact::attributeValueText(value.real));
}

Status checkRange(const KnobDeclaration &knob, const KnobValue &value) {
  if (knob.type != ValueType::integer && knob.type != ValueType::real)
    return Status::ok();
  const double number =
      knob.type == ValueType::integer ? static_cast<double>(value.integer) : value.real;
  if (knob.hasMin && !(number >= knob.min))
    return outOfRange(knob, value, "at least", knob.min);
  if (knob.hasMax && !(number <= knob.max))
    return outOfRange(knob, value, "at most", knob.max);
  return Status::ok();
}

} // namespace

artifact::AttributeValue knobValueFromText(const std::string &text) {
  if (text == "true" || text == "on")
    return true;
  if (text == "false" || text == "off")
    return false;
  char *end = nullptr;
  errno = 0;
  const long long integer = std::strtoll(text.c_str(), &end, 10);
  if (!text.empty() && !*end && !errno)
    return static_cast<int64_t>(integer);
  errno = 0;
  const double real = std::strtod(text.c_str(), &end);
  if (!text.empty() && !*end && !errno)
    return real;
  return text;
}

Status applyKnob(const KnobDeclaration &knob, const artifact::AttributeValue &value,
                 KnobValue &out) {
  const auto *text = std::get_if<std::string>(&value);
  if (text && knob.optional && *text == dspec::kKnobUnset) {
    out = KnobValue{};
    return Status::ok();
  }
  KnobValue result;
  result.defined = true;
  switch (knob.type) {
  case ValueType::integer:
    if (const auto *i = std::get_if<int64_t>(&value))
      result.integer = *i;
    else if (const auto *d = std::get_if<double>(&value);
             // Integral and within int64 (2^63 is exact in a double; the cast is defined below it).
             d && std::isfinite(*d) && *d == std::floor(*d) && *d >= -9223372036854775808.0 &&
             *d < 9223372036854775808.0)
      result.integer = static_cast<int64_t>(*d);
    else
      return wrongType(knob, value);
    break;
  case ValueType::real:
    // No program's arithmetic means anything with an infinity or a NaN in it.
    if (const auto *d = std::get_if<double>(&value); d && !std::isfinite(*d))
      return Status::error("knob '" + knob.name + "' must be a finite real, got " +
                           artifact::attributeValueText(*d));
    else if (d)
      result.real = *d;
    else if (const auto *i = std::get_if<int64_t>(&value))
      result.real = static_cast<double>(*i);
    else
      return wrongType(knob, value);
    break;
  case ValueType::boolean:
    if (const auto *b = std::get_if<bool>(&value))
      result.boolean = *b;
    else
      return wrongType(knob, value);
    break;
  default:
    if (!text)
      return wrongType(knob, value);
    DLM_RETURN_IF_ERROR(checkChoice(knob, *text));
    result.text = *text;
    break;
  }
  DLM_RETURN_IF_ERROR(checkRange(knob, result));
  out = std::move(result);
  return Status::ok();
}

Status resolveKnobs(const DecodeProgram &program, const artifact::Attributes &overrides,
                    std::vector<KnobValue> &out, const KnobFilter &declaredElsewhere,
                    std::string_view programName) {
  const std::vector<KnobDeclaration> &knobs = program.knobs();
  out.resize(knobs.size());
  for (size_t k = 0; k < knobs.size(); ++k)
    out[k] = knobs[k].value;
  for (const auto &[key, value] : overrides) {
    const int32_t index = program.findKnob(key);
    if (index < 0) {
      if (declaredElsewhere && declaredElsewhere(key))
        continue;
      std::string takes;
      for (const KnobDeclaration &knob : knobs)
        takes += (takes.empty() ? "" : ", ") + knob.name;
      return Status::error("unknown knob '" + key + "'" +
                           (programName.empty() ? ""
                                                : " for the decode program '" +
                                                      std::string(programName) + "'") +
                           " (its knobs: " + (takes.empty() ? "none" : takes) + ")");
    }
    DLM_RETURN_IF_ERROR(
        applyKnob(knobs[static_cast<size_t>(index)], value, out[static_cast<size_t>(index)]));
  }
  return Status::ok();
}

} // namespace dlm::program
