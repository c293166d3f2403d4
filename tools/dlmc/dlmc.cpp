// dlmc: the dlm compiler driver.
//   dlmc import <checkpoint> [--emit=dlm]        print the model as dlm IR
//   dlmc compile <checkpoint> -o model.dlm ...   write an artifact
//   dlmc inspect model.dlm                       list an artifact's contents
#include "tools/dlmc/Commands.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::SubCommand importCommand("import", "Print a checkpoint as dlm IR");
  cl::SubCommand compileCommand("compile", "Compile a checkpoint into a .dlm artifact");
  cl::SubCommand inspectCommand("inspect", "List the contents of a .dlm artifact");

  cl::opt<std::string> importInput(cl::Positional, cl::desc("<checkpoint directory>"),
                                   cl::Required, cl::sub(importCommand));
  cl::opt<std::string> emit(
      "emit", cl::desc("What to print: dlm (the model IR) | onnx (model.onnx after phase 1)"),
                            cl::init("dlm"), cl::sub(importCommand));

  cl::opt<std::string> compileInput(cl::Positional, cl::desc("<checkpoint directory>"),
                                    cl::Required, cl::sub(compileCommand));
  cl::opt<std::string> output("o", cl::desc("Output artifact"), cl::value_desc("model.dlm"),
                              cl::sub(compileCommand));
  cl::opt<std::string> compileEmit(
      "emit", cl::desc("Stop at a stage: dlm (print the program) | artifact (write -o)"),
      cl::init("artifact"), cl::sub(compileCommand));
  cl::opt<std::string> target("target", cl::desc("Kernels to embed: cpu | cuda (sm_80 + sm_90 cubins via NVRTC) | all"),
                              cl::init("cpu"), cl::sub(compileCommand));
  cl::opt<std::string> policy("policy",
                              cl::desc("Decoding policy: low-confidence | entropy-bound"),
                              cl::init("low-confidence"), cl::sub(compileCommand));
  cl::opt<int64_t> genLength("gen-length", cl::desc("Default tokens to generate"), cl::init(64),
                             cl::sub(compileCommand));
  cl::opt<int64_t> blockLength("block-length", cl::desc("Default block (canvas) length"),
                               cl::init(32), cl::sub(compileCommand));
  cl::opt<int64_t> steps("steps", cl::desc("Default denoise steps over all blocks"),
                         cl::init(64), cl::sub(compileCommand));
  cl::opt<double> threshold("threshold",
                            cl::desc("Default confidence threshold (0 = fixed-count unmasking)"),
                            cl::init(0.0), cl::sub(compileCommand));
  cl::opt<double> temperature("temperature", cl::desc("Default sampling temperature"),
                              cl::init(0.0), cl::sub(compileCommand));

  cl::opt<std::string> inspectInput(cl::Positional, cl::desc("<model.dlm>"), cl::Required,
                                    cl::sub(inspectCommand));

  cl::ParseCommandLineOptions(argc, argv, "dlm compiler\n");

  if (importCommand)
    return dlm::dlmc::runImport(importInput, emit);
  if (compileCommand) {
    dlm::dlmc::CompileOptions options;
    options.checkpoint = compileInput;
    options.output = output;
    options.emit = compileEmit;
    options.target = target;
    options.policy = policy;
    options.genLength = genLength;
    options.blockLength = blockLength;
    options.steps = steps;
    options.threshold = threshold;
    options.temperature = temperature;
    return dlm::dlmc::runCompile(options);
  }
  if (inspectCommand)
    return dlm::dlmc::runInspect(inspectInput);
  llvm::errs() << "dlmc: give a command: import, compile or inspect (see dlmc --help)\n";
  return 2;
}
