#include "runtime/cuda/CudaBackend.h"

#include "runtime/backend/SequenceForwards.h"
#include "runtime/model/KernelProgram.h"
#include "runtime/model/ModelSpec.h"
#include "runtime/program/RecordProfile.h"
#include "support/FloatFormats.h"
#include "support/SplitText.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <variant>

namespace dlm::cuda {

namespace {

constexpr int64_t kDefaultMaxSequence = 4096;

bool needsKernel(const program::ProgramRecord &record) {
  return spec::kernels::needsCudaKernel(
      spec::kernels::kKindContracts[static_cast<size_t>(record.kind())], record.norm() != nullptr);
}
// cuBLASLt's workspace: what NVIDIA recommends for Hopper, enough for every heuristic.
constexpr size_t kGemmWorkspaceBytes = size_t(32) << 20;

std::string str(int64_t value) { return std::to_string(value); }

// The element type the program's kernels were generated at (every kernel of one compile shares
// it): the "element" parameter of the first kernel a record names.
StatusOr<DeviceElement> kernelPrecision(const std::vector<DeviceKernel> &kernels) {
  for (const DeviceKernel &kernel : kernels) {
    auto element = kernel.record->parameters.find("element");
    if (element == kernel.record->parameters.end() ||
        !std::holds_alternative<std::string>(element->second))
      continue;
    const std::string &name = std::get<std::string>(element->second);
    if (name == "f32")
      return DeviceElement::f32;
    if (name == "bf16")
      return DeviceElement::bf16;
    return Status::error("not supported yet: device precision '" + name +
                         "' (the cuda backend runs f32 or bf16 kernels)");
  }
  return Status::error("the kernel program names no CUDA kernel that records its element type; "
                       "recompile with dlmc compile --target cuda");
}

} // namespace

StatusOr<std::unique_ptr<CudaBackend>>
CudaBackend::create(std::shared_ptr<const CudaDriver> driver, std::shared_ptr<const CublasLt> lt,
                    const artifact::ArtifactReader &artifact,
                    std::shared_ptr<const model::ModelWeights> weights, int64_t maxPositions,
                    const BackendOptions &options, const CudaBackendSettings &settings) {
  if (!driver)
    return Status::error("cuda backend: no CUDA driver");
  if (!lt)
    return Status::error("cuda backend: no cuBLASLt");
  if (!weights)
    return Status::error("cuda backend: no weights");
  std::unique_ptr<CudaBackend> backend(
      new CudaBackend(std::move(driver), std::move(lt), std::move(weights), settings));
  DLM_RETURN_IF_ERROR(backend->initialise(artifact, maxPositions, options));
  return backend;
}

CudaBackend::CudaBackend(std::shared_ptr<const CudaDriver> driver,
                         std::shared_ptr<const CublasLt> lt,
                         std::shared_ptr<const model::ModelWeights> hostWeights,
                         const CudaBackendSettings &settings)
    : driver_(std::move(driver)), lt_(std::move(lt)), hostWeights_(std::move(hostWeights)),
      settings_(settings), dims_(hostWeights_->dims()),
      graphs_(std::make_unique<ForwardGraphs>(driver_, settings.graphs, settings.maxGraphs)) {}

CudaBackend::~CudaBackend() {
  if (context_)
    (void)driver_->cuCtxSetCurrent(context_);
  if (stream_)
    (void)driver_->cuStreamSynchronize(stream_);
  graphs_.reset();
  loopGraphs_.clear();
  timer_.reset(); // its events, while the context is current
  loop_.allocation.release();
  loop_.host.release();
  gemm_.reset();
  weights_.reset();
  kvPool_.release();
  workspace_.release();
  gemmWorkspaceAllocation_.release();
  widenedWeight_.release();
  hostInputs_.release();
  hostLogits_.release();
  modules_.reset();
  if (stream_)
    (void)driver_->cuStreamDestroy(stream_);
  if (ownsPrimaryContext_)
    (void)driver_->cuDevicePrimaryCtxRelease(device_);
}

Status CudaBackend::initialise(const artifact::ArtifactReader &artifact, int64_t maxPositions,
                               const BackendOptions &options) {
  const CudaDriver &d = *driver_;
  DLM_RETURN_IF_ERROR(d.check(d.cuInit(0), "cuInit"));
  int devices = 0;
  DLM_RETURN_IF_ERROR(d.check(d.cuDeviceGetCount(&devices), "cuDeviceGetCount"));
  if (devices < 1)
    return Status::error("cuda backend: the CUDA driver sees no device");
  DLM_RETURN_IF_ERROR(d.check(d.cuDeviceGet(&device_, 0), "cuDeviceGet(0)"));
  DLM_RETURN_IF_ERROR(
      d.check(d.cuDevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain"));
  ownsPrimaryContext_ = true;
  DLM_RETURN_IF_ERROR(d.check(d.cuCtxSetCurrent(context_), "cuCtxSetCurrent"));
  DLM_RETURN_IF_ERROR(
      d.check(d.cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate"));

  DLM_ASSIGN_OR_RETURN(modules_, KernelModules::open(driver_, artifact, device_));
  DLM_RETURN_IF_ERROR(bindProgram(artifact));
  // The precision dlmc recorded must be the one its kernels were generated at.
  const artifact::Attributes &extra = artifact.config().extra;
  auto recorded = extra.find(spec::kExtraDevicePrecision);
  if (recorded != extra.end() && (!std::holds_alternative<std::string>(recorded->second) ||
                                  std::get<std::string>(recorded->second) != elementName(element_)))
    return Status::error("artifact records device_precision " +
                         (std::holds_alternative<std::string>(recorded->second)
                              ? "'" + std::get<std::string>(recorded->second) + "'"
                              : std::string("of the wrong type")) +
                         " but its kernels were generated at " + elementName(element_));
  // The synchronous uploads may still be in flight on the legacy stream, which the non-blocking
  // stream does not wait for.
  DLM_RETURN_IF_ERROR(driver_->check(driver_->cuCtxSynchronize(), "weights: cuCtxSynchronize"));

  DeviceAllocation gemmWorkspace;
  gemmWorkspaceBytes_ = kGemmWorkspaceBytes;
  DLM_RETURN_IF_ERROR(
      gemmWorkspace.allocate(driver_, gemmWorkspaceBytes_, "cuBLASLt workspace"));
  gemmWorkspace_ = gemmWorkspace.pointer();
  gemmWorkspaceAllocation_ = std::move(gemmWorkspace);
  DLM_ASSIGN_OR_RETURN(gemm_, LinearGemm::create(lt_, gemmWorkspace_, gemmWorkspaceBytes_,
                                                  options.batchInvariant));

  // The KV pool: the page size is the one the attention and kv_store kernels were built for.
  pageTokens_ = 0;
  for (const auto &[name, function] : functions_) {
    for (size_t i = 0; i < function.bound.size(); ++i) {
      const program::ProgramRecord &record = function.program.kernels[i];
      if (record.kind() != program::KernelKind::attention &&
          record.kind() != program::KernelKind::kvStore)
        continue;
      const int64_t page = function.bound[i].kernel.integer("page_size");
      if (page <= 0 || (pageTokens_ != 0 && page != pageTokens_))
        return Status::error("kernel " + function.bound[i].kernel.record->name + " of record '" +
                             record.fullName + "' records page_size " + str(page) +
                             (pageTokens_ ? " where others record " + str(pageTokens_) : ""));
      pageTokens_ = page;
    }
  }
  if (pageTokens_ <= 0)
    return Status::error("the kernel program has no attention record");
  if (options.kvPageTokens != pageTokens_)
    return Status::error("not supported yet: a KV page of " + str(options.kvPageTokens) +
                         " tokens on the cuda backend, whose kernels were generated for pages of " +
                         str(pageTokens_) + " (the page size is fixed when dlmc compiles them)");
  int64_t maxSequence = options.maxSequenceLength;
  if (maxSequence <= 0)
    maxSequence = maxPositions > 0 ? maxPositions : kDefaultMaxSequence;
  if (maxPositions > 0 && maxSequence > maxPositions)
    return Status::error("cuda backend: max sequence length " + str(maxSequence) +
                         " exceeds the model's " + str(maxPositions) + " positions");
  maxSequenceLength_ = maxSequence;
  profiler_ = options.profiler;
  if (profiler_)
    timer_ = std::make_unique<KernelTimer>(driver_);
  int64_t pages = options.kvPages;
  if (pages <= 0)
    pages = (maxSequence + pageTokens_ - 1) / pageTokens_;
  if (pages > INT32_MAX)
    return Status::error("cuda backend: " + str(pages) + " KV pages is too many");
  kvPageCount_ = pages;
  // Each layer's K and V regions at its own width (the kv_store records'; a layer without one
  // keeps no cache).
  size_t poolBytes = 0;
  kvOffsets_.clear();
  for (int64_t width : kvWidths_) {
    kvOffsets_.push_back(poolBytes);
    poolBytes += static_cast<size_t>(2 * pages * pageTokens_ * width) * elementBytes(element_);
  }
  DLM_RETURN_IF_ERROR(kvPool_.allocate(driver_, std::max<size_t>(poolBytes, 1), "KV pool"));
  kv_ = std::make_unique<kv::PagedKvCache>(
      static_cast<int32_t>(pages), static_cast<int32_t>(pageTokens_),
      [this](kv::PageIndex from, kv::PageIndex to) {
        Status copied = copyPage(from, to);
        if (!copied.isOk() && pageCopyStatus_.isOk())
          pageCopyStatus_ = copied;
      });
  if (options.sharePrefixes) {
    std::vector<const program::KernelProgram *> all;
    for (const auto &[name, function] : functions_)
      all.push_back(&function.program);
    for (auto &[name, function] : functions_) {
      function.sharesPrefix = kvDependsOnPrefixOnly(function.program, all);
      if (function.sharesPrefix)
        kv_->enablePrefixSharing();
    }
  }
  sequence_ = kv_->create();
  return Status::ok();
}

Status CudaBackend::supports(const program::ProgramRecord &record) const {
  using program::KernelKind;
  if (record.kind() == KernelKind::rope && record.as<spec::kernels::RopeParams>().rotatedPairs <= 0)
    return Status::error("not supported yet: a rope record that rotates no pair (record '" +
                         record.fullName + "') on cuda");
  if (needsKernel(record) && record.cudaKernel.empty())
    return Status::error("kernel record '" + record.fullName +
                         "' names no CUDA kernel; recompile with dlmc compile --target cuda");
  return Status::ok();
}

Status CudaBackend::bindRecord(const program::KernelProgram &program,
                               const program::ProgramRecord &record, BoundRecord &bound,
                               std::vector<DeviceKernel> &kernels) {
  using program::KernelKind;
  auto mismatch = [&](const std::string &what) {
    return Status::error("kernel record '" + record.fullName + "' (cuda_kernel '" +
                         record.cudaKernel + "'): " + what +
                         "; recompile with dlmc compile --target cuda");
  };
  for (std::string_view name : splitList(record.cudaKernel, ',')) {
    DLM_ASSIGN_OR_RETURN(DeviceKernel kernel, modules_->named(name));
    kernels.push_back(kernel);
    const std::string &kind = kernel.record->kind;
    if (kind == "softcap")
      bound.softcap = kernel;
    else if (kind == "moe_route")
      bound.moeRoute = kernel;
    else if (kind == "moe_plan")
      bound.moePlan = kernel;
    else if (kind == "moe_experts") {
      const std::string *stage = kernel.text("stage");
      (stage && *stage == "gate_up" ? bound.moeGateUp : bound.moeDown) = kernel;
    } else if (kind == "moe_combine")
      bound.moeCombine = kernel;
    else if (kind == "widen_weight")
      bound.widen = kernel;
    else if (kind == "quantize_rows")
      bound.quantize = kernel;
    else
      bound.kernel = kernel;
  }
  // Kernels of an older dlmc would compute something else than the record asks: refuse by name.
  switch (record.kind()) {
  case KernelKind::moe:
    if (!bound.moeRoute.function || !bound.moePlan.function || !bound.moeGateUp.function ||
        !bound.moeDown.function || !bound.moeCombine.function)
      return mismatch("a moe record needs its route, plan, gate_up, down and combine kernels");
    break;
  case KernelKind::lmHead: {
    const std::optional<double> softcap = record.as<spec::kernels::LmHeadParams>().softcap;
    if (softcap &&
        (!bound.softcap.function || bound.softcap.record->parameters.count("softcap") == 0 ||
         std::get<double>(bound.softcap.record->parameters.at("softcap")) != *softcap))
      return mismatch("no soft-cap kernel of cap " + std::to_string(*softcap));
    if (record.norm() && !bound.kernel.function)
      return mismatch("no norm kernel");
    break;
  }
  case KernelKind::attention: {
    const std::string *mask = bound.kernel.text("mask");
    const std::string name = mask ? *mask : std::string();
    const bool windowed = name == "sliding_window" || name == "bidirectional_window";
    const int64_t window = record.as<spec::kernels::AttentionParams>().window.value_or(0);
    if (windowed != (window > 0))
      return mismatch(window > 0 ? "a window of " + str(window) + " but an unwindowed '" + name +
                                       "' kernel"
                                 : "a windowed kernel for an unwindowed record");
    break;
  }
  case KernelKind::embedding: {
    const double scale = bound.kernel.record->parameters.count("scale")
                             ? std::get<double>(bound.kernel.record->parameters.at("scale"))
                             : 1.0;
    if (scale != record.as<spec::kernels::EmbeddingParams>().scale)
      return mismatch("an embedding kernel of another scale");
    break;
  }
  default:
    if (needsKernel(record) && !bound.kernel.function)
      return mismatch("no kernel for the record");
    break;
  }
  if (kLaunchers[static_cast<size_t>(record.kind())] != &CudaBackend::enqueueDeclared)
    return Status::ok();
  if (!bound.kernel.function)
    return mismatch("no kernel for the record");
  Status declared = bindDeclaredLaunch(program, record, bound);
  return declared.isOk() ? declared : mismatch(declared.message());
}

Status CudaBackend::bindProgram(const artifact::ArtifactReader &artifact) {
  const artifact::KernelTarget *records = artifact.findKernelTarget(spec::kernels::kTarget);
  if (!records)
    return Status::error("artifact '" + artifact.path() +
                         "' has no kernel program; recompile it with dlmc compile --target cuda");
  std::map<std::string, program::KernelProgram> programs;
  DLM_ASSIGN_OR_RETURN(programs, program::KernelProgram::buildFunctions(
                                     records->kernels, *hostWeights_,
                                     program::KernelProgram::ProjectionWeights::stored));
  // Every function's records, so that one this backend cannot run fails by name now.
  for (const auto &[name, function] : programs)
    for (const program::ProgramRecord &record : function.kernels)
      DLM_RETURN_IF_ERROR(supports(record));
  std::vector<DeviceKernel> kernels;
  std::vector<std::string> weightNames;
  std::set<std::string> narrowWeights; // the weights of records that widen theirs
  for (auto &[name, built] : programs) {
    Function &function = functions_[name];
    function.program = std::move(built);
    const program::KernelProgram &program = function.program;
    rowElements_ = std::max(rowElements_, program.rowElements);
    normRowElements_ = std::max(normRowElements_, program.normRowElements);
    forwardInputWidth_ = std::max(forwardInputWidth_, program.forwardInputWidth);
    captureWidth_ = std::max(captureWidth_, program.captureWidth);
    // Every function agrees on the layers' K/V widths (buildFunctions checks it).
    if (kvWidths_.empty())
      kvWidths_ = program.kvLayerWidths;
    function.bound.assign(program.kernels.size(), BoundRecord{});
    for (size_t i = 0; i < program.kernels.size(); ++i) {
      const program::ProgramRecord &record = program.kernels[i];
      DLM_RETURN_IF_ERROR(bindRecord(program, record, function.bound[i], kernels));
      for (const spec::kernels::WeightRef *weight : record.weights())
        weightNames.push_back(weight->name);
      if (function.bound[i].widen.function && record.weightParameter())
        narrowWeights.insert(record.weightParameter()->name);
      if (record.kind() == program::KernelKind::softEmbedding)
        softEmbeddingRows_ = std::max(softEmbeddingRows_, record.weight()->rows);
      if (record.kind() == program::KernelKind::moe) {
        const auto &moe = record.as<spec::kernels::MoeParams>();
        moeHidden_ = std::max(moeHidden_, program.slots[static_cast<size_t>(record.result)].width);
        moeExperts_ = std::max(moeExperts_, moe.experts);
        moeTopK_ = std::max(moeTopK_, moe.topK);
        moeWidth_ = std::max(moeWidth_, record.expertWidth);
      }
    }
  }
  auto defaultFunction = functions_.find(spec::kernels::kDefaultFunction);
  default_ = defaultFunction == functions_.end() ? nullptr : &defaultFunction->second;
  DLM_ASSIGN_OR_RETURN(element_, kernelPrecision(kernels));
  DLM_ASSIGN_OR_RETURN(weights_, DeviceWeights::upload(driver_, *hostWeights_, weightNames,
                                                       element_, narrowWeights));
  auto device = [&](const spec::kernels::WeightRef *weight) {
    return weight ? weights_->find(weight->name) : nullptr;
  };
  for (auto &[name, function] : functions_) {
    for (size_t i = 0; i < function.program.kernels.size(); ++i) {
      const program::ProgramRecord &record = function.program.kernels[i];
      BoundRecord &bound = function.bound[i];
      bound.weight = device(record.weightParameter());
      bound.bias = device(record.biasParameter());
      bound.norm = device(record.normParameter());
      bound.launchName = record.fullName + ": cuLaunchKernel";
      for (BoundRecord::DeclaredArgument &argument : bound.declared)
        if (!argument.weightName.empty() &&
            !(argument.weight = weights_->find(argument.weightName)))
          return Status::error("kernel record '" + record.fullName + "': weight '" +
                               argument.weightName + "' is not on the device");
      if (record.kind() == program::KernelKind::moe) {
        const auto &p = record.as<spec::kernels::MoeParams>();
        bound.moe = {device(&p.router),     device(&p.routerScale), device(&p.expertScale),
                     device(&p.expertBias), device(&p.gateUp),      device(&p.down)};
      }
      DLM_RETURN_IF_ERROR(checkNarrowWeight(record, bound));
    }
  }
  DLM_RETURN_IF_ERROR(chooseFp8Gemms());
  return allocateWidenedWeight();
}

StatusOr<bool> CudaBackend::hasFp8Gemms() const {
  int major = 0, minor = 0;
  DLM_RETURN_IF_ERROR(driver_->check(
      driver_->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device_),
      "cuDeviceGetAttribute(compute capability major)"));
  DLM_RETURN_IF_ERROR(driver_->check(
      driver_->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device_),
      "cuDeviceGetAttribute(compute capability minor)"));
  return major == 9 && minor == 0;
}

Status CudaBackend::chooseFp8Gemms() {
  bool any = false;
  for (auto &[name, function] : functions_)
    for (const BoundRecord &bound : function.bound)
      any = any || bound.quantize.function;
  if (!any)
    return Status::ok();
  DLM_ASSIGN_OR_RETURN(bool device, hasFp8Gemms());
  for (auto &[name, function] : functions_)
    for (BoundRecord &bound : function.bound) {
      // cuBLASLt's FP8 GEMMs want 16-byte leading dimensions (K codes, `out` outputs) and a
      // bf16 bias: an f32 device's bias records widen instead.
      const DeviceTensor *w = bound.weight;
      bound.fp8Gemm = device && bound.quantize.function && w &&
                      w->narrow == artifact::DType::fp8_e4m3 && w->cols % 16 == 0 &&
                      (w->rows * static_cast<int64_t>(elementBytes(element_))) % 16 == 0 &&
                      !(bound.bias && element_ != DeviceElement::bf16);
      if (bound.fp8Gemm)
        fp8InputWidth_ = std::max(fp8InputWidth_, w->cols);
    }
  return Status::ok();
}

Status CudaBackend::checkNarrowWeight(const program::ProgramRecord &record,
                                      const BoundRecord &bound) const {
  const bool narrow = bound.weight && bound.weight->narrow != artifact::DType::invalid;
  const std::string weightName =
      record.weightParameter() ? record.weightParameter()->name : std::string();
  if (!bound.widen.function) {
    if (narrow)
      return Status::error("kernel record '" + record.fullName + "' reads narrow weight '" +
                           weightName +
                           "', which another record widens, at the device "
                           "precision; recompile with dlmc compile --target cuda");
    return Status::ok();
  }
  auto stored = bound.widen.record->parameters.find("stored");
  const std::string kernelStored = stored != bound.widen.record->parameters.end() &&
                                           std::holds_alternative<std::string>(stored->second)
                                       ? std::get<std::string>(stored->second)
                                       : std::string();
  const std::string weightStored =
      narrow ? std::string(artifact::fb::EnumNameDType(bound.weight->narrow)) : "";
  if (kernelStored != weightStored)
    return Status::error("kernel record '" + record.fullName + "' widens a '" + kernelStored +
                         "' weight but '" + weightName + "' is stored as '" + weightStored +
                         "'; recompile with dlmc compile --target cuda");
  if (bound.weight->narrow == artifact::DType::i4 &&
      bound.widen.integer("group") != bound.weight->groupSize)
    return Status::error(
        "kernel record '" + record.fullName + "' widens an i4 weight in groups of " +
        std::to_string(bound.widen.integer("group")) + " but '" + weightName + "' has groups of " +
        std::to_string(bound.weight->groupSize) + "; recompile with dlmc compile --target cuda");
  if (bound.quantize.function) {
    auto width = bound.quantize.record->parameters.find("width");
    if (width == bound.quantize.record->parameters.end() ||
        !std::holds_alternative<int64_t>(width->second) ||
        std::get<int64_t>(width->second) != bound.weight->cols)
      return Status::error("kernel record '" + record.fullName +
                           "' quantizes rows of another width than its weight's " +
                           std::to_string(bound.weight->cols) +
                           " inputs; recompile with dlmc compile --target cuda");
  }
  return Status::ok();
}

StatusOr<const CudaBackend::Function *> CudaBackend::function(std::string_view name) const {
  return findFunction(functions_, name);
}

StatusOr<sampling::LogitsView>
CudaBackend::forwardBatch(std::string_view name, const std::vector<SequenceForward> &forwards) {
  // The captured rows are the last forward's, whatever happens to this one.
  captured_ = {};
  const Function *program = nullptr;
  DLM_ASSIGN_OR_RETURN(program, function(name));
  // Preparing an extend may copy shared KV pages on this thread's stream.
  DLM_RETURN_IF_ERROR(driver_->check(driver_->cuCtxSetCurrent(context_), "cuCtxSetCurrent"));
  // More parts than the input buffers hold grow them (nothing reserved yet: the forward's
  // checks name what is missing).
  if (reservedTokens_ > 0 && static_cast<int64_t>(forwards.size()) > reservedParts_)
    DLM_RETURN_IF_ERROR(reserveBuffers(reservedTokens_, reservedLogitRows_,
                                       static_cast<int64_t>(forwards.size())));
  StatusOr<sampling::LogitsView> logits = forwardPacked(
      *kv_, program->program, forwards,
      [&](std::vector<PackedPart> &parts, bool *wrote) { return runParts(*program, parts, wrote); },
      program->sharesPrefix);
  const int64_t captureWidth = program->program.captureWidth;
  if (logits && captureWidth > 0)
    captured_ = sampling::LogitsView{capture_.data(), packedFedTokens(forwards), captureWidth};
  return logits;
}

StatusOr<sampling::LogitsView> CudaBackend::runParts(const Function &function,
                                                     std::vector<PackedPart> &parts,
                                                     bool *wroteKv) {
  const model::ModelDims &d = dims_;
  DLM_ASSIGN_OR_RETURN(const PackedSize size, layOutParts(parts, reservedTokens_,
                                                          reservedLogitRows_, d.embeddingSize));
  const int64_t count = size.tokens, logitRows = size.logitRows;
  const float *hostLogits = static_cast<const float *>(hostLogits_.data());
  if (count == 0)
    return sampling::LogitsView{hostLogits, 0, d.vocabSize};
  // The forward is timed on the host up to the logits' arrival there; its records on the device
  // (timer_), from its first copy in on.
  profile::Scope forward(profiler_, profile::Category::forward, "forward",
                         profile::TrackKind::thread, 0, -1, count);
  DLM_RETURN_IF_ERROR(driver_->check(driver_->cuCtxSetCurrent(context_), "cuCtxSetCurrent"));
  if (__builtin_expect(timer_ != nullptr, 0))
    DLM_RETURN_IF_ERROR(timer_->start(stream_, profiler_->nowNs()));
  for (const PackedPart &part : parts)
    DLM_RETURN_IF_ERROR(kv_->append(part.sequence, part.span.keys - kv_->length(part.sequence)));
  DLM_RETURN_IF_ERROR(pageCopyStatus_);
  peakKvPages_ = std::max<int64_t>(peakKvPages_, kv_->pageCount() - kv_->freePages());

  // One part is the single-sequence forward, keyed by its shape for the graphs.
  const PackedPart &first = parts.front();
  Shape shape{count, first.span.first, first.span.keys, first.rows.begin, first.rows.end, inputs_};
  shape.function = &function;
  shape.inputWidth = first.input.rows ? first.input.width : 0;
  shape.inputRows = first.input.rows ? std::min(first.input.count, count) : 0;
  shape.inputFirst = first.input.rows ? first.input.first : 0;
  shape.parts = &parts;
  DLM_RETURN_IF_ERROR(uploadParts(parts, inputs_));
  DLM_RETURN_IF_ERROR(uploadInputRows(function, parts, count));
  if (wroteKv)
    *wroteKv = true;
  DLM_RETURN_IF_ERROR(enqueueRun(shape, parts.size()));
  if (logitRows > 0)
    DLM_RETURN_IF_ERROR(driver_->check(
        driver_->cuMemcpyDtoHAsync(hostLogits_.data(), logits_,
                                   static_cast<size_t>(logitRows * d.vocabSize) * sizeof(float),
                                   stream_),
        "forward: copying the logits out (cuMemcpyDtoHAsync)"));
  const size_t captureBytes =
      static_cast<size_t>(count * function.program.captureWidth) * elementBytes(element_);
  if (captureBytes > 0)
    DLM_RETURN_IF_ERROR(driver_->check(
        driver_->cuMemcpyDtoHAsync(hostCapture_.data(), captureRows_, captureBytes, stream_),
        "forward: copying the captured rows out (cuMemcpyDtoHAsync)"));
  DLM_RETURN_IF_ERROR(
      driver_->check(driver_->cuStreamSynchronize(stream_), "forward: cuStreamSynchronize"));
  if (__builtin_expect(timer_ != nullptr, 0))
    DLM_RETURN_IF_ERROR(timer_->record(*profiler_));
  if (captureBytes > 0)
    DLM_RETURN_IF_ERROR(downloadCapture(function, count));
  return sampling::LogitsView{hostLogits, logitRows, d.vocabSize};
}

Status CudaBackend::enqueueRun(const Shape &shape, size_t partCount) {
  // Profiled, each record is bracketed by CUDA events, which a graph's replay would not record
  // between its records: every profiled forward runs eagerly, never captured nor replayed.
  if (__builtin_expect(timer_ != nullptr, 0))
    return enqueueForward(shape, /*timed=*/true);
  if (partCount == 1)
    return graphs_->run(stream_, shape.key(), [&] { return enqueueForward(shape); });
  // Several parts run without graph capture: a packed run's shape (its parts and their row
  // counts, spans and logit rows) rarely repeats under continuous batching. Bucketing packed
  // shapes for graphs is left for later (docs/design/serving.md §2).
  return enqueueForward(shape);
}

Status CudaBackend::uploadInputRows(const Function &function,
                                    const std::vector<PackedPart> &parts, int64_t count) {
  const int64_t width = function.program.forwardInputWidth;
  if (width == 0) {
    // Soft embeddings read float rows, one per fed token; each part's after the previous ones'.
    size_t at = 0;
    for (const PackedPart &part : parts) {
      const size_t bytes = static_cast<size_t>(partInputFloats(part)) * sizeof(float);
      if (bytes > 0)
        DLM_RETURN_IF_ERROR(driver_->check(
            driver_->cuMemcpyHtoDAsync(inputRows_ + at, part.input.rows, bytes, stream_),
            "forward: copying the input rows in (cuMemcpyHtoDAsync)"));
      at += bytes;
    }
    return Status::ok();
  }
  if (function.program.kernels.end() !=
      std::find_if(function.program.kernels.begin(), function.program.kernels.end(),
                   [](const program::ProgramRecord &k) {
                     return k.kind() == program::KernelKind::softEmbedding;
                   }))
    return Status::error("not supported yet: a function with both soft_embedding and "
                         "forward_input records on cuda");
  // Staged at the device precision, each part's rows at its offset and the rows past its input
  // zero: the record is a plain copy.
  const size_t e = elementBytes(element_);
  std::memset(stagedInput_.data(), 0, static_cast<size_t>(count * width) * e);
  for (const PackedPart &part : parts) {
    const int64_t values = (part.input.rows ? part.input.count : 0) * width;
    uint8_t *to = stagedInput_.data() + static_cast<size_t>(part.offset * width) * e;
    if (element_ == DeviceElement::f32) {
      if (values > 0)
        std::memcpy(to, part.input.rows, static_cast<size_t>(values) * e);
      continue;
    }
    uint16_t *staged = reinterpret_cast<uint16_t *>(to);
    for (int64_t i = 0; i < values; ++i)
      staged[i] = bf16FromFloat(part.input.rows[i]);
  }
  // Synchronous: the staging buffer is pageable and reused by the next forward.
  return driver_->check(driver_->cuMemcpyHtoD(inputRows_, stagedInput_.data(),
                                              static_cast<size_t>(count * width) * e),
                        "forward: copying the input rows in (cuMemcpyHtoD)");
}

Status CudaBackend::downloadCapture(const Function &function, int64_t count) {
  const program::KernelProgram &program = function.program;
  const program::ProgramRecord *capture = nullptr;
  for (const program::ProgramRecord &k : program.kernels)
    if (k.kind() == program::KernelKind::capture)
      capture = &k;
  if (!capture)
    return Status::error("cuda backend: internal error: a capture width without a record");
  const int64_t total = program.captureWidth;
  const int64_t w = total / static_cast<int64_t>(capture->operands.size());
  // [operand][T, w] on the device → [T, operand * w] floats.
  for (int64_t block = 0; block < total / w; ++block)
    for (int64_t r = 0; r < count; ++r) {
      float *to = capture_.data() + r * total + block * w;
      const int64_t from = (block * count + r) * w;
      if (element_ == DeviceElement::f32) {
        std::memcpy(to, static_cast<const float *>(hostCapture_.data()) + from,
                    static_cast<size_t>(w) * sizeof(float));
        continue;
      }
      const uint16_t *bits = static_cast<const uint16_t *>(hostCapture_.data()) + from;
      for (int64_t j = 0; j < w; ++j)
        to[j] = floatFromBf16(bits[j]);
    }
  return Status::ok();
}

Status CudaBackend::uploadInputs(const int32_t *tokens, const Shape &shape) {
  std::vector<PackedPart> parts{PackedPart{sequence_, tokens,
                                           ForwardSpan{shape.first, shape.count, shape.keys},
                                           sampling::LogitRows{shape.rowsBegin, shape.rowsEnd},
                                           ForwardInput{}}};
  return uploadParts(parts, shape.inputs);
}

Status CudaBackend::uploadParts(const std::vector<PackedPart> &parts, CUdeviceptr inputs) {
  int32_t *host = static_cast<int32_t *>(hostInputs_.data());
  const InputLayout layout = inputLayout();
  const int64_t count = static_cast<int64_t>(parts.size());
  if (count > reservedParts_)
    return Status::error("cuda backend: internal error: " + str(count) + " parts, " +
                         str(reservedParts_) + " reserved");
  for (int64_t p = 0; p < count; ++p) {
    const PackedPart &part = parts[static_cast<size_t>(p)];
    const int64_t at = part.offset;
    std::memcpy(host + at, part.tokens, static_cast<size_t>(part.span.count) * sizeof(int32_t));
    for (int64_t i = 0; i < part.span.count; ++i)
      host[layout.positions + at + i] = static_cast<int32_t>(part.span.first + i);
    host[layout.queryStarts + p] = static_cast<int32_t>(at);
    host[layout.queryStarts + p + 1] = static_cast<int32_t>(at + part.span.count);
    host[layout.kvLengths + p] = static_cast<int32_t>(part.span.keys);
    std::memcpy(host + layout.inputScales + p, &part.input.scale, sizeof(float));
    const std::vector<kv::PageIndex> &table = kv_->blockTable(part.sequence);
    if (static_cast<int64_t>(table.size()) > tablePages_)
      return Status::error("forward: the sequence holds " + str(table.size()) +
                           " KV pages, more than the " + str(tablePages_) + " reserved");
    std::copy(table.begin(), table.end(), host + layout.blockTables + p * tablePages_);
  }
  // Up to the last part's block table (a single part's ends where its table does).
  const PackedPart &last = parts.back();
  const size_t used = static_cast<size_t>(layout.blockTables + (count - 1) * tablePages_ +
                                          static_cast<int64_t>(
                                              kv_->blockTable(last.sequence).size())) *
                      sizeof(int32_t);
  return driver_->check(driver_->cuMemcpyHtoDAsync(inputs, host, used, stream_),
                        "forward: copying the inputs in (cuMemcpyHtoDAsync)");
}

Status CudaBackend::copyPage(kv::PageIndex from, kv::PageIndex to) {
  const size_t e = elementBytes(element_);
  for (size_t layer = 0; layer < kvWidths_.size(); ++layer) {
    const size_t pageBytes = static_cast<size_t>(pageTokens_ * kvWidths_[layer]) * e;
    if (pageBytes == 0)
      continue;
    const size_t regionBytes = static_cast<size_t>(kvPageCount_) * pageBytes;
    for (int64_t region = 0; region < 2; ++region) {
      const CUdeviceptr base =
          kvPool_.pointer() + kvOffsets_[layer] + static_cast<size_t>(region) * regionBytes;
      DLM_RETURN_IF_ERROR(driver_->check(
          driver_->cuMemcpyDtoDAsync(base + static_cast<size_t>(to) * pageBytes,
                                     base + static_cast<size_t>(from) * pageBytes, pageBytes,
                                     stream_),
          "KV page copy: cuMemcpyDtoDAsync"));
    }
  }
  return Status::ok();
}

MemoryUsage CudaBackend::memoryUsage() const {
  MemoryUsage usage;
  usage.weightBytes = weights_ ? weights_->bytes() : 0;
  usage.convertedWeightBytes = usage.weightBytes;
  int64_t widths = 0;
  for (int64_t width : kvWidths_)
    widths += width;
  const size_t pageBytes =
      static_cast<size_t>(2 * pageTokens_ * widths) * elementBytes(element_);
  usage.kvPoolBytes = kvPool_.bytes();
  usage.kvInUseBytes = static_cast<size_t>(kv_->pageCount() - kv_->freePages()) * pageBytes;
  usage.kvPeakBytes = static_cast<size_t>(peakKvPages_) * pageBytes;
  usage.activationBytes =
      workspace_.bytes() + gemmWorkspaceAllocation_.bytes() + widenedWeight_.bytes();
  return usage;
}

} // namespace dlm::cuda
