// Raising patterns for the attention block: NeoX rotary embeddings from cos/sin tables, and
// scaled dot-product attention (heads-first MatMuls, GQA by repetition, optional causal mask).
#include "compiler/dialects/dlm/DlmDialect.h"
#include "importer/onnx/MechanicalImport.h"
#include "importer/onnx/Raising.h"

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

// table[positions] with a head axis inserted: Unsqueeze(Gather(table, positions), [1]).
std::optional<std::pair<Value, Value>> tableRows(Value value, RaisingContext &context) {
  OnnxNode unsqueeze = producer(value, "Unsqueeze", context);
  auto axes = unsqueeze ? unsqueezeAxes(unsqueeze, context) : std::nullopt;
  if (!axes || (*axes != SmallVector<int64_t>{1} && *axes != SmallVector<int64_t>{-2}))
    return std::nullopt;
  OnnxNode gather = producer(unsqueeze.input(0), "Gather", context);
  if (!gather || gather.intAttr("axis").value_or(0) != 0)
    return std::nullopt;
  Operation *table = weightOp(gather.input(0), context);
  if (!table)
    return std::nullopt;
  return std::pair(table->getResult(0), skipNoOps(gather.input(1), context));
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

// cos/sin tables must be NeoX RoPE for config.json's rope_theta (the runtime computes them).
LogicalResult checkRopeTables(Value cosTable, Value sinTable, RaisingContext &context) {
  auto cosValues = context.weightValues(cosTable), sinValues = context.weightValues(sinTable);
  if (!cosValues || !sinValues)
    return context.fail("cannot read the RoPE tables");
  auto type = rankedType(cosTable);
  int64_t positions = type.getDimSize(0), width = type.getDimSize(1);
  double theta = context.config().ropeTheta;
  auto name = [](Value v) { return cast<dlm::ir::WeightOp>(v.getDefiningOp()).getName().str(); };
  for (int64_t p = 0; p < std::min<int64_t>(positions, 64); ++p)
    for (int64_t j = 0; j < width; ++j) {
      double angle = p * std::pow(theta, -2.0 * double(j % (width / 2)) / double(width));
      double dc = std::abs((*cosValues)[p * width + j] - std::cos(angle));
      double ds = std::abs((*sinValues)[p * width + j] - std::sin(angle));
      if (dc > 2e-3 || ds > 2e-3)
        return context.fail("the RoPE tables '" + name(cosTable) + "' / '" + name(sinTable) +
                            "' do not match rope_theta " + formatNumber(theta) +
                            " from config.json (position " + std::to_string(p) +
                            ", dimension " + std::to_string(j) + ")");
    }
  return success();
}

// x * cos + rotate_half(x) * sin with cos/sin rows gathered by position → dlm.rope x, positions.
LogicalResult raiseRope(OnnxNode root, RaisingContext &context, RewriterBase &rewriter) {
  for (int order = 0; order < 2; ++order) {
    OnnxNode direct = producer(root.input(order), "Mul", context);
    OnnxNode rotated = producer(root.input(1 - order), "Mul", context);
    if (!direct || !rotated)
      continue;
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 2; ++b) {
        Value x = skipNoOps(direct.input(a), context);
        auto cos = tableRows(direct.input(1 - a), context);
        Value rotatedSource = rotateHalfSource(rotated.input(b), context);
        auto sin = tableRows(rotated.input(1 - b), context);
        if (!cos || !sin || !rotatedSource || rotatedSource != x)
          continue;
        if (cos->second != sin->second)
          return context.mismatch("cos and sin are gathered at different positions");
        Value positions = cos->second;
        auto xType = rankedType(x), pType = rankedType(positions);
        auto tableType = rankedType(cos->first);
        if (!xType || xType.getRank() != 3 || !xType.getElementType().isF32() ||
            rankedType(sin->first) != tableType || tableType.getRank() != 2 ||
            tableType.getDimSize(1) != xType.getDimSize(2))
          return context.mismatch("x must be [tokens, heads, head_dim] f32 with tables "
                                "[positions, head_dim]");
        if (!pType || pType.getRank() != 1 || !pType.getElementType().isInteger(32))
          return context.mismatch("dlm.rope takes 1-D int32 positions");
        if (failed(checkRopeTables(cos->first, sin->first, context)))
          return failure();
        Value y = dlm::ir::RoPEOp::create(rewriter, root.op()->getLoc(), xType, x, positions,
                                          rewriter.getF64FloatAttr(context.config().ropeTheta),
                                          IntegerAttr(), IntegerAttr());
        rewriter.replaceOp(root.op(), y);
        return success();
      }
  }
  return context.reject("not x * cos + rotate_half(x) * sin with cos/sin gathered from "
                        "tables by position");
}

