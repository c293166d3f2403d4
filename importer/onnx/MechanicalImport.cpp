#include "importer/onnx/MechanicalImport.h"

#include "compiler/dialects/dlm/DlmDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

#include "onnx/onnx_pb.h" // ONNX_API, then onnx-ml.pb.h under ONNX_ML

#include <map>
#include <set>

namespace dlm::importer::onnx {
namespace {

namespace proto = ::onnx;
using namespace mlir;

// Transformers need rank 4 or so; far past it a type is damage, not a model.
constexpr size_t kMaxValueRank = 64;

std::string nodeLabel(const proto::NodeProto &node, int index) {
  return node.name().empty() ? node.op_type() + "_" + std::to_string(index) : node.name();
}

class GraphTranslator {
public:
  GraphTranslator(MLIRContext &context, OnnxFile &file)
      : file_(file), b_(&context) {}

  StatusOr<OwningOpRef<ModuleOp>> translate() {
    const proto::GraphProto &graph = file_.graph();
    for (const proto::ValueInfoProto &info : graph.value_info())
      types_[info.name()] = &info.type();
    for (const proto::ValueInfoProto &info : graph.output())
      types_[info.name()] = &info.type();
    for (int i = 0; i < graph.node_size(); ++i)
      for (const std::string &output : graph.node(i).output())
        producerIndex_.emplace(output, i);

    OwningOpRef<ModuleOp> module = ModuleOp::create(b_.getUnknownLoc());
    describeModule(*module);
    b_.setInsertionPointToEnd(module->getBody());

    SmallVector<Type> argTypes;
    SmallVector<std::string> argNames;
    for (const proto::ValueInfoProto &input : graph.input()) {
      if (file_.initializer(input.name()))
        continue;
      StatusOr<Type> type = convertType(&input.type(), input.name());
      if (!type)
        return type.status();
      argTypes.push_back(*type);
      argNames.push_back(input.name());
    }
    auto fn = func::FuncOp::create(b_, b_.getUnknownLoc(), "forward",
                                   b_.getFunctionType(argTypes, {}));
    Block *entry = fn.addEntryBlock();
    for (size_t i = 0; i < argNames.size(); ++i) {
      fn.setArgAttr(i, kNameAttr, b_.getStringAttr(argNames[i]));
      values_[argNames[i]] = entry->getArgument(i);
    }
    b_.setInsertionPointToStart(entry);

    for (int i = 0; i < graph.node_size(); ++i)
      DLM_RETURN_IF_ERROR(translateNode(graph.node(i), i));

    SmallVector<Value> results;
    for (const proto::ValueInfoProto &output : graph.output()) {
      auto value = lookup(output.name(), "graph output", graph.node_size());
      if (!value)
        return value.status();
      results.push_back(*value);
    }
    func::ReturnOp::create(b_, b_.getUnknownLoc(), results);
    fn.setType(b_.getFunctionType(argTypes, ValueRange(results).getTypes()));
    for (int i = 0; i < graph.output_size(); ++i)
      fn.setResultAttr(i, kNameAttr, b_.getStringAttr(graph.output(i).name()));
    return std::move(module);
  }

private:
  void describeModule(ModuleOp module) {
    const proto::ModelProto &model = file_.model();
    SmallVector<NamedAttribute> opsets;
    for (const proto::OperatorSetIdProto &opset : model.opset_import())
      opsets.push_back(b_.getNamedAttr(opset.domain().empty() ? "ai.onnx" : opset.domain(),
                                       b_.getI64IntegerAttr(opset.version())));
    module->setAttr("onnx.opset_import", b_.getDictionaryAttr(opsets));
    module->setAttr("onnx.ir_version", b_.getI64IntegerAttr(model.ir_version()));
    std::string producer = model.producer_name();
    if (!model.producer_version().empty())
      producer += " " + model.producer_version();
    module->setAttr("onnx.producer", b_.getStringAttr(producer));
  }

