// Raising patterns for the attention block: NeoX rotary embeddings from cos/sin tables, and
// scaled dot-product attention (heads-first MatMuls, GQA by repetition, optional causal mask).
#include "compiler/dialects/dlm/DlmDialect.h"
#include "importer/onnx/MechanicalImport.h"
#include "importer/onnx/Raising.h"
#include "importer/onnx/ShapeFolding.h"

#include <cmath>

namespace dlm::importer::onnx {
namespace {

using namespace mlir;

// The axes an Unsqueeze inserts (an input since opset 13).
std::optional<SmallVector<int64_t>> unsqueezeAxes(OnnxNode node, RaisingContext &context) {
  return node.input(1) ? context.ints(node.input(1)) : std::nullopt;
}

// The source of a chain of Transposes and the one permutation they amount to: result axis i is
// source axis perm[i]. Empty when there is no Transpose. Composing indexes one perm by another,
// so a perm that is not a permutation ends the chain (phase 1 refuses those anyway).
std::pair<Value, SmallVector<int64_t>> throughTransposes(Value value, RaisingContext &context) {
  SmallVector<int64_t> perm;
  Value current = skipNoOps(value, context);
  while (OnnxNode t = producer(current, "Transpose", context)) {
    auto p = t.intsAttr("perm");
    if (!p || !isPermutation(*p))
      break;
    if (perm.empty())
      perm = *p;
    else if (p->size() == perm.size())
      for (int64_t &axis : perm)
        axis = (*p)[axis];
    else
      break;
    current = skipNoOps(t.input(0), context);
  }
  return {current, perm};
}

// ---- RoPE ---------------------------------------------------------------------------------------

// The cos or sin rows ShapeFolding recognised (onnx.RopeRows of `kind`).
OnnxNode ropeRows(Value value, StringRef kind, RaisingContext &context) {
  OnnxNode rows = OnnxNode::of(skipNoOps(value, context));
  if (!rows || rows.type() != kRopeRowsOp.drop_front(kOpPrefix.size()))
    return OnnxNode();
  auto attr = rows.op()->getAttrOfType<StringAttr>("kind");
  return attr && attr.getValue() == kind ? rows : OnnxNode();
}

// Is `value` x[..., from:to] (last axis, step 1)? Returns x.
Value lastAxisSlice(Value value, int64_t from, int64_t to, RaisingContext &context) {
  OnnxNode slice = producer(value, "Slice", context);
  if (!slice)
    return Value();
  Value x = skipNoOps(slice.input(0), context);
  auto xType = rankedType(x);
  auto starts = context.ints(slice.input(1)), ends = context.ints(slice.input(2));
  auto axes = slice.input(3) ? context.ints(slice.input(3)) : std::nullopt;
  auto steps = slice.input(4) ? context.ints(slice.input(4)) : SmallVector<int64_t>{1};
  // A rank-0 type (a damaged value_info) has no last axis to slice.
  if (!xType || xType.getRank() == 0 || !starts || !ends || !axes || !steps ||
      starts->size() != 1 || ends->size() != 1 || axes->size() != 1 ||
      *steps != SmallVector<int64_t>{1})
    return Value();
  int64_t rank = xType.getRank(), width = xType.getDimSize(rank - 1);
  if ((*axes)[0] != -1 && (*axes)[0] != rank - 1)
    return Value();
  if ((*starts)[0] != from || std::min((*ends)[0], width) != to)
    return Value();
  return x;
}

// rotate_half(x) = Concat(-x[..., D/2:], x[..., :D/2], axis = -1). Returns x.
Value rotateHalfSource(Value value, RaisingContext &context) {
  OnnxNode concat = producer(value, "Concat", context);
  if (!concat || concat.numInputs() != 2)
    return Value();
  OnnxNode neg = producer(concat.input(0), "Neg", context);
  OnnxNode lowerSlice = producer(concat.input(1), "Slice", context);
  if (!neg || !lowerSlice)
    return Value();
  // The slices' own types are often unknown to ONNX; the width comes from the sliced tensor.
  auto sourceType = rankedType(skipNoOps(lowerSlice.input(0), context));
  if (!sourceType || sourceType.getRank() == 0 || sourceType.isDynamicDim(sourceType.getRank() - 1))
    return Value();
  int64_t rank = sourceType.getRank(), width = sourceType.getDimSize(rank - 1);
  int64_t axis = concat.intAttr("axis").value_or(0);
  if ((axis != -1 && axis != rank - 1) || width % 2 != 0)
    return Value();
  Value upper = lastAxisSlice(neg.input(0), width / 2, width, context);
  Value lower = lastAxisSlice(concat.input(1), 0, width / 2, context);
  return upper && upper == lower ? upper : Value();
}

// How the rows broadcast against x [*, *, D]: [T, 1, D] against x [tokens, heads, D]
// (tokens-first), [T, D] or [1, T, D] against x [heads, tokens, D] (heads-first).
enum class RopeLayout { tokensFirst, headsFirst, neither };

RopeLayout ropeLayout(Value rows) {
  auto type = rankedType(rows);
  if (!type)
    return RopeLayout::neither;
  ArrayRef<int64_t> shape = type.getShape();
  if (shape.size() == 3 && ShapedType::isDynamic(shape[0]) && shape[1] == 1)
    return RopeLayout::tokensFirst;
  if ((shape.size() == 2 && ShapedType::isDynamic(shape[0])) ||
      (shape.size() == 3 && shape[0] == 1 && ShapedType::isDynamic(shape[1])))
    return RopeLayout::headsFirst;
  return RopeLayout::neither;
}

// An onnx.Transpose of `x` by `perm` before `root`: a raised value in the heads-first layout the
// rest of the subgraph reads (the attention pattern looks through it).
Value transposeNode(OnnxNode root, Value x, ArrayRef<int64_t> perm, RewriterBase &rewriter) {
  auto type = rankedType(x);
  SmallVector<int64_t> dims;
  for (int64_t axis : perm)
    dims.push_back(type.getDimSize(axis));
  OperationState state(root.op()->getLoc(), std::string(kOpPrefix) + "Transpose");
  state.addOperands(x);
  state.addTypes(RankedTensorType::get(dims, type.getElementType()));
  state.addAttribute("perm", rewriter.getDenseI64ArrayAttr(perm));
  state.addAttribute(kOpsetAttr, root.op()->getAttr(kOpsetAttr));
  state.addAttribute(kNodeAttr, rewriter.getStringAttr(root.name().str() + "/heads_first"));
  return rewriter.create(state)->getResult(0);
}

LogicalResult buildRope(OnnxNode root, Value x, OnnxNode cos, OnnxNode sin, RaisingContext &context,
                        RewriterBase &rewriter) {
  Value positions = cos.input(0);
  if (positions != sin.input(0))
    return context.mismatch("cos and sin are taken at different positions");
  RopeLayout layout = ropeLayout(cos.result());
  if (layout == RopeLayout::neither || rankedType(sin.result()) != rankedType(cos.result()))
    return context.mismatch("the RoPE rows do not broadcast as [tokens, 1, D] against "
                            "[tokens, heads, D] or as [tokens, D] against [heads, tokens, D]");
  Value source = x;
  if (layout == RopeLayout::headsFirst) {
    auto [tokensFirst, perm] = throughTransposes(x, context);
    if (perm != SmallVector<int64_t>{1, 0, 2})
      return context.mismatch("RoPE rows [tokens, D] must apply to [heads, tokens, D], a "
                              "transpose of [tokens, heads, D]");
    source = tokensFirst;
  }
  auto xType = rankedType(source), rowsType = rankedType(cos.result());
  if (!xType || xType.getRank() != 3 || !xType.getElementType().isF32() ||
      rowsType.getDimSize(rowsType.getRank() - 1) != xType.getDimSize(2))
    return context.mismatch("x must be [tokens, heads, head_dim] f32 with rows "
                            "[tokens, head_dim]");
  auto pType = rankedType(positions);
  if (!pType || pType.getRank() != 1 || !pType.getElementType().isInteger(32))
    return context.mismatch("dlm.rope takes 1-D int32 positions");
  Value y = dlm::ir::RoPEOp::create(rewriter, root.op()->getLoc(), xType, source, positions,
                                    rewriter.getF64FloatAttr(context.config().ropeTheta),
                                    IntegerAttr(), IntegerAttr());
  if (layout == RopeLayout::headsFirst) {
    y = transposeNode(root, y, {1, 0, 2}, rewriter);
    context.note("RoPE applied after the heads-first transpose");
  }
  rewriter.replaceOp(root.op(), y);
  return success();
}

// x * cos + rotate_half(x) * sin with cos/sin the NeoX RoPE rows at the positions → dlm.rope x,
// positions. Heads-first (RoPE applied after the transpose to [heads, tokens, D], as most
// modules write it): dlm.rope on the tokens-first source, transposed back.
LogicalResult raiseRope(OnnxNode root, RaisingContext &context, RewriterBase &rewriter) {
  for (int order = 0; order < 2; ++order) {
    OnnxNode direct = producer(root.input(order), "Mul", context);
    OnnxNode rotated = producer(root.input(1 - order), "Mul", context);
    if (!direct || !rotated)
      continue;
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 2; ++b) {
        Value x = skipNoOps(direct.input(a), context);
        OnnxNode cos = ropeRows(direct.input(1 - a), "cos", context);
        Value rotatedSource = rotateHalfSource(rotated.input(b), context);
        OnnxNode sin = ropeRows(rotated.input(1 - b), "sin", context);
        if (!cos || !sin || !rotatedSource || rotatedSource != x)
          continue;
        return buildRope(root, x, cos, sin, context, rewriter);
      }
  }
  return context.reject("not x * cos + rotate_half(x) * sin with cos/sin the RoPE rows at the "
                        "positions");
}

// ---- attention ----------------------------------------------------------------------------------

// Keys/values repeated for grouped-query attention along their head axis (`headAxis` 1 in
// [tokens, kv_heads, D], 0 in the heads-first [kv_heads, tokens, D]): Reshape(Tile(Unsqueeze(k,
// [headAxis + 1]), repeats) or Expand(Unsqueeze(k, [headAxis + 1]), shape), target) that repeats
// only along the new axis and merges it into the heads → (k, rep); (value, 1) otherwise.
std::pair<Value, int64_t> unrepeated(Value value, int64_t headAxis, RaisingContext &context) {
  Value v = skipNoOps(value, context);
  OnnxNode reshape = producer(v, "Reshape", context);
  if (!reshape)
    return {v, 1};
  OnnxNode tile = producer(reshape.input(0), "Tile", context);
  OnnxNode repeat = tile ? tile : producer(reshape.input(0), "Expand", context);
  OnnxNode unsqueeze = repeat ? producer(repeat.input(0), "Unsqueeze", context) : OnnxNode();
  if (!unsqueeze)
    return {v, 1};
  const int64_t repeatAxis = headAxis + 1;
  auto axes = unsqueezeAxes(unsqueeze, context);
  auto counts = context.ints(repeat.input(1));
  auto shape = context.ints(reshape.input(1));
  Value k = skipNoOps(unsqueeze.input(0), context);
  auto kType = rankedType(k);
  if (!axes || *axes != SmallVector<int64_t>{repeatAxis} || !counts || counts->size() != 4 ||
      !shape || shape->size() != 3 || !kType || kType.getRank() != 3)
    return {v, 1};
  // Every other axis keeps its size: a Tile repeats it once, an Expand names it or 1.
  for (int64_t axis = 0; axis < 4; ++axis) {
    int64_t count = (*counts)[axis];
    int64_t size = kType.getDimSize(axis < repeatAxis ? axis : axis - 1);
    if (axis != repeatAxis && count != 1 && (tile || count != size))
      return {v, 1};
  }
  // Repeats come from the file: the head count is checked without overflow (and a dynamic
  // kv_heads, being negative, is refused by the check).
  int64_t rep = (*counts)[repeatAxis];
  auto heads = checkedElementCount(ArrayRef<int64_t>{kType.getDimSize(headAxis), rep});
  if (rep < 1 || !heads || (*shape)[headAxis] != *heads || (*shape)[2] != kType.getDimSize(2))
    return {v, 1};
  context.note(std::string("grouped-query repetition by ") + (tile ? "Tile" : "Expand") +
               (headAxis == 0 ? " after the heads-first transpose" : ""));
  return {k, rep};
}

// The [tokens, heads, D] source of an attention operand, the perm of the heads-first view the
// MatMul reads (composed through a heads-first repetition), and the repetition.
struct AttentionOperand {
  Value source;
  SmallVector<int64_t> perm;
  int64_t rep = 1;
};

AttentionOperand attentionOperand(Value value, RaisingContext &context) {
  auto [outer, perm] = throughTransposes(value, context);
  auto [repeated, rep] = unrepeated(outer, /*headAxis=*/0, context);
  if (rep > 1) {
    auto [inner, innerPerm] = throughTransposes(repeated, context);
    if (perm.empty())
      perm = innerPerm;
    else if (innerPerm.size() == perm.size())
      for (int64_t &axis : perm)
        axis = innerPerm[axis];
    else
      perm.clear(); // not a heads-first view: the caller refuses it
    outer = inner;
  }
  auto [source, tokensFirstRep] = unrepeated(outer, /*headAxis=*/1, context);
  // Both from the file: a product that overflows is no repetition the heads can line up with.
  auto total = checkedElementCount(ArrayRef<int64_t>{rep, tokensFirstRep});
  return {source, perm, total.value_or(0)};
}

// The causal mask ShapeFolding recognised (onnx.CausalMask of `form`).
bool isCausalMask(Value value, StringRef form, RaisingContext &context) {
  OnnxNode mask = OnnxNode::of(skipNoOps(value, context));
  if (!mask || mask.type() != kCausalMaskOp.drop_front(kOpPrefix.size()))
    return false;
  auto attr = mask.op()->getAttrOfType<StringAttr>("form");
  return attr && attr.getValue() == form;
}

// The scores under a causal mask: Where(future, -inf, s), Where(allowed, s, -inf) or
// s + additive mask. Null when `scores` is not masked this way.
Value causallyMasked(Value scores, RaisingContext &context) {
  auto masked = [&](Value fill) {
    auto value = context.scalar(fill);
    return value && *value <= -1e4;
  };
  if (OnnxNode where = producer(scores, "Where", context)) {
    if (isCausalMask(where.input(0), "future", context) && masked(where.input(1)))
      return skipNoOps(where.input(2), context);
    if (isCausalMask(where.input(0), "allowed", context) && masked(where.input(2)))
      return skipNoOps(where.input(1), context);
  }
  if (OnnxNode add = producer(scores, "Add", context))
    for (int side = 0; side < 2; ++side)
      if (isCausalMask(add.input(side), "additive", context))
        return skipNoOps(add.input(1 - side), context);
  return Value();
}

// Transpose(MatMul(Softmax(mask(scale * Q·Kᵀ)), V), [1, 0, 2]) with Q, K, V heads-first
// transposes of [tokens, heads, head_dim] → dlm.masked_attention q, k, v.
LogicalResult raiseAttention(OnnxNode root, RaisingContext &context, RewriterBase &rewriter) {
  if (root.intsAttr("perm") != SmallVector<int64_t>{1, 0, 2})
    return context.reject("not a heads-first to tokens-first transpose");
  OnnxNode pv = producer(root.input(0), "MatMul", context);
  OnnxNode softmax = pv ? producer(pv.input(0), "Softmax", context) : OnnxNode();
  if (!softmax)
    return context.reject("its input is not MatMul(Softmax(...), V)");
  int64_t axis = softmax.intAttr("axis").value_or(-1);
  if (axis != -1 && axis != 2)
    return context.mismatch("softmax is not over the keys (last axis)");

  Value scores = skipNoOps(softmax.input(0), context);
  auto mask = dlm::ir::MaskKind::bidirectional;
  if (Value unmasked = causallyMasked(scores, context)) {
    mask = dlm::ir::MaskKind::causal;
    scores = unmasked;
  } else if (producer(scores, "Where", context)) {
    return context.mismatch("the mask is not a causal mask over the keys");
  }
  double scale = 1.0;
  if (OnnxNode div = producer(scores, "Div", context)) {
    auto by = context.scalar(div.input(1));
    if (!by || *by == 0.0)
      return context.mismatch("scores are divided by a non-constant");
    scale = 1.0 / *by;
    scores = div.input(0);
  } else if (OnnxNode mul = producer(scores, "Mul", context)) {
    auto by = context.scalar(mul.input(1));
    Value other = mul.input(0);
    if (!by) {
      by = context.scalar(mul.input(0));
      other = mul.input(1);
    }
    if (!by)
      return context.mismatch("scores are multiplied by a non-constant");
    scale = *by;
    scores = other;
  }
  OnnxNode qk = producer(scores, "MatMul", context);
  if (!qk)
    return context.mismatch("the scores are not Q·Kᵀ");
  auto [q, qPerm] = throughTransposes(qk.input(0), context);
  AttentionOperand key = attentionOperand(qk.input(1), context);
  AttentionOperand value = attentionOperand(pv.input(1), context);
  if (qPerm != SmallVector<int64_t>{1, 0, 2} || key.perm != SmallVector<int64_t>{1, 2, 0} ||
      value.perm != SmallVector<int64_t>{1, 0, 2})
    return context.mismatch("Q, K and V are not heads-first views of [tokens, heads, head_dim]");
  Value k = key.source, v = value.source;
  int64_t kRep = key.rep, vRep = value.rep;
  auto qType = rankedType(q), kType = rankedType(k), vType = rankedType(v);
  // kv_heads and the repetitions come from the file: their product is checked (a dynamic
  // kv_heads, being negative, fails the check).
  auto repeatedHeads = kType && kType.getRank() == 3
                           ? checkedElementCount(ArrayRef<int64_t>{kType.getDimSize(1), kRep})
                           : std::nullopt;
  if (!qType || !kType || !vType || qType.getRank() != 3 || kType.getRank() != 3 ||
      vType.getRank() != 3 || kRep != vRep || kRep < 1 || !repeatedHeads ||
      qType.getDimSize(1) != *repeatedHeads || kType.getDimSize(1) != vType.getDimSize(1) ||
      qType.getDimSize(2) != kType.getDimSize(2))
    return context.mismatch("Q [tokens, heads, D], K and V [tokens, kv_heads, D] do not line up "
                          "(grouped-query repetition included)");

  int64_t headDim = qType.getDimSize(2);
  // The default scale is 1/sqrt(D); say so only when the graph uses another one.
  FloatAttr scaleAttr;
  if (std::abs(scale * std::sqrt(double(headDim)) - 1.0) > 1e-6)
    scaleAttr = rewriter.getF32FloatAttr(float(scale));
  auto type = RankedTensorType::get({qType.getDimSize(0), qType.getDimSize(1),
                                     vType.getDimSize(2)},
                                    rewriter.getF32Type());
  Value attended = dlm::ir::MaskedAttentionOp::create(
      rewriter, root.op()->getLoc(), type, q, k, v, Value(), Value(), Value(), mask,
      IntegerAttr(), IntegerAttr(), scaleAttr);
  rewriter.replaceOp(root.op(), attended);
  return success();
}

} // namespace

void addAttentionPatterns(RaisingPatterns &patterns) {
  patterns.onOp("Add", kMinOpset, "rope", raiseRope);
  patterns.onOp("Transpose", kMinOpset, "attention", raiseAttention);
  patterns.covers({"Slice", "Softmax", "Where", "Tile", "RopeRows", "CausalMask"});
}

} // namespace dlm::importer::onnx
