// The raising driver, the pattern registry, and what patterns read: nodes, constants, weights.
#include "importer/onnx/Raising.h"

#include "compiler/dialects/dlm/DlmDialect.h"
#include "importer/onnx/MechanicalImport.h"

#include "mlir/IR/BuiltinAttributes.h"

#include "onnx/onnx_pb.h" // ONNX_API, then onnx-ml.pb.h under ONNX_ML

#include <cmath>
#include <cstdio>
#include <limits>

namespace dlm::importer::onnx {

using namespace mlir;

// ---- OnnxNode -----------------------------------------------------------------------------------

OnnxNode OnnxNode::of(Operation *op) {
  if (op && op->getName().getStringRef().starts_with(kOpPrefix))
    return OnnxNode(op);
  return OnnxNode();
}

OnnxNode OnnxNode::of(Value value) { return value ? of(value.getDefiningOp()) : OnnxNode(); }

StringRef OnnxNode::type() const {
  return op_->getName().getStringRef().drop_front(kOpPrefix.size());
}

int64_t OnnxNode::opset() const {
  auto attr = op_->getAttrOfType<IntegerAttr>(kOpsetAttr);
  return attr ? attr.getInt() : -1;
}

StringRef OnnxNode::name() const {
  auto attr = op_->getAttrOfType<StringAttr>(kNodeAttr);
  if (!attr)
    attr = op_->getAttrOfType<StringAttr>(kNameAttr);
  return attr ? attr.getValue() : StringRef("?");
}

std::string OnnxNode::label() const {
  if (op_->getName().getStringRef() == kInitializerOp)
    return "initializer '" + name().str() + "'";
  return "node '" + name().str() + "' (op " + type().str() + ", opset " +
         std::to_string(opset()) + ")";
}

unsigned OnnxNode::numInputs() const { return op_->getNumOperands(); }

Value OnnxNode::input(unsigned i) const {
  if (i >= op_->getNumOperands())
    return Value();
  Value v = op_->getOperand(i);
  Operation *def = v.getDefiningOp();
  if (def && def->getName().getStringRef() == kAbsentOp)
    return Value();
  return v;
}

Value OnnxNode::result() const { return op_->getNumResults() ? op_->getResult(0) : Value(); }

std::optional<int64_t> OnnxNode::intAttr(StringRef name) const {
  if (auto attr = op_->getAttrOfType<IntegerAttr>(name))
    return attr.getInt();
  return std::nullopt;
}

std::optional<SmallVector<int64_t>> OnnxNode::intsAttr(StringRef name) const {
  if (auto attr = op_->getAttrOfType<DenseI64ArrayAttr>(name))
    return SmallVector<int64_t>(attr.asArrayRef());
  return std::nullopt;
}

// ---- RaisingContext -----------------------------------------------------------------------------

namespace {

const ::onnx::TensorProto *initializerOf(Value value, OnnxFile &file) {
  Operation *op = value.getDefiningOp();
  if (!op)
    return nullptr;
  if (auto weight = dyn_cast<dlm::ir::WeightOp>(op))
    return file.initializer(weight.getName().str());
  if (op->getName().getStringRef() == kInitializerOp)
    if (auto name = op->getAttrOfType<StringAttr>(kNameAttr))
      return file.initializer(name.str());
  return nullptr;
}

bool isSmall(const ::onnx::TensorProto &tensor) {
  auto count = checkedElementCount(tensor.dims());
  return count && *count <= kMaxShapeElements;
}

// x `op` y (Add, Sub, Mul, Div), or nullopt where int64 overflows (the operands come from the
// file) or Div divides by zero.
std::optional<int64_t> arithmetic(StringRef op, int64_t x, int64_t y) {
  int64_t result = 0;
  bool overflow = false;
  if (op == "Add")
    overflow = __builtin_add_overflow(x, y, &result);
  else if (op == "Sub")
    overflow = __builtin_sub_overflow(x, y, &result);
  else if (op == "Mul")
    overflow = __builtin_mul_overflow(x, y, &result);
  else if (y == 0 || (x == std::numeric_limits<int64_t>::min() && y == -1))
    return std::nullopt;
  else
    result = x / y; // ONNX integer Div truncates
  return overflow ? std::nullopt : std::optional(result);
}

// Element-wise integer arithmetic with a one-element side broadcast.
std::optional<SmallVector<int64_t>> binary(StringRef op, ArrayRef<int64_t> a,
                                           ArrayRef<int64_t> b) {
  if (a.size() != b.size() && a.size() != 1 && b.size() != 1)
    return std::nullopt;
  SmallVector<int64_t> out;
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    auto value = arithmetic(op, a[a.size() == 1 ? 0 : i], b[b.size() == 1 ? 0 : i]);
    if (!value)
      return std::nullopt;
    out.push_back(*value);
  }
  return out;
}

} // namespace

