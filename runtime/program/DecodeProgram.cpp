// Loading decode records: every check the interpreter would otherwise make per step happens here
// once (kinds, parameters, types, references, structure), so that it can trust the program.
#include "runtime/program/DecodeProgram.h"

#include "runtime/program/DecodeProgramSpec.h"
#include "runtime/program/ProgramKnobs.h"
#include "support/SplitText.h"

#include <map>

namespace dlm::program {

namespace dspec = spec::decode;
using dspec::ParamRole;
using dspec::ParamSpec;
using dspec::ParamType;

const char *valueTypeName(ValueType type) {
  switch (type) {
  case ValueType::none:
    return "nothing";
  case ValueType::integer:
    return "int";
  case ValueType::real:
    return "real";
  case ValueType::boolean:
    return "bool";
  case ValueType::text:
    return "text";
  case ValueType::tokens:
    return "tokens";
  case ValueType::reals:
    return "reals";
  case ValueType::flags:
    return "flags";
  case ValueType::list:
    return "list";
  case ValueType::credit:
    return "credit";
  case ValueType::logits:
    return "logits";
  }
  return "unknown";
}

int32_t DecodeProgram::findKnob(std::string_view name) const {
  for (size_t k = 0; k < knobs_.size(); ++k)
    if (knobs_[k].name == name)
      return static_cast<int32_t>(k);
  return -1;
}

std::string DecodeProgram::where(size_t index) const {
  const size_t record = code_[index].record;
  return "decode record " + std::to_string(record) + " ('" + recordKinds_[record] + "')";
}

std::string_view DecodeProgram::recordKind(size_t index) const {
  const std::string_view kind = recordKinds_[code_[index].record];
  return kind.substr(0, kind.find(':'));
}

bool isReference(const artifact::AttributeValue &value) {
  const auto *text = std::get_if<std::string>(&value);
  return text && !text->empty() && (*text)[0] != (text->size() > 1 ? (*text)[1] : '\0') &&
         ((*text)[0] == dspec::kRegisterPrefix || (*text)[0] == dspec::kKnobPrefix ||
          (*text)[0] == dspec::kFactPrefix);
}

std::string literalText(const std::string &text) {
  if (text.size() > 1 && text[0] == text[1] &&
      (text[0] == dspec::kRegisterPrefix || text[0] == dspec::kKnobPrefix ||
       text[0] == dspec::kFactPrefix))
    return text.substr(1);
  return text;
}

namespace {

// Every kind but `knob` (a declaration, not an instruction) runs.
static_assert(std::size(dspec::kOpKinds) + 1 == std::size(dspec::kKinds));

constexpr std::pair<std::string_view, Fact> kFacts[] = {
    {dspec::kFactMask, Fact::mask},
    {dspec::kFactShift, Fact::shift},
    {dspec::kFactVocab, Fact::vocab},
    {dspec::kFactPromptLength, Fact::promptLength},
    {dspec::kFactSequenceLength, Fact::sequenceLength},
    {dspec::kFactAttentionBlock, Fact::attentionBlock},
};

bool accepts(ParamType param, ValueType type) {
  switch (param) {
  case ParamType::integer:
    return type == ValueType::integer;
  case ParamType::real:
    return type == ValueType::real;
  case ParamType::boolean:
    return type == ValueType::boolean;
  case ParamType::text:
    return type == ValueType::text;
  case ParamType::number:
    return type == ValueType::integer || type == ValueType::real;
  case ParamType::scalar:
    return type == ValueType::integer || type == ValueType::real || type == ValueType::boolean ||
           type == ValueType::text;
  case ParamType::tokens:
    return type == ValueType::tokens;
  case ParamType::reals:
    return type == ValueType::reals;
  case ParamType::flags:
    return type == ValueType::flags;
  case ParamType::row:
    return type == ValueType::tokens || type == ValueType::reals || type == ValueType::flags;
  case ParamType::list:
    return type == ValueType::list;
  case ParamType::credit:
    return type == ValueType::credit;
  case ParamType::logits:
    return type == ValueType::logits;
  case ParamType::knob:
    return true;
  }
  return false;
}

// The result type a record's fixed parameter type names; none when it depends on the operands.
ValueType fixedType(ParamType param) {
  switch (param) {
  case ParamType::integer:
    return ValueType::integer;
  case ParamType::real:
    return ValueType::real;
  case ParamType::boolean:
    return ValueType::boolean;
  case ParamType::text:
    return ValueType::text;
  case ParamType::tokens:
    return ValueType::tokens;
  case ParamType::reals:
    return ValueType::reals;
  case ParamType::flags:
    return ValueType::flags;
  case ParamType::list:
    return ValueType::list;
  case ParamType::credit:
    return ValueType::credit;
  case ParamType::logits:
    return ValueType::logits;
  default:
    return ValueType::none;
  }
}

ValueType knobType(std::string_view name) {
  if (name == dspec::kKnobTypeInt)
    return ValueType::integer;
  if (name == dspec::kKnobTypeReal)
    return ValueType::real;
  if (name == dspec::kKnobTypeBool)
    return ValueType::boolean;
  return ValueType::text;
}

// An `if`, `else` or loop not yet closed, and what was defined when it opened.
struct OpenConstruct {
  size_t instruction = 0;
  OpKind op = OpKind::ifThen;
  std::vector<char> definedBefore;
  std::vector<char> definedInThen; // an `if` with an `else`: at the end of its then branch
  bool hasElse = false;
};

} // namespace

class ProgramLoader {
public:
  explicit ProgramLoader(const std::vector<DecodeRecord> &records) : records_(records) {}

