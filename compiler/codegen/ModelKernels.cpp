#include "compiler/codegen/ModelKernels.h"

#include "compiler/codegen/RecordKernels.h"

#include <iterator>
#include <map>
#include <utility>
#include <variant>

namespace dlm::codegen {

// Speculative decoding's row moves (forward_input, select_input_rows, capture): device copies the
// CUDA backend makes itself, no generated kernel.
Status RecordKernels::deviceCopy() { return Status::ok(); }

namespace {

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

// Each kind's generator, in kind order (generated rows).
constexpr Status (RecordKernels::*kGenerators[])() = {
#define DLM_KERNEL_CUDA_KERNELS
#define DLM_KERNEL_HANDLER(kind, member) &RecordKernels::member,
#include "runtime/schema/KernelRecordSpec.inc"
};
static_assert(std::size(kGenerators) == std::size(kp::kKindContracts));

// The record's function and result width; the width is kept for the records that read it.
Status readPlace(const RecordView &r, std::string &function, int64_t &width,
                 SlotWidths &slotWidths) {
  function = std::string(kp::kDefaultFunction);
  if (r.has(kp::kFunction)) {
    DLM_ASSIGN_OR_RETURN(function, r.get<std::string>(kp::kFunction));
  }
  width = 0;
  if (r.has(kp::kResult)) {
    DLM_ASSIGN_OR_RETURN(int64_t result, r.get<int64_t>(kp::kResult));
    DLM_ASSIGN_OR_RETURN(width, r.get<int64_t>(kp::kWidth));
    slotWidths[{function, result}] = width;
  }
  return Status::ok();
}

} // namespace

StatusOr<std::vector<KernelSource>> kernelsForProgram(std::vector<artifact::Kernel> &records,
                                                      const WeightShapes &weightShapes,
                                                      const ModelKernelOptions &options) {
  KernelSet kernels;
  SlotWidths slotWidths;
  for (size_t index = 0; index < records.size(); ++index) {
    artifact::Kernel &record = records[index];
    RecordView r(record, index);
    std::string function;
    int64_t width = 0;
    DLM_RETURN_IF_ERROR(readPlace(r, function, width, slotWidths));
    const kp::KindContract *contract = kp::findKindContract(record.kind);
    if (!contract)
      return r.error("not supported yet: a CUDA kernel for a '" + record.kind + "' record");
    // The kernels the record launches: none, one, or (lm_head with a norm and a soft-cap, moe)
    // several, named in the record's cuda_kernel as a comma-separated list.
    StatusOr<kp::KernelParams> params =
        kp::readKernelParams(static_cast<kp::KernelKind>(contract->kind), record.parameters);
    if (!params)
      return r.error(params.status().message());
    RecordKernels launch(r, *params, function, width, slotWidths, weightShapes, options);
    DLM_RETURN_IF_ERROR((launch.*kGenerators[contract->kind])());
    // The backend refuses such a record without a kernel.
    if (launch.launched.empty() &&
        kp::needsCudaKernel(*contract, record.parameters.count(kp::kNormWeight) != 0))
      return r.error("internal: no CUDA kernel generated for a '" + record.kind + "' record");
    if (launch.launched.empty())
      continue;
    std::string names;
    for (StatusOr<KernelSource> &kernel : launch.launched) {
      if (!kernel)
        return kernel.status().withContext("--target cuda: kernel record " +
                                           std::to_string(index) + " ('" + record.name + "')");
      DLM_ASSIGN_OR_RETURN(std::string name, kernels.add(std::move(kernel)));
      names += (names.empty() ? "" : ",") + name;
    }
    record.parameters[std::string(kp::kCudaKernel)] = names;
  }
  return kernels.take();
}

StatusOr<std::vector<KernelSource>> decodingKernels(const artifact::ModelConfig &config,
                                                    const ModelKernelOptions &options) {
  KernelSet kernels;
  // DiffusionGemma's sampler (the diffusion-gemma decode program) and left-to-right decoding run
  // on the host over the device's forwards: the device block loop serves only the low-confidence
  // and entropy-bound policies, so they need no decoding kernels.
  if (options.hostDecoding)
    return kernels.take();
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
