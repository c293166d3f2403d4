// The contract of the decode records (docs/design/decode-program.md): a decoding policy as a flat,
// ordered list of records that the runtime's interpreter (runtime/program/DecodeInterpreter.h)
// runs without knowing the policy. Header-only and free of dependencies, like
// runtime/model/KernelProgram.h, so that the compiler (which will emit the records) and the
// runtime (which loads them, runtime/program/DecodeProgram.h) include the same names.
//
// A record is {kind, name, parameters}. `kind` is one of the kinds below; `name` labels the record
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

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace dlm::spec::decode {

// ---- Kinds ------------------------------------------------------------------------------------
// Declarations: the record's name is the knob's name.
inline constexpr std::string_view kKindKnob = "knob";
// Scalar ALU: a, b → out. Arithmetic needs operands of one type (int or real): int div/rem
// truncate as C++ does, division by zero fails the request. Comparisons give bool; eq/ne also
// compare bools and texts. `select` gives cond ? a : b; `defined` whether an optional knob is set
// (an unset knob reads as its type's zero: 0, 0.0, false, "").
// precision=f32 (real arithmetic and to_real only; default f64): the operands are rounded to
// float32 and the operation is one float32 operation, out = f32(f32(a) op f32(b)) (to_real:
// f32(a)), held exactly in the real register. It is how torch evaluates a float32 tensor
// expression with Python-float scalars (DiffusionGemma's temperature, docs/design/
// diffusion-gemma.md §6.3).
inline constexpr std::string_view kKindSet = "set";
inline constexpr std::string_view kKindAdd = "add";
inline constexpr std::string_view kKindSub = "sub";
inline constexpr std::string_view kKindMul = "mul";
inline constexpr std::string_view kKindDiv = "div";
inline constexpr std::string_view kKindRem = "rem";
inline constexpr std::string_view kKindMin = "min";
inline constexpr std::string_view kKindMax = "max";
inline constexpr std::string_view kKindLt = "lt";
inline constexpr std::string_view kKindLe = "le";
inline constexpr std::string_view kKindGt = "gt";
inline constexpr std::string_view kKindGe = "ge";
inline constexpr std::string_view kKindEq = "eq";
inline constexpr std::string_view kKindNe = "ne";
inline constexpr std::string_view kKindAnd = "and";
inline constexpr std::string_view kKindOr = "or";
inline constexpr std::string_view kKindNot = "not";
inline constexpr std::string_view kKindSelect = "select";
inline constexpr std::string_view kKindToReal = "to_real";
inline constexpr std::string_view kKindDefined = "defined";
// The request fails with `message` (each "{}" replaced by the next of arg0..arg3) when cond is
// false.
inline constexpr std::string_view kKindCheck = "check";
// DecodeModel::reserve(tokens, rows), every token's row while a first-logits capture is pending;
// also sizes the sequence and every row register, so that no later step allocates.
inline constexpr std::string_view kKindReserve = "reserve";
// Appends `count` tokens to seq: `token` (fill=token) or, fill=noise, randomToken(key(seed,
// request, stream, step, position), vocab).
inline constexpr std::string_view kKindSeqExtend = "seq_extend";
// The rows [begin, end) of seq that row ops address.
inline constexpr std::string_view kKindWindow = "window";
// The number of window rows whose token is `value`.
inline constexpr std::string_view kKindCountEq = "count_eq";
// sampling::numTransferTokens(masked, steps) as a list.
inline constexpr std::string_view kKindTransferSchedule = "transfer_schedule";
// list[index], or `default` past its end.
inline constexpr std::string_view kKindListAt = "list_at";
// A row register of the window's length, every row `value` (int: tokens, real: reals, bool: flags).
inline constexpr std::string_view kKindFillRow = "fill_row";
// An empty credit register for the window's rows, with room for `capacity` tokens per row (the
// steps that may add one; at most 2^16); sizes what `credit` writes, so no step allocates.
inline constexpr std::string_view kKindCreditReset = "credit_reset";
// A forward over seq[0, count) (runtime/sampling/DecodeModel.h). mode=full keeps the K/V of
// [0, keep) afterwards; mode=cached feeds [keep, count) over that cache; mode=window (the dual
// cache) feeds [keep, feed_end) over a cache of all [0, count), its K/V replacing that range in
// the cache (DecodeModel::forwardWindow); mode=append feeds [keep, count) over that cache and
// keeps all of [0, count) (a commit); mode=extend feeds [first, count) over the cached [0, keep),
// rewriting [first, keep) for the function's layers and dropping [keep, count) again
// (ForwardSpec::Mode::extend, a DFlash draft). row_begin/row_end are
// absolute positions (the interpreter makes them relative to the fed tokens). decoded=false: the
// logits are never looked at (a cache fill), so they are neither captured nor a step.
// function=name runs the artifact's forward function of that name (DiffusionGemma's encode and
// decode; absent: the default one); input=%logits hands it a logits register's rows, one per
// fed token (an empty register: no input) or one per fed token from the first, fewer than fed
// (ForwardSpec::inputRows), in the register's width; capture=%c receives the forward's captured
// rows ([fed, width], DecodeModel::capturedRows; an error when the function captures none).
inline constexpr std::string_view kKindForward = "forward";
// The last forward's logit rows divided by `temperature` as one float32 division per element,
// f32(logit) / f32(temperature) → out (logits): transformers' processed logits, which
// DiffusionGemma's self-conditioning reads at the next step.
inline constexpr std::string_view kKindHoldLogits = "hold_logits";
// Empties a logits register (a forward then gets no input from it).
inline constexpr std::string_view kKindDropLogits = "drop_logits";
// A float-rows register (`of`) keeps its first `rows` rows: the captured features of the tokens a
// verify accepted.
inline constexpr std::string_view kKindTakeRows = "take_rows";
// The rows [begin, end) of the last decoded forward's logit rows (0: the first row it returned)
// become the rows every later row record reads (sample, hold_logits, spec_verify, ...), until the
// next forward, which returns all of its rows again. One forward then serves several groups of
// rows: I-DLM's verified drafts, its bonus and its next drafts.
inline constexpr std::string_view kKindNarrowLogits = "narrow_logits";
// seq keeps its first `length` tokens (prompt_len <= length <= its length): a speculative
// round drops the drafts it rejected and the mask positions it fed. The window is clipped to it.
inline constexpr std::string_view kKindSeqTruncate = "seq_truncate";
// Writes a tokens register into seq's window rows.
inline constexpr std::string_view kKindSeqWrite = "seq_write";
// DecodeModel::trimCache(length): the K/V cache keeps the first `length` positions of what it
// holds (the rejected drafts' and the masks' K/V an append forward wrote are dropped).
inline constexpr std::string_view kKindKvTrim = "kv_trim";
// Speculative verification (the dlm.spec_verify op; seeds 002-004, docs/design/speculative-decoding.md): the window's
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
// I-DLM's relaxations (docs/design/speculative-decoding.md; lossy): verify_count = k tests only the first k drafts and
// passes the rest untested; rule=top_logits (fast_verify) passes a draft whose logit is at least
// the top_logits-th largest of its row, and replaces a failing one by the row's argmax.
inline constexpr std::string_view kKindSpecVerify = "spec_verify";
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
inline constexpr std::string_view kKindSample = "sample";
// Which candidates a step keeps → keep (flags):
//   rule=top_k          the first min(k, candidates) in sampling::confidenceOrder of `score`
//   rule=threshold      the first max(#(score >= threshold), 1) of that order, at most all
//   rule=entropy_bound  sampling::entropyAccept(score, bound)
//   rule=hierarchical   sampling::hierarchicalAccept(score, threshold, low_threshold, depth):
//                       dInfer's segment maxima, `depth` levels deep
// converge=stable_confident → converged: run := (argmax == prev) ? run + 1 : 0, prev := argmax,
// converged = run >= stability && mean(score) < confidence (prev and run are updated in place).
// precision=f32 (default f64), transformers' float32 decisions: entropy_bound is
// sampling::entropyAcceptF32 (float32 scores, torch's CPU cumsum, f32(cs_k - H_k) <= f32(bound));
// the mean score is f32(sum / count) and is compared with f32(confidence).
inline constexpr std::string_view kKindAccept = "accept";
// Credit decoding (dInfer, seed 001 appendix B.2) in front of a sample. `credit` holds, per window
// row, the tokens with a credit (the rest have none): every credit is multiplied by `decay`; then,
// per candidate row, p = softmax(logits) and credit[j, argmax p] += (max p)^gamma
// (sampling::topProbability); the logits the next `sample` reads become logits + alpha * log(1 +
// credit), rounded to float32, which changes only the tokens with a credit
// (sampling::creditedLogit). decay in [0, 1], alpha and gamma finite.
inline constexpr std::string_view kKindCredit = "credit";
// Whether the denoise step ends its block → done:
//   rule=no_mask_left      no candidate row (holding @mask) is left unkept
//   rule=converged_or_last converged || last; then keep := every row and sampled := final
inline constexpr std::string_view kKindGate = "gate";
// Writes the next canvas into seq[window]: kept rows take `sampled`, rejected ones noise (@mask,
// or noise=uniform randomToken(key(seed, request, renoise stream, step, position), vocab)).
// candidates=masked_only touches only rows holding @mask; every_rejected every row.
inline constexpr std::string_view kKindRenoise = "renoise";
// Counts a committed block and reports seq[begin, end) cut after its first EOS (sampling::
// reportBlock; `last`: no block follows it) → eos: the block holds an EOS.
inline constexpr std::string_view kKindCommit = "commit";
// for index in [0, count): the records up to the matching `end`. Opens the profile scope named
// by the record's name (a block) per iteration.
inline constexpr std::string_view kKindBlockLoop = "block_loop";
// Denoising steps index = 0, 1, ..., global = base + index, at most min(cap, bound) of them (cap
// < 0: bound); the last record before its `end` is an `until`, which ends the loop after a step
// whose cond is true. ran = the steps run. Stopping at cap is normal; running out of `bound`
// steps fails the request. Opens the profile scope named by the record's name (a step), indexed
// by global. `unroll` is a hint for device loops.
inline constexpr std::string_view kKindDenoiseLoop = "denoise_loop";
inline constexpr std::string_view kKindUntil = "until";
// Leaves the innermost block_loop (not from inside a denoise_loop).
inline constexpr std::string_view kKindExitIf = "exit_if";
inline constexpr std::string_view kKindIf = "if";
inline constexpr std::string_view kKindElse = "else";
inline constexpr std::string_view kKindEnd = "end";
// output = seq[@prompt_len:] cut after the first EOS; decodeSteps = steps. Last record.
inline constexpr std::string_view kKindFinish = "finish";

// ---- Facts (@name) ----------------------------------------------------------------------------
inline constexpr std::string_view kFactMask = "mask";               // int, -1: the model has none
inline constexpr std::string_view kFactShift = "shift";             // int, 1 for a logit shift
inline constexpr std::string_view kFactVocab = "vocab";             // int
inline constexpr std::string_view kFactPromptLength = "prompt_len"; // int
inline constexpr std::string_view kFactSequenceLength = "seq_len";  // int, seq's current length

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

// Short names for the tables below, one parameter a line.
using PR = ParamRole;
using PT = ParamType;

// The `precision` attribute's values, the same for every kind that has it (arithmetic, to_real,
// sample, accept); f64 when absent.
inline constexpr std::string_view kPrecisionChoices = "f64,f32";

// clang-format off

inline constexpr ParamSpec kKnobParams[] = {
    {"type", PR::attribute, PT::text, true, "int,real,bool,text"},
    {"default", PR::attribute, PT::scalar, false},
    {"optional", PR::attribute, PT::boolean, false},
    {"one_of", PR::attribute, PT::text, false}, // allowed text values, comma-separated
    {"error", PR::attribute, PT::text, false},  // the message for other values; "{}" = the value
    {"min", PR::attribute, PT::number, false},  // "knob 'x' must be at least {min}, got {value}"
    {"max", PR::attribute, PT::number, false},  // "knob 'x' must be at most {max}, got {value}"
};
inline constexpr ParamSpec kSetParams[] = {
    {"a", PR::input, PT::scalar, true},
    {"out", PR::result, PT::scalar, true},
};
inline constexpr ParamSpec kArithmeticParams[] = {
    {"a", PR::input, PT::number, true},
    {"b", PR::input, PT::number, true},
    {"precision", PR::attribute, PT::text, false, kPrecisionChoices}, // real operands only; default f64
    {"out", PR::result, PT::number, true},
};
inline constexpr ParamSpec kOrderParams[] = {
    {"a", PR::input, PT::number, true},
    {"b", PR::input, PT::number, true},
    {"out", PR::result, PT::boolean, true},
};
inline constexpr ParamSpec kEqualityParams[] = {
    {"a", PR::input, PT::scalar, true},
    {"b", PR::input, PT::scalar, true},
    {"out", PR::result, PT::boolean, true},
};
inline constexpr ParamSpec kLogicParams[] = {
    {"a", PR::input, PT::boolean, true},
    {"b", PR::input, PT::boolean, true},
    {"out", PR::result, PT::boolean, true},
};
inline constexpr ParamSpec kNotParams[] = {
    {"a", PR::input, PT::boolean, true},
    {"out", PR::result, PT::boolean, true},
};
inline constexpr ParamSpec kSelectParams[] = {
    {"cond", PR::input, PT::boolean, true},
    {"a", PR::input, PT::scalar, true},
    {"b", PR::input, PT::scalar, true},
    {"out", PR::result, PT::scalar, true},
};
inline constexpr ParamSpec kToRealParams[] = {
    {"a", PR::input, PT::number, true},
    {"precision", PR::attribute, PT::text, false, kPrecisionChoices}, // default f64
    {"out", PR::result, PT::real, true},
};
inline constexpr ParamSpec kDefinedParams[] = {
    {"knob", PR::input, PT::knob, true},
    {"out", PR::result, PT::boolean, true},
};
inline constexpr ParamSpec kCheckParams[] = {
    {"cond", PR::input, PT::boolean, true},
    {"message", PR::attribute, PT::text, true},
    {"arg0", PR::input, PT::scalar, false},
    {"arg1", PR::input, PT::scalar, false},
    {"arg2", PR::input, PT::scalar, false},
    {"arg3", PR::input, PT::scalar, false},
};
inline constexpr ParamSpec kReserveParams[] = {
    {"tokens", PR::input, PT::integer, true},
    {"rows", PR::input, PT::integer, true},
};
inline constexpr ParamSpec kSeqExtendParams[] = {
    {"count", PR::input, PT::integer, true},
    {"fill", PR::input, PT::text, true, "token,noise"},
    {"token", PR::input, PT::integer, false},  // fill=token
    {"stream", PR::input, PT::integer, false}, // fill=noise
    {"step", PR::input, PT::integer, false},   // fill=noise
};
inline constexpr ParamSpec kWindowParams[] = {
    {"begin", PR::input, PT::integer, true},
    {"end", PR::input, PT::integer, true},
};
inline constexpr ParamSpec kCountEqParams[] = {
    {"value", PR::input, PT::integer, true},
    {"out", PR::result, PT::integer, true},
};
inline constexpr ParamSpec kTransferScheduleParams[] = {
    {"masked", PR::input, PT::integer, true},
    {"steps", PR::input, PT::integer, true},
    {"out", PR::result, PT::list, true},
};
inline constexpr ParamSpec kListAtParams[] = {
    {"list", PR::input, PT::list, true},
    {"index", PR::input, PT::integer, true},
    {"default", PR::input, PT::integer, true},
    {"out", PR::result, PT::integer, true},
};
inline constexpr ParamSpec kFillRowParams[] = {
    {"value", PR::input, PT::scalar, true},
    {"out", PR::result, PT::row, true},
};
inline constexpr ParamSpec kCreditResetParams[] = {
    {"capacity", PR::input, PT::integer, true},
    {"out", PR::result, PT::credit, true},
};
inline constexpr ParamSpec kHoldLogitsParams[] = {
    {"temperature", PR::input, PT::real, true},
    {"out", PR::result, PT::logits, true},
};
inline constexpr ParamSpec kNarrowLogitsParams[] = {
    {"begin", PR::input, PT::integer, true},
    {"end", PR::input, PT::integer, true},
};
inline constexpr ParamSpec kSeqTruncateParams[] = {
    {"length", PR::input, PT::integer, true},
};
inline constexpr ParamSpec kSeqWriteParams[] = {
    {"tokens", PR::input, PT::tokens, true},
};
inline constexpr ParamSpec kKvTrimParams[] = {
    {"length", PR::input, PT::integer, true},
};
inline constexpr ParamSpec kSpecVerifyParams[] = {
    {"temperature", PR::input, PT::real, true},
    {"step", PR::input, PT::integer, true},
    {"draft_logits", PR::input, PT::logits, false}, // needed when temperature > 0
    {"alpha", PR::input, PT::real, false},          // default 1
    {"top_k", PR::input, PT::integer, false},       // 0: no limit
    {"top_p", PR::input, PT::real, false},          // 1: no limit
    {"rule", PR::attribute, PT::text, false, "rejection,top_logits"}, // default rejection
    {"top_logits", PR::input, PT::integer, false},  // rule=top_logits
    {"verify_count", PR::input, PT::integer, false}, // default: every draft
    {"accepted", PR::result, PT::integer, true},
    {"token", PR::result, PT::integer, true},
};
inline constexpr ParamSpec kDropLogitsParams[] = {
    {"out", PR::result, PT::logits, true},
};
inline constexpr ParamSpec kForwardParams[] = {
    {"mode", PR::attribute, PT::text, true, "full,cached,window,append,extend"},
    {"count", PR::input, PT::integer, true},
    {"keep", PR::input, PT::integer, true},
    {"feed_end", PR::input, PT::integer, false}, // window
    {"row_begin", PR::input, PT::integer, true},
    {"row_end", PR::input, PT::integer, true},
    {"decoded", PR::attribute, PT::boolean, false}, // default true
    {"function", PR::attribute, PT::text, false},   // default: the artifact's default forward
    {"input", PR::input, PT::logits, false},
    {"first", PR::input, PT::integer, false},     // extend
    {"capture", PR::result, PT::logits, false},   // the captured rows of every fed token
};
inline constexpr ParamSpec kTakeRowsParams[] = {
    {"rows", PR::input, PT::integer, true},
    {"of", PR::inout, PT::logits, true},
};
inline constexpr ParamSpec kSampleParams[] = {
    {"kind", PR::attribute, PT::text, true, "gumbel_max,tempered"},
    {"temperature", PR::input, PT::real, true},
    {"excluded", PR::input, PT::integer, true}, // a token id no argmax picks; -1: none
    {"step", PR::input, PT::integer, true},
    {"candidates", PR::attribute, PT::text, true, "masked,all"},
    {"precision", PR::attribute, PT::text, false, kPrecisionChoices}, // tempered only; default f64
    {"token", PR::result, PT::tokens, false},     // gumbel_max
    {"confidence", PR::result, PT::reals, false}, // gumbel_max
    {"sample", PR::result, PT::tokens, false},    // tempered
    {"argmax", PR::result, PT::tokens, false},    // tempered
    {"entropy", PR::result, PT::reals, false},    // tempered
    {"top_k", PR::input, PT::integer, false},     // gumbel_max; 0: no limit
    {"top_p", PR::input, PT::real, false},        // gumbel_max; 1: no limit
};
inline constexpr ParamSpec kAcceptParams[] = {
    {"rule", PR::attribute, PT::text, true, "top_k,threshold,entropy_bound,hierarchical"},
    {"candidates", PR::attribute, PT::text, true, "masked,all"},
    {"score", PR::input, PT::reals, true},
    {"k", PR::input, PT::integer, false},      // top_k
    {"threshold", PR::input, PT::real, false}, // threshold, hierarchical
    {"bound", PR::input, PT::real, false},     // entropy_bound
    {"low_threshold", PR::input, PT::real, false}, // hierarchical
    {"depth", PR::input, PT::integer, false},      // hierarchical
    {"converge", PR::attribute, PT::text, false, "none,stable_confident"},
    // entropy_bound and stable_confident; default f64
    {"precision", PR::attribute, PT::text, false, kPrecisionChoices},
    {"argmax", PR::input, PT::tokens, false},     // stable_confident
    {"prev", PR::inout, PT::tokens, false},       // stable_confident
    {"run", PR::inout, PT::integer, false},       // stable_confident
    {"stability", PR::input, PT::integer, false}, // stable_confident
    {"confidence", PR::input, PT::real, false},   // stable_confident
    {"keep", PR::result, PT::flags, true},
    {"converged", PR::result, PT::boolean, false}, // stable_confident
};
inline constexpr ParamSpec kCreditParams[] = {
    {"credit", PR::inout, PT::credit, true},
    {"decay", PR::input, PT::real, true},
    {"gamma", PR::input, PT::real, true},
    {"alpha", PR::input, PT::real, true},
    {"candidates", PR::attribute, PT::text, true, "masked,all"},
};
inline constexpr ParamSpec kGateParams[] = {
    {"rule", PR::attribute, PT::text, true, "no_mask_left,converged_or_last"},
    {"keep", PR::inout, PT::flags, true},
    {"converged", PR::input, PT::boolean, false}, // converged_or_last
    {"last", PR::input, PT::boolean, false},      // converged_or_last
    {"sampled", PR::inout, PT::tokens, false},    // converged_or_last
    {"final", PR::input, PT::tokens, false},      // converged_or_last
    {"done", PR::result, PT::boolean, true},
};
inline constexpr ParamSpec kRenoiseParams[] = {
    {"noise", PR::input, PT::text, true, "mask,uniform"},
    {"candidates", PR::attribute, PT::text, true, "masked_only,every_rejected"},
    {"keep", PR::input, PT::flags, true},
    {"sampled", PR::input, PT::tokens, true},
    {"step", PR::input, PT::integer, true},
};
inline constexpr ParamSpec kCommitParams[] = {
    {"begin", PR::input, PT::integer, true},
    {"end", PR::input, PT::integer, true},
    {"index", PR::input, PT::integer, true},
    {"last", PR::input, PT::boolean, true},
    {"eos", PR::result, PT::boolean, true},
};
inline constexpr ParamSpec kBlockLoopParams[] = {
    {"count", PR::input, PT::integer, true},
    {"index", PR::result, PT::integer, true},
};
inline constexpr ParamSpec kDenoiseLoopParams[] = {
    {"cap", PR::input, PT::integer, true},
    {"bound", PR::input, PT::integer, true},
    {"base", PR::input, PT::integer, true},
    {"unroll", PR::attribute, PT::integer, false},
    {"index", PR::result, PT::integer, true},
    {"global", PR::result, PT::integer, true},
    {"ran", PR::result, PT::integer, true}, // written when the loop ends
};
inline constexpr ParamSpec kConditionParams[] = {
    {"cond", PR::input, PT::boolean, true},
};
inline constexpr ParamSpec kFinishParams[] = {
    {"steps", PR::input, PT::integer, true},
};

// clang-format on

struct KindSpec {
  std::string_view kind;
  const ParamSpec *params;
  size_t paramCount;
};

template <size_t N>
constexpr KindSpec kindSpec(std::string_view kind, const ParamSpec (&params)[N]) {
  return {kind, params, N};
}

inline constexpr KindSpec kKinds[] = {
    kindSpec(kKindKnob, kKnobParams),
    kindSpec(kKindSet, kSetParams),
    kindSpec(kKindAdd, kArithmeticParams),
    kindSpec(kKindSub, kArithmeticParams),
    kindSpec(kKindMul, kArithmeticParams),
    kindSpec(kKindDiv, kArithmeticParams),
    kindSpec(kKindRem, kArithmeticParams),
    kindSpec(kKindMin, kArithmeticParams),
    kindSpec(kKindMax, kArithmeticParams),
    kindSpec(kKindLt, kOrderParams),
    kindSpec(kKindLe, kOrderParams),
    kindSpec(kKindGt, kOrderParams),
    kindSpec(kKindGe, kOrderParams),
    kindSpec(kKindEq, kEqualityParams),
    kindSpec(kKindNe, kEqualityParams),
    kindSpec(kKindAnd, kLogicParams),
    kindSpec(kKindOr, kLogicParams),
    kindSpec(kKindNot, kNotParams),
    kindSpec(kKindSelect, kSelectParams),
    kindSpec(kKindToReal, kToRealParams),
    kindSpec(kKindDefined, kDefinedParams),
    kindSpec(kKindCheck, kCheckParams),
    kindSpec(kKindReserve, kReserveParams),
    kindSpec(kKindSeqExtend, kSeqExtendParams),
    kindSpec(kKindWindow, kWindowParams),
    kindSpec(kKindCountEq, kCountEqParams),
    kindSpec(kKindTransferSchedule, kTransferScheduleParams),
    kindSpec(kKindListAt, kListAtParams),
    kindSpec(kKindFillRow, kFillRowParams),
    kindSpec(kKindCreditReset, kCreditResetParams),
    kindSpec(kKindForward, kForwardParams),
    kindSpec(kKindHoldLogits, kHoldLogitsParams),
    kindSpec(kKindDropLogits, kDropLogitsParams),
    kindSpec(kKindTakeRows, kTakeRowsParams),
    kindSpec(kKindNarrowLogits, kNarrowLogitsParams),
    kindSpec(kKindSeqTruncate, kSeqTruncateParams),
    kindSpec(kKindSeqWrite, kSeqWriteParams),
    kindSpec(kKindKvTrim, kKvTrimParams),
    kindSpec(kKindSpecVerify, kSpecVerifyParams),
    kindSpec(kKindSample, kSampleParams),
    kindSpec(kKindAccept, kAcceptParams),
    kindSpec(kKindCredit, kCreditParams),
    kindSpec(kKindGate, kGateParams),
    kindSpec(kKindRenoise, kRenoiseParams),
    kindSpec(kKindCommit, kCommitParams),
    kindSpec(kKindBlockLoop, kBlockLoopParams),
    kindSpec(kKindDenoiseLoop, kDenoiseLoopParams),
    kindSpec(kKindUntil, kConditionParams),
    kindSpec(kKindExitIf, kConditionParams),
    kindSpec(kKindIf, kConditionParams),
    {kKindElse, nullptr, 0},
    {kKindEnd, nullptr, 0},
    kindSpec(kKindFinish, kFinishParams),
};

// The parameters a record needs when one of its attributes has a given value: `when` = `value`
// needs each of `needs` (comma-separated).
struct Requirement {
  std::string_view kind;
  std::string_view when;
  std::string_view value;
  std::string_view needs;
};

inline constexpr Requirement kRequirements[] = {
    {kKindForward, "mode", "window", "feed_end"},
    {kKindForward, "mode", "extend", "first"},
    {kKindSpecVerify, "rule", "top_logits", "top_logits"},
    {kKindSample, "kind", "gumbel_max", "token,confidence"},
    {kKindSample, "kind", "tempered", "sample,argmax,entropy"},
    {kKindAccept, "rule", "top_k", "k"},
    {kKindAccept, "rule", "threshold", "threshold"},
    {kKindAccept, "rule", "entropy_bound", "bound"},
    {kKindAccept, "rule", "hierarchical", "threshold,low_threshold,depth"},
    {kKindAccept, "converge", "stable_confident", "argmax,prev,run,stability,confidence,converged"},
    {kKindGate, "rule", "converged_or_last", "converged,last,sampled,final"},
};

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
  size_t start = 0;
  while (start <= choices.size()) {
    size_t end = choices.find(',', start);
    if (end == std::string_view::npos)
      end = choices.size();
    if (choices.substr(start, end - start) == value)
      return index;
    ++index;
    start = end + 1;
  }
  return -1;
}