std::optional<SmallVector<int64_t>> RaisingContext::ints(Value value) {
  auto folded = foldInts(value, 0);
  if (folded && llvm::is_contained(*folded, ShapedType::kDynamic))
    return std::nullopt; // INT64_MIN (ShapedType::kDynamic) is no shape value
  return folded;
}

std::optional<SmallVector<int64_t>> RaisingContext::foldInts(Value value, int depth) {
  if (!value || depth > 24)
    return std::nullopt;
  if (const ::onnx::TensorProto *init = initializerOf(value, file_)) {
    if (!isSmall(*init))
      return std::nullopt;
    auto values = file_.ints(*init);
    return values ? std::optional(SmallVector<int64_t>(values->begin(), values->end()))
                  : std::nullopt;
  }
  OnnxNode node = OnnxNode::of(value);
  if (!node)
    return std::nullopt;
  StringRef type = node.type();
  auto input = [&](unsigned i) { return foldInts(node.input(i), depth + 1); };
  if (type == "Constant") {
    if (auto v = node.intAttr("value_int"))
      return SmallVector<int64_t>{*v};
    if (auto v = node.intsAttr("value_ints"))
      return v;
    auto dense = node.op()->getAttrOfType<DenseIntElementsAttr>("value");
    if (!dense)
      return std::nullopt;
    SmallVector<int64_t> out;
    for (const APInt &v : dense.getValues<APInt>())
      out.push_back(v.getSExtValue());
    return out;
  }
  if (type == "Gather") {
    if (node.intAttr("axis").value_or(0) != 0)
      return std::nullopt;
    auto data = input(0), indices = input(1);
    if (!data || !indices)
      return std::nullopt;
    SmallVector<int64_t> out;
    for (int64_t i : *indices) {
      int64_t at = i < 0 ? i + int64_t(data->size()) : i;
      if (at < 0 || at >= int64_t(data->size()) || (*data)[at] == ShapedType::kDynamic)
        return std::nullopt;
      out.push_back((*data)[at]);
    }
    return out;
  }
  if (type == "Unsqueeze" || type == "Squeeze" || type == "Reshape" || type == "Flatten" ||
      type == "Identity" || type == "Cast")
    return input(0); // element values are unchanged (integer Casts of shape values)
  if (type == "Concat") {
    SmallVector<int64_t> out;
    for (unsigned i = 0; i < node.numInputs(); ++i) {
      auto part = input(i);
      if (!part)
        return std::nullopt;
      out.append(*part);
    }
    return out;
  }
  if (type == "Add" || type == "Sub" || type == "Mul" || type == "Div") {
    auto a = input(0), b = input(1);
    if (!a || !b || llvm::is_contained(*a, ShapedType::kDynamic) ||
        llvm::is_contained(*b, ShapedType::kDynamic))
      return std::nullopt;
    return binary(type, *a, *b);
  }
  if (type == "Neg") {
    auto a = input(0);
    if (!a)
      return std::nullopt;
    for (int64_t &v : *a)
      if (v != ShapedType::kDynamic) // stays dynamic; as INT64_MIN, -v would overflow
        v = -v;
    return a;
  }
  if (type == "ConstantOfShape") {
    auto shape = input(0);
    auto count = shape ? checkedElementCount(*shape) : std::nullopt; // dynamic dims are negative
    if (!count || *count > kMaxShapeElements)
      return std::nullopt;
    int64_t fill = 0;
    if (auto dense = node.op()->getAttrOfType<DenseElementsAttr>("value")) {
      if (auto ints = dyn_cast<DenseIntElementsAttr>(dense))
        fill = (*ints.getValues<APInt>().begin()).getSExtValue();
      else
        return std::nullopt;
    }
    return SmallVector<int64_t>(*count, fill);
  }
  return std::nullopt;
}

