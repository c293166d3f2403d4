// The model's forward functions as dlm IR. For every family but DiffusionGemma one,
// @forward(ids: tensor<?xi32>, positions: tensor<?xi32>) -> tensor<?xVxf32>, one layer at a time:
//   x = embed(ids)
//   per layer: x += o(attention(rope(q(norm x)), rope(k(norm x)), v(norm x)));
//              x += mlp(norm x)
//   logits = lm_head(norm x)   (shifted by one row for Dream)
// DiffusionGemma has two, @encode and @decode (BlockDiffusionBuilder below).
#include "importer/ir/ForwardBuilder.h"

#include "compiler/dialects/dlm/DlmDialect.h"
#include "importer/model/CanonicalWeights.h"
#include "importer/model/DFlashFamily.h"
#include "runtime/model/ModelSpec.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"

#include <cmath>
#include <functional>
#include <map>

namespace dlm::importer {
namespace {

using namespace mlir;

// What every model's IR builder shares: the builder, the weights by canonical name (one dlm.weight
// each, created on first use), and the common ops over [tokens, width] activations.
class ModelIr {
protected:
  ModelIr(MLIRContext &context, const ModelDescription &model,
          const std::vector<Type> &weightTypes)
      : model_(model), config_(model.config), b_(&context), loc_(b_.getUnknownLoc()) {
    for (size_t i = 0; i < model.weights.size(); ++i)
      weights_[model.weights[i].canonicalName] = {&model.weights[i], weightTypes[i]};
  }

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
  RankedTensorType heads(int64_t count, int64_t headDim) {
    return RankedTensorType::get({ShapedType::kDynamic, count, headDim}, b_.getF32Type());
  }
  RankedTensorType logitsType() {
    return RankedTensorType::get({ShapedType::kDynamic, config_.vocabSize}, b_.getF32Type());
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
  Type weightElementType(std::string_view canonicalName) const {
    return weights_.at(std::string(canonicalName)).second;
  }

  // `w` may be null: a norm without weight.
  Value rmsNorm(Value x, Value w) { return rmsNorm(x, w, config_.rmsNormEps); }
  Value rmsNorm(Value x, Value w, double eps) {
    return dlm::ir::RMSNormOp::create(b_, loc_, x.getType(), x, w, b_.getF64FloatAttr(eps));
  }

  Value linear(Value x, Value w, Value bias, int64_t outWidth) {
    return dlm::ir::LinearOp::create(b_, loc_, activations(outWidth), x, w, bias);
  }

  // [S, n*hd] <-> [S, n, hd]
  Value splitHeads(Value x, int64_t count, int64_t headDim) {
    SmallVector<OpFoldResult> shape{length_, b_.getIndexAttr(count), b_.getIndexAttr(headDim)};
    return tensor::ExpandShapeOp::create(b_, loc_, heads(count, headDim), x,
                                         SmallVector<ReassociationIndices>{{0}, {1, 2}}, shape);
  }
  Value mergeHeads(Value x, int64_t count, int64_t headDim) {
    return tensor::CollapseShapeOp::create(b_, loc_, activations(count * headDim), x,
                                           SmallVector<ReassociationIndices>{{0}, {1, 2}});
  }

  // func @name(ids, positions [, extra...]) -> (logits [, extra...]) with its entry block as the
  // insertion point; length_ is the token count.
  Block *beginFunction(ModuleOp module, StringRef name, ArrayRef<Type> extraInputs,
                       ArrayRef<Type> extraResults = {}) {
    b_.setInsertionPointToEnd(module.getBody());
    auto ids = RankedTensorType::get({ShapedType::kDynamic}, b_.getI32Type());
    SmallVector<Type> inputs{ids, ids};
    inputs.append(extraInputs.begin(), extraInputs.end());
    SmallVector<Type> results{logitsType()};
    results.append(extraResults.begin(), extraResults.end());
    auto fn = func::FuncOp::create(b_, loc_, name, b_.getFunctionType(inputs, results));
    Block *entry = fn.addEntryBlock();
    b_.setInsertionPointToStart(entry);
    length_ = tensor::DimOp::create(b_, loc_, entry->getArgument(0), 0);
    return entry;
  }

  // A pre-norm Llama / Qwen decoder layer: its geometry, its weights' names and its mask.
  struct DecoderLayer {
    int64_t hidden = 0, heads = 0, kvHeads = 0, headDim = 0;
    double eps = 0, theta = 0;
    bool qkNorm = false;
    std::function<std::string(std::string_view role)> name;
    dlm::ir::MaskKind mask = dlm::ir::MaskKind::causal;
    IntegerAttr window;
    IntegerAttr blockSize; // with mask block_causal
    int64_t rotaryDim = 0; // 0: the whole head rotates
    // The rows keys and values are projected from, given the normed states (null: those).
    std::function<Value(Value normed)> keyValueInput;
  };

  // `prefix` + layerWeightName(layer, role): "" for a model's own layers, "draft." a drafter's.
  static DecoderLayer decoderLayer(const artifact::ModelConfig &c, const ArchitectureTraits &t,
                                   std::string prefix, int64_t layer) {
    DecoderLayer l;
    l.hidden = c.hiddenSize;
    l.heads = c.numHeads;
    l.kvHeads = c.numKvHeads;
    l.headDim = c.headDim;
    l.eps = c.rmsNormEps;
    l.theta = c.ropeTheta;
    l.qkNorm = t.qkNorm;
    l.rotaryDim = t.rotaryDim > 0 && t.rotaryDim < c.headDim ? t.rotaryDim : 0;
    l.name = [prefix, layer](std::string_view role) {
      return prefix + spec::layerWeightName(layer, role);
    };
    return l;
  }

  //   x += o(attention(rope(q(norm x)), rope(k(kv)), v(kv))), kv = keyValueInput(norm x)
  //   x += mlp(norm x)
  Value buildDecoderLayer(const DecoderLayer &l, Value x, Value positions) {
    const int64_t hd = l.headDim;
    auto w = [&](std::string_view role) { return weight(l.name(role)); };
    auto optional = [&](std::string_view role) {
      return weights_.count(l.name(role)) ? w(role) : Value();
    };
    auto norm = [&](Value v, Value weight) { return rmsNorm(v, weight, l.eps); };
    Value h = norm(x, w(spec::kAttnNorm));
    Value kv = l.keyValueInput ? l.keyValueInput(h) : h;
    Value q = splitHeads(linear(h, w(spec::kQ), optional(spec::kQBias), l.heads * hd), l.heads, hd);
    Value k = splitHeads(linear(kv, w(spec::kK), optional(spec::kKBias), l.kvHeads * hd),
                         l.kvHeads, hd);
    Value v = splitHeads(linear(kv, w(spec::kV), optional(spec::kVBias), l.kvHeads * hd),
                         l.kvHeads, hd);
    if (l.qkNorm) {
      q = norm(q, w(spec::kQNorm));
      k = norm(k, w(spec::kKNorm));
    }
    FloatAttr theta = b_.getF64FloatAttr(l.theta);
    IntegerAttr rotary = l.rotaryDim ? b_.getI64IntegerAttr(l.rotaryDim) : IntegerAttr();
    q = dlm::ir::RoPEOp::create(b_, loc_, q.getType(), q, positions, theta, rotary, IntegerAttr());
    k = dlm::ir::RoPEOp::create(b_, loc_, k.getType(), k, positions, theta, rotary, IntegerAttr());
    Value attended =
        dlm::ir::MaskedAttentionOp::create(b_, loc_, heads(l.heads, hd), q, k, v, Value(), Value(),
                                           Value(), l.mask, l.window, l.blockSize, FloatAttr());
    Value out = linear(mergeHeads(attended, l.heads, hd), w(spec::kO), Value(), l.hidden);
    x = arith::AddFOp::create(b_, loc_, x, out);
    Value m = norm(x, w(spec::kMlpNorm));
    m = weights_.count(l.name(spec::kRouter))
            ? routedExperts(l, m)
            : dlm::ir::GatedMLPOp::create(b_, loc_, m.getType(), m, w(spec::kGate), w(spec::kUp),
                                          w(spec::kDown), dlm::ir::Activation::silu);
    return arith::AddFOp::create(b_, loc_, x, m);
  }

  // A sparse decoder's (Qwen3-MoE's, LLaDA2's) experts over the normed states: the router reads
  // them as they are, softmax or sigmoid (with the expert bias, group-limited) top-k,
  // renormalised and scaled as the config says, SiLU experts; plus the shared expert, a gated
  // MLP, when the layer has one.
  Value routedExperts(const DecoderLayer &l, Value normed) {
    const SparseExperts &s = *model_.sparseExperts;
    auto w = [&](std::string_view role) { return weight(l.name(role)); };
    Value bias = weights_.count(l.name(spec::kExpertBias)) ? w(spec::kExpertBias) : Value();
    Value routed = dlm::ir::MoEOp::create(
        b_, loc_, normed.getType(), normed, normed, w(spec::kRouter), Value(), Value(), bias,
        w(spec::kExpertsGateUp), w(spec::kExpertsDown), b_.getI64IntegerAttr(s.topK), FloatAttr(),
        b_.getF64FloatAttr(1.0), b_.getBoolAttr(s.normalizeTopK), b_.getBoolAttr(s.sigmoidScores),
        b_.getI64IntegerAttr(s.groups), b_.getI64IntegerAttr(s.topGroups),
        b_.getF64FloatAttr(s.routedScale),
        dlm::ir::ActivationAttr::get(b_.getContext(), dlm::ir::Activation::silu));
    if (!weights_.count(l.name(spec::kSharedGate)))
      return routed;
    Value shared = dlm::ir::GatedMLPOp::create(b_, loc_, normed.getType(), normed,
                                               w(spec::kSharedGate), w(spec::kSharedUp),
                                               w(spec::kSharedDown), dlm::ir::Activation::silu);
    return arith::AddFOp::create(b_, loc_, routed, shared);
  }

  using EmbeddingOp = dlm::ir::EmbeddingOp;
  using LMHeadOp = dlm::ir::LMHeadOp;

  const ModelDescription &model_;
  const artifact::ModelConfig &config_;
  OpBuilder b_;
  Location loc_;
  Value length_;
  std::map<std::string, std::pair<const WeightBinding *, Type>> weights_;
  std::map<std::string, Value> created_;
};

class ForwardBuilder : ModelIr {
public:
  // `captured`: the target layers a DFlash drafter reads (empty: none); @forward then also
  // returns their hidden states side by side.
  ForwardBuilder(MLIRContext &context, const ModelDescription &model,
                 const std::vector<Type> &weightTypes, std::vector<int64_t> captured = {})
      : ModelIr(context, model, weightTypes), captured_(std::move(captured)) {}

