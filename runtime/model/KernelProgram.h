// The contract of the kernel records (artifact KernelTarget "cpu", a name kept from when only the
// CPU backend read them): the compiled @forward as a flat, ordered list of kernel launches,
// written by dlmc (the pass dlm-lower-to-kernel-program computes it) and executed by every
// backend (runtime/program/KernelProgram.h parses them). Header-only and free of dependencies, like
// ModelSpec.h, so that both sides include it.
//
// Each record is an artifact::Kernel: `kind` is one of the kinds below, `name` a label for
// profiles ("q_proj", "attn_norm", ...), and `parameters` carry:
//   layer     int   the transformer layer (KV cache layer for kv_store / attention); -1 = none.
//                   The KV cache has a layer for every kv_store layer of any function: a DFlash
//                   drafter's layers follow its target's (L, L+1, ...).
//   operands  text  value slots read, comma-separated ("4,5")
//   result    int   the value slot written (absent for kv_store)
//   offset    int   where the result lives in the workspace, in elements per token row
//   width     int   the result's elements per token row
//   weight, bias, norm_weight   text   canonical weight names (ModelSpec.h)
//   eps, theta real; mask text; heads, kv_heads, head_dim int; logit_shift bool
//   accumulate  bool  linear / norm_linear: a second operand, the residual, is added to the
//                     product (the GEMM's epilogue; the compiler folds residual adds into it)
//   cuda_kernel text  the generated CUDA kernel the record launches (dlmc --target cuda|all);
//                     comma-separated when it launches several (lm_head: its norm and its
//                     soft-cap; moe: route, plan, gate_up, down, combine)
//   function    text  the forward function the record belongs to; absent = "forward". An
//                     artifact may hold several (DiffusionGemma: "encode" and "decode"), each a
//                     complete program of its own (own slots, own memory plan, own lm_head) over
//                     the same weights and the same KV cache; DecodeModel::forward names one.
//
// Optional parameters of the kinds (absent = the default given):
//   embedding   scale real (1.0): the looked-up rows are multiplied by it (in float32)
//   rms_norm    weight absent: no weight (x * rsqrt(mean x^2 + eps)); then norm_width int gives
//               the normalised group (a divisor of the row width; the row when absent)
//   rope        rotated_pairs int (head_dim / 2): only pairs j < rotated_pairs of (j, j + hd/2)
//               rotate, by position * theta^(-2j / head_dim) (the frequencies always use the
//               whole head dim: Gemma's "proportional" RoPE); the other pairs pass through
//   attention   scale real (1 / sqrt(head_dim)): scores are scale * q.k
//               window int (none): causal: query at position i sees keys j with i - W < j <= i;
//               bidirectional: every key at or after the forward's first fed position, and the
//               keys j before it with first - j < W (DiffusionGemma's decoder on sliding
//               layers: the last W - 1 cached positions)
//   lm_head     softcap real (none): logits = softcap * tanh(logits / softcap), in float32
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
inline constexpr std::string_view kScale = "scale";      // x → x * weight[0]; weight [1]
inline constexpr std::string_view kGeluMul = "gelu_mul"; // gate, up → gelu_tanh(gate) * up
// (no operands) → [T, H]: softmax(input row) @ weight[:V'] * scale for each fed token, where the
// input is the forward's float input rows ([T, V'], V' <= the table's rows; DecodeModel's
// ForwardSpec::input), and zero rows when the forward has no input (self-conditioning's first
// step). weight [E, H] (the embedding table), scale real.
inline constexpr std::string_view kSoftEmbedding = "soft_embedding";
// Mixture of experts, as DiffusionGemma computes it: operands (router input r, expert input x),
// both [T, H] → y [T, H].
//   z = rms_norm_noweight(r, eps) * router_scale * router_input_scale; p = softmax(z @ router^T)
//   over the `experts` experts (float32); the top_k largest (ties: lower expert id first), their
//   weights renormalised to sum 1, each times expert_scale[e];
//   y = sum over the chosen e of weight_e * down_e(act(gate_e x) * up_e x), where
//   gate_up_e = gate_up[e] is [2I, H] (rows [0, I) the gate, [I, 2I) the up projection) and
//   down_e = down[e] is [H, I].
// Weights: router [E, H], router_scale [H], expert_scale [E], gate_up [E, 2I, H] and down
// [E, H, I] (rank-3 tensors, which a HostTensor holds as rows = E * 2I (E * H), cols = H (I)).
// Parameters: experts int, top_k int, eps real, router_input_scale real, activation text
// ("gelu_tanh": GELU's tanh approximation, DiffusionGemma's; or "silu").
inline constexpr std::string_view kMoe = "moe";
// Speculative decoding's data paths (DFlash, docs/design/speculative-decoding.md §2.2):
// (no operands) → [T, width]: the forward's input rows (ForwardSpec::input; `width` must equal
// its inputWidth), rows past ForwardSpec::inputRows zero. The drafter's context features.
inline constexpr std::string_view kForwardInput = "forward_input";
// a, b → y (all one width): rows r < ForwardSpec::inputRows take a's row r, the others b's. The
// drafter's K/V input: the context rows' projected features, then the block rows' normed states.
inline constexpr std::string_view kSelectInputRows = "select_input_rows";
// x_0, ..., x_{n-1} (each [T, w]) → no slot: the forward's captured rows [T, n*w], x_i in
// columns [i*w, (i+1)*w) (DecodeModel::capturedRows). The target's hidden states after the
// layers a drafter reads. At most one per function.
inline constexpr std::string_view kCapture = "capture";

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
inline constexpr std::string_view kFunction = "function";
inline constexpr std::string_view kScaleParameter = "scale";
inline constexpr std::string_view kNormWidth = "norm_width";
inline constexpr std::string_view kRotatedPairs = "rotated_pairs";
inline constexpr std::string_view kWindow = "window";
inline constexpr std::string_view kSoftcap = "softcap";
inline constexpr std::string_view kRouter = "router";
inline constexpr std::string_view kRouterScale = "router_scale";
inline constexpr std::string_view kExpertScale = "expert_scale";
inline constexpr std::string_view kGateUp = "gate_up";
inline constexpr std::string_view kDownWeight = "down";
inline constexpr std::string_view kExperts = "experts";
inline constexpr std::string_view kTopK = "top_k";
inline constexpr std::string_view kRouterInputScale = "router_input_scale";
inline constexpr std::string_view kActivation = "activation";
inline constexpr std::string_view kActivationGeluTanh = "gelu_tanh";
inline constexpr std::string_view kActivationSilu = "silu";

// The function of records without a `function` parameter.
inline constexpr std::string_view kDefaultFunction = "forward";

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
