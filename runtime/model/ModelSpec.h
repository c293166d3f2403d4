// The contract between dlmc and the runtime, in one place: the architecture-independent names of
// the weights an artifact carries, the ModelConfig::extra attributes the runtime reads, and the
// decoding policies and knobs of DecodingProgram. dlmc maps each checkpoint's own names to these;
// every backend looks them up by these. Header-only and free of dependencies so that both sides
// include it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dlm::spec {

// ---- Weights ------------------------------------------------------------------------------------
// dtype as in the checkpoint (f32, bf16, f16), PyTorch [out, in] layout for linear layers.
// Sizes: H hidden, nh heads, nkv KV heads, hd head_dim, I intermediate, E embedding_size.

inline constexpr std::string_view kEmbed = "embed";          // [E, H]
inline constexpr std::string_view kFinalNorm = "final_norm"; // [H]
// [E or vocab, H]; absent when ModelConfig::tiedEmbeddings (the embedding is used instead).
inline constexpr std::string_view kLmHead = "lm_head";

// The per-layer roles; the weight's name is layerWeightName(layer, role).
inline constexpr std::string_view kAttnNorm = "attn_norm"; // [H]
inline constexpr std::string_view kQ = "q";                // [nh*hd, H]
inline constexpr std::string_view kK = "k";                // [nkv*hd, H]
inline constexpr std::string_view kV = "v";                // [nkv*hd, H]
inline constexpr std::string_view kQBias = "q_bias";       // [nh*hd], optional (Dream)
inline constexpr std::string_view kKBias = "k_bias";       // [nkv*hd], optional
inline constexpr std::string_view kVBias = "v_bias";       // [nkv*hd], optional
// Per-head RMSNorm of q and k before RoPE (Qwen3); optional, both or neither.
inline constexpr std::string_view kQNorm = "q_norm";     // [hd]
inline constexpr std::string_view kKNorm = "k_norm";     // [hd]
inline constexpr std::string_view kO = "o";              // [H, nh*hd]
inline constexpr std::string_view kMlpNorm = "mlp_norm"; // [H]
inline constexpr std::string_view kGate = "gate";        // [I, H]
inline constexpr std::string_view kUp = "up";            // [I, H]
inline constexpr std::string_view kDown = "down";        // [H, I]

// "layers.3.q"
inline std::string layerWeightName(int64_t layer, std::string_view role) {
  std::string name = "layers.";
  name += std::to_string(layer);
  name += '.';
  name += role;
  return name;
}

// ---- ModelConfig::extra attributes ------------------------------------------------------------

// bool. Dream: logits row i is the prediction made at position i-1; row 0 keeps its own.
inline constexpr std::string_view kExtraLogitShift = "logit_shift";
// string. Only "neox" (rotate_half, pairs (j, j + hd/2)) is supported; absent means "neox".
inline constexpr std::string_view kExtraRopeStyle = "rope_style";
inline constexpr std::string_view kRopeStyleNeox = "neox";
// string, artifacts with CUDA kernels: the element type the generated kernels store activations,
// K/V pages and converted weights in, "f32" or "bf16" (dlmc compile --precision).
inline constexpr std::string_view kExtraDevicePrecision = "device_precision";

// ---- Decoding policies (DecodingProgram::policy) ----------------------------------------------

// LLaDA / Fast-dLLM blocks: fixed-count (top-k per step) or confidence-threshold unmasking.
inline constexpr std::string_view kPolicyLowConfidence = "low-confidence";
// DiffusionGemma's entropy-bound canvas decoding, adapted to mask-absorbing models.
inline constexpr std::string_view kPolicyEntropyBound = "entropy-bound";

// ---- Decoding knobs (DecodingProgram::knobs; a request may override each) ---------------------

// Also accepted as a knob, overriding DecodingProgram::policy.
inline constexpr std::string_view kKnobPolicy = "policy";            // string
inline constexpr std::string_view kKnobGenLength = "gen_length";     // int
inline constexpr std::string_view kKnobBlockLength = "block_length"; // int
inline constexpr std::string_view kKnobSteps = "steps";              // int, low-confidence
// real, low-confidence. Absent = fixed-count schedule; present = unmask every candidate with
// confidence >= threshold (at least one per step; steps per block becomes a cap). A request can
// remove the artifact's threshold with the string value "none".
inline constexpr std::string_view kKnobThreshold = "threshold";
inline constexpr std::string_view kKnobTemperature = "temperature";    // real, Gumbel T
inline constexpr std::string_view kKnobTMin = "t_min";                 // real, entropy-bound
inline constexpr std::string_view kKnobTMax = "t_max";                 // real, entropy-bound
inline constexpr std::string_view kKnobMaxSteps = "max_steps";         // int, entropy-bound
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
