#include "runtime/cuda/CudaBackend.h"

#include "runtime/model/KernelProgram.h"
#include "runtime/model/ModelSpec.h"
#include "runtime/backend/SequenceForwards.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <variant>

namespace dlm::cuda {

namespace {

constexpr int64_t kDefaultMaxSequence = 4096;

// A linear record, and an lm_head without a fused norm, run as cuBLASLt GEMMs alone.
bool runsAsGemmOnly(const program::ProgramRecord &record) {
  return record.kind == program::KernelKind::linear ||
         (record.kind == program::KernelKind::lmHead && !record.norm);
}
// cuBLASLt's workspace: what NVIDIA recommends for Hopper, enough for every heuristic.
constexpr size_t kGemmWorkspaceBytes = size_t(32) << 20;

std::string str(int64_t value) { return std::to_string(value); }

unsigned ceilDiv(int64_t value, int64_t divisor) {
  return static_cast<unsigned>((value + divisor - 1) / divisor);
}

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
  loop_.allocation.release();
  loop_.host.release();
  gemm_.reset();
  weights_.reset();
  kvPool_.release();
  workspace_.release();
  gemmWorkspaceAllocation_.release();
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
  DLM_ASSIGN_OR_RETURN(gemm_, LinearGemm::create(lt_, gemmWorkspace_, gemmWorkspaceBytes_));

