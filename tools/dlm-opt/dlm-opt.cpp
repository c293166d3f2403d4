// dlm-opt: mlir-opt with the dlm, decode and generate dialects and dlm's passes, for tests and for
// inspecting IR.
#include "compiler/dialects/decode/DecodeDialect.h"
#include "compiler/dialects/dlm/DlmDialect.h"
#include "compiler/dialects/generate/GenerateDialect.h"
#include "compiler/passes/Passes.h"
#include "compiler/pipeline/CompilePipeline.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<dlm::ir::DlmDialect, dlm::decode::DecodeDialect, dlm::generate::GenerateDialect,
                  mlir::func::FuncDialect,
                  mlir::arith::ArithDialect, mlir::scf::SCFDialect, mlir::tensor::TensorDialect>();
  dlm::registerDlmPasses();
  dlm::pipeline::registerCompilePipeline();
  // Upstream passes the dlm pipeline uses: canonicalize, cse, inline, symbol-dce, ...
  mlir::registerTransformsPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "dlm optimizer driver\n", registry));
}
