// @forward(ids: tensor<?xi32>, positions: tensor<?xi32>) -> tensor<?xVxf32>, one layer at a time:
//   x = embed(ids)
//   per layer: x += o(attention(rope(q(norm x)), rope(k(norm x)), v(norm x)));
//              x += mlp(norm x)
//   logits = lm_head(norm x)   (shifted by one row for Dream)
#include "importer/ir/ForwardBuilder.h"

#include "compiler/dialects/dlm/DlmDialect.h"
#include "importer/model/CanonicalWeights.h"
#include "runtime/model/ModelSpec.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"

#include <map>

namespace dlm::importer {
namespace {

using namespace mlir;

class ForwardBuilder {
public:
  ForwardBuilder(MLIRContext &context, const ModelDescription &model,
                 const std::vector<Type> &weightTypes)
      : model_(model), config_(model.config), b_(&context), loc_(b_.getUnknownLoc()) {
    for (size_t i = 0; i < model.weights.size(); ++i)
      weights_[model.weights[i].canonicalName] = {&model.weights[i], weightTypes[i]};
  }

  OwningOpRef<ModuleOp> build() {
    OwningOpRef<ModuleOp> module = ModuleOp::create(loc_);
    describeModule(*module);
    b_.setInsertionPointToEnd(module->getBody());

    Type i32 = b_.getI32Type();
    auto ids = RankedTensorType::get({ShapedType::kDynamic}, i32);
    auto logitsType =
        RankedTensorType::get({ShapedType::kDynamic, config_.vocabSize}, b_.getF32Type());
    auto fn = func::FuncOp::create(b_, loc_, "forward",
                                   b_.getFunctionType({ids, ids}, {logitsType}));
    Block *entry = fn.addEntryBlock();
    b_.setInsertionPointToStart(entry);
    Value tokens = entry->getArgument(0), positions = entry->getArgument(1);
    length_ = tensor::DimOp::create(b_, loc_, tokens, 0);

    Value x = EmbeddingOp::create(b_, loc_, activations(config_.hiddenSize), tokens,
                                  weight(spec::kEmbed), b_.getF32FloatAttr(1.0f));
    for (int64_t layer = 0; layer < config_.numLayers; ++layer)
      x = buildLayer(layer, x, positions);
    Value h = rmsNorm(x, weight(spec::kFinalNorm));
    Value head = config_.tiedEmbeddings ? weight(spec::kEmbed) : weight(spec::kLmHead);
    Value logits = LMHeadOp::create(b_, loc_, logitsType, h, head, FloatAttr());
    if (model_.traits.logitShift)
      logits = shiftLogits(logits, logitsType);
    func::ReturnOp::create(b_, loc_, logits);
    return module;
  }

private:
  using EmbeddingOp = dlm::ir::EmbeddingOp;
  using LMHeadOp = dlm::ir::LMHeadOp;

  void describeModule(ModuleOp module) {
    auto i64 = [&](int64_t v) { return b_.getI64IntegerAttr(v); };
    std::vector<Attribute> eos;
    for (int64_t id : config_.eosTokenIds)
      eos.push_back(i64(id));
    module->setAttr("dlm.architecture", b_.getStringAttr(config_.architecture));
    module->setAttr("dlm.family", b_.getStringAttr(model_.family));
    module->setAttr("dlm.vocab_size", i64(config_.vocabSize));
    module->setAttr("dlm.hidden_size", i64(config_.hiddenSize));
    module->setAttr("dlm.num_layers", i64(config_.numLayers));
    module->setAttr("dlm.num_kv_heads", i64(config_.numKvHeads));
    module->setAttr("dlm.head_dim", i64(config_.headDim));
    module->setAttr("dlm.max_positions", i64(config_.maxPositions));
    module->setAttr("dlm.mask_token_id", i64(config_.maskTokenId));
    module->setAttr("dlm.eos_token_ids", b_.getArrayAttr(eos));
  }

  RankedTensorType activations(int64_t width) {
    return RankedTensorType::get({ShapedType::kDynamic, width}, b_.getF32Type());
  }
  RankedTensorType heads(int64_t count) {
    return RankedTensorType::get({ShapedType::kDynamic, count, config_.headDim},
                                 b_.getF32Type());
  }

  // One dlm.weight per canonical weight, created on first use.
  Value weight(std::string_view canonicalName) {
    auto &[binding, elementType] = weights_.at(std::string(canonicalName));
    auto found = created_.find(binding->canonicalName);
    if (found != created_.end())
      return found->second;
    auto type = RankedTensorType::get(binding->shape, elementType);
    Value value = dlm::ir::WeightOp::create(b_, loc_, type, binding->checkpointName);
    created_[binding->canonicalName] = value;
    return value;
  }
  Value layerWeightValue(int64_t layer, std::string_view role) {
    return weight(spec::layerWeightName(layer, role));
  }
  bool hasLayerWeight(int64_t layer, std::string_view role) const {
    return weights_.count(spec::layerWeightName(layer, role)) != 0;
  }

  Value rmsNorm(Value x, Value w) {
    return dlm::ir::RMSNormOp::create(b_, loc_, x.getType(), x, w,
                                      b_.getF64FloatAttr(config_.rmsNormEps));
  }

