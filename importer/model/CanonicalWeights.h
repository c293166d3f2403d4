// The architecture-independent names the importer gives the weights of every model it reads:
// dlmc maps each checkpoint's own names to these, and the kernel records it compiles name
// weights by them. The runtime knows no role: it looks weights up by whatever name a record
// gives. Header-only and free of dependencies.
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

// DiffusionGemma (docs/design/diffusion-gemma.md §2): Gemma's sandwich norms, the router and
// experts every layer has beside its dense MLP, the two layer scalars (decoder and encoder mode)
// and the self-conditioning MLP. Qwen3-MoE's routed layers have the router and the experts
// (kRouter, kExpertsGateUp, kExpertsDown) in place of the dense MLP.
inline constexpr std::string_view kPostAttnNorm = "post_attn_norm";     // [H]
inline constexpr std::string_view kPostMlpNorm = "post_mlp_norm";       // [H], after the dense MLP
inline constexpr std::string_view kPreExpertNorm = "pre_expert_norm";   // [H]
inline constexpr std::string_view kPostExpertNorm = "post_expert_norm"; // [H]
inline constexpr std::string_view kPostFfnNorm = "post_ffn_norm";       // [H], of the sum of both
inline constexpr std::string_view kRouter = "router";                   // [experts, H]
inline constexpr std::string_view kRouterScale = "router_scale";        // [H]
inline constexpr std::string_view kExpertScale = "expert_scale";        // [experts]
inline constexpr std::string_view kExpertsGateUp = "experts_gate_up";   // [experts, 2I', H]
inline constexpr std::string_view kExpertsDown = "experts_down";        // [experts, H, I']
// LLaDA2's routed layers: the router's expert bias (it only chooses) and the shared expert, a
// gated MLP beside the routed ones.
inline constexpr std::string_view kExpertBias = "expert_bias";          // [experts]
inline constexpr std::string_view kSharedGate = "shared_gate";          // [I_s, H]
inline constexpr std::string_view kSharedUp = "shared_up";              // [I_s, H]
inline constexpr std::string_view kSharedDown = "shared_down";          // [H, I_s]
inline constexpr std::string_view kLayerScalar = "layer_scalar";        // [1], decoder mode
inline constexpr std::string_view kEncoderLayerScalar = "encoder_layer_scalar"; // [1]
inline constexpr std::string_view kScPreNorm = "sc_pre_norm";           // [H]
inline constexpr std::string_view kScGate = "sc_gate";                  // [I, H]
inline constexpr std::string_view kScUp = "sc_up";                      // [I, H]
inline constexpr std::string_view kScDown = "sc_down";                  // [H, I]

// "layers.3.q"
inline std::string layerWeightName(int64_t layer, std::string_view role) {
  std::string name = "layers.";
  name += std::to_string(layer);
  name += '.';
  name += role;
  return name;
}

// A DFlash drafter (docs/design/speculative-decoding.md §2.1) names its weights like a model's
// under this prefix ("draft.layers.0.q", "draft.final_norm"), plus its context projection. It has
// no embedding and no LM head: it uses the target's.
inline constexpr std::string_view kDraftPrefix = "draft.";
inline constexpr std::string_view kContextFc = "fc";            // [H, n*H], n target layers tapped
inline constexpr std::string_view kContextNorm = "hidden_norm"; // [H], after fc

// "draft.fc", draftWeightName(layerWeightName(0, kQ)) = "draft.layers.0.q"
inline std::string draftWeightName(std::string_view name) {
  std::string prefixed(kDraftPrefix);
  prefixed += name;
  return prefixed;
}

} // namespace dlm::spec
