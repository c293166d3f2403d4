#include "compiler/passes/DecodeLowering.h"

#include "compiler/dialects/decode/DecodeDialect.h"
#include "compiler/dialects/generate/GenerateDialect.h"
#include "runtime/program/DecodeProgramSpec.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <string>

namespace dlm::passes {
namespace {

using namespace mlir;
namespace dspec = spec::decode;

// Why a body argument or result needs its register: the names the builder gave, else `fallback`.
std::string nameHint(Operation *op, StringRef attribute, unsigned index, StringRef fallback) {
  if (auto names = op->getAttrOfType<ArrayAttr>(attribute))
    if (index < names.size())
      if (auto name = llvm::dyn_cast<StringAttr>(names[index]))
        return name.str();
  return fallback.str();
}

// How many values each parameter of `roles` has on `op` (operands or results): the segment
// sizes when the op has them, else one per required parameter and the rest to the optional one.
SmallVector<int32_t> groupSizes(Operation *op, StringRef segmentsAttribute, unsigned total,
                                ArrayRef<bool> required) {
  if (auto segments = op->getAttrOfType<DenseI32ArrayAttr>(segmentsAttribute))
    return SmallVector<int32_t>(segments.asArrayRef());
  int32_t spare = static_cast<int32_t>(total);
  for (bool r : required)
    spare -= r;
  SmallVector<int32_t> sizes;
  for (bool r : required)
    sizes.push_back(r ? 1 : spare);
  return sizes;
}

// How many operands and results each parameter of `kind` has on the generate op `op`, in
// parameter order (a declaration's value is one more result).
struct Groups {
  SmallVector<int32_t> operands, results;
};

Groups groupsOf(const dspec::KindSpec &kind, Operation *op) {
  SmallVector<bool> operandRequired, resultRequired;
  for (size_t p = 0; p < kind.paramCount; ++p) {
    const dspec::ParamSpec &param = kind.params[p];
    if (param.role == dspec::ParamRole::input || param.role == dspec::ParamRole::inout)
      operandRequired.push_back(param.required);
    if (param.role == dspec::ParamRole::inout || param.role == dspec::ParamRole::result)
      resultRequired.push_back(param.required);
  }
  if (kind.kind == dspec::kKindKnob)
    resultRequired.push_back(true);
  return {groupSizes(op, "operandSegmentSizes", op->getNumOperands(), operandRequired),
          groupSizes(op, "resultSegmentSizes", op->getNumResults(), resultRequired)};
}

bool isScalar(Type type) {
  return type.isInteger(64) || type.isF64() || type.isInteger(1) ||
         llvm::isa<decode::TextType>(type);
}

// Whether the ops of `block` after `op`'s ancestor there (not the ancestor itself) use `value`.
bool usedAfter(Value value, Operation *op, Block &block) {
  Operation *anchor = block.findAncestorOpInBlock(*op);
  for (Operation *user : value.getUsers()) {
    Operation *at = block.findAncestorOpInBlock(*user);
    if (at && at != anchor && anchor->isBeforeInBlock(at))
      return true;
  }
  return false;
}

bool isLoop(Operation *op) { return llvm::isa<generate::BlockLoopOp, generate::DenoiseLoopOp>(op); }

// Whether `user` may run after `op` once `op` has run, both nested in `block`: it comes later in
// the block, or later in the region they share, but not in the other branch of an if.
bool runsAfter(Operation *user, Operation *op, Block &block) {
  Operation *userAt = block.findAncestorOpInBlock(*user);
  Operation *opAt = block.findAncestorOpInBlock(*op);
  if (userAt != opAt)
    return opAt->isBeforeInBlock(userAt);
  if (user == op || userAt == user)
    return false; // the op itself, or a structured op reading before its region runs
  Region *userRegion = userAt->getParentRegion();
  for (Region &region : userAt->getRegions())
    if (region.findAncestorOpInRegion(*user))
      userRegion = &region;
  Region *opRegion = nullptr;
  for (Region &region : opAt->getRegions())
    if (region.findAncestorOpInRegion(*op))
      opRegion = &region;
  if (userRegion != opRegion)
    return false; // the two branches of an if
  return runsAfter(user, op, opRegion->front());
}

// Whether a record that overwrites `value`'s register at `op` leaves every reader of the old value
// before it: no loop nested below `value`'s block holds `op` and a read of it (its next iteration
// would read the new value), and no other use runs after `op`.
bool overwritableAt(Value value, Operation *op) {
  Block *home = value.getParentBlock();
  if (!home->findAncestorOpInBlock(*op))
    return false;
  for (Operation *at = op; at->getBlock() != home;) {
    at = at->getParentOp();
    if (isLoop(at) &&
        llvm::any_of(value.getUsers(), [&](Operation *user) { return at->isProperAncestor(user); }))
      return false;
  }
  for (Operation *user : value.getUsers())
    if (user != op && runsAfter(user, op, *home))
      return false;
  return true;
}

// Whether `value` is not read once `op` has run: it does not exist yet (a result of an op that
// holds `op`), is out of its scope, or is overwritable there.
bool deadAt(Value value, Operation *op) {
  if (Operation *definition = value.getDefiningOp(); definition && definition->isProperAncestor(op))
    return true;
  return !value.getParentBlock()->findAncestorOpInBlock(*op) || overwritableAt(value, op);
}

class Lowering {
public:
  explicit Lowering(func::FuncOp source)
      : context_(source.getContext()), builder_(context_), values_(context_) {}

