#include "importer/onnx/LengthEvaluation.h"

#include "compiler/dialects/dlm/DlmDialect.h"
#include "importer/onnx/MechanicalImport.h"
#include "importer/onnx/Raising.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <functional>
#include <limits>

namespace dlm::importer::onnx {

using namespace mlir;

int64_t EvaluatedValue::intAt(size_t i) const {
  double v = (*values)[i];
  if (std::isnan(v))
    return std::numeric_limits<int64_t>::min();
  if (v >= 9.2e18)
    return std::numeric_limits<int64_t>::max();
  if (v <= -9.2e18)
    return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

std::vector<int64_t> EvaluatedValue::ints() const {
  std::vector<int64_t> out;
  for (size_t i = 0; i < values->size(); ++i)
    out.push_back(intAt(i));
  return out;
}

namespace {

// Contents are computed up to this many elements per value (RoPE tables of real models fit;
// weights do not need to), this many in all (a hostile file cannot make the import hold more),
// and MatMuls up to this many multiply-adds.
constexpr int64_t kMaxContents = int64_t{1} << 21;
constexpr int64_t kMaxTotalContents = int64_t{1} << 24;
constexpr int64_t kMaxMatMulWork = int64_t{1} << 26;
// Without an input computed from the length, contents are computed only for shape-sized values:
// a weight's transpose is not bookkeeping.
constexpr int64_t kMaxConstantContents = kMaxShapeElements;

using Shape = std::vector<int64_t>;

int64_t elementCount(const Shape &shape) {
  return checkedElementCount(shape).value_or(std::numeric_limits<int64_t>::max());
}

// Products that may pass int64 where nothing is read: computed modulo 2^64, so that an index
// that is in range comes out right however its terms overflowed (a fuzzed [0, 111, 2^62, 1]
// has no elements but strides past int64), with no signed overflow on the way.
int64_t wrappingMultiply(int64_t a, int64_t b) { return int64_t(uint64_t(a) * uint64_t(b)); }
int64_t wrappingAdd(int64_t a, int64_t b) { return int64_t(uint64_t(a) + uint64_t(b)); }
int64_t wrappingSubtract(int64_t a, int64_t b) { return int64_t(uint64_t(a) - uint64_t(b)); }

Shape stridesOf(const Shape &shape) {
  Shape strides(shape.size(), 1);
  for (int64_t i = int64_t(shape.size()) - 2; i >= 0; --i)
    strides[i] = wrappingMultiply(strides[i + 1], shape[i + 1]);
  return strides;
}

// Walks the elements of a shape in row-major order, keeping the flat index
// `base + sum(coordinate[d] * strides[d])` into the input they are read from: a step costs O(1)
// amortised where dividing each flat index by the dimensions costs O(rank), and the contents
// budget lets a file ask for millions of elements.
class StridedWalk {
public:
  StridedWalk(Shape shape, Shape strides, int64_t base = 0)
      : shape_(std::move(shape)), strides_(std::move(strides)), coordinate_(shape_.size(), 0),
        index_(base) {}

  int64_t index() const { return index_; }

  void next() {
    for (int64_t d = int64_t(shape_.size()) - 1; d >= 0; --d) {
      index_ = wrappingAdd(index_, strides_[d]);
      if (++coordinate_[d] < shape_[d])
        return;
      index_ = wrappingSubtract(index_, wrappingMultiply(strides_[d], coordinate_[d]));
      coordinate_[d] = 0;
    }
  }

private:
  Shape shape_, strides_, coordinate_;
  int64_t index_;
};

// Appends the `shape` elements that `strides` (from `base`) pick out of `from`, a row of the
// last axis at a time.
void appendWalked(std::vector<double> &values, const std::vector<double> &from, const Shape &shape,
                  const Shape &strides, int64_t base = 0) {
  if (shape.empty()) {
    values.push_back(from[base]);
    return;
  }
  const int64_t run = shape.back(), step = strides.back();
  Shape rowShape(shape.begin(), shape.end() - 1);
  StridedWalk rows(rowShape, Shape(strides.begin(), strides.end() - 1), base);
  for (int64_t r = 0, count = run == 0 ? 0 : elementCount(rowShape); r < count; ++r, rows.next()) {
    for (int64_t j = 0, at = rows.index(); j < run; ++j, at = wrappingAdd(at, step))
      values.push_back(from[size_t(at)]);
  }
}

// The strides that read `from` broadcast to `to` (aligned right): 0 along broadcast axes.
Shape broadcastStrides(const Shape &to, const Shape &from) {
  Shape strides(to.size(), 0), own = stridesOf(from);
  for (size_t i = 0; i < from.size(); ++i)
    if (from[from.size() - 1 - i] != 1)
      strides[to.size() - 1 - i] = own[from.size() - 1 - i];
  return strides;
}

// The flat index into `from` (broadcast to `to`, aligned right) of element `flat` of `to`.
int64_t broadcastIndex(int64_t flat, const Shape &to, const Shape &from) {
  int64_t index = 0, stride = 1;
  for (int64_t i = int64_t(to.size()) - 1, j = int64_t(from.size()) - 1; i >= 0; --i, --j) {
    int64_t coordinate = flat % to[i];
    flat /= to[i];
    if (j < 0)
      continue;
    if (from[j] != 1)
      index += coordinate * stride;
    stride *= from[j];
  }
  return index;
}

int64_t normalizeAxis(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

bool isIntegerLike(Type t) { return t && (isa<IntegerType>(t) || isa<IndexType>(t)); }

Type elementOf(Value v) {
  if (auto shaped = dyn_cast_or_null<ShapedType>(v ? v.getType() : Type()))
    return shaped.getElementType();
  return Type();
}

// ONNX TensorProto data types the evaluator distinguishes.
Type onnxElementType(int64_t dataType, Builder &b) {
  switch (dataType) {
  case 1:
    return b.getF32Type();
  case 10:
    return b.getF16Type();
  case 16:
    return b.getBF16Type();
  case 11:
    return b.getF64Type();
  case 9:
    return b.getI1Type();
  case 3:
    return b.getIntegerType(8);
  case 5:
    return b.getIntegerType(16);
  case 6:
    return b.getIntegerType(32);
  case 7:
    return b.getIntegerType(64);
  case 2:
    return b.getIntegerType(8, /*isSigned=*/false);
  case 4:
    return b.getIntegerType(16, /*isSigned=*/false);
  case 12:
    return b.getIntegerType(32, /*isSigned=*/false);
  case 13:
    return b.getIntegerType(64, /*isSigned=*/false);
  default:
    return Type();
  }
}

class Evaluator {
public:
  Evaluator(const LengthInputs &inputs, int64_t length, OnnxFile &file, MLIRContext *context)
      : inputs_(inputs), length_(length), file_(file), b_(context) {}

  StatusOr<Evaluation> run(func::FuncOp forward) {
    for (BlockArgument arg : forward.getArguments())
      DLM_RETURN_IF_ERROR(seedArgument(arg));
    for (Operation &op : forward.getBody().front()) {
      if (isa<func::ReturnOp>(op))
        continue;
      DLM_RETURN_IF_ERROR(visit(&op));
      DLM_RETURN_IF_ERROR(loadError_);
    }
    return std::move(values_);
  }

private:
  // Inputs are [T] or [batch, T]; batch is 1.
  Status seedArgument(BlockArgument arg) {
    auto ranked = dyn_cast<RankedTensorType>(arg.getType());
    if (!ranked || ranked.getRank() < 1 || ranked.getRank() > 2)
      return Status::error("onnx: graph input " + std::to_string(arg.getArgNumber()) +
                           " is not [sequence] or [batch, sequence]");
    EvaluatedValue &v = values_[arg];
    v.shape = ranked.getRank() == 1 ? Shape{length_} : Shape{1, length_};
    v.element = ranked.getElementType();
    if (arg == inputs_.positions || arg == inputs_.attentionMask) {
      v.values.emplace();
      for (int64_t t = 0; t < length_; ++t)
        v.values->push_back(arg == inputs_.positions ? double(t) : 1.0);
      v.fromLength = true;
    }
    return Status::ok();
  }

  const ::onnx::TensorProto *initializerOf(Value value) {
    Operation *op = value ? value.getDefiningOp() : nullptr;
    if (auto weight = dyn_cast_or_null<dlm::ir::WeightOp>(op))
      return file_.initializer(weight.getName().str());
    if (op && op->getName().getStringRef() == kInitializerOp)
      if (auto name = op->getAttrOfType<StringAttr>(kNameAttr))
        return file_.initializer(name.str());
    return nullptr;
  }

  // Rows [first, first + count) of a 2-D or larger initializer too large to load whole (a RoPE
  // table of a long-context model that the graph slices or gathers at the positions).
  std::optional<std::vector<double>> initializerRows(Value value, int64_t first, int64_t count) {
    const ::onnx::TensorProto *init = initializerOf(value);
    const Shape &shape = values_[value].shape;
    if (!init || shape.empty())
      return std::nullopt;
    int64_t row = elementCount(Shape(shape.begin() + 1, shape.end()));
    auto elements = checkedElementCount(Shape{count, row});
    auto offset = checkedElementCount(Shape{first, row});
    if (!elements || !offset || *elements > budget_)
      return std::nullopt;
    auto rows = file_.floats(*init, *offset, *elements);
    if (!rows) {
      if (loadError_.isOk())
        loadError_ = rows.status();
      return std::nullopt;
    }
    budget_ -= *elements;
    return std::move(*rows);
  }

  // Loads an initializer's contents when first needed (and small enough).
  bool ensureContents(Value value, int64_t limit) {
    auto it = values_.find(value);
    if (it == values_.end())
      return false;
    EvaluatedValue &v = it->second;
    if (v.values)
      return true;
    if (elementCount(v.shape) > limit || elementCount(v.shape) > budget_)
      return false;
    const ::onnx::TensorProto *init = initializerOf(value);
    if (!init)
      return false;
    auto contents = file_.floats(*init);
    if (!contents) {
      if (loadError_.isOk())
        loadError_ = contents.status(); // a damaged file: reported, not guessed around
      return false;
    }
    if (int64_t(contents->size()) != elementCount(v.shape))
      return false;
    budget_ -= int64_t(contents->size());
    v.values = std::move(*contents);
    return true;
  }

  Status visit(Operation *op) {
    if (auto weight = dyn_cast<dlm::ir::WeightOp>(op))
      return seedFromType(weight.getResult());
    StringRef name = op->getName().getStringRef();
    if (name == kAbsentOp)
      return Status::ok();
    if (name == kInitializerOp)
      return seedFromType(op->getResult(0));
    OnnxNode node = OnnxNode::of(op);
    if (!node)
      return Status::error("onnx: internal error: unexpected op " + name.str() + " before raising");
    node_ = node;
    if (op->getNumResults() == 0)
      return Status::ok(); // nothing to evaluate, and nothing can read it
    for (unsigned i = 0; i < node.numInputs(); ++i)
      if (Value in = node.input(i); in && !values_.count(in))
        return Status::error("onnx: " + node.label() + ": input " + std::to_string(i) +
                             " has no evaluated shape");
    return evaluateNode(node);
  }

  Status seedFromType(Value value) {
    auto ranked = dyn_cast<RankedTensorType>(value.getType());
    if (!ranked || !ranked.hasStaticShape())
      return Status::ok(); // e.g. an initializer of an element type dlm cannot read
    EvaluatedValue &v = values_[value];
    v.shape = Shape(ranked.getShape().begin(), ranked.getShape().end());
    v.element = ranked.getElementType();
    return Status::ok();
  }

  Status unsupported(const std::string &why) {
    return Status::error("onnx: " + node_.label() + ": " + why);
  }

  // Input `i` as evaluated; an empty value (no shape, no contents) where it is absent.
  const EvaluatedValue &in(unsigned i) {
    static const EvaluatedValue kAbsent;
    Value v = node_.input(i);
    auto it = v ? values_.find(v) : values_.end();
    return it == values_.end() ? kAbsent : it->second;
  }
  bool has(unsigned i) { return node_.input(i) && values_.count(node_.input(i)); }
  // The first `count` inputs are there (handlers index them without looking).
  Status needInputs(unsigned count) {
    for (unsigned i = 0; i < count; ++i)
      if (!has(i))
        return unsupported("input " + std::to_string(i) + " is missing");
    return Status::ok();
  }

  // The contents of input `i` as integers (shape operands), loading small initializers.
  std::optional<Shape> intsOf(unsigned i) {
    if (!has(i) || !ensureContents(node_.input(i), kMaxContents))
      return std::nullopt;
    return in(i).ints();
  }

  // Whether the result's contents are computed: every input's are (or load), and either some
  // input comes from the length or all are shape-sized.
  bool contentsComputable() {
    bool fromLength = false, allSmall = true;
    for (unsigned i = 0; i < node_.numInputs(); ++i) {
      Value v = node_.input(i);
      if (!v)
        continue;
      auto it = values_.find(v);
      if (it == values_.end())
        return false;
      fromLength |= it->second.fromLength;
      allSmall &= elementCount(it->second.shape) <= kMaxConstantContents;
    }
    int64_t limit = fromLength ? kMaxContents : kMaxConstantContents;
    if (!fromLength && !allSmall)
      return false;
    for (unsigned i = 0; i < node_.numInputs(); ++i)
      if (Value v = node_.input(i); v && !ensureContents(v, limit))
        return false;
    return true;
  }

  bool anyFromLength() {
    for (unsigned i = 0; i < node_.numInputs(); ++i)
      if (has(i) && in(i).fromLength)
        return true;
    return false;
  }

  // Sets result `index` to `shape`; contents by `compute` when computable and not too large.
  // `ready`: `compute` reads no input's contents but its own (rows it loaded).
  Status result(Shape shape, Type element,
                const std::function<void(std::vector<double> &)> &compute = nullptr,
                unsigned index = 0, bool ready = false) {
    if (index >= node_.op()->getNumResults())
      return unsupported("has fewer outputs than it computes");
    for (int64_t d : shape)
      if (d < 0)
        return unsupported("computes a negative dimension");
    if (!checkedElementCount(shape))
      return unsupported("computes a shape whose element count overflows");
    EvaluatedValue v;
    v.shape = std::move(shape);
    if (!element)
      element = elementOf(node_.op()->getResult(index));
    if (!element)
      element = b_.getF32Type(); // nothing says: the activations' type
    v.element = element;
    DLM_RETURN_IF_ERROR(checkDeclaredType(node_.op()->getResult(index), v.shape));
    // A Shape or Size reads only its input's shape.
    bool shapeOnly = node_.type() == "Shape" || node_.type() == "Size";
    v.fromLength = anyFromLength() || shapeOnly;
    int64_t count = elementCount(v.shape);
    // Rows read for `ready` were charged to the budget as they were read.
    if (compute && count <= kMaxContents && (ready || count <= budget_) &&
        (shapeOnly || ready || contentsComputable())) {
      if (!ready)
        budget_ -= count;
      v.values.emplace();
      v.values->reserve(count);
      compute(*v.values);
      if (int64_t(v.values->size()) != count)
        return Status::error("onnx: internal error: " + node_.label() + " computed " +
                             std::to_string(v.values->size()) + " of " + std::to_string(count) +
                             " elements");
      ElementForm form(element);
      if (form.rewritesValues())
        for (double &x : *v.values)
          x = form(x);
    }
    values_[node_.op()->getResult(index)] = std::move(v);
    return Status::ok();
  }

  // `x` as a value of `element`: booleans 0 or 1, integers truncated and wrapped to their width.
  // How values of an element type are held: booleans 0 or 1, integers truncated and wrapped to
  // their width, floats as they are. Read from the type once, not once an element.
  class ElementForm {
  public:
    explicit ElementForm(Type element) {
      if (element.isInteger(1)) {
        boolean_ = true;
      } else if (auto integer = dyn_cast<IntegerType>(element)) {
        width_ = integer.getWidth();
        unsigned_ = integer.isUnsigned();
      }
    }

    bool rewritesValues() const { return boolean_ || width_ != 0; }

    double operator()(double x) const {
      if (boolean_)
        return x != 0;
      if (width_ == 0 || !std::isfinite(x) || std::abs(x) >= 9.2e18)
        return x; // sentinels ("to the end") and garbage stay as they are; intAt clamps them
      uint64_t bits = uint64_t(int64_t(std::trunc(x)));
      if (width_ < 64)
        bits &= (uint64_t{1} << width_) - 1;
      if (unsigned_)
        return double(bits);
      if (width_ < 64 && (bits >> (width_ - 1)) != 0)
        return double(int64_t(bits) - (int64_t{1} << width_));
      return double(int64_t(bits));
    }

  private:
    bool boolean_ = false, unsigned_ = false;
    unsigned width_ = 0;
  };

  // The type the file declares for a value (value_info, outputs) must agree with what the
  // graph computes: a contradiction is a damaged file, and patterns read those types.
  Status checkDeclaredType(Value result, const Shape &computed) {
    auto declared = dyn_cast<RankedTensorType>(result.getType());
    if (!declared)
      return Status::ok();
    bool agrees = declared.getRank() == int64_t(computed.size());
    for (int64_t i = 0; agrees && i < declared.getRank(); ++i)
      agrees = declared.isDynamicDim(i) || declared.getDimSize(i) == computed[i];
    if (agrees)
      return Status::ok();
    std::string text;
    llvm::raw_string_ostream os(text);
    os << declared;
    return unsupported("the file declares its result as " + text + ", but at sequence length " +
                       std::to_string(length_) + " it computes " + listText(computed));
  }

  Status evaluateNode(OnnxNode node);
  Status elementwise(OnnxNode node);
  Status matmul();
  Status gather();
  Status gatherND();
  Status reshape();
  Status transpose();
  Status unsqueeze();
  Status squeeze();
  Status concat();
  Status slice();
  Status split();
  Status expand();
  Status tile();
  Status reduce();
  Status range();
  Status constantOfShape();
  Status constant();
  Status trilu();

  const LengthInputs &inputs_;
  int64_t length_;
  OnnxFile &file_;
  Builder b_;
  OnnxNode node_;
  Evaluation values_;
  Status loadError_ = Status::ok();
  int64_t budget_ = kMaxTotalContents; // elements of contents this evaluation may still hold
};

// Binary and unary element-wise functions by op type.
// `integer`: ONNX's integer semantics (Div truncates; Mod, unless `fmod`, takes the divisor's
// sign).
std::optional<double> binaryOp(StringRef type, double x, double y, bool integer, bool fmod) {
  if (type == "Add")
    return x + y;
  if (type == "Sub")
    return x - y;
  if (type == "Mul")
    return x * y;
  if (type == "Div")
    return integer ? (y == 0 ? 0 : std::trunc(x / y)) : x / y;
  if (type == "Pow")
    return std::pow(x, y);
  if (type == "Max")
    return std::max(x, y);
  if (type == "Min")
    return std::min(x, y);
  if (type == "Mod") {
    if (y == 0)
      return 0.0;
    double r = std::fmod(x, y);
    return fmod || r == 0 || (r < 0) == (y < 0) ? r : r + y;
  }
  if (type == "Equal")
    return double(x == y);
  if (type == "Less")
    return double(x < y);
  if (type == "Greater")
    return double(x > y);
  if (type == "LessOrEqual")
    return double(x <= y);
  if (type == "GreaterOrEqual")
    return double(x >= y);
  if (type == "And")
    return double(x != 0 && y != 0);
  if (type == "Or")
    return double(x != 0 || y != 0);
  if (type == "Xor")
    return double((x != 0) != (y != 0));
  return std::nullopt;
}

std::optional<double> unaryOp(StringRef type, double x) {
  if (type == "Identity" || type == "Cast" || type == "CastLike" || type == "Dropout")
    return x;
  if (type == "Neg")
    return -x;
  if (type == "Sqrt")
    return std::sqrt(x);
  if (type == "Reciprocal")
    return 1.0 / x;
  if (type == "Sigmoid")
    return 1.0 / (1.0 + std::exp(-x));
  if (type == "Cos")
    return std::cos(x);
  if (type == "Sin")
    return std::sin(x);
  if (type == "Exp")
    return std::exp(x);
  if (type == "Log")
    return std::log(x);
  if (type == "Abs")
    return std::abs(x);
  if (type == "Tanh")
    return std::tanh(x);
  if (type == "Erf")
    return std::erf(x);
  if (type == "Not")
    return double(x == 0);
  if (type == "Relu")
    return std::max(x, 0.0);
  if (type == "Floor")
    return std::floor(x);
  if (type == "Ceil")
    return std::ceil(x);
  if (type == "IsInf")
    return double(std::isinf(x));
  if (type == "IsNaN")
    return double(std::isnan(x));
  return std::nullopt;
}

bool isComparison(StringRef type) {
  return type == "Equal" || type == "Less" || type == "Greater" || type == "LessOrEqual" ||
         type == "GreaterOrEqual" || type == "And" || type == "Or" || type == "Xor" ||
         type == "Not" || type == "IsInf" || type == "IsNaN";
}

std::optional<Shape> broadcastShapes(ArrayRef<Shape> shapes) {
  size_t rank = 0;
  for (const Shape &s : shapes)
    rank = std::max(rank, s.size());
  Shape out(rank, 1);
  for (const Shape &s : shapes)
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t &o = out[rank - s.size() + i];
      if (s[i] == o || s[i] == 1)
        continue;
      if (o != 1)
        return std::nullopt;
      o = s[i];
    }
  return out;
}

Status Evaluator::evaluateNode(OnnxNode node) {
  StringRef type = node.type();
  if (type == "MatMul")
    return matmul();
  if (type == "Gather")
    return gather();
  if (type == "GatherND")
    return gatherND();
  if (type == "Reshape")
    return reshape();
  if (type == "Transpose")
    return transpose();
  if (type == "Unsqueeze")
    return unsqueeze();
  if (type == "Squeeze")
    return squeeze();
  if (type == "Concat")
    return concat();
  if (type == "Slice")
    return slice();
  if (type == "Split")
    return split();
  if (type == "Expand")
    return expand();
  if (type == "Tile")
    return tile();
  if (type.starts_with("Reduce"))
    return reduce();
  if (type == "Range")
    return range();
  if (type == "ConstantOfShape")
    return constantOfShape();
  if (type == "Constant")
    return constant();
  if (type == "Trilu")
    return trilu();
  if (type == "Shape") {
    DLM_RETURN_IF_ERROR(needInputs(1));
    const Shape s = in(0).shape;
    int64_t rank = s.size();
    int64_t start =
        std::clamp(normalizeAxis(node.intAttr("start").value_or(0), rank), int64_t{0}, rank);
    int64_t end =
        std::clamp(normalizeAxis(node.intAttr("end").value_or(rank), rank), int64_t{0}, rank);
    Shape dims(s.begin() + start, s.begin() + std::max(start, end));
    return result({int64_t(dims.size())}, b_.getI64Type(),
                  [&](std::vector<double> &out) { out.assign(dims.begin(), dims.end()); });
  }
  if (type == "Size") {
    DLM_RETURN_IF_ERROR(needInputs(1));
    int64_t count = elementCount(in(0).shape);
    return result({}, b_.getI64Type(),
                  [&](std::vector<double> &out) { out.push_back(double(count)); });
  }
  if (type == "Softmax" || type == "LogSoftmax") {
    DLM_RETURN_IF_ERROR(needInputs(1));
    return result(in(0).shape, in(0).element);
  }
  if (type == "Gemm") {
    DLM_RETURN_IF_ERROR(needInputs(2));
    const Shape &a = in(0).shape, &w = in(1).shape;
    if (a.size() != 2 || w.size() != 2)
      return unsupported("Gemm of operands that are not matrices");
    int64_t m = node.intAttr("transA").value_or(0) ? a[1] : a[0];
    int64_t n = node.intAttr("transB").value_or(0) ? w[0] : w[1];
    return result({m, n}, in(0).element);
  }
  if (type == "Flatten") {
    DLM_RETURN_IF_ERROR(needInputs(1));
    const Shape s = in(0).shape;
    int64_t axis = normalizeAxis(node.intAttr("axis").value_or(1), s.size());
    if (axis < 0 || axis > int64_t(s.size()))
      return unsupported("flattens at an axis the input does not have");
    auto outer = checkedElementCount(Shape(s.begin(), s.begin() + axis));
    auto inner = checkedElementCount(Shape(s.begin() + axis, s.end()));
    if (!outer || !inner)
      return unsupported("flattens to an overflowing shape");
    return result({*outer, *inner}, in(0).element,
                  [&](std::vector<double> &out) { out = *in(0).values; });
  }
  return elementwise(node);
}

Status Evaluator::elementwise(OnnxNode node) {
  StringRef type = node.type();
  unsigned count = node.numInputs();
  bool where = type == "Where";
  bool binary = binaryOp(type, 0, 1, false, false).has_value();
  bool unary = unaryOp(type, 0).has_value();
  if (!where && !binary && !unary)
    return Status::error("onnx: " + node.label() + " is not supported");
  if ((where && count != 3) || (binary && count != 2) || (unary && count < 1))
    return unsupported("has " + std::to_string(count) + " inputs");
  unsigned operands = where ? 3 : binary ? 2 : 1;
  DLM_RETURN_IF_ERROR(needInputs(operands));
  SmallVector<Shape> shapes;
  for (unsigned i = 0; i < operands; ++i)
    shapes.push_back(in(i).shape);
  auto shape = broadcastShapes(shapes);
  if (!shape)
    return unsupported("operands of shapes that do not broadcast");
  Type element = where ? in(1).element : in(0).element;
  if (isComparison(type))
    element = b_.getI1Type();
  else if (type == "Cast")
    element = onnxElementType(node.intAttr("to").value_or(0), b_);
  if (type == "Cast" && !element)
    return unsupported("casts to an element type the importer does not read");
  else if (type == "CastLike")
    element = in(1).element;
  Shape out = *shape;
  bool integer = isIntegerLike(element);
  bool fmod = node.intAttr("fmod").value_or(0) != 0;
  return result(out, element, [&](std::vector<double> &values) {
    std::vector<const std::vector<double> *> operands;
    std::vector<StridedWalk> walks;
    for (unsigned k = 0; k < shapes.size(); ++k) {
      operands.push_back(&*in(k).values);
      walks.emplace_back(out, broadcastStrides(out, shapes[k]));
    }
    auto at = [&](unsigned k) { return (*operands[k])[walks[k].index()]; };
    for (int64_t i = 0, count = elementCount(out); i < count; ++i) {
      if (where)
        values.push_back(at(0) != 0 ? at(1) : at(2));
      else if (binary)
        values.push_back(*binaryOp(type, at(0), at(1), integer, fmod));
      else
        values.push_back(*unaryOp(type, at(0)));
      for (StridedWalk &walk : walks)
        walk.next();
    }
  });
}

Status Evaluator::matmul() {
  DLM_RETURN_IF_ERROR(needInputs(2));
  Shape a = in(0).shape, w = in(1).shape;
  if (a.size() < 2 || w.size() < 2)
    return unsupported("MatMul of vectors is not supported");
  if (a.back() != w[w.size() - 2])
    return unsupported("MatMul of [..., " + std::to_string(a.back()) + "] by [..., " +
                       std::to_string(w[w.size() - 2]) + ", ...]");
  auto batch = broadcastShapes({Shape(a.begin(), a.end() - 2), Shape(w.begin(), w.end() - 2)});
  if (!batch)
    return unsupported("MatMul operands whose batch axes do not broadcast");
  int64_t m = a[a.size() - 2], k = a.back(), n = w.back();
  Shape out = *batch;
  out.push_back(m);
  out.push_back(n);
  Shape aBatch(a.begin(), a.end() - 2), wBatch(w.begin(), w.end() - 2);
  auto work = checkedElementCount(Shape{elementCount(out), k});
  if (!work || *work > kMaxMatMulWork)
    return result(out, in(0).element); // the shape only: contents this costly are not bookkeeping
  return result(out, in(0).element, [&](std::vector<double> &values) {
    for (int64_t bi = 0; bi < elementCount(*batch); ++bi) {
      const double *x = in(0).values->data() + broadcastIndex(bi, *batch, aBatch) * m * k;
      const double *y = in(1).values->data() + broadcastIndex(bi, *batch, wBatch) * k * n;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0;
          for (int64_t l = 0; l < k; ++l)
            sum += x[i * k + l] * y[l * n + j];
          values.push_back(sum);
        }
    }
  });
}

Status Evaluator::gather() {
  DLM_RETURN_IF_ERROR(needInputs(2));
  const Shape data = in(0).shape, indices = in(1).shape;
  int64_t rank = data.size();
  int64_t axis = normalizeAxis(node_.intAttr("axis").value_or(0), rank);
  if (axis < 0 || axis >= rank)
    return unsupported("gathers along an axis the data does not have");
  Shape out(data.begin(), data.begin() + axis);
  out.insert(out.end(), indices.begin(), indices.end());
  out.insert(out.end(), data.begin() + axis + 1, data.end());
  int64_t outer = elementCount(Shape(data.begin(), data.begin() + axis));
  int64_t inner = elementCount(Shape(data.begin() + axis + 1, data.end()));
  auto index = [&](size_t i) {
    int64_t at = in(1).intAt(i);
    return at < 0 && at >= -data[axis] ? at + data[axis] : at;
  };
  auto outside = [&](int64_t at) {
    return unsupported("gathers index " + std::to_string(at) + " outside the axis of " +
                       std::to_string(data[axis]));
  };
  // A table too large to read whole, gathered at positions: only those rows are read.
  if (axis == 0 && in(1).values && in(1).fromLength && !in(0).values &&
      !ensureContents(node_.input(0), kMaxContents)) {
    std::vector<double> rows;
    bool complete = true;
    for (size_t i = 0; complete && i < in(1).values->size(); ++i) {
      if (index(i) < 0 || index(i) >= data[0])
        return outside(index(i));
      auto row = initializerRows(node_.input(0), index(i), 1);
      complete = row.has_value();
      if (row)
        rows.insert(rows.end(), row->begin(), row->end());
    }
    if (complete)
      return result(
          out, in(0).element, [&](std::vector<double> &values) { values = rows; }, 0,
          /*ready=*/true);
  }
  bool outOfRange = false;
  DLM_RETURN_IF_ERROR(result(out, in(0).element, [&](std::vector<double> &values) {
    const std::vector<double> &input = *in(0).values;
    for (int64_t o = 0; o < outer; ++o)
      for (size_t i = 0, rows = in(1).values->size(); i < rows; ++i) {
        int64_t at = index(i);
        bool outside = at < 0 || at >= data[axis];
        outOfRange |= outside;
        for (int64_t j = 0; j < inner; ++j)
          values.push_back(outside ? 0.0 : input[(o * data[axis] + at) * inner + j]);
      }
  }));
  if (outOfRange)
    for (size_t i = 0; i < in(1).values->size(); ++i)
      if (index(i) < 0 || index(i) >= data[axis])
        return outside(index(i));
  return Status::ok();
}

// Data [b..., d..., r...] at index tuples [b..., i..., k] → [b..., i..., r...]: each tuple names k
// leading axes of data after the batch_dims shared ones.
Status Evaluator::gatherND() {
  DLM_RETURN_IF_ERROR(needInputs(2));
  const Shape data = in(0).shape, indices = in(1).shape;
  int64_t batch = node_.intAttr("batch_dims").value_or(0);
  if (indices.empty() || batch < 0 || batch >= int64_t(indices.size()))
    return unsupported("batch_dims does not fit the indices");
  int64_t k = indices.back();
  if (k < 1 || k > int64_t(data.size()) - batch)
    return unsupported("index tuples of " + std::to_string(k) + " do not fit data " +
                       listText(data));
  for (int64_t i = 0; i < batch; ++i)
    if (indices[i] != data[i])
      return unsupported("the batch axes of data and indices differ");
  Shape out(indices.begin(), indices.end() - 1);
  out.insert(out.end(), data.begin() + batch + k, data.end());
  int64_t slice = elementCount(Shape(data.begin() + batch + k, data.end()));
  int64_t perBatch = elementCount(Shape(data.begin() + batch, data.end()));
  int64_t tuples = elementCount(Shape(indices.begin() + batch, indices.end() - 1));
  Shape strides = stridesOf(Shape(data.begin() + batch, data.begin() + batch + k));
  bool outOfRange = false;
  DLM_RETURN_IF_ERROR(result(out, in(0).element, [&](std::vector<double> &values) {
    const std::vector<double> &input = *in(0).values;
    const int64_t count = elementCount(Shape(indices.begin(), indices.end() - 1));
    for (int64_t t = 0; t < count; ++t) {
      int64_t offset = (t / std::max<int64_t>(tuples, 1)) * perBatch;
      for (int64_t j = 0; j < k; ++j) {
        int64_t dim = data[batch + j];
        int64_t i = in(1).intAt(t * k + j);
        i = i < 0 && i >= -dim ? i + dim : i;
        outOfRange |= i < 0 || i >= dim;
        offset += std::clamp<int64_t>(i, 0, std::max<int64_t>(dim - 1, 0)) * strides[j] * slice;
      }
      for (int64_t s = 0; s < slice; ++s)
        values.push_back(outOfRange ? 0.0 : input[offset + s]);
    }
  }));
  if (outOfRange)
    return unsupported("gathers an index tuple outside data " + listText(data));
  return Status::ok();
}

Status Evaluator::reshape() {
  DLM_RETURN_IF_ERROR(needInputs(2));
  auto target = intsOf(1);
  if (!target)
    return unsupported("the target shape is not computed from constants and the length");
  const Shape s = in(0).shape;
  bool allowZero = node_.intAttr("allowzero").value_or(0) != 0;
  Shape out = *target;
  int64_t inferred = -1, known = 1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == 0 && !allowZero) {
      if (i >= s.size())
        return unsupported("a 0 in the target shape copies an axis the input does not have");
      out[i] = s[i];
    }
    if (out[i] == -1) {
      if (inferred >= 0)
        return unsupported("the target shape has two -1s");
      inferred = i;
    } else if (out[i] < 0 || __builtin_mul_overflow(known, out[i], &known)) {
      return unsupported("the target shape has a negative or overflowing dimension");
    }
  }
  int64_t total = elementCount(s);
  if (inferred >= 0)
    out[inferred] = known ? total / known : 0;
  if (elementCount(out) != total)
    return unsupported("reshapes " + std::to_string(total) + " elements into " +
                       std::to_string(elementCount(out)));
  return result(out, in(0).element, [&](std::vector<double> &v) { v = *in(0).values; });
}

