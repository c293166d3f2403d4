//===- DecodeOps.td - the decode records: one op per record kind ---*- tablegen -*-===//
//
// The contract of the decode programs (docs/design/decode-program.md), declared once: a decoding
// policy is a flat, ordered list of records {kind, name, parameters} that the runtime's
// interpreter (runtime/program/DecodeInterpreter.h) runs without knowing the policy. Each kind is
// one op of the `decode` dialect below, and each of its parameters one argument, in the order
// the records keep them:
//
//   Param<attr, type[, choices]>    a literal fixed at load time (a mode, a sub-kind)
//   In<value[, choices]>            a literal, a register (%r), a knob ($k) or a fact (@f)
//   InOut<value>                    a register, read and written
//   Out<value>                      a register, written
//
// with Optional... forms for the parameters a record may leave out. `requirements` name the
// parameters a record needs when one of its literals has a given value.
//
// The order of the kinds below is the runtime's OpKind order, which it reads in ranges: `set` to
// `defined` are the scalar records, `add` to `ne` the two-operand ones, `add` to `max` arithmetic.
//
// From this file, dlm-tblgen -gen-decode-record-spec writes the runtime's tables
// (runtime/program/DecodeProgramSpec.h includes them), and mlir-tblgen the dialect's ops
// (compiler/dialects/decode).
//
// Registers hold a scalar (int, real, bool, text), a row vector over the current window (tokens
// i32, reals f64, flags u8), or a list of i64. The token sequence (`seq`, which starts as the
// prompt) and the last forward's logit rows are implicit. Row j of a row op is seq position
// window.begin + j.
//
//===----------------------------------------------------------------------===//

#ifndef DLM_DECODE_OPS_TD
#define DLM_DECODE_OPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Decode_Dialect : Dialect {
  let name = "decode";
  let cppNamespace = "::dlm::decode";
  let summary = "Decode records: the ops the runtime's decode interpreter runs";
  let useDefaultTypePrinterParser = 1;
}

//===----------------------------------------------------------------------===//
// Types: what a register, a knob or a literal holds
//===----------------------------------------------------------------------===//

class Decode_Type<string name, string typeMnemonic, string doc>
    : TypeDef<Decode_Dialect, name> {
  let mnemonic = typeMnemonic;
  let summary = doc;
}
def Decode_TextType : Decode_Type<"Text", "text", "a text">;
def Decode_TokensType : Decode_Type<"Tokens", "tokens", "an i32 token per window row">;
def Decode_RealsType : Decode_Type<"Reals", "reals", "an f64 per window row">;
def Decode_FlagsType : Decode_Type<"Flags", "flags", "a flag per window row">;
def Decode_ListType : Decode_Type<"List", "list", "a list of i64">;
def Decode_CreditType
    : Decode_Type<"Credit", "credit", "per window row, tokens and their credits">;
def Decode_LogitsType : Decode_Type<"Logits", "logits", "float32 logit rows">;
// References, each to a value of its value type: a register (`%r`) and a knob (`$k`).
def Decode_RegisterType : Decode_Type<"Register", "reg", "a register"> {
  let parameters = (ins "::mlir::Type":$valueType);
  let assemblyFormat = "`<` $valueType `>`";
}
def Decode_KnobType : Decode_Type<"Knob", "knob", "a knob"> {
  let parameters = (ins "::mlir::Type":$valueType);
  let assemblyFormat = "`<` $valueType `>`";
}

//===----------------------------------------------------------------------===//
// Parameter values: each names its type in the records' contract (ParamType)
//===----------------------------------------------------------------------===//

class Decode_Value<string contractType, list<Type> allowed> : AnyTypeOf<allowed> {
  string decodeType = contractType;
}
def Decode_Integer : Decode_Value<"integer", [I64]>;
def Decode_Real : Decode_Value<"real", [F64]>;
def Decode_Boolean : Decode_Value<"boolean", [I1]>;
def Decode_Text : Decode_Value<"text", [Decode_TextType]>;
def Decode_Number : Decode_Value<"number", [I64, F64]>;
def Decode_Scalar : Decode_Value<"scalar", [I64, F64, I1, Decode_TextType]>;
def Decode_Tokens : Decode_Value<"tokens", [Decode_TokensType]>;
def Decode_Reals : Decode_Value<"reals", [Decode_RealsType]>;
def Decode_Flags : Decode_Value<"flags", [Decode_FlagsType]>;
def Decode_Row : Decode_Value<"row", [Decode_TokensType, Decode_RealsType, Decode_FlagsType]>;
def Decode_List : Decode_Value<"list", [Decode_ListType]>;
def Decode_Credit : Decode_Value<"credit", [Decode_CreditType]>;
def Decode_Logits : Decode_Value<"logits", [Decode_LogitsType]>;
def Decode_Knob : Decode_Value<"knob", [Decode_KnobType]>;