  // With `smoothing`, also @smooth(ids, positions, logits): @forward over iteration smoothing's
  // input embeddings (dInfer, appendix A.1), E[x] plus, on the rows whose token is the mask,
  // softmax(logits) @ E scaled by the caller's input scale.
  OwningOpRef<ModuleOp> build(bool smoothing = false) {
    OwningOpRef<ModuleOp> module = ModuleOp::create(loc_);
    describeModule(*module);
    buildInto(*module);
    if (smoothing) {
      created_.clear();
      buildInto(*module, /*smooth=*/true);
      (*module)->setAttr("dlm.forward_functions", b_.getStrArrayAttr({"forward", "smooth"}));
    }
    return module;
  }

  void buildInto(ModuleOp module, bool smooth = false) {
    const int64_t width = config_.hiddenSize;
    Type featuresType = activations(width * static_cast<int64_t>(captured_.size()));
    Block *entry =
        smooth ? beginFunction(module, "smooth", {logitsType()})
               : beginFunction(module, "forward", {},
                               captured_.empty() ? ArrayRef<Type>{} : ArrayRef(featuresType));
    Value tokens = entry->getArgument(0), positions = entry->getArgument(1);
    Value x = EmbeddingOp::create(b_, loc_, activations(width), tokens, weight(spec::kEmbed),
                                  b_.getF32FloatAttr(1.0f));
    if (smooth)
      x = arith::AddFOp::create(
          b_, loc_, x,
          dlm::ir::SoftEmbeddingOp::create(b_, loc_, activations(width), entry->getArgument(2),
                                           weight(spec::kEmbed), b_.getF32FloatAttr(1.0f),
                                           b_.getI64IntegerAttr(config_.maskTokenId)));
    std::map<int64_t, Value> afterLayer;
    for (int64_t layer = 0; layer < config_.numLayers; ++layer)
      afterLayer[layer] = x = buildLayer(layer, x, positions);
    Value h = rmsNorm(x, weight(spec::kFinalNorm));
    // transformers 5's hidden_states[L] is the final-normed last layer: a drafter tapping the
    // last layer reads it normed (tests/reference/dflash/README.md).
    afterLayer[config_.numLayers - 1] = h;
    SmallVector<Value> results;
    Value head = config_.tiedEmbeddings ? weight(spec::kEmbed) : weight(spec::kLmHead);
    if (!captured_.empty()) {
      SmallVector<Value> features;
      for (int64_t layer : captured_)
        features.push_back(afterLayer.at(layer));
      results.push_back(features.size() == 1
                            ? features.front()
                            : tensor::ConcatOp::create(b_, loc_, featuresType, 1, features));
    }
    Value logits = LMHeadOp::create(b_, loc_, logitsType(), h, head, FloatAttr());
    if (model_.traits.logitShift)
      logits = shiftLogits(logits, cast<RankedTensorType>(logitsType()));
    results.insert(results.begin(), logits);
    func::ReturnOp::create(b_, loc_, results);
  }

private:
  Value buildLayer(int64_t layer, Value x, Value positions) {
    DecoderLayer l = decoderLayer(config_, model_.traits, "", layer);
    switch (config_.attentionMask) {
    case artifact::AttentionMaskKind::causal:
      l.mask = dlm::ir::MaskKind::causal;
      break;
    case artifact::AttentionMaskKind::block_causal:
      l.mask = dlm::ir::MaskKind::block_causal;
      l.blockSize = b_.getI64IntegerAttr(model_.traits.attentionBlock);
      break;
    default:
      l.mask = dlm::ir::MaskKind::bidirectional;
    }
    return buildDecoderLayer(l, x, positions);
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

  std::vector<int64_t> captured_;
};

// DiffusionGemma (docs/design/diffusion-gemma.md §3-§5) as two functions over the same weights:
//   @encode(ids, positions): the causal encoder that writes K/V (the prompt's prefill and the
//     commit of every finished canvas); encoder layer scalars; plain scaled embedding.
//   @decode(ids, positions, sc_logits): the bidirectional decoder over a canvas and the cached
//     prefix; decoder layer scalars; input rms_norm(E[x]·√H + SC_MLP(pre_norm(
//     soft_embedding(sc_logits)))), the soft embedding zero when the caller has no logits.
// Both end in the final norm and the soft-capped tied LM head.
class BlockDiffusionBuilder : ModelIr {
public:
  BlockDiffusionBuilder(MLIRContext &context, const ModelDescription &model,
                        const std::vector<Type> &weightTypes)
      : ModelIr(context, model, weightTypes), s_(*model.blockDiffusion) {}

