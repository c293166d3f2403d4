#include "importer/onnx/ShapeFolding.h"

#include "importer/onnx/LengthEvaluation.h"
#include "importer/onnx/MechanicalImport.h"
#include "importer/onnx/Raising.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

#include <cmath>
#include <limits>

namespace dlm::importer::onnx {
namespace {

using namespace mlir;
using Shape = std::vector<int64_t>;

// Two lengths that are neither the usual export example's nor equal to a small model dimension
// by accident: a dimension that differs between them is the length.
constexpr int64_t kFirstLength = 6;
constexpr int64_t kSecondLength = 9;
constexpr int64_t kToTheEnd = std::numeric_limits<int64_t>::max();
// A masked score: -inf, or the most negative float a mask builder writes instead.
constexpr double kMaskedBelow = -1e4;

class ShapeFolder {
public:
  ShapeFolder(func::FuncOp forward, OnnxFile &file, const ModelDescription &model,
              Recognised &recognised)
      : forward_(forward), file_(file), model_(model), recognised_(recognised),
        b_(forward.getContext()) {}

  Status run() {
    DLM_RETURN_IF_ERROR(classifyInputs());
    auto first = evaluateAtLength(forward_, inputs_, kFirstLength, file_);
    if (!first)
      return first.status();
    auto second = evaluateAtLength(forward_, inputs_, kSecondLength, file_);
    if (!second)
      return second.status();
    first_ = std::move(*first);
    second_ = std::move(*second);

    Block &entry = forward_.getBody().front();
    auto lengthVector = RankedTensorType::get({ShapedType::kDynamic}, b_.getI32Type());
    for (int i = 0; i < 2; ++i)
      if (failed(forward_.insertArgument(forward_.getNumArguments(), lengthVector, DictionaryAttr(),
                                         forward_.getLoc())))
        return Status::error("onnx: internal error: cannot add the forward's inputs");
    newIds_ = entry.getArgument(entry.getNumArguments() - 2);
    newPositions_ = entry.getArgument(entry.getNumArguments() - 1);
    for (BlockArgument arg : entry.getArguments())
      if (arg == inputs_.ids && isBatched(at(first_, arg).shape))
        batched_.insert(arg);
    DLM_RETURN_IF_ERROR(checkOutputs());
    for (Operation &op : llvm::make_early_inc_range(entry))
      if (OnnxNode node = OnnxNode::of(&op); node && !isPseudoOp(&op) && !allFolded(&op))
        DLM_RETURN_IF_ERROR(rewrite(node));
    eraseDeadNodes();
    return replaceArguments();
  }

private:
  // ---- inputs ---------------------------------------------------------------------------------

  // What a cache input or output asks of the user.
  static std::string withoutCache() {
    return "dlm runs the forward without one (its runtime keeps the cache): export without past "
           "key values (Optimum: a task without '-with-past'; torch: call the model with "
           "use_cache=False)";
  }

  static bool namesCache(const std::string &key) {
    return key.find("past") != std::string::npos || key.find("present") != std::string::npos ||
           key.find("cache") != std::string::npos;
  }

  Status classifyInputs() {
    for (unsigned i = 0; i < forward_.getNumResults(); ++i)
      if (auto name = forward_.getResultAttrOfType<StringAttr>(i, kNameAttr);
          name && namesCache(name.getValue().lower()))
        return Status::error("onnx: graph output '" + name.str() + "' is a KV cache output; " +
                             withoutCache());
    for (BlockArgument arg : forward_.getArguments()) {
      auto nameAttr = forward_.getArgAttrOfType<StringAttr>(arg.getArgNumber(), kNameAttr);
      std::string name = nameAttr ? nameAttr.str() : "#" + std::to_string(arg.getArgNumber());
      std::string key = StringRef(name).lower();
      bool positions = key.find("position") != std::string::npos; // cache_position too
      if (!positions && namesCache(key))
        return Status::error("onnx: graph input '" + name + "' is a KV cache input; " +
                             withoutCache());
      auto ranked = dyn_cast<RankedTensorType>(arg.getType());
      bool integer = ranked && isa<IntegerType>(ranked.getElementType()) && ranked.getRank() >= 1 &&
                     ranked.getRank() <= 2;
      if (!integer)
        return Status::error("onnx: graph input '" + name +
                             "' is not integer token ids, positions or an attention mask "
                             "([sequence] or [batch, sequence])");
      bool mask = !positions && key.find("mask") != std::string::npos;
      if ((positions && inputs_.positions) || (mask && inputs_.attentionMask))
        return Status::error("onnx: graph input '" + name + "' is a second " +
                             (positions ? "positions" : "attention mask") + " input");
      if (positions) {
        inputs_.positions = arg;
        recognised_.push_back("position_ids input '" + name + "' as the positions");
      } else if (mask) {
        inputs_.attentionMask = arg;
        recognised_.push_back("attention_mask input '" + name +
                              "' taken as all ones (dlm's forward has no padding)");
      } else if (!inputs_.ids) {
        inputs_.ids = arg;
      } else {
        return Status::error("onnx: graph inputs '" + idsName() + "' and '" + name +
                             "' both look like token ids");
      }
    }
    if (!inputs_.ids)
      return Status::error("onnx: the graph has no token ids input");
    return Status::ok();
  }

