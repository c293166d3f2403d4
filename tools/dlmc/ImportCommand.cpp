// dlmc import / compile: flags in, compiler/pipeline/ does the work, the stage asked for out.
#include "tools/dlmc/Commands.h"
#include "tools/dlmc/RecordListing.h"

#include "compiler/pipeline/Compilation.h"
#include "importer/model/Checkpoint.h"
#include "importer/onnx/OnnxImport.h"
#include "runtime/artifact/ArtifactWriter.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

namespace dlm::dlmc {

int runImport(const std::string &checkpointDir, const std::string &emit) {
  if (importer::onnx::isOnnxModelPath(checkpointDir))
    return importer::onnx::runImportCommand(checkpointDir, emit, llvm::outs(), llvm::errs());
  if (emit != "dlm") {
    llvm::errs() << "dlmc import: unknown --emit=" << emit << " (expected: dlm)\n";
    return 2;
  }
  auto checkpoint = importer::importCheckpoint(checkpointDir);
  if (!checkpoint) {
    llvm::errs() << "dlmc import: " << checkpoint.status().message() << "\n";
    return 1;
  }
  mlir::MLIRContext context;
  mlir::OwningOpRef<mlir::ModuleOp> module = pipeline::importForward(context, *checkpoint);
  if (!module) {
    llvm::errs() << "dlmc import: internal error: the imported IR of '" << checkpointDir
                 << "' does not verify\n";
    return 1;
  }
  module->print(llvm::outs());
  llvm::outs() << "\n";
  return 0;
}

int runCompile(const CompileCommand &command) {
  auto fail = [](const std::string &message) {
    llvm::errs() << "dlmc compile: " << message << "\n";
    return 1;
  };
  const std::string &emit = command.emit;
  if (emit != "artifact" && emit != "dlm" && emit != "kernels" && emit != "cuda" &&
      emit != "decode")
    return fail("unknown --emit=" + emit + " (expected dlm, kernels, decode, cuda or artifact)");
  if (emit == "artifact" && command.output.empty())
    return fail("give the artifact path with -o");
  if (emit == "cuda" && command.options.target == "cpu")
    return fail("--emit=cuda needs --target cuda or all");

  StatusOr<std::unique_ptr<pipeline::Compilation>> compiled =
      pipeline::Compilation::run(command.options);
  if (!compiled)
    return fail(compiled.status().message());
  pipeline::Compilation &compilation = **compiled;
  const artifact::ArtifactContents &contents = compilation.contents();
  if (emit == "dlm") {
    compilation.module()->print(llvm::outs());
    llvm::outs() << "\n";
    return 0;
  }
  if (emit == "kernels") {
    // The kernel program every backend executes (the first kernel target).
    llvm::outs() << "kernel program: " << contents.kernelTargets.front().kernels.size()
                 << " records\n";
    printKernelRecords(llvm::outs(), contents.kernelTargets.front());
    return 0;
  }
  if (emit == "decode") {
    printDecodePrograms(llvm::outs(), contents.decodePrograms);
    return 0;
  }
  if (emit == "cuda") {
    for (const codegen::KernelSource &kernel : compilation.cudaKernels())
      llvm::outs() << kernel.source << "\n";
    return 0;
  }
  Status written = artifact::writeArtifact(command.output, contents);
  if (!written.isOk())
    return fail(written.message());
  llvm::outs() << "dlmc compile: wrote " << command.output << "; " << compilation.weightReport()
               << "\n";
  if (!compilation.importReport().empty())
    llvm::outs() << "dlmc compile: the import recognised: "
                 << llvm::join(compilation.importReport(), "; ") << "\n";
  return 0;
}

} // namespace dlm::dlmc
