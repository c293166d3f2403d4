// Verifiers and the custom assembly of the dlm ops. Each verifier rule has an invalid-IR test in
// tests/lit/dialect/invalid.mlir.
#include "compiler/dialects/dlm/DlmDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"

#include <cmath>
#include <sstream>

using namespace mlir;
using namespace dlm::ir;

namespace {

// The longest denoise loop a program may ask for; real samplers use at most a few hundred steps.
constexpr int64_t kMaxDiffusionSteps = 65536;
// The longest stability window (steps the argmax canvas must stay unchanged).
constexpr int64_t kMaxStabilitySteps = 1024;

bool isStatic(int64_t d) { return !ShapedType::isDynamic(d); }
// Two dimensions agree unless both are known and differ.
bool dimsAgree(int64_t a, int64_t b) { return !isStatic(a) || !isStatic(b) || a == b; }

// Shortest decimal form (0.5, not 5.000000e-01), so messages quote numbers as written.
std::string number(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

RankedTensorType tensorType(Value v) { return cast<RankedTensorType>(v.getType()); }

LogicalResult expectRank(Operation *op, Value v, int64_t rank, StringRef what) {
  int64_t actual = tensorType(v).getRank();
  if (actual != rank)
    return op->emitOpError() << what << " must have rank " << rank << ", got rank " << actual;
  return success();
}

LogicalResult expectDim(Operation *op, int64_t actual, int64_t expected, StringRef what) {
  if (!dimsAgree(actual, expected))
    return op->emitOpError() << what << " is " << actual << ", expected " << expected;
  return success();
}

LogicalResult verifyModelSymbol(Operation *op, FlatSymbolRefAttr model,
                                SymbolTableCollection &symbolTable) {
  auto fn = symbolTable.lookupNearestSymbolFrom<func::FuncOp>(op, model);
  if (!fn)
    return op->emitOpError() << "model function " << model << " is not a func.func in scope";
  return success();
}

} // namespace

//===----------------------------------------------------------------------===//
// MaskedAttentionOp
//===----------------------------------------------------------------------===//

LogicalResult MaskedAttentionOp::verify() {
  Operation *op = getOperation();
  bool paged = static_cast<bool>(getBlockTable());
  int64_t kvRank = paged ? 4 : 3;
  if (failed(expectRank(op, getQuery(), 3, "query")) ||
      failed(expectRank(op, getKey(), kvRank, paged ? "paged key pool" : "key")) ||
      failed(expectRank(op, getValue(), kvRank, paged ? "paged value pool" : "value")) ||
      failed(expectRank(op, getResult(), 3, "result")))
    return failure();

  auto q = tensorType(getQuery()).getShape();
  auto k = tensorType(getKey()).getShape();
  auto v = tensorType(getValue()).getShape();
  int64_t s = q[0], qHeads = q[1], headDim = q[2];
  // Dense: [T, Hkv, D]; paged: [pages, page_size, Hkv, D].
  int64_t kvHeads = k[kvRank - 2], keyDim = k[kvRank - 1], valueDim = v[kvRank - 1];
  for (int64_t i = 0; i + 1 < kvRank; ++i)
    if (!dimsAgree(k[i], v[i]))
      return emitOpError() << "key and value shapes differ in dimension " << i << " (" << k[i]
                           << " vs " << v[i] << ")";
  if (failed(expectDim(op, keyDim, headDim, "key head_dim")))
    return failure();
  if (isStatic(qHeads) && isStatic(kvHeads) && (kvHeads == 0 || qHeads % kvHeads != 0))
    return emitOpError() << "query heads (" << qHeads << ") must be a multiple of kv heads ("
                         << kvHeads << ")";
  auto r = tensorType(getResult()).getShape();
  if (failed(expectDim(op, r[0], s, "result length")) ||
      failed(expectDim(op, r[1], qHeads, "result heads")) ||
      failed(expectDim(op, r[2], valueDim, "result head_dim")))
    return failure();

  int64_t keyCount = paged ? ShapedType::kDynamic : k[0];
  if (getQueryPositions()) {
    if (failed(expectRank(op, getQueryPositions(), 1, "query positions")) ||
        failed(expectRank(op, getKeyPositions(), 1, "key positions")) ||
        failed(expectDim(op, tensorType(getQueryPositions()).getDimSize(0), s,
                         "query positions length")))
      return failure();
    if (!paged && failed(expectDim(op, tensorType(getKeyPositions()).getDimSize(0), keyCount,
                                   "key positions length")))
      return failure();
  } else if (paged) {
    return emitOpError("paged attention needs positions(query, key) to know the key count");
  } else if (isStatic(s) && isStatic(keyCount) && s > keyCount) {
    return emitOpError() << "without positions the " << s
                         << " queries must be the last keys, but there are only " << keyCount
                         << " keys";
  }
  if (paged && failed(expectRank(op, getBlockTable(), 1, "block table")))
    return failure();

  MaskKind kind = getMask();
  bool sliding = kind == MaskKind::sliding_window || kind == MaskKind::sliding_window_symmetric ||
                 kind == MaskKind::prefix_window;
  if (sliding) {
    if (!getWindow())
      return emitOpError() << "mask " << stringifyMaskKind(kind) << " needs a window";
    if (getWindowAttr().getInt() <= 0)
      return emitOpError() << "window must be positive, got " << getWindowAttr().getInt();
  } else if (getWindow()) {
    return emitOpError() << "window is only meaningful for sliding-window masks, not "
                         << stringifyMaskKind(kind);
  }
  if (kind == MaskKind::block_causal) {
    if (!getBlockSize())
      return emitOpError("mask block_causal needs a block_size");
    if (getBlockSizeAttr().getInt() <= 0)
      return emitOpError() << "block_size must be positive, got "
                           << getBlockSizeAttr().getInt();
  } else if (getBlockSize()) {
    return emitOpError() << "block_size is only meaningful for block_causal masks, not "
                         << stringifyMaskKind(kind);
  }
  if (auto scale = getScale()) {
    double value = scale->convertToDouble();
    if (!(value > 0.0) || !std::isfinite(value))
      return emitOpError() << "scale must be positive and finite, got " << number(value);
  }
  return success();
}

//===----------------------------------------------------------------------===//
// DenoiseStepOp
//===----------------------------------------------------------------------===//

LogicalResult DenoiseStepOp::verify() {
  Operation *op = getOperation();
  if (failed(expectRank(op, getCanvas(), 1, "canvas")) ||
      failed(expectRank(op, getLogits(), 2, "logits")))
    return failure();
  int64_t canvas = tensorType(getCanvas()).getDimSize(0);
  if (failed(expectDim(op, tensorType(getLogits()).getDimSize(0), canvas, "logits rows")))
    return failure();
  if (Value sc = getSelfConditioning()) {
    if (failed(expectRank(op, sc, 2, "self-conditioning input")) ||
        failed(expectDim(op, tensorType(sc).getDimSize(0), canvas, "self-conditioning rows")))
      return failure();
  }
  return success();
}

LogicalResult DenoiseStepOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyModelSymbol(getOperation(), getModelAttr(), symbolTable);
}

