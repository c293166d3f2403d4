// dlmc import / compile: checkpoint → dlm IR → artifact.
#include "tools/dlmc/Commands.h"
#include "tools/dlmc/CpuKernelRecords.h"

#include "compiler/dialects/dlm/DlmDialect.h"
#include "compiler/passes/Passes.h"
#include "compiler/programs/DecodingProgram.h"
#include "importer/ir/ForwardBuilder.h"
#include "importer/model/Checkpoint.h"
#include "importer/onnx/OnnxImport.h"
#include "runtime/artifact/ArtifactWriter.h"
#include "runtime/model/ModelSpec.h"

#ifdef DLM_HAVE_NVRTC
#include "compiler/codegen/KernelCompilation.h"
#include "compiler/codegen/ModelKernels.h"
#endif

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/raw_ostream.h"

namespace dlm::dlmc {
namespace {

mlir::Type elementType(mlir::MLIRContext &context, artifact::DType dtype) {
  mlir::Builder b(&context);
  switch (dtype) {
  case artifact::DType::bf16:
    return b.getBF16Type();
  case artifact::DType::f16:
    return b.getF16Type();
  default:
    return b.getF32Type();
  }
}

// Imports the checkpoint and builds its verified, canonicalized module; prints errors.
mlir::OwningOpRef<mlir::ModuleOp> importModule(mlir::MLIRContext &context,
                                               const importer::ImportedCheckpoint &checkpoint) {
  std::vector<mlir::Type> types;
  for (const safetensors::TensorView *view : checkpoint.views)
    types.push_back(elementType(context, *importer::weightDType(*view)));
  mlir::OwningOpRef<mlir::ModuleOp> module =
      importer::buildForwardModule(context, checkpoint.model, types);
  mlir::PassManager pm(&context);
  pm.addPass(mlir::createCanonicalizerPass());
  if (failed(mlir::verify(*module)) || failed(pm.run(*module))) {
    llvm::errs() << "dlmc: internal error: the imported IR of '" << checkpoint.directory
                 << "' does not verify\n";
    return nullptr;
  }
  return module;
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
  mlir::OwningOpRef<mlir::ModuleOp> module = importModule(context, *checkpoint);
  if (!module)
    return 1;
  module->print(llvm::outs());
  llvm::outs() << "\n";
  return 0;
}

int runCompile(const CompileOptions &options) {
  auto fail = [](const std::string &message) {
    llvm::errs() << "dlmc compile: " << message << "\n";
    return 1;
  };
  if (options.emit != "artifact" && options.emit != "dlm")
    return fail("unknown --emit=" + options.emit + " (expected artifact or dlm)");
  if (options.emit == "artifact" && options.output.empty())
    return fail("give the artifact path with -o");
  if (options.target != "cpu" && options.target != "cuda" && options.target != "all")
    return fail("unknown --target " + options.target + " (expected cpu, cuda or all)");
#ifndef DLM_HAVE_NVRTC
  if (options.target != "cpu")
    return fail("not supported yet: --target " + options.target +
                " (dlmc was built without the CUDA toolkit's NVRTC)");
#endif
  if (options.policy != "low-confidence" && options.policy != "entropy-bound")
    return fail("unknown policy '" + options.policy +
                "' (expected low-confidence or entropy-bound)");
  if (options.genLength <= 0 || options.blockLength <= 0 || options.steps <= 0)
    return fail("--gen-length, --block-length and --steps must be positive");
  if (options.genLength % options.blockLength != 0)
    return fail("--gen-length " + std::to_string(options.genLength) +
                " is not a multiple of --block-length " + std::to_string(options.blockLength));
  int64_t blocks = options.genLength / options.blockLength;
  if (options.steps % blocks != 0)
    return fail("--steps " + std::to_string(options.steps) + " is not divisible by the " +
                std::to_string(blocks) + " blocks");
  if (options.unroll < 1)
    return fail("--unroll must be at least 1");
  if (options.threshold < 0.0 || options.threshold > 1.0)
    return fail("--threshold must be in [0, 1]");
  if (options.temperature < 0.0)
    return fail("--temperature must be >= 0");
  if (!options.precision.empty() && options.precision != "f32" && options.precision != "bf16")
    return fail("unknown --precision " + options.precision + " (expected f32 or bf16)");
  if (!options.precision.empty() && options.target == "cpu")
    return fail("--precision is the CUDA device's: give it with --target cuda or all");

  mlir::MLIRContext context;
  importer::onnx::OnnxModel onnx; // owns what the views of an imported model.onnx point into
  auto checkpoint = importer::onnx::isOnnxModelPath(options.checkpoint)
                        ? onnx.import(context, options.checkpoint)
                        : importer::importCheckpoint(options.checkpoint);
  if (!checkpoint)
    return fail(checkpoint.status().message());
  mlir::OwningOpRef<mlir::ModuleOp> module = onnx.takeModule();
  if (!module)
    module = importModule(context, *checkpoint);
  if (!module)
    return 1;
  programs::DecodingPolicy policy;
  policy.name = options.policy;
  policy.genLength = options.genLength;
  policy.blockLength = options.blockLength;
  policy.steps = options.steps;
  policy.threshold = options.threshold;
  if (failed(programs::buildGenerateFunction(*module, policy)) || failed(mlir::verify(*module)))
    return fail("could not build the decoding program");
  // The program names weights as the artifact stores them.
  std::map<std::string, std::string> canonicalNames;
  for (const importer::WeightBinding &binding : checkpoint->model.weights)
    canonicalNames.emplace(binding.checkpointName, binding.canonicalName);
  renameWeightsToCanonical(*module, canonicalNames);
  // @forward keeps a dynamic token count: prompts vary per request, so dlm-specialize-shapes
  // does not apply (see dlmc compile --help); the kernel program plans memory per token row
  // instead. @generate's diffusion loops are unrolled by --unroll guarded steps per iteration;
  // the cuda backend's device loop captures that many steps per graph (knob unroll_steps).
  mlir::PassManager pm(&context);
  pm.addPass(mlir::createCanonicalizerPass());
  pm.addPass(mlir::createCSEPass());
  pm.addPass(createFuseNormLinearPass());
  // Every backend runs the kernel program.
  pm.addPass(createLowerToKernelProgramPass());
  if (options.unroll > 1) {
    UnrollDiffusionLoopPassOptions unroll;
    unroll.factor = options.unroll;
    pm.addPass(createUnrollDiffusionLoopPass(unroll));
  }
  if (failed(pm.run(*module)))
    return fail("the compile pipeline failed (errors above)");
  if (options.emit == "dlm") {
    module->print(llvm::outs());
    llvm::outs() << "\n";
    return 0;
  }
  std::string programText;
  llvm::raw_string_ostream programStream(programText);
  module->print(programStream);

  const importer::ModelDescription &model = checkpoint->model;
  artifact::ArtifactContents contents;
  contents.producer = "dlmc 0.1";
  contents.config = model.config;
  contents.config.extra["family"] = model.family;
  contents.config.extra["qkv_bias"] = model.traits.qkvBias;
  contents.config.extra["qk_norm"] = model.traits.qkNorm;
  contents.config.extra[std::string(spec::kExtraLogitShift)] = model.traits.logitShift;
  contents.config.extra[std::string(spec::kExtraRopeStyle)] = std::string(spec::kRopeStyleNeox);
  contents.tokenizerJson = checkpoint->tokenizerJson;
  contents.program.policy = options.policy;
  contents.program.mlir = programText;
  artifact::Attributes &knobs = contents.program.knobs;
  knobs[std::string(spec::kKnobGenLength)] = options.genLength;
  knobs[std::string(spec::kKnobBlockLength)] = options.blockLength;
  knobs[std::string(spec::kKnobSteps)] = options.steps;
  knobs[std::string(spec::kKnobTemperature)] = options.temperature;
  knobs[std::string(spec::kKnobUnrollSteps)] = options.unroll;
  if (options.threshold > 0.0)
    knobs[std::string(spec::kKnobThreshold)] = options.threshold;
  if (options.policy == "entropy-bound") {
    // The same defaults the @generate program was built with (DiffusionGemma's shipped
    // generation_config, SPECS §1.1).
    knobs[std::string(spec::kKnobTMin)] = policy.tMin;
    knobs[std::string(spec::kKnobTMax)] = policy.tMax;
    knobs[std::string(spec::kKnobMaxSteps)] = policy.maxSteps;
    knobs[std::string(spec::kKnobEntropyBound)] = policy.entropyBound;
    knobs[std::string(spec::kKnobStabilityThreshold)] = policy.stability;
    knobs[std::string(spec::kKnobConfidenceThreshold)] = policy.confidenceBound;
  }
  for (size_t i = 0; i < model.weights.size(); ++i) {
    const safetensors::TensorView &view = *checkpoint->views[i];
    contents.weights.push_back({model.weights[i].canonicalName, *importer::weightDType(view),
                                view.shape, view.data, view.byteSize});
  }
  // Every backend executes these records; with --target cuda|all each names the CUDA kernel it
  // launches.
  StatusOr<artifact::KernelTarget> program = cpuKernelTarget(*module);
  if (!program)
    return fail(program.status().message());
#ifdef DLM_HAVE_NVRTC
  // --target cuda|all: every kernel the model needs, compiled for sm_80 and sm_90 (cubin + PTX
  // + ptxas's resource report). A kernel that does not compile, or a hot one that spills, fails
  // the compile with NVRTC's log.
  codegen::KernelTable kernelTable;
  if (options.target != "cpu") {
    // The device precision: as asked, else f32 for an all-f32 checkpoint (the kernels then
    // compute what the float32 CPU backend does), else bf16.
    std::string precision = options.precision;
    if (precision.empty()) {
      precision = "f32";
      for (const artifact::WeightSource &weight : contents.weights)
        if (weight.dtype != artifact::DType::f32)
          precision = "bf16";
    }
    contents.config.extra[std::string(spec::kExtraDevicePrecision)] = precision;
    codegen::ModelKernelOptions kernelOptions;
    kernelOptions.element =
        precision == "f32" ? codegen::ElementType::f32 : codegen::ElementType::bf16;
    kernelOptions.policy = options.policy;
    kernelOptions.confidenceThreshold = options.threshold > 0.0;
    kernelOptions.canvas = options.blockLength;
    kernelOptions.pageSize = policy.pageSize;
    codegen::WeightShapes shapes;
    for (const artifact::WeightSource &weight : contents.weights)
      shapes[weight.name] = weight.shape;
    auto kernels = codegen::kernelsForProgram(program->kernels, shapes, kernelOptions);
    if (!kernels)
      return fail(kernels.status().message());
    auto decoding = codegen::decodingKernels(contents.config, kernelOptions);
    if (!decoding)
      return fail("--target " + options.target + ": " + decoding.status().message());
    kernels->insert(kernels->end(), decoding->begin(), decoding->end());
    cuda::NvrtcCompiler compiler;
    auto table = codegen::compileKernels(*kernels, compiler);
    if (!table)
      return fail("--target " + options.target + ": " + table.status().message());
    kernelTable = std::move(*table);
    contents.kernelTargets.insert(contents.kernelTargets.end(), kernelTable.targets.begin(),
                                  kernelTable.targets.end());
  }
#endif
  contents.kernelTargets.insert(contents.kernelTargets.begin(), std::move(*program));
  Status written = artifact::writeArtifact(options.output, contents);
  if (!written.isOk())
    return fail(written.message());
  return 0;
}

} // namespace dlm::dlmc
