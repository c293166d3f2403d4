// The contract of the decode records (docs/design/decode-program.md): a decoding policy as a flat,
// ordered list of records that the runtime's interpreter (runtime/program/DecodeInterpreter.h)
// runs without knowing the policy. The kinds and their parameters are declared once, in
// runtime/schema/DecodeOps.td (one op of the `decode` dialect per kind, with what each does);
// dlm-tblgen writes their tables from it (runtime/schema/DecodeRecordSpec.inc, included below).
// This header adds the C++ shapes of those tables, the facts, and the lookups. The compiler
// (which emits the records) and the runtime (which loads them, runtime/program/DecodeProgram.h)
// include the same names.
//
// A record is {kind, name, parameters}. `kind` is one of the kinds; `name` labels the record
// (the profile scope of a loop, the knob a `knob` record declares); `parameters` map the keys the
// kind's table lists to values:
//
//   a literal   bool, int (i64), real (f64) or text
//   %r          a register (one type for the whole program, inferred at load time)
//   $k          a knob, declared by a leading `knob` record and resolved per request
//   @f          a fact of the model or the request (kFact* below)
//
// A literal text that starts with one of `%$@` is stored with that character doubled ("%%x" is the
// text "%x"). Results are parameters that name the registers a record writes.
//
// Registers hold a scalar (int, real, bool, text), a row vector over the current window (tokens
// i32, reals f64, flags u8), or a list of i64. The token sequence (`seq`, which starts as the
// prompt) and the last forward's logit rows are implicit. Row j of a row op is seq position
// window.begin + j.
#pragma once

#include "support/SplitText.h"

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace dlm::spec::decode {

// ---- Facts (@name) ----------------------------------------------------------------------------
inline constexpr std::string_view kFactMask = "mask";               // int, -1: the model has none
inline constexpr std::string_view kFactShift = "shift";             // int, 1 for a logit shift
inline constexpr std::string_view kFactVocab = "vocab";             // int
inline constexpr std::string_view kFactPromptLength = "prompt_len"; // int
inline constexpr std::string_view kFactSequenceLength = "seq_len";  // int, seq's current length
// int: the block a block-causal model attends by (LLaDA2), 0 for other models.
inline constexpr std::string_view kFactAttentionBlock = "attention_block";

// ---- Knob declarations ------------------------------------------------------------------------
inline constexpr std::string_view kKnobTypeInt = "int";
inline constexpr std::string_view kKnobTypeReal = "real";
inline constexpr std::string_view kKnobTypeBool = "bool";
inline constexpr std::string_view kKnobTypeText = "text";
// The value that unsets an optional knob.
inline constexpr std::string_view kKnobUnset = "none";

// ---- Reference prefixes -----------------------------------------------------------------------
inline constexpr char kRegisterPrefix = '%';
inline constexpr char kKnobPrefix = '$';
inline constexpr char kFactPrefix = '@';

// ---- Counter-RNG streams (runtime/sampling/CounterRng.h) --------------------------------------
inline constexpr int64_t kStreamGumbel = 0;
inline constexpr int64_t kStreamRenoise = 1;
inline constexpr int64_t kStreamInit = 2;
inline constexpr int64_t kStreamVerify = 3;

// ---- Parameters -------------------------------------------------------------------------------
enum class ParamRole : uint8_t {
  attribute, // a literal (a mode, a sub-kind); fixed at load time
  input,     // a literal or a reference
  inout,     // a register, read and written
  result,    // a register, written
};

enum class ParamType : uint8_t {
  integer,
  real,
  boolean,
  text,
  number, // integer or real
  scalar, // any scalar
  tokens,
  reals,
  flags,
  row, // tokens, reals or flags
  list,
  credit, // per window row, tokens and their credits (credit_reset, credit)
  logits, // float32 logit rows (hold_logits, drop_logits), a forward's input
  knob,   // a $knob reference
};

struct ParamSpec {
  std::string_view key;
  ParamRole role;
  ParamType type;
  bool required;
  // Text parameters with a closed set of values: those values, comma-separated.
  std::string_view choices = {};
};

// Short names for the generated tables.
using PR = ParamRole;
using PT = ParamType;

struct KindSpec {
  std::string_view kind;
  const ParamSpec *params;
  size_t paramCount;
};

template <size_t N>
constexpr KindSpec kindSpec(std::string_view kind, const ParamSpec (&params)[N]) {
  return {kind, params, N};
}

// The parameters a record needs when one of its attributes has a given value: `when` = `value`
// needs each of `needs` (comma-separated).
struct Requirement {
  std::string_view kind;
  std::string_view when;
  std::string_view value;
  std::string_view needs;
};

enum class OpKind : uint8_t;
// An instruction kind's record name and enumerator (kOpKinds).
struct OpKindName {
  std::string_view kind;
  OpKind op;
};

#include "runtime/schema/DecodeRecordSpec.inc"

// ---- Lookups ----------------------------------------------------------------------------------
constexpr const KindSpec *findKind(std::string_view kind) {
  for (const KindSpec &spec : kKinds)
    if (spec.kind == kind)
      return &spec;
  return nullptr;
}

// The index of `key` in a kind's parameter table, for constants: a key the table lacks reads past
// its end, which is not a constant expression, so the constant does not compile.
template <size_t N>
constexpr size_t paramIndex(const ParamSpec (&params)[N], std::string_view key) {
  size_t i = 0;
  while (params[i].key != key)
    ++i;
  return i;
}

// The index of `key` in a kind's parameter table; the table's size when absent.
constexpr size_t paramIndex(const KindSpec &spec, std::string_view key) {
  for (size_t i = 0; i < spec.paramCount; ++i)
    if (spec.params[i].key == key)
      return i;
  return spec.paramCount;
}

// The position of `value` in a comma-separated list of choices, or -1.
constexpr int choiceIndex(std::string_view choices, std::string_view value) {
  int index = 0;
  const bool absent = forEachPiece(choices, ',', [&](std::string_view choice) {
    if (choice == value)
      return false;
    ++index;
    return true;
  });
  return absent ? -1 : index;
}
static_assert(choiceIndex("a,b", "b") == 1 && choiceIndex("a,b", "c") == -1 &&
              choiceIndex("a,,b", "") == 1 && choiceIndex("", "") == 0);

// The `precision` literal of the arithmetic records, to_real, sample and accept: f64 when absent,
// the same choices everywhere.
inline constexpr int kPrecisionF32 = arithmetic_params::kPrecisionF32;
static_assert(to_real_params::kPrecisionF32 == kPrecisionF32 &&
              sample_params::kPrecisionF32 == kPrecisionF32 &&
              accept_params::kPrecisionF32 == kPrecisionF32);

} // namespace dlm::spec::decode