  FailureOr<OwningOpRef<func::FuncOp>> run(func::FuncOp source) {
    OwningOpRef<func::FuncOp> lowered =
        func::FuncOp::create(source.getLoc(), source.getName(), source.getFunctionType());
    Block *entry = lowered->addEntryBlock();
    // Registers, constants and facts go to their own block while the records are lowered, then
    // to the function's start, where they dominate every record.
    Block values;
    values_.setInsertionPointToEnd(&values);
    builder_.setInsertionPointToEnd(entry);
    if (source.getBody().empty() || source.getNumArguments() != 0)
      return source.emitOpError("to lower to a decode program takes no arguments and has a body");
    const LogicalResult lowering = lowerOps(source.getBody().front(), {});
    // Spliced also on failure: the records use these values, and go with them.
    entry->getOperations().splice(entry->begin(), values.getOperations());
    if (failed(lowering))
      return failure();
    func::ReturnOp::create(builder_, source.getLoc());
    return lowered;
  }

private:
  // A result → the carried register it is written to, and the value that register held.
  struct Preference {
    Value reg, replaced;
  };

  // ---- Values -----------------------------------------------------------------------------

  Value newRegister(Type type, StringRef hint) {
    std::string name = hint.str();
    for (unsigned n = 2; !taken_.insert(name).second; ++n)
      name = hint.str() + std::to_string(n);
    Value reg = decode::RegisterOp::create(values_, builder_.getUnknownLoc(),
                                           decode::RegisterType::get(context_, type), name);
    byHint_[hint].push_back(reg);
    return reg;
  }

  // A register for `value`, which `op` writes: one of the same name and type that no value it
  // held is read from any more (as a program written by hand reuses %step), else a new one. A
  // row register `op` also reads is not taken: a record reads a scalar before writing one, but
  // row records may write rows as they read them.
  Value sharedRegister(Value value, Operation *op, StringRef hint) {
    auto readByOp = [&](Value reg) {
      return llvm::any_of(op->getOperands(), [&](Value v) { return refs_.lookup(v) == reg; });
    };
    for (Value reg : byHint_.lookup(hint))
      if (shareable_.contains(reg) &&
          llvm::cast<decode::RegisterType>(reg.getType()).getValueType() == value.getType() &&
          (isScalar(value.getType()) || !readByOp(reg)) &&
          llvm::all_of(occupants_[reg], [&](Value held) {
            return held.getDefiningOp() != op && deadAt(held, op);
          }))
        return reg;
    Value reg = newRegister(value.getType(), hint);
    shareable_.insert(reg);
    return reg;
  }

  // `value` lives in `reg` (a register, a knob, a constant or a fact).
  void assign(Value value, Value reg) {
    refs_[value] = reg;
    if (reg.getDefiningOp<decode::RegisterOp>())
      occupants_[reg].push_back(value);
  }

