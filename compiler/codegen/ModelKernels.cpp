#include "compiler/codegen/ModelKernels.h"

#include <variant>

namespace dlm::codegen {
namespace {

bool extraFlag(const artifact::ModelConfig &config, const char *name) {
  auto it = config.extra.find(name);
  return it != config.extra.end() && std::holds_alternative<bool>(it->second) &&
         std::get<bool>(it->second);
}

// The masks the model's passes attend with: its own (canvas passes) and the causal one that
// prefill and commit passes use (and causal models throughout). The sliding kinds read their
// window at launch, so the kernel does not need it.
StatusOr<std::vector<MaskKind>> attentionMasks(artifact::AttentionMaskKind kind) {
  switch (kind) {
  case artifact::AttentionMaskKind::causal:
    return std::vector<MaskKind>{MaskKind::causal};
  case artifact::AttentionMaskKind::bidirectional:
    return std::vector<MaskKind>{MaskKind::bidirectional, MaskKind::causal};
  case artifact::AttentionMaskKind::block_causal:
    return std::vector<MaskKind>{MaskKind::blockCausal, MaskKind::causal};
  case artifact::AttentionMaskKind::sliding_window:
    return std::vector<MaskKind>{MaskKind::slidingWindow};
  case artifact::AttentionMaskKind::symmetric_sliding_window:
    return std::vector<MaskKind>{MaskKind::slidingWindowSymmetric, MaskKind::slidingWindow};
  default:
    return Status::error("not supported yet: CUDA kernels for attention mask '" +
                         std::string(artifact::fb::EnumNameAttentionMaskKind(kind)) + "'");
  }
}

} // namespace

StatusOr<std::vector<KernelSource>> kernelsForModel(const artifact::ModelConfig &config,
                                                    const ModelKernelOptions &options) {
  std::vector<KernelSource> kernels;
  auto add = [&](StatusOr<KernelSource> kernel) -> Status {
    if (!kernel)
      return kernel.status();
    for (const KernelSource &existing : kernels)
      if (existing.name == kernel->name)
        return Status::ok();
    kernels.push_back(std::move(*kernel));
    return Status::ok();
  };
  const ElementType element = options.element;

  DLM_RETURN_IF_ERROR(add(generateEmbedding({config.hiddenSize, element})));
  DLM_RETURN_IF_ERROR(
      add(generateKvStore({config.numKvHeads * config.headDim, options.pageSize, element})));
  DLM_ASSIGN_OR_RETURN(std::vector<MaskKind> masks, attentionMasks(config.attentionMask));
  for (MaskKind mask : masks) {
    AttentionParams attention;
    attention.headDim = config.headDim;
    attention.heads = config.numHeads;
    attention.kvHeads = config.numKvHeads;
    attention.pageSize = options.pageSize;
    attention.mask = mask;
    attention.element = element;
    DLM_RETURN_IF_ERROR(add(generateAttention(attention)));
  }
  // Layer and final norms; with qk_norm also q_norm / k_norm, one row per head.
  DLM_RETURN_IF_ERROR(add(generateRmsNorm({config.hiddenSize, true, element})));
  if (extraFlag(config, "qk_norm"))
    DLM_RETURN_IF_ERROR(add(generateRmsNorm({config.headDim, true, element})));
  RopeParams rope;
  rope.headDim = config.headDim;
  rope.theta = config.ropeTheta;
  rope.element = element;
  DLM_RETURN_IF_ERROR(add(generateRope(rope)));
  // Every supported architecture's MLP is SwiGLU.
  DLM_RETURN_IF_ERROR(
      add(generateGatedActivation({config.intermediateSize, Activation::silu, element})));
  // Logits are f32 at either precision: cuBLASLt writes the LM head's output in f32, which the
  // sampler's softmax statistics want. The sampler, accept and renoise kernels are chosen per
  // policy so that the device makes the CPU decoder's decisions (runtime/sampling/).
  SamplerParams sampler;
  sampler.vocab = config.vocabSize;
  sampler.logits = ElementType::f32;
  AcceptParams accept;
  accept.canvas = options.canvas;
  // The device block loop's gate, between the accept and the renoise kernel of every step.
  DLM_RETURN_IF_ERROR(add(generateBlockLoopGate({options.canvas})));
  if (options.policy == "entropy-bound") {
    // EntropyBound.cpp: accept by the entropy at T over every canvas position; no confidence is
    // read, so the sampler keeps the cheaper one. Every rejected position is renoised, with the
    // noise the request asks for (a run-time knob: mask when the model has a mask token, else
    // uniform; uniform is always possible), and each canvas starts as that noise.
    sampler.confidence = SamplerConfidence::atTemperature;
    DLM_RETURN_IF_ERROR(add(generateSampler(sampler)));
    accept.rule = AcceptRule::entropyBound;
    DLM_RETURN_IF_ERROR(add(generateAccept(accept)));
    std::vector<NoiseKind> noises{NoiseKind::uniform};
    if (config.maskTokenId >= 0)
      noises.push_back(NoiseKind::maskToken);
    for (NoiseKind noise : noises) {
      DLM_RETURN_IF_ERROR(add(generateRenoise(
          {config.vocabSize, noise, false, RenoiseCandidates::everyRejected})));
      DLM_RETURN_IF_ERROR(add(generateRenoise({config.vocabSize, noise, true})));
    }
    return kernels;
  }
  // LowConfidence.cpp: the masked positions of the block are the candidates, ranked by the
  // chosen token's probability at temperature 1 (sampled at T with Gumbel-max); the k most
  // confident (or those over the threshold) take their token and the others stay masked.
  if (config.maskTokenId < 0)
    return Status::error("the low-confidence policy needs a mask token; the model has none");
  sampler.confidence = SamplerConfidence::unitTemperature;
  DLM_RETURN_IF_ERROR(add(generateSampler(sampler)));
  accept.rule = options.confidenceThreshold ? AcceptRule::confidenceThreshold : AcceptRule::topK;
  accept.maskAbsorbing = true;
  DLM_RETURN_IF_ERROR(add(generateAccept(accept)));
  DLM_RETURN_IF_ERROR(add(generateRenoise(
      {config.vocabSize, NoiseKind::maskToken, false, RenoiseCandidates::maskedOnly})));
  return kernels;
}

} // namespace dlm::codegen