//===----------------------------------------------------------------------===//
// EntropyAcceptOp
//===----------------------------------------------------------------------===//

LogicalResult EntropyAcceptOp::verify() {
  Operation *op = getOperation();
  if (failed(expectRank(op, getLogits(), 2, "logits")))
    return failure();
  int64_t canvas = tensorType(getLogits()).getDimSize(0);
  int64_t vocab = tensorType(getLogits()).getDimSize(1);
  for (auto [value, what] : {std::pair<Value, StringRef>{getCanvas(), "canvas"},
                             {getPreviousArgmax(), "previous argmax"},
                             {getNextCanvas(), "next canvas"},
                             {getKeep(), "keep mask"},
                             {getArgmax(), "argmax"}}) {
    if (failed(expectRank(op, value, 1, what)) ||
        failed(expectDim(op, tensorType(value).getDimSize(0), canvas,
                         (Twine(what) + " length").str())))
      return failure();
  }

  AcceptRule rule = getRule();
  StringRef ruleName = stringifyAcceptRule(rule);
  auto forbid = [&](bool present, StringRef attr) -> LogicalResult {
    if (present)
      return emitOpError() << attr << " is not a parameter of rule " << ruleName;
    return success();
  };
  switch (rule) {
  case AcceptRule::entropy_bound: {
    if (!getBound())
      return emitOpError("rule entropy_bound needs an entropy bound");
    double bound = getBound()->convertToDouble();
    if (!(bound > 0.0) || !std::isfinite(bound))
      return emitOpError() << "entropy bound must be positive and finite, got " << number(bound);
    if (failed(forbid(getThreshold().has_value(), "threshold")) ||
        failed(forbid(getK().has_value(), "k")))
      return failure();
    break;
  }
  case AcceptRule::confidence_threshold: {
    if (!getThreshold())
      return emitOpError("rule confidence_threshold needs a threshold");
    double threshold = getThreshold()->convertToDouble();
    if (!(threshold > 0.0 && threshold <= 1.0))
      return emitOpError() << "threshold must be in (0, 1], got " << number(threshold);
    if (failed(forbid(getBound().has_value(), "bound")) ||
        failed(forbid(getK().has_value(), "k")))
      return failure();
    break;
  }
  case AcceptRule::top_k_schedule: {
    if (!getK() || !getScheduleSteps())
      return emitOpError("rule top_k_schedule needs k and schedule_steps");
    int64_t k = getKAttr().getInt();
    if (k < 1 || (isStatic(canvas) && k > canvas))
      return emitOpError() << "k must be in [1, canvas length " << canvas << "], got " << k;
    int64_t steps = getScheduleStepsAttr().getInt();
    if (steps < 1 || steps > kMaxDiffusionSteps)
      return emitOpError() << "schedule_steps must be in [1, " << kMaxDiffusionSteps << "], got "
                           << steps;
    if (failed(forbid(getBound().has_value(), "bound")) ||
        failed(forbid(getThreshold().has_value(), "threshold")))
      return failure();
    break;
  }
  }
  if (rule == AcceptRule::entropy_bound && getScheduleSteps())
    return emitOpError() << "schedule_steps is not a parameter of rule " << ruleName;
  if (rule == AcceptRule::confidence_threshold && getScheduleSteps() &&
      (getScheduleStepsAttr().getInt() < 1 ||
       getScheduleStepsAttr().getInt() > kMaxDiffusionSteps))
    return emitOpError() << "schedule_steps must be in [1, " << kMaxDiffusionSteps << "], got "
                         << getScheduleStepsAttr().getInt();

  // Mask-absorbing rules choose among masked positions, and mask renoising writes the mask token:
  // both need to know which id it is.
  bool needsMaskToken =
      rule != AcceptRule::entropy_bound || getRenoise() == RenoiseKind::mask_token;
  if (needsMaskToken && !getMaskTokenId())
    return emitOpError() << "rule " << ruleName << " with renoise "
                         << stringifyRenoiseKind(getRenoise()) << " needs mask_token_id";
  if (IntegerAttr idAttr = getMaskTokenIdAttr()) {
    int64_t id = idAttr.getInt();
    if (id < 0 || (isStatic(vocab) && id >= vocab))
      return emitOpError() << "mask_token_id " << id << " is outside the vocabulary [0, "
                           << vocab << ")";
  }
  int64_t stability = getStabilityAttr().getInt();
  if (stability < 0 || stability > kMaxStabilitySteps)
    return emitOpError() << "stability must be in [0, " << kMaxStabilitySteps << "], got "
                         << stability;
  double confidence = getConfidence().convertToDouble();
  if (!(confidence >= 0.0) || !std::isfinite(confidence))
    return emitOpError() << "confidence bound must be non-negative and finite, got "
                         << number(confidence);
  return success();
}