  OwningOpRef<ModuleOp> build() {
    OwningOpRef<ModuleOp> module = ModuleOp::create(loc_);
    describeModule(*module);
    (*module)->setAttr("dlm.forward_functions",
                       b_.getStrArrayAttr({"encode", "decode"}));
    buildFunction(*module, /*decoder=*/false);
    created_.clear();
    buildFunction(*module, /*decoder=*/true);
    return module;
  }

private:
  void buildFunction(ModuleOp module, bool decoder) {
    SmallVector<Type> extra;
    if (decoder)
      extra.push_back(logitsType());
    Block *entry = beginFunction(module, decoder ? "decode" : "encode", extra);
    Value tokens = entry->getArgument(0), positions = entry->getArgument(1);
    Value x = EmbeddingOp::create(b_, loc_, activations(config_.hiddenSize), tokens,
                                  weight(spec::kEmbed), embedScale());
    if (decoder)
      x = rmsNorm(arith::AddFOp::create(b_, loc_, x, selfConditioning(entry->getArgument(2))),
                  Value());
    for (int64_t layer = 0; layer < config_.numLayers; ++layer)
      x = buildLayer(layer, x, positions, decoder);
    Value h = rmsNorm(x, weight(spec::kFinalNorm));
    Value logits = LMHeadOp::create(b_, loc_, logitsType(), h, weight(spec::kEmbed),
                                    b_.getF64FloatAttr(s_.logitSoftcap));
    func::ReturnOp::create(b_, loc_, logits);
  }