  StatusOr<DecodeProgram> load(const artifact::Attributes &storedKnobs) {
    // Loading keeps a copy of the defined-register set per open construct: bounds keep a
    // hostile artifact's program from costing records x depth x registers of memory.
    constexpr size_t kMaxRecords = 1 << 16;
    if (records_.size() > kMaxRecords)
      return Status::error("a decode program of " + std::to_string(records_.size()) +
                           " records (at most " + std::to_string(kMaxRecords) + ")");
    for (const DecodeRecord &record : records_)
      program_.recordKinds_.push_back(record.name.empty() ? record.kind
                                                          : record.kind + ":" + record.name);
    size_t index = 0;
    for (; index < records_.size() && records_[index].kind == dspec::kKindKnob; ++index)
      DLM_RETURN_IF_ERROR(declareKnob(index));
    DLM_RETURN_IF_ERROR(applyStoredKnobs(storedKnobs));
    for (; index < records_.size(); ++index)
      DLM_RETURN_IF_ERROR(loadRecord(index));
    if (!open_.empty()) {
      const Instruction &opener = program_.code_[open_.back().instruction];
      return Status::error(program_.where(open_.back().instruction) + ": '" +
                           std::string(kindOf(opener.op)) + "' has no 'end'");
    }
    if (program_.code_.empty() || program_.code_.back().op != OpKind::finish)
      return Status::error("decode program: the last record must be 'finish'");
    return std::move(program_);
  }

private:
  static std::string_view kindOf(OpKind op) {
    for (const dspec::OpKindName &entry : dspec::kOpKinds)
      if (entry.op == op)
        return entry.kind;
    return "?";
  }

  Status error(size_t record, const std::string &message) const {
    return Status::error("decode record " + std::to_string(record) + " ('" +
                         program_.recordKinds_[record] + "'): " + message);
  }

  // Unknown keys and missing required parameters.
  Status checkKeys(size_t index, const dspec::KindSpec &kind) const {
    const DecodeRecord &record = records_[index];
    for (const auto &entry : record.parameters)
      if (dspec::paramIndex(kind, entry.first) == kind.paramCount)
        return error(index, "unknown parameter '" + entry.first + "'");
    for (size_t p = 0; p < kind.paramCount; ++p)
      if (kind.params[p].required && !record.parameters.count(kind.params[p].key))
        return error(index, "missing parameter '" + std::string(kind.params[p].key) + "'");
    return Status::ok();
  }

