#include "compiler/programs/DecodeModuleImport.h"

#include "compiler/dialects/decode/DecodeDialect.h"
#include "runtime/program/DecodeProgram.h"
#include "runtime/program/DecodeProgramSpec.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"

#include <map>
#include <string>

namespace dlm::programs {
namespace {

using namespace mlir;
namespace dspec = spec::decode;

Type valueType(MLIRContext *context, program::ValueType type) {
  Builder b(context);
  switch (type) {
  case program::ValueType::integer:
    return b.getI64Type();
  case program::ValueType::real:
    return b.getF64Type();
  case program::ValueType::boolean:
    return b.getI1Type();
  case program::ValueType::text:
    return decode::TextType::get(context);
  case program::ValueType::tokens:
    return decode::TokensType::get(context);
  case program::ValueType::reals:
    return decode::RealsType::get(context);
  case program::ValueType::flags:
    return decode::FlagsType::get(context);
  case program::ValueType::list:
    return decode::ListType::get(context);
  case program::ValueType::credit:
    return decode::CreditType::get(context);
  case program::ValueType::logits:
    return decode::LogitsType::get(context);
  case program::ValueType::none:
    break;
  }
  return NoneType::get(context);
}

// A literal's attribute: int → i64, real → f64, bool, text (a `%%x` written for the text `%x`).
Attribute literal(Builder &b, const artifact::AttributeValue &value) {
  if (const auto *flag = std::get_if<bool>(&value))
    return b.getBoolAttr(*flag);
  if (const auto *integer = std::get_if<int64_t>(&value))
    return b.getI64IntegerAttr(*integer);
  if (const auto *real = std::get_if<double>(&value))
    return b.getF64FloatAttr(*real);
  return b.getStringAttr(program::literalText(std::get<std::string>(value)));
}

class Importer {
public:
  Importer(MLIRContext &context, const program::DecodeProgram &loaded)
      : context_(context), loaded_(loaded), builder_(&context) {}

  StatusOr<OwningOpRef<ModuleOp>> run(std::string_view policy,
                                      const std::vector<artifact::DecodeOp> &records) {
    Location loc = builder_.getUnknownLoc();
    OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
    builder_.setInsertionPointToEnd(module->getBody());
    auto function = func::FuncOp::create(builder_, loc, policy, builder_.getFunctionType({}, {}));
    entry_ = function.addEntryBlock();
    builder_.setInsertionPointToStart(entry_);
    for (const program::RegisterInfo &info : loaded_.registers())
      registers_[info.name] = decode::RegisterOp::create(
          builder_, loc,
          decode::RegisterType::get(&context_, valueType(&context_, info.type)), info.name);
    for (const artifact::DecodeOp &record : records)
      DLM_RETURN_IF_ERROR(add(record));
    func::ReturnOp::create(builder_, loc);
    std::string diagnostic;
    ScopedDiagnosticHandler handler(&context_, [&](Diagnostic &d) {
      if (diagnostic.empty())
        diagnostic = d.str();
      return success();
    });
    if (failed(verify(*module)))
      return Status::error("the " + std::string(policy) +
                           " decode program is not valid decode dialect: " + diagnostic);
    return module;
  }

private:
  Status add(const artifact::DecodeOp &record) {
    if (record.kind == dspec::kKindElse) {
      Operation *open = open_.back();
      builder_.setInsertionPointToStart(&open->getRegion(1).emplaceBlock());
      return Status::ok();
    }
    if (record.kind == dspec::kKindEnd) {
      builder_.setInsertionPointAfter(open_.back());
      open_.pop_back();
      return Status::ok();
    }
    const dspec::KindSpec *kind = dspec::findKind(record.kind);
    if (!kind)
      return Status::error("unknown decode record kind '" + record.kind + "'");
    OperationState state(builder_.getUnknownLoc(), "decode." + record.kind);
    DLM_RETURN_IF_ERROR(addParameters(*kind, record, state));
    if (!record.name.empty())
      state.addAttribute("name", builder_.getStringAttr(record.name));
    const bool structured = record.kind == dspec::kKindBlockLoop ||
                            record.kind == dspec::kKindDenoiseLoop || record.kind == dspec::kKindIf;
    for (int r = 0; r < (record.kind == dspec::kKindIf ? 2 : structured ? 1 : 0); ++r)
      state.addRegion();
    if (record.kind == dspec::kKindKnob)
      state.addTypes(decode::KnobType::get(&context_, knobType(record.name)));
    Operation *op = builder_.create(state);
    if (record.kind == dspec::kKindKnob)
      knobs_[record.name] = op->getResult(0);
    if (structured) {
      open_.push_back(op);
      builder_.setInsertionPointToStart(&op->getRegion(0).emplaceBlock());
    }
    return Status::ok();
  }