//===----------------------------------------------------------------------===//
// SpecVerifyOp
//===----------------------------------------------------------------------===//

LogicalResult SpecVerifyOp::verify() {
  Operation *op = getOperation();
  if (failed(expectRank(op, getDraft(), 1, "draft")) ||
      failed(expectRank(op, getTargetLogits(), 2, "target logits")) ||
      failed(expectRank(op, getTokens(), 1, "tokens")))
    return failure();
  int64_t drafted = tensorType(getDraft()).getDimSize(0);
  int64_t rows = tensorType(getTargetLogits()).getDimSize(0);
  int64_t vocab = tensorType(getTargetLogits()).getDimSize(1);
  if (isStatic(drafted) && isStatic(rows) && rows != drafted + 1)
    return emitOpError() << "mismatched draft/target lengths: " << drafted
                         << " drafted tokens need " << drafted + 1 << " target rows, got "
                         << rows;
  if (isStatic(drafted) &&
      failed(expectDim(op, tensorType(getTokens()).getDimSize(0), drafted + 1, "tokens length")))
    return failure();
  bool rejection = getMode() == VerifyMode::rejection;
  if (rejection && !getDraftProbs())
    return emitOpError("rejection verification needs the draft distributions (draft_probs)");
  if (!rejection && getDraftProbs())
    return emitOpError("greedy verification takes no draft distributions");
  if (Value q = getDraftProbs()) {
    if (failed(expectRank(op, q, 2, "draft distributions")) ||
        failed(expectDim(op, tensorType(q).getDimSize(0), drafted, "draft distribution rows")) ||
        failed(expectDim(op, tensorType(q).getDimSize(1), vocab, "draft distribution vocab")))
      return failure();
  }
  return success();
}