Status Evaluator::transpose() {
  DLM_RETURN_IF_ERROR(needInputs(1));
  const Shape s = in(0).shape;
  Shape perm;
  if (auto p = node_.intsAttr("perm"))
    perm.assign(p->begin(), p->end());
  else
    for (int64_t i = int64_t(s.size()) - 1; i >= 0; --i)
      perm.push_back(i);
  if (perm.size() != s.size() || !isPermutation(perm))
    return unsupported("perm is not a permutation of the input's axes");
  Shape out;
  for (int64_t p : perm)
    out.push_back(s[p]);
  Shape inStrides = stridesOf(s);
  return result(out, in(0).element, [&](std::vector<double> &values) {
    Shape strides;
    for (int64_t p : perm)
      strides.push_back(inStrides[p]);
    appendWalked(values, *in(0).values, out, strides);
  });
}

Status Evaluator::unsqueeze() {
  DLM_RETURN_IF_ERROR(needInputs(1));
  std::optional<Shape> axes = node_.input(1) ? intsOf(1) : std::nullopt;
  if (!axes)
    if (auto attr = node_.intsAttr("axes"))
      axes = Shape(attr->begin(), attr->end());
  if (!axes)
    return unsupported("the axes are not constant");
  Shape out = in(0).shape;
  int64_t rank = out.size() + axes->size();
  Shape sorted;
  for (int64_t a : *axes)
    sorted.push_back(normalizeAxis(a, rank));
  llvm::sort(sorted);
  for (int64_t a : sorted) {
    if (a < 0 || a > int64_t(out.size()))
      return unsupported("inserts an axis out of range");
    out.insert(out.begin() + a, 1);
  }
  return result(out, in(0).element, [&](std::vector<double> &v) { v = *in(0).values; });
}