// ---- Operand positions ------------------------------------------------------------------------
// A loaded record keeps one operand per parameter of its kind's table, in the table's order; the
// runtime reads them at these positions, and a literal attribute's value as these choice indices.
// (For `if`, `until` and `exit_if`, condition_params.)
namespace knob_params {
inline constexpr size_t kType = paramIndex(kKnobParams, "type");
inline constexpr size_t kDefault = paramIndex(kKnobParams, "default");
inline constexpr size_t kOptional = paramIndex(kKnobParams, "optional");
inline constexpr size_t kOneOf = paramIndex(kKnobParams, "one_of");
inline constexpr size_t kError = paramIndex(kKnobParams, "error");
inline constexpr size_t kMin = paramIndex(kKnobParams, "min");
inline constexpr size_t kMax = paramIndex(kKnobParams, "max");
} // namespace knob_params

// The index of f32 among kPrecisionChoices, for every kind's `precision`.
inline constexpr int kPrecisionF32 = choiceIndex(kPrecisionChoices, "f32");
static_assert(kPrecisionF32 >= 0);

// The `precision` attribute of the arithmetic records and to_real (the index differs).
namespace arithmetic_params {
inline constexpr size_t kPrecision = paramIndex(kArithmeticParams, "precision");
} // namespace arithmetic_params

