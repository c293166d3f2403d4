#include "compiler/programs/DecodeModuleExport.h"

#include "compiler/dialects/decode/DecodeDialect.h"
#include "runtime/program/DecodeProgramSpec.h"

#include "mlir/IR/BuiltinAttributes.h"

#include <string>

namespace dlm::programs {
namespace {

using namespace mlir;
namespace dspec = spec::decode;

// The stored form of a text literal: one starting with a reference's prefix has it doubled
// (`%%x` for the text `%x`), as program::literalText reads it back.
std::string storedText(StringRef text) {
  std::string stored = text.str();
  if (!stored.empty() && (stored[0] == dspec::kRegisterPrefix || stored[0] == dspec::kKnobPrefix ||
                          stored[0] == dspec::kFactPrefix))
    stored.insert(stored.begin(), stored[0]);
  return stored;
}

StatusOr<artifact::AttributeValue> literal(Attribute attribute) {
  if (auto flag = llvm::dyn_cast<BoolAttr>(attribute))
    return artifact::AttributeValue(flag.getValue());
  if (auto integer = llvm::dyn_cast<IntegerAttr>(attribute))
    return artifact::AttributeValue(integer.getInt());
  if (auto real = llvm::dyn_cast<FloatAttr>(attribute))
    return artifact::AttributeValue(real.getValueAsDouble());
  if (auto text = llvm::dyn_cast<StringAttr>(attribute))
    return artifact::AttributeValue(storedText(text.getValue()));
  return Status::error("a literal that is neither bool, integer, real nor text");
}

// A register (`%name`), knob (`$name`), fact (`@name`) or constant (its literal).
StatusOr<artifact::AttributeValue> reference(Value value) {
  Operation *source = value.getDefiningOp();
  if (auto reg = llvm::dyn_cast_or_null<decode::RegisterOp>(source))
    return artifact::AttributeValue(dspec::kRegisterPrefix + reg.getName().str());
  if (auto fact = llvm::dyn_cast_or_null<decode::FactOp>(source))
    return artifact::AttributeValue(dspec::kFactPrefix + fact.getName().str());
  if (auto knob = llvm::dyn_cast_or_null<decode::KnobOp>(source)) {
    auto name = knob->getAttrOfType<StringAttr>("name");
    if (name)
      return artifact::AttributeValue(dspec::kKnobPrefix + name.getValue().str());
  }
  if (auto constant = llvm::dyn_cast_or_null<decode::ConstantOp>(source))
    return literal(constant.getValue());
  return Status::error("an operand that is not a decode.register, a knob, a decode.fact or a "
                       "decode.constant");
}

bool isValueSource(Operation &op) {
  return llvm::isa<decode::RegisterOp, decode::FactOp, decode::ConstantOp>(op);
}

// How many operands each input, inout or result parameter of `kind` has on `op`, in order.
SmallVector<int32_t> operandCounts(const dspec::KindSpec &kind, Operation *op) {
  SmallVector<int32_t> counts;
  if (auto segments = op->getAttrOfType<DenseI32ArrayAttr>("operandSegmentSizes")) {
    counts.assign(segments.asArrayRef().begin(), segments.asArrayRef().end());
    return counts;
  }
  // Without segments at most one parameter is optional: it has the operands the others leave.
  int32_t required = 0;
  for (size_t p = 0; p < kind.paramCount; ++p)
    required += kind.params[p].role != dspec::ParamRole::attribute && kind.params[p].required;
  const int32_t spare = static_cast<int32_t>(op->getNumOperands()) - required;
  for (size_t p = 0; p < kind.paramCount; ++p)
    if (kind.params[p].role != dspec::ParamRole::attribute)
      counts.push_back(kind.params[p].required ? 1 : spare);
  return counts;
}

class Exporter {
public:
  Status run(Block &block) {
    for (Operation &op : block.without_terminator())
      if (!isValueSource(op))
        DLM_RETURN_IF_ERROR(add(op));
    return Status::ok();
  }

  std::vector<artifact::DecodeOp> records;

private:
  Status add(Operation &op) {
    StringRef name = op.getName().getStringRef();
    if (!name.consume_front("decode."))
      return Status::error("'" + op.getName().getStringRef().str() + "' is not a decode op");
    const dspec::KindSpec *kind = dspec::findKind(name);
    if (!kind)
      return Status::error("no decode record kind '" + name.str() + "'");
    artifact::DecodeOp record{name.str(), {}, {}};
    if (auto label = op.getAttrOfType<StringAttr>("name"))
      record.name = label.getValue().str();
    DLM_RETURN_IF_ERROR(
        addParameters(*kind, op, record).withContext("decode record '" + record.kind + "'"));
    records.push_back(std::move(record));
    if (op.getNumRegions() == 0)
      return Status::ok();
    for (unsigned r = 0; r < op.getNumRegions(); ++r) {
      Region &region = op.getRegion(r);
      if (region.empty())
        continue;
      if (r > 0)
        records.push_back({std::string(dspec::kKindElse), {}, {}});
      DLM_RETURN_IF_ERROR(run(region.front()));
    }
    records.push_back({std::string(dspec::kKindEnd), {}, {}});
    return Status::ok();
  }

  static Status addParameters(const dspec::KindSpec &kind, Operation &op,
                              artifact::DecodeOp &record) {
    const SmallVector<int32_t> counts = operandCounts(kind, &op);
    size_t next = 0, operand = 0;
    for (size_t p = 0; p < kind.paramCount; ++p) {
      const dspec::ParamSpec &param = kind.params[p];
      const std::string key(param.key);
      if (param.role == dspec::ParamRole::attribute) {
        // A key that is a C++ keyword has a trailing underscore in the dialect (`default_`).
        Attribute attribute = op.getAttr(key == "default" ? "default_" : key);
        if (!attribute)
          continue;
        StatusOr<artifact::AttributeValue> value = literal(attribute);
        if (!value)
          return value.status().withContext(key);
        record.parameters[key] = *value;
        continue;
      }
      if (next >= counts.size())
        return Status::error("fewer operand groups than the kind has parameters");
      const int32_t count = counts[next++];
      if (count == 0)
        continue;
      StatusOr<artifact::AttributeValue> value = reference(op.getOperand(operand));
      operand += static_cast<size_t>(count);
      if (!value)
        return value.status().withContext(key);
      record.parameters[key] = *value;
    }
    return Status::ok();
  }
};

} // namespace

StatusOr<std::vector<artifact::DecodeOp>> exportDecodeRecords(func::FuncOp function) {
  if (function.getBody().empty())
    return Status::error("the decode function @" + function.getName().str() + " has no body");
  Exporter exporter;
  DLM_RETURN_IF_ERROR(exporter.run(function.getBody().front())
                          .withContext("the decode function @" + function.getName().str()));
  return std::move(exporter.records);
}

} // namespace dlm::programs
