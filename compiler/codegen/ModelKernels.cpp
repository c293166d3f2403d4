#include "compiler/codegen/ModelKernels.h"

#include "runtime/model/KernelProgram.h"

#include <variant>

namespace dlm::codegen {
namespace {

namespace kp = spec::kernels;

// Keeps each kernel once (by entry point name).
class KernelSet {
public:
  // Adds `kernel` unless it is there already; returns its name.
  StatusOr<std::string> add(StatusOr<KernelSource> kernel) {
    if (!kernel)
      return kernel.status();
    for (const KernelSource &existing : kernels_)
      if (existing.name == kernel->name)
        return existing.name;
    kernels_.push_back(std::move(*kernel));
    return kernels_.back().name;
  }
  std::vector<KernelSource> take() { return std::move(kernels_); }

private:
  std::vector<KernelSource> kernels_;
};

// One record's parameters, with errors that name it.
class RecordView {
public:
  RecordView(const artifact::Kernel &record, size_t index)
      : record_(record), where_("kernel record " + std::to_string(index) + " ('" + record.name +
                                "')") {}

  Status error(const std::string &message) const {
    return Status::error("--target cuda: " + where_ + ": " + message);
  }
  template <typename T> StatusOr<T> get(std::string_view key) const {
    auto it = record_.parameters.find(std::string(key));
    if (it == record_.parameters.end() || !std::holds_alternative<T>(it->second))
      return error("parameter '" + std::string(key) + "' is missing or of the wrong type");
    return std::get<T>(it->second);
  }
  bool has(std::string_view key) const { return record_.parameters.count(std::string(key)) != 0; }
  // The first slot of the comma-separated operand list.
  StatusOr<int64_t> firstOperand() const {
    DLM_ASSIGN_OR_RETURN(std::string list, get<std::string>(kp::kOperands));
    const std::string first = list.substr(0, list.find(','));
    if (first.empty() || first.find_first_not_of("0123456789") != std::string::npos)
      return error("operands '" + list + "' is not a list of slots");
    return std::stoll(first);
  }

private:
  const artifact::Kernel &record_;
  std::string where_;
};

} // namespace

StatusOr<std::vector<KernelSource>> kernelsForProgram(std::vector<artifact::Kernel> &records,
                                                      const WeightShapes &weightShapes,
                                                      const ModelKernelOptions &options) {
  KernelSet kernels;
  const ElementType element = options.element;
  std::map<int64_t, int64_t> slotWidth; // result slot → elements per token row
  for (size_t index = 0; index < records.size(); ++index) {
    artifact::Kernel &record = records[index];
    RecordView r(record, index);
    int64_t width = 0;
    if (r.has(kp::kResult)) {
      DLM_ASSIGN_OR_RETURN(int64_t result, r.get<int64_t>(kp::kResult));
      DLM_ASSIGN_OR_RETURN(width, r.get<int64_t>(kp::kWidth));
      slotWidth[result] = width;
    }
    auto inputWidth = [&]() -> StatusOr<int64_t> {
      DLM_ASSIGN_OR_RETURN(int64_t operand, r.firstOperand());
      auto it = slotWidth.find(operand);
      if (it == slotWidth.end())
        return r.error("operand slot " + std::to_string(operand) + " is no earlier result");
      return it->second;
    };
    // A norm over rows of the norm weight's length (a per-head norm has one row per head).
    auto normOf = [&](std::string_view key) -> StatusOr<KernelSource> {
      DLM_ASSIGN_OR_RETURN(std::string name, r.get<std::string>(key));
      auto shape = weightShapes.find(name);
      if (shape == weightShapes.end() || shape->second.empty())
        return r.error("no weight '" + name + "'");
      return generateRmsNorm({shape->second.back(), true, element});
    };
    StatusOr<KernelSource> kernel = Status::error("");
    const std::string &kind = record.kind;
    if (kind == kp::kLinear) {
      continue; // cuBLASLt
    } else if (kind == kp::kEmbedding) {
      kernel = generateEmbedding({width, element});
    } else if (kind == kp::kRmsNorm) {
      kernel = normOf(kp::kWeight);
    } else if (kind == kp::kNormLinear) {
      kernel = normOf(kp::kNormWeight);
    } else if (kind == kp::kLmHead) {
      if (!r.has(kp::kNormWeight))
        continue;
      kernel = normOf(kp::kNormWeight);
    } else if (kind == kp::kRope) {
      RopeParams rope;
      DLM_ASSIGN_OR_RETURN(rope.headDim, r.get<int64_t>(kp::kHeadDim));
      DLM_ASSIGN_OR_RETURN(rope.theta, r.get<double>(kp::kTheta));
      rope.element = element;
      kernel = generateRope(rope);
    } else if (kind == kp::kKvStore) {
      DLM_ASSIGN_OR_RETURN(int64_t kvWidth, inputWidth());
      kernel = generateKvStore({kvWidth, options.pageSize, element});
    } else if (kind == kp::kAttention) {
      AttentionParams attention;
      DLM_ASSIGN_OR_RETURN(attention.headDim, r.get<int64_t>(kp::kHeadDim));
      DLM_ASSIGN_OR_RETURN(attention.heads, r.get<int64_t>(kp::kHeads));
      DLM_ASSIGN_OR_RETURN(attention.kvHeads, r.get<int64_t>(kp::kKvHeads));
      DLM_ASSIGN_OR_RETURN(std::string mask, r.get<std::string>(kp::kMask));
      if (mask == "causal")
        attention.mask = MaskKind::causal;
      else if (mask == "bidirectional")
        attention.mask = MaskKind::bidirectional;
      else
        return r.error("not supported yet: attention mask '" + mask + "'");
      attention.pageSize = options.pageSize;
      attention.element = element;
      kernel = generateAttention(attention);
    } else if (kind == kp::kSiluMul) {
      kernel = generateGatedActivation({width, Activation::silu, element});
    } else {
      // An add that no GEMM absorbed (dlm-lower-to-kernel-program folds residual adds into the
      // GEMM before them), or a kind this generator does not know.
      return r.error("not supported yet: a CUDA kernel for a '" + kind + "' record");
    }
    if (!kernel)
      return kernel.status().withContext("--target cuda: kernel record " + std::to_string(index) +
                                         " ('" + record.name + "')");
    DLM_ASSIGN_OR_RETURN(std::string name, kernels.add(std::move(kernel)));
    record.parameters[std::string(kp::kCudaKernel)] = name;
  }
  return kernels.take();
}

StatusOr<std::vector<KernelSource>> decodingKernels(const artifact::ModelConfig &config,
                                                    const ModelKernelOptions &options) {
  KernelSet kernels;
  auto add = [&](StatusOr<KernelSource> kernel) -> Status {
    StatusOr<std::string> added = kernels.add(std::move(kernel));
    return added ? Status::ok() : added.status();
  };
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
    return kernels.take();
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
  return kernels.take();
}

} // namespace dlm::codegen