  // `reg` now carries values through a region: values written into it later are not all known
  // yet, so no other value may share it.
  void reserveForCarrying(Value reg) { shareable_.erase(reg); }

  // What a record refers to for `value`: its register, its knob, or a constant or fact.
  FailureOr<Value> reference(Value value, Operation *user) {
    if (Value known = refs_.lookup(value))
      return known;
    Operation *source = value.getDefiningOp();
    if (source && llvm::isa<decode::ConstantOp, decode::FactOp>(source)) {
      Operation *copy = values_.clone(*source);
      refs_[value] = copy->getResult(0);
      return copy->getResult(0);
    }
    return user->emitOpError("reads a value that no record, knob, decode.constant or "
                             "decode.fact before it gives");
  }

  FailureOr<Value> registerOf(Value value, Operation *user, StringRef key) {
    FailureOr<Value> ref = reference(value, user);
    if (failed(ref))
      return failure();
    if (!ref->getDefiningOp<decode::RegisterOp>())
      return user->emitOpError() << "in-out " << key
                                 << " must be a value a record wrote, not a literal, knob or fact";
    return *ref;
  }

  // The register `value` (a result of `op`) is written to: the carried one it replaces, or a
  // shared or new one.
  Value resultRegister(Value value, Operation *op, StringRef hint) {
    if (auto carried = preferred_.find(value); carried != preferred_.end() &&
                                               freeFor(carried->second, op))
      return carried->second.reg;
    return sharedRegister(value, op, hint);
  }

  // Whether `op` may write a preferred register: no value it holds, but the one the preference
  // replaces, is read after `op` (a value that another path wrote into it, say).
  bool freeFor(const Preference &preference, Operation *op) {
    return llvm::all_of(occupants_[preference.reg], [&](Value held) {
      return held == preference.replaced || deadAt(held, op);
    });
  }

  // ---- Records ----------------------------------------------------------------------------

  LogicalResult lowerOps(Block &block, ArrayRef<Value> carried) {
    Operation *terminator = block.mightHaveTerminator() ? block.getTerminator() : nullptr;
    auto yield = llvm::dyn_cast_or_null<generate::YieldOp>(terminator);
    // A region's closing until or exit_if comes after the carried values' sets.
    Operation *closing = nullptr;
    if (yield && yield->getPrevNode() &&
        llvm::isa<generate::UntilOp, generate::ExitIfOp>(yield->getPrevNode()))
      closing = yield->getPrevNode();
    for (Operation &op : block) {
      if (&op == terminator && !yield)
        continue;
      if (&op == closing || &op == yield.getOperation()) {
        if (closing && yield && failed(keepCondition(*closing, yield, carried)))
          return failure();
        if (yield && failed(writeCarried(yield, carried)))
          return failure();
        if (closing && failed(lowerRecord(*closing)))
          return failure();
        break;
      }
      if (llvm::isa<decode::ConstantOp, decode::FactOp>(op))
        continue;
      if (llvm::isa<generate::ExitIfOp>(op) && yield &&
          failed(checkEarlyExit(&op, yield, block, carried)))
        return failure();
      if (failed(lowerOp(op)))
        return failure();
    }
    return success();
  }

  LogicalResult lowerOp(Operation &op) {
    if (auto loop = llvm::dyn_cast<generate::BlockLoopOp>(op))
      return lowerBlockLoop(loop);
    if (auto loop = llvm::dyn_cast<generate::DenoiseLoopOp>(op))
      return lowerDenoiseLoop(loop);
    if (auto branch = llvm::dyn_cast<generate::IfOp>(op))
      return lowerIf(branch);
    if (op.getDialect() && op.getDialect()->getNamespace() == "generate")
      return lowerRecord(op);
    return op.emitOpError("has no decode record (the generate dialect's ops, decode.constant and "
                          "decode.fact lower to decode records)");
  }