// ---- attention ----------------------------------------------------------------------------------

// Keys/values repeated for grouped-query attention: Reshape(Tile(Unsqueeze(k, [2]),
// [1, 1, rep, 1]), [-1, heads, D]) → (k, rep); anything else is taken as is (rep = 1).
std::pair<Value, int64_t> unrepeated(Value value, RaisingContext &context) {
  Value v = skipNoOps(value, context);
  OnnxNode reshape = producer(v, "Reshape", context);
  OnnxNode tile = reshape ? producer(reshape.input(0), "Tile", context) : OnnxNode();
  OnnxNode unsqueeze = tile ? producer(tile.input(0), "Unsqueeze", context) : OnnxNode();
  if (!unsqueeze)
    return {v, 1};
  auto axes = unsqueezeAxes(unsqueeze, context);
  auto repeats = context.ints(tile.input(1));
  auto shape = context.ints(reshape.input(1));
  Value k = skipNoOps(unsqueeze.input(0), context);
  auto kType = rankedType(k);
  if (!axes || !repeats || !shape || !kType || kType.getRank() != 3 ||
      *axes != SmallVector<int64_t>{2} || repeats->size() != 4 || (*repeats)[0] != 1 ||
      (*repeats)[1] != 1 || (*repeats)[3] != 1 || shape->size() != 3 ||
      (*shape)[2] != kType.getDimSize(2))
    return {v, 1};
  // Repeats come from the file: the head count is checked without overflow (and a dynamic
  // kv_heads, being negative, is refused by the check).
  auto heads = checkedElementCount(ArrayRef<int64_t>{kType.getDimSize(1), (*repeats)[2]});
  if ((*repeats)[2] < 1 || !heads || (*shape)[1] != *heads)
    return {v, 1};
  return {k, (*repeats)[2]};
}

// Where(pos_key > pos_query, -inf, scores): keys after the query are masked. The comparison is
// Greater(Unsqueeze(p, [0]), Unsqueeze(p, [1])) or Less(Unsqueeze(p, [1]), Unsqueeze(p, [0])).
bool isCausalCondition(Value condition, RaisingContext &context) {
  auto positionsAlong = [&](Value v, int64_t axis) -> Value {
    OnnxNode u = producer(v, "Unsqueeze", context);
    auto axes = u ? unsqueezeAxes(u, context) : std::nullopt;
    return axes && *axes == SmallVector<int64_t>{axis} ? skipNoOps(u.input(0), context)
                                                       : Value();
  };
  if (OnnxNode greater = producer(condition, "Greater", context)) {
    Value key = positionsAlong(greater.input(0), 0), query = positionsAlong(greater.input(1), 1);
    return key && key == query;
  }
  if (OnnxNode less = producer(condition, "Less", context)) {
    Value query = positionsAlong(less.input(0), 1), key = positionsAlong(less.input(1), 0);
    return key && key == query;
  }
  return false;
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
  if (OnnxNode where = producer(scores, "Where", context)) {
    auto fill = context.scalar(where.input(1));
    if (!fill || *fill > -1e4 || !isCausalCondition(where.input(0), context))
      return context.mismatch("the mask is not Where(key position > query position, -inf, "
                            "scores)");
    mask = dlm::ir::MaskKind::causal;
    scores = skipNoOps(where.input(2), context);
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
  auto [kRepeated, kPerm] = throughTransposes(qk.input(1), context);
  auto [vRepeated, vPerm] = throughTransposes(pv.input(1), context);
  if (qPerm != SmallVector<int64_t>{1, 0, 2} || kPerm != SmallVector<int64_t>{1, 2, 0} ||
      vPerm != SmallVector<int64_t>{1, 0, 2})
    return context.mismatch("Q, K and V are not heads-first views of [tokens, heads, head_dim]");
  auto [k, kRep] = unrepeated(kRepeated, context);
  auto [v, vRep] = unrepeated(vRepeated, context);
  auto qType = rankedType(q), kType = rankedType(k), vType = rankedType(v);
  // kv_heads * kRep cannot overflow: unrepeated checked it for k (kRep is 1 otherwise).
  if (!qType || !kType || !vType || qType.getRank() != 3 || kType.getRank() != 3 ||
      vType.getRank() != 3 || kRep != vRep ||
      qType.getDimSize(1) != kType.getDimSize(1) * kRep ||
      kType.getDimSize(1) != vType.getDimSize(1) || qType.getDimSize(2) != kType.getDimSize(2))
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
  patterns.covers({"Slice", "Softmax", "Where", "Greater", "Less", "Tile"});
}

} // namespace dlm::importer::onnx