  // √H rounded to the embedding's dtype, as transformers multiplies it (MOD:745).
  FloatAttr embedScale() {
    llvm::APFloat scale(static_cast<float>(std::sqrt(static_cast<double>(config_.hiddenSize))));
    Type element = weightElementType(spec::kEmbed);
    if (auto fp = dyn_cast<FloatType>(element); fp && !element.isF32()) {
      bool losesInfo = false;
      scale.convert(fp.getFloatSemantics(), llvm::APFloat::rmNearestTiesToEven, &losesInfo);
      scale.convert(llvm::APFloat::IEEEsingle(), llvm::APFloat::rmNearestTiesToEven, &losesInfo);
    }
    return b_.getF32FloatAttr(scale.convertToFloat());
  }

  // SC_MLP(pre_norm(softmax(sc_logits) @ E · √H)): zero when the caller has no logits.
  Value selfConditioning(Value scLogits) {
    auto hidden = activations(config_.hiddenSize);
    Value soft = dlm::ir::SoftEmbeddingOp::create(b_, loc_, hidden, scLogits, weight(spec::kEmbed),
                                                  embedScale(), IntegerAttr());
    Value normed = rmsNorm(soft, weight(spec::kScPreNorm));
    return dlm::ir::GatedMLPOp::create(b_, loc_, hidden, normed, weight(spec::kScGate),
                                       weight(spec::kScUp), weight(spec::kScDown),
                                       dlm::ir::Activation::gelu_tanh);
  }