  // The KV pool: the page size is the one the attention and kv_store kernels were built for.
  pageTokens_ = 0;
  for (size_t i = 0; i < bound_.size(); ++i) {
    const program::ProgramRecord &record = program_.kernels[i];
    if (record.kind != program::KernelKind::attention &&
        record.kind != program::KernelKind::kvStore)
      continue;
    const int64_t page = bound_[i].kernel.integer("page_size");
    if (page <= 0 || (pageTokens_ != 0 && page != pageTokens_))
      return Status::error("kernel " + bound_[i].kernel.record->name + " of record '" +
                           record.fullName + "' records page_size " + str(page) +
                           (pageTokens_ ? " where others record " + str(pageTokens_) : ""));
    pageTokens_ = page;
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
  int64_t pages = options.kvPages;
  if (pages <= 0)
    pages = (maxSequence + pageTokens_ - 1) / pageTokens_;
  if (pages > INT32_MAX)
    return Status::error("cuda backend: " + str(pages) + " KV pages is too many");
  kvPageCount_ = pages;
  const size_t poolBytes = static_cast<size_t>(2 * dims_.layers * pages * pageTokens_ *
                                               dims_.kvWidth()) *
                           elementBytes(element_);
  DLM_RETURN_IF_ERROR(kvPool_.allocate(driver_, poolBytes, "KV pool"));
  kv_ = std::make_unique<kv::PagedKvCache>(
      static_cast<int32_t>(pages), static_cast<int32_t>(pageTokens_),
      [this](kv::PageIndex from, kv::PageIndex to) {
        Status copied = copyPage(from, to);
        if (!copied.isOk() && pageCopyStatus_.isOk())
          pageCopyStatus_ = copied;
      });
  sequence_ = kv_->create();
  return Status::ok();
}

Status CudaBackend::supports(const program::ProgramRecord &record) const {
  using program::KernelKind;
  auto refuse = [&](const std::string &what) {
    return Status::error("not supported yet: " + what + " (record '" + record.fullName +
                         "') on cuda");
  };
  // The compiler folds residual adds into the GEMM before them, and dlmc generates no CUDA
  // kernels for a program with another add.
  if (record.kind == KernelKind::add)
    return Status::error("not supported yet: add record '" + record.fullName + "' on cuda");
  if (!record.function.empty() && record.function != spec::kernels::kDefaultFunction)
    return refuse("forward function '" + record.function + "'");
  switch (record.kind) {
  case KernelKind::scale:
    return refuse("kernel kind 'scale'");
  case KernelKind::geluMul:
    return refuse("kernel kind 'gelu_mul'");
  case KernelKind::softEmbedding:
    return refuse("kernel kind 'soft_embedding'");
  case KernelKind::moe:
    return refuse("kernel kind 'moe'");
  case KernelKind::embedding:
    if (record.scale != 1.0)
      return refuse("an embedding scale");
    break;
  case KernelKind::rmsNorm:
    if (record.weightName.empty())
      return refuse("an rms_norm without weight");
    break;
  case KernelKind::rope:
    if (record.rotatedPairs != record.headDim / 2)
      return refuse("rope of some pairs (rotated_pairs)");
    break;
  case KernelKind::attention:
    if (record.window > 0)
      return refuse("an attention window");
    if (record.scale != 1.0 / std::sqrt(static_cast<double>(record.headDim)))
      return refuse("an attention scale other than 1 / sqrt(head_dim)");
    break;
  case KernelKind::lmHead:
    if (record.softcap > 0)
      return refuse("a logit softcap");
    break;
  default:
    break;
  }
  if (!runsAsGemmOnly(record) && record.cudaKernel.empty())
    return Status::error("kernel record '" + record.fullName +
                         "' names no CUDA kernel; recompile with dlmc compile --target cuda");
  return Status::ok();
}

Status CudaBackend::bindProgram(const artifact::ArtifactReader &artifact) {
  const artifact::KernelTarget *records = artifact.findKernelTarget(spec::kernels::kTarget);
  if (!records)
    return Status::error("artifact '" + artifact.path() +
                         "' has no kernel program; recompile it with dlmc compile --target cuda");
  std::map<std::string, program::KernelProgram> functions;
  DLM_ASSIGN_OR_RETURN(functions,
                       program::KernelProgram::buildFunctions(records->kernels, *hostWeights_));
  // Every function's records, so that one this backend cannot run fails by name now.
  for (const auto &[name, function] : functions)
    for (const program::ProgramRecord &record : function.kernels)
      DLM_RETURN_IF_ERROR(supports(record));
  auto defaultFunction = functions.find(std::string(spec::kernels::kDefaultFunction));
  if (defaultFunction == functions.end())
    return Status::error("the kernel program has no '" +
                         std::string(spec::kernels::kDefaultFunction) + "' function");
  program_ = std::move(defaultFunction->second);
  // The KV pool is uniform: every layer of ModelDims::kvWidth().
  for (size_t layer = 0; layer < program_.kvLayerWidths.size(); ++layer)
    if (program_.kvLayerWidths[layer] != 0 && program_.kvLayerWidths[layer] != dims_.kvWidth())
      return Status::error("not supported yet: layer " + str(static_cast<int64_t>(layer)) +
                           " keeps K/V of " + str(program_.kvLayerWidths[layer]) +
                           " values per token, not the model's " + str(dims_.kvWidth()) +
                           " (per-layer KV widths on cuda)");
  std::vector<DeviceKernel> kernels;
  std::vector<std::string> weightNames;
  bound_.assign(program_.kernels.size(), BoundRecord{});
  for (size_t i = 0; i < program_.kernels.size(); ++i) {
    const program::ProgramRecord &record = program_.kernels[i];
    DLM_RETURN_IF_ERROR(supports(record));
    if (!runsAsGemmOnly(record)) {
      DLM_ASSIGN_OR_RETURN(bound_[i].kernel, modules_->named(record.cudaKernel));
      kernels.push_back(bound_[i].kernel);
    }
    for (const std::string &name : record.tensorNames())
      weightNames.push_back(name);
  }
  DLM_ASSIGN_OR_RETURN(element_, kernelPrecision(kernels));
  DLM_ASSIGN_OR_RETURN(weights_,
                       DeviceWeights::upload(driver_, *hostWeights_, weightNames, element_));
  for (size_t i = 0; i < program_.kernels.size(); ++i) {
    const program::ProgramRecord &record = program_.kernels[i];
    auto device = [&](const std::string &name) {
      return name.empty() ? nullptr : weights_->find(name);
    };
    bound_[i].weight = device(record.weightName);
    bound_[i].bias = device(record.biasName);
    bound_[i].norm = device(record.normWeightName);
  }
  return Status::ok();
}

Status CudaBackend::reserve(int64_t tokens, int64_t logitRows) {
  if (tokens > maxSequenceLength_)
    return Status::error("a sequence of " + str(tokens) +
                         " tokens exceeds the session's maximum of " + str(maxSequenceLength_));
  logitRows = std::min(logitRows, tokens);
  if (tokens <= reservedTokens_ && logitRows <= reservedLogitRows_)
    return Status::ok();
  tokens = std::max(tokens, reservedTokens_);
  logitRows = std::max(logitRows, reservedLogitRows_);
  DLM_RETURN_IF_ERROR(driver_->check(driver_->cuCtxSetCurrent(context_), "cuCtxSetCurrent"));
  DLM_RETURN_IF_ERROR(driver_->check(driver_->cuStreamSynchronize(stream_),
                                     "reserve: cuStreamSynchronize"));
  // Graphs read the old buffers' addresses.
  graphs_->clear();
  clearLoopGraphs();

  const model::ModelDims &d = dims_;
  const size_t e = elementBytes(element_);
  auto rows = [&](int64_t count, int64_t width) { return static_cast<size_t>(count * width) * e; };
  const int64_t maxPages = kv_->pagesFor(maxSequenceLength_);
  ArenaLayout layout;
  const size_t activations = layout.add(rows(tokens, program_.rowElements));
  const size_t normed = layout.add(rows(tokens, program_.normRowElements));
  const size_t headInput = layout.add(rows(logitRows, d.hidden));
  const size_t logits = layout.add(static_cast<size_t>(logitRows * d.vocabSize) * sizeof(float));
  inputBytes_ = static_cast<size_t>(2 * tokens + 3 + maxPages) * sizeof(int32_t);
  const size_t inputs = layout.add(inputBytes_);
  const size_t loopInputs = layout.add(inputBytes_);

  // Nothing is reserved until every allocation succeeds (allocate frees the old buffer first).
  reservedTokens_ = 0;
  reservedLogitRows_ = 0;
  DLM_RETURN_IF_ERROR(workspace_.allocate(driver_, layout.size(), "activation workspace"));
  const CUdeviceptr base = workspace_.pointer();
  activations_ = base + activations;
  normed_ = base + normed;
  headInput_ = base + headInput;
  logits_ = base + logits;
  inputs_ = base + inputs;
  loopInputs_ = base + loopInputs;
  DLM_RETURN_IF_ERROR(hostInputs_.allocate(driver_, inputBytes_, "forward inputs (pinned)"));
  DLM_RETURN_IF_ERROR(hostLogits_.allocate(
      driver_, static_cast<size_t>(logitRows * d.vocabSize) * sizeof(float), "logits (pinned)"));
  reservedTokens_ = tokens;
  reservedLogitRows_ = logitRows;
  return Status::ok();
}

StatusOr<sampling::LogitsView> CudaBackend::forwardFull(const int32_t *tokens, int64_t count,
                                                        int64_t keep, sampling::LogitRows rows) {
  return forwardFullOnSequence(*kv_, sequence_, tokens, count, keep, rows,
                               [this](auto... arguments) { return run(arguments...); });
}

StatusOr<sampling::LogitsView> CudaBackend::forwardCached(const int32_t *tokens, int64_t count,
                                                          int64_t keep, sampling::LogitRows rows) {
  return forwardCachedOnSequence(*kv_, sequence_, tokens, count, keep, rows,
                                 [this](auto... arguments) { return run(arguments...); });
}

StatusOr<sampling::LogitsView> CudaBackend::forwardWindow(const int32_t *tokens, int64_t count,
                                                          int64_t feedBegin, int64_t feedEnd,
                                                          sampling::LogitRows rows) {
  return forwardWindowOnSequence(*kv_, sequence_, tokens, count, feedBegin, feedEnd, rows,
                                 [this](auto... arguments) { return run(arguments...); });
}

StatusOr<sampling::LogitsView> CudaBackend::run(const int32_t *tokens, const ForwardSpan &span,
                                                sampling::LogitRows rows) {
  const model::ModelDims &d = dims_;
  const int64_t count = span.count;
  DLM_RETURN_IF_ERROR(checkForwardArguments(tokens, span, rows, reservedTokens_,
                                            reservedLogitRows_, d.embeddingSize));
  const float *hostLogits = static_cast<const float *>(hostLogits_.data());
  if (count == 0)
    return sampling::LogitsView{hostLogits, 0, d.vocabSize};
  // The device work is timed as one span up to the logits' arrival on the host; per-kernel
  // device timings (events) are not recorded.
  profile::Scope forward(profiler_, profile::Category::forward, "forward",
                         profile::TrackKind::thread, 0, -1, count);
  DLM_RETURN_IF_ERROR(driver_->check(driver_->cuCtxSetCurrent(context_), "cuCtxSetCurrent"));
  DLM_RETURN_IF_ERROR(kv_->append(sequence_, span.keys - kv_->length(sequence_)));
  DLM_RETURN_IF_ERROR(pageCopyStatus_);
  peakKvPages_ = std::max<int64_t>(peakKvPages_, kv_->pageCount() - kv_->freePages());

  const Shape shape{count, span.first, span.keys, rows.begin, rows.end, inputs_};
  DLM_RETURN_IF_ERROR(uploadInputs(tokens, shape));
  DLM_RETURN_IF_ERROR(
      graphs_->run(stream_, shape.key(), [&] { return enqueueForward(shape); }));
  if (rows.count() > 0)
    DLM_RETURN_IF_ERROR(driver_->check(
        driver_->cuMemcpyDtoHAsync(hostLogits_.data(), logits_,
                                   static_cast<size_t>(rows.count() * d.vocabSize) *
                                       sizeof(float),
                                   stream_),
        "forward: copying the logits out (cuMemcpyDtoHAsync)"));
  DLM_RETURN_IF_ERROR(
      driver_->check(driver_->cuStreamSynchronize(stream_), "forward: cuStreamSynchronize"));
  return sampling::LogitsView{hostLogits, rows.count(), d.vocabSize};
}

Status CudaBackend::uploadInputs(const int32_t *tokens, const Shape &shape) {
  // Layout (int32): tokens [T], positions [T], queryStarts [2], kvLengths [1], blockTable.
  int32_t *host = static_cast<int32_t *>(hostInputs_.data());
  const int64_t T = reservedTokens_;
  std::memcpy(host, tokens, static_cast<size_t>(shape.count) * sizeof(int32_t));
  for (int64_t i = 0; i < shape.count; ++i)
    host[T + i] = static_cast<int32_t>(shape.first + i);
  host[2 * T] = 0;
  host[2 * T + 1] = static_cast<int32_t>(shape.count);
  host[2 * T + 2] = static_cast<int32_t>(shape.keys);
  const std::vector<kv::PageIndex> &table = kv_->blockTable(sequence_);
  const int64_t maxPages = kv_->pagesFor(maxSequenceLength_);
  if (static_cast<int64_t>(table.size()) > maxPages)
    return Status::error("forward: the sequence holds " + str(table.size()) +
                         " KV pages, more than the " + str(maxPages) + " reserved");
  std::copy(table.begin(), table.end(), host + 2 * T + 3);
  const size_t used = static_cast<size_t>(2 * T + 3 + static_cast<int64_t>(table.size())) *
                      sizeof(int32_t);
  return driver_->check(driver_->cuMemcpyHtoDAsync(shape.inputs, host, used, stream_),
                        "forward: copying the inputs in (cuMemcpyHtoDAsync)");
}

Status CudaBackend::launch(const DeviceKernel &kernel, unsigned gridX, unsigned gridY,
                           unsigned gridZ, void **arguments, const char *what) {
  if (gridX == 0 || gridY == 0 || gridZ == 0)
    return Status::ok();
  return driver_->check(driver_->cuLaunchKernel(kernel.function, gridX, gridY, gridZ,
                                                kernel.blockThreads, 1, 1, 0, stream_, arguments,
                                                nullptr),
                        what);
}

Status CudaBackend::rmsNorm(const DeviceKernel &kernel, CUdeviceptr x, int64_t xStride,
                            CUdeviceptr y, int64_t yStride, CUdeviceptr weight, int64_t rows,
                            int64_t rowsPerToken, double eps, const char *what) {
  long long xTokenStride = xStride, yTokenStride = yStride;
  int rowCount = static_cast<int>(rows), perToken = static_cast<int>(rowsPerToken);
  float epsilon = static_cast<float>(eps);
  void *arguments[] = {&x,      &xTokenStride, &y,        &yTokenStride,
                       &weight, &rowCount,     &perToken, &epsilon};
  return launch(kernel, static_cast<unsigned>(rows), 1, 1, arguments, what);
}

Status CudaBackend::linear(const char *name, CUdeviceptr x, int64_t rows,
                           const DeviceTensor &weight, const DeviceTensor &bias, CUdeviceptr y,
                           bool accumulate) {
  LinearCall call;
  call.input = element_;
  call.output = element_;
  call.x = x;
  call.weight = weight.data;
  call.bias = bias.data;
  call.y = y;
  call.rows = rows;
  call.in = weight.cols;
  call.out = weight.rows;
  call.accumulate = accumulate;
  return gemm_->run(stream_, call, name);
}

CUdeviceptr CudaBackend::slot(int64_t index, int64_t count) const {
  const program::SlotPlace &place = program_.slots[static_cast<size_t>(index)];
  return activations_ + static_cast<size_t>(place.offset * count) * elementBytes(element_);
}

Status CudaBackend::enqueueForward(const Shape &shape) {
  for (size_t i = 0; i < program_.kernels.size(); ++i)
    DLM_RETURN_IF_ERROR(enqueueRecord(program_.kernels[i], bound_[i], shape));
  return Status::ok();
}

Status CudaBackend::enqueueRecord(const program::ProgramRecord &k, const BoundRecord &bound,
                                  const Shape &shape) {
  using program::KernelKind;
  const int64_t count = shape.count;
  const std::vector<int64_t> &in = k.operands;
  auto widthOf = [&](int64_t s) { return program_.slots[static_cast<size_t>(s)].width; };
  const int64_t width = k.result >= 0 ? widthOf(k.result) : 0;
  const size_t e = elementBytes(element_);
  const std::string what = k.fullName + ": cuLaunchKernel";
  int tokens = static_cast<int>(count);
  const CUdeviceptr positions =
      shape.inputs + static_cast<size_t>(reservedTokens_) * sizeof(int32_t);
  const CUdeviceptr queryStarts =
      positions + static_cast<size_t>(reservedTokens_) * sizeof(int32_t);
  const CUdeviceptr kvLengths = queryStarts + 2 * sizeof(int32_t);
  const CUdeviceptr blockTable = kvLengths + sizeof(int32_t);
  // Layer `k.layer`'s K and V pages: the pool is [layer][K|V][page][slot][kvWidth].
  const int64_t kvWidth = dims_.kvWidth();
  const long long slotStride = kvWidth, pageStride = pageTokens_ * kvWidth;
  const size_t regionBytes = static_cast<size_t>(kvPageCount_ * pageStride) * e;
  CUdeviceptr kPages = kvPool_.pointer() + static_cast<size_t>(2 * std::max<int64_t>(k.layer, 0)) *
                                               regionBytes;
  CUdeviceptr vPages = kPages + regionBytes;
  // An out-of-place result of an in-place kernel starts as a copy of its operand.
  auto copyRows = [&](CUdeviceptr to, CUdeviceptr from, int64_t rowWidth) -> Status {
    if (to == from)
      return Status::ok();
    return driver_->check(driver_->cuMemcpyDtoDAsync(to, from,
                                                     static_cast<size_t>(count * rowWidth) * e,
                                                     stream_),
                          (k.fullName + ": cuMemcpyDtoDAsync").c_str());
  };

  switch (k.kind) {
  case KernelKind::embedding: {
    CUdeviceptr tokenIds = shape.inputs, table = bound.weight->data, out = slot(k.result, count);
    long long tableRows = bound.weight->rows, outStride = width;
    void *arguments[] = {&tokenIds, &tokens, &table, &tableRows, &out, &outStride};
    return launch(bound.kernel, static_cast<unsigned>(count), 1, 1, arguments, what.c_str());
  }
  case KernelKind::rmsNorm: {
    // A norm weight shorter than the row normalises each head of the row (q/k norm).
    const int64_t n = bound.weight->cols;
    return rmsNorm(bound.kernel, slot(in[0], count), width, slot(k.result, count), width,
                   bound.weight->data, count * (width / n), width / n, k.eps, what.c_str());
  }
  case KernelKind::normLinear:
  case KernelKind::linear: {
    CUdeviceptr x = slot(in[0], count);
    if (k.kind == KernelKind::normLinear) {
      const int64_t n = widthOf(in[0]);
      if (!k.reusesNorm)
        DLM_RETURN_IF_ERROR(rmsNorm(bound.kernel, x, n, normed_, n, bound.norm->data, count, 1,
                                    k.eps, what.c_str()));
      x = normed_;
    }
    const CUdeviceptr y = slot(k.result, count);
    // The folded residual add: cuBLASLt's C == D with beta = 1, in place on the residual.
    if (k.accumulate)
      DLM_RETURN_IF_ERROR(copyRows(y, slot(in[1], count), width));
    return linear(k.fullName.c_str(), x, count, *bound.weight,
                  bound.bias ? *bound.bias : DeviceTensor{}, y, k.accumulate);
  }
  case KernelKind::rope: {
    CUdeviceptr x = slot(k.result, count);
    DLM_RETURN_IF_ERROR(copyRows(x, slot(in[0], count), width));
    long long tokenStride = width;
    int headCount = static_cast<int>(k.heads);
    CUdeviceptr positionArg = positions;
    void *arguments[] = {&x, &tokenStride, &headCount, &tokens, &positionArg};
    return launch(bound.kernel, static_cast<unsigned>(count), 1, 1, arguments, what.c_str());
  }
  case KernelKind::kvStore: {
    CUdeviceptr kArg = slot(in[0], count), vArg = slot(in[1], count), tableArg = blockTable;
    long long rowStride = kvWidth, pageStrideArg = pageStride, slotStrideArg = slotStride;
    int firstSlot = static_cast<int>(shape.first);
    void *arguments[] = {&kArg,      &vArg,   &rowStride, &tokens,        &tableArg,
                         &firstSlot, &kPages, &vPages,    &pageStrideArg, &slotStrideArg};
    return launch(bound.kernel, static_cast<unsigned>(count), 1, 1, arguments, what.c_str());
  }
  case KernelKind::attention: {
    CUdeviceptr qArg = slot(in[0], count), startsArg = queryStarts, positionArg = positions,
                lengthArg = kvLengths, causalFlags = 0, outArg = slot(k.result, count),
                tableArg = blockTable;
    long long qStride = widthOf(in[0]), outStride = width, pageStrideArg = pageStride,
              slotStrideArg = slotStride;
    int maxPages = static_cast<int>(kv_->pagesFor(maxSequenceLength_));
    int window = 0, blockSize = 1;
    float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(k.headDim)));
    void *arguments[] = {&qArg,          &qStride,   &kPages,    &vPages,    &pageStrideArg,
                         &slotStrideArg, &tableArg,  &maxPages,  &startsArg, &positionArg,
                         &lengthArg,     &causalFlags, &window,  &blockSize, &scale,
                         &outArg,        &outStride};
    const int64_t group = k.heads / k.kvHeads;
    const int64_t rowsPerBlock =
        (bound.kernel.blockThreads / 32) * bound.kernel.integer("rows_per_warp", 1);
    return launch(bound.kernel, ceilDiv(count * group, rowsPerBlock),
                  static_cast<unsigned>(k.kvHeads), 1, arguments, what.c_str());
  }
  case KernelKind::siluMul: {
    CUdeviceptr gateArg = slot(in[0], count), upArg = slot(in[1], count),
                outArg = slot(k.result, count);
    long long gateStride = width, upStride = width, outStride = width;
    void *arguments[] = {&gateArg, &gateStride, &upArg, &upStride, &outArg, &outStride, &tokens};
    // Over-covering the row is harmless: the kernel drops chunks past its width.
    return launch(bound.kernel, ceilDiv(width, bound.kernel.blockThreads),
                  static_cast<unsigned>(count), 1, arguments, what.c_str());
  }
  case KernelKind::add:
  case KernelKind::scale:
  case KernelKind::geluMul:
  case KernelKind::softEmbedding:
  case KernelKind::moe:
    // supports() refused them when the program was bound.
    return Status::error("cuda backend: internal error: record '" + k.fullName +
                         "' of a kind the cuda backend does not run reached a forward");
  case KernelKind::lmHead:
    return enqueueLogits(k, bound, shape);
  }
  return Status::error("cuda backend: internal error: unhandled kernel kind");
}