namespace to_real_params {
inline constexpr size_t kPrecision = paramIndex(kToRealParams, "precision");
} // namespace to_real_params

namespace check_params {
inline constexpr size_t kCond = paramIndex(kCheckParams, "cond");
inline constexpr size_t kMessage = paramIndex(kCheckParams, "message");
inline constexpr size_t kArg0 = paramIndex(kCheckParams, "arg0");
} // namespace check_params

namespace reserve_params {
inline constexpr size_t kTokens = paramIndex(kReserveParams, "tokens");
inline constexpr size_t kRows = paramIndex(kReserveParams, "rows");
} // namespace reserve_params

namespace seq_extend_params {
inline constexpr size_t kCount = paramIndex(kSeqExtendParams, "count");
inline constexpr size_t kFill = paramIndex(kSeqExtendParams, "fill");
inline constexpr size_t kToken = paramIndex(kSeqExtendParams, "token");
inline constexpr size_t kStream = paramIndex(kSeqExtendParams, "stream");
inline constexpr size_t kStep = paramIndex(kSeqExtendParams, "step");
inline constexpr int kFillNoise = choiceIndex(kSeqExtendParams[kFill].choices, "noise");
static_assert(kFillNoise >= 0);
} // namespace seq_extend_params

namespace window_params {
inline constexpr size_t kBegin = paramIndex(kWindowParams, "begin");
inline constexpr size_t kEnd = paramIndex(kWindowParams, "end");
} // namespace window_params

