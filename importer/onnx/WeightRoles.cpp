#include "importer/onnx/WeightRoles.h"

#include "compiler/dialects/dlm/DlmDialect.h"
#include "importer/model/CanonicalWeights.h"
#include "runtime/model/ModelSpec.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "support/ShapeText.h"

#include <vector>

namespace dlm::importer::onnx {
namespace {

using namespace mlir;
namespace ir = dlm::ir;

// Walks the raised @forward backwards from its result, naming each weight by its role.
class RoleWalk {
public:
  RoleWalk(func::FuncOp forward, const ModelDescription &model)
      : forward_(forward), model_(model), config_(model.config) {}

  Status run() {
    auto ret = cast<func::ReturnOp>(forward_.getBody().front().getTerminator());
    if (ret.getNumOperands() != 1)
      return broken("the graph must have one output (the logits), it has " +
                    std::to_string(ret.getNumOperands()));
    auto head = ret.getOperand(0).getDefiningOp<ir::LMHeadOp>();
    if (!head)
      return broken("its output is not computed by an LM head");
    int64_t vocab = cast<RankedTensorType>(head.getType()).getDimSize(1);
    if (vocab != config_.vocabSize)
      return Status::error("onnx: the logits have " + std::to_string(vocab) +
                           " columns, but config.json's vocab_size is " +
                           std::to_string(config_.vocabSize));
    auto finalNorm = head.getInput().getDefiningOp<ir::RMSNormOp>();
    if (!finalNorm)
      return broken("the LM head does not read a final RMSNorm");
    DLM_RETURN_IF_ERROR(bind(std::string(spec::kFinalNorm), finalNorm.getWeight()));
    Value headWeight = head.getWeight();

    Value x = finalNorm.getInput();
    std::vector<std::map<std::string, Value>> layers; // last layer first
    while (auto mlpAdd = x.getDefiningOp<arith::AddFOp>()) {
      std::map<std::string, Value> roles;
      auto xIn = layer(mlpAdd, roles, int64_t(layers.size()));
      if (!xIn)
        return xIn.status();
      layers.push_back(std::move(roles));
      x = *xIn;
    }
    auto embedding = x.getDefiningOp<ir::EmbeddingOp>();
    if (!embedding)
      return broken("the residual stream does not start at a token embedding");
    DLM_RETURN_IF_ERROR(bind(std::string(spec::kEmbed), embedding.getTable()));
    if (headWeight != embedding.getTable())
      DLM_RETURN_IF_ERROR(bind(std::string(spec::kLmHead), headWeight));
    if (int64_t(layers.size()) != config_.numLayers)
      return Status::error("onnx: the graph has " + std::to_string(layers.size()) +
                           " layers, but config.json says " + std::to_string(config_.numLayers));
    for (size_t i = 0; i < layers.size(); ++i)
      for (const auto &[role, weight] : layers[layers.size() - 1 - i])
        DLM_RETURN_IF_ERROR(bind(spec::layerWeightName(int64_t(i), role), weight));
    DLM_RETURN_IF_ERROR(checkMasks());
    return checkSignature(embedding.getIds());
  }

  std::map<std::string, std::string> &roles() { return roles_; }

private:
  Status broken(const std::string &what) const {
    return Status::error("onnx: the raised graph is not a " + model_.family +
                         " transformer as dlm runs it: " + what);
  }

  Status bind(const std::string &canonical, Value weight) {
    auto op = weight.getDefiningOp<ir::WeightOp>();
    if (!op)
      return broken("weight '" + canonical + "' is not an initializer");
    roles_[canonical] = op.getName().str();
    return Status::ok();
  }