Status Evaluator::squeeze() {
  DLM_RETURN_IF_ERROR(needInputs(1));
  const Shape s = in(0).shape;
  std::optional<Shape> axes = node_.input(1) ? intsOf(1) : std::nullopt;
  if (!axes)
    if (auto attr = node_.intsAttr("axes"))
      axes = Shape(attr->begin(), attr->end());
  Shape out;
  for (int64_t i = 0; i < int64_t(s.size()); ++i) {
    bool named =
        axes && llvm::any_of(*axes, [&](int64_t a) { return normalizeAxis(a, s.size()) == i; });
    if (axes ? !named : s[i] != 1)
      out.push_back(s[i]);
    else if (s[i] != 1)
      return unsupported("squeezes an axis of size " + std::to_string(s[i]));
  }
  return result(out, in(0).element, [&](std::vector<double> &v) { v = *in(0).values; });
}

Status Evaluator::concat() {
  DLM_RETURN_IF_ERROR(needInputs(node_.numInputs()));
  const Shape first = in(0).shape;
  int64_t rank = first.size();
  int64_t axis = normalizeAxis(node_.intAttr("axis").value_or(0), rank);
  if (axis < 0 || axis >= rank)
    return unsupported("concatenates along an axis the inputs do not have");
  Shape out = first;
  out[axis] = 0;
  for (unsigned i = 0; i < node_.numInputs(); ++i) {
    const Shape &s = in(i).shape;
    for (int64_t d = 0; d < rank; ++d)
      if (int64_t(s.size()) != rank || (d != axis && s[d] != first[d]))
        return unsupported("concatenates inputs whose other axes differ");
    if (__builtin_add_overflow(out[axis], s[axis], &out[axis]))
      return unsupported("concatenates to an overflowing length");
  }
  int64_t outer = elementCount(Shape(first.begin(), first.begin() + axis));
  return result(out, in(0).element, [&](std::vector<double> &values) {
    for (int64_t o = 0; o < outer; ++o)
      for (unsigned i = 0; i < node_.numInputs(); ++i) {
        int64_t chunk = elementCount(Shape(in(i).shape.begin() + axis, in(i).shape.end()));
        values.insert(values.end(), in(i).values->begin() + o * chunk,
                      in(i).values->begin() + (o + 1) * chunk);
      }
  });
}