  // ---- Knob declarations ----------------------------------------------------------------------

  Status declareKnob(size_t index) {
    const DecodeRecord &record = records_[index];
    const dspec::KindSpec &kind = *dspec::findKind(dspec::kKindKnob);
    DLM_RETURN_IF_ERROR(checkKeys(index, kind));
    KnobDeclaration knob;
    knob.name = record.name;
    if (knob.name.empty())
      return error(index, "a knob record needs a name (knob:<name>)");
    if (program_.findKnob(knob.name) >= 0)
      return error(index, "knob '" + knob.name + "' is declared twice");
    using namespace dspec::knob_params;
    std::vector<Operand> operands(kind.paramCount);
    for (size_t p = 0; p < kind.paramCount; ++p)
      DLM_RETURN_IF_ERROR(literal(index, kind.params[p], operands[p]));
    knob.type = knobType(program_.text(operands[kType].index));
    knob.optional = operands[kOptional].boolean;
    if (operands[kOneOf].given())
      knob.oneOf = program_.text(operands[kOneOf].index);
    if (operands[kError].given())
      knob.error = program_.text(operands[kError].index);
    auto number = [&](size_t param) {
      return operands[param].type == ValueType::real ? operands[param].real
                                                     : static_cast<double>(operands[param].integer);
    };
    if (operands[kMin].given()) {
      knob.hasMin = true;
      knob.min = number(kMin);
    }
    if (operands[kMax].given()) {
      knob.hasMax = true;
      knob.max = number(kMax);
    }
    auto given = record.parameters.find(dspec::kKnobParams[kDefault].key);
    if (given != record.parameters.end()) {
      Status status = applyKnob(knob, given->second, knob.value);
      if (!status)
        return error(index, "default: " + status.message());
    } else if (!knob.optional) {
      return error(index, "knob '" + knob.name + "' needs a default or optional=true");
    }
    program_.knobs_.push_back(std::move(knob));
    return Status::ok();
  }

  Status applyStoredKnobs(const artifact::Attributes &storedKnobs) {
    for (const auto &[key, value] : storedKnobs) {
      const int32_t index = program_.findKnob(key);
      if (index < 0)
        return Status::error("artifact decoding program: unknown knob '" + key + "'");
      KnobDeclaration &knob = program_.knobs_[static_cast<size_t>(index)];
      DLM_RETURN_IF_ERROR(
          applyKnob(knob, value, knob.value).withContext("artifact decoding program"));
    }
    return Status::ok();
  }

  // ---- Operands -------------------------------------------------------------------------------

  Status literal(size_t index, const ParamSpec &param, Operand &operand) {
    auto it = records_[index].parameters.find(param.key);
    if (it == records_[index].parameters.end())
      return Status::ok();
    const std::string key(param.key);
    if (isReference(it->second))
      return error(index, "parameter '" + key + "' must be a literal");
    operand.source = Operand::Source::literal;
    std::visit(
        [&](const auto &v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, bool>) {
            operand.type = ValueType::boolean;
            operand.boolean = v;
          } else if constexpr (std::is_same_v<V, int64_t>) {
            operand.type = ValueType::integer;
            operand.integer = v;
          } else if constexpr (std::is_same_v<V, double>) {
            operand.type = ValueType::real;
            operand.real = v;
          } else {
            operand.type = ValueType::text;
            operand.index = static_cast<int32_t>(program_.texts_.size());
            program_.texts_.push_back(literalText(v));
          }
        },
        it->second);
    // An integer literal where a real is expected is that real.
    if (param.type == ParamType::real && operand.type == ValueType::integer) {
      operand.type = ValueType::real;
      operand.real = static_cast<double>(operand.integer);
    }
    if (!accepts(param.type, operand.type))
      return error(index, "parameter '" + key + "' must be " + typeWords(param.type) + ", got " +
                              valueTypeName(operand.type));
    if (!param.choices.empty()) {
      const std::string &text = program_.text(operand.index);
      operand.choice = dspec::choiceIndex(param.choices, text);
      if (operand.choice < 0)
        return error(index, "parameter '" + key + "' must be one of " + std::string(param.choices) +
                                ", got '" + text + "'");
    }
    return Status::ok();
  }

