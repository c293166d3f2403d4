#include "runtime/program/DecodeProgramSet.h"

#include <algorithm>

namespace dlm::program {
namespace {

std::string withHyphens(std::string_view name) {
  std::string text(name);
  std::replace(text.begin(), text.end(), '_', '-');
  return text;
}

} // namespace

std::string oneOf(const std::vector<std::string> &names) {
  std::string text;
  for (size_t i = 0; i < names.size(); ++i)
    text += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return text;
}

StatusOr<DecodeProgramSet>
DecodeProgramSet::load(const std::vector<artifact::DecodingProgram> &programs) {
  DecodeProgramSet set;
  for (const artifact::DecodingProgram &stored : programs) {
    StatusOr<DecodeProgram> loaded = DecodeProgram::load(stored.ops, stored.knobs);
    if (!loaded)
      return loaded.status().withContext("decode program '" + stored.policy + "'");
    set.names_.push_back(stored.policy);
    set.programs_.push_back(std::move(*loaded));
  }
  return set;
}

StatusOr<size_t> DecodeProgramSet::select(std::string_view policy) const {
  if (programs_.empty())
    return Status::error("the artifact has no decode program (written before schema 1.2): "
                         "recompile it with dlmc compile");
  if (policy.empty())
    return size_t{0};
  const std::string wanted = withHyphens(policy);
  for (size_t i = 0; i < names_.size(); ++i)
    if (withHyphens(names_[i]) == wanted)
      return i;
  return Status::error("unknown policy '" + std::string(policy) + "' (expected " +
                       oneOf(names_) + ")");
}

KnobFilter DecodeProgramSet::declaredByOthers(size_t index) const {
  return [this, index](std::string_view name) {
    for (size_t i = 0; i < programs_.size(); ++i) {
      if (i == index)
        continue;
      const std::vector<KnobDeclaration> &knobs = programs_[i].knobs();
      if (std::any_of(knobs.begin(), knobs.end(),
                      [&](const KnobDeclaration &knob) { return knob.name == name; }))
        return true;
    }
    return false;
  };
}

artifact::Attributes knobAttributes(const DecodeProgram &program,
                                    const std::vector<KnobValue> &values) {
  artifact::Attributes attributes;
  const std::vector<KnobDeclaration> &knobs = program.knobs();
  for (size_t i = 0; i < knobs.size() && i < values.size(); ++i) {
    const KnobValue &value = values[i];
    if (!value.defined)
      continue;
    switch (knobs[i].type) {
    case ValueType::integer:
      attributes[knobs[i].name] = value.integer;
      break;
    case ValueType::real:
      attributes[knobs[i].name] = value.real;
      break;
    case ValueType::boolean:
      attributes[knobs[i].name] = value.boolean;
      break;
    default:
      attributes[knobs[i].name] = value.text;
      break;
    }
  }
  return attributes;
}

} // namespace dlm::program