  LogicalResult lowerRecord(Operation &op) {
    StringRef kind = op.getName().stripDialect();
    const dspec::KindSpec *spec = dspec::findKind(kind);
    if (!spec)
      return op.emitOpError("has no decode record kind");
    OperationState state(op.getLoc(), ("decode." + kind).str());
    const bool knob = kind == StringRef(dspec::kKindKnob.data(), dspec::kKindKnob.size());
    const Groups groups = groupsOf(*spec, &op);
    const SmallVector<int32_t> &operandSizes = groups.operands;
    const SmallVector<int32_t> &resultSizes = groups.results;
    size_t operandGroup = 0, resultGroup = 0, operand = 0, result = 0;
    SmallVector<int32_t> segments;
    for (size_t p = 0; p < spec->paramCount; ++p) {
      const dspec::ParamSpec &param = spec->params[p];
      const std::string key(param.key);
      const std::string argName = key == "default" ? "default_" : key;
      if (param.role == dspec::ParamRole::attribute) {
        if (Attribute attribute = op.getAttr(argName))
          state.addAttribute(argName, attribute);
        continue;
      }
      Value written;
      if (param.role == dspec::ParamRole::input || param.role == dspec::ParamRole::inout) {
        if (operandSizes[operandGroup++] == 1) {
          Value value = op.getOperand(operand++);
          FailureOr<Value> ref = param.role == dspec::ParamRole::input
                                     ? reference(value, &op)
                                     : registerOf(value, &op, key);
          if (failed(ref))
            return failure();
          if (param.role == dspec::ParamRole::inout &&
              (!overwritableAt(value, &op) || llvm::count(op.getOperands(), value) > 1))
            return op.emitOpError() << "in-out " << key
                                    << " is read after the op, again by it, or in a loop below "
                                       "its definition: the record overwrites its register";
          if (key == "knob" && !ref->getDefiningOp<decode::KnobOp>())
            return op.emitOpError("reads the knob of a value that is no knob's");
          written = *ref;
        }
      }
      if (param.role == dspec::ParamRole::inout || param.role == dspec::ParamRole::result) {
        if (resultSizes[resultGroup++] == 1) {
          Value value = op.getResult(result);
          if (param.role == dspec::ParamRole::inout && !written)
            return op.emitOpError() << "gives in-out " << key << " without reading it";
          Value reg = param.role == dspec::ParamRole::inout
                          ? written
                          : resultRegister(value, &op, nameHint(&op, "names", result, key));
          ++result;
          assign(value, reg);
          written = reg;
        }
      }
      segments.push_back(written ? 1 : 0);
      if (written)
        state.addOperands(written);
    }
    if (auto name = op.getAttrOfType<StringAttr>("name"))
      state.addAttribute("name", name);
    if (state.name.hasTrait<OpTrait::AttrSizedOperandSegments>())
      state.addAttribute("operandSegmentSizes", builder_.getDenseI32ArrayAttr(segments));
    if (knob)
      state.addTypes(decode::KnobType::get(context_, op.getResult(0).getType()));
    Operation *record = builder_.create(state);
    if (knob)
      refs_[op.getResult(0)] = record->getResult(0);
    return success();
  }

  // ---- Carried values ---------------------------------------------------------------------

  // The register of each value `op` carries (inits[i]): the init's own when it is defined in the
  // op's block and read nowhere after the op, else a new one set from it before the op.
  FailureOr<SmallVector<Value>> carriedRegisters(Operation *op, ValueRange inits,
                                                 unsigned firstName) {
    SmallVector<Value> registers;
    for (auto [i, init] : llvm::enumerate(inits)) {
      FailureOr<Value> ref = reference(init, op);
      if (failed(ref))
        return failure();
      // The body runs again: an init it reads itself keeps its own register.
      const bool readInside = llvm::any_of(
          init.getUsers(), [&](Operation *user) { return op->isProperAncestor(user); });
      if (ref->getDefiningOp<decode::RegisterOp>() && init.getParentBlock() == op->getBlock() &&
          !readInside && overwritableAt(init, op) && !llvm::is_contained(registers, *ref)) {
        reserveForCarrying(*ref);
        registers.push_back(*ref);
        continue;
      }
      const std::string hint = nameHint(op, "arg_names", firstName + i, "carried");
      if (!isScalar(init.getType()))
        return op->emitOpError() << "carries a " << init.getType()
                                 << " that is read after it: set copies scalars only";
      Value reg = newRegister(init.getType(), hint);
      decode::SetOp::create(builder_, op->getLoc(), *ref, reg);
      registers.push_back(reg);
    }
    return registers;
  }

