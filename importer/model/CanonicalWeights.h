// Architecture-independent weight names: the importer maps each checkpoint's tensor names to
// these, the artifact stores weights under them, and the runtime looks them up by them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dlm::importer {

inline constexpr std::string_view kEmbed = "embed";
inline constexpr std::string_view kFinalNorm = "final_norm";
inline constexpr std::string_view kLmHead = "lm_head";

// Per-layer roles; the full name is "layers.<i>.<role>".
inline constexpr std::string_view kAttnNorm = "attn_norm";
inline constexpr std::string_view kQuery = "q";
inline constexpr std::string_view kKey = "k";
inline constexpr std::string_view kValue = "v";
inline constexpr std::string_view kQueryBias = "q_bias";
inline constexpr std::string_view kKeyBias = "k_bias";
inline constexpr std::string_view kValueBias = "v_bias";
inline constexpr std::string_view kQueryNorm = "q_norm";
inline constexpr std::string_view kKeyNorm = "k_norm";
inline constexpr std::string_view kOutput = "o";
inline constexpr std::string_view kMlpNorm = "mlp_norm";
inline constexpr std::string_view kGate = "gate";
inline constexpr std::string_view kUp = "up";
inline constexpr std::string_view kDown = "down";

inline std::string layerWeight(int64_t layer, std::string_view role) {
  return "layers." + std::to_string(layer) + "." + std::string(role);
}

} // namespace dlm::importer
