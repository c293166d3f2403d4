//===- Passes.td - dlm compiler passes ---------------------*- tablegen -*-===//

#ifndef DLM_PASSES_TD
#define DLM_PASSES_TD

include "mlir/Pass/PassBase.td"

def UnrollDiffusionLoopPass : Pass<"dlm-unroll-diffusion-loop"> {
  let summary = "Unroll dlm.diffusion_loop bodies so several denoise steps run per iteration";
  let description = [{
    Rewrites each `dlm.diffusion_loop` so one iteration runs up to `factor`
    steps of the original body, each guarded by `scf.if` so that steps after
    convergence (or past the step cap) pass the carried values through
    unchanged. Fewer loop iterations mean fewer convergence checks on the
    host; on the GPU the unrolled body is what a CUDA graph captures (dInfer's
    loop unrolling). The number of steps actually run is carried explicitly,
    so every result keeps its meaning.

    Example, with factor 2: a loop of `max_steps 5` becomes a loop of
    `max_steps 3` whose body holds two guarded copies of the original body.
  }];
  let options = [
    Option<"factor", "factor", "int64_t", /*default=*/"4",
           "Original steps per unrolled iteration (1 leaves loops unchanged)">
  ];
  let dependentDialects = ["::mlir::scf::SCFDialect", "::mlir::arith::ArithDialect"];
}

#endif // DLM_PASSES_TD
