// dlmc: the dlm compiler driver.
//   dlmc import <checkpoint> [--emit=dlm]        print the model as dlm IR
//   dlmc compile <checkpoint> -o model.dlm ...   write an artifact
//   dlmc inspect model.dlm [--verify]            list an artifact's contents (and check it), or
//                                                a parameter file's
//   dlmc list architectures|policies            what dlmc imports and the decode programs it
//                                                embeds
#include "support/MappedFile.h"
#include "tools/dlmc/Commands.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>

namespace cl = llvm::cl;

namespace {

// The options of `dlmc compile`, and the command they describe.
struct CompileFlags {
  explicit CompileFlags(cl::SubCommand &command) : sub(command) {}

  // The command the flags describe; nullopt (after saying why) when they contradict each other.
  std::optional<dlm::dlmc::CompileCommand> command() const;

  cl::SubCommand &sub;
  cl::opt<std::string> compileInput{cl::Positional, cl::desc("<checkpoint directory>"),
                                    cl::Required, cl::sub(sub)};
  cl::opt<std::string> output{"o", cl::desc("Output artifact"), cl::value_desc("model.dlm"),
                              cl::sub(sub)};
  cl::opt<std::string> parameters{
      "parameters",
      cl::desc("Where the weights go: embedded (in the artifact, the default) | external (in a "
               "parameter file the artifact names, left as it is when it already holds these "
               "weights)"),
      cl::init("embedded"), cl::sub(sub)};
  cl::opt<std::string> parameterFile{
      "parameter-file",
      cl::desc("The parameter file of --parameters external (default: the output with its "
               "extension replaced by .dlmp)"),
      cl::value_desc("model.dlmp"), cl::init(""), cl::sub(sub)};
  cl::opt<int64_t> randomParameters{
      "random-parameters",
      cl::desc("With --parameters external: the weights' contents are generated from this seed "
               "(0 to 2^63-1; the checkpoint only gives their shapes) and the parameter file is "
               "left for dlm-params random to write where it runs: for timing a model whose "
               "weights cannot travel. Outputs on them mean nothing"),
      cl::value_desc("seed"), cl::init(-1), cl::sub(sub)};
  cl::opt<std::string> compileEmit{
      "emit",
      cl::desc(
          "Stop at a stage: dlm (the IR after the pipeline) | kernels (the kernel program's "
          "records) | generate (the decode programs as their policies write them, the generate "
          "dialect) | decode (the same lowered, the decode dialect) | decode-records (the "
          "same as the records the artifact stores) | cuda (the generated CUDA C++, --target "
          "cuda|all) | artifact "
          "(write -o)"),
      cl::init("artifact"), cl::sub(sub)};
  cl::opt<std::string> target{
      "target",
      cl::desc(
          "Kernels to embed: cpu (the kernel program only) | cuda or all (also the CUDA kernels "
          "its records name and the policy's, sm_80 + sm_90 cubins and PTX via NVRTC)"),
      cl::init("cpu"), cl::sub(sub)};
  cl::opt<std::string> weights{
      "weights",
      cl::desc("Storage precision of the projection weights, for every backend: f32 | bf16 | "
               "int8 | fp8 | int4 (int8 and FP8 E4M3 weight-only, one scale per output channel; "
               "int4 weight-only, one f16 scale per --weight-group-size inputs of an output "
               "channel; default: as the checkpoint stores them)"),
      cl::init(""), cl::sub(sub)};
  cl::opt<int64_t> weightGroupSize{
      "weight-group-size",
      cl::desc("With --weights int4: how many consecutive inputs of an output channel share a "
               "scale (a divisor of every projection's input width; default 32)"),
      cl::init(32), cl::sub(sub)};
  cl::opt<bool> quantizeEmbeddings{
      "quantize-embeddings",
      cl::desc("Store the embedding table(s) and the LM head at --weights' precision too (as "
               "llama.cpp's quantized types do; default: as the checkpoint stores them)"),
      cl::init(false), cl::sub(sub)};
  cl::opt<std::string> activations{
      "activations",
      cl::desc("f32 (default) | bf16: on the CPU, round the activations of bf16-stored "
               "projections to bf16 and multiply in bf16 where the CPU has bf16 arithmetic "
               "(AVX-512 BF16, AMX; elsewhere they stay f32)"),
      cl::init(""), cl::sub(sub)};
  cl::opt<std::string> precision{"precision", cl::desc("The same as --weights (older name)"),
                                 cl::init(""), cl::sub(sub)};
  cl::opt<std::string> policy{"policy",
                              cl::desc("Decode programs to embed, comma-separated, the default "
                                       "first: low-confidence, entropy-bound, diffusion-gemma, "
                                       "autoregressive, introspective-strided, dflash, "
                                       "block-refinement "
                                       "(default: "
                                       "the architecture's; dflash,autoregressive with --draft)"),
                              cl::init(""), cl::sub(sub)};
  cl::opt<std::string> draft{
      "draft",
      cl::desc("A DFlash drafter checkpoint (DFlashDraftModel) to put beside the target: the "
               "artifact drafts with it and verifies with the target (speculative decoding)"),
      cl::init(""), cl::sub(sub)};
  cl::opt<int64_t> genLength{"gen-length", cl::desc("Default tokens to generate"), cl::init(64),
                             cl::sub(sub)};
  cl::opt<int64_t> blockLength{
      "block-length",
      cl::desc("Default block (canvas) length (a block-causal model's: the "
               "block_size its config.json states, else 32)"),
      cl::init(32), cl::sub(sub)};
  cl::opt<int64_t> steps{"steps", cl::desc("Default denoise steps over all blocks"), cl::init(64),
                         cl::sub(sub)};
  cl::opt<double> threshold{
      "threshold",
      cl::desc("Default confidence threshold (0 = fixed-count unmasking; else every position at or "
               "above it, at least one per step, whatever --steps says)"),
      cl::init(0.0), cl::sub(sub)};
  cl::opt<int64_t> stepCap{
      "step-cap",
      cl::desc("Default step cap of a threshold block (0 = none, the default: a block runs as "
               "many steps as its confidence needs, as Fast-dLLM, dInfer and SGLang do; with a "
               "cap its last step unmasks everything left)"),
      cl::init(0), cl::sub(sub)};
  cl::opt<double> temperature{"temperature", cl::desc("Default sampling temperature"),
                              cl::init(0.0), cl::sub(sub)};
  cl::list<std::string> knobs{
      "knob",
      cl::desc("Default of a decode-program knob, name=value (repeatable), e.g. "
               "low_threshold=0.62, depth=2, credit=true"),
      cl::sub(sub)};
  cl::opt<int64_t> unroll{
      "unroll",
      cl::desc("Denoising steps per unrolled loop iteration (>= 1; 1 = not unrolled): the device "
               "loop's steps per CUDA graph, checked for convergence once per graph"),
      cl::init(4), cl::sub(sub)};
  cl::opt<bool> smoothing{
      "smoothing",
      cl::desc("Also compile the forward function 'smooth' that iteration smoothing runs (the "
               "low-confidence knob smoothing > 0, dInfer's IterationSmooth); its input rows take "
               "[tokens, vocabulary] floats of workspace"),
      cl::init(false), cl::sub(sub)};
};

std::optional<dlm::dlmc::CompileCommand> CompileFlags::command() const {
  dlm::dlmc::CompileCommand command;
  command.output = output;
  command.emit = compileEmit;
  command.parameters = parameters;
  command.parameterFile = parameterFile;
  if (randomParameters.getNumOccurrences()) {
    if (randomParameters < 0) {
      llvm::errs() << "dlmc compile: --random-parameters takes a seed from 0 to 2^63-1, got "
                   << randomParameters << "\n";
      return std::nullopt;
    }
    command.randomSeed = static_cast<uint64_t>(randomParameters);
  }
  dlm::pipeline::CompileOptions &options = command.options;
  options.checkpoint = compileInput;
  options.target = target;
  if (!precision.empty() && !weights.empty() && precision != weights) {
    llvm::errs() << "dlmc compile: --precision " << precision << " and --weights " << weights
                 << " disagree (--precision is --weights' older name)\n";
    return std::nullopt;
  }
  options.weights = weights.empty() ? std::string(precision) : std::string(weights);
  if (command.randomSeed && options.weights == "int4") {
    // RandomParameters generates whole-byte elements and positive row scales, not 4-bit codes
    // with f16 group scales.
    llvm::errs() << "dlmc compile: not supported yet: --random-parameters with --weights int4\n";
    return std::nullopt;
  }
  options.activations = activations;
  options.weightGroupSize = weightGroupSize;
  options.quantizeEmbeddings = quantizeEmbeddings;
  options.policy = policy;
  options.draft = draft;
  options.genLength = genLength;
  options.blockLength = blockLength;
  options.blockLengthFromCheckpoint = blockLength.getNumOccurrences() == 0;
  options.steps = steps;
  options.threshold = threshold;
  options.stepCap = stepCap;
  options.temperature = temperature;
  options.unroll = unroll;
  options.smoothing = smoothing;
  for (const std::string &knob : knobs) {
    const size_t equals = knob.find('=');
    if (equals == std::string::npos)
      options.knobs.emplace_back("", knob);
    else
      options.knobs.emplace_back(knob.substr(0, equals), knob.substr(equals + 1));
  }
  return command;
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  // The checkpoint stays mapped all through a compile: if another program truncates it
  // meanwhile, end with an error naming it (and no half-written artifact), not a crash report.
  dlm::MappedFile::exitOnUnguardedFault("dlmc");
  cl::SubCommand importCommand("import", "Print a checkpoint as dlm IR");
  // The pipeline (compiler/pipeline/CompilePipeline.h): canonicalize, CSE,
  // dlm-fuse-norm-linear, dlm-lower-to-kernel-program (on @forward) and
  // dlm-unroll-diffusion-loop (on @generate).
  cl::SubCommand compileCommand(
      "compile",
      "Compile a checkpoint into a .dlm artifact. @forward becomes a kernel program "
      "(canonicalize, CSE, norm fused into the next linear, one record per kernel launch with a "
      "per-token-row memory plan) that every backend executes; @generate's denoise loops "
      "are unrolled --unroll guarded steps per iteration (the cuda backend's device loop "
      "captures that many steps per CUDA graph). Shapes are not specialised: prompt lengths "
      "vary per request");
  cl::SubCommand inspectCommand("inspect",
                                "List the contents of a .dlm artifact or a .dlmp parameter file");

  cl::SubCommand listCommand("list", "List the architectures dlmc knows (imported, imported "
                                     "beside a target, not supported yet) or the policies "
                                     "it has decode programs for");
  cl::opt<std::string> listWhat(cl::Positional, cl::desc("<architectures | policies>"),
                                cl::Required, cl::sub(listCommand));

  cl::opt<std::string> importInput(cl::Positional, cl::desc("<checkpoint directory>"), cl::Required,
                                   cl::sub(importCommand));
  cl::opt<std::string> emit(
      "emit",
      cl::desc("What to print: dlm (the model IR) | onnx (model.onnx after phase 1) | "
               "folded (model.onnx with its shape bookkeeping folded)"),
      cl::init("dlm"), cl::sub(importCommand));

  CompileFlags compileFlags(compileCommand);

  cl::opt<std::string> inspectInput(cl::Positional, cl::desc("<model.dlm | model.dlmp>"),
                                    cl::Required, cl::sub(inspectCommand));
  cl::opt<bool> inspectVerify(
      "verify",
      cl::desc("Recompute the integrity hashes dlmc recorded (the metadata's and every weight's) "
               "and fail naming each damaged section"),
      cl::sub(inspectCommand));

  // LLVM's own options (codegen, passes, targets) are registered at the top level; dlmc's live in
  // its subcommands, so everything at the top level but --help and --version is hidden.
  cl::OptionCategory dlmcCategory("dlmc options");
  cl::HideUnrelatedOptions(dlmcCategory);
  cl::ParseCommandLineOptions(argc, argv, "dlm compiler\n");

  if (importCommand)
    return dlm::dlmc::runImport(importInput, emit);
  if (compileCommand) {
    std::optional<dlm::dlmc::CompileCommand> command = compileFlags.command();
    return command ? dlm::dlmc::runCompile(*command) : 1;
  }
  if (inspectCommand)
    return dlm::dlmc::runInspect(inspectInput, inspectVerify);
  if (listCommand)
    return dlm::dlmc::runList(listWhat);
  llvm::errs() << "dlmc: give a command: import, compile, inspect or list (see dlmc --help)\n";
  return 2;
}