// A reference (`kind`: Register or Knob) whose values are of `value`'s types.
class Decode_ReferenceOf<string kind, Decode_Value value> : Type<
    And<[CPred<"::llvm::isa<::dlm::decode::" # kind # "Type>($_self)">,
         SubstLeaves<"$_self",
                     "::llvm::cast<::dlm::decode::" # kind # "Type>($_self).getValueType()",
                     value.predicate>]>,
    !tolower(kind) # " of " # value.summary>;
class Decode_RegisterOf<Decode_Value value> : Decode_ReferenceOf<"Register", value>;
// A literal, a register, a knob or a fact (an op that gives the value) of `value`'s types.
class Decode_Input<Decode_Value value>
    : AnyTypeOf<[value, Decode_RegisterOf<value>, Decode_ReferenceOf<"Knob", value>]>;

//===----------------------------------------------------------------------===//
// Parameters: role, contract type, whether required, closed set of values
//===----------------------------------------------------------------------===//

class Decode_Param<string role, string contractType, bit required, list<string> choices,
                   string cpp = ""> {
  string decodeRole = role;
  string decodeType = contractType;
  bit decodeRequired = required;
  string decodeChoices = !interleave(choices, ",");
  // The runtime's name for the parameter's position (k<cppName>) where the key's own would say
  // something else (accept's `k` is kTopK: kK is the K projection's weight role).
  string cppName = cpp;
}

// A literal with choices is one of them (the dialect's verifier checks it; the runtime's loader
// checks records).
class Decode_OneOf<list<string> choices> : AttrConstraint<
    Or<!foreach(choice, choices,
                CPred<"::llvm::cast<::mlir::StringAttr>($_self).getValue() == \"" # choice #
                      "\"">)>,
    "one of " # !interleave(choices, ", ")>;
class Decode_Choice<Attr attr, list<string> choices>
    : ConfinedAttr<attr, !if(!empty(choices), [], [Decode_OneOf<choices>])>;

// Each parameter keeps what it was declared with (`decodeAttr`, `decodeValue`) for the SSA ops
// that dlm-tblgen -gen-generate-ops derives from these (compiler/dialects/generate).
class Param<Attr attr, string contractType, list<string> choices = []>
    : Arg<Decode_Choice<attr, choices>>, Decode_Param<"attribute", contractType, 1, choices> {
  Attr decodeAttr = attr;
  list<string> decodeChoiceList = choices;
}
class OptionalParam<Attr attr, string contractType, list<string> choices = []>
    : Arg<OptionalAttr<Decode_Choice<attr, choices>>>,
      Decode_Param<"attribute", contractType, 0, choices> {
  Attr decodeAttr = attr;
  list<string> decodeChoiceList = choices;
}
class In<Decode_Value value, list<string> choices = [], string cpp = "">
    : Arg<Decode_Input<value>>,
      Decode_Param<"input", value.decodeType, 1, choices, cpp> {
  Decode_Value decodeValue = value;
}
class OptionalIn<Decode_Value value, list<string> choices = [], string cpp = "">
    : Arg<Optional<Decode_Input<value>>>,
      Decode_Param<"input", value.decodeType, 0, choices, cpp> {
  Decode_Value decodeValue = value;
}
class InOut<Decode_Value value>
    : Arg<Decode_RegisterOf<value>>, Decode_Param<"inout", value.decodeType, 1, []> {
  Decode_Value decodeValue = value;
}
class OptionalInOut<Decode_Value value>
    : Arg<Optional<Decode_RegisterOf<value>>>, Decode_Param<"inout", value.decodeType, 0, []> {
  Decode_Value decodeValue = value;
}
class Out<Decode_Value value>
    : Arg<Decode_RegisterOf<value>>, Decode_Param<"result", value.decodeType, 1, []> {
  Decode_Value decodeValue = value;
}
class OptionalOut<Decode_Value value>
    : Arg<Optional<Decode_RegisterOf<value>>>, Decode_Param<"result", value.decodeType, 0, []> {
  Decode_Value decodeValue = value;
}

// A record with `when` = `value` needs each of `needs`.
class Needs<string when, string value, list<string> needs> {
  string decodeWhen = when;
  string decodeValue = value;
  string decodeNeeds = !interleave(needs, ",");
}

//===----------------------------------------------------------------------===//
// Records
//===----------------------------------------------------------------------===//

// One record kind (AttrSizedOperandSegments where it may leave out two or more operands). The
// record's name (a knob's, a loop's profile scope) is the `name` attribute.
class Decode_Op<string kind, list<Trait> traits = []>
    : Op<Decode_Dialect, kind, traits> {
  list<Needs> requirements = [];
  // Kinds that share their parameters (the arithmetic records) name the table once.
  string paramTable = "";
  // The runtime's OpKind enumerator, when the kind's name is a C++ keyword; 0 for a declaration
  // (knob) that the interpreter does not run.
  string cppKind = "";
  bit decodeInstruction = 1;
}

