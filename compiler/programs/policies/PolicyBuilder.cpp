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

Value PolicyBuilder::knob(StringRef name, Type type, const KnobSpec &spec) {
  StringRef kind = type.isInteger(64)  ? "int"
                   : type.isF64()      ? "real"
                   : type.isInteger(1) ? "bool"
                                       : "text";
  return generate::KnobOp::create(
      builder_, type, builder_.getStringAttr(name), builder_.getStringAttr(kind), spec.fallback,
      spec.optional ? builder_.getBoolAttr(true) : BoolAttr(), optionalText(spec.oneOf),
      optionalText(spec.error), spec.min, spec.max);
}

Value PolicyBuilder::intKnob(StringRef name, int64_t fallback, std::optional<int64_t> min,
                             std::optional<int64_t> max) {
  auto bound = [&](std::optional<int64_t> v) -> Attribute {
    return v ? builder_.getI64IntegerAttr(*v) : Attribute();
  };
  return knob(name, i64(),
              {builder_.getI64IntegerAttr(fallback), false, {}, {}, bound(min), bound(max)});
}

Value PolicyBuilder::realKnob(StringRef name, double fallback) {
  return knob(name, f64(), {builder_.getF64FloatAttr(fallback)});
}

Value PolicyBuilder::boolKnob(StringRef name, bool fallback) {
  return knob(name, i1(), {builder_.getBoolAttr(fallback)});
}

Value PolicyBuilder::textKnob(StringRef name, std::optional<StringRef> fallback, StringRef oneOf,
                              StringRef error) {
  return knob(
      name, decode::TextType::get(builder_.getContext()),
      {fallback ? builder_.getStringAttr(*fallback) : Attribute(), !fallback, oneOf, error});
}

StringAttr PolicyBuilder::optionalText(StringRef text) {
  return text.empty() ? StringAttr() : builder_.getStringAttr(text);
}

template <typename OpT>
Value PolicyBuilder::arithmetic(StringRef name, Value a, Value b, StringRef precision) {
  Type type = a.getType().isF64() || b.getType().isF64() ? f64() : i64();
  return value(name, OpT::create(builder_, type, a, b, optionalText(precision)));
}

template <typename OpT> Value PolicyBuilder::compare(StringRef name, Value a, Value b) {
  return value(name, OpT::create(builder_, i1(), a, b));
}

Value PolicyBuilder::add(StringRef n, Value a, Value b, StringRef precision) {
  return arithmetic<generate::AddOp>(n, a, b, precision);
}
Value PolicyBuilder::sub(StringRef n, Value a, Value b, StringRef precision) {
  return arithmetic<generate::SubOp>(n, a, b, precision);
}
Value PolicyBuilder::mul(StringRef n, Value a, Value b, StringRef precision) {
  return arithmetic<generate::MulOp>(n, a, b, precision);
}
Value PolicyBuilder::div(StringRef n, Value a, Value b, StringRef precision) {
  return arithmetic<generate::DivOp>(n, a, b, precision);
}
Value PolicyBuilder::rem(StringRef n, Value a, Value b) {
  return arithmetic<generate::RemOp>(n, a, b);
}
Value PolicyBuilder::gt(StringRef n, Value a, Value b) { return compare<generate::GtOp>(n, a, b); }
Value PolicyBuilder::ge(StringRef n, Value a, Value b) { return compare<generate::GeOp>(n, a, b); }
Value PolicyBuilder::le(StringRef n, Value a, Value b) { return compare<generate::LeOp>(n, a, b); }
Value PolicyBuilder::eq(StringRef n, Value a, Value b) { return compare<generate::EqOp>(n, a, b); }
Value PolicyBuilder::both(StringRef n, Value a, Value b) {
  return compare<generate::AndOp>(n, a, b);
}
Value PolicyBuilder::either(StringRef n, Value a, Value b) {
  return compare<generate::OrOp>(n, a, b);
}

Value PolicyBuilder::negate(StringRef name, Value a) {
  return value(name, generate::NotOp::create(builder_, i1(), a));
}

Value PolicyBuilder::select(StringRef name, Value cond, Value a, Value b) {
  return value(name, generate::SelectOp::create(builder_, a.getType(), cond, a, b));
}

Value PolicyBuilder::set(StringRef name, Value a) {
  return value(name, generate::SetOp::create(builder_, a.getType(), a));
}

Value PolicyBuilder::toReal(StringRef name, Value a, StringRef precision) {
  return value(name, generate::ToRealOp::create(builder_, f64(), a, optionalText(precision)));
}