  Type elementType(int32_t dataType) {
    using T = proto::TensorProto;
    switch (dataType) {
    case T::FLOAT:
      return b_.getF32Type();
    case T::DOUBLE:
      return b_.getF64Type();
    case T::FLOAT16:
      return b_.getF16Type();
    case T::BFLOAT16:
      return b_.getBF16Type();
    case T::BOOL:
      return b_.getI1Type();
    case T::INT8:
    case T::INT16:
    case T::INT32:
    case T::INT64:
      return b_.getIntegerType(8 * dataTypeSize(dataType));
    case T::UINT8:
    case T::UINT16:
    case T::UINT32:
    case T::UINT64:
      return b_.getIntegerType(8 * dataTypeSize(dataType), /*isSigned=*/false);
    default:
      return Type();
    }
  }

  // Ranked where ONNX knows the shape (dim_param and unknown dims are dynamic), unranked where it
  // only knows the element type, `none` where it knows nothing (outputs of unknown ops).
  // The MLIR type of a value from its ONNX type (value_info, a graph input or output). A damaged
  // file's dimensions are refused by name before any pattern multiplies them.
  StatusOr<Type> convertType(const proto::TypeProto *type, const std::string &value) {
    if (!type || !type->has_tensor_type())
      return Type(b_.getNoneType());
    const proto::TypeProto::Tensor &tensor = type->tensor_type();
    Type element = elementType(tensor.elem_type());
    if (!element)
      return Type(b_.getNoneType());
    if (!tensor.has_shape())
      return Type(UnrankedTensorType::get(element));
    SmallVector<int64_t> shape, known;
    for (const proto::TensorShapeProto::Dimension &dim : tensor.shape().dim()) {
      const bool given = dim.has_dim_value() && dim.dim_value() >= 0;
      shape.push_back(given ? dim.dim_value() : ShapedType::kDynamic);
      if (given)
        known.push_back(dim.dim_value());
    }
    if (shape.size() > kMaxValueRank)
      return Status::error("onnx: value '" + value + "' has a type of rank " +
                           std::to_string(shape.size()) + "; the importer takes at most " +
                           std::to_string(kMaxValueRank));
    if (!checkedElementCount(known))
      return Status::error("onnx: value '" + value + "' has dimensions " + listText(known) +
                           ", whose element count overflows int64");
    return Type(RankedTensorType::get(shape, element));
  }

  // The value of `name` as an operand of node `index`: computed earlier, a graph input, or an
  // initializer (whose weight op is created here, at its first use).
  StatusOr<Value> lookup(const std::string &name, const std::string &user, int index) {
    if (auto it = values_.find(name); it != values_.end())
      return it->second;
    if (const proto::TensorProto *init = file_.initializer(name)) {
      auto weight = initializerValue(*init);
      if (weight)
        values_[name] = *weight;
      return weight;
    }
    auto producer = producerIndex_.find(name);
    if (producer != producerIndex_.end() && producer->second >= index)
      return Status::error("onnx: " + user + " uses '" + name +
                           "' before the node that computes it (nodes must be in "
                           "topological order)");
    if (user == "graph output")
      return Status::error("onnx: graph output '" + name + "' is not computed by any node");
    return Status::error("onnx: initializer '" + name + "' referenced by " + user +
                         " is missing");
  }

  // The shape is checked here, as the IR type is made from it before any pattern reads bytes.
  StatusOr<Value> initializerValue(const proto::TensorProto &init) {
    DLM_RETURN_IF_ERROR(checkTensorShape(init));
    Location loc = NameLoc::get(b_.getStringAttr(init.name()));
    SmallVector<int64_t> shape(init.dims().begin(), init.dims().end());
    Type element = elementType(init.data_type());
    if (element && isa<FloatType>(element) && !element.isF64())
      return Value(dlm::ir::WeightOp::create(b_, loc, RankedTensorType::get(shape, element),
                                             init.name()));
    OperationState state(loc, kInitializerOp);
    state.addAttribute(kNameAttr, b_.getStringAttr(init.name()));
    state.addTypes(element ? Type(RankedTensorType::get(shape, element)) : b_.getNoneType());
    return b_.create(state)->getResult(0);
  }

