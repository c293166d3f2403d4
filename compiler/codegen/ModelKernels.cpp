#include "compiler/codegen/ModelKernels.h"

#include "runtime/model/KernelParams.h"
#include "runtime/model/KernelProgram.h"

#include <iterator>
#include <map>
#include <utility>
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
  const std::string &kind() const { return record_.kind; }
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

// Result slot → elements per token row, per forward function (each numbers its own slots).
using SlotWidths = std::map<std::pair<std::string, int64_t>, int64_t>;

// The CUDA kernels one record launches: a member per kind (runtime/schema/KernelOps.td names
// it), each adding to `launched` what its record needs (nothing: cuBLASLt alone, or a device
// copy in runtime/cuda/CudaBackend.cpp).
class RecordKernels {
public:
  RecordKernels(const RecordView &r, const kp::KernelParams &params, std::string function,
                int64_t width, const SlotWidths &slotWidths, const WeightShapes &weightShapes,
                const ModelKernelOptions &options)
      : r(r), params(params), function(std::move(function)), width(width), element(options.element),
        slotWidths(slotWidths), weightShapes(weightShapes), options(options) {}

  // Each kind's generator, named by runtime/schema/KernelOps.td (rope for rope; gatedActivation
  // for silu_mul and gelu_mul, deviceCopy for the records the runtime runs as device copies).
#define DLM_KERNEL_CUDA_KERNELS_MEMBERS
#define DLM_KERNEL_MEMBER(member) Status member();
#include "runtime/schema/KernelRecordSpec.inc"

  std::vector<StatusOr<KernelSource>> launched;

private:
  // The width of the first operand's slot.
  StatusOr<int64_t> inputWidth() const {
    DLM_ASSIGN_OR_RETURN(int64_t operand, r.firstOperand());
    auto it = slotWidths.find({function, operand});
    if (it == slotWidths.end())
      return r.error("operand slot " + std::to_string(operand) + " is no earlier result");
    return it->second;
  }
  template <typename P> const P &as() const { return std::get<P>(params); }
  StatusOr<std::vector<int64_t>> shapeOf(const kp::WeightRef &weight) const {
    auto shape = weightShapes.find(weight.name);
    if (shape == weightShapes.end() || shape->second.empty())
      return r.error("no weight '" + weight.name + "'");
    return shape->second;
  }
  // A norm over rows of the norm weight's length (a per-head norm has one row per head).
  StatusOr<KernelSource> normOf(const kp::WeightRef &weight) const {
    DLM_ASSIGN_OR_RETURN(std::vector<int64_t> shape, shapeOf(weight));
    return generateRmsNorm({shape.back(), true, element});
  }
  // A narrow projection weight is widened before its cuBLASLt GEMM; an FP8 one may instead
  // meet FP8 activations in an FP8 GEMM where the GPU has one (the runtime chooses).
  Status widenIfNarrow(const kp::WeightRef &weight) {
    auto narrow = options.narrowWeights.find(weight.name);
    if (narrow == options.narrowWeights.end())
      return Status::ok();
    launched.push_back(generateWidenWeight({narrow->second, element}));
    if (narrow->second == StoredWeight::fp8E4m3) {
      DLM_ASSIGN_OR_RETURN(std::vector<int64_t> shape, shapeOf(weight));
      launched.push_back(generateQuantizeRows({shape.back(), element}));
    }
    return Status::ok();
  }

  const RecordView &r;
  const kp::KernelParams &params;
  const std::string function;
  const int64_t width; // the result's (0: none)
  const ElementType element;
  const SlotWidths &slotWidths;
  const WeightShapes &weightShapes;
  const ModelKernelOptions &options;
};

Status RecordKernels::embedding() {
  launched.push_back(generateEmbedding({width, element, as<kp::EmbeddingParams>().scale}));
  return Status::ok();
}

Status RecordKernels::rmsNorm() {
  const auto &p = as<kp::RmsNormParams>();
  launched.push_back(p.weight ? normOf(p.weight)
                              : generateRmsNorm({p.normWidth.value_or(width), false, element}));
  return Status::ok();
}