  // The graph's outputs must come from the tokens: one computed from the length alone (a mask,
  // positions) has no place in dlm's forward.
  Status checkOutputs() {
    Operation *terminator = forward_.getBody().front().getTerminator();
    for (unsigned i = 0; i < terminator->getNumOperands(); ++i)
      if (folded(terminator->getOperand(i))) {
        auto name = forward_.getResultAttrOfType<StringAttr>(i, kNameAttr);
        return Status::error("onnx: not supported yet: graph output '" +
                             (name ? name.str() : std::to_string(i)) +
                             "' is computed from the sequence length, positions or attention "
                             "mask alone");
      }
    return Status::ok();
  }

  std::string idsName() {
    auto attr = forward_.getArgAttrOfType<StringAttr>(
        cast<BlockArgument>(inputs_.ids).getArgNumber(), kNameAttr);
    return attr ? attr.str() : "?";
  }

  // The old inputs give way to (ids, positions) as the safetensors import has them.
  Status replaceArguments() {
    Block &entry = forward_.getBody().front();
    inputs_.ids.replaceAllUsesWith(newIds_);
    unsigned old = entry.getNumArguments() - 2;
    for (unsigned i = 0; i < old; ++i)
      if (!entry.getArgument(i).use_empty())
        return Status::error("onnx: internal error: graph input " + std::to_string(i) +
                             " is still used after folding");
    llvm::BitVector erase(entry.getNumArguments());
    erase.set(0, old);
    if (failed(forward_.eraseArguments(erase)))
      return Status::error("onnx: internal error: the graph inputs cannot be replaced");
    forward_.setType(
        b_.getFunctionType(entry.getArgumentTypes(), entry.getTerminator()->getOperandTypes()));
    forward_.setArgAttr(0, kNameAttr, b_.getStringAttr("ids"));
    forward_.setArgAttr(1, kNameAttr, b_.getStringAttr("positions"));
    return Status::ok();
  }

  // ---- facts from the two evaluations ---------------------------------------------------------

  static bool isPseudoOp(Operation *op) {
    StringRef name = op->getName().getStringRef();
    return name == kInitializerOp || name == kAbsentOp;
  }

  // What an evaluation says of `v`; empty (no shape, no contents) for values it did not reach,
  // such as the ops this folding adds.
  static const EvaluatedValue &at(const Evaluation &e, Value v) {
    static const EvaluatedValue kNone;
    auto it = e.find(v);
    return it == e.end() ? kNone : it->second;
  }

  bool folded(Value v) {
    auto a = first_.find(v), b = second_.find(v);
    return a != first_.end() && b != second_.end() && a->second.values && b->second.values;
  }

  bool allFolded(Operation *op) {
    return op->getNumResults() > 0 &&
           llvm::all_of(op->getResults(), [&](Value v) { return folded(v); });
  }

  // Same at both lengths.
  bool lengthFree(Value v) {
    return at(first_, v).shape == at(second_, v).shape &&
           at(first_, v).values == at(second_, v).values;
  }

  static bool isBatched(const Shape &shape) { return shape.size() >= 2 && shape[0] == 1; }

  // The type of `v` in the folded graph: the length's dimensions dynamic, the batch axis gone.
  // (rewrite() checked that its rank is the same at both lengths.)
  StatusOr<Type> foldedType(Value v, bool batched, OnnxNode where) {
    const EvaluatedValue &a = at(first_, v), &b = at(second_, v);
    SmallVector<int64_t> dims;
    for (size_t i = batched ? 1 : 0; i < a.shape.size(); ++i) {
      if (a.shape[i] == b.shape[i])
        dims.push_back(a.shape[i]);
      else if (a.shape[i] == kFirstLength && b.shape[i] == kSecondLength)
        dims.push_back(ShapedType::kDynamic);
      else
        return Status::error("onnx: not supported yet: " + where.label() +
                             " computes a value of shape " + listText(a.shape) + " at length " +
                             std::to_string(kFirstLength) + " and " + listText(b.shape) +
                             " at length " + std::to_string(kSecondLength) +
                             " (a dimension that is neither fixed nor the length)");
    }
    Type element = a.element ? a.element : b_.getF32Type();
    return Type(RankedTensorType::get(dims, element));
  }

