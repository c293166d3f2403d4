// A decoding policy as decode records (the contract: runtime/schema/DecodeOps.td), their
// text notation, and the loaded form the interpreter (DecodeInterpreter.h) runs: register names
// resolved to slots, knob and fact references to indices, types checked, and the jump targets of
// block_loop / denoise_loop / if / else / end precomputed, so that no step looks up a string.
//
// The text notation, one record per line ('#' starts a comment, indentation is ignored):
//
//   program low-confidence                       # optional first line: the program's name
//   knob:steps type=int default=16               # kind[:name] key=value ... [-> key=value ...]
//   div a=$gen_length b=$block_length -> out=%blocks
//   block_loop:block count=%blocks -> index=%b
//
// Values: true / false; integers (-12); reals, which always have a '.' or an exponent (0.0, 1e-05;
// also inf, -inf, nan); %register, $knob, @fact; "quoted text" with \" \\ \n \t escapes; and
// bare words ([A-Za-z_][A-Za-z0-9_.,:-]*, e.g. mode=full one_of=none,prefix) as text. A quoted
// text starting with % $ or @ is a literal, not a reference. The results of a kind (its
// DecodeProgramSpec.h parameters with role `result`) follow "->", every other parameter precedes
// it (for the kinds the spec knows; the parser checks it). A record name (a loop's profile label,
// the knob a `knob` record declares) is a bare name ([A-Za-z0-9_.-]+) or quoted text after a ':'
// that directly follows the kind. printDecodeProgram's output parses back to the same records
// (for records whose references are names, which are the only ones the parser makes; a NaN never
// compares equal). Parameters print in the order of the kind's table; the order read is free.
#pragma once

#include "runtime/artifact/ArtifactFormat.h"
#include "runtime/program/DecodeProgramSpec.h"
#include "support/Status.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dlm::program {

// One record, as the artifact stores it (schema 1.2).
using DecodeRecord = artifact::DecodeOp;

struct DecodeProgramText {
  std::string policy; // the `program` line; empty when there is none
  std::vector<DecodeRecord> records;
};

// Errors name the line: "line 4: expected key=value, got 'x'".
StatusOr<DecodeProgramText> parseDecodeProgram(std::string_view text);
std::string printDecodeProgram(const DecodeProgramText &program);
// One record, without indentation or newline.
std::string printDecodeRecord(const DecodeRecord &record);

// Whether a parameter value is a reference (`%r`, `$k`, `@f`) rather than a literal.
bool isReference(const artifact::AttributeValue &value);
// A literal text as written: a leading doubled reference character stands for one ("%%x" → "%x").
std::string literalText(const std::string &text);

// ---- The loaded program -----------------------------------------------------------------------

// credit: per window row, tokens with a credit (Register::tokens and reals, `capacity` slots a
// row, and the count used in Register::list).
enum class ValueType : uint8_t {
  none,
  integer,
  real,
  boolean,
  text,
  tokens,
  reals,
  flags,
  list,
  credit,
  logits
};
const char *valueTypeName(ValueType type);

// The kinds the interpreter runs, in DecodeOps.td's order (generated into DecodeProgramSpec.h).
using OpKind = spec::decode::OpKind;

// set .. defined: the scalar records (runtime/program/ops/ScalarOps.cpp runScalarOp).
inline bool isScalarOp(OpKind op) { return op >= OpKind::set && op <= OpKind::defined; }
// add .. ne: the two-operand arithmetic and comparisons, whose operand types must agree.
inline bool isBinaryOp(OpKind op) { return op >= OpKind::add && op <= OpKind::ne; }

enum class Fact : uint8_t { mask, shift, vocab, promptLength, sequenceLength, attentionBlock };

struct Operand {
  enum class Source : uint8_t { absent, literal, reg, knob, fact };
  Source source = Source::absent;
  ValueType type = ValueType::none;
  // The register slot, knob index or Fact; for a text literal its index in DecodeProgram::text.
  int32_t index = -1;
  // A literal text parameter with choices: the position of its value among them.
  int32_t choice = -1;
  int64_t integer = 0;
  double real = 0;
  bool boolean = false;

  bool given() const { return source != Source::absent; }
};

// precision=f32 on any kind that has the attribute (the loader resolved its choice).
inline bool isF32(const Operand &precision) {
  return precision.given() && precision.choice == spec::decode::kPrecisionF32;
}

struct Instruction {
  OpKind op = OpKind::set;
  size_t record = 0; // its index among the records
  std::string label; // the record's name (a loop's profile scope)
  // if: its else, or its end; else, block_loop, denoise_loop: their end; end: what it closes;
  // until: its denoise_loop; exit_if: its block_loop.
  int32_t target = -1;
  // One per parameter of the kind's table (DecodeProgramSpec.h), in that order.
  std::vector<Operand> operands;
  // Bit p: parameter p names a register the instruction writes (a result or an inout), reads
  // (an input or an inout).
  uint64_t writes = 0;
  uint64_t reads = 0;

  bool writesParam(size_t param) const { return (writes >> param) & 1; }
  bool readsParam(size_t param) const { return (reads >> param) & 1; }

  const Operand &operator[](size_t param) const { return operands[param]; }
};

// A value of a knob for one request.
struct KnobValue {
  bool defined = false;
  int64_t integer = 0;
  double real = 0;
  bool boolean = false;
  std::string text;
};

struct KnobDeclaration {
  std::string name;
  ValueType type = ValueType::none; // integer, real, boolean or text
  bool optional = false;
  std::string oneOf; // comma-separated; empty: any text
  std::string error; // message for a value outside oneOf; "{}" is the value
  bool hasMin = false;
  double min = 0;
  bool hasMax = false;
  double max = 0;
  // The declared default, then the program's stored knobs.
  KnobValue value;
};

struct RegisterInfo {
  std::string name; // without the '%'
  ValueType type = ValueType::none;
};

class DecodeProgram {
public:
  // Checks and resolves `records`; `storedKnobs` (the artifact's DecodingProgram.knobs) replace
  // the declared defaults. Errors name the record: "decode record 7 ('end'): unbalanced 'end'".
  static StatusOr<DecodeProgram> load(const std::vector<DecodeRecord> &records,
                                      const artifact::Attributes &storedKnobs = {});

  const std::vector<Instruction> &code() const { return code_; }
  const std::vector<KnobDeclaration> &knobs() const { return knobs_; }
  const std::vector<RegisterInfo> &registers() const { return registers_; }
  const std::string &text(int32_t index) const { return texts_[static_cast<size_t>(index)]; }
  // The index of knob `name` in knobs(), or -1.
  int32_t findKnob(std::string_view name) const;
  // "decode record 12 ('forward')" for instruction `index`.
  std::string where(size_t index) const;
  // The kind of instruction `index`'s record ("forward").
  std::string_view recordKind(size_t index) const;

private:
  friend class ProgramLoader;

  std::vector<Instruction> code_;
  std::vector<KnobDeclaration> knobs_;
  std::vector<RegisterInfo> registers_;
  std::vector<std::string> texts_;
  std::vector<std::string> recordKinds_;
};

} // namespace dlm::program