std::optional<SmallVector<double>> RaisingContext::floats(Value value) {
  if (!value)
    return std::nullopt;
  if (const ::onnx::TensorProto *init = initializerOf(value, file_)) {
    if (!isSmall(*init))
      return std::nullopt;
    auto values = file_.floats(*init);
    return values ? std::optional(SmallVector<double>(values->begin(), values->end()))
                  : std::nullopt;
  }
  OnnxNode node = OnnxNode::of(value);
  if (!node)
    return std::nullopt;
  StringRef type = node.type();
  if (type == "Constant") {
    if (auto f = node.op()->getAttrOfType<FloatAttr>("value_float"))
      return SmallVector<double>{f.getValueAsDouble()};
    if (auto fs = node.op()->getAttrOfType<DenseF32ArrayAttr>("value_floats"))
      return SmallVector<double>(fs.asArrayRef().begin(), fs.asArrayRef().end());
    if (auto dense = node.op()->getAttrOfType<DenseFPElementsAttr>("value")) {
      SmallVector<double> out;
      for (const APFloat &v : dense.getValues<APFloat>())
        out.push_back(v.convertToDouble());
      return out;
    }
  }
  if (type == "Identity" || type == "Cast" || type == "Unsqueeze" || type == "Squeeze" ||
      type == "Reshape") {
    if (auto inner = floats(node.input(0)))
      return inner;
  } else if (type == "Sqrt" || type == "Neg" || type == "Reciprocal") {
    auto inner = floats(node.input(0));
    if (!inner)
      return std::nullopt;
    for (double &v : *inner)
      v = type == "Sqrt" ? std::sqrt(v) : type == "Neg" ? -v : 1.0 / v;
    return inner;
  }
  if (auto asInts = ints(value))
    if (!llvm::is_contained(*asInts, ShapedType::kDynamic))
      return SmallVector<double>(asInts->begin(), asInts->end());
  return std::nullopt;
}

std::optional<double> RaisingContext::scalar(Value value) {
  auto values = floats(value);
  if (!values || values->size() != 1)
    return std::nullopt;
  return values->front();
}

LogicalResult RaisingContext::reject(const Twine &reason) {
  std::string &text = reasons_[root_].text;
  text += (text.empty() ? "" : "; ") + pattern_ + ": " + reason.str();
  return failure();
}

LogicalResult RaisingContext::mismatch(const Twine &reason) {
  reasons_[root_].anchored = true;
  return reject(reason);
}

LogicalResult RaisingContext::fail(const Twine &message) {
  if (status_.isOk())
    status_ = Status::error("onnx: " + OnnxNode::of(root_).label() + ": " + message.str());
  return failure();
}

void RaisingContext::note(const std::string &what) {
  if (!llvm::is_contained(notes_, what))
    notes_.push_back(what);
}

void RaisingContext::beginAttempt(Operation *root, StringRef pattern) {
  root_ = root;
  pattern_ = pattern.str();
}

// ---- RaisingPatterns ----------------------------------------------------------------------------

void RaisingPatterns::onOp(StringRef opType, int64_t sinceVersion, StringRef pattern,
                           RaiseFn raise) {
  entries_[opType.str()].push_back({sinceVersion, pattern.str(), std::move(raise)});
}

void RaisingPatterns::covers(std::initializer_list<StringRef> opTypes) {
  for (StringRef type : opTypes)
    covered_.insert(type.str());
}

std::vector<const RaisingPatterns::Entry *> RaisingPatterns::lookup(const OnnxNode &node) const {
  std::vector<const Entry *> chosen;
  auto it = entries_.find(node.type());
  if (it == entries_.end())
    return chosen;
  for (const Entry &entry : it->second) {
    if (entry.since > node.opset())
      continue;
    // A newer registration of the same pattern that still applies supersedes this one.
    bool superseded = llvm::any_of(it->second, [&](const Entry &other) {
      return other.pattern == entry.pattern && other.since > entry.since &&
             other.since <= node.opset();
    });
    if (!superseded)
      chosen.push_back(&entry);
  }
  return chosen;
}

bool RaisingPatterns::knows(StringRef opType) const {
  return entries_.count(opType) || covered_.count(opType);
}