// Records that open a structured range closed by `end` (block_loop, denoise_loop, and `if`,
// which `else` splits). In the dialect the range is the op's region (the if's: two).
class Decode_LoopOp<string kind, list<Trait> traits = []>
    : Decode_Op<kind, !listconcat(traits, [NoTerminator, SingleBlock])> {
  let regions = (region SizedRegion<1>:$body);
}

// A record kind that is not an op: it marks where a region ends or splits.
class DecodeMarker<string kind, string cpp = ""> {
  string decodeKind = kind;
  string cppKind = cpp;
}

//===----------------------------------------------------------------------===//
// Values: what a record's inputs refer to. No records of their own: they become the parameter
// values (`%r`, `@f`, literals) of the records that use them.
//===----------------------------------------------------------------------===//

def Decode_RegisterOp : Op<Decode_Dialect, "register", [Pure]> {
  let summary = "a register (`%name`), written and read by records";
  let arguments = (ins StrAttr:$name);
  let results = (outs Decode_RegisterOf<Decode_Value<"any", [AnyType]>>:$ref);
  let assemblyFormat = "$name attr-dict `:` type($ref)";
}

def Decode_FactOp : Op<Decode_Dialect, "fact", [Pure]> {
  let summary = "a fact of the model or the request (`@name`: mask, shift, vocab, prompt_len, "
                "seq_len, attention_block)";
  let arguments = (ins StrAttr:$name);
  let results = (outs I64:$value);
  let assemblyFormat = "$name attr-dict";
}

def Decode_ConstantOp : Op<Decode_Dialect, "constant", [Pure, ConstantLike]> {
  let summary = "a literal: an int, a real, a bool or a text";
  let arguments = (ins AnyAttr:$value);
  let results = (outs AnyType:$result);
  let assemblyFormat = "$value attr-dict `->` type($result)";
}

//===----------------------------------------------------------------------===//
// The record kinds, and what each does
//===----------------------------------------------------------------------===//

// Declarations: the record's name is the knob's name.
def Decode_KnobOp : Decode_Op<"knob"> {
  let decodeInstruction = 0;
  let arguments = (ins
    Param<StrAttr, "text", ["int", "real", "bool", "text"]>:$type,
    OptionalParam<AnyAttr, "scalar">:$default_,
    OptionalParam<BoolAttr, "boolean">:$optional,
    OptionalParam<StrAttr, "text">:$one_of,  // allowed text values, comma-separated
    OptionalParam<StrAttr, "text">:$error,  // the message for other values; "{}" = the value
    OptionalParam<AnyAttr, "number">:$min,  // "knob 'x' must be at least {min}, got {value}"
    OptionalParam<AnyAttr, "number">:$max  // "knob 'x' must be at most {max}, got {value}"
  );
  // In the dialect, the knob (`$name`) that other records read.
  let results = (outs Decode_ReferenceOf<"Knob", Decode_Value<"any", [AnyType]>>:$knob);
}

// Scalar ALU: a, b → out. Arithmetic needs operands of one type (int or real): int div/rem
// truncate as C++ does, division by zero fails the request. Comparisons give bool; eq/ne also
// compare bools and texts. `select` gives cond ? a : b; `defined` whether an optional knob is set
// (an unset knob reads as its type's zero: 0, 0.0, false, "").
// precision=f32 (real arithmetic and to_real only; default f64): the operands are rounded to
// float32 and the operation is one float32 operation, out = f32(f32(a) op f32(b)) (to_real:
// f32(a)), held exactly in the real register. It is how torch evaluates a float32 tensor
// expression with Python-float scalars (DiffusionGemma's temperature, docs/design/
// diffusion-gemma.md §6.3).
def Decode_SetOp : Decode_Op<"set"> {
  let arguments = (ins
    In<Decode_Scalar>:$a,
    Out<Decode_Scalar>:$out
  );
}

class Decode_ArithmeticOp<string name> : Decode_Op<name> {
  let paramTable = "Arithmetic";
  let arguments = (ins
    In<Decode_Number>:$a,
    In<Decode_Number>:$b,
    OptionalParam<StrAttr, "text", ["f64", "f32"]>:$precision,  // real operands only; default f64
    Out<Decode_Number>:$out
  );
}
def Decode_AddOp : Decode_ArithmeticOp<"add">;
def Decode_SubOp : Decode_ArithmeticOp<"sub">;
def Decode_MulOp : Decode_ArithmeticOp<"mul">;
def Decode_DivOp : Decode_ArithmeticOp<"div">;
def Decode_RemOp : Decode_ArithmeticOp<"rem">;
def Decode_MinOp : Decode_ArithmeticOp<"min">;
def Decode_MaxOp : Decode_ArithmeticOp<"max">;
class Decode_OrderOp<string name> : Decode_Op<name> {
  let paramTable = "Order";
  let arguments = (ins
    In<Decode_Number>:$a,
    In<Decode_Number>:$b,
    Out<Decode_Boolean>:$out
  );
}
def Decode_LtOp : Decode_OrderOp<"lt">;
def Decode_LeOp : Decode_OrderOp<"le">;
def Decode_GtOp : Decode_OrderOp<"gt">;
def Decode_GeOp : Decode_OrderOp<"ge">;