  // q/k: rope(qk_norm?(split_heads(linear(h)))); v: split_heads(linear(h)). Returns the linear.
  ir::LinearOp projection(Value value, bool rotated, std::map<std::string, Value> &roles,
                          std::string_view normRole, int64_t heads, std::string &problem) {
    if (rotated) {
      auto rope = value.getDefiningOp<ir::RoPEOp>();
      if (!rope) {
        problem = "attention input is not rotated by RoPE";
        return nullptr;
      }
      ropes_.push_back(rope);
      value = rope.getInput();
      if (auto norm = value.getDefiningOp<ir::RMSNormOp>()) {
        roles[std::string(normRole)] = norm.getWeight();
        value = norm.getInput();
      }
    }
    auto split = value.getDefiningOp<tensor::ExpandShapeOp>();
    auto type = split ? split.getResultType() : RankedTensorType();
    if (!split || type.getDimSize(1) != heads || type.getDimSize(2) != config_.headDim) {
      problem = "an attention input is not the projection split into " + std::to_string(heads) +
                " heads of " + std::to_string(config_.headDim) + " (config.json)";
      return nullptr;
    }
    auto linear = split.getSrc().getDefiningOp<ir::LinearOp>();
    if (!linear)
      problem = "an attention input is not a linear projection";
    return linear;
  }

  // One layer, ending at `mlpAdd`: x1 = x0 + o(attention(...)); x2 = x1 + mlp(norm(x1)).
  StatusOr<Value> layer(arith::AddFOp mlpAdd, std::map<std::string, Value> &roles,
                        int64_t fromEnd) {
    std::string where = " (layer " + std::to_string(fromEnd) + " from the end)";
    auto split = [](arith::AddFOp add, auto isDelta) -> std::pair<Value, Operation *> {
      for (int side = 0; side < 2; ++side)
        if (Operation *def = add->getOperand(side).getDefiningOp(); def && isDelta(def))
          return {add->getOperand(1 - side), def};
      return {Value(), nullptr};
    };
    auto [x1, mlpOp] = split(mlpAdd, [](Operation *op) { return isa<ir::GatedMLPOp>(op); });
    if (!mlpOp)
      return broken("a residual add does not add a gated MLP" + where);
    auto mlp = cast<ir::GatedMLPOp>(mlpOp);
    auto mlpNorm = mlp.getInput().getDefiningOp<ir::RMSNormOp>();
    if (!mlpNorm || mlpNorm.getInput() != x1)
      return broken("the MLP does not read an RMSNorm of the residual stream" + where);
    roles[std::string(spec::kMlpNorm)] = mlpNorm.getWeight();
    roles[std::string(spec::kGate)] = mlp.getGate();
    roles[std::string(spec::kUp)] = mlp.getUp();
    roles[std::string(spec::kDown)] = mlp.getDown();

    auto attnAdd = x1.getDefiningOp<arith::AddFOp>();
    if (!attnAdd)
      return broken("the MLP's residual input is not an attention residual add" + where);
    auto [x0, outOp] = split(attnAdd, [](Operation *op) { return isa<ir::LinearOp>(op); });
    auto out = dyn_cast_or_null<ir::LinearOp>(outOp);
    auto merged = out ? out.getInput().getDefiningOp<tensor::CollapseShapeOp>() : nullptr;
    auto attention = merged ? merged.getSrc().getDefiningOp<ir::MaskedAttentionOp>() : nullptr;
    if (!attention || out.getBias())
      return broken("the attention residual does not add o(merged attention heads)" + where);
    roles[std::string(spec::kO)] = out.getWeight();
    attentions_.push_back(attention);

    std::string problem;
    ir::LinearOp q = projection(attention.getQuery(), true, roles, spec::kQNorm, config_.numHeads,
                                problem);
    ir::LinearOp k = q ? projection(attention.getKey(), true, roles, spec::kKNorm,
                                    config_.numKvHeads, problem)
                       : nullptr;
    ir::LinearOp v = k ? projection(attention.getValue(), false, roles, {}, config_.numKvHeads,
                                    problem)
                       : nullptr;
    if (!v)
      return broken(problem + where);
    auto attnNorm = q.getInput().getDefiningOp<ir::RMSNormOp>();
    if (!attnNorm || attnNorm.getInput() != x0 || k.getInput() != q.getInput() ||
        v.getInput() != q.getInput())
      return broken("q, k and v do not project one RMSNorm of the residual stream" + where);
    roles[std::string(spec::kAttnNorm)] = attnNorm.getWeight();
    std::pair<ir::LinearOp, std::pair<std::string_view, std::string_view>> projections[] = {
        {q, {spec::kQ, spec::kQBias}}, {k, {spec::kK, spec::kKBias}}, {v, {spec::kV, spec::kVBias}}};
    for (auto &[linear, names] : projections) {
      roles[std::string(names.first)] = linear.getWeight();
      if (linear.getBias())
        roles[std::string(names.second)] = linear.getBias();
    }
    return x0;
  }

