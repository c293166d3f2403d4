#include "compiler/programs/policies/PolicyBuilder.h"

namespace dlm::programs {

using namespace mlir;

PolicyBuilder::PolicyBuilder(ModuleOp module, StringRef policy)
    : builder_(UnknownLoc::get(module.getContext()), module.getContext()) {
  builder_.setInsertionPointToEnd(module.getBody());
  auto function = func::FuncOp::create(builder_, policy, builder_.getFunctionType({}, {}));
  builder_.setInsertionPointToStart(function.addEntryBlock());
}

Value PolicyBuilder::integer(int64_t value) {
  return decode::ConstantOp::create(builder_, i64(), builder_.getI64IntegerAttr(value));
}

Value PolicyBuilder::real(double value) {
  return decode::ConstantOp::create(builder_, f64(), builder_.getF64FloatAttr(value));
}

Value PolicyBuilder::boolean(bool value) {
  return decode::ConstantOp::create(builder_, i1(), builder_.getBoolAttr(value));
}

Value PolicyBuilder::text(StringRef value) {
  return decode::ConstantOp::create(builder_, decode::TextType::get(builder_.getContext()),
                                    builder_.getStringAttr(value));
}

Value PolicyBuilder::fact(StringRef name) { return decode::FactOp::create(builder_, i64(), name); }

Value PolicyBuilder::intKnob(StringRef name, int64_t fallback, std::optional<int64_t> min,
                             std::optional<int64_t> max) {
  auto bound = [&](std::optional<int64_t> v) -> Attribute {
    return v ? builder_.getI64IntegerAttr(*v) : Attribute();
  };
  return generate::KnobOp::create(builder_, i64(), builder_.getStringAttr(name),
                                  builder_.getStringAttr("int"),
                                  builder_.getI64IntegerAttr(fallback), BoolAttr(), StringAttr(),
                                  StringAttr(), bound(min), bound(max));
}

Value PolicyBuilder::realKnob(StringRef name, double fallback) {
  return generate::KnobOp::create(builder_, f64(), builder_.getStringAttr(name),
                                  builder_.getStringAttr("real"),
                                  builder_.getF64FloatAttr(fallback), BoolAttr(), StringAttr(),
                                  StringAttr(), Attribute(), Attribute());
}

void PolicyBuilder::check(Value cond, StringRef message, Value arg0, Value arg1) {
  generate::CheckOp::create(builder_, cond, builder_.getStringAttr(message), arg0, arg1, Value(),
                            Value());
}

ValueRange PolicyBuilder::blockLoop(
    StringRef name, Value count, ValueRange inits, std::initializer_list<StringRef> argNames,
    function_ref<SmallVector<Value>(Value, ValueRange)> body) {
  auto loop = generate::BlockLoopOp::create(builder_, inits.getTypes(), count, inits);
  loop->setAttr("name", builder_.getStringAttr(name));
  SmallVector<Attribute> names;
  for (StringRef argName : argNames)
    names.push_back(builder_.getStringAttr(argName));
  loop->setAttr("arg_names", builder_.getArrayAttr(names));
  Block &block = loop.getBody().emplaceBlock();
  block.addArgument(i64(), builder_.getLoc());
  for (Type type : inits.getTypes())
    block.addArgument(type, builder_.getLoc());
  OpBuilder::InsertionGuard guard(builder_);
  builder_.setInsertionPointToStart(&block);
  SmallVector<Value> next = body(block.getArgument(0), block.getArguments().drop_front(1));
  generate::YieldOp::create(builder_, next);
  return loop.getResults();
}

void PolicyBuilder::finish() { func::ReturnOp::create(builder_); }

void PolicyBuilder::nameResults(Operation *op, std::initializer_list<StringRef> names) {
  SmallVector<Attribute> attributes;
  for (StringRef name : names)
    attributes.push_back(builder_.getStringAttr(name));
  op->setAttr("names", builder_.getArrayAttr(attributes));
}

} // namespace dlm::programs