  static std::string typeWords(ParamType type) {
    switch (type) {
    case ParamType::number:
      return "an int or a real";
    case ParamType::scalar:
      return "a scalar";
    case ParamType::row:
      return "a row (tokens, reals or flags)";
    case ParamType::knob:
      return "a knob reference";
    default:
      return valueTypeName(fixedType(type));
    }
  }

  Status reference(size_t index, const ParamSpec &param, const std::string &text,
                   Operand &operand) {
    const std::string key(param.key);
    const std::string name = text.substr(1);
    if (text[0] == dspec::kKnobPrefix) {
      operand.source = Operand::Source::knob;
      operand.index = program_.findKnob(name);
      if (operand.index < 0)
        return error(index, "unknown knob '" + text + "'");
      operand.type = program_.knobs_[static_cast<size_t>(operand.index)].type;
    } else if (param.type == ParamType::knob) {
      return error(index, "parameter '" + key + "' must name a knob ($name)");
    } else if (text[0] == dspec::kFactPrefix) {
      operand.source = Operand::Source::fact;
      for (const auto &[factName, fact] : kFacts)
        if (factName == name)
          operand.index = static_cast<int32_t>(fact);
      if (operand.index < 0)
        return error(index, "unknown fact '" + text + "'");
      operand.type = ValueType::integer;
    } else {
      operand.source = Operand::Source::reg;
      auto slot = slots_.find(name);
      if (slot == slots_.end())
        return error(index, "undefined register '" + text + "'");
      if (!defined_[static_cast<size_t>(slot->second)])
        return error(index, "register '" + text + "' is not written on every path to here");
      operand.index = slot->second;
      operand.type = program_.registers_[static_cast<size_t>(slot->second)].type;
    }
    if (!accepts(param.type, operand.type))
      return error(index, "parameter '" + key + "' must be " + typeWords(param.type) + ", but '" +
                              text + "' is " + valueTypeName(operand.type));
    return Status::ok();
  }

  Status input(size_t index, const ParamSpec &param, Operand &operand) {
    auto it = records_[index].parameters.find(param.key);
    if (it == records_[index].parameters.end())
      return Status::ok();
    const auto *reference_text = std::get_if<std::string>(&it->second);
    if (param.type == ParamType::knob &&
        (!isReference(it->second) || (*reference_text)[0] != dspec::kKnobPrefix))
      return error(index, "parameter '" + std::string(param.key) + "' must name a knob ($name)");
    if (!isReference(it->second))
      return literal(index, param, operand);
    const std::string &text = std::get<std::string>(it->second);
    if (param.role == ParamRole::inout && text[0] != dspec::kRegisterPrefix)
      return error(index, "parameter '" + std::string(param.key) + "' must be a register");
    return reference(index, param, text, operand);
  }

  // The register a result names, created with `type` or checked against its type.
  Status result(size_t index, const ParamSpec &param, ValueType type, Operand &operand) {
    auto it = records_[index].parameters.find(param.key);
    if (it == records_[index].parameters.end())
      return Status::ok();
    const auto *text = std::get_if<std::string>(&it->second);
    if (!text || !isReference(it->second) || (*text)[0] != dspec::kRegisterPrefix)
      return error(index, "result '" + std::string(param.key) + "' must be a register (%name)");
    const std::string name = text->substr(1);
    auto slot = slots_.find(name);
    if (slot == slots_.end()) {
      slot = slots_.emplace(name, static_cast<int32_t>(program_.registers_.size())).first;
      program_.registers_.push_back(RegisterInfo{name, type});
      defined_.push_back(0);
    } else if (program_.registers_[static_cast<size_t>(slot->second)].type != type) {
      return error(index, "register '" + *text + "' is " + valueTypeName(type) + " here but " +
                              valueTypeName(program_.registers_[slot->second].type) + " elsewhere");
    }
    operand.source = Operand::Source::reg;
    operand.type = type;
    operand.index = slot->second;
    return Status::ok();
  }