  // Patterns follow a Transpose's perm axis by axis, so a perm that is not a permutation of the
  // input's axes would have them index out of bounds: refused here, once, for all of them.
  Status checkTransposePerm(const OperationState &state, const std::string &where) {
    auto perm = dyn_cast_or_null<DenseI64ArrayAttr>(state.attributes.get("perm"));
    if (!perm)
      return Status::ok(); // absent: the axes reversed
    if (!isPermutation(perm.asArrayRef()))
      return Status::error("onnx: " + where + ": perm " + listText(perm.asArrayRef()) +
                           " is not a permutation of 0.." + std::to_string(perm.size() - 1));
    auto input = state.operands.empty() ? RankedTensorType()
                                        : dyn_cast<RankedTensorType>(state.operands[0].getType());
    if (input && input.getRank() != int64_t(perm.size()))
      return Status::error("onnx: " + where + ": perm " + listText(perm.asArrayRef()) + " has " +
                           std::to_string(perm.size()) + " axes, but the input has rank " +
                           std::to_string(input.getRank()));
    return Status::ok();
  }

  StatusOr<Attribute> tensorAttribute(const proto::TensorProto &tensor,
                                      const std::string &where) {
    auto bytes = file_.bytes(tensor);
    if (!bytes)
      return bytes.status().withContext(where);
    Type element = elementType(bytes->dataType);
    if (!element)
      return Status::error("onnx: " + where + ": constant of element type " +
                           dataTypeName(bytes->dataType) + " is not supported");
    if (bytes->numElements() > kMaxShapeElements)
      return Status::error("onnx: " + where + " carries a constant of " +
                           std::to_string(bytes->numElements()) +
                           " elements; dlm keeps weights out of the IR, so store it as an "
                           "initializer");
    auto type = RankedTensorType::get(bytes->shape, element);
    if (element.isInteger(1)) {
      SmallVector<bool> flags;
      for (size_t i = 0; i < bytes->size; ++i)
        flags.push_back(bytes->data[i] != 0);
      return Attribute(DenseElementsAttr::get(type, flags));
    }
    ArrayRef<char> raw(reinterpret_cast<const char *>(bytes->data), bytes->size);
    return Attribute(DenseElementsAttr::getFromRawBuffer(type, raw));
  }

  StatusOr<Attribute> convertAttribute(const proto::AttributeProto &a, const std::string &where) {
    using A = proto::AttributeProto;
    switch (a.type()) {
    case A::FLOAT:
      return Attribute(b_.getF32FloatAttr(a.f()));
    case A::INT:
      return Attribute(b_.getI64IntegerAttr(a.i()));
    case A::STRING:
      return Attribute(b_.getStringAttr(a.s()));
    case A::TENSOR:
      return tensorAttribute(a.t(), where + " attribute '" + a.name() + "'");
    case A::FLOATS:
      return Attribute(
          b_.getDenseF32ArrayAttr(SmallVector<float>(a.floats().begin(), a.floats().end())));
    case A::INTS:
      return Attribute(
          b_.getDenseI64ArrayAttr(SmallVector<int64_t>(a.ints().begin(), a.ints().end())));
    case A::STRINGS: {
      SmallVector<Attribute> strings;
      for (const std::string &s : a.strings())
        strings.push_back(b_.getStringAttr(s));
      return Attribute(b_.getArrayAttr(strings));
    }
    default:
      return Status::error("onnx: " + where + ": attribute '" + a.name() + "' of kind " +
                           A::AttributeType_Name(a.type()) +
                           " is not supported (subgraphs, sparse tensors and type attributes "
                           "have no dlm form)");
    }
  }