  Value attention(int64_t layer, Value x, Value positions, bool decoder) {
    const BlockDiffusionLayer &l = s_.layers[static_cast<size_t>(layer)];
    const int64_t nH = config_.numHeads, hd = l.headDim, nKV = l.kvHeads;
    Value normed = rmsNorm(x, layerWeightValue(layer, spec::kAttnNorm));
    Value q = splitHeads(linear(normed, layerWeightValue(layer, spec::kQ), Value(), nH * hd), nH,
                         hd);
    Value rawK =
        splitHeads(linear(normed, layerWeightValue(layer, spec::kK), Value(), nKV * hd), nKV, hd);
    // Full layers have no v_proj: V is the raw k projection, before k_norm and RoPE (MOD:325).
    Value v = l.valueFromKey ? rawK
                             : splitHeads(linear(normed, layerWeightValue(layer, spec::kV),
                                                 Value(), nKV * hd),
                                          nKV, hd);
    FloatAttr theta = b_.getF64FloatAttr(l.ropeTheta);
    IntegerAttr pairs = b_.getI64IntegerAttr(l.rotatedPairs);
    q = rmsNorm(q, layerWeightValue(layer, spec::kQNorm));
    q = dlm::ir::RoPEOp::create(b_, loc_, q.getType(), q, positions, theta, IntegerAttr(), pairs);
    Value k = rmsNorm(rawK, layerWeightValue(layer, spec::kKNorm));
    k = dlm::ir::RoPEOp::create(b_, loc_, k.getType(), k, positions, theta, IntegerAttr(), pairs);
    v = rmsNorm(v, Value());
    // Encoder: causal, sliding layers see i - W < j <= i. Decoder: the canvas sees itself and
    // the cached prefix, on sliding layers only its last W - 1 positions (§4).
    auto mask = decoder ? (l.sliding ? dlm::ir::MaskKind::prefix_window
                                     : dlm::ir::MaskKind::bidirectional)
                        : (l.sliding ? dlm::ir::MaskKind::sliding_window
                                     : dlm::ir::MaskKind::causal);
    IntegerAttr window = l.sliding ? b_.getI64IntegerAttr(s_.slidingWindow) : IntegerAttr();
    Value attended = dlm::ir::MaskedAttentionOp::create(
        b_, loc_, heads(nH, hd), q, k, v, Value(), Value(), Value(), mask, window, IntegerAttr(),
        b_.getF32FloatAttr(1.0f));
    Value out = linear(mergeHeads(attended, nH, hd), layerWeightValue(layer, spec::kO), Value(),
                       config_.hiddenSize);
    return rmsNorm(out, layerWeightValue(layer, spec::kPostAttnNorm));
  }

