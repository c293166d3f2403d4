// What the decode interpreter's handlers share while a request runs: the resolved knobs, the
// registers, the token sequence, the window and the last forward's logits. Internal to
// runtime/program (DecodeInterpreter.cpp and ops/).
#pragma once

#include "runtime/program/DecodeInterpreter.h"

#include <string>
#include <string_view>
#include <vector>

namespace dlm::program::detail {

struct Scalar {
  int64_t integer = 0;
  double real = 0;
  bool boolean = false;
  const std::string *text = nullptr; // a program literal or a knob value; never null once set
};

// One register; only the member of its type is used. Rows are sized by `reserve`, so that a
// step resizes them within their capacity.
struct Register {
  Scalar scalar;
  std::vector<int32_t> tokens;
  std::vector<double> reals;
  std::vector<uint8_t> flags;
  std::vector<int64_t> list;
  std::vector<float> logits; // float rows of `width` values (hold_logits: the vocabulary's)
  int64_t width = 0;
  // The float rows held.
  int64_t rows() const { return width > 0 ? static_cast<int64_t>(logits.size()) / width : 0; }
};

class State {
public:
  State(const DecodeProgram &program, sampling::DecodeModel &model,
        const sampling::TokenFacts &facts, const ProgramRequest &request,
        const sampling::BlockCallback &onBlock, sampling::DecodeOutcome &outcome);

  // Operand values; the loader checked every type.
  int64_t integer(const Operand &operand) const;
  double real(const Operand &operand) const;
  bool boolean(const Operand &operand) const;
  const std::string &text(const Operand &operand) const;
  Scalar scalar(const Operand &operand) const;
  // The position of a text operand's value among `choices` (literals were resolved at load).
  int choice(const Operand &operand, std::string_view choices) const;
  Register &reg(const Operand &operand) { return registers[static_cast<size_t>(operand.index)]; }

  // An input row register, which must hold the window's rows.
  StatusOr<const std::vector<int32_t> *> tokensRow(const Operand &operand, size_t at) const;
  StatusOr<const std::vector<double> *> realsRow(const Operand &operand, size_t at) const;
  StatusOr<const std::vector<uint8_t> *> flagsRow(const Operand &operand, size_t at) const;

  // "decode record 12 ('forward'): message" for instruction `at`.
  Status error(size_t at, const std::string &message) const;

  int64_t rows() const { return windowEnd - windowBegin; }
  bool isMask(int64_t row) const { return seq[static_cast<size_t>(windowBegin + row)] == mask; }

  const DecodeProgram &program;
  sampling::DecodeModel &model;
  const sampling::TokenFacts &facts;
  const ProgramRequest &request;
  const sampling::BlockCallback &onBlock;
  sampling::DecodeOutcome &outcome;
  sampling::ForwardRunner runner;

  std::vector<KnobValue> knobs;
  std::vector<Register> registers;
  std::vector<int32_t> seq;
  const int64_t vocab;
  const int64_t promptLength;
  const int64_t mask; // -1: none
  int64_t windowBegin = 0;
  int64_t windowEnd = 0;
  int64_t reservedTokens = -1; // -1: no `reserve` yet
  int64_t reservedRows = 0;
  // The rows row records read (narrow_logits may select some of the forward's) and all the rows
  // the last forward returned.
  sampling::LogitsView logits;
  sampling::LogitsView forwardLogits;
  bool hasLogits = false;
  // Whether seq_extend placed ProgramRequest::initialNoise (the first canvas drawn from noise).
  bool initialNoiseUsed = false;
  // Logit rows a record rewrote (credit), which `logits` then views.
  std::vector<float> fusedLogits;

  // Scratch of the accept rules, reserved with the rows.
  std::vector<int64_t> candidateRows, positions, order;
  // (begin, end) pairs of hierarchical segments: at most rows of them per level, two levels live.
  std::vector<int64_t> segments;
  std::vector<double> scores;
  std::vector<uint8_t> accepted;
  // The top-k / top-p filter's allowed tokens and its sort order, one row at a time.
  std::vector<uint8_t> allowedTokens;
  std::vector<int32_t> tokenOrder;
  // spec_verify's target and draft distributions, one row at a time.
  std::vector<double> targetProbabilities, draftProbabilities, residual;
};

// The handlers: each runs instruction `at`, which has the handler's kind.
Status runScalarOp(State &state, const Instruction &in, size_t at);
Status runCheck(State &state, const Instruction &in, size_t at);
Status runTransferSchedule(State &state, const Instruction &in, size_t at);
Status runListAt(State &state, const Instruction &in, size_t at);
Status runReserve(State &state, const Instruction &in, size_t at);
Status runSeqExtend(State &state, const Instruction &in, size_t at);
Status runWindow(State &state, const Instruction &in, size_t at);
Status runCountEq(State &state, const Instruction &in, size_t at);
Status runFillRow(State &state, const Instruction &in, size_t at);
Status runCreditReset(State &state, const Instruction &in, size_t at);
Status runCredit(State &state, const Instruction &in, size_t at);
Status runCommit(State &state, const Instruction &in, size_t at);
Status runFinish(State &state, const Instruction &in, size_t at);
Status runForward(State &state, const Instruction &in, size_t at);
Status runHoldLogits(State &state, const Instruction &in, size_t at);
Status runDropLogits(State &state, const Instruction &in, size_t at);
Status runTakeRows(State &state, const Instruction &in, size_t at);
Status runNarrowLogits(State &state, const Instruction &in, size_t at);
Status runSeqTruncate(State &state, const Instruction &in, size_t at);
Status runSeqWrite(State &state, const Instruction &in, size_t at);
Status runKvTrim(State &state, const Instruction &in, size_t at);
Status runSpecVerify(State &state, const Instruction &in, size_t at);
Status runSample(State &state, const Instruction &in, size_t at);
Status runAccept(State &state, const Instruction &in, size_t at);
Status runGate(State &state, const Instruction &in, size_t at);
Status runRenoise(State &state, const Instruction &in, size_t at);
Status runEdit(State &state, const Instruction &in, size_t at);
Status runEosStop(State &state, const Instruction &in, size_t at);

} // namespace dlm::program::detail