  // ---- rewriting one node that computes from the tokens ---------------------------------------

  Status rewrite(OnnxNode node) {
    Operation *op = node.op();
    // Every rewrite below indexes the two evaluations' shapes axis by axis.
    for (Value v : llvm::concat<Value>(op->getOperands(), op->getResults()))
      if (first_.count(v) && at(first_, v).shape.size() != at(second_, v).shape.size())
        return Status::error("onnx: not supported yet: " + node.label() +
                             ": the rank of a value it reads or computes depends on the "
                             "sequence length");
    bool batchedIn =
        llvm::any_of(op->getOperands(), [&](Value v) { return batched_.count(v) && !folded(v); });
    StringRef type = node.type();
    bool picksBatchRow = batchedIn && type == "Gather" && gathersTheBatchRow(node);
    bool squeezesBatch = batchedIn && ((type == "Squeeze" && squeezesFirstAxis(node)) ||
                                       (picksBatchRow && at(first_, node.input(1)).shape.empty()));
    bool keepsEverything = (type == "Slice" && sliceKeepsEverything(node)) || picksBatchRow;
    if (type == "Reshape")
      DLM_RETURN_IF_ERROR(setShapeOperand(node, 1, batchedIn, /*broadcast=*/false));
    else if (type == "Expand")
      DLM_RETURN_IF_ERROR(setShapeOperand(node, 1, batchedIn, /*broadcast=*/true));
    else if (type == "Slice")
      DLM_RETURN_IF_ERROR(setSliceOperands(node, batchedIn));
    else if (type == "Tile")
      DLM_RETURN_IF_ERROR(setTileOperand(node, batchedIn));
    else if ((type == "Unsqueeze" || type == "Squeeze" || type.starts_with("Reduce")) &&
             node.input(1))
      DLM_RETURN_IF_ERROR(setAxesOperand(node, batchedIn));
    if (batchedIn && !picksBatchRow)
      DLM_RETURN_IF_ERROR(shiftAxisAttributes(node));
    DLM_RETURN_IF_ERROR(replaceFoldedOperands(node, batchedIn));
    if (batchedIn)
      DLM_RETURN_IF_ERROR(checkUnbatchedOperands(node));
    for (Value result : op->getResults()) {
      bool batched = batchedIn && isBatched(at(first_, result).shape) && !squeezesBatch;
      if (batched)
        batched_.insert(result);
      if (!first_.count(result))
        continue;
      auto folded = foldedType(result, batched, node);
      if (!folded)
        return folded.status();
      result.setType(*folded);
    }
    removeIfNoOp(node, keepsEverything);
    return Status::ok();
  }

  // An operand of the tokens' computation without the batch axis, but of the batched result's
  // rank with a leading 1, would lose its own axis where the others lose the batch: refused.
  Status checkUnbatchedOperands(OnnxNode node) {
    size_t rank = at(first_, node.result()).shape.size();
    for (unsigned i = 0; i < node.numInputs(); ++i) {
      Value v = node.input(i);
      if (!v || folded(v) || batched_.count(v) || !first_.count(v))
        continue;
      const Shape &shape = at(first_, v).shape;
      if (shape.size() == rank && isBatched(shape) && isBatched(at(first_, node.result()).shape))
        return Status::error("onnx: not supported yet: " + node.label() + ": input " +
                             std::to_string(i) + " has a leading axis of 1 that is not the " +
                             "batch axis of the others");
    }
    return Status::ok();
  }

  // Whether a Gather picks the one batch row (`x[0]`, `x[-1]`, `x[[0]]`): along axis 0 of its
  // batched data, at constant indices that are all that row, a scalar (the batch axis goes, as
  // a Squeeze of it) or one index (the axis stays). Either way nothing is left to compute.
  bool gathersTheBatchRow(OnnxNode gather) {
    Value data = gather.input(0), indices = gather.input(1);
    if (!batched_.count(data) || !indices || !folded(indices) || !lengthFree(indices))
      return false;
    int64_t rank = at(first_, data).shape.size();
    int64_t axis = gather.intAttr("axis").value_or(0);
    if (axis != 0 && axis != -rank)
      return false;
    const EvaluatedValue &index = at(first_, indices);
    bool scalarOrOne = index.shape.empty() || index.shape == Shape{1};
    return scalarOrOne && index.values && index.values->size() == 1 &&
           (index.intAt(0) == 0 || index.intAt(0) == -1);
  }