Status Evaluator::slice() {
  DLM_RETURN_IF_ERROR(needInputs(3));
  const Shape s = in(0).shape;
  int64_t rank = s.size();
  auto starts = intsOf(1), ends = intsOf(2);
  std::optional<Shape> axes = node_.input(3) ? intsOf(3) : std::nullopt;
  std::optional<Shape> steps = node_.input(4) ? intsOf(4) : std::nullopt;
  if (!starts || !ends || (node_.input(3) && !axes) || (node_.input(4) && !steps))
    return unsupported("the bounds are not computed from constants and the length");
  if (!axes) {
    axes.emplace();
    for (int64_t i = 0; i < int64_t(starts->size()); ++i)
      axes->push_back(i);
  }
  if (!steps)
    steps = Shape(starts->size(), 1);
  if (ends->size() != starts->size() || axes->size() != starts->size() ||
      steps->size() != starts->size())
    return unsupported("starts, ends, axes and steps differ in length");
  Shape begin(rank, 0), step(rank, 1), out = s;
  for (size_t i = 0; i < starts->size(); ++i) {
    int64_t axis = normalizeAxis((*axes)[i], rank), st = (*steps)[i];
    if (axis < 0 || axis >= rank || st == 0 || st == std::numeric_limits<int64_t>::min())
      return unsupported("slices an axis out of range or with step 0");
    int64_t dim = s[axis];
    // Negative bounds count from the end; then both are clamped (ONNX's rules per direction).
    auto clampIndex = [&](int64_t v, int64_t low, int64_t high) {
      if (v < 0)
        v = v < -dim ? low : v + dim;
      return std::clamp(v, low, high);
    };
    int64_t from =
        st > 0 ? clampIndex((*starts)[i], 0, dim) : clampIndex((*starts)[i], -1, dim - 1);
    int64_t to = st > 0 ? clampIndex((*ends)[i], 0, dim) : clampIndex((*ends)[i], -1, dim - 1);
    // Both bounds are within [-1, dim], so the differences cannot overflow.
    int64_t n = st > 0 ? (to > from ? 1 + (to - from - 1) / st : 0)
                       : (from > to ? 1 + (from - to - 1) / -st : 0);
    begin[axis] = from;
    step[axis] = st;
    out[axis] = n;
  }
  // A table too large to read whole, cut to rows at positions: only those rows are read.
  bool rowsOnly = rank >= 1 && step[0] == 1 && anyFromLength() && !in(0).values &&
                  !ensureContents(node_.input(0), kMaxContents);
  for (int64_t d = 1; rowsOnly && d < rank; ++d)
    rowsOnly = begin[d] == 0 && step[d] == 1 && out[d] == s[d];
  if (rowsOnly)
    if (auto rows = initializerRows(node_.input(0), begin[0], out[0]))
      return result(
          out, in(0).element, [&](std::vector<double> &values) { values = *rows; }, 0,
          /*ready=*/true);
  Shape inStrides = stridesOf(s);
  return result(out, in(0).element, [&](std::vector<double> &values) {
    Shape strides(rank);
    int64_t base = 0;
    for (int64_t d = 0; d < rank; ++d) {
      strides[d] = wrappingMultiply(step[d], inStrides[d]);
      base = wrappingAdd(base, wrappingMultiply(begin[d], inStrides[d]));
    }
    appendWalked(values, *in(0).values, out, strides, base);
  });
}