Status CudaBackend::enqueueLogits(const program::ProgramRecord &k, const BoundRecord &bound,
                                  const Shape &shape) {
  const int64_t n = shape.rowsEnd - shape.rowsBegin;
  if (n == 0)
    return Status::ok();
  const int64_t hidden = program_.slots[static_cast<size_t>(k.operands[0])].width;
  const size_t rowBytes = static_cast<size_t>(hidden) * elementBytes(element_);
  const CUdeviceptr x = slot(k.operands[0], shape.count);
  auto row = [&](CUdeviceptr base, int64_t r) { return base + static_cast<size_t>(r) * rowBytes; };
  // The rows the head reads: Dream's logit shift predicts row r at fed row r - 1 and row 0 keeps
  // its own, so rows [b, e) read [b-1, e-1) (b > 0) or row 0 then rows [0, e-1). Normalised
  // straight into the head's input rows, or copied there without a norm.
  auto stage = [&](int64_t from, int64_t to, int64_t rows) -> Status {
    if (rows == 0)
      return Status::ok();
    if (bound.norm)
      return rmsNorm(bound.kernel, row(x, from), hidden, row(headInput_, to), hidden,
                     bound.norm->data, rows, 1, k.eps, (k.fullName + ": norm").c_str());
    return driver_->check(driver_->cuMemcpyDtoDAsync(row(headInput_, to), row(x, from),
                                                     static_cast<size_t>(rows) * rowBytes,
                                                     stream_),
                          (k.fullName + ": cuMemcpyDtoDAsync").c_str());
  };
  if (!k.logitShift) {
    DLM_RETURN_IF_ERROR(stage(shape.rowsBegin, 0, n));
  } else if (shape.rowsBegin > 0) {
    DLM_RETURN_IF_ERROR(stage(shape.rowsBegin - 1, 0, n));
  } else {
    DLM_RETURN_IF_ERROR(stage(0, 0, 1));
    DLM_RETURN_IF_ERROR(stage(0, 1, n - 1));
  }
  // Only the first vocabSize rows of the head (a padded embedding's extra rows are never
  // logits), written as float32 whatever the precision.
  LinearCall call;
  call.input = element_;
  call.output = DeviceElement::f32;
  call.x = headInput_;
  call.weight = bound.weight->data;
  call.y = logits_;
  call.rows = n;
  call.in = hidden;
  call.out = program_.slots[static_cast<size_t>(k.result)].width;
  return gemm_->run(stream_, call, k.fullName.c_str());
}