class Decode_EqualityOp<string name> : Decode_Op<name> {
  let paramTable = "Equality";
  let arguments = (ins
    In<Decode_Scalar>:$a,
    In<Decode_Scalar>:$b,
    Out<Decode_Boolean>:$out
  );
}
def Decode_EqOp : Decode_EqualityOp<"eq">;
def Decode_NeOp : Decode_EqualityOp<"ne">;

class Decode_LogicOp<string name> : Decode_Op<name> {
  let paramTable = "Logic";
  let arguments = (ins
    In<Decode_Boolean>:$a,
    In<Decode_Boolean>:$b,
    Out<Decode_Boolean>:$out
  );
}
def Decode_AndOp : Decode_LogicOp<"and"> { let cppKind = "logicalAnd"; }
def Decode_OrOp : Decode_LogicOp<"or"> { let cppKind = "logicalOr"; }

def Decode_NotOp : Decode_Op<"not"> {
  let cppKind = "logicalNot";
  let arguments = (ins
    In<Decode_Boolean>:$a,
    Out<Decode_Boolean>:$out
  );
}

def Decode_SelectOp : Decode_Op<"select"> {
  let arguments = (ins
    In<Decode_Boolean>:$cond,
    In<Decode_Scalar>:$a,
    In<Decode_Scalar>:$b,
    Out<Decode_Scalar>:$out
  );
}

def Decode_ToRealOp : Decode_Op<"to_real"> {
  let arguments = (ins
    In<Decode_Number>:$a,
    OptionalParam<StrAttr, "text", ["f64", "f32"]>:$precision,  // default f64
    Out<Decode_Real>:$out
  );
}

def Decode_DefinedOp : Decode_Op<"defined"> {
  let arguments = (ins
    In<Decode_Knob>:$knob,
    Out<Decode_Boolean>:$out
  );
}

// The request fails with `message` (each "{}" replaced by the next of arg0..arg3) when cond is
// false.
def Decode_CheckOp : Decode_Op<"check", [AttrSizedOperandSegments]> {
  let arguments = (ins
    In<Decode_Boolean>:$cond,
    Param<StrAttr, "text">:$message,
    OptionalIn<Decode_Scalar>:$arg0,
    OptionalIn<Decode_Scalar>:$arg1,
    OptionalIn<Decode_Scalar>:$arg2,
    OptionalIn<Decode_Scalar>:$arg3
  );
}

// DecodeModel::reserve(tokens, rows), every token's row while a first-logits capture is pending;
// also sizes the sequence and every row register, so that no later step allocates.
def Decode_ReserveOp : Decode_Op<"reserve"> {
  let arguments = (ins
    In<Decode_Integer>:$tokens,
    In<Decode_Integer>:$rows
  );
}

// Appends `count` tokens to seq: `token` (fill=token) or, fill=noise, randomToken(key(seed,
// request, stream, step, position), vocab).
def Decode_SeqExtendOp : Decode_Op<"seq_extend", [AttrSizedOperandSegments]> {
  let arguments = (ins
    In<Decode_Integer>:$count,
    In<Decode_Text, ["token", "noise"]>:$fill,
    OptionalIn<Decode_Integer>:$token,  // fill=token
    OptionalIn<Decode_Integer>:$stream,  // fill=noise
    OptionalIn<Decode_Integer>:$step  // fill=noise
  );
}

// The rows [begin, end) of seq that row ops address.
def Decode_WindowOp : Decode_Op<"window"> {
  let arguments = (ins
    In<Decode_Integer>:$begin,
    In<Decode_Integer>:$end
  );
}

// The number of window rows whose token is `value`.
def Decode_CountEqOp : Decode_Op<"count_eq"> {
  let arguments = (ins
    In<Decode_Integer>:$value,
    Out<Decode_Integer>:$out
  );
}

// sampling::numTransferTokens(masked, steps) as a list.
def Decode_TransferScheduleOp : Decode_Op<"transfer_schedule"> {
  let arguments = (ins
    In<Decode_Integer>:$masked,
    In<Decode_Integer>:$steps,
    Out<Decode_List>:$out
  );
}

// list[index], or `default` past its end.
def Decode_ListAtOp : Decode_Op<"list_at"> {
  let arguments = (ins
    In<Decode_List>:$list,
    In<Decode_Integer>:$index,
    In<Decode_Integer>:$default_,
    Out<Decode_Integer>:$out
  );
}

// A row register of the window's length, every row `value` (int: tokens, real: reals, bool: flags).
def Decode_FillRowOp : Decode_Op<"fill_row"> {
  let arguments = (ins
    In<Decode_Scalar>:$value,
    Out<Decode_Row>:$out
  );
}