  // Each yielded value defined in the region with no read of what it replaces after it is
  // written straight into the carried register (its own reads then read that register), and so,
  // on the same condition, is the in-out operand it updates, and that one's, ...
  // `replaced[i]` is the value whose register carried[i] is on entry (null: none).
  void preferCarried(generate::YieldOp yield, ArrayRef<Value> carried, Block &body,
                     ArrayRef<Value> replaced) {
    for (auto [i, yielded] : llvm::enumerate(yield.getValues())) {
      for (Value value = yielded; value; value = inOutSource(value)) {
        Operation *definition = value.getDefiningOp();
        if (!definition || definition->getBlock() != &body || preferred_.count(value))
          break;
        if (replaced[i] && usedAfter(replaced[i], definition, body))
          break;
        preferred_[value] = {carried[i], replaced[i]};
      }
    }
  }

  // The operand a record's in-out result updates (null when `value` is none).
  static Value inOutSource(Value value) {
    auto result = llvm::dyn_cast<OpResult>(value);
    Operation *op = result ? result.getOwner() : nullptr;
    const dspec::KindSpec *spec =
        op && op->getDialect() && op->getDialect()->getNamespace() == "generate"
            ? dspec::findKind(std::string(op->getName().stripDialect()))
            : nullptr;
    if (!spec)
      return {};
    const Groups groups = groupsOf(*spec, op);
    size_t operandGroup = 0, resultGroup = 0;
    unsigned operand = 0, produced = 0;
    for (size_t p = 0; p < spec->paramCount; ++p) {
      const dspec::ParamRole role = spec->params[p].role;
      const unsigned source = operand;
      int32_t operands = 0;
      if (role == dspec::ParamRole::input || role == dspec::ParamRole::inout)
        operand += operands = groups.operands[operandGroup++];
      if (role != dspec::ParamRole::inout && role != dspec::ParamRole::result)
        continue;
      const int32_t count = groups.results[resultGroup++];
      if (role == dspec::ParamRole::inout && count == 1 && produced == result.getResultNumber())
        return operands == 1 ? op->getOperand(source) : Value();
      produced += count;
    }
    return {};
  }

  // The closing until or exit_if reads its condition after the carried values' sets: one they
  // overwrite is copied to its own register first.
  LogicalResult keepCondition(Operation &closing, generate::YieldOp yield,
                              ArrayRef<Value> carried) {
    Value cond = closing.getOperand(0);
    FailureOr<Value> ref = reference(cond, &closing);
    if (failed(ref))
      return failure();
    for (auto [i, value] : llvm::enumerate(yield.getValues()))
      if (*ref == carried[i] && refs_.lookup(value) != carried[i]) {
        Value copy = newRegister(cond.getType(), "condition");
        decode::SetOp::create(builder_, closing.getLoc(), *ref, copy);
        assign(cond, copy);
        break;
      }
    return success();
  }

  LogicalResult writeCarried(generate::YieldOp yield, ArrayRef<Value> carried) {
    for (auto [i, value] : llvm::enumerate(yield.getValues())) {
      FailureOr<Value> ref = reference(value, yield);
      if (failed(ref))
        return failure();
      if (*ref == carried[i])
        continue;
      if (llvm::is_contained(carried, *ref))
        return yield.emitOpError("not supported yet: carried values that trade places");
      if (!isScalar(value.getType()))
        return yield.emitOpError() << "yields a " << value.getType()
                                   << " that is not written in place: set copies scalars only";
      decode::SetOp::create(builder_, yield.getLoc(), *ref, carried[i]);
    }
    return success();
  }

  // ---- Structured ops ---------------------------------------------------------------------