Value PolicyBuilder::defined(StringRef name, Value knob) {
  return value(name, generate::DefinedOp::create(builder_, i1(), knob));
}

void PolicyBuilder::check(Value cond, StringRef message, Value arg0, Value arg1) {
  generate::CheckOp::create(builder_, cond, builder_.getStringAttr(message), arg0, arg1, Value(),
                            Value());
}

ValueRange PolicyBuilder::blockLoop(StringRef name, Value count, ValueRange inits,
                                    std::initializer_list<StringRef> argNames,
                                    function_ref<SmallVector<Value>(Value, ValueRange)> body) {
  auto loop = generate::BlockLoopOp::create(builder_, inits.getTypes(), count, inits);
  loop->setAttr("name", builder_.getStringAttr(name));
  loop->setAttr("arg_names", names(argNames));
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

generate::ForwardOp PolicyBuilder::forward(const Forward &f) {
  return generate::ForwardOp::create(
      builder_, f.capture, f.mode, f.count, f.keep, f.feedEnd, f.rowBegin, f.rowEnd,
      f.decoded ? builder_.getBoolAttr(*f.decoded) : BoolAttr(), optionalText(f.function), f.input,
      f.inputScale, f.inputAt, f.first);
}

ValueRange PolicyBuilder::ifElse(Value cond, TypeRange types,
                                 std::initializer_list<StringRef> resultNames,
                                 function_ref<SmallVector<Value>()> then,
                                 function_ref<SmallVector<Value>()> otherwise) {
  auto branch = generate::IfOp::create(builder_, types, cond);
  branch->setAttr("names", names(resultNames));
  OpBuilder::InsertionGuard guard(builder_);
  builder_.setInsertionPointToStart(&branch.getThenRegion().emplaceBlock());
  generate::YieldOp::create(builder_, then());
  builder_.setInsertionPointToStart(&branch.getElseRegion().emplaceBlock());
  generate::YieldOp::create(builder_, otherwise());
  return branch.getResults();
}

void PolicyBuilder::ifThen(Value cond, function_ref<void()> then, function_ref<void()> otherwise) {
  auto branch = generate::IfOp::create(builder_, TypeRange(), cond);
  OpBuilder::InsertionGuard guard(builder_);
  builder_.setInsertionPointToStart(&branch.getThenRegion().emplaceBlock());
  then();
  generate::YieldOp::create(builder_, ValueRange());
  if (!otherwise)
    return;
  builder_.setInsertionPointToStart(&branch.getElseRegion().emplaceBlock());
  otherwise();
  generate::YieldOp::create(builder_, ValueRange());
}

PolicyBuilder::DenoiseLoop PolicyBuilder::denoiseLoop(StringRef name, Value cap, Value bound,
                                                      Value base, ValueRange inits,
                                                      std::initializer_list<StringRef> argNames,
                                                      StringRef ranName, DenoiseBody body) {
  SmallVector<Type> resultTypes{i64()};
  llvm::append_range(resultTypes, inits.getTypes());
  auto loop = generate::DenoiseLoopOp::create(builder_, resultTypes, cap, bound, base,
                                              IntegerAttr(), inits);
  loop->setAttr("name", builder_.getStringAttr(name));
  loop->setAttr("arg_names", names(argNames));
  loop->setAttr("names", names({ranName}));
  Block &block = loop.getBody().emplaceBlock();
  block.addArgument(i64(), builder_.getLoc());
  block.addArgument(i64(), builder_.getLoc());
  for (Type type : inits.getTypes())
    block.addArgument(type, builder_.getLoc());
  OpBuilder::InsertionGuard guard(builder_);
  builder_.setInsertionPointToStart(&block);
  auto [done, next] =
      body(block.getArgument(0), block.getArgument(1), block.getArguments().drop_front(2));
  generate::UntilOp::create(builder_, done);
  generate::YieldOp::create(builder_, next);
  return {loop.getRan(), loop.getResults()};
}

void PolicyBuilder::finish() { func::ReturnOp::create(builder_); }

ArrayAttr PolicyBuilder::names(std::initializer_list<StringRef> names) {
  SmallVector<Attribute> attributes;
  for (StringRef name : names)
    attributes.push_back(builder_.getStringAttr(name));
  return builder_.getArrayAttr(attributes);
}

void PolicyBuilder::nameResults(Operation *op, std::initializer_list<StringRef> list) {
  op->setAttr("names", names(list));
}

} // namespace dlm::programs