  // The type of an ALU or fill_row result, which follows its operands; checks that they agree.
  StatusOr<ValueType> inferredType(size_t index, OpKind op, const std::vector<Operand> &in) const {
    switch (op) {
    case OpKind::set:
    case OpKind::toReal:
      return in[0].type;
    case OpKind::select:
      if (in[1].type != in[2].type)
        return error(index, std::string("operands 'a' (") + valueTypeName(in[1].type) +
                                ") and 'b' (" + valueTypeName(in[2].type) + ") differ in type");
      return in[1].type;
    case OpKind::fillRow:
      if (in[0].type == ValueType::integer)
        return ValueType::tokens;
      if (in[0].type == ValueType::real)
        return ValueType::reals;
      if (in[0].type == ValueType::boolean)
        return ValueType::flags;
      return error(index, "a row of text does not exist");
    default:
      break;
    }
    if (in.size() >= 2 && in[0].given() && in[1].given() && in[0].type != in[1].type)
      return error(index, std::string("operands 'a' (") + valueTypeName(in[0].type) +
                              ") and 'b' (" + valueTypeName(in[1].type) + ") differ in type");
    if (op == OpKind::rem && in[0].type != ValueType::integer)
      return error(index, "rem needs int operands");
    return in[0].type;
  }

  Status checkRequirements(size_t index, const dspec::KindSpec &kind,
                           const std::vector<Operand> &operands) const {
    for (const dspec::Requirement &requirement : dspec::kRequirements) {
      if (requirement.kind != kind.kind)
        continue;
      const Operand &when = operands[dspec::paramIndex(kind, requirement.when)];
      if (!when.given() || program_.text(when.index) != requirement.value)
        continue;
      for (std::string_view needed : splitText(requirement.needs, ','))
        if (!records_[index].parameters.count(needed))
          return error(index, "parameter '" + std::string(needed) + "' is required with " +
                                  std::string(requirement.when) + "=" +
                                  std::string(requirement.value));
    }
    return Status::ok();
  }

  // ---- Records --------------------------------------------------------------------------------

