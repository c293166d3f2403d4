// dlmc import / compile: flags in, compiler/pipeline/ does the work, the stage asked for out.
#include "tools/dlmc/Commands.h"
#include "tools/dlmc/RecordListing.h"

#include "compiler/pipeline/Compilation.h"
#include "importer/model/Checkpoint.h"
#include "importer/onnx/OnnxImport.h"
#include "runtime/artifact/ArtifactWriter.h"
#include "runtime/artifact/ExternalParameters.h"
#include "runtime/artifact/ParameterFilePath.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

namespace dlm::dlmc {
namespace {

std::string parameterFilePath(const CompileCommand &command) {
  return command.parameterFile.empty() ? artifact::defaultParameterFilePath(command.output)
                                       : command.parameterFile;
}

// --random-parameters: the artifact describes generated weights; dlm-params writes their file.
Status writeWithRandomParameters(const CompileCommand &command,
                                 const artifact::ArtifactContents &contents) {
  DLM_RETURN_IF_ERROR(artifact::writeArtifactWithRandomParameters(
      command.output, parameterFilePath(command), contents, *command.randomSeed));
  llvm::outs() << "dlmc compile: weights: random (seed " << *command.randomSeed
               << "); write the parameter file with: dlm-params random " << command.output
               << "\n";
  return Status::ok();
}

// --parameters external: the artifact and its parameter file, saying what became of the latter.
Status writeWithParameterFile(const CompileCommand &command,
                              const artifact::ArtifactContents &contents) {
  if (command.randomSeed)
    return writeWithRandomParameters(command, contents);
  const std::string parameterPath = parameterFilePath(command);
  StatusOr<artifact::ParameterFileOutcome> outcome =
      artifact::writeArtifactWithParameterFile(command.output, parameterPath, contents);
  if (!outcome)
    return outcome.status();
  llvm::raw_ostream &os = llvm::outs();
  os << "dlmc compile: parameter file " << parameterPath;
  if (!outcome->written)
    os << " already holds these " << outcome->weightCount << " weights: not rewritten\n";
  else if (!outcome->rewriteReason.empty())
    os << " did not hold these weights (" << outcome->rewriteReason << "): rewritten, "
       << outcome->weightCount << " weights, " << outcome->fileSize << " bytes\n";
  else
    os << ": wrote " << outcome->weightCount << " weights, " << outcome->fileSize << " bytes\n";
  return Status::ok();
}

} // namespace

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
      emit != "generate" && emit != "decode" && emit != "decode-records")
    return fail("unknown --emit=" + emit +
                " (expected dlm, kernels, generate, decode, decode-records, cuda or artifact)");
  if (emit == "artifact" && command.output.empty())
    return fail("give the artifact path with -o");
  if (emit == "cuda" && command.options.target == "cpu")
    return fail("--emit=cuda needs --target cuda or all");
  if (command.parameters != "embedded" && command.parameters != "external")
    return fail("unknown --parameters " + command.parameters + " (expected embedded or external)");
  if (!command.parameterFile.empty() && command.parameters != "external")
    return fail("--parameter-file needs --parameters external");
  if (command.randomSeed && command.parameters != "external")
    return fail("--random-parameters needs --parameters external (the generated weights go to a "
                "parameter file that dlm-params random writes)");
  if (command.parameters == "external" && emit != "artifact")
    return fail("--parameters external writes an artifact (-o); --emit=" + emit + " writes none");

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
  if (emit == "generate")
    return printGenerateModules(llvm::outs(), contents.decodePrograms).isOk() ? 0 : 1;
  if (emit == "decode")
    return printDecodeModules(llvm::outs(), contents.decodePrograms).isOk() ? 0 : 1;
  if (emit == "decode-records") {
    printDecodePrograms(llvm::outs(), contents.decodePrograms);
    return 0;
  }
  if (emit == "cuda") {
    for (const codegen::KernelSource &kernel : compilation.cudaKernels())
      llvm::outs() << kernel.source << "\n";
    return 0;
  }
  Status written = command.parameters == "external"
                       ? writeWithParameterFile(command, contents)
                       : artifact::writeArtifact(command.output, contents);
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