// An empty credit register for the window's rows, with room for `capacity` tokens per row (the
// steps that may add one; at most 2^16); sizes what `credit` writes, so no step allocates.
def Decode_CreditResetOp : Decode_Op<"credit_reset"> {
  let arguments = (ins
    In<Decode_Integer>:$capacity,
    Out<Decode_Credit>:$out
  );
}

// A forward over seq[0, count) (runtime/sampling/DecodeModel.h). mode=full keeps the K/V of
// [0, keep) afterwards; mode=cached feeds [keep, count) over that cache; mode=window (the dual
// cache) feeds [keep, feed_end) over a cache of all [0, count), its K/V replacing that range in
// the cache (ForwardSpec::Mode::window); mode=append feeds [keep, count) over that cache and
// keeps all of [0, count) (a commit); mode=extend feeds [first, count) over the cached [0, keep),
// rewriting [first, keep) for the function's layers and dropping [keep, count) again
// (ForwardSpec::Mode::extend, a DFlash draft). row_begin/row_end are
// absolute positions (the interpreter makes them relative to the fed tokens). decoded=false: the
// logits are never looked at (a cache fill), so they are neither captured nor a step.
// function=name runs the artifact's forward function of that name (DiffusionGemma's encode and
// decode; absent: the default one); input=%logits hands it a logits register's rows, one per
// fed token (an empty register: no input) or one per fed token from the first, fewer than fed
// (ForwardSpec::inputRows), in the register's width; input_at=%p: the register's first row is
// position p's, at or after the first fed one (ForwardSpec::inputFirst; its soft embeddings read
// no input for the fed rows before it); input_scale=%r multiplies what the function's soft
// embeddings make of them (ForwardSpec::inputScale, 1 when absent; iteration smoothing's
// weight); capture=%c receives the forward's captured rows ([fed, width],
// DecodeModel::capturedRows; an error when the function captures none).
def Decode_ForwardOp : Decode_Op<"forward", [AttrSizedOperandSegments]> {
  let arguments = (ins
    Param<StrAttr, "text", ["full", "cached", "window", "append", "extend"]>:$mode,
    In<Decode_Integer>:$count,
    In<Decode_Integer>:$keep,
    OptionalIn<Decode_Integer>:$feed_end,  // window
    In<Decode_Integer>:$row_begin,
    In<Decode_Integer>:$row_end,
    OptionalParam<BoolAttr, "boolean">:$decoded,  // default true
    OptionalParam<StrAttr, "text">:$function,  // default: the artifact's default forward
    OptionalIn<Decode_Logits>:$input,
    OptionalIn<Decode_Real>:$input_scale,  // with input
    OptionalIn<Decode_Integer>:$input_at,  // with input
    OptionalIn<Decode_Integer>:$first,  // extend
    OptionalOut<Decode_Logits>:$capture  // the captured rows of every fed token
  );
  let requirements = [Needs<"mode", "window", ["feed_end"]>, Needs<"mode", "extend", ["first"]>];
}

// The last forward's logit rows divided by `temperature` as one float32 division per element,
// f32(logit) / f32(temperature) → out (logits): transformers' processed logits, which
// DiffusionGemma's self-conditioning reads at the next step.
def Decode_HoldLogitsOp : Decode_Op<"hold_logits"> {
  let arguments = (ins
    In<Decode_Real>:$temperature,
    Out<Decode_Logits>:$out
  );
}

// Empties a logits register (a forward then gets no input from it).
def Decode_DropLogitsOp : Decode_Op<"drop_logits"> {
  let arguments = (ins
    Out<Decode_Logits>:$out
  );
}

// A float-rows register (`of`) keeps its first `rows` rows: the captured features of the tokens a
// verify accepted.
def Decode_TakeRowsOp : Decode_Op<"take_rows"> {
  let arguments = (ins
    In<Decode_Integer>:$rows,
    InOut<Decode_Logits>:$of
  );
}

// The rows [begin, end) of the last decoded forward's logit rows (0: the first row it returned)
// become the rows every later row record reads (sample, hold_logits, spec_verify, ...), until the
// next forward, which returns all of its rows again. One forward then serves several groups of
// rows: I-DLM's verified drafts, its bonus and its next drafts.
def Decode_NarrowLogitsOp : Decode_Op<"narrow_logits"> {
  let arguments = (ins
    In<Decode_Integer>:$begin,
    In<Decode_Integer>:$end
  );
}

// seq keeps its first `length` tokens (prompt_len <= length <= its length): a speculative
// round drops the drafts it rejected and the mask positions it fed. The window is clipped to it.
def Decode_SeqTruncateOp : Decode_Op<"seq_truncate"> {
  let arguments = (ins
    In<Decode_Integer>:$length
  );
}

// Writes a tokens register into seq's window rows.
def Decode_SeqWriteOp : Decode_Op<"seq_write"> {
  let arguments = (ins
    In<Decode_Tokens>:$tokens
  );
}