namespace count_eq_params {
inline constexpr size_t kValue = paramIndex(kCountEqParams, "value");
inline constexpr size_t kOut = paramIndex(kCountEqParams, "out");
} // namespace count_eq_params

namespace transfer_schedule_params {
inline constexpr size_t kMasked = paramIndex(kTransferScheduleParams, "masked");
inline constexpr size_t kSteps = paramIndex(kTransferScheduleParams, "steps");
inline constexpr size_t kOut = paramIndex(kTransferScheduleParams, "out");
} // namespace transfer_schedule_params

namespace list_at_params {
inline constexpr size_t kList = paramIndex(kListAtParams, "list");
inline constexpr size_t kIndex = paramIndex(kListAtParams, "index");
inline constexpr size_t kDefault = paramIndex(kListAtParams, "default");
inline constexpr size_t kOut = paramIndex(kListAtParams, "out");
} // namespace list_at_params

namespace fill_row_params {
inline constexpr size_t kValue = paramIndex(kFillRowParams, "value");
inline constexpr size_t kOut = paramIndex(kFillRowParams, "out");
} // namespace fill_row_params

namespace credit_reset_params {
inline constexpr size_t kCapacity = paramIndex(kCreditResetParams, "capacity");
inline constexpr size_t kOut = paramIndex(kCreditResetParams, "out");
} // namespace credit_reset_params

