#include "runtime/program/InterpreterState.h"

#include "runtime/program/DecodeProgramSpec.h"

namespace dlm::program::detail {

namespace {
const std::string kEmptyText;
} // namespace

State::State(const DecodeProgram &program, sampling::DecodeModel &model,
             const sampling::TokenFacts &facts, const ProgramRequest &request,
             const sampling::BlockCallback &onBlock, sampling::DecodeOutcome &outcome)
    : program(program), model(model), facts(facts), request(request), onBlock(onBlock),
      outcome(outcome),
      runner(model, request.captureFirstLogits, outcome, request.profiler, request.request),
      registers(program.registers().size()), seq(request.prompt), vocab(model.vocabSize()),
      promptLength(static_cast<int64_t>(request.prompt.size())), mask(facts.maskTokenId) {
  for (Register &reg : registers)
    reg.scalar.text = &kEmptyText;
}

int64_t State::integer(const Operand &operand) const {
  switch (operand.source) {
  case Operand::Source::reg:
    return registers[static_cast<size_t>(operand.index)].scalar.integer;
  case Operand::Source::knob:
    return knobs[static_cast<size_t>(operand.index)].integer;
  case Operand::Source::fact:
    switch (static_cast<Fact>(operand.index)) {
    case Fact::mask:
      return mask;
    case Fact::shift:
      return facts.logitShift ? 1 : 0;
    case Fact::vocab:
      return vocab;
    case Fact::promptLength:
      return promptLength;
    case Fact::sequenceLength:
      return static_cast<int64_t>(seq.size());
    case Fact::attentionBlock:
      return facts.attentionBlock;
    }
    return 0;
  default:
    return operand.integer;
  }
}

double State::real(const Operand &operand) const {
  switch (operand.source) {
  case Operand::Source::reg:
    return registers[static_cast<size_t>(operand.index)].scalar.real;
  case Operand::Source::knob:
    return knobs[static_cast<size_t>(operand.index)].real;
  default:
    return operand.real;
  }
}

bool State::boolean(const Operand &operand) const {
  switch (operand.source) {
  case Operand::Source::reg:
    return registers[static_cast<size_t>(operand.index)].scalar.boolean;
  case Operand::Source::knob:
    return knobs[static_cast<size_t>(operand.index)].boolean;
  default:
    return operand.boolean;
  }
}

const std::string &State::text(const Operand &operand) const {
  switch (operand.source) {
  case Operand::Source::reg:
    return *registers[static_cast<size_t>(operand.index)].scalar.text;
  case Operand::Source::knob:
    return knobs[static_cast<size_t>(operand.index)].text;
  case Operand::Source::literal:
    return program.text(operand.index);
  default:
    return kEmptyText;
  }
}

Scalar State::scalar(const Operand &operand) const {
  if (operand.source == Operand::Source::reg)
    return registers[static_cast<size_t>(operand.index)].scalar;
  Scalar value;
  switch (operand.type) {
  case ValueType::integer:
    value.integer = integer(operand);
    break;
  case ValueType::real:
    value.real = real(operand);
    break;
  case ValueType::boolean:
    value.boolean = boolean(operand);
    break;
  default:
    break;
  }
  value.text = operand.type == ValueType::text ? &text(operand) : &kEmptyText;
  return value;
}

int State::choice(const Operand &operand, std::string_view choices) const {
  if (operand.source == Operand::Source::literal)
    return operand.choice;
  return spec::decode::choiceIndex(choices, text(operand));
}

namespace {

template <typename T>
StatusOr<const std::vector<T> *> rowOf(const State &state, const std::vector<T> &row,
                                       const Operand &operand, size_t at) {
  if (static_cast<int64_t>(row.size()) != state.rows())
    return state.error(at, "register '%" +
                               state.program.registers()[static_cast<size_t>(operand.index)].name +
                               "' holds " + std::to_string(row.size()) + " rows, the window " +
                               std::to_string(state.rows()));
  return &row;
}

} // namespace

StatusOr<const std::vector<int32_t> *> State::tokensRow(const Operand &operand, size_t at) const {
  return rowOf(*this, registers[static_cast<size_t>(operand.index)].tokens, operand, at);
}

StatusOr<const std::vector<double> *> State::realsRow(const Operand &operand, size_t at) const {
  return rowOf(*this, registers[static_cast<size_t>(operand.index)].reals, operand, at);
}

StatusOr<const std::vector<uint8_t> *> State::flagsRow(const Operand &operand, size_t at) const {
  return rowOf(*this, registers[static_cast<size_t>(operand.index)].flags, operand, at);
}

Status State::error(size_t at, const std::string &message) const {
  return Status::error(program.where(at) + ": " + message);
}

} // namespace dlm::program::detail

namespace dlm::program {

const detail::Register &RegisterView::find(std::string_view name) const {
  static const detail::Register kEmpty;
  const std::vector<RegisterInfo> &infos = state_.program.registers();
  for (size_t r = 0; r < infos.size(); ++r)
    if (infos[r].name == name)
      return state_.registers[r];
  return kEmpty;
}

int64_t RegisterView::integer(std::string_view name) const { return find(name).scalar.integer; }
double RegisterView::real(std::string_view name) const { return find(name).scalar.real; }
bool RegisterView::boolean(std::string_view name) const { return find(name).scalar.boolean; }
const std::vector<int32_t> &RegisterView::tokens(std::string_view name) const {
  return find(name).tokens;
}
const std::vector<double> &RegisterView::reals(std::string_view name) const {
  return find(name).reals;
}
const std::vector<uint8_t> &RegisterView::flags(std::string_view name) const {
  return find(name).flags;
}
std::vector<int32_t> RegisterView::window() const {
  return {state_.seq.begin() + state_.windowBegin, state_.seq.begin() + state_.windowEnd};
}

} // namespace dlm::program