// DecodeModel::trimCache(length): the K/V cache keeps the first `length` positions of what it
// holds (the rejected drafts' and the masks' K/V an append forward wrote are dropped).
def Decode_KvTrimOp : Decode_Op<"kv_trim"> {
  let arguments = (ins
    In<Decode_Integer>:$length
  );
}

// Speculative verification (the dlm.spec_verify op; seeds 002-004,
// docs/design/speculative-decoding.md): the window's
// K rows hold draft tokens d_0..d_{K-1} at their positions; the current logit rows (K + 1 of them)
// are the target's, row j predicting d_j and row K the token after the last draft. Drafts are
// taken in order while they pass:
//   temperature 0   d_j == argmax(row j) (first index of the largest)
//   temperature T   p = the target's distribution of row j: softmax(row / T) over the tokens
//                   sampling::topKTopPFilter keeps with top_k / top_p (all when unset), q = the
//                   draft's: softmax(draft_logits row j) (the draft's logits already divided by T,
//                   as hold_logits writes them) filtered the same way at unit temperature; d_j
//                   passes when alpha <= 0, or r = p(d_j) / (alpha q(d_j)) >= 1, or u < r, with
//                   u = uniform(key(seed, request, verify stream, step, position of d_j), 0)
//                   (alpha 1: the rejection sampling of speculative decoding, lossless when the
//                   drafts were drawn from q)
// → accepted = the drafts that passed (0..K); token = at the first rejected row, argmax (T = 0)
// or a draw from normalize(max(0, p - q)) (p when that is all zero); when all passed, the bonus
// token from row K (argmax, or a draw from its p). Draws are the inverse CDF of
// uniform(key(..., position of the row's token), 1).
// I-DLM's relaxations (docs/design/speculative-decoding.md; lossy): verify_count = k tests only
// the first k drafts and
// passes the rest untested; rule=top_logits (fast_verify) passes a draft whose logit is at least
// the top_logits-th largest of its row, and replaces a failing one by the row's argmax.
def Decode_SpecVerifyOp : Decode_Op<"spec_verify", [AttrSizedOperandSegments]> {
  let arguments = (ins
    In<Decode_Real>:$temperature,
    In<Decode_Integer>:$step,
    OptionalIn<Decode_Logits>:$draft_logits,  // needed when temperature > 0
    OptionalIn<Decode_Real>:$alpha,  // default 1
    OptionalIn<Decode_Integer>:$top_k,  // 0: no limit
    OptionalIn<Decode_Real>:$top_p,  // 1: no limit
    OptionalParam<StrAttr, "text", ["rejection", "top_logits"]>:$rule,  // default rejection
    OptionalIn<Decode_Integer>:$top_logits,  // rule=top_logits
    OptionalIn<Decode_Integer>:$verify_count,  // default: every draft
    Out<Decode_Integer>:$accepted,
    Out<Decode_Integer>:$token
  );
  let requirements = [Needs<"rule", "top_logits", ["top_logits"]>];
}

// Per window row (candidates=masked: rows holding @mask; all: every row), keyed by
// positionKey(stepKey(seed, request, gumbel stream, step), position):
//   kind=gumbel_max  sampling::decodeRow → token, confidence (softmax at unit temperature); with
//                    top_k / top_p and a temperature > 0, only the tokens
//                    sampling::topKTopPFilter keeps (transformers' warpers, in its order)
//   kind=tempered    sampling::temperedRow → sample, argmax, entropy
//                    precision=f32: sampling::temperedRowF32, transformers' float32 sampler:
//                    z = f32(logit) / f32(temperature) as a float32 division, argmax(z) (first
//                    index), the entropy of softmax(z) rounded to float32, the sample
//                    argmax(z + gumbel)
def Decode_SampleOp : Decode_Op<"sample", [AttrSizedOperandSegments]> {
  let arguments = (ins
    Param<StrAttr, "text", ["gumbel_max", "tempered"]>:$kind,
    In<Decode_Real>:$temperature,
    In<Decode_Integer>:$excluded,  // a token id no argmax picks; -1: none
    In<Decode_Integer>:$step,
    Param<StrAttr, "text", ["masked", "all"]>:$candidates,
    OptionalParam<StrAttr, "text", ["f64", "f32"]>:$precision,  // tempered only; default f64
    OptionalOut<Decode_Tokens>:$token,  // gumbel_max
    OptionalOut<Decode_Reals>:$confidence,  // gumbel_max
    OptionalOut<Decode_Tokens>:$sample,  // tempered
    OptionalOut<Decode_Tokens>:$argmax,  // tempered
    OptionalOut<Decode_Reals>:$entropy,  // tempered
    OptionalIn<Decode_Integer>:$top_k,  // gumbel_max; 0: no limit
    OptionalIn<Decode_Real>:$top_p  // gumbel_max; 1: no limit
  );
  let requirements = [Needs<"kind", "gumbel_max", ["token", "confidence"]>,
                      Needs<"kind", "tempered", ["sample", "argmax", "entropy"]>];
}