Status RecordKernels::normLinear() {
  const auto &p = as<kp::NormLinearParams>();
  launched.push_back(normOf(p.normWeight));
  return widenIfNarrow(p.weight);
}

Status RecordKernels::linear() { return widenIfNarrow(as<kp::LinearParams>().weight); }

Status RecordKernels::lmHead() {
  const auto &p = as<kp::LmHeadParams>();
  if (p.normWeight)
    launched.push_back(normOf(p.normWeight));
  if (p.softcap && *p.softcap > 0)
    launched.push_back(generateSoftcap({*p.softcap}));
  return Status::ok();
}

Status RecordKernels::kvStore() {
  DLM_ASSIGN_OR_RETURN(int64_t kvWidth, inputWidth());
  launched.push_back(generateKvStore({kvWidth, options.pageSize, element}));
  return Status::ok();
}

Status RecordKernels::gatedActivation() {
  const bool silu = std::holds_alternative<kp::SiluMulParams>(params);
  launched.push_back(
      generateGatedActivation({width, silu ? Activation::silu : Activation::geluTanh, element}));
  return Status::ok();
}

// An add no GEMM absorbed (dlm-lower-to-kernel-program folds a residual add into the GEMM
// before it when it can).
Status RecordKernels::add() {
  launched.push_back(generateAdd({width, element}));
  return Status::ok();
}

Status RecordKernels::scale() {
  launched.push_back(generateScale({width, element}));
  return Status::ok();
}

Status RecordKernels::softEmbedding() {
  launched.push_back(generateSoftEmbedding({width, element}));
  return Status::ok();
}

Status RecordKernels::deviceCopy() { return Status::ok(); }

Status RecordKernels::rope() {
  const auto &p = as<kp::RopeParams>();
  RopeParams rope;
  rope.headDim = p.headDim;
  rope.theta = p.theta;
  if (p.rotatedPairs < p.headDim / 2) {
    // Gemma's proportional RoPE: the first pairs rotate at the frequencies of the whole head.
    if (p.rotatedPairs <= 0)
      return r.error("not supported yet: a rope record that rotates no pair");
    rope.frequencyPairs = p.rotatedPairs;
    rope.frequencyDim = p.headDim;
  }
  rope.element = element;
  launched.push_back(generateRope(rope));
  return Status::ok();
}

Status RecordKernels::attention() {
  const auto &p = as<kp::AttentionParams>();
  AttentionParams attention;
  attention.headDim = p.headDim;
  attention.heads = p.heads;
  attention.kvHeads = p.kvHeads;
  const bool windowed = p.window.value_or(0) > 0;
  if (p.mask == kp::AttentionMask::causal)
    attention.mask = windowed ? MaskKind::slidingWindow : MaskKind::causal;
  else
    attention.mask = windowed ? MaskKind::bidirectionalWindow : MaskKind::bidirectional;
  attention.pageSize = options.pageSize;
  attention.element = element;
  launched.push_back(generateAttention(attention));
  return Status::ok();
}

Status RecordKernels::moe() {
  const auto &p = as<kp::MoeParams>();
  MoeParams moe;
  moe.element = element;
  moe.experts = p.experts;
  moe.topK = p.topK;
  // The generated experts kernel fuses GELU's tanh approximation.
  if (p.activation != kp::MoeActivation::geluTanh)
    return r.error("not supported yet: expert activation '" + std::string(nameOf(p.activation)) +
                   "' on CUDA");
  DLM_ASSIGN_OR_RETURN(std::vector<int64_t> router, shapeOf(p.router));
  DLM_ASSIGN_OR_RETURN(std::vector<int64_t> gateUp, shapeOf(p.gateUp));
  if (router.size() != 2 || gateUp.size() != 3 || gateUp[1] % 2 != 0)
    return r.error("moe weights of unexpected ranks (router [E, H], gate_up [E, 2I, H])");
  moe.hidden = router[1];
  moe.expertWidth = gateUp[1] / 2;
  launched.push_back(generateMoeRoute(moe));
  launched.push_back(generateMoePlan(moe));
  launched.push_back(generateMoeExperts(moe, true));
  launched.push_back(generateMoeExperts(moe, false));
  launched.push_back(generateMoeCombine(moe));
  return Status::ok();
}

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