namespace forward_params {
inline constexpr size_t kMode = paramIndex(kForwardParams, "mode");
inline constexpr size_t kCount = paramIndex(kForwardParams, "count");
inline constexpr size_t kKeep = paramIndex(kForwardParams, "keep");
inline constexpr size_t kFeedEnd = paramIndex(kForwardParams, "feed_end");
inline constexpr size_t kRowBegin = paramIndex(kForwardParams, "row_begin");
inline constexpr size_t kRowEnd = paramIndex(kForwardParams, "row_end");
inline constexpr size_t kDecoded = paramIndex(kForwardParams, "decoded");
inline constexpr int kModeFull = choiceIndex(kForwardParams[kMode].choices, "full");
static_assert(kModeFull >= 0);
inline constexpr int kModeCached = choiceIndex(kForwardParams[kMode].choices, "cached");
static_assert(kModeCached >= 0);
inline constexpr int kModeWindow = choiceIndex(kForwardParams[kMode].choices, "window");
static_assert(kModeWindow >= 0);
inline constexpr int kModeAppend = choiceIndex(kForwardParams[kMode].choices, "append");
static_assert(kModeAppend >= 0);
inline constexpr size_t kFunction = paramIndex(kForwardParams, "function");
inline constexpr size_t kInput = paramIndex(kForwardParams, "input");
inline constexpr size_t kFirst = paramIndex(kForwardParams, "first");
inline constexpr size_t kCapture = paramIndex(kForwardParams, "capture");
inline constexpr int kModeExtend = choiceIndex(kForwardParams[kMode].choices, "extend");
static_assert(kModeExtend >= 0);
} // namespace forward_params