  // Whether a Squeeze removes axis 0: named in its axes, or, without axes, being of size 1.
  bool squeezesFirstAxis(OnnxNode squeeze) {
    const Shape &in = at(first_, squeeze.input(0)).shape;
    Value axesValue = squeeze.input(1);
    std::optional<SmallVector<int64_t>> axes = squeeze.intsAttr("axes");
    if (axesValue && folded(axesValue)) {
      Shape values = at(first_, axesValue).ints();
      axes.emplace(values.begin(), values.end());
    }
    if (!axes)
      return !in.empty() && in[0] == 1;
    return llvm::any_of(*axes, [&](int64_t a) { return a == 0 || a == -int64_t(in.size()); });
  }

  // A node that, after folding, returns its input as it is (a Slice that keeps everything, a
  // Reshape or Expand to the input's shape, the Squeeze of the batch axis, the Gather of the
  // batch row).
  void removeIfNoOp(OnnxNode node, bool keepsEverything) {
    StringRef type = node.type();
    if (type != "Reshape" && type != "Expand" && type != "Squeeze" && !keepsEverything)
      return;
    Value in = node.input(0), out = node.result();
    if (in && in.getType() == out.getType())
      out.replaceAllUsesWith(in);
  }

  // A Slice (as the file has it) whose result is its input at both lengths, in steps of 1.
  bool sliceKeepsEverything(OnnxNode slice) {
    Value in = slice.input(0), out = slice.result();
    if (at(first_, in).shape != at(first_, out).shape ||
        at(second_, in).shape != at(second_, out).shape)
      return false;
    if (!slice.input(4))
      return true;
    const EvaluatedValue &steps = at(first_, slice.input(4));
    return steps.values && llvm::all_of(*steps.values, [](double s) { return s == 1; });
  }

  // ---- operands -------------------------------------------------------------------------------

  Value constantOp(OnnxNode at, ArrayRef<int64_t> values) {
    OpBuilder b(at.op());
    auto type = RankedTensorType::get({int64_t(values.size())}, b.getI64Type());
    return constantOp(at, DenseElementsAttr::get(type, values));
  }

  Value constantOp(OnnxNode at, DenseElementsAttr value) {
    OpBuilder b(at.op());
    OperationState state(at.op()->getLoc(), std::string(kOpPrefix) + "Constant");
    state.addAttribute("value", value);
    state.addAttribute(kOpsetAttr, b.getI64IntegerAttr(at.opset()));
    state.addAttribute(kNodeAttr, b.getStringAttr(at.name().str() + "/folded"));
    state.addTypes(value.getType());
    return b.create(state)->getResult(0);
  }

  // A Reshape's or Expand's shape, from the node's own result shape: fixed dimensions as they
  // are, the length as -1 (Reshape) or 1 where the input already has it (Expand).
  Status setShapeOperand(OnnxNode node, unsigned index, bool batchedIn, bool broadcast) {
    const Shape &a = at(first_, node.result()).shape, &b = at(second_, node.result()).shape;
    const Shape &input = at(first_, node.input(0)).shape;
    bool dropBatch = batchedIn && isBatched(a);
    SmallVector<int64_t> target;
    int lengthAxes = 0;
    for (size_t i = dropBatch ? 1 : 0; i < a.size(); ++i) {
      if (a[i] == b[i]) {
        target.push_back(a[i]);
        continue;
      }
      ++lengthAxes;
      if (!broadcast) {
        target.push_back(-1);
        continue;
      }
      int64_t inputAxis = int64_t(i) - int64_t(a.size() - input.size());
      if (inputAxis < 0 || input[inputAxis] != a[i])
        return Status::error("onnx: not supported yet: " + node.label() +
                             " broadcasts along the sequence length");
      target.push_back(1);
    }
    if (!broadcast && lengthAxes > 1)
      return Status::error("onnx: not supported yet: " + node.label() +
                           " reshapes to a shape with the sequence length in two axes");
    node.op()->setOperand(index, constantOp(node, target));
    return Status::ok();
  }