Status CudaBackend::copyPage(kv::PageIndex from, kv::PageIndex to) {
  const size_t pageBytes =
      static_cast<size_t>(pageTokens_ * dims_.kvWidth()) * elementBytes(element_);
  const size_t regionBytes = static_cast<size_t>(kvPageCount_) * pageBytes;
  for (int64_t region = 0; region < 2 * dims_.layers; ++region) {
    const CUdeviceptr base = kvPool_.pointer() + static_cast<size_t>(region) * regionBytes;
    DLM_RETURN_IF_ERROR(driver_->check(
        driver_->cuMemcpyDtoDAsync(base + static_cast<size_t>(to) * pageBytes,
                                   base + static_cast<size_t>(from) * pageBytes, pageBytes,
                                   stream_),
        "KV page copy: cuMemcpyDtoDAsync"));
  }
  return Status::ok();
}

MemoryUsage CudaBackend::memoryUsage() const {
  MemoryUsage usage;
  usage.weightBytes = weights_ ? weights_->bytes() : 0;
  usage.convertedWeightBytes = usage.weightBytes;
  const size_t pageBytes = static_cast<size_t>(2 * dims_.layers * pageTokens_ * dims_.kvWidth()) *
                           elementBytes(element_);
  usage.kvPoolBytes = kvPool_.bytes();
  usage.kvInUseBytes = static_cast<size_t>(kv_->pageCount() - kv_->freePages()) * pageBytes;
  usage.kvPeakBytes = static_cast<size_t>(peakKvPages_) * pageBytes;
  usage.activationBytes = workspace_.bytes() + gemmWorkspaceAllocation_.bytes();
  return usage;
}

} // namespace dlm::cuda