namespace hold_logits_params {
inline constexpr size_t kTemperature = paramIndex(kHoldLogitsParams, "temperature");
inline constexpr size_t kOut = paramIndex(kHoldLogitsParams, "out");
} // namespace hold_logits_params

namespace take_rows_params {
inline constexpr size_t kRows = paramIndex(kTakeRowsParams, "rows");
inline constexpr size_t kOf = paramIndex(kTakeRowsParams, "of");
} // namespace take_rows_params

namespace drop_logits_params {
inline constexpr size_t kOut = paramIndex(kDropLogitsParams, "out");
} // namespace drop_logits_params

namespace narrow_logits_params {
inline constexpr size_t kBegin = paramIndex(kNarrowLogitsParams, "begin");
inline constexpr size_t kEnd = paramIndex(kNarrowLogitsParams, "end");
} // namespace narrow_logits_params

namespace seq_truncate_params {
inline constexpr size_t kLength = paramIndex(kSeqTruncateParams, "length");
} // namespace seq_truncate_params

namespace seq_write_params {
inline constexpr size_t kTokens = paramIndex(kSeqWriteParams, "tokens");
} // namespace seq_write_params

namespace kv_trim_params {
inline constexpr size_t kLength = paramIndex(kKvTrimParams, "length");
} // namespace kv_trim_params

