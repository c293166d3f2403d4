#include "compiler/programs/DecodePrograms.h"

#include "compiler/dialects/decode/DecodeDialect.h"
#include "compiler/dialects/generate/GenerateDialect.h"
#include "compiler/passes/DecodeLowering.h"
#include "compiler/programs/DecodeModuleExport.h"
#include "compiler/programs/policies/Policies.h"
#include "runtime/program/DecodeProgram.h"
#include "runtime/program/DecodeProgramSet.h"
#include "runtime/program/DecodeProgramSpec.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include <iterator>

namespace dlm::programs {
namespace {

struct Policy {
  const char *name;
  bool byDefault; // embedded without --policy
  void (*build)(mlir::ModuleOp); // its builder (policies/Policies.h)
};

// The default ones first, in dlmc's default order.
constexpr Policy kPolicies[] = {
    {"low-confidence", true, buildLowConfidence},
    {"entropy-bound", true, buildEntropyBound},
    {"diffusion-gemma", false, buildDiffusionGemma},
    {"autoregressive", false, buildAutoregressive},
    {"introspective-strided", false, buildIntrospectiveStrided},
    {"dflash", false, buildDFlash},
    {"block-refinement", false, buildBlockRefinement},
};

const Policy *findPolicy(std::string_view name) {
  for (const Policy &policy : kPolicies)
    if (name == policy.name)
      return &policy;
  return nullptr;
}

// Runs `step` on `module`, with the first diagnostic it emits as the error.
template <typename Step>
Status diagnosed(mlir::MLIRContext &context, std::string_view policy, const char *what,
                 Step step) {
  std::string diagnostic;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
    if (diagnostic.empty())
      diagnostic = d.str();
    return mlir::success();
  });
  if (mlir::failed(step()))
    return Status::error("the " + std::string(policy) + " decode program " + what + ": " +
                         diagnostic);
  return Status::ok();
}

} // namespace

std::vector<std::string> decodeProgramPolicies() {
  std::vector<std::string> names;
  for (const Policy &policy : kPolicies)
    names.emplace_back(policy.name);
  return names;
}

std::vector<std::string> defaultDecodeProgramPolicies() {
  std::vector<std::string> names;
  for (const Policy &policy : kPolicies)
    if (policy.byDefault)
      names.emplace_back(policy.name);
  return names;
}

bool decodesLeftToRight(std::string_view policy) {
  return policy == "autoregressive" || policy == "introspective-strided" || policy == "dflash";
}

bool decidesOnTheHost(std::string_view policy) {
  return decodesLeftToRight(policy) || policy == "block-refinement";
}

StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> generateModule(mlir::MLIRContext &context,
                                                            std::string_view policy) {
  const Policy *found = findPolicy(policy);
  if (!found)
    return Status::error("unknown policy '" + std::string(policy) + "' (expected " +
                         program::oneOf(decodeProgramPolicies()) + ")");
  context.loadDialect<generate::GenerateDialect, decode::DecodeDialect, mlir::func::FuncDialect>();
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::ModuleOp::create(mlir::UnknownLoc::get(&context));
  found->build(*module);
  DLM_RETURN_IF_ERROR(
      diagnosed(context, policy, "is not valid", [&] { return mlir::verify(*module); }));
  return module;
}

StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> decodeModule(mlir::MLIRContext &context,
                                                          std::string_view policy) {
  StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> module = generateModule(context, policy);
  if (!module)
    return module.status();
  auto function = *(*module)->getOps<mlir::func::FuncOp>().begin();
  DLM_RETURN_IF_ERROR(diagnosed(context, policy, "does not lower", [&] {
    return mlir::succeeded(passes::lowerToDecodeProgram(function)) ? mlir::verify(**module)
                                                                  : mlir::failure();
  }));
  return module;
}

StatusOr<artifact::DecodingProgram> buildDecodeProgram(std::string_view policy,
                                                       const artifact::Attributes &knobs,
                                                       int64_t unroll) {
  mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
  StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> module = decodeModule(context, policy);
  if (!module)
    return module.status();
  mlir::Builder builder(&context);
  (*module)->walk([&](decode::DenoiseLoopOp loop) {
    loop.setUnrollAttr(builder.getI64IntegerAttr(unroll));
  });
  auto function = *(*module)->getOps<mlir::func::FuncOp>().begin();
  StatusOr<std::vector<artifact::DecodeOp>> records = exportDecodeRecords(function);
  if (!records)
    return records.status();
  artifact::DecodingProgram result;
  result.policy = function.getName().str();
  result.ops = std::move(*records);
  for (const artifact::DecodeOp &op : result.ops)
    if (op.kind == spec::decode::kKindKnob && knobs.count(op.name))
      result.knobs[op.name] = knobs.at(op.name);
  StatusOr<program::DecodeProgram> loaded = program::DecodeProgram::load(result.ops, result.knobs);
  if (!loaded)
    return Status::error("the " + std::string(policy) + " decode program: " +
                         loaded.status().message());
  return result;
}

} // namespace dlm::programs