Status Evaluator::split() {
  DLM_RETURN_IF_ERROR(needInputs(1));
  const Shape s = in(0).shape;
  int64_t rank = s.size();
  int64_t axis = normalizeAxis(node_.intAttr("axis").value_or(0), rank);
  if (axis < 0 || axis >= rank)
    return unsupported("splits along an axis the input does not have");
  unsigned parts = node_.op()->getNumResults();
  if (parts == 0)
    return unsupported("splits into no outputs");
  Shape sizes;
  if (node_.input(1)) {
    auto given = intsOf(1);
    if (!given)
      return unsupported("the split sizes are not constant");
    sizes = *given;
  } else if (auto attr = node_.intsAttr("split")) {
    sizes.assign(attr->begin(), attr->end());
  } else {
    int64_t each = s[axis] / parts + (s[axis] % parts != 0);
    for (unsigned i = 0; i < parts; ++i)
      sizes.push_back(std::min(each, s[axis] - each * int64_t(i)));
  }
  int64_t total = 0;
  bool valid = sizes.size() == parts;
  for (int64_t size : sizes)
    valid = valid && size >= 0 && !__builtin_add_overflow(total, size, &total);
  if (!valid || total != s[axis])
    return unsupported("the split sizes do not cut the axis of " + std::to_string(s[axis]) +
                       " into its " + std::to_string(parts) + " outputs");
  int64_t outer = elementCount(Shape(s.begin(), s.begin() + axis));
  int64_t inner = elementCount(Shape(s.begin() + axis + 1, s.end()));
  int64_t offset = 0;
  for (unsigned p = 0; p < parts; ++p) {
    Shape out = s;
    out[axis] = sizes[p];
    int64_t start = offset;
    offset += sizes[p];
    DLM_RETURN_IF_ERROR(result(
        out, in(0).element,
        [&](std::vector<double> &values) {
          const std::vector<double> &input = *in(0).values;
          for (int64_t o = 0; o < outer; ++o)
            for (int64_t j = start; j < start + sizes[p]; ++j)
              for (int64_t k = 0; k < inner; ++k)
                values.push_back(input[(o * s[axis] + j) * inner + k]);
        },
        p));
  }
  return Status::ok();
}