  // Starts, ends, axes and steps as constants: the length as "to the end" where the sliced axis
  // is the length; axes past the batch axis.
  Status setSliceOperands(OnnxNode node, bool batchedIn) {
    Value data = node.input(0);
    const Shape &dimsA = at(first_, data).shape, &dimsB = at(second_, data).shape;
    int64_t rank = dimsA.size();
    for (unsigned i = 1; i < std::min(node.numInputs(), 5u); ++i)
      if (node.input(i) && !folded(node.input(i)))
        return Status::error("onnx: " + node.label() + ": the slice bounds depend on the tokens");
    auto contents = [&](Evaluation &e, unsigned i) {
      return node.input(i) ? at(e, node.input(i)).ints() : Shape();
    };
    Shape startsA = contents(first_, 1), endsA = contents(first_, 2);
    Shape startsB = contents(second_, 1), endsB = contents(second_, 2);
    Shape axes = contents(first_, 3), steps = contents(first_, 4);
    if (axes.empty())
      for (size_t i = 0; i < startsA.size(); ++i)
        axes.push_back(i);
    if (steps.empty())
      steps.assign(startsA.size(), 1);
    if (contents(second_, 3) != contents(first_, 3) ||
        contents(second_, 4) != contents(first_, 4) || startsA.size() != endsA.size() ||
        startsB.size() != startsA.size() || endsB.size() != endsA.size() ||
        axes.size() != startsA.size())
      return Status::error("onnx: not supported yet: " + node.label() +
                           ": the number of slice bounds, or their axes or steps, depend on "
                           "the length");
    SmallVector<int64_t> starts, ends, newAxes, newSteps;
    for (size_t i = 0; i < axes.size(); ++i) {
      int64_t axis = axes[i] < 0 ? axes[i] + rank : axes[i];
      if (axis < 0 || axis >= rank)
        return Status::error("onnx: " + node.label() + ": slices an axis out of range");
      if (startsA[i] != startsB[i])
        return Status::error("onnx: not supported yet: " + node.label() +
                             " starts a slice at an offset computed from the length");
      int64_t end = endsA[i];
      if (endsA[i] != endsB[i]) {
        bool toLength = endsA[i] == dimsA[axis] && endsB[i] == dimsB[axis];
        if (!toLength)
          return Status::error("onnx: not supported yet: " + node.label() +
                               " ends a slice at an offset computed from the length");
        end = kToTheEnd;
      }
      if (batchedIn && axis == 0) {
        // Keeping the one batch row (x[0:1], x[:]) is no slice once the axis is gone.
        bool keepsBatch = startsA[i] == 0 && endsA[i] >= 1 && steps[i] == 1;
        if (!keepsBatch)
          return Status::error("onnx: not supported yet: " + node.label() +
                               " slices the batch axis");
        continue;
      }
      if (batchedIn)
        axis -= 1;
      starts.push_back(startsA[i]);
      ends.push_back(end);
      newAxes.push_back(axis);
      newSteps.push_back(steps[i]);
    }
    node.op()->setOperand(1, constantOp(node, starts));
    node.op()->setOperand(2, constantOp(node, ends));
    Value axesValue = constantOp(node, newAxes), stepsValue = constantOp(node, newSteps);
    if (node.numInputs() > 3)
      node.op()->setOperand(3, axesValue);
    else
      node.op()->insertOperands(3, axesValue);
    if (node.numInputs() > 4)
      node.op()->setOperand(4, stepsValue);
    else
      node.op()->insertOperands(4, stepsValue);
    return Status::ok();
  }

  Status setTileOperand(OnnxNode node, bool batchedIn) {
    if (!folded(node.input(1)) || !lengthFree(node.input(1)))
      return Status::error("onnx: not supported yet: " + node.label() +
                           " repeats by a count computed from the length");
    const EvaluatedValue &repeats = at(first_, node.input(1));
    if (batchedIn && (repeats.values->empty() || repeats.intAt(0) != 1))
      return Status::error("onnx: not supported yet: " + node.label() +
                           " repeats along the batch axis");
    Shape values = repeats.ints();
    node.op()->setOperand(1, constantOp(node, ArrayRef<int64_t>(values).drop_front(batchedIn)));
    return Status::ok();
  }

  // Unsqueeze / Squeeze / Reduce axes as a constant, past the batch axis.
  Status setAxesOperand(OnnxNode node, bool batchedIn) {
    Value axesValue = node.input(1);
    if (!folded(axesValue) || !lengthFree(axesValue))
      return Status::error("onnx: " + node.label() + ": axes computed from the tokens");
    Shape axes = at(first_, axesValue).ints();
    int64_t rank = node.type() == "Unsqueeze" ? at(first_, node.result()).shape.size()
                                              : at(first_, node.input(0)).shape.size();
    SmallVector<int64_t> values;
    for (int64_t axis : axes) {
      axis = axis < 0 ? axis + rank : axis;
      if (batchedIn && axis == 0 && node.type() == "Squeeze")
        continue; // the batch axis itself: gone already
      if (batchedIn && axis == 0)
        return Status::error("onnx: not supported yet: " + node.label() +
                             " inserts or reduces an axis before the batch axis");
      values.push_back(batchedIn ? axis - 1 : axis);
    }
    // A Squeeze of only the batch axis is left with none: removeIfNoOp drops it.
    node.op()->setOperand(1, constantOp(node, values));
    return Status::ok();
  }