  // post_ffn_norm(post_mlp_norm(mlp(pre(r))) + post_expert_norm(experts(pre2(r), router(r)))).
  Value feedForward(int64_t layer, Value r) {
    auto hidden = activations(config_.hiddenSize);
    auto w = [&](std::string_view role) { return layerWeightValue(layer, role); };
    Value dense = dlm::ir::GatedMLPOp::create(b_, loc_, hidden, rmsNorm(r, w(spec::kMlpNorm)),
                                              w(spec::kGate), w(spec::kUp), w(spec::kDown),
                                              dlm::ir::Activation::gelu_tanh);
    dense = rmsNorm(dense, w(spec::kPostMlpNorm));
    Value experts = dlm::ir::MoEOp::create(
        b_, loc_, hidden, r, rmsNorm(r, w(spec::kPreExpertNorm)), w(spec::kRouter),
        w(spec::kRouterScale), w(spec::kExpertScale), Value(), w(spec::kExpertsGateUp),
        w(spec::kExpertsDown), b_.getI64IntegerAttr(s_.topK),
        b_.getF64FloatAttr(config_.rmsNormEps),
        b_.getF64FloatAttr(1.0 / std::sqrt(static_cast<double>(config_.hiddenSize))),
        b_.getBoolAttr(true), b_.getBoolAttr(false), b_.getI64IntegerAttr(1),
        b_.getI64IntegerAttr(1), b_.getF64FloatAttr(1.0),
        dlm::ir::ActivationAttr::get(b_.getContext(), dlm::ir::Activation::gelu_tanh));
    experts = rmsNorm(experts, w(spec::kPostExpertNorm));
    return rmsNorm(arith::AddFOp::create(b_, loc_, dense, experts), w(spec::kPostFfnNorm));
  }

  Value buildLayer(int64_t layer, Value h, Value positions, bool decoder) {
    h = arith::AddFOp::create(b_, loc_, h, attention(layer, h, positions, decoder));
    h = arith::AddFOp::create(b_, loc_, h, feedForward(layer, h));
    // layer_scalar multiplies the whole residual stream; each mode has its own (MOD:604, 682).
    Value scalar = layerWeightValue(layer, decoder ? spec::kLayerScalar : spec::kEncoderLayerScalar);
    return dlm::ir::ScaleOp::create(b_, loc_, h.getType(), h, scalar);
  }

  const BlockDiffusionStructure &s_;
};

// A DFlash drafter (docs/design/speculative-decoding.md §2.2) beside its target, as
// @draft(ids, positions, context [c, n*H]) -> logits over the target's embedding and LM head.
// The first c fed rows are context: the target's hidden states of accepted tokens at their
// positions, projected (hidden_norm(fc(context))) into the keys and values of every draft layer
// (no input_layernorm); the other rows are the block [anchor, mask x (B-1)], whose queries attend
// to the cached and fresh context and to the block. The draft's K/V layers follow the target's.
class DraftBuilder : ModelIr {
public:
  DraftBuilder(MLIRContext &context, const ModelDescription &pair,
               const std::vector<Type> &weightTypes, const DraftDescription &draft)
      : ModelIr(context, pair, weightTypes), draft_(draft) {}

