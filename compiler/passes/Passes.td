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

def FuseNormLinearPass : Pass<"dlm-fuse-norm-linear"> {
  let summary = "Fuse dlm.rms_norm into each dlm.linear that consumes it (dlm.norm_linear)";
  let description = [{
    Replaces `dlm.linear(dlm.rms_norm(x))` by `dlm.norm_linear(x)`, so the
    normalisation runs in the GEMM's prologue and the normalised activations
    are never written out. A norm feeding several projections (q, k, v) is
    fused into each; the norm itself disappears once nothing else reads it.
  }];
}

def SpecializeShapesPass : Pass<"dlm-specialize-shapes", "::mlir::ModuleOp"> {
  let summary = "Give @generate a static prompt length and clone @forward per static call shape";
  let description = [{
    With `prompt-length=N`, @generate's prompt becomes `tensor<Nxi32>` and
    static shapes are propagated through the program (tensor casts folded
    into their consumers, dlm ops re-typed). Every `dlm.denoise_step` or
    `dlm.kv_commit` whose tokens then have a static length `L` calls a clone
    `@forward_L` in which every sequence dimension is `L`, so later passes
    (memory planning, kernel selection) see static shapes only. The
    original @forward stays for callers of other shapes.
  }];
  let options = [
    Option<"promptLength", "prompt-length", "int64_t", /*default=*/"0",
           "Static prompt length for @generate (0 keeps it dynamic)">
  ];
  let dependentDialects = ["::mlir::tensor::TensorDialect", "::mlir::arith::ArithDialect"];
}

def PlanMemoryPass : Pass<"dlm-plan-memory", "::mlir::func::FuncOp"> {
  let summary = "Assign every intermediate tensor of a static function an offset in one arena";
  let description = [{
    For a function whose body is one block of statically shaped tensors
    (a specialised @forward), computes each intermediate's live range in
    program order and packs them into one arena, first fit by decreasing
    size, each buffer `alignment`-aligned. Producers get
    `dlm.arena_offset`; the function gets `dlm.arena_bytes` and
    `dlm.unplanned_bytes` (the sum of all sizes, what allocating every tensor
    separately would take). Weights are not planned: they live in the
    artifact's weight section; values inside nested regions (a loop body)
    belong to that region and are not planned here. Functions with dynamic
    shapes are skipped and say so in a remark.
  }];
  let options = [
    Option<"alignment", "alignment", "int64_t", /*default=*/"64", "Buffer alignment in bytes">
  ];
}

#endif // DLM_PASSES_TD