//===----------------------------------------------------------------------===//
// KVCommitOp
//===----------------------------------------------------------------------===//

LogicalResult KVCommitOp::verify() {
  return expectRank(getOperation(), getTokens(), 1, "tokens");
}

LogicalResult KVCommitOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyModelSymbol(getOperation(), getModelAttr(), symbolTable);
}

//===----------------------------------------------------------------------===//
// DiffusionLoopOp
//===----------------------------------------------------------------------===//

void DiffusionLoopOp::build(OpBuilder &builder, OperationState &state, ValueRange inits,
                            int64_t maxSteps) {
  state.addOperands(inits);
  state.addAttribute(getMaxStepsAttrName(state.name), builder.getI64IntegerAttr(maxSteps));
  for (Value init : inits)
    state.addTypes(init.getType());
  state.addTypes(builder.getIndexType());
  Region *body = state.addRegion();
  Block *block = new Block();
  body->push_back(block);
  block->addArgument(builder.getIndexType(), state.location);
  for (Value init : inits)
    block->addArgument(init.getType(), init.getLoc());
}

YieldOp DiffusionLoopOp::getYield() { return cast<YieldOp>(getBodyBlock().getTerminator()); }

LogicalResult DiffusionLoopOp::verify() {
  int64_t maxSteps = getStepCap();
  if (maxSteps < 0 || maxSteps > kMaxDiffusionSteps)
    return emitOpError() << "max_steps must be in [0, " << kMaxDiffusionSteps << "], got "
                         << maxSteps;
  Block &body = getBodyBlock();
  if (body.getNumArguments() != getInits().size() + 1)
    return emitOpError() << "body must take the step and " << getInits().size()
                         << " carried values, takes " << body.getNumArguments() << " arguments";
  if (!body.getArgument(0).getType().isIndex())
    return emitOpError("the first body argument (the step) must be an index");
  if (getResults().size() != getInits().size())
    return emitOpError() << "expected " << getInits().size() << " carried results, got "
                         << getResults().size();
  for (auto [i, init] : llvm::enumerate(getInits())) {
    if (body.getArgument(i + 1).getType() != init.getType())
      return emitOpError() << "carried value #" << i << " has type " << init.getType()
                           << " but the body argument has type "
                           << body.getArgument(i + 1).getType();
    if (getResults()[i].getType() != init.getType())
      return emitOpError() << "result #" << i << " has type " << getResults()[i].getType()
                           << " but carried value #" << i << " has type " << init.getType();
  }
  auto yield = dyn_cast_or_null<YieldOp>(body.empty() ? nullptr : &body.back());
  if (!yield)
    return emitOpError("body must end with dlm.yield");
  if (yield.getValues().size() != getInits().size())
    return emitOpError() << "dlm.yield gives " << yield.getValues().size()
                         << " carried values, expected " << getInits().size();
  for (auto [i, value] : llvm::enumerate(yield.getValues()))
    if (value.getType() != getInits()[i].getType())
      return emitOpError() << "dlm.yield value #" << i << " has type " << value.getType()
                           << ", expected " << getInits()[i].getType();
  return success();
}