  void buildInto(ModuleOp module) {
    const artifact::ModelConfig &d = draft_.config;
    const int64_t width = d.hiddenSize * static_cast<int64_t>(draft_.targetLayerIds.size());
    Block *entry = beginFunction(module, "draft", {activations(width)});
    cast<func::FuncOp>(entry->getParentOp())
        ->setAttr("dlm.kv_layer_base", b_.getI64IntegerAttr(config_.numLayers));
    Value tokens = entry->getArgument(0), positions = entry->getArgument(1);
    Value x = EmbeddingOp::create(b_, loc_, activations(d.hiddenSize), tokens,
                                  weight(spec::kEmbed),
                                  b_.getF32FloatAttr(static_cast<float>(draft_.inputEmbeddingScale)));
    Value context = linear(entry->getArgument(2), weight(draftName(spec::kContextFc)), Value(),
                           d.hiddenSize);
    context = rmsNorm(context, weight(draftName(spec::kContextNorm)), d.rmsNormEps);
    for (int64_t i = 0; i < d.numLayers; ++i)
      x = buildDecoderLayer(layer(i, context), x, positions);
    Value h = rmsNorm(x, weight(draftName(spec::kFinalNorm)), d.rmsNormEps);
    Value head = config_.tiedEmbeddings ? weight(spec::kEmbed) : weight(spec::kLmHead);
    FloatAttr softcap = draft_.finalLogitSoftcap > 0
                            ? b_.getF64FloatAttr(draft_.finalLogitSoftcap)
                            : FloatAttr();
    func::ReturnOp::create(b_, loc_,
                           ValueRange{LMHeadOp::create(b_, loc_, logitsType(), h, head, softcap)});
  }

private:
  static std::string draftName(std::string_view name) { return spec::draftWeightName(name); }

  // Full layers see the whole block; sliding ones are causal within their window (a
  // non-causal window is refused before building).
  DecoderLayer layer(int64_t i, Value context) {
    DecoderLayer l = decoderLayer(draft_.config, draft_.traits, std::string(spec::kDraftPrefix), i);
    const DraftLayer &shape = draft_.layers[static_cast<size_t>(i)];
    l.mask = !shape.causal        ? dlm::ir::MaskKind::bidirectional
             : shape.window > 0 ? dlm::ir::MaskKind::sliding_window
                                : dlm::ir::MaskKind::causal;
    if (shape.window > 0)
      l.window = b_.getI64IntegerAttr(shape.window);
    l.keyValueInput = [this, context](Value normed) -> Value {
      return dlm::ir::SelectInputRowsOp::create(b_, loc_, normed.getType(), context, normed);
    };
    return l;
  }

  const DraftDescription &draft_;
};

} // namespace

OwningOpRef<ModuleOp> buildSpeculativeModule(MLIRContext &context, const ModelDescription &pair,
                                             const std::vector<Type> &weightTypes,
                                             const DraftDescription &draft) {
  context.loadDialect<dlm::ir::DlmDialect, func::FuncDialect, arith::ArithDialect,
                      tensor::TensorDialect>();
  OwningOpRef<ModuleOp> module =
      ForwardBuilder(context, pair, weightTypes, draft.targetLayerIds).build();
  DraftBuilder(context, pair, weightTypes, draft).buildInto(*module);
  OpBuilder b(&context);
  (*module)->setAttr("dlm.forward_functions",
                     b.getStrArrayAttr({"forward", "draft"}));
  return module;
}

OwningOpRef<ModuleOp> buildForwardModule(MLIRContext &context, const ModelDescription &model,
                                         const std::vector<Type> &weightTypes, bool smoothing) {
  context.loadDialect<dlm::ir::DlmDialect, func::FuncDialect, arith::ArithDialect,
                      tensor::TensorDialect>();
  if (model.blockDiffusion)
    return BlockDiffusionBuilder(context, model, weightTypes).build();
  return ForwardBuilder(context, model, weightTypes).build(smoothing);
}

} // namespace dlm::importer