namespace spec_verify_params {
inline constexpr size_t kTemperature = paramIndex(kSpecVerifyParams, "temperature");
inline constexpr size_t kStep = paramIndex(kSpecVerifyParams, "step");
inline constexpr size_t kDraftLogits = paramIndex(kSpecVerifyParams, "draft_logits");
inline constexpr size_t kAlpha = paramIndex(kSpecVerifyParams, "alpha");
inline constexpr size_t kTopK = paramIndex(kSpecVerifyParams, "top_k");
inline constexpr size_t kTopP = paramIndex(kSpecVerifyParams, "top_p");
inline constexpr size_t kRule = paramIndex(kSpecVerifyParams, "rule");
inline constexpr size_t kTopLogits = paramIndex(kSpecVerifyParams, "top_logits");
inline constexpr size_t kVerifyCount = paramIndex(kSpecVerifyParams, "verify_count");
inline constexpr int kRuleTopLogits = choiceIndex(kSpecVerifyParams[kRule].choices, "top_logits");
static_assert(kRuleTopLogits >= 0);
inline constexpr size_t kAccepted = paramIndex(kSpecVerifyParams, "accepted");
inline constexpr size_t kToken = paramIndex(kSpecVerifyParams, "token");
} // namespace spec_verify_params

namespace sample_params {
inline constexpr size_t kKind = paramIndex(kSampleParams, "kind");
inline constexpr size_t kTemperature = paramIndex(kSampleParams, "temperature");
inline constexpr size_t kExcluded = paramIndex(kSampleParams, "excluded");
inline constexpr size_t kStep = paramIndex(kSampleParams, "step");
inline constexpr size_t kCandidates = paramIndex(kSampleParams, "candidates");
inline constexpr size_t kToken = paramIndex(kSampleParams, "token");
inline constexpr size_t kConfidence = paramIndex(kSampleParams, "confidence");
inline constexpr size_t kSample = paramIndex(kSampleParams, "sample");
inline constexpr size_t kArgmax = paramIndex(kSampleParams, "argmax");
inline constexpr size_t kEntropy = paramIndex(kSampleParams, "entropy");
inline constexpr size_t kTopK = paramIndex(kSampleParams, "top_k");
inline constexpr size_t kTopP = paramIndex(kSampleParams, "top_p");
inline constexpr int kKindTempered = choiceIndex(kSampleParams[kKind].choices, "tempered");
static_assert(kKindTempered >= 0);
inline constexpr size_t kPrecision = paramIndex(kSampleParams, "precision");
inline constexpr int kCandidatesMasked = choiceIndex(kSampleParams[kCandidates].choices, "masked");
static_assert(kCandidatesMasked >= 0);
} // namespace sample_params