  // An exit_if inside an if of a loop's body would leave it before the sets at the body's end.
  LogicalResult checkExits(Operation *loop, Block &body) {
    WalkResult walk = body.walk([&](generate::ExitIfOp exit) {
      if (exit->getBlock() != &body && exit->getParentOfType<generate::BlockLoopOp>() == loop)
        return WalkResult::interrupt();
      return WalkResult::advance();
    });
    if (walk.wasInterrupted() && !body.getArguments().drop_front(1).empty())
      return loop->emitOpError("not supported yet: an exit_if nested in an if of a loop that "
                               "carries values");
    return success();
  }

  // An exit_if in a loop's body before its end leaves with the carried registers as they are:
  // each must hold the value the body yields, written in place by then, or, when that value
  // comes later, still the iteration's own.
  LogicalResult checkEarlyExit(Operation *exit, generate::YieldOp yield, Block &body,
                               ArrayRef<Value> carried) {
    for (auto [i, value] : llvm::enumerate(yield.getValues())) {
      Value ref = refs_.lookup(value);
      if (ref == carried[i])
        continue;
      // Written in this iteration: a value of the body (not its argument) that the register held.
      auto writtenHere = [&](Value held) {
        const bool argument = llvm::isa<BlockArgument>(held) && held.getParentBlock() == &body;
        return !argument && body.getParent()->isAncestor(held.getParentRegion());
      };
      const bool untouched = !ref && llvm::none_of(occupants_[carried[i]], writtenHere);
      if (!untouched)
        return exit->emitOpError() << "not supported yet: leaving the loop when its carried value "
                                   << i << " is neither the iteration's nor written in place";
    }
    return success();
  }

  Region &openRegion(Operation *record, unsigned index) {
    Region &region = record->getRegion(index);
    region.emplaceBlock();
    return region;
  }

  // A loop's body: its leading arguments (index, ...) and carried values get their registers.
  LogicalResult lowerLoopBody(Operation *record, Block &body, ArrayRef<Value> leadingRegisters,
                              ArrayRef<Value> carried) {
    const unsigned leading = leadingRegisters.size();
    for (unsigned i = 0; i < leading; ++i)
      assign(body.getArgument(i), leadingRegisters[i]);
    for (auto [i, reg] : llvm::enumerate(carried))
      assign(body.getArgument(leading + i), reg);
    SmallVector<Value> replaced(body.getArguments().drop_front(leading));
    return lowerBody(record, 0, body, carried, replaced);
  }

  LogicalResult lowerBody(Operation *record, unsigned region, Block &body, ArrayRef<Value> carried,
                          ArrayRef<Value> replaced) {
    preferCarried(llvm::cast<generate::YieldOp>(body.getTerminator()), carried, body, replaced);
    OpBuilder::InsertionGuard guard(builder_);
    builder_.setInsertionPointToStart(&openRegion(record, region).front());
    return lowerOps(body, carried);
  }

  LogicalResult lowerBlockLoop(generate::BlockLoopOp loop) {
    FailureOr<Value> count = reference(loop.getCount(), loop);
    if (failed(count) || failed(checkExits(loop, loop.getBody().front())))
      return failure();
    FailureOr<SmallVector<Value>> carried = carriedRegisters(loop, loop.getInits(), 1);
    if (failed(carried))
      return failure();
    Value index = newRegister(builder_.getI64Type(), nameHint(loop, "arg_names", 0, "index"));
    auto record = decode::BlockLoopOp::create(builder_, loop.getLoc(), *count, index);
    copyName(loop, record);
    for (auto [result, reg] : llvm::zip(loop.getResults(), *carried))
      assign(result, reg);
    return lowerLoopBody(record, loop.getBody().front(), {index}, *carried);
  }