int64_t RaisingPatterns::firstVersion(StringRef opType) const {
  auto it = entries_.find(opType);
  if (it == entries_.end())
    return 0;
  int64_t first = INT64_MAX;
  for (const Entry &entry : it->second)
    first = std::min(first, entry.since);
  return first;
}

// ---- matching helpers ---------------------------------------------------------------------------

std::string formatNumber(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}

RankedTensorType rankedType(Value value) {
  return value ? dyn_cast<RankedTensorType>(value.getType()) : RankedTensorType();
}

namespace {

// The rank of `value`, also where phase 1 had no type for it but its producer implies one (an
// Unsqueeze of a value raised since).
std::optional<int64_t> rankOf(Value value, RaisingContext &context) {
  if (auto ranked = rankedType(value))
    return ranked.getRank();
  OnnxNode node = OnnxNode::of(value);
  if (node && node.type() == "Unsqueeze")
    if (auto axes = context.ints(node.input(1)))
      if (auto inner = rankOf(node.input(0), context))
        return *inner + int64_t(axes->size());
  return std::nullopt;
}

} // namespace

Value skipNoOps(Value value, RaisingContext &context) {
  for (int guard = 0; guard < 16 && value; ++guard) {
    OnnxNode node = OnnxNode::of(value);
    if (!node)
      return value;
    Value in = node.input(0);
    if (node.type() == "Identity") {
      value = in;
      continue;
    }
    if (node.type() == "Cast") {
      auto from = dyn_cast_or_null<ShapedType>(in ? in.getType() : Type());
      auto to = dyn_cast<ShapedType>(node.result().getType());
      if (from && to && from.getElementType() == to.getElementType()) {
        value = in;
        continue;
      }
      return value;
    }
    if (node.type() == "Expand") {
      auto shape = context.ints(node.input(1));
      auto rank = rankOf(in, context);
      if (shape && rank && int64_t(shape->size()) <= *rank &&
          llvm::all_of(*shape, [](int64_t d) { return d == 1; })) {
        value = in;
        continue;
      }
    }
    return value;
  }
  return value;
}

OnnxNode producer(Value value, StringRef opType, RaisingContext &context) {
  OnnxNode node = OnnxNode::of(skipNoOps(value, context));
  return node && node.type() == opType ? node : OnnxNode();
}

Operation *weightOp(Value value, RaisingContext &context) {
  Value v = skipNoOps(value, context);
  return v ? dyn_cast_or_null<dlm::ir::WeightOp>(v.getDefiningOp()) : nullptr;
}

namespace {

// W from Transpose(W, perm = [1, 0]) with W a rank-2 weight.
Value transposedWeight(Value value, RaisingContext &context) {
  OnnxNode t = producer(value, "Transpose", context);
  if (!t || t.intsAttr("perm").value_or(SmallVector<int64_t>{1, 0}) != SmallVector<int64_t>{1, 0})
    return Value();
  Operation *w = weightOp(t.input(0), context);
  if (!w || rankedType(w->getResult(0)).getRank() != 2)
    return Value();
  return w->getResult(0);
}

bool isRank(Value value, int64_t rank) {
  auto ranked = rankedType(value);
  return ranked && ranked.getRank() == rank;
}

} // namespace

std::optional<LinearMatch> matchLinear(Value value, RaisingContext &context) {
  Value v = skipNoOps(value, context);
  if (!v)
    return std::nullopt;
  if (auto linear = v.getDefiningOp<dlm::ir::LinearOp>())
    return LinearMatch{linear.getInput(), linear.getWeight(), linear.getBias()};
  OnnxNode node = OnnxNode::of(v);
  if (!node)
    return std::nullopt;
  if (node.type() == "MatMul") {
    Value w = transposedWeight(node.input(1), context);
    if (!w)
      return std::nullopt;
    return LinearMatch{node.input(0), w, Value()};
  }
  if (node.type() == "Add") {
    for (int side = 0; side < 2; ++side) {
      auto inner = matchLinear(node.input(side), context);
      Operation *bias = weightOp(node.input(1 - side), context);
      if (inner && !inner->bias && bias && isRank(bias->getResult(0), 1) &&
          rankedType(bias->getResult(0)).getDimSize(0) ==
              rankedType(inner->weight).getDimSize(0))
        return LinearMatch{inner->input, inner->weight, bias->getResult(0)};
    }
    return std::nullopt;
  }
  if (node.type() == "Gemm") {
    auto isOne = [&](StringRef name) {
      auto attr = node.op()->getAttrOfType<FloatAttr>(name);
      return !attr || attr.getValueAsDouble() == 1.0; // both default to 1
    };
    if (node.intAttr("transA").value_or(0) != 0 || !isOne("alpha") || !isOne("beta"))
      return std::nullopt;
    Value w;
    if (node.intAttr("transB").value_or(0) == 1) {
      Operation *weight = weightOp(node.input(1), context);
      w = weight && isRank(weight->getResult(0), 2) ? weight->getResult(0) : Value();
    } else {
      w = transposedWeight(node.input(1), context);
    }
    if (!w)
      return std::nullopt;
    Value c = node.input(2);
    if (!c)
      return LinearMatch{node.input(0), w, Value()};
    if (Operation *bias = weightOp(c, context); bias && isRank(bias->getResult(0), 1))
      return LinearMatch{node.input(0), w, bias->getResult(0)};
    if (auto zeros = context.floats(c); zeros && llvm::all_of(*zeros, [](double x) {
          return x == 0.0;
        }))
      return LinearMatch{node.input(0), w, Value()};
    return std::nullopt;
  }
  return std::nullopt;
}