  Status loadRecord(size_t index) {
    const DecodeRecord &record = records_[index];
    if (record.kind == dspec::kKindKnob)
      return error(index, "knob declarations must come before every other record");
    const dspec::KindSpec *kind = dspec::findKind(record.kind);
    if (!kind)
      return error(index, "unknown kind '" + record.kind + "'");
    DLM_RETURN_IF_ERROR(checkKeys(index, *kind));
    if (!program_.code_.empty() && program_.code_.back().op == OpKind::finish)
      return error(index, "'finish' must be the last record");
    Instruction instruction;
    for (const dspec::OpKindName &entry : dspec::kOpKinds)
      if (entry.kind == record.kind)
        instruction.op = entry.op;
    instruction.record = index;
    instruction.label = record.name;
    instruction.operands.resize(kind->paramCount);
    for (size_t p = 0; p < kind->paramCount; ++p) {
      const ParamSpec &param = kind->params[p];
      if (param.role == ParamRole::attribute)
        DLM_RETURN_IF_ERROR(literal(index, param, instruction.operands[p]));
      else if (param.role != ParamRole::result)
        DLM_RETURN_IF_ERROR(input(index, param, instruction.operands[p]));
    }
    DLM_RETURN_IF_ERROR(checkRequirements(index, *kind, instruction.operands));
    if (instruction.op == OpKind::forward) {
      using namespace dspec::forward_params;
      // ForwardRunner captures from every cached or window forward: there is no undecoded one.
      const Operand &decoded = instruction.operands[kDecoded];
      const int mode = instruction.operands[kMode].choice;
      // An append (a commit) may be a cache fill too.
      if (mode != kModeFull && mode != kModeAppend && decoded.given() && !decoded.boolean)
        return error(index, std::string("a ") +
                                (mode == kModeCached   ? "cached"
                                 : mode == kModeWindow ? "window"
                                                       : "extend") +
                                " forward is always decoded");
      if (mode != kModeWindow && instruction.operands[kFeedEnd].given())
        return error(index, "parameter 'feed_end' is only for mode=window");
      if (mode != kModeExtend && instruction.operands[kFirst].given())
        return error(index, "parameter 'first' is only for mode=extend");
    }
    // Operand types agree (ALU, select, fill_row); the result's type follows them.
    ValueType inferred = ValueType::none;
    if (isBinaryOp(instruction.op) || instruction.op == OpKind::set ||
        instruction.op == OpKind::select || instruction.op == OpKind::toReal ||
        instruction.op == OpKind::fillRow) {
      StatusOr<ValueType> type = inferredType(index, instruction.op, instruction.operands);
      if (!type)
        return type.status();
      inferred = *type;
    }
    if (isBinaryOp(instruction.op) && instruction.op <= OpKind::max) {
      const Operand &precision = instruction.operands[dspec::arithmetic_params::kPrecision];
      if (isF32(precision) && inferred != ValueType::real)
        return error(index, "precision=f32 needs real operands");
    }
    if (instruction.op == OpKind::sample) {
      using namespace dspec::sample_params;
      const Operand &precision = instruction.operands[kPrecision];
      if (isF32(precision) && instruction.operands[kKind].choice != kKindTempered)
        return error(index, "precision=f32 is only for kind=tempered");
    }
    if (instruction.op == OpKind::accept) {
      using namespace dspec::accept_params;
      const Operand &precision = instruction.operands[kPrecision];
      const Operand &converge = instruction.operands[kConverge];
      const int rule = instruction.operands[kRule].choice;
      if (isF32(precision) && rule != kRuleEntropyBound && rule != kRuleThresholdQuota &&
          !(converge.given() && converge.choice == kConvergeStableConfident))
        return error(index, "precision=f32 is only for rule=entropy_bound, rule=threshold_quota "
                            "or converge=stable_confident");
    }
    const size_t position = program_.code_.size();
    // A construct opens before its results exist: a loop's index is defined only inside it.
    DLM_RETURN_IF_ERROR(structure(index, position, instruction));
    for (size_t p = 0; p < kind->paramCount; ++p) {
      const ParamSpec &param = kind->params[p];
      if (param.role != ParamRole::result)
        continue;
      const ValueType fixed = fixedType(param.type);
      DLM_RETURN_IF_ERROR(result(index, param, fixed != ValueType::none ? fixed : inferred,
                                 instruction.operands[p]));
      if (instruction.operands[p].given())
        defined_[static_cast<size_t>(instruction.operands[p].index)] = 1;
    }
    for (size_t p = 0; p < kind->paramCount; ++p) {
      const ParamRole role = kind->params[p].role;
      if (instruction.operands[p].source != Operand::Source::reg)
        continue;
      if (role == ParamRole::result || role == ParamRole::inout)
        instruction.writes |= uint64_t{1} << p;
      if (role != ParamRole::result)
        instruction.reads |= uint64_t{1} << p;
    }
    if (instruction.op == OpKind::denoiseLoop) {
      // `ran` exists after the loop, not in it.
      defined_[static_cast<size_t>(instruction.operands[dspec::denoise_loop_params::kRan].index)] =
          0;
    }
    program_.code_.push_back(std::move(instruction));
    return Status::ok();
  }

  static constexpr size_t kMaxNesting = 64;

