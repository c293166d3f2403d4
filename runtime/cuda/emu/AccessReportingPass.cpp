// An LLVM pass plugin for kernels compiled for the emulated device's access checks
// (EmuAccessChecks.h): before every load, store, atomic and memory intrinsic (memcpy, memmove,
// memset, and AddressSanitizer's calls that replace them) of a kernel it inserts a call
//
//   dlm_emu_report_access(address, bytes, kind)
//   // kind: 0 read, 1 write, 2 atomic read-modify-write, 3 atomic load, 4 atomic store
//
// which DlmCudaEmu exports. Clang loads it with -fpass-plugin; it runs at the end of the
// optimisation pipeline, so only the accesses that survive optimisation are reported, as a GPU
// makes them. Not reported: the kernel's own stack (locals), and globals that are not shared
// memory (constants, the emulation's own thread-local state): neither is device or shared memory.
// Clang's sanitizer coverage has load and store callbacks but none for memory intrinsics, which
// is how a struct is copied into shared memory.
//
// Built by CMake with the host compiler against LLVM's headers, without the project's flags (a
// plugin runs inside clang, which has no sanitizers), and never linked into the project.
#include "llvm/Analysis/ValueTracking.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/InstIterator.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/IntrinsicInst.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/PassManager.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Plugins/PassPlugin.h"

using namespace llvm;

namespace {

// EmuAccessChecks.h's AccessKind.
enum AccessKind : uint32_t {
  kRead = 0,
  kWrite = 1,
  kAtomic = 2,
  kAtomicRead = 3,
  kAtomicWrite = 4
};

struct Access {
  Instruction *before;
  Value *address;
  Value *bytes;
  AccessKind kind;
};

// Whether an access through `address` can touch device or shared memory: not when it is
// provably the function's stack or a global other than a thread-local one defined here (shared
// memory is thread-local in the emulation).
bool mayBeDeviceOrShared(Value *address) {
  const Value *object = getUnderlyingObject(address);
  if (isa<AllocaInst>(object))
    return false;
  if (const auto *global = dyn_cast<GlobalVariable>(object))
    return global->isThreadLocal() && !global->isDeclaration();
  return true;
}

class ReportAccesses : public PassInfoMixin<ReportAccesses> {
public:
  PreservedAnalyses run(Module &module, ModuleAnalysisManager &) {
    LLVMContext &context = module.getContext();
    const DataLayout &layout = module.getDataLayout();
    Type *pointer = PointerType::getUnqual(context);
    Type *int64 = Type::getInt64Ty(context);
    Type *int32 = Type::getInt32Ty(context);
    AttributeList attributes = AttributeList().addFnAttribute(context, Attribute::NoUnwind);
    FunctionCallee report = module.getOrInsertFunction(
        "dlm_emu_report_access", attributes, Type::getVoidTy(context), pointer, int64, int32);
    bool changed = false;
    for (Function &function : module) {
      if (function.isDeclaration() || function.hasFnAttribute(Attribute::NoSanitizeCoverage))
        continue;
      std::vector<Access> accesses;
      for (Instruction &instruction : instructions(function))
        collect(instruction, layout, accesses);
      for (const Access &access : accesses) {
        if (!mayBeDeviceOrShared(access.address))
          continue;
        IRBuilder<> builder(access.before);
        Value *address = builder.CreatePointerCast(access.address, pointer);
        Value *bytes = builder.CreateZExtOrTrunc(access.bytes, int64);
        CallInst *call =
            builder.CreateCall(report, {address, bytes, ConstantInt::get(int32, access.kind)});
        // Not an access of the kernel's: no other sanitizer instruments it.
        call->setMetadata(LLVMContext::MD_nosanitize, MDNode::get(context, {}));
        changed = true;
      }
    }
    return changed ? PreservedAnalyses::none() : PreservedAnalyses::all();
  }

private:
  static Value *sizeOf(Type *type, const DataLayout &layout) {
    return ConstantInt::get(Type::getInt64Ty(type->getContext()),
                            layout.getTypeStoreSize(type).getFixedValue());
  }

  static void collect(Instruction &instruction, const DataLayout &layout,
                      std::vector<Access> &accesses) {
    if (instruction.hasMetadata(LLVMContext::MD_nosanitize)) // a sanitizer's own accesses
      return;
    if (auto *load = dyn_cast<LoadInst>(&instruction)) {
      if (!load->getType()->isSized() || load->getType()->isScalableTy())
        return;
      accesses.push_back({load, load->getPointerOperand(), sizeOf(load->getType(), layout),
                          load->isAtomic() ? kAtomicRead : kRead});
    } else if (auto *store = dyn_cast<StoreInst>(&instruction)) {
      Type *type = store->getValueOperand()->getType();
      if (type->isScalableTy())
        return;
      accesses.push_back({store, store->getPointerOperand(), sizeOf(type, layout),
                          store->isAtomic() ? kAtomicWrite : kWrite});
    } else if (auto *rmw = dyn_cast<AtomicRMWInst>(&instruction)) {
      accesses.push_back(
          {rmw, rmw->getPointerOperand(), sizeOf(rmw->getValOperand()->getType(), layout),
           kAtomic});
    } else if (auto *exchange = dyn_cast<AtomicCmpXchgInst>(&instruction)) {
      accesses.push_back({exchange, exchange->getPointerOperand(),
                          sizeOf(exchange->getNewValOperand()->getType(), layout), kAtomic});
    } else if (auto *transfer = dyn_cast<MemTransferInst>(&instruction)) {
      accesses.push_back({transfer, transfer->getSource(), transfer->getLength(), kRead});
      accesses.push_back({transfer, transfer->getDest(), transfer->getLength(), kWrite});
    } else if (auto *set = dyn_cast<MemSetInst>(&instruction)) {
      accesses.push_back({set, set->getDest(), set->getLength(), kWrite});
    } else if (auto *call = dyn_cast<CallInst>(&instruction)) {
      // AddressSanitizer's replacements of the memory intrinsics, should it have run first.
      const Function *callee = call->getCalledFunction();
      if (!callee || call->arg_size() != 3)
        return;
      const StringRef name = callee->getName();
      if (name == "__asan_memcpy" || name == "__asan_memmove") {
        accesses.push_back({call, call->getArgOperand(1), call->getArgOperand(2), kRead});
        accesses.push_back({call, call->getArgOperand(0), call->getArgOperand(2), kWrite});
      } else if (name == "__asan_memset") {
        accesses.push_back({call, call->getArgOperand(0), call->getArgOperand(2), kWrite});
      }
    }
  }
};

} // namespace

extern "C" LLVM_ATTRIBUTE_WEAK PassPluginLibraryInfo llvmGetPassPluginInfo() {
  return {LLVM_PLUGIN_API_VERSION, "DlmEmuAccessReporting", "1", [](PassBuilder &builder) {
            builder.registerOptimizerLastEPCallback(
                [](ModulePassManager &passes, OptimizationLevel, ThinOrFullLTOPhase) {
                  passes.addPass(ReportAccesses());
                });
          }};
}
