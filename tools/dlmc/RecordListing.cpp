#include "tools/dlmc/RecordListing.h"

#include "compiler/programs/DecodeModuleImport.h"
#include "compiler/programs/DecodePrograms.h"
#include "runtime/model/KernelProgram.h"
#include "runtime/program/DecodeProgram.h"

#include "llvm/Support/Format.h"

#include <algorithm>
#include <variant>

namespace dlm::dlmc {

// One line per kernel launch, in program order:
//   7  layers.0.q_proj  norm_linear (2) -> 3 @0+128  weight=layers.0.q norm_weight=... eps=1e-05
// "(operands) -> result @offset+width" are value slots and their place in the per-token-row plan.
void printKernelRecords(llvm::raw_ostream &os, const artifact::KernelTarget &target) {
  namespace kp = spec::kernels;
  int64_t rowElements = 0;
  for (size_t index = 0; index < target.kernels.size(); ++index) {
    const artifact::Kernel &k = target.kernels[index];
    auto text = [&](std::string_view key) {
      auto it = k.parameters.find(key);
      return it == k.parameters.end() ? std::string() : artifact::attributeValueText(it->second);
    };
    os << "  " << llvm::format_decimal(index, 3) << "  " << k.name << "  " << k.kind << " ("
       << text(kp::kOperands) << ")";
    if (!text(kp::kResult).empty()) {
      os << " -> " << text(kp::kResult);
      if (!text(kp::kOffset).empty()) {
        os << " @" << text(kp::kOffset) << "+" << text(kp::kWidth);
        auto offset = k.parameters.find(kp::kOffset), width = k.parameters.find(kp::kWidth);
        if (std::holds_alternative<int64_t>(offset->second) && width != k.parameters.end() &&
            std::holds_alternative<int64_t>(width->second))
          rowElements = std::max(rowElements, std::get<int64_t>(offset->second) +
                                                  std::get<int64_t>(width->second));
      } else {
        os << " (output, width " << text(kp::kWidth) << ")";
      }
    }
    for (const auto &[key, value] : k.parameters) {
      if (key == kp::kOperands || key == kp::kResult || key == kp::kOffset || key == kp::kWidth ||
          key == kp::kLayer)
        continue;
      os << "  " << key << "=" << artifact::attributeValueText(value);
    }
    os << "\n";
  }
  os << "  workspace: " << rowElements << " floats per token\n";
}

namespace {

void printKnobs(llvm::raw_ostream &os, const artifact::Attributes &knobs) {
  bool first = true;
  for (const auto &[key, value] : knobs) {
    os << (first ? "" : " ") << key << "=" << artifact::attributeValueText(value);
    first = false;
  }
}

} // namespace

void printDecodePrograms(llvm::raw_ostream &os,
                         const std::vector<artifact::DecodingProgram> &programs) {
  for (size_t i = 0; i < programs.size(); ++i) {
    const artifact::DecodingProgram &program = programs[i];
    os << (i ? "\n" : "") << "# decode program " << program.policy
       << (i == 0 ? " (the default)" : "") << ", " << program.ops.size() << " records";
    if (!program.knobs.empty()) {
      os << "; knobs stored by dlmc: ";
      printKnobs(os, program.knobs);
    }
    os << "\n" << program::printDecodeProgram({program.policy, program.ops});
  }
}

namespace {

// Each program as a module `moduleOf` gives, after a line naming it and the knobs dlmc stored.
template <typename ModuleOf>
Status printModules(llvm::raw_ostream &os, const std::vector<artifact::DecodingProgram> &programs,
                    ModuleOf moduleOf) {
  mlir::MLIRContext context;
  for (size_t i = 0; i < programs.size(); ++i) {
    StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> module = moduleOf(context, programs[i]);
    if (!module) {
      llvm::errs() << "dlmc compile: " << module.status().message() << "\n";
      return module.status();
    }
    os << (i ? "\n" : "") << "// decode program " << programs[i].policy
       << (i == 0 ? " (the default)" : "");
    // The knobs' declared defaults are in the ops; dlmc's own values replace them at load.
    if (!programs[i].knobs.empty()) {
      os << "; knobs stored by dlmc: ";
      printKnobs(os, programs[i].knobs);
    }
    os << "\n";
    (*module)->print(os);
    os << "\n";
  }
  return Status::ok();
}

} // namespace

Status printDecodeModules(llvm::raw_ostream &os,
                          const std::vector<artifact::DecodingProgram> &programs) {
  return printModules(os, programs,
                      [](mlir::MLIRContext &context, const artifact::DecodingProgram &program) {
                        return programs::importDecodeRecords(context, program.policy,
                                                             program.ops);
                      });
}

Status printGenerateModules(llvm::raw_ostream &os,
                            const std::vector<artifact::DecodingProgram> &programs) {
  return printModules(os, programs,
                      [](mlir::MLIRContext &context, const artifact::DecodingProgram &program) {
                        return programs::generateModule(context, program.policy);
                      });
}

void printDecodeProgramSummary(llvm::raw_ostream &os,
                               const std::vector<artifact::DecodingProgram> &programs) {
  if (programs.empty()) {
    os << "decode programs: none (written before schema 1.2: recompile with dlmc compile)\n";
    return;
  }
  os << "decode programs: " << programs.size() << " (dlmc compile --emit=decode lists them)\n";
  for (size_t i = 0; i < programs.size(); ++i) {
    os << "  " << programs[i].policy << (i == 0 ? " (default)" : "") << ": "
       << programs[i].ops.size() << " records";
    if (!programs[i].knobs.empty()) {
      os << "; ";
      printKnobs(os, programs[i].knobs);
    }
    os << "\n";
  }
}

} // namespace dlm::dlmc