Status Evaluator::expand() {
  DLM_RETURN_IF_ERROR(needInputs(2));
  auto shape = intsOf(1);
  if (!shape)
    return unsupported("the target shape is not computed from constants and the length");
  const Shape s = in(0).shape;
  auto out = broadcastShapes({s, *shape});
  if (!out)
    return unsupported("the input does not broadcast to the target shape");
  return result(*out, in(0).element, [&](std::vector<double> &values) {
    appendWalked(values, *in(0).values, *out, broadcastStrides(*out, s));
  });
}

Status Evaluator::tile() {
  DLM_RETURN_IF_ERROR(needInputs(2));
  auto repeats = intsOf(1);
  const Shape s = in(0).shape;
  if (!repeats || repeats->size() != s.size())
    return unsupported("the repeats are not constant, one per axis");
  Shape out = s;
  for (size_t i = 0; i < s.size(); ++i)
    if ((*repeats)[i] < 0 || __builtin_mul_overflow(s[i], (*repeats)[i], &out[i]))
      return unsupported("repeats an axis a negative or overflowing number of times");
  Shape inStrides = stridesOf(s);
  return result(out, in(0).element, [&](std::vector<double> &values) {
    // Axis d of the result is [repeats[d], s[d]]: the repeat reads nothing new.
    Shape split, strides;
    for (size_t d = 0; d < s.size(); ++d) {
      split.insert(split.end(), {(*repeats)[d], s[d]});
      strides.insert(strides.end(), {0, inStrides[d]});
    }
    appendWalked(values, *in(0).values, split, strides);
  });
}