// dlm.diffusion_loop max_steps N step(%s) [iter_args(%a = %init, ...) : types] [attributes {}]
//   { body }
ParseResult DiffusionLoopOp::parse(OpAsmParser &parser, OperationState &result) {
  Builder &builder = parser.getBuilder();
  int64_t maxSteps;
  OpAsmParser::Argument step;
  if (parser.parseKeyword("max_steps") || parser.parseInteger(maxSteps) ||
      parser.parseKeyword("step") || parser.parseLParen() || parser.parseArgument(step) ||
      parser.parseRParen())
    return failure();
  step.type = builder.getIndexType();
  result.addAttribute("max_steps", builder.getI64IntegerAttr(maxSteps));

  SmallVector<OpAsmParser::Argument> arguments{step};
  SmallVector<OpAsmParser::UnresolvedOperand> inits;
  SmallVector<Type> types;
  if (succeeded(parser.parseOptionalKeyword("iter_args"))) {
    if (parser.parseAssignmentList(arguments, inits) || parser.parseColonTypeList(types))
      return failure();
    if (types.size() != inits.size())
      return parser.emitError(parser.getNameLoc())
             << "iter_args lists " << inits.size() << " values but " << types.size() << " types";
  }
  for (auto [argument, type] : llvm::zip(llvm::drop_begin(arguments), types))
    argument.type = type;
  if (parser.resolveOperands(inits, types, parser.getNameLoc(), result.operands) ||
      parser.parseOptionalAttrDictWithKeyword(result.attributes))
    return failure();
  result.addTypes(types);
  result.addTypes(builder.getIndexType());
  Region *body = result.addRegion();
  return parser.parseRegion(*body, arguments);
}

void DiffusionLoopOp::print(OpAsmPrinter &p) {
  p << " max_steps " << getStepCap() << " step(" << getStepArgument() << ")";
  if (!getInits().empty()) {
    p << " iter_args(";
    llvm::interleaveComma(llvm::zip(getCarriedArguments(), getInits()), p, [&](auto pair) {
      p << std::get<0>(pair) << " = " << std::get<1>(pair);
    });
    p << ") : " << getInits().getTypes();
  }
  p.printOptionalAttrDictWithKeyword((*this)->getAttrs(), {getMaxStepsAttrName()});
  p << ' ';
  p.printRegion(getBody(), /*printEntryBlockArgs=*/false, /*printBlockTerminators=*/true);
}

//===----------------------------------------------------------------------===//
// Coarse model ops
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::verify() {
  Operation *op = getOperation();
  if (failed(expectRank(op, getIds(), 1, "ids")) ||
      failed(expectRank(op, getTable(), 2, "embedding table")) ||
      failed(expectRank(op, getResult(), 2, "result")))
    return failure();
  auto r = tensorType(getResult()).getShape();
  if (failed(expectDim(op, r[0], tensorType(getIds()).getDimSize(0), "result rows")) ||
      failed(expectDim(op, r[1], tensorType(getTable()).getDimSize(1), "result width")))
    return failure();
  if (!std::isfinite(getScale().convertToDouble()))
    return emitOpError("scale must be finite");
  return success();
}

