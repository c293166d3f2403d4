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

def LowerToKernelProgramPass : Pass<"dlm-lower-to-kernel-program", "::mlir::ModuleOp"> {
  let summary = "Lower @forward to a flat, ordered kernel program with a per-token-row memory plan";
  let description = [{
    Walks `function` (default @forward, best after --dlm-fuse-norm-linear) and
    attaches `dlm.kernel_program` to it: one dictionary per kernel launch, in
    program order — embedding, rms_norm, norm_linear / linear, rope, kv_store
    and attention, residual add, silu_mul (a gated MLP becomes gate, up,
    silu_mul, down), lm_head (with the final norm and Dream's logit shift
    folded in) — each with its weights by name, its attributes (eps, theta,
    mask, heads, ...), its operands and result as value slots and the result's
    place in the memory plan. The record format is the cpu KernelTarget's
    (runtime/schema/KernelOps.td).

    The token count stays dynamic (prompt lengths vary per request and the
    denoise loop is data dependent, so neither specialisation nor unrolling
    fixes it), and every intermediate is [tokens, width]: the plan is in
    elements per token row, packed greedy by size over live ranges
    (ArenaPlanner.h), with kernels that can overwrite their first operand planned
    in place when that operand dies there. The function gets
    `dlm.workspace_row_elements` and `dlm.unplanned_row_elements`.
    An op the program cannot express is a "not supported yet" error.

    A module whose `dlm.forward_functions` lists several forwards
    (DiffusionGemma's @encode and @decode) gets each of them lowered, and
    `function` is ignored. A forward may take a third argument, float32
    rows read only by `dlm.soft_embedding` (the record reads the caller's
    input rows directly).
  }];
  let options = [
    Option<"function", "function", "std::string", /*default=*/"\"forward\"",
           "The model forward to lower">
  ];
}

def LowerToDecodeProgramPass : Pass<"dlm-lower-to-decode-program", "::mlir::ModuleOp"> {
  let summary = "Lower decoding policies in SSA form (generate dialect) to decode records";
  let description = [{
    Every function whose body holds generate ops (a policy's builder wrote it,
    compiler/programs/policies) becomes the decode dialect's records in order
    (compiler/passes/DecodeLowering.h): each record op the decode op of its
    kind, each value a register, knob, literal or fact, the structured ops'
    carried values one register each, written in place where the SSA form
    allows and by a `set` where it does not.
  }];
  let dependentDialects = ["::dlm::decode::DecodeDialect"];
}

#endif // DLM_PASSES_TD