  // The mask kind is the architecture's (the runtime picks it from config.json).
  Status checkMasks() {
    bool causal = config_.attentionMask == artifact::AttentionMaskKind::causal;
    auto expected = causal ? ir::MaskKind::causal : ir::MaskKind::bidirectional;
    for (size_t i = 0; i < attentions_.size(); ++i) {
      ir::MaskKind mask = attentions_[attentions_.size() - 1 - i].getMask();
      if (mask != expected)
        return Status::error("onnx: layer " + std::to_string(i) + "'s attention is " +
                             ir::stringifyMaskKind(mask).str() + ", but " +
                             config_.architecture + " (config.json) is " +
                             ir::stringifyMaskKind(expected).str());
    }
    return Status::ok();
  }

  // @forward(ids: tensor<?xi32>, positions: tensor<?xi32>), as the safetensors import builds it.
  Status checkSignature(Value ids) {
    Block &entry = forward_.getBody().front();
    auto tokens = RankedTensorType::get({ShapedType::kDynamic},
                                        IntegerType::get(forward_.getContext(), 32));
    bool ok = entry.getNumArguments() == 2 && ids == entry.getArgument(0);
    for (ir::RoPEOp rope : ropes_)
      ok = ok && rope.getPositions() == entry.getArgument(1);
    for (BlockArgument arg : entry.getArguments())
      ok = ok && arg.getType() == tokens;
    if (!ok)
      return Status::error("onnx: the graph's inputs must be (input_ids, position_ids), each a "
                           "1-D int32 tensor over the tokens, as dlm's @forward takes them");
    return Status::ok();
  }

  func::FuncOp forward_;
  const ModelDescription &model_;
  const artifact::ModelConfig &config_;
  std::map<std::string, std::string> roles_;
  std::vector<ir::RoPEOp> ropes_;
  std::vector<ir::MaskedAttentionOp> attentions_; // last layer first
};

} // namespace

StatusOr<WeightRoles> assignWeightRoles(func::FuncOp forward, const ModelDescription &model) {
  RoleWalk walk(forward, model);
  DLM_RETURN_IF_ERROR(walk.run());
  WeightRoles result;
  std::map<std::string, std::string> &roles = walk.roles();

  std::map<std::string, const WeightBinding *> needed;
  for (const WeightBinding &binding : model.weights)
    needed[binding.canonicalName] = &binding;
  // A tied head read from an initializer of its own: a folded transpose of the embedding, if
  // its values say so (OnnxImport.cpp compares them).
  auto head = roles.find(std::string(spec::kLmHead));
  if (head != roles.end() && !needed.count(head->first) && model.config.tiedEmbeddings) {
    result.tiedHeadCopy = head->second;
    roles.erase(head);
  }
  for (const auto &[canonical, initializer] : roles)
    if (!needed.count(canonical))
      return Status::error("onnx: initializer '" + initializer + "' plays weight '" + canonical +
                           "', which config.json's " + model.config.architecture +
                           " does not have" +
                           (canonical == spec::kLmHead ? " (its embeddings are tied)" : ""));
  for (const WeightBinding &binding : model.weights)
    if (!roles.count(binding.canonicalName))
      return Status::error("onnx: config.json's " + model.config.architecture +
                           " needs weight '" + binding.canonicalName + "' (" +
                           binding.checkpointName + " in a checkpoint), which the graph does "
                           "not have");

  // Shapes: the weight ops carry the initializers' shapes.
  std::map<std::string, ArrayRef<int64_t>> shapes;
  forward.walk([&](ir::WeightOp op) {
    shapes[op.getName().str()] = cast<RankedTensorType>(op.getType()).getShape();
  });
  for (const WeightBinding &binding : model.weights) {
    const std::string &name = roles[binding.canonicalName];
    if (shapes[name] != ArrayRef<int64_t>(binding.shape))
      return Status::error("onnx: initializer '" + name + "' (weight '" + binding.canonicalName +
                           "') has shape " + shapeText(shapes[name]) + ", expected " +
                           shapeText(binding.shape) + " from config.json");
  }
  result.initializers = std::move(roles);
  return result;
}

} // namespace dlm::importer::onnx