  // Axis attributes count past the batch axis.
  Status shiftAxisAttributes(OnnxNode node) {
    Operation *op = node.op();
    if (node.type() == "Transpose") {
      auto perm = node.intsAttr("perm");
      if (!perm) {
        return Status::error("onnx: not supported yet: " + node.label() +
                             " reverses all axes, the batch axis included");
      }
      if (perm->empty() || (*perm)[0] != 0)
        return Status::error("onnx: not supported yet: " + node.label() + " moves the batch axis");
      SmallVector<int64_t> shifted;
      for (size_t i = 1; i < perm->size(); ++i)
        shifted.push_back((*perm)[i] - 1);
      op->setAttr("perm", b_.getDenseI64ArrayAttr(shifted));
      return Status::ok();
    }
    bool concat = node.type() == "Concat";
    if (!batched_.count(node.input(0)) && !concat)
      return Status::ok();
    // Axes count in the batched rank (the result's for Concat, the data's otherwise); negative
    // ones are made positive first, as -rank names the batch axis too.
    int64_t rank = at(first_, concat ? node.result() : node.input(0)).shape.size();
    auto shifted = [&](int64_t axis) -> StatusOr<int64_t> {
      axis = axis < 0 ? axis + rank : axis;
      if (axis == 0)
        return Status::error("onnx: not supported yet: " + node.label() +
                             " works along the batch axis");
      return axis - 1;
    };
    if (auto axis = node.intAttr("axis")) {
      auto moved = shifted(*axis);
      if (!moved)
        return moved.status();
      op->setAttr("axis", b_.getI64IntegerAttr(*moved));
    }
    if (auto axes = node.intsAttr("axes")) {
      SmallVector<int64_t> moved;
      for (int64_t axis : *axes) {
        auto one = shifted(axis);
        if (!one)
          return one.status();
        moved.push_back(*one);
      }
      op->setAttr("axes", b_.getDenseI64ArrayAttr(moved));
    }
    return Status::ok();
  }

  // Operands computed from the length and constants alone, as the patterns can read them.
  Status replaceFoldedOperands(OnnxNode node, bool batchedIn) {
    Operation *op = node.op();
    int64_t resultRank = first_.count(node.result()) ? at(first_, node.result()).shape.size() : -1;
    for (unsigned i = 0; i < op->getNumOperands(); ++i) {
      Value v = op->getOperand(i);
      if (!folded(v))
        continue;
      if (isa<BlockArgument>(v))
        return Status::error("onnx: not supported yet: " + node.label() +
                             " reads the positions or the attention mask directly");
      const Shape &shape = at(first_, v).shape;
      // Broadcast against a batched result with a leading 1 of its own: that axis goes too.
      bool dropBatch = batchedIn && int64_t(shape.size()) == resultRank && isBatched(shape) &&
                       isBatched(at(first_, node.result()).shape) && at(second_, v).shape[0] == 1;
      Operation *def = v.getDefiningOp();
      if (!def || !OnnxNode::of(def) || isPseudoOp(def)) { // weights and initializers
        if (dropBatch)
          return Status::error("onnx: not supported yet: " + node.label() + ": input " +
                               std::to_string(i) + " is a weight with a leading axis of 1 " +
                               "beside the batch axis");
        continue;
      }
      OnnxNode producer = OnnxNode::of(def);
      if (producer.type() == "Constant" && lengthFree(v) && !dropBatch)
        continue;
      auto replacement = materialize(v, producer, node, dropBatch);
      if (!replacement)
        return replacement.status();
      if (*replacement)
        op->setOperand(i, *replacement);
    }
    return Status::ok();
  }