Status Evaluator::reduce() {
  DLM_RETURN_IF_ERROR(needInputs(1));
  const Shape s = in(0).shape;
  std::optional<Shape> axes;
  if (node_.input(1))
    axes = intsOf(1);
  else if (auto attr = node_.intsAttr("axes"))
    axes = Shape(attr->begin(), attr->end());
  bool keep = node_.intAttr("keepdims").value_or(1) != 0;
  Shape out;
  for (int64_t i = 0; i < int64_t(s.size()); ++i) {
    bool reduced =
        !axes || llvm::any_of(*axes, [&](int64_t a) { return normalizeAxis(a, s.size()) == i; });
    if (!reduced)
      out.push_back(s[i]);
    else if (keep)
      out.push_back(1);
  }
  return result(out, in(0).element);
}

Status Evaluator::range() {
  DLM_RETURN_IF_ERROR(needInputs(3));
  if (!contentsComputable() || in(0).values->size() != 1 || in(1).values->size() != 1 ||
      in(2).values->size() != 1)
    return unsupported("start, limit and delta are not scalars computed from constants and the "
                       "length");
  double start = (*in(0).values)[0], limit = (*in(1).values)[0], delta = (*in(2).values)[0];
  double count = std::ceil((limit - start) / delta);
  if (delta == 0 || std::isnan(count) || count > double(kMaxContents))
    return unsupported("computes a range that is empty of meaning or too long (start " +
                       std::to_string(start) + ", limit " + std::to_string(limit) + ", delta " +
                       std::to_string(delta) + ")");
  int64_t n = count > 0 ? int64_t(count) : 0;
  return result({n}, in(0).element, [&](std::vector<double> &values) {
    for (int64_t i = 0; i < n; ++i)
      values.push_back(start + double(i) * delta);
  });
}

