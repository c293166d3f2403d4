#include "compiler/pipeline/CompilePipeline.h"

#include "compiler/passes/Passes.h"

#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

namespace dlm::pipeline {

void buildCompilePipeline(mlir::OpPassManager &pm, const PipelineOptions &options) {
  pm.addPass(mlir::createCanonicalizerPass());
  pm.addPass(mlir::createCSEPass());
  pm.addPass(createFuseNormLinearPass());
  pm.addPass(createLowerToKernelProgramPass());
  if (options.unroll > 1) {
    UnrollDiffusionLoopPassOptions unroll;
    unroll.factor = options.unroll;
    pm.addPass(createUnrollDiffusionLoopPass(unroll));
  }
}

namespace {

struct RegisteredOptions : mlir::PassPipelineOptions<RegisteredOptions> {
  Option<int64_t> unroll{*this, "unroll",
                         llvm::cl::desc("Denoising steps per unrolled loop iteration (1: none)"),
                         llvm::cl::init(4)};
};

} // namespace

void registerCompilePipeline() {
  mlir::PassPipelineRegistration<RegisteredOptions>(
      "dlm-compile-pipeline",
      "The dlmc compile pipeline: canonicalize, CSE, dlm-fuse-norm-linear, "
      "dlm-lower-to-kernel-program, dlm-unroll-diffusion-loop",
      [](mlir::OpPassManager &pm, const RegisteredOptions &options) {
        buildCompilePipeline(pm, PipelineOptions{options.unroll});
      });
}

} // namespace dlm::pipeline