  // What `v` (computed by `producer` from the length and constants) is, as an op before `user`;
  // null to leave it as it is (a constant of the file).
  StatusOr<Value> materialize(Value v, OnnxNode producer, OnnxNode user, bool dropBatch) {
    const EvaluatedValue &a = at(first_, v);
    if (lengthFree(v)) {
      if (!a.fromLength && !dropBatch)
        return Value(); // computed from the file's constants: the patterns fold those
      if (int64_t(a.values->size()) > kMaxShapeElements)
        return Status::error("onnx: not supported yet: " + producer.label() + " computes a " +
                             "constant of " + std::to_string(a.values->size()) + " elements that " +
                             user.label() + " uses");
      return Value(constantOp(user, denseOf(a, dropBatch)));
    }
    if (Value rows = ropeRows(v, user, dropBatch))
      return rows;
    if (Value mask = causalMask(v, user, dropBatch))
      return mask;
    if (auto mismatch = ropeMismatch(a, kFirstLength))
      return Status::error("onnx: " + producer.label() + ": " + *mismatch);
    return Status::error("onnx: not supported yet: " + producer.label() +
                         " computes from the sequence length a value of shape " +
                         listText(a.shape) + " (at length " + std::to_string(kFirstLength) +
                         ") that " + user.label() +
                         " uses, and that is neither a shape, RoPE tables nor a causal mask");
  }