// Which candidates a step keeps → keep (flags):
//   rule=top_k          the first min(k, candidates) in sampling::confidenceOrder of `score`
//   rule=threshold      the first max(#(score >= threshold), 1) of that order, at most all
//   rule=entropy_bound  sampling::entropyAccept(score, bound)
//   rule=hierarchical   sampling::hierarchicalAccept(score, threshold, low_threshold, depth):
//                       dInfer's segment maxima, `depth` levels deep
//   rule=threshold_quota the first max(#(score > threshold), k) of that order, at most all
//                       (diffusers' BlockRefinementScheduler: every candidate above the threshold
//                       when they are at least the step's quota k, else the quota's most
//                       confident; k may be 0)
//   rule=leftmost       the first min(k, candidates) by position (SDAR's sequential remasking)
// converge=stable_confident → converged: run := (argmax == prev) ? run + 1 : 0, prev := argmax,
// converged = run >= stability && mean(score) < confidence (prev and run are updated in place).
// precision=f32 (default f64), transformers' float32 decisions: entropy_bound is
// sampling::entropyAcceptF32 (float32 scores, torch's CPU cumsum, f32(cs_k - H_k) <= f32(bound));
// the mean score is f32(sum / count) and is compared with f32(confidence); threshold_quota
// compares f32(score) > f32(threshold), as torch compares a float32 tensor with a Python float.
def Decode_AcceptOp : Decode_Op<"accept", [AttrSizedOperandSegments]> {
  let arguments = (ins
    Param<StrAttr, "text",
          ["top_k", "threshold", "entropy_bound", "hierarchical", "threshold_quota",
           "leftmost"]>:$rule,
    Param<StrAttr, "text", ["masked", "all"]>:$candidates,
    In<Decode_Reals>:$score,
    OptionalIn<Decode_Integer, [], "TopK">:$k,  // top_k, threshold_quota, leftmost
    OptionalIn<Decode_Real>:$threshold,  // threshold, hierarchical, threshold_quota
    OptionalIn<Decode_Real>:$bound,  // entropy_bound
    OptionalIn<Decode_Real>:$low_threshold,  // hierarchical
    OptionalIn<Decode_Integer>:$depth,  // hierarchical
    OptionalParam<StrAttr, "text", ["none", "stable_confident"]>:$converge,
    // entropy_bound, threshold_quota and stable_confident; default f64
    OptionalParam<StrAttr, "text", ["f64", "f32"]>:$precision,
    OptionalIn<Decode_Tokens>:$argmax,  // stable_confident
    OptionalInOut<Decode_Tokens>:$prev,  // stable_confident
    OptionalInOut<Decode_Integer>:$run,  // stable_confident
    OptionalIn<Decode_Integer>:$stability,  // stable_confident
    OptionalIn<Decode_Real>:$confidence,  // stable_confident
    Out<Decode_Flags>:$keep,
    OptionalOut<Decode_Boolean>:$converged  // stable_confident
  );
  let requirements = [
    Needs<"rule", "top_k", ["k"]>,
    Needs<"rule", "threshold", ["threshold"]>,
    Needs<"rule", "entropy_bound", ["bound"]>,
    Needs<"rule", "hierarchical", ["threshold", "low_threshold", "depth"]>,
    Needs<"rule", "threshold_quota", ["k", "threshold"]>,
    Needs<"rule", "leftmost", ["k"]>,
    Needs<"converge", "stable_confident",
          ["argmax", "prev", "run", "stability", "confidence", "converged"]>
  ];
}

// Credit decoding (dInfer, seed 001 appendix B.2) in front of a sample. `credit` holds, per window
// row, the tokens with a credit (the rest have none): every credit is multiplied by `decay`; then,
// per candidate row, p = softmax(logits) and credit[j, argmax p] += (max p)^gamma
// (sampling::topProbability); the logits the next `sample` reads become logits + alpha * log(1 +
// credit), rounded to float32, which changes only the tokens with a credit
// (sampling::creditedLogit). decay in [0, 1], alpha and gamma finite.
def Decode_CreditOp : Decode_Op<"credit"> {
  let arguments = (ins
    InOut<Decode_Credit>:$credit,
    In<Decode_Real>:$decay,
    In<Decode_Real>:$gamma,
    In<Decode_Real>:$alpha,
    Param<StrAttr, "text", ["masked", "all"]>:$candidates
  );
}

// Whether the denoise step ends its block → done:
//   rule=no_mask_left      no candidate row (holding @mask) is left unkept
//   rule=converged_or_last converged || last; then keep := every row and sampled := final
def Decode_GateOp : Decode_Op<"gate", [AttrSizedOperandSegments]> {
  let arguments = (ins
    Param<StrAttr, "text", ["no_mask_left", "converged_or_last"]>:$rule,
    InOut<Decode_Flags>:$keep,
    OptionalIn<Decode_Boolean>:$converged,  // converged_or_last
    OptionalIn<Decode_Boolean>:$last,  // converged_or_last
    OptionalInOut<Decode_Tokens>:$sampled,  // converged_or_last
    OptionalIn<Decode_Tokens>:$final,  // converged_or_last
    Out<Decode_Boolean>:$done
  );
  let requirements =
      [Needs<"rule", "converged_or_last", ["converged", "last", "sampled", "final"]>];
}