// ---- the driver ---------------------------------------------------------------------------------

namespace {

void eraseDeadNodes(Block &body, RaisingContext &context) {
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(body))) {
    if (!OnnxNode::of(&op) || !op.use_empty())
      continue;
    context.forget(&op);
    op.erase();
  }
}

// A node some of whose users are already raised (or return it): the root of a subgraph that
// did not raise, rather than an interior node of one.
bool feedsRaisedIR(Operation *op) {
  return llvm::any_of(op->getUsers(), [](Operation *user) { return !OnnxNode::of(user); });
}

Status reportLeftovers(Block &body, const RaisingPatterns &patterns, RaisingContext &context) {
  SmallVector<OnnxNode> left;
  for (Operation &op : body)
    if (OnnxNode node = OnnxNode::of(&op);
        node && op.getName().getStringRef() != kAbsentOp)
      left.push_back(node);
  if (left.empty())
    return Status::ok();
  auto isNode = [](const OnnxNode &n) {
    return n.op()->getName().getStringRef() != kInitializerOp;
  };
  for (const OnnxNode &n : left)
    if (isNode(n) && !patterns.knows(n.type()))
      return Status::error("onnx: " + n.label() + " is not supported");
  for (const OnnxNode &n : left)
    if (isNode(n) && patterns.firstVersion(n.type()) > n.opset())
      return Status::error("onnx: " + n.label() + " is not supported (dlm raises " +
                           n.type().str() + " from opset " +
                           std::to_string(patterns.firstVersion(n.type())) + ")");
  // The best explanation: a root some pattern anchored on; then a node at the boundary to the
  // raised IR; then any node a pattern was tried on.
  const auto &reasons = context.reasons();
  auto explained = [&](auto accept) -> std::optional<Status> {
    for (const OnnxNode &n : left)
      if (auto it = reasons.find(n.op()); it != reasons.end() && accept(n, it->second))
        return Status::error("onnx: " + n.label() + " is not part of a subgraph dlm recognises (" +
                             it->second.text + ")");
    return std::nullopt;
  };
  using Reasons = RaisingContext::Reasons;
  if (auto s = explained([](const OnnxNode &, const Reasons &r) { return r.anchored; }))
    return *s;
  if (auto s = explained([](const OnnxNode &n, const Reasons &) { return feedsRaisedIR(n.op()); }))
    return *s;
  if (auto s = explained([](const OnnxNode &, const Reasons &) { return true; }))
    return *s;
  for (const OnnxNode &n : left)
    if (feedsRaisedIR(n.op()))
      return Status::error("onnx: " + n.label() + " is not part of a subgraph dlm recognises");
  return Status::error("onnx: " + left.front().label() +
                       " is not part of a subgraph dlm recognises");
}