namespace accept_params {
inline constexpr size_t kRule = paramIndex(kAcceptParams, "rule");
inline constexpr size_t kCandidates = paramIndex(kAcceptParams, "candidates");
inline constexpr size_t kScore = paramIndex(kAcceptParams, "score");
inline constexpr size_t kTopK = paramIndex(kAcceptParams, "k");
inline constexpr size_t kThreshold = paramIndex(kAcceptParams, "threshold");
inline constexpr size_t kBound = paramIndex(kAcceptParams, "bound");
inline constexpr size_t kLowThreshold = paramIndex(kAcceptParams, "low_threshold");
inline constexpr size_t kDepth = paramIndex(kAcceptParams, "depth");
inline constexpr size_t kConverge = paramIndex(kAcceptParams, "converge");
inline constexpr size_t kArgmax = paramIndex(kAcceptParams, "argmax");
inline constexpr size_t kPrev = paramIndex(kAcceptParams, "prev");
inline constexpr size_t kRun = paramIndex(kAcceptParams, "run");
inline constexpr size_t kStability = paramIndex(kAcceptParams, "stability");
inline constexpr size_t kConfidence = paramIndex(kAcceptParams, "confidence");
inline constexpr size_t kKeep = paramIndex(kAcceptParams, "keep");
inline constexpr size_t kConverged = paramIndex(kAcceptParams, "converged");
inline constexpr int kRuleTopK = choiceIndex(kAcceptParams[kRule].choices, "top_k");
static_assert(kRuleTopK >= 0);
inline constexpr int kRuleThreshold = choiceIndex(kAcceptParams[kRule].choices, "threshold");
static_assert(kRuleThreshold >= 0);
inline constexpr int kRuleEntropyBound = choiceIndex(kAcceptParams[kRule].choices, "entropy_bound");
static_assert(kRuleEntropyBound >= 0);
inline constexpr int kRuleHierarchical = choiceIndex(kAcceptParams[kRule].choices, "hierarchical");
static_assert(kRuleHierarchical >= 0);
inline constexpr int kCandidatesMasked = choiceIndex(kAcceptParams[kCandidates].choices, "masked");
static_assert(kCandidatesMasked >= 0);
inline constexpr int kConvergeStableConfident =
    choiceIndex(kAcceptParams[kConverge].choices, "stable_confident");
static_assert(kConvergeStableConfident >= 0);
inline constexpr size_t kPrecision = paramIndex(kAcceptParams, "precision");
} // namespace accept_params

namespace credit_params {
inline constexpr size_t kCredit = paramIndex(kCreditParams, "credit");
inline constexpr size_t kDecay = paramIndex(kCreditParams, "decay");
inline constexpr size_t kGamma = paramIndex(kCreditParams, "gamma");
inline constexpr size_t kAlpha = paramIndex(kCreditParams, "alpha");
inline constexpr size_t kCandidates = paramIndex(kCreditParams, "candidates");
inline constexpr int kCandidatesMasked = choiceIndex(kCreditParams[kCandidates].choices, "masked");
static_assert(kCandidatesMasked >= 0);
} // namespace credit_params

namespace gate_params {
inline constexpr size_t kRule = paramIndex(kGateParams, "rule");
inline constexpr size_t kKeep = paramIndex(kGateParams, "keep");
inline constexpr size_t kConverged = paramIndex(kGateParams, "converged");
inline constexpr size_t kLast = paramIndex(kGateParams, "last");
inline constexpr size_t kSampled = paramIndex(kGateParams, "sampled");
inline constexpr size_t kFinal = paramIndex(kGateParams, "final");
inline constexpr size_t kDone = paramIndex(kGateParams, "done");
inline constexpr int kRuleNoMaskLeft = choiceIndex(kGateParams[kRule].choices, "no_mask_left");
static_assert(kRuleNoMaskLeft >= 0);
} // namespace gate_params

namespace renoise_params {
inline constexpr size_t kNoise = paramIndex(kRenoiseParams, "noise");
inline constexpr size_t kCandidates = paramIndex(kRenoiseParams, "candidates");
inline constexpr size_t kKeep = paramIndex(kRenoiseParams, "keep");
inline constexpr size_t kSampled = paramIndex(kRenoiseParams, "sampled");
inline constexpr size_t kStep = paramIndex(kRenoiseParams, "step");
inline constexpr int kNoiseUniform = choiceIndex(kRenoiseParams[kNoise].choices, "uniform");
static_assert(kNoiseUniform >= 0);
inline constexpr int kCandidatesMaskedOnly =
    choiceIndex(kRenoiseParams[kCandidates].choices, "masked_only");
static_assert(kCandidatesMaskedOnly >= 0);
} // namespace renoise_params

namespace commit_params {
inline constexpr size_t kBegin = paramIndex(kCommitParams, "begin");
inline constexpr size_t kEnd = paramIndex(kCommitParams, "end");
inline constexpr size_t kIndex = paramIndex(kCommitParams, "index");
inline constexpr size_t kLast = paramIndex(kCommitParams, "last");
inline constexpr size_t kEos = paramIndex(kCommitParams, "eos");
} // namespace commit_params

namespace block_loop_params {
inline constexpr size_t kCount = paramIndex(kBlockLoopParams, "count");
inline constexpr size_t kIndex = paramIndex(kBlockLoopParams, "index");
} // namespace block_loop_params

namespace denoise_loop_params {
inline constexpr size_t kCap = paramIndex(kDenoiseLoopParams, "cap");
inline constexpr size_t kBound = paramIndex(kDenoiseLoopParams, "bound");
inline constexpr size_t kBase = paramIndex(kDenoiseLoopParams, "base");
inline constexpr size_t kIndex = paramIndex(kDenoiseLoopParams, "index");
inline constexpr size_t kGlobal = paramIndex(kDenoiseLoopParams, "global");
inline constexpr size_t kRan = paramIndex(kDenoiseLoopParams, "ran");
} // namespace denoise_loop_params

namespace condition_params {
inline constexpr size_t kCond = paramIndex(kConditionParams, "cond");
} // namespace condition_params

namespace finish_params {
inline constexpr size_t kSteps = paramIndex(kFinishParams, "steps");
} // namespace finish_params
} // namespace dlm::spec::decode
