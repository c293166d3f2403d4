// The contract between dlmc and the runtime, in one place: the ModelConfig::extra attributes the
// runtime reads, and the decoding policies and knobs of DecodingProgram. (Weights are named by
// the kernel records that read them; the importer's canonical names are
// importer/model/CanonicalWeights.h, which the runtime never needs.) Header-only and free of
// dependencies so that both sides include it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dlm::spec {

// ---- ModelConfig::extra attributes ------------------------------------------------------------

// bool. Dream: logits row i is the prediction made at position i-1; row 0 keeps its own.
inline constexpr std::string_view kExtraLogitShift = "logit_shift";
// int: a block_causal model's block (dlmc's --block-length), which its decoding must keep.
inline constexpr std::string_view kExtraAttentionBlock = "attention_block";
// string. Only "neox" (rotate_half, pairs (j, j + hd/2)) is supported; absent means "neox".
inline constexpr std::string_view kExtraRopeStyle = "rope_style";
inline constexpr std::string_view kRopeStyleNeox = "neox";
// string, artifacts with CUDA kernels: the element type the generated kernels store activations,
// K/V pages and converted weights in, "f32" or "bf16" (dlmc compile --precision).
inline constexpr std::string_view kExtraDevicePrecision = "device_precision";
// string: "bf16" when the CPU backend may round the activations of bf16-stored projections to
// bf16 and multiply in bf16 (dlmc compile --activations bf16); absent: float32 activations.
inline constexpr std::string_view kExtraCpuActivations = "cpu_activations";

// ---- Decoding knobs (DecodingProgram::knobs; a request may override each) ---------------------
// The decode programs (compiler/programs/DecodePrograms.h) declare their own knobs; these are the
// names dlmc's flags and the request API set.

// Not a knob of any program: it selects the decode program by its policy name.
inline constexpr std::string_view kKnobPolicy = "policy";            // string
// string: the cache mode, of the programs that declare one ("none", "prefix", "dual").
inline constexpr std::string_view kKnobCache = "cache";
inline constexpr std::string_view kKnobGenLength = "gen_length";     // int
inline constexpr std::string_view kKnobBlockLength = "block_length"; // int
inline constexpr std::string_view kKnobSteps = "steps";              // int, low-confidence
// real, low-confidence. Absent = fixed-count schedule; present = Fast-dLLM's threshold: every
// step unmasks each candidate with confidence >= threshold (at least one) until the block has no
// mask, whatever `steps` says. A request can remove the artifact's threshold with the string
// value "none".
inline constexpr std::string_view kKnobThreshold = "threshold";
// int >= 1, low-confidence with a threshold: a block's step cap, off when absent (the default).
// The block's step `step_cap` unmasks every candidate left. "none" removes the artifact's cap.
inline constexpr std::string_view kKnobStepCap = "step_cap";
// real, low-confidence: dInfer's hierarchical decoding; each segment of masks takes its most
// confident position when above this (see compiler/programs/policies/LowConfidence.cpp).
inline constexpr std::string_view kKnobLowThreshold = "low_threshold";
inline constexpr std::string_view kKnobDepth = "depth"; // int >= 1, hierarchical levels
// bool, low-confidence: dInfer's credit decoding, with its alpha, beta (decay) and gamma.
inline constexpr std::string_view kKnobCredit = "credit";
inline constexpr std::string_view kKnobCreditAlpha = "credit_alpha";
inline constexpr std::string_view kKnobCreditBeta = "credit_beta";
inline constexpr std::string_view kKnobCreditGamma = "credit_gamma";
inline constexpr std::string_view kKnobTemperature = "temperature";    // real, Gumbel T
inline constexpr std::string_view kKnobTMin = "t_min";                 // real, entropy-bound
inline constexpr std::string_view kKnobTMax = "t_max";                 // real, entropy-bound
inline constexpr std::string_view kKnobMaxSteps = "max_steps";         // int, entropy-bound
// int, diffusion-gemma: tokens to generate (rounded up to whole canvases) and the canvas length.
inline constexpr std::string_view kKnobMaxNewTokens = "max_new_tokens";
inline constexpr std::string_view kKnobCanvasLength = "canvas_length";
// autoregressive: transformers' top-k (int, 0: off) and top-p (real, 1: off) sampling filters.
inline constexpr std::string_view kKnobTopK = "top_k";
inline constexpr std::string_view kKnobTopP = "top_p";
// introspective-strided: tokens per forward at most (N; 2N-1 positions fed) and the verifier's
// relaxation alpha (1: the authors' default; <= 0 accepts every draft).
inline constexpr std::string_view kKnobStride = "stride";
inline constexpr std::string_view kKnobVerifyAlpha = "verify_alpha";
inline constexpr std::string_view kKnobEntropyBound = "entropy_bound"; // real, entropy-bound
inline constexpr std::string_view kKnobStabilityThreshold = "stability_threshold";   // int
inline constexpr std::string_view kKnobConfidenceThreshold = "confidence_threshold"; // real
// string, entropy-bound: "mask" (renoise with the mask token) or "uniform" (random token ids).
// Absent: "mask" when the model has a mask token, else "uniform".
inline constexpr std::string_view kKnobNoise = "noise";
// int >= 1: denoising steps per iteration of the unrolled diffusion loop (dlmc compile --unroll,
// dlm-unroll-diffusion-loop): the cuda backend's device loop captures that many steps per graph
// and checks the device's finished flag once per graph launch. The host loop ignores it.
inline constexpr std::string_view kKnobUnrollSteps = "unroll_steps";

inline constexpr std::string_view kThresholdNone = "none";
inline constexpr std::string_view kNoiseMask = "mask";
inline constexpr std::string_view kNoiseUniform = "uniform";

} // namespace dlm::spec
