#include "compiler/pipeline/KernelRecords.h"

#include "compiler/dialects/dlm/DlmDialect.h"
#include "runtime/model/KernelProgram.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace dlm::pipeline {

namespace {
Status appendRecords(mlir::ArrayAttr program, artifact::KernelTarget &target);
} // namespace

void renameWeightsToCanonical(mlir::ModuleOp module,
                              const std::map<std::string, std::string> &canonicalByCheckpoint) {
  mlir::Builder b(module.getContext());
  module.walk([&](ir::WeightOp weight) {
    auto it = canonicalByCheckpoint.find(weight.getName().str());
    if (it != canonicalByCheckpoint.end())
      weight.setNameAttr(b.getStringAttr(it->second));
  });
}

StatusOr<artifact::KernelTarget> kernelProgramTarget(mlir::ModuleOp module) {
  // Every forward function's records, one after the other (each names its function).
  std::vector<std::string> functions{std::string(spec::kernels::kDefaultFunction)};
  if (auto listed = module->getAttrOfType<mlir::ArrayAttr>("dlm.forward_functions")) {
    functions.clear();
    for (mlir::Attribute name : listed)
      functions.push_back(mlir::cast<mlir::StringAttr>(name).str());
  }
  artifact::KernelTarget target;
  target.target = std::string(spec::kernels::kTarget);
  for (const std::string &function : functions) {
    auto forward = module.lookupSymbol<mlir::func::FuncOp>(function);
    auto program =
        forward ? forward->getAttrOfType<mlir::ArrayAttr>("dlm.kernel_program") : nullptr;
    if (!program)
      return Status::error("internal error: @" + function + " has no dlm.kernel_program");
    DLM_RETURN_IF_ERROR(appendRecords(program, target));
  }
  return target;
}

namespace {
Status appendRecords(mlir::ArrayAttr program, artifact::KernelTarget &target) {
  for (mlir::Attribute entry : program) {
    auto record = mlir::cast<mlir::DictionaryAttr>(entry);
    artifact::Kernel kernel;
    for (mlir::NamedAttribute field : record) {
      std::string key = field.getName().str();
      mlir::Attribute value = field.getValue();
      if (auto text = mlir::dyn_cast<mlir::StringAttr>(value)) {
        if (key == "kind")
          kernel.kind = text.str();
        else if (key == "name")
          kernel.name = text.str();
        else
          kernel.parameters[key] = text.str();
      } else if (auto flag = mlir::dyn_cast<mlir::BoolAttr>(value)) {
        kernel.parameters[key] = flag.getValue();
      } else if (auto integer = mlir::dyn_cast<mlir::IntegerAttr>(value)) {
        kernel.parameters[key] = static_cast<int64_t>(integer.getInt());
      } else if (auto real = mlir::dyn_cast<mlir::FloatAttr>(value)) {
        kernel.parameters[key] = real.getValueAsDouble();
      } else if (auto list = mlir::dyn_cast<mlir::DenseI64ArrayAttr>(value)) {
        // Slot lists as text: "4,5".
        std::string joined;
        for (int64_t slot : list.asArrayRef())
          joined += (joined.empty() ? "" : ",") + std::to_string(slot);
        kernel.parameters[key] = joined;
      } else {
        return Status::error("internal error: kernel program field '" + key +
                             "' has no record encoding");
      }
    }
    target.kernels.push_back(std::move(kernel));
  }
  return Status::ok();
}
} // namespace

} // namespace dlm::pipeline