Status Evaluator::constantOfShape() {
  DLM_RETURN_IF_ERROR(needInputs(1));
  auto shape = intsOf(0);
  if (!shape)
    return unsupported("the shape is not computed from constants and the length");
  double fill = 0;
  Type element = b_.getF32Type();
  if (auto dense = node_.op()->getAttrOfType<DenseElementsAttr>("value")) {
    if (dense.getNumElements() != 1)
      return unsupported("the fill value is not one element");
    element = dense.getElementType();
    if (auto ints = dyn_cast<DenseIntElementsAttr>(dense))
      fill = double((*ints.getValues<APInt>().begin()).getSExtValue());
    else if (auto floats = dyn_cast<DenseFPElementsAttr>(dense))
      fill = (*floats.getValues<APFloat>().begin()).convertToDouble();
  }
  if (element.isInteger(1))
    fill = fill != 0;
  return result(*shape, element,
                [&](std::vector<double> &values) { values.assign(elementCount(*shape), fill); });
}

Status Evaluator::constant() {
  Operation *op = node_.op();
  if (auto v = node_.intAttr("value_int"))
    return result({}, b_.getI64Type(), [&](std::vector<double> &o) { o.push_back(double(*v)); });
  if (auto v = node_.intsAttr("value_ints"))
    return result({int64_t(v->size())}, b_.getI64Type(),
                  [&](std::vector<double> &o) { o.assign(v->begin(), v->end()); });
  if (auto f = op->getAttrOfType<FloatAttr>("value_float"))
    return result({}, b_.getF32Type(),
                  [&](std::vector<double> &o) { o.push_back(f.getValueAsDouble()); });
  if (auto fs = op->getAttrOfType<DenseF32ArrayAttr>("value_floats"))
    return result({int64_t(fs.size())}, b_.getF32Type(), [&](std::vector<double> &o) {
      o.assign(fs.asArrayRef().begin(), fs.asArrayRef().end());
    });
  auto dense = op->getAttrOfType<DenseElementsAttr>("value");
  if (!dense)
    return unsupported("a constant of a kind dlm does not read");
  Shape shape(dense.getType().getShape().begin(), dense.getType().getShape().end());
  return result(shape, dense.getElementType(), [&](std::vector<double> &o) {
    if (auto ints = dyn_cast<DenseIntElementsAttr>(dense)) {
      bool flag = dense.getElementType().isInteger(1);
      for (const APInt &v : ints.getValues<APInt>())
        o.push_back(flag ? double(!v.isZero()) : double(v.getSExtValue()));
    } else {
      for (const APFloat &v : cast<DenseFPElementsAttr>(dense).getValues<APFloat>())
        o.push_back(v.convertToDouble());
    }
  });
}

Status Evaluator::trilu() {
  DLM_RETURN_IF_ERROR(needInputs(1));
  const Shape s = in(0).shape;
  if (s.size() < 2)
    return unsupported("Trilu of fewer than two axes");
  int64_t k = 0;
  if (node_.input(1)) {
    auto given = intsOf(1);
    if (!given || given->size() != 1)
      return unsupported("k is not constant");
    k = (*given)[0];
  }
  bool upper = node_.intAttr("upper").value_or(1) != 0;
  int64_t rows = s[s.size() - 2], cols = s.back();
  return result(s, in(0).element, [&](std::vector<double> &values) {
    const std::vector<double> &input = *in(0).values;
    for (int64_t i = 0, count = elementCount(s); i < count; ++i) {
      int64_t c = i % cols, r = (i / cols) % rows;
      bool kept = upper ? c - r >= k : c - r <= k;
      values.push_back(kept ? input[i] : 0.0);
    }
  });
}

} // namespace

StatusOr<Evaluation> evaluateAtLength(func::FuncOp forward, const LengthInputs &inputs,
                                      int64_t length, OnnxFile &file) {
  return Evaluator(inputs, length, file, forward.getContext()).run(forward);
}

} // namespace dlm::importer::onnx
