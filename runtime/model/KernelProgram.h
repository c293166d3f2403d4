// The contract of the kernel records (artifact KernelTarget "cpu", a name kept from when only the
// CPU backend read them): the compiled @forward as a flat, ordered list of kernel launches,
// written by dlmc (the pass dlm-lower-to-kernel-program computes it) and executed by every
// backend (runtime/program/KernelProgram.h parses them). Header-only and free of dependencies, like
// ModelSpec.h, so that both sides include it.
//
// Each record is an artifact::Kernel: `kind` is one of the kinds below, `name` a label for
// profiles ("q_proj", "attn_norm", ...), and `parameters` carry:
//   layer     int   the transformer layer (KV cache layer for kv_store / attention); -1 = none
//   operands  text  value slots read, comma-separated ("4,5")
//   result    int   the value slot written (absent for kv_store)
//   offset    int   where the result lives in the workspace, in elements per token row
//   width     int   the result's elements per token row
//   weight, bias, norm_weight   text   canonical weight names (ModelSpec.h)
//   eps, theta real; mask text; heads, kv_heads, head_dim int; logit_shift bool
//   accumulate  bool  linear / norm_linear: a second operand, the residual, is added to the
//                     product (the GEMM's epilogue; the compiler folds residual adds into it)
//   cuda_kernel text  the generated CUDA kernel the record launches (dlmc --target cuda|all)
//
// Value slots: 0 is the token ids, 1 the positions (the forward's two inputs); records number
// their results from 2 upward. Every intermediate is [tokens, width] and the token count is only
// known at run time, so the memory plan is per token row: a slot with offset o and width w
// occupies elements [o * T, (o + w) * T) of a workspace of `rowElements * T` floats for T tokens;
// two slots whose live ranges intersect never overlap, for any T. A slot whose offset equals its
// operand's was planned in place (rope, residual add, per-head norm, silu_mul).
#pragma once

#include <cstdint>
#include <string_view>

namespace dlm::spec::kernels {

inline constexpr std::string_view kTarget = "cpu";

// ---- Kinds ------------------------------------------------------------------------------------
// operands → result; weights
inline constexpr std::string_view kEmbedding = "embedding";    // tokens → x; weight [E, W]
inline constexpr std::string_view kRmsNorm = "rms_norm";       // x → y; weight [w], rows of w
// x [, residual] → y; norm_weight, weight, bias?, accumulate?
inline constexpr std::string_view kNormLinear = "norm_linear";
inline constexpr std::string_view kLinear = "linear"; // x [, residual] → y; weight [N, K], bias?
inline constexpr std::string_view kRope = "rope";        // x, positions → y; theta, head_dim
inline constexpr std::string_view kKvStore = "kv_store"; // k, v → (KV cache of `layer`)
// q, k, v → o over the KV cache of `layer` (k and v as stored by that layer's kv_store)
inline constexpr std::string_view kAttention = "attention";
inline constexpr std::string_view kAdd = "add";          // a, b → a + b
inline constexpr std::string_view kSiluMul = "silu_mul"; // gate, up → silu(gate) * up
// x → logits of the requested rows; norm_weight? (final norm), weight, logit_shift. Last record.
inline constexpr std::string_view kLmHead = "lm_head";

// ---- Parameters -------------------------------------------------------------------------------
inline constexpr std::string_view kLayer = "layer";
inline constexpr std::string_view kOperands = "operands";
inline constexpr std::string_view kResult = "result";
inline constexpr std::string_view kOffset = "offset";
inline constexpr std::string_view kWidth = "width";
inline constexpr std::string_view kWeight = "weight";
inline constexpr std::string_view kBias = "bias";
inline constexpr std::string_view kNormWeight = "norm_weight";
inline constexpr std::string_view kEps = "eps";
inline constexpr std::string_view kTheta = "theta";
inline constexpr std::string_view kMask = "mask";
inline constexpr std::string_view kHeads = "heads";
inline constexpr std::string_view kKvHeads = "kv_heads";
inline constexpr std::string_view kHeadDim = "head_dim";
inline constexpr std::string_view kLogitShift = "logit_shift";
inline constexpr std::string_view kAccumulate = "accumulate";
inline constexpr std::string_view kCudaKernel = "cuda_kernel";

inline constexpr int64_t kTokensSlot = 0;
inline constexpr int64_t kPositionsSlot = 1;
inline constexpr int64_t kFirstResultSlot = 2;

// Result offsets are multiples of this many elements (64 bytes of f32), so every slot of every
// token count starts 64-byte aligned.
inline constexpr int64_t kRowAlignmentElements = 16;

// The role of a canonical weight name, its last component: "layers.0.attn_norm" -> "attn_norm".
// Names records and profile labels on both sides.
inline std::string_view weightRole(std::string_view name) {
  const size_t dot = name.rfind('.');
  return dot == std::string_view::npos ? name : name.substr(dot + 1);
}

} // namespace dlm::spec::kernels