  DenseElementsAttr denseOf(const EvaluatedValue &e, bool dropBatch) {
    SmallVector<int64_t> shape(e.shape.begin() + (dropBatch ? 1 : 0), e.shape.end());
    Type element = e.element ? e.element : b_.getF32Type();
    auto type = RankedTensorType::get(shape, element);
    if (element.isInteger(1)) {
      SmallVector<bool> flags;
      for (double x : *e.values)
        flags.push_back(x != 0);
      return DenseElementsAttr::get(type, flags);
    }
    if (isa<IntegerType>(element)) {
      SmallVector<APInt> ints;
      for (size_t i = 0; i < e.values->size(); ++i)
        // Wrapped to the width by the evaluation; sentinels and garbage are cut to it here.
        ints.push_back(
            APInt(64, uint64_t(e.intAt(i)), true).sextOrTrunc(element.getIntOrFloatBitWidth()));
      return DenseElementsAttr::get(type, ints);
    }
    SmallVector<APFloat> floats;
    for (double x : *e.values) {
      APFloat f(x);
      bool lost;
      f.convert(cast<FloatType>(element).getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
      floats.push_back(f);
    }
    return DenseElementsAttr::get(type, floats);
  }

  // The non-unit axes of `shape`, as (axis, size).
  static SmallVector<std::pair<size_t, int64_t>> nonUnitAxes(const Shape &shape) {
    SmallVector<std::pair<size_t, int64_t>> axes;
    for (size_t i = 0; i < shape.size(); ++i)
      if (shape[i] != 1)
        axes.push_back({i, shape[i]});
    return axes;
  }

  Type lengthType(Value v, bool dropBatch, Type element) {
    const Shape &a = at(first_, v).shape, &b = at(second_, v).shape;
    SmallVector<int64_t> dims;
    for (size_t i = dropBatch ? 1 : 0; i < a.size(); ++i)
      dims.push_back(a[i] == b[i] ? a[i] : ShapedType::kDynamic);
    return RankedTensorType::get(dims, element);
  }

  Value pseudoOp(StringRef name, OnnxNode user, Type type, ValueRange operands,
                 NamedAttribute attr) {
    OpBuilder b(user.op());
    OperationState state(user.op()->getLoc(), name);
    state.addOperands(operands);
    state.addAttribute(attr.getName(), attr.getValue());
    state.addAttribute(kOpsetAttr, b.getI64IntegerAttr(user.opset()));
    state.addAttribute(kNodeAttr, b.getStringAttr(user.name().str() + "/" +
                                                  name.drop_front(kOpPrefix.size()).str()));
    state.addTypes(type);
    return b.create(state)->getResult(0);
  }

  // `v` as RoPE cos or sin rows: [T, D] (size-1 axes anywhere before D) equal at both lengths to
  // NeoX RoPE of config.json's theta at positions 0 .. T - 1.
  Value ropeRows(Value v, OnnxNode user, bool dropBatch) {
    for (StringRef kind : {"cos", "sin"}) {
      bool matches = true;
      for (Evaluation *e : {&first_, &second_}) {
        const EvaluatedValue &value = at(*e, v);
        auto axes = nonUnitAxes(value.shape);
        int64_t length = e == &first_ ? kFirstLength : kSecondLength;
        if (axes.size() != 2 || axes[0].second != length ||
            axes[1].first + 1 != value.shape.size() || axes[1].second % 2 != 0 || !value.element ||
            value.element.isInteger(1)) {
          matches = false;
          break;
        }
        matches &= !firstRopeMismatch(*value.values, length, axes[1].second, kind == "cos");
      }
      if (!matches)
        continue;
      Value rows = pseudoOp(kRopeRowsOp, user, lengthType(v, dropBatch, b_.getF32Type()),
                            newPositions_, b_.getNamedAttr("kind", b_.getStringAttr(kind)));
      noteOnce("RoPE tables computed from the positions (checked against rope_theta)");
      return rows;
    }
    return Value();
  }

  // The first (position, dimension) where `values` [length, width] is not NeoX RoPE's cos (or
  // sin) for config.json's theta.
  std::optional<std::pair<int64_t, int64_t>>
  firstRopeMismatch(const std::vector<double> &values, int64_t length, int64_t width, bool cos) {
    double theta = model_.config.ropeTheta;
    for (int64_t p = 0; p < length; ++p)
      for (int64_t j = 0; j < width; ++j) {
        double angle = double(p) * std::pow(theta, -2.0 * double(j % (width / 2)) / double(width));
        double expected = cos ? std::cos(angle) : std::sin(angle);
        if (std::abs(values[p * width + j] - expected) > 2e-3)
          return std::pair(p, j);
      }
    return std::nullopt;
  }

  // Why a float value shaped like RoPE rows ([T, head_dim]) is not: its table has another theta.
  std::optional<std::string> ropeMismatch(const EvaluatedValue &value, int64_t length) {
    auto axes = nonUnitAxes(value.shape);
    if (axes.size() != 2 || axes[0].second != length || axes[1].first + 1 != value.shape.size() ||
        axes[1].second != model_.config.headDim || axes[1].second % 2 != 0 || !value.element ||
        !isa<FloatType>(value.element))
      return std::nullopt;
    int64_t width = axes[1].second;
    bool cos = std::abs((*value.values)[0] - 1.0) < 1e-3; // cos(0) = 1, sin(0) = 0
    auto at = firstRopeMismatch(*value.values, length, width, cos);
    if (!at)
      return std::nullopt;
    return std::string("RoPE ") + (cos ? "cos" : "sin") + " rows [T, " + std::to_string(width) +
           "] computed from the positions do not match rope_theta " +
           formatNumber(model_.config.ropeTheta) + " from config.json (position " +
           std::to_string(at->first) + ", dimension " + std::to_string(at->second) + ")";
  }

  // `v` as a causal mask over [T, T] (size-1 axes before it).
  Value causalMask(Value v, OnnxNode user, bool dropBatch) {
    for (StringRef form : {"future", "allowed", "additive"}) {
      bool matches = true;
      for (Evaluation *e : {&first_, &second_}) {
        const EvaluatedValue &value = at(*e, v);
        auto axes = nonUnitAxes(value.shape);
        int64_t length = e == &first_ ? kFirstLength : kSecondLength;
        bool boolean = value.element && value.element.isInteger(1);
        if (!value.element || axes.size() != 2 || axes[0].second != length ||
            axes[1].second != length || axes[1].first + 1 != value.shape.size() ||
            boolean != (form != "additive")) {
          matches = false;
          break;
        }
        for (int64_t i = 0; i < length && matches; ++i)
          for (int64_t j = 0; j < length && matches; ++j) {
            double x = (*value.values)[i * length + j];
            bool future = j > i;
            if (form == "future")
              matches = (x != 0) == future;
            else if (form == "allowed")
              matches = (x != 0) == !future;
            else
              matches = future ? x <= kMaskedBelow : x == 0;
          }
      }
      if (!matches)
        continue;
      Value mask = pseudoOp(kCausalMaskOp, user, lengthType(v, dropBatch, at(first_, v).element),
                            ValueRange(), b_.getNamedAttr("form", b_.getStringAttr(form)));
      noteOnce("causal mask built in the graph");
      return mask;
    }
    return Value();
  }

  void noteOnce(const std::string &what) {
    if (!llvm::is_contained(recognised_, what))
      recognised_.push_back(what);
  }

  void eraseDeadNodes() {
    Block &entry = forward_.getBody().front();
    int erased = 0;
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(entry)))
      if (OnnxNode::of(&op) && op.use_empty()) {
        erased += !isPseudoOp(&op) && OnnxNode::of(&op).type() != "Constant";
        op.erase();
      }
    if (erased > 0)
      noteOnce(std::to_string(erased) + " nodes of shape bookkeeping folded");
    if (!batched_.empty())
      noteOnce("batch dimension of 1 removed");
  }

  func::FuncOp forward_;
  OnnxFile &file_;
  const ModelDescription &model_;
  Recognised &recognised_;
  Builder b_;
  LengthInputs inputs_;
  Evaluation first_, second_;
  Value newIds_, newPositions_;
  llvm::DenseSet<Value> batched_;
};

} // namespace

Status foldShapes(func::FuncOp forward, OnnxFile &file, const ModelDescription &model,
                  Recognised &recognised) {
  return ShapeFolder(forward, file, model, recognised).run();
}

} // namespace dlm::importer::onnx