  Status structure(size_t index, size_t position, Instruction &instruction) {
    const int32_t here = static_cast<int32_t>(position);
    std::vector<Instruction> &code = program_.code_;
    switch (instruction.op) {
    case OpKind::blockLoop:
    case OpKind::denoiseLoop:
      for (const OpenConstruct &open : open_)
        if (open.op == OpKind::denoiseLoop)
          return error(index, "a loop inside a denoise_loop (loops nest only as block_loop "
                              "around denoise_loop)");
      [[fallthrough]];
    case OpKind::ifThen:
      if (open_.size() >= kMaxNesting)
        return error(index, "loops and ifs nest deeper than " + std::to_string(kMaxNesting));
      open_.push_back(OpenConstruct{position, instruction.op, defined_, {}, false});
      return Status::ok();
    case OpKind::elseBranch: {
      if (open_.empty() || open_.back().op != OpKind::ifThen || open_.back().hasElse)
        return error(index, "'else' without an open 'if'");
      OpenConstruct &open = open_.back();
      open.hasElse = true;
      open.definedInThen = defined_;
      defined_ = open.definedBefore;
      defined_.resize(program_.registers_.size(), 0);
      code[open.instruction].target = here;
      open.instruction = position;
      return Status::ok();
    }
    case OpKind::end:
      return closeConstruct(index, position, instruction);
    case OpKind::until:
      if (open_.empty() || open_.back().op != OpKind::denoiseLoop || index + 1 >= records_.size() ||
          records_[index + 1].kind != dspec::kKindEnd)
        return error(index, "'until' must be the last record of a denoise_loop");
      instruction.target = static_cast<int32_t>(open_.back().instruction);
      return Status::ok();
    case OpKind::exitIf:
      for (auto open = open_.rbegin(); open != open_.rend(); ++open) {
        if (open->op == OpKind::denoiseLoop)
          return error(index, "'exit_if' inside a denoise_loop");
        if (open->op == OpKind::blockLoop) {
          instruction.target = static_cast<int32_t>(open->instruction);
          return Status::ok();
        }
      }
      return error(index, "'exit_if' outside a block_loop");
    case OpKind::finish:
      if (!open_.empty())
        return error(index, "'finish' inside a loop or branch");
      return Status::ok();
    default:
      return Status::ok();
    }
  }

  Status closeConstruct(size_t index, size_t position, Instruction &instruction) {
    if (open_.empty())
      return error(index, "unbalanced 'end'");
    OpenConstruct open = std::move(open_.back());
    open_.pop_back();
    std::vector<Instruction> &code = program_.code_;
    Instruction &opener = code[open.instruction];
    opener.target = static_cast<int32_t>(position);
    instruction.target = static_cast<int32_t>(open.instruction);
    const size_t registers = program_.registers_.size();
    open.definedBefore.resize(registers, 0);
    if (open.op == OpKind::ifThen && open.hasElse) {
      // Defined after the branch: what both branches define.
      open.definedInThen.resize(registers, 0);
      defined_.resize(registers, 0);
      for (size_t r = 0; r < registers; ++r)
        defined_[r] = open.definedInThen[r] && defined_[r];
      return Status::ok();
    }
    // A loop body may not run, a branch without `else` may be skipped.
    defined_ = open.definedBefore;
    if (open.op == OpKind::denoiseLoop) {
      if (code.empty() || code.back().op != OpKind::until ||
          code.back().target != static_cast<int32_t>(open.instruction))
        return error(index, "a denoise_loop must end with 'until'");
      defined_[static_cast<size_t>(opener.operands[dspec::denoise_loop_params::kRan].index)] = 1;
    }
    return Status::ok();
  }

  const std::vector<DecodeRecord> &records_;
  DecodeProgram program_;
  std::map<std::string, int32_t, std::less<>> slots_;
  std::vector<char> defined_; // per register: written on every path to the current record
  std::vector<OpenConstruct> open_;
};

StatusOr<DecodeProgram> DecodeProgram::load(const std::vector<DecodeRecord> &records,
                                            const artifact::Attributes &storedKnobs) {
  return ProgramLoader(records).load(storedKnobs);
}

} // namespace dlm::program