// x [S, K] times weight [N, K] transposed, plus bias [N]: the shape rules of dlm.linear and
// dlm.norm_linear.
static LogicalResult verifyLinearShapes(Operation *op, Value input, Value weight, Value bias,
                                        Value result) {
  if (failed(expectRank(op, input, 2, "input")) ||
      failed(expectRank(op, weight, 2, "weight")) ||
      failed(expectRank(op, result, 2, "result")))
    return failure();
  auto x = tensorType(input).getShape();
  auto w = tensorType(weight).getShape();
  auto r = tensorType(result).getShape();
  if (failed(expectDim(op, w[1], x[1], "weight input width")) ||
      failed(expectDim(op, r[0], x[0], "result rows")) ||
      failed(expectDim(op, r[1], w[0], "result width")))
    return failure();
  if (bias && (failed(expectRank(op, bias, 1, "bias")) ||
               failed(expectDim(op, tensorType(bias).getDimSize(0), w[0], "bias length"))))
    return failure();
  return success();
}

LogicalResult LinearOp::verify() {
  return verifyLinearShapes(getOperation(), getInput(), getWeight(), getBias(), getResult());
}

LogicalResult NormLinearOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyLinearShapes(op, getInput(), getWeight(), getBias(), getResult())) ||
      failed(expectRank(op, getNormWeight(), 1, "norm weight")) ||
      failed(expectDim(op, tensorType(getNormWeight()).getDimSize(0),
                       tensorType(getInput()).getDimSize(1), "norm weight length")))
    return failure();
  double eps = getEps().convertToDouble();
  if (!(eps > 0.0 && eps < 1.0))
    return emitOpError() << "eps must be in (0, 1), got " << number(eps);
  return success();
}

LogicalResult RMSNormOp::verify() {
  Operation *op = getOperation();
  auto x = tensorType(getInput());
  if (x.getRank() < 1)
    return emitOpError("input must have rank >= 1");
  if (getWeight() &&
      (failed(expectRank(op, getWeight(), 1, "weight")) ||
       failed(expectDim(op, tensorType(getWeight()).getDimSize(0), x.getShape().back(),
                        "weight length"))))
    return failure();
  if (tensorType(getResult()).getShape() != x.getShape())
    return emitOpError("result shape must equal the input shape");
  double eps = getEps().convertToDouble();
  if (!(eps > 0.0 && eps < 1.0))
    return emitOpError() << "eps must be in (0, 1), got " << number(eps);
  return success();
}

LogicalResult RoPEOp::verify() {
  Operation *op = getOperation();
  if (failed(expectRank(op, getInput(), 3, "input")) ||
      failed(expectRank(op, getPositions(), 1, "positions")))
    return failure();
  auto x = tensorType(getInput()).getShape();
  if (failed(expectDim(op, tensorType(getPositions()).getDimSize(0), x[0], "positions length")))
    return failure();
  if (tensorType(getResult()).getShape() != x)
    return emitOpError("result shape must equal the input shape");
  int64_t headDim = x[2];
  if (isStatic(headDim) && headDim % 2 != 0)
    return emitOpError() << "head_dim must be even for rotary pairs, got " << headDim;
  double theta = getTheta().convertToDouble();
  if (!(theta > 1.0) || !std::isfinite(theta))
    return emitOpError() << "theta must be finite and greater than 1, got " << number(theta);
  if (IntegerAttr rotaryAttr = getRotaryDimAttr()) {
    int64_t rotary = rotaryAttr.getInt();
    if (rotary <= 0 || rotary % 2 != 0 || (isStatic(headDim) && rotary > headDim))
      return emitOpError() << "rotary_dim must be even and in (0, head_dim " << headDim
                           << "], got " << rotary;
  }
  if (IntegerAttr pairsAttr = getRotatedPairsAttr()) {
    if (getRotaryDimAttr())
      return emitOpError("rotary_dim and rotated_pairs exclude each other");
    int64_t pairs = pairsAttr.getInt();
    if (pairs < 0 || (isStatic(headDim) && pairs > headDim / 2))
      return emitOpError() << "rotated_pairs must be in [0, head_dim / 2 = " << headDim / 2
                           << "], got " << pairs;
  }
  return success();
}

