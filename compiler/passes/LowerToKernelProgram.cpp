// dlm-lower-to-kernel-program: @forward as a flat, ordered list of kernel launches with a
// per-token-row memory plan (see Passes.td; the record format is runtime/schema/KernelOps.td).
//
// Why per token row: @forward's sequence dimension stays dynamic. A prompt's length is only known
// per request, and the denoise loop is data dependent (convergence, early stop at EOS), so neither
// shape specialisation nor a full unroll can give the forward one static shape. Every
// intermediate is [tokens, width], though, so a plan in elements per row scales with the token
// count at run time and keeps its non-overlap for every count.
//
// Three steps: (1) walk @forward, one record per kernel launch, each result a fresh value slot; a
// residual add of a GEMM's product becomes that GEMM's epilogue (`accumulate`: the product is
// added to the residual, as cuBLASLt's beta = 1 and oneDNN's sgemm do it for free); (2) plan in
// place where a kernel can overwrite an operand (rope, rms_norm, add, silu_mul: the first; an
// accumulating GEMM: the residual) and that operand's buffer is read by nothing later; (3) live
// ranges per buffer, packed by the arena planner (ArenaPlanner.h).
#include "compiler/passes/ArenaPlanner.h"
#include "compiler/passes/Passes.h"
#include "importer/model/CanonicalWeights.h"
#include "runtime/model/KernelProgram.h"

#include "llvm/ADT/EquivalenceClasses.h"
#include "llvm/ADT/StringMap.h"

#include <optional>

namespace dlm {
#define GEN_PASS_DEF_LOWERTOKERNELPROGRAMPASS
#include "compiler/passes/Passes.h.inc"
} // namespace dlm

using namespace mlir;
using namespace dlm::ir;
namespace kp = dlm::spec::kernels;

namespace {

struct Record {
  std::string kind, name;
  int64_t layer = -1;
  SmallVector<int64_t> operands;
  int64_t result = -1;  // slot; -1: none
  bool inPlace = false; // may overwrite operands[inPlaceOperand]
  size_t inPlaceOperand = 0;
  bool planned = true;  // the result lives in the workspace (not: the logits)
  SmallVector<NamedAttribute> attributes;
};

// "layers.3.q" (or a drafter's "draft.layers.3.q") → 3; -1 for names outside a layer.
int64_t layerOf(StringRef weightName) {
  weightName.consume_front(dlm::spec::kDraftPrefix);
  if (!weightName.consume_front("layers."))
    return -1;
  int64_t layer;
  if (weightName.consumeInteger(10, layer) || !weightName.starts_with("."))
    return -1;
  return layer;
}

// The canonical role of a weight name: "layers.3.q" → "q", "final_norm" → "final_norm".
class ProgramBuilder {
public:
  ProgramBuilder(func::FuncOp fn) : fn_(fn), b_(fn.getContext()) {}

  LogicalResult build();

private:
  InFlightDiagnostic unsupported(Operation *op, const Twine &what) {
    return op->emitError() << "dlm-lower-to-kernel-program: not supported yet: " << what;
  }

  int64_t newSlot(int64_t width) {
    slotWidth_.push_back(width);
    return static_cast<int64_t>(slotWidth_.size()) - 1;
  }
  int64_t rowWidth(Value value) {
    auto type = cast<RankedTensorType>(value.getType());
    int64_t width = 1;
    for (int64_t d : type.getShape().drop_front())
      width *= d;
    return width;
  }
  FailureOr<int64_t> slotOf(Operation *user, Value value) {
    auto it = slots_.find(value);
    if (it == slots_.end())
      return unsupported(user, "an operand that no kernel of the program produces");
    return it->second;
  }
  StringRef weightName(Value value) {
    auto weight = value.getDefiningOp<WeightOp>();
    return weight ? weight.getName() : StringRef();
  }
  void noteLayer(StringRef weight) {
    int64_t layer = layerOf(weight);
    if (layer >= 0)
      currentLayer_ = layer;
  }
  Record &add(StringRef kind, StringRef name, int64_t layer) {
    records_.push_back({kind.str(), name.str(), layer, {}, -1, false, 0, true, {}});
    return records_.back();
  }
  void setAttr(Record &r, StringRef key, Attribute value) {
    r.attributes.push_back(b_.getNamedAttr(key, value));
  }
  LogicalResult setWeight(Operation *op, Record &r, StringRef key, Value weight) {
    StringRef name = weightName(weight);
    if (name.empty())
      return unsupported(op, "a weight operand that is not a dlm.weight");
    setAttr(r, key, b_.getStringAttr(name));
    noteLayer(name);
    return success();
  }
  // The result of `op` in a fresh slot of its row width.
  void defineResult(Record &r, Value result) {
    r.result = newSlot(rowWidth(result));
    slots_[result] = r.result;
  }