  Value linear(Value x, Value w, Value bias, int64_t outWidth) {
    return dlm::ir::LinearOp::create(b_, loc_, activations(outWidth), x, w, bias);
  }

  // [S, n*hd] <-> [S, n, hd]
  Value splitHeads(Value x, int64_t count) {
    SmallVector<OpFoldResult> shape{length_, b_.getIndexAttr(count),
                                    b_.getIndexAttr(config_.headDim)};
    return tensor::ExpandShapeOp::create(b_, loc_, heads(count), x,
                                         SmallVector<ReassociationIndices>{{0}, {1, 2}}, shape);
  }
  Value mergeHeads(Value x, int64_t count) {
    return tensor::CollapseShapeOp::create(b_, loc_, activations(count * config_.headDim), x,
                                           SmallVector<ReassociationIndices>{{0}, {1, 2}});
  }

  Value buildLayer(int64_t layer, Value x, Value positions) {
    const int64_t qHeads = config_.numHeads, kvHeads = config_.numKvHeads,
                  hd = config_.headDim;
    auto optional = [&](std::string_view role) {
      return hasLayerWeight(layer, role) ? layerWeightValue(layer, role) : Value();
    };
    Value h = rmsNorm(x, layerWeightValue(layer, spec::kAttnNorm));
    Value q = splitHeads(linear(h, layerWeightValue(layer, spec::kQ), optional(spec::kQBias),
                                qHeads * hd),
                         qHeads);
    Value k = splitHeads(linear(h, layerWeightValue(layer, spec::kK), optional(spec::kKBias),
                                kvHeads * hd),
                         kvHeads);
    Value v = splitHeads(linear(h, layerWeightValue(layer, spec::kV), optional(spec::kVBias),
                                kvHeads * hd),
                         kvHeads);
    if (model_.traits.qkNorm) {
      q = rmsNorm(q, layerWeightValue(layer, spec::kQNorm));
      k = rmsNorm(k, layerWeightValue(layer, spec::kKNorm));
    }
    FloatAttr theta = b_.getF64FloatAttr(config_.ropeTheta);
    q = dlm::ir::RoPEOp::create(b_, loc_, q.getType(), q, positions, theta, IntegerAttr());
    k = dlm::ir::RoPEOp::create(b_, loc_, k.getType(), k, positions, theta, IntegerAttr());
    auto mask = config_.attentionMask == artifact::AttentionMaskKind::causal
                    ? dlm::ir::MaskKind::causal
                    : dlm::ir::MaskKind::bidirectional;
    Value attended = dlm::ir::MaskedAttentionOp::create(
        b_, loc_, heads(qHeads), q, k, v, Value(), Value(), Value(), mask, IntegerAttr(),
        IntegerAttr(), FloatAttr());
    Value out = linear(mergeHeads(attended, qHeads), layerWeightValue(layer, spec::kO), Value(),
                       config_.hiddenSize);
    x = arith::AddFOp::create(b_, loc_, x, out);

    Value m = rmsNorm(x, layerWeightValue(layer, spec::kMlpNorm));
    m = dlm::ir::GatedMLPOp::create(b_, loc_, m.getType(), m, layerWeightValue(layer, spec::kGate),
                                    layerWeightValue(layer, spec::kUp), layerWeightValue(layer, spec::kDown),
                                    dlm::ir::Activation::silu);
    return arith::AddFOp::create(b_, loc_, x, m);
  }

  // Dream predicts token i from position i-1: row 0 keeps its own logits, row i takes row i-1.
  Value shiftLogits(Value logits, RankedTensorType type) {
    Value one = arith::ConstantIndexOp::create(b_, loc_, 1);
    Value rest = arith::SubIOp::create(b_, loc_, length_, one);
    auto rowsType = RankedTensorType::get({1, config_.vocabSize}, b_.getF32Type());
    SmallVector<OpFoldResult> zero{b_.getIndexAttr(0), b_.getIndexAttr(0)};
    SmallVector<OpFoldResult> unit{b_.getIndexAttr(1), b_.getIndexAttr(1)};
    Value first = tensor::ExtractSliceOp::create(
        b_, loc_, rowsType, logits, zero,
        SmallVector<OpFoldResult>{b_.getIndexAttr(1), b_.getIndexAttr(config_.vocabSize)}, unit);
    Value previous = tensor::ExtractSliceOp::create(
        b_, loc_, type, logits, zero,
        SmallVector<OpFoldResult>{rest, b_.getIndexAttr(config_.vocabSize)}, unit);
    return tensor::ConcatOp::create(b_, loc_, type, 0, ValueRange{first, previous});
  }

  const ModelDescription &model_;
  const artifact::ModelConfig &config_;
  OpBuilder b_;
  Location loc_;
  Value length_;
  std::map<std::string, std::pair<const WeightBinding *, Type>> weights_;
  std::map<std::string, Value> created_;
};

} // namespace

OwningOpRef<ModuleOp> buildForwardModule(MLIRContext &context, const ModelDescription &model,
                                         const std::vector<Type> &weightTypes) {
  context.loadDialect<dlm::ir::DlmDialect, func::FuncDialect, arith::ArithDialect,
                      tensor::TensorDialect>();
  return ForwardBuilder(context, model, weightTypes).build();
}

} // namespace dlm::importer