LogicalResult GatedMLPOp::verify() {
  Operation *op = getOperation();
  for (auto [value, what] : {std::pair<Value, StringRef>{getInput(), "input"},
                             {getGate(), "gate weight"},
                             {getUp(), "up weight"},
                             {getDown(), "down weight"},
                             {getResult(), "result"}})
    if (failed(expectRank(op, value, 2, what)))
      return failure();
  auto x = tensorType(getInput()).getShape();
  auto gate = tensorType(getGate()).getShape();
  auto up = tensorType(getUp()).getShape();
  auto down = tensorType(getDown()).getShape();
  if (failed(expectDim(op, gate[1], x[1], "gate weight input width")) ||
      failed(expectDim(op, up[0], gate[0], "up weight rows")) ||
      failed(expectDim(op, up[1], x[1], "up weight input width")) ||
      failed(expectDim(op, down[1], gate[0], "down weight input width")) ||
      failed(expectDim(op, down[0], x[1], "down weight rows")))
    return failure();
  if (tensorType(getResult()).getShape() != x)
    return emitOpError("result shape must equal the input shape");
  return success();
}

LogicalResult LMHeadOp::verify() {
  Operation *op = getOperation();
  if (failed(expectRank(op, getInput(), 2, "input")) ||
      failed(expectRank(op, getWeight(), 2, "weight")) ||
      failed(expectRank(op, getResult(), 2, "result")))
    return failure();
  auto x = tensorType(getInput()).getShape();
  auto w = tensorType(getWeight()).getShape();
  auto r = tensorType(getResult()).getShape();
  if (failed(expectDim(op, w[1], x[1], "weight input width")) ||
      failed(expectDim(op, r[0], x[0], "result rows")))
    return failure();
  if (isStatic(r[1]) && isStatic(w[0]) && r[1] > w[0])
    return emitOpError() << "vocabulary (" << r[1] << ") exceeds the weight rows (" << w[0]
                         << ")";
  if (auto softcap = getSoftcap()) {
    double c = softcap->convertToDouble();
    if (!(c > 0.0) || !std::isfinite(c))
      return emitOpError() << "softcap must be positive and finite, got " << number(c);
  }
  return success();
}

//===----------------------------------------------------------------------===//
// ScaleOp, SoftEmbeddingOp, MoEOp
//===----------------------------------------------------------------------===//

LogicalResult ScaleOp::verify() {
  auto factor = tensorType(getFactor());
  if (factor.getRank() != 1 || factor.getDimSize(0) != 1)
    return emitOpError("factor must be a one-element vector, got ") << factor;
  return success();
}

LogicalResult SoftEmbeddingOp::verify() {
  Operation *op = getOperation();
  if (failed(expectRank(op, getLogits(), 2, "logits")) ||
      failed(expectRank(op, getTable(), 2, "table")) ||
      failed(expectRank(op, getResult(), 2, "result")))
    return failure();
  auto l = tensorType(getLogits()).getShape(), t = tensorType(getTable()).getShape(),
       r = tensorType(getResult()).getShape();
  if (isStatic(l[1]) && isStatic(t[0]) && l[1] > t[0])
    return emitOpError() << "logits over " << l[1] << " tokens need a table of at least that "
                         << "many rows, got " << t[0];
  if (failed(expectDim(op, r[0], l[0], "result rows")) ||
      failed(expectDim(op, r[1], t[1], "result width")))
    return failure();
  double scale = getScale().convertToDouble();
  if (!std::isfinite(scale))
    return emitOpError() << "scale must be finite, got " << number(scale);
  if (IntegerAttr maskToken = getMaskTokenAttr()) {
    const int64_t mask = maskToken.getInt();
    if (mask < 0 || (isStatic(t[0]) && mask >= t[0]))
      return emitOpError() << "mask_token " << mask << " is not a row of the table";
  }
  return success();
}