  LogicalResult visit(Operation &op);
  bool foldIntoGemm(arith::AddFOp add, Value product, int64_t residual);
  LogicalResult lowerLinear(Operation *op, StringRef kind, Value input, Value norm, Value weight,
                            Value bias, std::optional<double> eps, Value result);
  LogicalResult lowerAttention(MaskedAttentionOp op);
  LogicalResult lowerGatedMlp(GatedMLPOp op);
  LogicalResult lowerMoe(MoEOp op);
  LogicalResult lowerLmHead(LMHeadOp op);
  LogicalResult checkReturn(func::ReturnOp ret);
  LogicalResult checkCapture(func::ReturnOp ret);
  LogicalResult lowerForwardInput();
  LogicalResult emitCapture(Operation *at);
  void plan();
  void attach();

  func::FuncOp fn_;
  Builder b_;
  DenseMap<Value, int64_t> slots_;
  SmallVector<int64_t> slotWidth_;
  SmallVector<Record> records_;
  DenseSet<Operation *> handled_; // folded into another record (final norm, logit shift tail)
  int64_t currentLayer_ = -1;
  int64_t attentionLayers_ = 0;
  bool logitShift_ = false;
  Value logits_;
  // The values @forward returns beside its logits (a DFlash target's hidden states), which one
  // capture record hands to the caller just before the LM head.
  SmallVector<Value> captured_;
  // Plan results.
  SmallVector<int64_t> slotOffset_;
  dlm::passes::ArenaPlan arena_;
};

LogicalResult ProgramBuilder::build() {
  if (fn_.getNumArguments() != 2 && fn_.getNumArguments() != 3)
    return fn_.emitError() << "dlm-lower-to-kernel-program: @" << fn_.getSymName()
                           << " must take (token ids, positions[, input rows]), got "
                           << fn_.getNumArguments() << " arguments";
  if (!fn_.getBody().hasOneBlock())
    return unsupported(fn_, "a forward with several blocks");
  slots_[fn_.getArgument(0)] = newSlot(1);
  slots_[fn_.getArgument(1)] = newSlot(1);
  // A function's first K/V layer: a drafter's follow its target's.
  if (auto base = fn_->getAttrOfType<IntegerAttr>("dlm.kv_layer_base"))
    attentionLayers_ = base.getInt();
  Block &body = fn_.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  if (failed(checkReturn(ret)) || failed(checkCapture(ret)) || failed(lowerForwardInput()))
    return failure();
  for (Operation &op : body.without_terminator())
    if (!handled_.contains(&op) && failed(visit(op)))
      return failure();
  if (!logits_ || !slots_.count(logits_))
    return unsupported(ret, "a forward that does not return the logits of a dlm.lm_head");
  plan();
  attach();
  return success();
}

// The forward returns the LM head's logits, or (Dream) those logits shifted by one row: row 0
// kept, row i taken from row i-1 — the concat of two slices of the same logits.
LogicalResult ProgramBuilder::checkReturn(func::ReturnOp ret) {
  if (ret.getNumOperands() != 1 && ret.getNumOperands() != 2)
    return unsupported(ret, "a forward with other than its logits and captured hidden states");
  Value value = ret.getOperand(0);
  if (auto concat = value.getDefiningOp<tensor::ConcatOp>()) {
    auto isRowSlice = [](Value v, std::optional<int64_t> size) -> Value {
      auto slice = v.getDefiningOp<tensor::ExtractSliceOp>();
      if (!slice || !slice.hasUnitStride() || !slice.getDroppedDims().none())
        return Value();
      ArrayRef<int64_t> offsets = slice.getStaticOffsets();
      if (llvm::any_of(offsets, [](int64_t o) { return o != 0; }))
        return Value();
      if (size && slice.getStaticSizes()[0] != *size)
        return Value();
      return slice.getSource();
    };
    if (concat.getDim() == 0 && concat.getInputs().size() == 2) {
      Value first = isRowSlice(concat.getInputs()[0], 1);
      Value rest = isRowSlice(concat.getInputs()[1], std::nullopt);
      if (first && first == rest && first.getDefiningOp<LMHeadOp>()) {
        logitShift_ = true;
        logits_ = first;
        handled_.insert(concat);
        handled_.insert(concat.getInputs()[0].getDefiningOp());
        handled_.insert(concat.getInputs()[1].getDefiningOp());
        return success();
      }
    }
    return unsupported(ret, "a forward whose result is a concat other than the logit shift");
  }
  if (!value.getDefiningOp<LMHeadOp>())
    return unsupported(ret, "a forward that does not return the logits of a dlm.lm_head");
  logits_ = value;
  return success();
}

// A second result: the hidden states a drafter reads, one value or a column concat of several.
LogicalResult ProgramBuilder::checkCapture(func::ReturnOp ret) {
  if (ret.getNumOperands() < 2)
    return success();
  Value features = ret.getOperand(1);
  if (auto concat = features.getDefiningOp<tensor::ConcatOp>()) {
    if (concat.getDim() != 1)
      return unsupported(ret, "captured hidden states concatenated other than by columns");
    captured_.append(concat.getInputs().begin(), concat.getInputs().end());
    handled_.insert(concat);
  } else {
    captured_.push_back(features);
  }
  return success();
}

// An input-rows argument that is not a soft embedding's logits: the forward_input record puts
// the rows in a slot first.
LogicalResult ProgramBuilder::lowerForwardInput() {
  if (fn_.getNumArguments() != 3)
    return success();
  Value input = fn_.getArgument(2);
  if (llvm::all_of(input.getUsers(), [](Operation *user) { return isa<SoftEmbeddingOp>(user); }))
    return success();
  if (llvm::any_of(input.getUsers(), [](Operation *user) { return isa<SoftEmbeddingOp>(user); }))
    return unsupported(fn_, "input rows read both as a soft embedding's logits and as rows");
  Record &r = add(kp::kForwardInput, "forward_input", -1);
  defineResult(r, input);
  return success();
}

LogicalResult ProgramBuilder::emitCapture(Operation *at) {
  if (captured_.empty())
    return success();
  Record &r = add(kp::kCapture, "capture", -1);
  for (Value value : captured_) {
    FailureOr<int64_t> slot = slotOf(at, value);
    if (failed(slot))
      return failure();
    r.operands.push_back(*slot);
  }
  return success();
}

LogicalResult ProgramBuilder::visit(Operation &op) {
  // Index arithmetic (tensor.dim, the shift's size) and weights are no kernels.
  if (isa<WeightOp, arith::ConstantOp, tensor::DimOp>(op) ||
      (op.getNumResults() > 0 &&
       llvm::none_of(op.getResultTypes(), [](Type t) { return isa<ShapedType>(t); })))
    return success();
  if (isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(op)) {
    // The same row in another shape: the same slot.
    FailureOr<int64_t> source = slotOf(&op, op.getOperand(0));
    if (failed(source))
      return failure();
    // Only reshapes within a token's row keep the per-row plan.
    auto resultType = cast<RankedTensorType>(op.getResult(0).getType());
    if (llvm::any_of(resultType.getShape().drop_front(), ShapedType::isDynamic) ||
        rowWidth(op.getResult(0)) != slotWidth_[*source])
      return unsupported(&op, "a reshape that changes the row of a token");
    slots_[op.getResult(0)] = *source;
    return success();
  }
  if (auto embedding = dyn_cast<EmbeddingOp>(op)) {
    if (embedding.getIds() != fn_.getArgument(0))
      return unsupported(&op, "an embedding of other ids than the forward's token ids");
    Record &r = add(kp::kEmbedding, "embedding", -1);
    r.operands.push_back(kp::kTokensSlot);
    if (failed(setWeight(&op, r, kp::kWeight, embedding.getTable())))
      return failure();
    if (embedding.getScale().convertToFloat() != 1.0f)
      setAttr(r, kp::kScaleParameter, embedding.getScaleAttr());
    defineResult(r, embedding.getResult());
    return success();
  }
  if (auto norm = dyn_cast<RMSNormOp>(op)) {
    // The final norm folds into the LM head, which normalises only the rows it decodes.
    if (norm->hasOneUse() && isa<LMHeadOp>(*norm->user_begin()))
      return success();
    FailureOr<int64_t> input = slotOf(&op, norm.getInput());
    if (failed(input))
      return failure();
    StringRef role = norm.getWeight() ? kp::weightRole(weightName(norm.getWeight())) : "";
    Record &r = add(kp::kRmsNorm, role.ends_with("norm") ? role : "rms_norm", -1);
    r.operands.push_back(*input);
    r.inPlace = true;
    if (norm.getWeight()) {
      if (failed(setWeight(&op, r, kp::kWeight, norm.getWeight())))
        return failure();
    } else {
      auto type = cast<RankedTensorType>(norm.getInput().getType());
      setAttr(r, kp::kNormWidth, b_.getI64IntegerAttr(type.getShape().back()));
    }
    r.layer = currentLayer_;
    setAttr(r, kp::kEps, norm.getEpsAttr());
    defineResult(r, norm.getResult());
    return success();
  }
  if (auto linear = dyn_cast<NormLinearOp>(op))
    return lowerLinear(&op, kp::kNormLinear, linear.getInput(), linear.getNormWeight(),
                       linear.getWeight(), linear.getBias(), linear.getEps().convertToDouble(),
                       linear.getResult());
  if (auto linear = dyn_cast<LinearOp>(op))
    return lowerLinear(&op, kp::kLinear, linear.getInput(), Value(), linear.getWeight(),
                       linear.getBias(), std::nullopt, linear.getResult());
  if (auto rope = dyn_cast<RoPEOp>(op)) {
    if (rope.getPositions() != fn_.getArgument(1))
      return unsupported(&op, "rope at other positions than the forward's");
    auto type = cast<RankedTensorType>(rope.getInput().getType());
    if (type.getRank() != 3)
      return unsupported(&op, "rope over a tensor that is not [tokens, heads, head_dim]");
    FailureOr<int64_t> input = slotOf(&op, rope.getInput());
    if (failed(input))
      return failure();
    Record &r = add(kp::kRope, "rope", currentLayer_);
    r.operands = {*input, kp::kPositionsSlot};
    r.inPlace = true;
    setAttr(r, kp::kTheta, rope.getThetaAttr());
    setAttr(r, kp::kHeadDim, b_.getI64IntegerAttr(type.getDimSize(2)));
    if (rope.getRotaryDim() && static_cast<int64_t>(*rope.getRotaryDim()) != type.getDimSize(2))
      setAttr(r, kp::kRotaryDim, rope.getRotaryDimAttr());
    if (rope.getRotatedPairs() &&
        static_cast<int64_t>(*rope.getRotatedPairs()) != type.getDimSize(2) / 2)
      setAttr(r, kp::kRotatedPairs, rope.getRotatedPairsAttr());
    defineResult(r, rope.getResult());
    return success();
  }
  if (auto scale = dyn_cast<ScaleOp>(op)) {
    FailureOr<int64_t> input = slotOf(&op, scale.getInput());
    if (failed(input))
      return failure();
    Record &r = add(kp::kScale, "scale", -1);
    r.operands.push_back(*input);
    r.inPlace = true;
    if (failed(setWeight(&op, r, kp::kWeight, scale.getFactor())))
      return failure();
    StringRef role = kp::weightRole(weightName(scale.getFactor()));
    r.name = role.str();
    r.layer = currentLayer_;
    defineResult(r, scale.getResult());
    return success();
  }
  if (auto soft = dyn_cast<SoftEmbeddingOp>(op)) {
    if (fn_.getNumArguments() != 3 || soft.getLogits() != fn_.getArgument(2))
      return unsupported(&op, "a soft embedding of other logits than the forward's input rows");
    Record &r = add(kp::kSoftEmbedding, "soft_embedding", -1);
    if (failed(setWeight(&op, r, kp::kWeight, soft.getTable())))
      return failure();
    setAttr(r, kp::kScaleParameter, soft.getScaleAttr());
    if (IntegerAttr maskToken = soft.getMaskTokenAttr())
      setAttr(r, kp::kMaskToken, maskToken);
    defineResult(r, soft.getResult());
    return success();
  }
  if (auto moe = dyn_cast<MoEOp>(op))
    return lowerMoe(moe);
  if (auto select = dyn_cast<SelectInputRowsOp>(op)) {
    FailureOr<int64_t> withInput = slotOf(&op, select.getWithInput()),
                       others = slotOf(&op, select.getOthers());
    if (failed(withInput) || failed(others))
      return failure();
    Record &r = add(kp::kSelectInputRows, "select_input_rows", currentLayer_);
    r.operands = {*withInput, *others};
    defineResult(r, select.getResult());
    return success();
  }
  if (auto attention = dyn_cast<MaskedAttentionOp>(op))
    return lowerAttention(attention);
  if (auto addf = dyn_cast<arith::AddFOp>(op)) {
    FailureOr<int64_t> lhs = slotOf(&op, addf.getLhs()), rhs = slotOf(&op, addf.getRhs());
    if (failed(lhs) || failed(rhs))
      return failure();
    if (foldIntoGemm(addf, addf.getRhs(), *lhs) || foldIntoGemm(addf, addf.getLhs(), *rhs))
      return success();
    Record &r = add(kp::kAdd, "residual_add", currentLayer_);
    r.operands = {*lhs, *rhs};
    r.inPlace = true;
    defineResult(r, addf.getResult());
    return success();
  }
  if (auto mlp = dyn_cast<GatedMLPOp>(op))
    return lowerGatedMlp(mlp);
  if (auto head = dyn_cast<LMHeadOp>(op))
    return lowerLmHead(head);
  return unsupported(&op, "'" + op.getName().getStringRef() + "' in a cpu kernel program");
}

// `add` = residual + product, where product is the only use of what the record just emitted, a
// GEMM (linear, norm_linear, or the gated MLP's down projection), computed: that GEMM accumulates
// into the residual instead, and the add is no launch of its own.
bool ProgramBuilder::foldIntoGemm(arith::AddFOp add, Value product, int64_t residual) {
  if (records_.empty() || !product.hasOneUse() ||
      !isa_and_nonnull<LinearOp, NormLinearOp, GatedMLPOp>(product.getDefiningOp()))
    return false;
  Record &gemm = records_.back();
  auto it = slots_.find(product);
  if ((gemm.kind != kp::kLinear && gemm.kind != kp::kNormLinear) || it == slots_.end() ||
      it->second != gemm.result || gemm.operands.size() != 1 ||
      slotWidth_[residual] != slotWidth_[gemm.result])
    return false;
  // x + linear(x): the GEMM would overwrite its own input in place. (norm_linear reads a
  // normalised copy of x, so it may.)
  if (gemm.kind == kp::kLinear && gemm.operands[0] == residual)
    return false;
  gemm.operands.push_back(residual);
  gemm.inPlace = true;
  gemm.inPlaceOperand = 1;
  setAttr(gemm, kp::kAccumulate, b_.getBoolAttr(true));
  slots_[add.getResult()] = gemm.result;
  return true;
}

LogicalResult ProgramBuilder::lowerLinear(Operation *op, StringRef kind, Value input, Value norm,
                                          Value weight, Value bias, std::optional<double> eps,
                                          Value result) {
  FailureOr<int64_t> in = slotOf(op, input);
  if (failed(in))
    return failure();
  StringRef role = kp::weightRole(weightName(weight));
  bool projection = llvm::is_contained({"q", "k", "v", "o", "gate", "up", "down"}, role);
  Record &r = add(kind, projection ? (role + "_proj").str() : kind.str(), -1);
  r.operands.push_back(*in);
  if (norm && failed(setWeight(op, r, kp::kNormWeight, norm)))
    return failure();
  if (failed(setWeight(op, r, kp::kWeight, weight)))
    return failure();
  if (bias && failed(setWeight(op, r, kp::kBias, bias)))
    return failure();
  if (eps)
    setAttr(r, kp::kEps, b_.getF64FloatAttr(*eps));
  r.layer = currentLayer_;
  defineResult(r, result);
  return success();
}

LogicalResult ProgramBuilder::lowerAttention(MaskedAttentionOp op) {
  if (op.getQueryPositions() || op.getBlockTable())
    return unsupported(op, "attention with explicit positions or pages in @forward");
  // A window is the record's: causal (sliding_window) or over the keys before the fed span
  // (prefix_window), runtime/model/KernelProgram.h.
  StringRef mask;
  switch (op.getMask()) {
  case MaskKind::causal:
  case MaskKind::sliding_window:
    mask = "causal";
    break;
  case MaskKind::bidirectional:
  case MaskKind::prefix_window:
    mask = "bidirectional";
    break;
  case MaskKind::block_causal:
    mask = "block_causal";
    break;
  default:
    return unsupported(op, "attention mask '" + stringifyMaskKind(op.getMask()) +
                               "' in a kernel program");
  }
  FailureOr<int64_t> q = slotOf(op, op.getQuery()), k = slotOf(op, op.getKey()),
                     v = slotOf(op, op.getValue());
  if (failed(q) || failed(k) || failed(v))
    return failure();
  auto qType = cast<RankedTensorType>(op.getQuery().getType());
  auto kType = cast<RankedTensorType>(op.getKey().getType());
  auto vType = cast<RankedTensorType>(op.getValue().getType());
  if (vType.getDimSize(2) != kType.getDimSize(2))
    return unsupported(op, "attention whose values have another head size than its keys");
  // The KV cache has one layer per attention, in program order.
  int64_t layer = attentionLayers_++;
  Record &store = add(kp::kKvStore, "kv_store", layer);
  store.operands = {*k, *v};
  Record &r = add(kp::kAttention, "attention", layer);
  r.operands = {*q, *k, *v};
  setAttr(r, kp::kMask, b_.getStringAttr(mask));
  setAttr(r, kp::kHeads, b_.getI64IntegerAttr(qType.getDimSize(1)));
  setAttr(r, kp::kKvHeads, b_.getI64IntegerAttr(kType.getDimSize(1)));
  setAttr(r, kp::kHeadDim, b_.getI64IntegerAttr(qType.getDimSize(2)));
  if (op.getWindow())
    setAttr(r, kp::kWindow, op.getWindowAttr());
  if (op.getBlockSize())
    setAttr(r, kp::kBlockSize, op.getBlockSizeAttr());
  if (op.getScale())
    setAttr(r, kp::kScaleParameter, op.getScaleAttr());
  defineResult(r, op.getResult());
  return success();
}

// Four launches, as the CPU runs it: gate and up projections, act(gate) * up into the gate's
// buffer (silu_mul or gelu_mul), the down projection.
LogicalResult ProgramBuilder::lowerGatedMlp(GatedMLPOp op) {
  FailureOr<int64_t> input = slotOf(op, op.getInput());
  if (failed(input))
    return failure();
  auto intermediate = cast<RankedTensorType>(op.getGate().getType()).getDimSize(0);
  auto projection = [&](StringRef name, Value weight, int64_t in, int64_t width) -> int64_t {
    Record &r = add(kp::kLinear, name, -1);
    r.operands.push_back(in);
    (void)setWeight(op, r, kp::kWeight, weight); // a dlm.weight: checked below
    r.layer = currentLayer_;
    r.result = newSlot(width);
    return r.result;
  };
  for (Value w : {op.getGate(), op.getUp(), op.getDown()})
    if (!w.getDefiningOp<WeightOp>())
      return unsupported(op, "a weight operand that is not a dlm.weight");
  int64_t gate = projection("gate_proj", op.getGate(), *input, intermediate);
  int64_t up = projection("up_proj", op.getUp(), *input, intermediate);
  const bool silu = op.getActivation() == Activation::silu;
  Record &mul = add(silu ? kp::kSiluMul : kp::kGeluMul, silu ? "silu_mul" : "gelu_mul",
                    currentLayer_);
  mul.operands = {gate, up};
  mul.inPlace = true;
  mul.result = newSlot(intermediate);
  int64_t activated = mul.result;
  int64_t down = projection("down_proj", op.getDown(), activated, rowWidth(op.getResult()));
  slots_[op.getResult()] = down;
  return success();
}

// One launch: routing and the experts' grouped GEMMs are the kernel's business.
LogicalResult ProgramBuilder::lowerMoe(MoEOp op) {
  FailureOr<int64_t> router = slotOf(op, op.getRouterInput()), input = slotOf(op, op.getInput());
  if (failed(router) || failed(input))
    return failure();
  Record &r = add(kp::kMoe, "moe", -1);
  r.operands = {*router, *input};
  for (auto [key, weight] : {std::pair<StringRef, Value>{kp::kRouter, op.getRouter()},
                             {kp::kRouterScale, op.getRouterScale()},
                             {kp::kExpertScale, op.getExpertScale()},
                             {kp::kExpertBias, op.getExpertBias()},
                             {kp::kGateUp, op.getGateUp()},
                             {kp::kDownWeight, op.getDown()}})
    if (weight && failed(setWeight(op, r, key, weight)))
      return failure();
  auto gateUp = cast<RankedTensorType>(op.getGateUp().getType());
  setAttr(r, kp::kExperts, b_.getI64IntegerAttr(gateUp.getDimSize(0)));
  setAttr(r, kp::kTopK, op.getTopKAttr());
  // Without eps the router reads its input as it is (the record's router_norm defaults to true).
  if (FloatAttr eps = op.getEpsAttr()) {
    setAttr(r, kp::kEps, eps);
    setAttr(r, kp::kRouterInputScale, op.getRouterInputScaleAttr());
  } else {
    setAttr(r, kp::kRouterNorm, b_.getBoolAttr(false));
  }
  if (!op.getNormalizeTopK())
    setAttr(r, kp::kNormalizeTopK, b_.getBoolAttr(false));
  if (op.getSigmoidScores())
    setAttr(r, kp::kSigmoidScores, b_.getBoolAttr(true));
  if (op.getGroups() != 1) {
    setAttr(r, kp::kGroups, op.getGroupsAttr());
    setAttr(r, kp::kTopGroups, op.getTopGroupsAttr());
  }
  if (op.getRoutedScale().convertToDouble() != 1.0)
    setAttr(r, kp::kRoutedScale, op.getRoutedScaleAttr());
  setAttr(r, kp::kActivation, b_.getStringAttr(stringifyActivation(op.getActivation())));
  r.layer = currentLayer_;
  defineResult(r, op.getResult());
  return success();
}

LogicalResult ProgramBuilder::lowerLmHead(LMHeadOp op) {
  if (op.getResult() != logits_)
    return unsupported(op, "a dlm.lm_head whose logits the forward does not return");
  if (failed(emitCapture(op)))
    return failure();
  Value input = op.getInput();
  auto norm = input.getDefiningOp<RMSNormOp>();
  if (norm && !norm->hasOneUse())
    norm = nullptr;
  FailureOr<int64_t> in = slotOf(op, norm ? norm.getInput() : input);
  if (failed(in))
    return failure();
  Record &r = add(kp::kLmHead, "lm_head", -1);
  r.operands.push_back(*in);
  if (norm) {
    if (failed(setWeight(op, r, kp::kNormWeight, norm.getWeight())))
      return failure();
    setAttr(r, kp::kEps, norm.getEpsAttr());
  }
  if (failed(setWeight(op, r, kp::kWeight, op.getWeight())))
    return failure();
  setAttr(r, kp::kLogitShift, b_.getBoolAttr(logitShift_));
  if (op.getSoftcap())
    setAttr(r, kp::kSoftcap, op.getSoftcapAttr());
  r.layer = -1;
  r.planned = false; // the logits go to the caller's buffer, only the rows it asks for
  defineResult(r, op.getResult());
  return success();
}

void ProgramBuilder::plan() {
  const int64_t slotCount = static_cast<int64_t>(slotWidth_.size());
  SmallVector<int64_t> definedAt(slotCount, -1), lastRead(slotCount, -1);
  SmallVector<bool> planned(slotCount, false);
  for (auto [position, r] : llvm::enumerate(records_)) {
    for (int64_t operand : r.operands)
      lastRead[operand] = static_cast<int64_t>(position);
    if (r.result >= 0) {
      definedAt[r.result] = static_cast<int64_t>(position);
      planned[r.result] = r.planned;
    }
  }
  // In place: the result joins its in-place operand's buffer when nothing after this record
  // reads any value of that buffer.
  llvm::EquivalenceClasses<int64_t> buffers;
  for (int64_t slot = kp::kFirstResultSlot; slot < slotCount; ++slot)
    if (planned[slot])
      buffers.insert(slot);
  DenseMap<int64_t, int64_t> bufferLastRead; // leader → last read
  for (int64_t slot = kp::kFirstResultSlot; slot < slotCount; ++slot)
    if (planned[slot])
      bufferLastRead[slot] = std::max(lastRead[slot], definedAt[slot]);
  for (auto [position, r] : llvm::enumerate(records_)) {
    if (!r.inPlace || r.result < 0 || !planned[r.result])
      continue;
    int64_t operand = r.operands[r.inPlaceOperand];
    if (operand < kp::kFirstResultSlot || slotWidth_[operand] != slotWidth_[r.result])
      continue;
    int64_t leader = buffers.getLeaderValue(operand);
    if (bufferLastRead[leader] != static_cast<int64_t>(position))
      continue;
    int64_t resultLast = bufferLastRead[buffers.getLeaderValue(r.result)];
    buffers.unionSets(operand, r.result);
    bufferLastRead[buffers.getLeaderValue(operand)] = resultLast;
  }
  // One arena buffer per class, live from its first definition to its last read.
  SmallVector<int64_t> leaders;
  DenseMap<int64_t, size_t> index;
  std::vector<dlm::passes::ArenaBuffer> arena;
  for (int64_t slot = kp::kFirstResultSlot; slot < slotCount; ++slot) {
    if (!planned[slot])
      continue;
    int64_t leader = buffers.getLeaderValue(slot);
    auto [it, fresh] = index.try_emplace(leader, arena.size());
    if (fresh)
      arena.push_back({definedAt[slot], definedAt[slot], slotWidth_[slot]});
    dlm::passes::ArenaBuffer &buffer = arena[it->second];
    buffer.first = std::min(buffer.first, definedAt[slot]);
    buffer.last = std::max({buffer.last, definedAt[slot], lastRead[slot]});
  }
  arena_ = dlm::passes::planArena(arena, kp::kRowAlignmentElements);
  slotOffset_.assign(slotCount, -1);
  for (int64_t slot = kp::kFirstResultSlot; slot < slotCount; ++slot)
    if (planned[slot])
      slotOffset_[slot] = arena[index[buffers.getLeaderValue(slot)]].offset;
}

// Record names are unique within a target: "layers.0.q_proj", and "#2", "#3" on repeats
// ("layers.0.rope", "layers.0.rope#2"); a function other than @forward prefixes its name
// ("decode.layers.0.q_proj").
void ProgramBuilder::attach() {
  SmallVector<Attribute> program;
  llvm::StringMap<int> seen;
  const std::string prefix =
      fn_.getSymName() == StringRef(kp::kDefaultFunction) ? "" : (fn_.getSymName() + ".").str();
  for (const Record &r : records_) {
    std::string name =
        prefix + (r.layer >= 0 ? "layers." + std::to_string(r.layer) + "." + r.name : r.name);
    int repeat = ++seen[name];
    if (repeat > 1)
      name += "#" + std::to_string(repeat);
    SmallVector<NamedAttribute> entries = {
        b_.getNamedAttr("kind", b_.getStringAttr(r.kind)),
        b_.getNamedAttr("name", b_.getStringAttr(name)),
        b_.getNamedAttr(kp::kLayer, b_.getI64IntegerAttr(r.layer)),
        b_.getNamedAttr(kp::kOperands, b_.getDenseI64ArrayAttr(r.operands))};
    if (!prefix.empty())
      entries.push_back(b_.getNamedAttr(kp::kFunction, fn_.getSymNameAttr()));
    if (r.result >= 0) {
      entries.push_back(b_.getNamedAttr(kp::kResult, b_.getI64IntegerAttr(r.result)));
      entries.push_back(b_.getNamedAttr(kp::kWidth, b_.getI64IntegerAttr(slotWidth_[r.result])));
      if (slotOffset_[r.result] >= 0)
        entries.push_back(
            b_.getNamedAttr(kp::kOffset, b_.getI64IntegerAttr(slotOffset_[r.result])));
    }
    entries.append(r.attributes.begin(), r.attributes.end());
    program.push_back(b_.getDictionaryAttr(entries));
  }
  fn_->setAttr("dlm.kernel_program", b_.getArrayAttr(program));
  fn_->setAttr("dlm.workspace_row_elements", b_.getI64IntegerAttr(arena_.arenaSize));
  fn_->setAttr("dlm.unplanned_row_elements", b_.getI64IntegerAttr(arena_.unplannedSize));
}

struct LowerToKernelProgramPass
    : dlm::impl::LowerToKernelProgramPassBase<LowerToKernelProgramPass> {
  using LowerToKernelProgramPassBase::LowerToKernelProgramPassBase;

  void runOnOperation() override {
    SmallVector<StringRef> functions{function};
    if (auto listed = getOperation()->getAttrOfType<ArrayAttr>("dlm.forward_functions")) {
      functions.clear();
      for (Attribute name : listed)
        functions.push_back(cast<StringAttr>(name).getValue());
    }
    for (StringRef name : functions) {
      auto fn = getOperation().lookupSymbol<func::FuncOp>(name);
      if (!fn || fn.isExternal()) {
        getOperation().emitError() << "dlm-lower-to-kernel-program: no function @" << name;
        return signalPassFailure();
      }
      ProgramBuilder builder(fn);
      if (failed(builder.build()))
        return signalPassFailure();
    }
  }
};

} // namespace