// torch.onnx.export folds the transpose of a linear layer's weight by default: MatMul(x, Wt)
// with Wt = W^T stored as an [in, out] initializer under a new name ("onnx::MatMul_428"). Each
// such MatMul is given the form the patterns know, MatMul(x, Transpose(W)), with W a weight op of
// the same initializer typed [out, in] and marked kTransposedWeightAttr: the import reads it
// transposed (OnnxImport.cpp). A MatMul's second operand that is a rank-2 initializer is always
// such a weight: y = x·Wt is x·Wᵀ with W = Wtᵀ.
void exposeFoldedTransposes(func::FuncOp forward, RaisingContext &context) {
  bool any = false;
  std::map<std::string, Value> transposed; // initializer name → its [out, in] weight op
  SmallVector<Operation *> matmuls;
  forward.walk([&](Operation *op) {
    OnnxNode node = OnnxNode::of(op);
    if (node && node.type() == "MatMul" && node.numInputs() == 2)
      matmuls.push_back(op);
  });
  for (Operation *op : matmuls) {
    OnnxNode node = OnnxNode::of(op);
    Value operand = skipNoOps(node.input(1), context); // through Identity and no-op Casts
    auto stored = operand ? operand.getDefiningOp<dlm::ir::WeightOp>() : dlm::ir::WeightOp();
    auto type = stored ? dyn_cast<RankedTensorType>(stored.getType()) : RankedTensorType();
    if (!type || type.getRank() != 2)
      continue;
    OpBuilder b(op);
    Value &weight = transposed[stored.getName().str()];
    if (!weight) {
      OpBuilder atStored(stored);
      auto w = dlm::ir::WeightOp::create(
          atStored, stored.getLoc(),
          RankedTensorType::get({type.getDimSize(1), type.getDimSize(0)}, type.getElementType()),
          stored.getName());
      w->setAttr(kTransposedWeightAttr, b.getUnitAttr());
      weight = w.getResult();
    }
    OperationState state(op->getLoc(), std::string(kOpPrefix) + "Transpose");
    state.addOperands(weight);
    state.addTypes(type);
    state.addAttribute("perm", b.getDenseI64ArrayAttr({1, 0}));
    state.addAttribute(kOpsetAttr, op->getAttr(kOpsetAttr));
    state.addAttribute(kNodeAttr, b.getStringAttr(node.name().str() + "/folded_transpose"));
    op->setOperand(1, b.create(state)->getResult(0));
    any = true;
  }
  if (any)
    context.note("linear weights stored transposed (constant folding)");
}

} // namespace

Status checkOpset(OnnxFile &file) {
  int64_t opset = file.opsetVersion("");
  if (opset < 0)
    return Status::error("onnx: the model imports no opset of the default ONNX domain");
  if (opset < kMinOpset)
    return Status::error("onnx: opset " + std::to_string(opset) +
                         " is not supported (need >= " + std::to_string(kMinOpset) + ")");
  return Status::ok();
}

Status raiseGraph(func::FuncOp forward, OnnxFile &file, const ModelDescription &model,
                  std::vector<std::string> &recognised) {
  DLM_RETURN_IF_ERROR(checkOpset(file));
  RaisingPatterns patterns;
  // Attention first: its Add root (RoPE) must be tried before the residual-add reading.
  addAttentionPatterns(patterns);
  addTransformerPatterns(patterns);

  RaisingContext context(file, model);
  exposeFoldedTransposes(forward, context);
  IRRewriter rewriter(forward.getContext());
  Block &body = forward.getBody().front();
  // One pass normally raises everything (producers come first); another catches roots whose
  // subgraph only became recognisable after a later raise.
  for (int round = 0; round < 4; ++round) {
    bool changed = false;
    context.forgetAll(); // only the last round's reasons explain what is left
    SmallVector<Operation *> nodes;
    for (Operation &op : body)
      if (OnnxNode::of(&op))
        nodes.push_back(&op);
    for (Operation *op : nodes) {
      if (op->use_empty())
        continue; // interior of a subgraph raised earlier in this pass
      OnnxNode node = OnnxNode::of(op);
      for (const RaisingPatterns::Entry *entry : patterns.lookup(node)) {
        context.beginAttempt(op, entry->pattern);
        rewriter.setInsertionPoint(op);
        if (succeeded(entry->raise(node, context, rewriter))) {
          context.forget(op);
          changed = true;
          break;
        }
        if (!context.status().isOk())
          return context.status();
      }
    }
    eraseDeadNodes(body, context);
    if (!changed)
      break;
  }
  recognised.insert(recognised.end(), context.notes().begin(), context.notes().end());
  return reportLeftovers(body, patterns, context);
}

} // namespace dlm::importer::onnx
