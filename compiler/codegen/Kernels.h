// The kernel generators: one function per kernel kind, each specialised on the shapes and
// attributes that are fixed when a model is compiled (head dim, head counts, mask kind, page
// size, vocabulary, canvas length, ...). What varies per launch (token counts, KV lengths, block
// tables, temperatures, steps) is a kernel argument. Storage is of the device precision, bf16
// or f32 (a float32 device runs the tiny test models bit-comparably with the CPU backend);
// accumulation is fp32. GEMMs are not generated: they are cuBLASLt's.
//
// Each generator checks its parameters and returns a named error for a shape it cannot serve.
// The kernels' argument lists and grids are documented where each is generated
// (compiler/codegen/kernels/<Kind>.cpp) and repeated in KernelSource::parameters / grid.
#pragma once

#include "compiler/codegen/KernelSource.h"
#include "support/Status.h"

#include <cstdint>
#include <string_view>

namespace dlm::codegen {

enum class ElementType { bf16, f32 };

// The visibility rules of dlm.masked_attention (key and query are positions).
enum class MaskKind {
  causal,                 // key <= query
  bidirectional,          // every key
  blockCausal,            // key / block_size <= query / block_size
  slidingWindow,          // 0 <= query - key < window
  slidingWindowSymmetric, // |query - key| < window
  // DiffusionGemma's decoder on sliding layers: every key at or after the forward's first query
  // position `first` (its first fed token), and keys before it with first - key < window.
  bidirectionalWindow,
};

enum class Activation { silu, geluTanh };

enum class AcceptRule {
  entropyBound,        // by ascending entropy while the entropy accepted before stays <= bound
  confidenceThreshold, // sampled-token probability >= threshold, and the most confident one
  topK,                // the k most confident
};

enum class NoiseKind {
  maskToken, // mask-absorbing: rejected positions hold the mask token
  uniform,   // uniform random token from the counter RNG (renoise / initial stream)
};

// Which rejected positions the renoise kernel gives noise, as the CPU decoder's policies do
// (runtime/sampling/): the two are chosen per policy, not per noise kind.
enum class RenoiseCandidates {
  // Every rejected position, whatever the noise: the entropy-bound canvas re-noises (with mask
  // noise: re-masks) each position it did not accept, also one that held a sampled token.
  everyRejected,
  // Only rejected positions holding the mask token: low-confidence blocks, where a token once
  // unmasked stays. Needs mask noise (uniform noise leaves no mask to find).
  maskedOnly,
};

// The probability the sampler reports as `confidence`, always of the token it picks (the
// Gumbel-max sample at T > 0, the argmax when greedy).
enum class SamplerConfidence {
  // softmax(logits)[token] at temperature 1, whatever T the token was drawn at: what LLaDA's
  // low-confidence remasking and Fast-dLLM's threshold rank by (runtime/sampling/
  // LowConfidence.cpp). Costs a second softmax sum per row when 0 < T != 1.
  unitTemperature,
  // softmax(logits / T)[token]: the probability under the distribution it was drawn from. No
  // CPU policy ranks by it; the entropy-bound policy reads no confidence and takes this cheaper
  // kernel.
  atTemperature,
};

// The widest access (elements, at most 16 bytes) that divides `count` elements of `type`: the
// kernels read rows of `count` elements in accesses of this many, so row strides and base
// pointers handed to them must be multiples of it.
int vectorWidth(ElementType type, int64_t count);

// Bytes of one element: 2 for bf16, 4 for f32.
int elementBytes(ElementType type);

std::string_view elementTypeName(ElementType type); // "bf16", "f32"
std::string_view maskKindName(MaskKind kind);       // "causal", "block_causal", ...
std::string_view activationName(Activation activation);
// `__device__ float activate(float x)`, the activation in fp32, for a generated kernel.
std::string activationFunction(Activation activation);
std::string_view acceptRuleName(AcceptRule rule);
std::string_view noiseKindName(NoiseKind noise);
std::string_view renoiseCandidatesName(RenoiseCandidates candidates); // "every_rejected", ...
std::string_view samplerConfidenceName(SamplerConfidence confidence); // "unit_temperature", ...

// y = x * rsqrt(mean(x^2) + eps) * weight over rows of `width`; one block per row.
struct RmsNormParams {
  int64_t width = 0;
  bool hasWeight = true; // false: the "no-scale" norm
  ElementType element = ElementType::bf16;
};
StatusOr<KernelSource> generateRmsNorm(const RmsNormParams &params);

// NeoX rotary embedding in place: pairs (j, j + rotaryDim/2) for j < frequencyPairs rotate by
// position * theta^(-2j / frequencyDim); other dimensions pass through.
struct RopeParams {
  int64_t headDim = 0;
  int64_t rotaryDim = 0;      // 0: headDim
  int64_t frequencyPairs = 0; // 0: rotaryDim / 2 (fewer: "proportional" RoPE)
  int64_t frequencyDim = 0;   // 0: rotaryDim (the exponent's denominator)
  double theta = 10000.0;
  ElementType element = ElementType::bf16;
};
StatusOr<KernelSource> generateRope(const RopeParams &params);

// Attention through a paged KV cache with online softmax, GQA and a per-request causal flag.
// head_dim is a multiple of 8 in [8, 1024] (multiples of 32 keep every lane busy).
struct AttentionParams {
  int64_t headDim = 0;
  int64_t heads = 0;
  int64_t kvHeads = 0;
  int64_t pageSize = 0;
  MaskKind mask = MaskKind::causal;
  // q, K/V pages and out; scores and accumulation are fp32 either way.
  ElementType element = ElementType::bf16;
  // 0 = chosen from headDim (register and shared-memory budget).
  int64_t rowsPerWarp = 0;
};
StatusOr<KernelSource> generateAttention(const AttentionParams &params);

// out = act(gate) * up, elementwise over rows of `width`.
struct GatedActivationParams {
  int64_t width = 0;
  Activation activation = Activation::silu;
  ElementType element = ElementType::bf16;
};
StatusOr<KernelSource> generateGatedActivation(const GatedActivationParams &params);

// The fused sampler epilogue over [rows x vocab] logits: per row the softmax statistics at the
// request's temperature, entropy, argmax, a Gumbel-max sample and its confidence, in one pass.
struct SamplerParams {
  int64_t vocab = 0;
  ElementType logits = ElementType::f32;
  double softcap = 0; // > 0: logits become softcap * tanh(logits / softcap) first
  int64_t threads = 256;
  SamplerConfidence confidence = SamplerConfidence::unitTemperature;
  // Also write each row's softmax statistics at T (max of z, sum of e^(z - max)). No kernel
  // reads them at present (soft_embedding computes the statistics of its own input rows).
  bool softmaxStatistics = false;
};
StatusOr<KernelSource> generateSampler(const SamplerParams &params);

// The accept rule over one canvas per block, plus the convergence test.
struct AcceptParams {
  int64_t canvas = 0;
  AcceptRule rule = AcceptRule::entropyBound;
  // Only positions holding the mask token are candidates (LLaDA-style); otherwise every position
  // is re-predicted (entropy-bound canvases).
  bool maskAbsorbing = false;
};
StatusOr<KernelSource> generateAccept(const AcceptParams &params);

// The next canvas: kept positions take the sampled token, rejected candidates the noise.
// `initialCanvas` writes noise everywhere (the RNG's initial-canvas stream; `candidates` stays
// everyRejected, the only rule that does not contradict it).
struct RenoiseParams {
  int64_t vocab = 0;
  NoiseKind noise = NoiseKind::uniform;
  bool initialCanvas = false;
  RenoiseCandidates candidates = RenoiseCandidates::everyRejected;
};
StatusOr<KernelSource> generateRenoise(const RenoiseParams &params);

// The device block loop's per-step gate (finished blocks freeze the canvas), for canvases of up
// to `canvas` positions (<= 1024); see kernels/BlockLoopGate.cpp.
struct BlockLoopGateParams {
  int64_t canvas = 0;
};
StatusOr<KernelSource> generateBlockLoopGate(const BlockLoopGateParams &params);

// Token embedding lookup: out row r = table row tokens[r] (a zero row for a token outside the
// table). The table is of the device precision (the backend converts weights at load time).
struct EmbeddingParams {
  int64_t width = 0;
  ElementType element = ElementType::bf16;
  // The looked-up rows times this factor, in float32 (1: a plain copy of the row's bits).
  double scale = 1.0;
};
StatusOr<KernelSource> generateEmbedding(const EmbeddingParams &params);

// New K/V rows of one sequence into its pages: row r to token slot firstSlot + r, addressed
// through the sequence's block table as the attention kernel reads them.
struct KvStoreParams {
  int64_t kvWidth = 0; // kv_heads * head_dim
  int64_t pageSize = 0;
  ElementType element = ElementType::bf16;
};
StatusOr<KernelSource> generateKvStore(const KvStoreParams &params);

// out = a + b over rows of `width` (an add no GEMM absorbed). out may alias a or b.
struct AddParams {
  int64_t width = 0;
  ElementType element = ElementType::bf16;
};
StatusOr<KernelSource> generateAdd(const AddParams &params);

// out = x * factor[0] over rows of `width` (the factor a one-element device tensor): a layer's
// scalar `scale` record. out may alias x.
struct ScaleParams {
  int64_t width = 0;
  ElementType element = ElementType::bf16;
};
StatusOr<KernelSource> generateScale(const ScaleParams &params);

// x = softcap * tanh(x / softcap) in place over float32 logits (the LM head's soft-cap).
struct SoftcapParams {
  double softcap = 0; // > 0
};
StatusOr<KernelSource> generateSoftcap(const SoftcapParams &params);

// A projection weight stored in 8 or 4 bits widened to the device precision for one GEMM:
// out[r, c] = decode(weight[r, c]) * scale[r] (i8, fp8: a row scale) or * scale[r, c / group]
// (i4: f16 group scales, two codes a byte) (cuBLASLt multiplies 8-bit weights only by 8-bit
// activations, and 4-bit ones not at all, so the weights stay narrow in memory and are widened
// per projection).
enum class StoredWeight { i8, fp8E4m3, i4 };
std::string_view storedWeightName(StoredWeight stored); // "i8", "fp8_e4m3", "i4"
struct NarrowWeight {
  StoredWeight stored = StoredWeight::i8;
  int64_t groupSize = 0; // i4: the inputs a scale covers
};
struct WidenWeightParams {
  StoredWeight stored = StoredWeight::i8;
  ElementType element = ElementType::bf16;
  int64_t groupSize = 0; // i4
};
StatusOr<KernelSource> generateWidenWeight(const WidenWeightParams &params);

// Rows of activations to FP8 E4M3 with one f32 scale per row (max|x| / 448), for the FP8 GEMM of
// an FP8 weight on a GPU that has one (sm_90: cuBLASLt multiplies FP8 by FP8 only).
struct QuantizeRowsParams {
  int64_t width = 0; // K, the GEMM's inner dimension
  ElementType element = ElementType::bf16;
};
StatusOr<KernelSource> generateQuantizeRows(const QuantizeRowsParams &params);

// The soft_embedding record: out[row] = scale * softmax(input[row]) @ table[:inputWidth] for
// float32 input rows of a run-time width (<= the table's rows), zero rows without input. The
// row softmax statistics and the [rows x inputWidth] x [inputWidth x width] product fused in one
// kernel (the probabilities are never stored).
struct SoftEmbeddingParams {
  int64_t width = 0; // H
  ElementType element = ElementType::bf16;
};
StatusOr<KernelSource> generateSoftEmbedding(const SoftEmbeddingParams &params);

// The mixture of experts record (runtime/model/KernelProgram.h, kind moe) as four kernels:
// routing (router input norm and scales, the router product, softmax over the experts, top-k,
// renormalisation, expert scales), the per-expert token lists, the grouped expert products
// (gate_up with the gelu_tanh(gate) * up epilogue, then down) and the weighted sum.
struct MoeParams {
  int64_t hidden = 0;      // H
  int64_t experts = 0;     // E
  int64_t topK = 0;        // k
  int64_t expertWidth = 0; // I
  ElementType element = ElementType::bf16;
  // The router input rms-normed and scaled (DiffusionGemma) or read as it is (Qwen3-MoE); the
  // chosen weights renormalised to sum 1 or not; the experts' gate activation.
  bool routerNorm = true;
  bool normalizeTopK = true;
  Activation activation = Activation::geluTanh;
  // LLaDA2's routing: sigmoid scores, the choice among the topGroups best of `groups` groups
  // (the expert bias and the routed scale are launch arguments).
  bool sigmoidScores = false;
  int64_t groups = 1;
  int64_t topGroups = 1;
};
// A named error for sizes the moe kernels do not serve (every moe generator checks them).
Status checkMoeParams(const MoeParams &params);
// choice [tokens, k] (expert ids) and weight [tokens, k] (float32) per token.
StatusOr<KernelSource> generateMoeRoute(const MoeParams &params);
// lists [E, tokens] (slots t * k + j, ascending) and counts [E] from choice.
StatusOr<KernelSource> generateMoePlan(const MoeParams &params);
// The grouped expert GEMMs over each expert's slots: `gated` true: act[slot, I] =
// gelu_tanh(x W_gate^T) * (x W_up^T); false: out[slot, H] = act[slot] W_down^T (float32).
StatusOr<KernelSource> generateMoeExperts(const MoeParams &params, bool gated);
// y[t] = sum over the token's experts, ascending, of weight * out[slot] (float32 sum).
StatusOr<KernelSource> generateMoeCombine(const MoeParams &params);

} // namespace dlm::codegen