  LogicalResult lowerDenoiseLoop(generate::DenoiseLoopOp loop) {
    Block &body = loop.getBody().front();
    if (!llvm::isa_and_nonnull<generate::UntilOp>(body.getTerminator()->getPrevNode()))
      return loop.emitOpError("body does not end with an until");
    FailureOr<Value> cap = reference(loop.getCap(), loop);
    FailureOr<Value> bound = reference(loop.getBound(), loop);
    FailureOr<Value> base = reference(loop.getBase(), loop);
    if (failed(cap) || failed(bound) || failed(base))
      return failure();
    FailureOr<SmallVector<Value>> carried = carriedRegisters(loop, loop.getInits(), 2);
    if (failed(carried))
      return failure();
    Value index = newRegister(builder_.getI64Type(), nameHint(loop, "arg_names", 0, "index"));
    Value global = newRegister(builder_.getI64Type(), nameHint(loop, "arg_names", 1, "global"));
    Value ran = newRegister(builder_.getI64Type(), nameHint(loop, "names", 0, "ran"));
    auto record = decode::DenoiseLoopOp::create(builder_, loop.getLoc(), *cap, *bound, *base,
                                                loop.getUnrollAttr(), index, global, ran);
    copyName(loop, record);
    assign(loop.getRan(), ran);
    for (auto [result, reg] : llvm::zip(loop.getResults(), *carried))
      assign(result, reg);
    return lowerLoopBody(record, body, {index, global}, *carried);
  }

  // An if's result i takes the register of a value a branch yields unchanged from outside the if
  // when nothing reads that value after the if (that branch then needs no set), else its own.
  Value ifResultRegister(generate::IfOp branch, unsigned i, ArrayRef<Value> taken,
                         Value &replaced) {
    Value result = branch.getResult(i);
    if (auto preferred = preferred_.find(result); preferred != preferred_.end()) {
      replaced = preferred->second.replaced;
      return preferred->second.reg;
    }
    for (Region *region : {&branch.getThenRegion(), &branch.getElseRegion()}) {
      if (region->empty())
        continue;
      Value yielded = region->front().getTerminator()->getOperand(i);
      Value ref = refs_.lookup(yielded);
      if (ref && ref.getDefiningOp<decode::RegisterOp>() &&
          !branch->isAncestor(yielded.getParentRegion()->getParentOp()) &&
          !llvm::is_contained(taken, ref) && overwritableAt(yielded, branch)) {
        replaced = yielded;
        reserveForCarrying(ref);
        return ref;
      }
    }
    return newRegister(result.getType(), nameHint(branch, "names", i, "result"));
  }

  LogicalResult lowerIf(generate::IfOp branch) {
    FailureOr<Value> cond = reference(branch.getCond(), branch);
    if (failed(cond))
      return failure();
    SmallVector<Value> results, replaced;
    for (unsigned i = 0; i < branch.getNumResults(); ++i) {
      Value old;
      results.push_back(ifResultRegister(branch, i, results, old));
      replaced.push_back(old);
      assign(branch.getResult(i), results.back());
    }
    auto record = decode::IfOp::create(builder_, branch.getLoc(), *cond);
    copyName(branch, record);
    if (failed(lowerBody(record, 0, branch.getThenRegion().front(), results, replaced)))
      return failure();
    if (branch.getElseRegion().empty())
      return success();
    if (failed(lowerBody(record, 1, branch.getElseRegion().front(), results, replaced)))
      return failure();
    // An else with no record left (it passed its values on in place) is no `else`.
    if (record.getElseRegion().front().empty())
      record.getElseRegion().getBlocks().clear();
    return success();
  }

  static void copyName(Operation *from, Operation *to) {
    if (auto name = from->getAttrOfType<StringAttr>("name"))
      to->setAttr("name", name);
  }

  MLIRContext *context_;
  OpBuilder builder_; // records, in order
  OpBuilder values_;  // registers, constants and facts, at the function's start
  DenseMap<Value, Value> refs_;
  DenseMap<Value, Preference> preferred_;
  DenseMap<Value, SmallVector<Value>> occupants_; // a register → the values it has held
  llvm::StringMap<SmallVector<Value>> byHint_;    // the registers made for each name
  DenseSet<Value> shareable_;                     // plain registers, which values may share
  llvm::StringSet<> taken_;
};

} // namespace

LogicalResult lowerToDecodeProgram(func::FuncOp function) {
  FailureOr<OwningOpRef<func::FuncOp>> lowered = Lowering(function).run(function);
  if (failed(lowered))
    return failure();
  function.getBody().takeBody((**lowered).getBody());
  return success();
}

} // namespace dlm::passes