LogicalResult MoEOp::verify() {
  Operation *op = getOperation();
  if (failed(expectRank(op, getRouterInput(), 2, "router input")) ||
      failed(expectRank(op, getInput(), 2, "input")) ||
      failed(expectRank(op, getRouter(), 2, "router")) ||
      failed(expectRank(op, getGateUp(), 3, "gate_up")) ||
      failed(expectRank(op, getDown(), 3, "down")))
    return failure();
  auto x = tensorType(getInput()).getShape(), router = tensorType(getRouter()).getShape(),
       gateUp = tensorType(getGateUp()).getShape(), down = tensorType(getDown()).getShape();
  const int64_t hidden = x[1], experts = router[0];
  if (tensorType(getRouterInput()).getShape() != x || tensorType(getResult()).getShape() != x)
    return emitOpError("router input, input and result must have one shape");
  // An optional scale of rank 1 and the given length.
  auto checkScale = [&](Value scale, int64_t length, StringRef what) -> LogicalResult {
    if (!scale)
      return success();
    if (failed(expectRank(op, scale, 1, what)))
      return failure();
    return expectDim(op, tensorType(scale).getDimSize(0), length, (what + " length").str());
  };
  if (failed(expectDim(op, router[1], hidden, "router width")) ||
      failed(checkScale(getRouterScale(), hidden, "router scale")) ||
      failed(checkScale(getExpertScale(), experts, "expert scale")) ||
      failed(checkScale(getExpertBias(), experts, "expert bias")) ||
      failed(expectDim(op, gateUp[0], experts, "gate_up experts")) ||
      failed(expectDim(op, gateUp[2], hidden, "gate_up width")) ||
      failed(expectDim(op, down[0], experts, "down experts")) ||
      failed(expectDim(op, down[1], hidden, "down rows")) ||
      failed(expectDim(op, gateUp[1], 2 * down[2], "gate_up rows (twice down's width)")))
    return failure();
  int64_t topK = getTopK();
  if (topK < 1 || (isStatic(experts) && topK > experts))
    return emitOpError() << "top_k must be in [1, " << experts << "], got " << topK;
  const int64_t groups = getGroups(), topGroups = getTopGroups();
  if (groups < 1 ||
      (isStatic(experts) && (experts % groups != 0 || (groups > 1 && experts / groups < 2))))
    return emitOpError() << "groups " << groups << " do not split " << experts
                         << " experts into groups of two or more";
  if (topGroups < 1 || topGroups > groups ||
      (isStatic(experts) && topK > topGroups * (experts / groups)))
    return emitOpError() << "top_groups " << topGroups << " is outside [1, " << groups
                         << "] or holds fewer than top_k " << topK << " experts";
  if (groups > 1 && (!getSigmoidScores() || !getExpertBias()))
    return emitOpError("group-limited routing is LLaDA2's: sigmoid_scores and an expert_bias");
  const double routed = getRoutedScale().convertToDouble();
  if (!(routed > 0.0) || !std::isfinite(routed))
    return emitOpError() << "routed_scale must be positive and finite, got " << number(routed);
  double scale = getRouterInputScale().convertToDouble();
  if (!(scale > 0.0) || !std::isfinite(scale))
    return emitOpError() << "router_input_scale must be positive and finite, got "
                         << number(scale);
  std::optional<llvm::APFloat> eps = getEps();
  if (!eps)
    return getRouterScale() || scale != 1.0
               ? emitOpError("router_scale and router_input_scale scale the normed router "
                             "input: they need eps (the router norm's)")
               : success();
  if (!(eps->convertToDouble() > 0.0 && eps->convertToDouble() < 1.0))
    return emitOpError() << "eps must be in (0, 1), got " << number(eps->convertToDouble());
  return success();
}

#define GET_OP_CLASSES
#include "compiler/dialects/dlm/DlmOps.cpp.inc"