// Writes the next canvas into seq[window]: kept rows take `sampled`, rejected ones noise (@mask,
// or noise=uniform randomToken(key(seed, request, renoise stream, step, position), vocab)).
// candidates=masked_only touches only rows holding @mask; every_rejected every row.
def Decode_RenoiseOp : Decode_Op<"renoise"> {
  let arguments = (ins
    In<Decode_Text, ["mask", "uniform"]>:$noise,
    Param<StrAttr, "text", ["masked_only", "every_rejected"]>:$candidates,
    In<Decode_Flags>:$keep,
    In<Decode_Tokens>:$sampled,
    In<Decode_Integer>:$step
  );
}

// Token-to-token editing (LLaDA2.1, diffusers' BlockRefinementScheduler): every window row that
// does not hold @mask, sits at or after @prompt_len, and whose `sampled` token differs from its own
// with score > threshold takes `sampled` → edited (flags), count. Decided on seq as it stands:
// before the step's commits are written. precision=f32: f32(score) > f32(threshold).
def Decode_EditOp : Decode_Op<"edit"> {
  let arguments = (ins
    In<Decode_Reals>:$score,
    In<Decode_Tokens>:$sampled,
    In<Decode_Real>:$threshold,
    OptionalParam<StrAttr, "text", ["f64", "f32"]>:$precision,  // default f64
    Out<Decode_Flags>:$edited,
    Out<Decode_Integer>:$count
  );
}

// diffusers' check_eos_finished after a step's writes → finished: a row `keep` or `edited` marks
// took an EOS (`sampled`), the first EOS of seq[0, window end) sits at or after @prompt_len, and
// no position of [@prompt_len, that EOS) holds @mask.
def Decode_EosStopOp : Decode_Op<"eos_stop"> {
  let arguments = (ins
    In<Decode_Flags>:$keep,
    In<Decode_Flags>:$edited,
    In<Decode_Tokens>:$sampled,
    Out<Decode_Boolean>:$finished
  );
}

// Counts a committed block and reports seq[begin, end) cut after its first EOS (sampling::
// reportBlock; `last`: no block follows it) → eos: the block holds an EOS.
def Decode_CommitOp : Decode_Op<"commit"> {
  let arguments = (ins
    In<Decode_Integer>:$begin,
    In<Decode_Integer>:$end,
    In<Decode_Integer>:$index,
    In<Decode_Boolean>:$last,
    Out<Decode_Boolean>:$eos
  );
}

// for index in [0, count): the records up to the matching `end`. Opens the profile scope named
// by the record's name (a block) per iteration.
def Decode_BlockLoopOp : Decode_LoopOp<"block_loop"> {
  let arguments = (ins
    In<Decode_Integer>:$count,
    Out<Decode_Integer>:$index
  );
}

// Denoising steps index = 0, 1, ..., global = base + index, at most min(cap, bound) of them (cap
// < 0: bound); the last record before its `end` is an `until`, which ends the loop after a step
// whose cond is true. ran = the steps run. Stopping at cap is normal; running out of `bound`
// steps fails the request. Opens the profile scope named by the record's name (a step), indexed
// by global. `unroll` is a hint for device loops.
def Decode_DenoiseLoopOp : Decode_LoopOp<"denoise_loop"> {
  let arguments = (ins
    In<Decode_Integer>:$cap,
    In<Decode_Integer>:$bound,
    In<Decode_Integer>:$base,
    OptionalParam<I64Attr, "integer">:$unroll,
    Out<Decode_Integer>:$index,
    Out<Decode_Integer>:$global,
    Out<Decode_Integer>:$ran  // written when the loop ends
  );
}

class Decode_ConditionOp<string name, list<Trait> traits = []> : Decode_Op<name, traits> {
  let paramTable = "Condition";
  let arguments = (ins
    In<Decode_Boolean>:$cond
  );
}
def Decode_UntilOp : Decode_ConditionOp<"until">;
// Leaves the innermost block_loop (not from inside a denoise_loop).
def Decode_ExitIfOp : Decode_ConditionOp<"exit_if">;
def Decode_IfOp : Decode_ConditionOp<"if", [NoTerminator]> {
  let cppKind = "ifThen";
  let regions = (region SizedRegion<1>:$thenRegion, AnyRegion:$elseRegion);
}

def Decode_ElseMarker : DecodeMarker<"else", "elseBranch">;
def Decode_EndMarker : DecodeMarker<"end">;

// output = seq[@prompt_len:] cut after the first EOS; decodeSteps = steps. Last record.
def Decode_FinishOp : Decode_Op<"finish"> {
  let arguments = (ins
    In<Decode_Integer>:$steps
  );
}
#endif // DLM_DECODE_OPS_TD