  Status addParameters(const dspec::KindSpec &kind, const artifact::DecodeOp &record,
                       OperationState &state) {
    SmallVector<int32_t> segments;
    for (size_t p = 0; p < kind.paramCount; ++p) {
      const dspec::ParamSpec &param = kind.params[p];
      auto found = record.parameters.find(param.key);
      // A key that is a C++ keyword has a trailing underscore in the dialect (`default_`).
      const std::string name = param.key == "default" ? "default_" : std::string(param.key);
      if (param.role == dspec::ParamRole::attribute) {
        if (found != record.parameters.end())
          state.addAttribute(name, literal(builder_, found->second));
        continue;
      }
      segments.push_back(found != record.parameters.end() ? 1 : 0);
      if (found == record.parameters.end())
        continue;
      StatusOr<Value> value = valueOf(found->second);
      if (!value)
        return value.status().withContext("decode record '" + record.kind + "' " +
                                          std::string(param.key));
      state.addOperands(*value);
    }
    if (state.name.hasTrait<OpTrait::AttrSizedOperandSegments>())
      state.addAttribute("operandSegmentSizes", builder_.getDenseI32ArrayAttr(segments));
    return Status::ok();
  }

  StatusOr<Value> valueOf(const artifact::AttributeValue &value) {
    if (program::isReference(value)) {
      const std::string &text = std::get<std::string>(value);
      if (text[0] == dspec::kRegisterPrefix)
        return lookup(registers_, text.substr(1), "register");
      if (text[0] == dspec::kKnobPrefix)
        return lookup(knobs_, text.substr(1), "knob");
      return fact(text.substr(1));
    }
    OpBuilder::InsertionGuard guard(builder_);
    builder_.setInsertionPointToStart(entry_);
    Attribute attribute = literal(builder_, value);
    Type type = llvm::isa<StringAttr>(attribute) ? Type(decode::TextType::get(&context_))
                                                 : llvm::cast<TypedAttr>(attribute).getType();
    return Value(decode::ConstantOp::create(builder_, builder_.getUnknownLoc(), type, attribute));
  }

  static StatusOr<Value> lookup(const std::map<std::string, Value> &values,
                                const std::string &name, const char *what) {
    auto found = values.find(name);
    if (found == values.end())
      return Status::error(std::string("no ") + what + " '" + name + "'");
    return found->second;
  }

  Value fact(const std::string &name) {
    Value &value = facts_[name];
    if (!value) {
      OpBuilder::InsertionGuard guard(builder_);
      builder_.setInsertionPointToStart(entry_);
      value = decode::FactOp::create(builder_, builder_.getUnknownLoc(), builder_.getI64Type(),
                                     name);
    }
    return value;
  }

  Type knobType(const std::string &name) const {
    const int32_t index = loaded_.findKnob(name);
    return valueType(&context_, index < 0 ? program::ValueType::none
                                          : loaded_.knobs()[static_cast<size_t>(index)].type);
  }

  MLIRContext &context_;
  const program::DecodeProgram &loaded_;
  OpBuilder builder_;
  Block *entry_ = nullptr;
  std::vector<Operation *> open_;
  std::map<std::string, Value> registers_, knobs_, facts_;
};

} // namespace

StatusOr<OwningOpRef<ModuleOp>>
importDecodeRecords(MLIRContext &context, std::string_view policy,
                    const std::vector<artifact::DecodeOp> &records) {
  context.loadDialect<decode::DecodeDialect, func::FuncDialect>();
  StatusOr<program::DecodeProgram> loaded = program::DecodeProgram::load(records);
  if (!loaded)
    return loaded.status();
  return Importer(context, *loaded).run(policy, records);
}

} // namespace dlm::programs