  Status translateNode(const proto::NodeProto &node, int index) {
    std::string label = nodeLabel(node, index);
    std::string where = "node '" + label + "'";
    bool defaultDomain = node.domain().empty() || node.domain() == "ai.onnx";
    std::string opName = std::string(kOpPrefix) +
                         (defaultDomain ? "" : node.domain() + ".") + node.op_type();
    int64_t opset = file_.opsetVersion(defaultDomain ? "" : node.domain());
    if (opset < 0)
      return Status::error("onnx: " + where + " (op " + node.op_type() + ") is in domain '" +
                           node.domain() + "', which the model does not import");

    OperationState state(NameLoc::get(b_.getStringAttr(label)), opName);
    // Absent optional inputs ("") at the end are dropped; in the middle they are a `none`.
    int used = node.input_size();
    while (used > 0 && node.input(used - 1).empty())
      --used;
    for (int i = 0; i < used; ++i) {
      if (node.input(i).empty()) {
        state.addOperands(absent());
        continue;
      }
      auto value = lookup(node.input(i), where, index);
      if (!value)
        return value.status();
      state.addOperands(*value);
    }
    for (const proto::AttributeProto &attribute : node.attribute()) {
      auto converted = convertAttribute(attribute, where + " (op " + node.op_type() + ")");
      if (!converted)
        return converted.status();
      state.addAttribute(attribute.name(), *converted);
    }
    // After the attributes: a constant's own tensor names its defect more precisely.
    for (const std::string &output : node.output()) {
      auto it = types_.find(output);
      StatusOr<Type> type =
          convertType(output.empty() || it == types_.end() ? nullptr : it->second, output);
      if (!type)
        return type.status();
      state.addTypes(*type);
    }
    if (defaultDomain && node.op_type() == "Transpose")
      DLM_RETURN_IF_ERROR(checkTransposePerm(state, where + " (op Transpose)"));
    state.addAttribute(kOpsetAttr, b_.getI64IntegerAttr(opset));
    state.addAttribute(kNodeAttr, b_.getStringAttr(label));
    for (const std::string &output : node.output())
      if (!output.empty() && (values_.count(output) || file_.initializer(output)))
        return Status::error("onnx: " + where + " defines '" + output +
                             "' again (ONNX values have one definition)");
    Operation *op = b_.create(state);
    for (int i = 0; i < node.output_size(); ++i)
      if (!node.output(i).empty())
        values_[node.output(i)] = op->getResult(i);
    return Status::ok();
  }

  Value absent() {
    if (!absent_) {
      OpBuilder::InsertionGuard guard(b_);
      b_.setInsertionPointToStart(b_.getInsertionBlock());
      OperationState state(b_.getUnknownLoc(), kAbsentOp);
      state.addTypes(b_.getNoneType());
      absent_ = b_.create(state)->getResult(0);
    }
    return absent_;
  }

  OnnxFile &file_;
  OpBuilder b_;
  std::map<std::string, const proto::TypeProto *> types_;
  std::map<std::string, int> producerIndex_;
  std::map<std::string, Value> values_;
  Value absent_;
};

} // namespace

std::string listText(ArrayRef<int64_t> values) {
  std::string text = "[";
  for (size_t i = 0; i < values.size(); ++i)
    text += (i ? ", " : "") + std::to_string(values[i]);
  return text + "]";
}

bool isPermutation(ArrayRef<int64_t> perm) {
  std::vector<bool> seen(perm.size(), false);
  for (int64_t axis : perm) {
    if (axis < 0 || axis >= int64_t(perm.size()) || seen[axis])
      return false;
    seen[axis] = true;
  }
  return true;
}

StatusOr<OwningOpRef<ModuleOp>> translateGraph(MLIRContext &context, OnnxFile &file) {
  context.loadDialect<dlm::ir::DlmDialect, func::FuncDialect>();
  return GraphTranslator(context, file).translate();
}

} // namespace dlm::importer::onnx
