#include "runtime/program/ModelFactChecks.h"

#include "runtime/model/ModelWeights.h"
#include "runtime/program/InterpreterState.h"

namespace dlm::program {

namespace {

// The model a fact-only run is given: it never runs a forward (the run stops before any).
class FactsOnlyModel final : public sampling::DecodeModel {
public:
  explicit FactsOnlyModel(int64_t vocab) : vocab_(vocab) {}
  int64_t vocabSize() const override { return vocab_; }
  Status reserve(int64_t, int64_t) override { return Status::ok(); }
  StatusOr<sampling::LogitsView> forward(const sampling::ForwardSpec &) override {
    return Status::error("internal error: a fact-only run of a decode program ran a forward");
  }

private:
  int64_t vocab_;
};

bool isModelFact(const Operand &operand) {
  switch (static_cast<Fact>(operand.index)) {
  case Fact::mask:
  case Fact::shift:
  case Fact::vocab:
  case Fact::attentionBlock:
    return true;
  default: // the prompt's and the sequence's length belong to a request
    return false;
  }
}

// Which registers hold a value the model alone fixes.
class KnownValues {
public:
  explicit KnownValues(size_t registers) : known_(registers, false) {}

  bool known(const Operand &operand) const {
    switch (operand.source) {
    case Operand::Source::absent:
    case Operand::Source::literal:
      return true;
    case Operand::Source::reg:
      return known_[static_cast<size_t>(operand.index)];
    case Operand::Source::fact:
      return isModelFact(operand);
    default: // a knob: the request's
      return false;
    }
  }
  // Whether every parameter `in` reads is known (an inout register's value included).
  bool inputsKnown(const Instruction &in) const {
    for (size_t p = 0; p < in.operands.size(); ++p)
      if ((in.readsParam(p) || !in.writesParam(p)) && !known(in.operands[p]))
        return false;
    return true;
  }
  void set(const Operand &reg, bool known) { known_[static_cast<size_t>(reg.index)] = known; }

private:
  std::vector<bool> known_;
};

} // namespace

StatusOr<sampling::TokenFacts> modelTokenFacts(const artifact::ModelConfig &config) {
  StatusOr<model::ModelDims> dims = model::modelDims(config);
  if (!dims)
    return dims.status();
  sampling::TokenFacts facts;
  facts.maskTokenId = config.maskTokenId;
  facts.eosTokenIds = config.eosTokenIds;
  facts.logitShift = dims->logitShift;
  facts.attentionBlock = dims->attentionBlock;
  return facts;
}

Status checkModelFacts(const DecodeProgram &program, const sampling::TokenFacts &facts,
                       int64_t vocab) {
  FactsOnlyModel model(vocab);
  const ProgramRequest request;
  const sampling::BlockCallback noBlocks;
  sampling::DecodeOutcome outcome;
  detail::State state(program, model, facts, request, noBlocks, outcome);
  KnownValues values(program.registers().size());
  for (size_t at = 0; at < program.code().size(); ++at) {
    const Instruction &in = program.code()[at];
    const bool known = values.inputsKnown(in);
    if (in.op == OpKind::check) {
      if (known)
        DLM_RETURN_IF_ERROR(detail::runCheck(state, in, at));
    } else if (isScalarOp(in.op)) {
      // An overflow or a division by zero leaves the value unknown: the request's run says so.
      values.set(in.operands.back(), known && detail::runScalarOp(state, in, at).isOk());
    } else {
      return Status::ok();
    }
  }
  return Status::ok();
}

} // namespace dlm::program
