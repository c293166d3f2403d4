#include "compiler/codegen/ModelKernels.h"

#include "compiler/codegen/Kernels.h"

#include <variant>

namespace dlm::codegen {
namespace {

bool extraFlag(const artifact::ModelConfig &config, const char *name) {
  auto it = config.extra.find(name);
  return it != config.extra.end() && std::holds_alternative<bool>(it->second) &&
         std::get<bool>(it->second);
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

  const bool bidirectional = config.attentionMask == artifact::AttentionMaskKind::bidirectional;
  // Canvas passes see the whole canvas (bidirectional models); prefill and commit passes, and
  // causal models throughout, see keys up to their own position.
  if (bidirectional)
    DLM_RETURN_IF_ERROR(add(generateAttention({config.headDim, config.numHeads, config.numKvHeads,
                                               options.pageSize, MaskKind::bidirectional})));
  DLM_RETURN_IF_ERROR(add(generateAttention(
      {config.headDim, config.numHeads, config.numKvHeads, options.pageSize, MaskKind::causal})));
  DLM_RETURN_IF_ERROR(add(generateRmsNorm({config.hiddenSize})));
  if (extraFlag(config, "qk_norm"))
    DLM_RETURN_IF_ERROR(add(generateRmsNorm({config.headDim})));
  RopeParams rope;
  rope.headDim = config.headDim;
  rope.theta = config.ropeTheta;
  DLM_RETURN_IF_ERROR(add(generateRope(rope)));
  DLM_RETURN_IF_ERROR(add(generateGatedActivation({config.intermediateSize})));
  DLM_RETURN_IF_ERROR(add(generateSampler({config.vocabSize})));

  AcceptParams accept;
  accept.canvas = options.canvas;
  if (options.policy == "entropy-bound") {
    accept.rule = AcceptRule::entropyBound;
  } else {
    accept.rule = options.confidenceThreshold ? AcceptRule::confidenceThreshold : AcceptRule::topK;
    accept.maskAbsorbing = true;
  }
  DLM_RETURN_IF_ERROR(add(generateAccept(accept)));
  // Mask-absorbing models (a mask token) renoise with it; the others with uniform tokens.
  DLM_RETURN_IF_ERROR(add(generateRenoise(
      {config.vocabSize, config.maskTokenId >= 0 ? NoiseKind::maskToken : NoiseKind::uniform})));
  return kernels;
}

} // namespace dlm::codegen
