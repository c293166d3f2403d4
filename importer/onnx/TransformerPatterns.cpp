// Raising patterns for the dense pieces of a transformer: embedding, RMSNorm, linear layers,
// the SiLU-gated MLP, the LM head, head split/merge reshapes and residual adds.
#include "compiler/dialects/dlm/DlmDialect.h"
#include "importer/onnx/Raising.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include <cmath>

namespace dlm::importer::onnx {
namespace {

using namespace mlir;

std::string shapeText(Type type) {
  auto ranked = dyn_cast_or_null<RankedTensorType>(type);
  if (!ranked)
    return "(unknown shape)";
  std::string text = "[";
  for (int64_t i = 0; i < ranked.getRank(); ++i)
    text += (i ? ", " : "") +
            (ranked.isDynamicDim(i) ? std::string("?") : std::to_string(ranked.getDimSize(i)));
  return text + "]";
}

Value same(Value a, Value b, RaisingContext &context) {
  Value x = skipNoOps(a, context);
  return x && x == skipNoOps(b, context) ? x : Value();
}

// dlm computes activations in f32 (as the safetensors import does): a root whose ONNX result is
// known to be another float type is not raised.
bool producesF32(OnnxNode root) {
  auto shaped = dyn_cast<ShapedType>(root.result().getType());
  return !shaped || shaped.getElementType().isF32();
}

RankedTensorType rows(int64_t count, int64_t width, Builder &b) {
  return RankedTensorType::get({count, width}, b.getF32Type());
}

// ---- embedding ----------------------------------------------------------------------------------

// Gather(table, ids, axis = 0) on the token embedding (the table config.json describes).
LogicalResult raiseEmbedding(OnnxNode root, RaisingContext &context, RewriterBase &rewriter) {
  if (root.intAttr("axis").value_or(0) != 0)
    return context.reject("gathers along axis " + std::to_string(*root.intAttr("axis")));
  Operation *table = weightOp(root.input(0), context);
  if (!table)
    return context.reject("the table is not an initializer");
  Value tableValue = table->getResult(0);
  const artifact::ModelConfig &c = context.config();
  auto tableType = rankedType(tableValue);
  if (tableType.getShape() != ArrayRef<int64_t>{c.embeddingSize, c.hiddenSize})
    return context.reject("table " + shapeText(tableType) +
                          " is not the token embedding [" + std::to_string(c.embeddingSize) +
                          ", " + std::to_string(c.hiddenSize) + "] of config.json");
  Value ids = root.input(1);
  auto idsType = rankedType(ids);
  if (!idsType || idsType.getRank() != 1 ||
      !(idsType.getElementType().isInteger(32) || idsType.getElementType().isInteger(64)))
    return context.mismatch("ids must be a 1-D int32 or int64 tensor [tokens], got " +
                          shapeText(ids.getType()));
  Value x = dlm::ir::EmbeddingOp::create(rewriter, root.op()->getLoc(),
                                         rows(idsType.getDimSize(0), c.hiddenSize, rewriter),
                                         ids, tableValue, rewriter.getF32FloatAttr(1.0f));
  rewriter.replaceOp(root.op(), x);
  return success();
}

// ---- RMSNorm ------------------------------------------------------------------------------------

// The axes a ReduceMean reduces: an attribute up to opset 17, an input from opset 18.
std::optional<SmallVector<int64_t>> reduceAxes(OnnxNode mean, RaisingContext &context) {
  if (mean.opset() >= 18)
    return mean.input(1) ? context.ints(mean.input(1)) : std::nullopt;
  return mean.intsAttr("axes");
}

// mean(x^2) over the last axis, kept as a size-1 axis: ReduceMean(Pow(x, 2) | Mul(x, x)).
Value meanSquareSource(Value value, RaisingContext &context) {
  OnnxNode mean = producer(value, "ReduceMean", context);
  if (!mean || mean.intAttr("keepdims").value_or(1) != 1)
    return Value();
  auto axes = reduceAxes(mean, context);
  OnnxNode pow = producer(mean.input(0), "Pow", context);
  OnnxNode square = producer(mean.input(0), "Mul", context);
  Value x;
  if (pow && context.scalar(pow.input(1)) == 2.0)
    x = skipNoOps(pow.input(0), context);
  else if (square)
    x = same(square.input(0), square.input(1), context);
  auto ranked = rankedType(x);
  if (!x || !axes || axes->size() != 1 || !ranked ||
      ((*axes)[0] != -1 && (*axes)[0] != ranked.getRank() - 1))
    return Value();
  return x;
}

// sqrt(mean(x^2) + eps) → (x, eps).
std::optional<std::pair<Value, double>> rmsDenominator(Value value, RaisingContext &context) {
  OnnxNode sqrt = producer(value, "Sqrt", context);
  OnnxNode add = sqrt ? producer(sqrt.input(0), "Add", context) : OnnxNode();
  if (!add)
    return std::nullopt;
  for (int side = 0; side < 2; ++side) {
    Value x = meanSquareSource(add.input(side), context);
    auto eps = context.scalar(add.input(1 - side));
    if (x && eps)
      return std::pair(x, *eps);
  }
  return std::nullopt;
}

// x / sqrt(mean(x^2) + eps), written as Div(x, d), Mul(x, Reciprocal(d)) or Mul(x, Div(1, d)).
std::optional<std::pair<Value, double>> rmsNormalized(Value value, RaisingContext &context) {
  OnnxNode node = OnnxNode::of(skipNoOps(value, context));
  if (!node)
    return std::nullopt;
  auto check = [&](Value x, Value denominator) -> std::optional<std::pair<Value, double>> {
    auto found = rmsDenominator(denominator, context);
    if (found && same(found->first, x, context))
      return found;
    return std::nullopt;
  };
  if (node.type() == "Div")
    return check(node.input(0), node.input(1));
  if (node.type() != "Mul")
    return std::nullopt;
  for (int side = 0; side < 2; ++side) {
    Value inverse = node.input(1 - side);
    if (OnnxNode reciprocal = producer(inverse, "Reciprocal", context))
      if (auto found = check(node.input(side), reciprocal.input(0)))
        return found;
    if (OnnxNode div = producer(inverse, "Div", context);
        div && context.scalar(div.input(0)) == 1.0)
      if (auto found = check(node.input(side), div.input(1)))
        return found;
  }
  return std::nullopt;
}

// Mul(x / sqrt(mean(x^2) + eps), w) → dlm.rms_norm x, w.
LogicalResult raiseRmsNorm(OnnxNode root, RaisingContext &context, RewriterBase &rewriter) {
  for (int side = 0; side < 2; ++side) {
    Operation *weight = weightOp(root.input(side), context);
    if (!weight)
      continue;
    auto found = rmsNormalized(root.input(1 - side), context);
    if (!found)
      return context.reject("the operand beside weight '" +
                            cast<dlm::ir::WeightOp>(weight).getName().str() +
                            "' is not x / sqrt(mean(x^2, last axis) + eps)");
    auto [x, eps] = *found;
    auto xType = rankedType(x);
    auto wType = rankedType(weight->getResult(0));
    if (!xType || xType.getRank() == 0 || !wType || !xType.getElementType().isF32() ||
        wType.getRank() != 1 || wType.getDimSize(0) != xType.getDimSize(xType.getRank() - 1))
      return context.mismatch("weight " + shapeText(wType) + " does not scale the last axis of " +
                            shapeText(xType) + " f32");
    double expected = context.config().rmsNormEps;
    // The graph holds eps as f32; config.json's value is the exact one.
    if (std::abs(eps - expected) > 1e-6 * expected)
      return context.fail("RMSNorm epsilon " + formatNumber(eps) +
                          " does not match rms_norm_eps " + formatNumber(expected) +
                          " from config.json");
    Value y = dlm::ir::RMSNormOp::create(rewriter, root.op()->getLoc(), xType, x,
                                         weight->getResult(0),
                                         rewriter.getF64FloatAttr(expected));
    rewriter.replaceOp(root.op(), y);
    return success();
  }
  return context.reject("no operand is a weight initializer");
}

// ---- linear layers ------------------------------------------------------------------------------

LogicalResult raiseLinear(OnnxNode root, RaisingContext &context, RewriterBase &rewriter) {
  auto match = matchLinear(root.result(), context);
  if (!match)
    return context.reject("not x·Wᵀ (+ b) with W an [out, in] initializer");
  auto xType = rankedType(match->input);
  auto wType = rankedType(match->weight);
  if (!xType || xType.getRank() != 2 || !producesF32(root) ||
      xType.getDimSize(1) != wType.getDimSize(1))
    return context.mismatch("input " + shapeText(match->input.getType()) +
                          " is not [tokens, " + std::to_string(wType.getDimSize(1)) + "] f32");
  Value y = dlm::ir::LinearOp::create(
      rewriter, root.op()->getLoc(),
      rows(xType.getDimSize(0), wType.getDimSize(0), rewriter), match->input, match->weight,
      match->bias);
  rewriter.replaceOp(root.op(), y);
  return success();
}

// MatMul(silu(gate(x)) * up(x), Wdᵀ) with silu(g) = g * Sigmoid(g) → dlm.gated_mlp.
LogicalResult raiseGatedMlp(OnnxNode root, RaisingContext &context, RewriterBase &rewriter) {
  auto down = matchLinear(root.result(), context);
  OnnxNode product = down ? producer(down->input, "Mul", context) : OnnxNode();
  if (!product || down->bias)
    return context.reject("not down(a * b)");
  auto siluInput = [&](Value value) -> Value {
    OnnxNode mul = producer(value, "Mul", context);
    if (!mul)
      return Value();
    for (int side = 0; side < 2; ++side)
      if (OnnxNode sigmoid = producer(mul.input(1 - side), "Sigmoid", context))
        if (Value g = same(mul.input(side), sigmoid.input(0), context))
          return g;
    return Value();
  };
  for (int side = 0; side < 2; ++side) {
    Value g = siluInput(product.input(side));
    auto gate = g ? matchLinear(g, context) : std::nullopt;
    auto up = matchLinear(product.input(1 - side), context);
    if (!gate || !up || gate->bias || up->bias)
      continue;
    Value x = same(gate->input, up->input, context);
    auto xType = rankedType(x);
    auto gType = rankedType(gate->weight), uType = rankedType(up->weight),
         dType = rankedType(down->weight);
    if (!x || !xType || xType.getRank() != 2 || gType != uType ||
        dType.getShape() != ArrayRef<int64_t>{gType.getDimSize(1), gType.getDimSize(0)} ||
        xType.getDimSize(1) != gType.getDimSize(1))
      return context.mismatch("gate " + shapeText(gType) + ", up " + shapeText(uType) +
                            " and down " + shapeText(dType) + " do not form an MLP over " +
                            shapeText(x ? x.getType() : Type()));
    Value y = dlm::ir::GatedMLPOp::create(rewriter, root.op()->getLoc(), xType, x,
                                          gate->weight, up->weight, down->weight,
                                          dlm::ir::Activation::silu);
    rewriter.replaceOp(root.op(), y);
    return success();
  }
  return context.mismatch("the product is not silu(x·Wgᵀ) * x·Wuᵀ over one input");
}

// The logits: x·Wᵀ over the (possibly padded) embedding rows, optionally sliced to the
// vocabulary along the last axis.
LogicalResult buildLmHead(OnnxNode root, const LinearMatch &head, int64_t vocab,
                          RaisingContext &context, RewriterBase &rewriter) {
  auto xType = rankedType(head.input);
  auto wType = rankedType(head.weight);
  if (head.bias || !xType || xType.getRank() != 2 || xType.getDimSize(1) != wType.getDimSize(1))
    return context.mismatch("not logits of [tokens, hidden] against an [embedding rows, hidden] "
                          "weight without bias");
  Value logits = dlm::ir::LMHeadOp::create(rewriter, root.op()->getLoc(),
                                           rows(xType.getDimSize(0), vocab, rewriter),
                                           head.input, head.weight, FloatAttr());
  rewriter.replaceOp(root.op(), logits);
  return success();
}

// Slice(x·Wᵀ, starts = [0], ends = [V], axes = [-1]) → dlm.lm_head (drops padded rows).
LogicalResult raiseSlicedLmHead(OnnxNode root, RaisingContext &context,
                                RewriterBase &rewriter) {
  auto head = matchLinear(root.input(0), context);
  if (!head)
    return context.reject("the sliced value is not x·Wᵀ");
  auto starts = context.ints(root.input(1)), ends = context.ints(root.input(2));
  auto axes = root.input(3) ? context.ints(root.input(3)) : SmallVector<int64_t>{0};
  auto steps = root.input(4) ? context.ints(root.input(4)) : SmallVector<int64_t>{1};
  int64_t rowsOfWeight = rankedType(head->weight).getDimSize(0);
  if (!starts || !ends || !axes || !steps || *starts != SmallVector<int64_t>{0} ||
      ends->size() != 1 || (*axes != SmallVector<int64_t>{-1} && *axes != SmallVector<int64_t>{1}) ||
      *steps != SmallVector<int64_t>{1} || (*ends)[0] <= 0)
    return context.mismatch("not a slice [0, V) of the last axis");
  return buildLmHead(root, *head, std::min((*ends)[0], rowsOfWeight), context, rewriter);
}

// An unsliced final x·Wᵀ that the graph returns.
LogicalResult raiseReturnedLmHead(OnnxNode root, RaisingContext &context,
                                  RewriterBase &rewriter) {
  if (!llvm::all_of(root.op()->getUsers(), [](Operation *u) { return isa<func::ReturnOp>(u); }))
    return context.reject("not a graph output");
  auto head = matchLinear(root.result(), context);
  if (!head)
    return context.reject("not x·Wᵀ");
  return buildLmHead(root, *head, rankedType(head->weight).getDimSize(0), context, rewriter);
}

// ---- shapes and glue ----------------------------------------------------------------------------

// [S, a*b] → [S, a, b] (split heads) and back (merge heads); the row count stays symbolic.
LogicalResult raiseReshape(OnnxNode root, RaisingContext &context, RewriterBase &rewriter) {
  Value x = root.input(0);
  auto xType = rankedType(x);
  auto shape = context.ints(root.input(1));
  if (!xType || !shape)
    return context.reject("input shape or target shape unknown");
  bool allowZero = root.intAttr("allowzero").value_or(0) != 0;
  auto leadingKept = [&](int64_t lead) {
    return lead == -1 || (lead == 0 && !allowZero) ||
           (!xType.isDynamicDim(0) && lead == xType.getDimSize(0));
  };
  // Products of the target (from the file) and of dims (dynamic ones are negative), checked.
  auto product = [](int64_t a, int64_t b) { return checkedElementCount(ArrayRef<int64_t>{a, b}); };
  Location loc = root.op()->getLoc();
  SmallVector<ReassociationIndices> groups{{0}, {1, 2}};
  if (xType.getRank() == 2 && shape->size() == 3 && leadingKept((*shape)[0]) &&
      (*shape)[1] > 0 && (*shape)[2] > 0 &&
      product((*shape)[1], (*shape)[2]) == xType.getDimSize(1)) {
    auto type = RankedTensorType::get({xType.getDimSize(0), (*shape)[1], (*shape)[2]},
                                      xType.getElementType());
    OpFoldResult count = xType.isDynamicDim(0)
                             ? OpFoldResult(tensor::DimOp::create(rewriter, loc, x, 0))
                             : OpFoldResult(rewriter.getIndexAttr(xType.getDimSize(0)));
    Value y = tensor::ExpandShapeOp::create(
        rewriter, loc, type, x, groups,
        SmallVector<OpFoldResult>{count, rewriter.getIndexAttr((*shape)[1]),
                                  rewriter.getIndexAttr((*shape)[2])});
    rewriter.replaceOp(root.op(), y);
    return success();
  }
  if (xType.getRank() == 3 && shape->size() == 2 && leadingKept((*shape)[0]) &&
      product(xType.getDimSize(1), xType.getDimSize(2)) == (*shape)[1] && (*shape)[1] > 0) {
    auto type = RankedTensorType::get({xType.getDimSize(0), (*shape)[1]},
                                      xType.getElementType());
    Value y = tensor::CollapseShapeOp::create(rewriter, loc, type, x, groups);
    rewriter.replaceOp(root.op(), y);
    return success();
  }
  return context.reject("only splitting or merging the trailing axis of [tokens, ...] is "
                        "raised, not " + shapeText(xType) + " to a shape of " +
                        std::to_string(shape->size()) + " axes");
}

// x + y of two activations of one type (residual connections).
LogicalResult raiseResidualAdd(OnnxNode root, RaisingContext &context, RewriterBase &rewriter) {
  Value a = root.input(0), b = root.input(1);
  auto aType = rankedType(a);
  if (!aType || aType != rankedType(b) || !aType.getElementType().isF32() ||
      weightOp(a, context) || weightOp(b, context))
    return context.reject("not a sum of two f32 activations of one shape");
  rewriter.replaceOp(root.op(), arith::AddFOp::create(rewriter, root.op()->getLoc(), a, b));
  return success();
}

// Nodes that pass their input through: Identity, and Cast to the type the input already has.
LogicalResult raisePassThrough(OnnxNode root, RaisingContext &context, RewriterBase &rewriter) {
  Value in = skipNoOps(root.result(), context);
  if (in == root.result())
    return context.reject("changes its input");
  rewriter.replaceOp(root.op(), in);
  return success();
}

} // namespace

void addTransformerPatterns(RaisingPatterns &patterns) {
  patterns.onOp("Gather", kMinOpset, "embedding", raiseEmbedding);
  patterns.onOp("Mul", kMinOpset, "rms_norm", raiseRmsNorm);
  // MatMul roots: the most specific reading first.
  patterns.onOp("MatMul", kMinOpset, "lm_head", raiseReturnedLmHead);
  patterns.onOp("MatMul", kMinOpset, "gated_mlp", raiseGatedMlp);
  patterns.onOp("MatMul", kMinOpset, "linear", raiseLinear);
  patterns.onOp("Gemm", kMinOpset, "linear", raiseLinear);
  patterns.onOp("Add", kMinOpset, "linear_bias", raiseLinear);
  patterns.onOp("Add", kMinOpset, "residual", raiseResidualAdd);
  patterns.onOp("Slice", kMinOpset, "lm_head", raiseSlicedLmHead);
  patterns.onOp("Reshape", kMinOpset, "heads", raiseReshape);
  patterns.onOp("Identity", kMinOpset, "pass_through", raisePassThrough);
  patterns.onOp("Cast", kMinOpset, "pass_through", raisePassThrough);
  // Inside the subgraphs above, and the shape arithmetic torch.onnx emits around them.
  patterns.covers({"Constant", "Pow", "ReduceMean", "Sqrt", "Reciprocal", "Div", "Sigmoid",
                   "Transpose", "Shape", "Unsqueeze", "Squeeze", "Concat", "Sub", "Neg",
                   "ConstantOfShape", "Expand", "Flatten"});
}

} // namespace dlm::importer::onnx
