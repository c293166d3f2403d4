#include "runtime/cuda/CudaBackend.h"

#include "runtime/model/ModelSpec.h"
#include "runtime/session/SequenceForwards.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <variant>

namespace dlm::cuda {

namespace {

constexpr int64_t kDefaultMaxSequence = 4096;
// cuBLASLt's workspace: what NVIDIA recommends for Hopper, enough for every heuristic.
constexpr size_t kGemmWorkspaceBytes = size_t(32) << 20;

std::string str(int64_t value) { return std::to_string(value); }

unsigned ceilDiv(int64_t value, int64_t divisor) {
  return static_cast<unsigned>((value + divisor - 1) / divisor);
}

// The element type the artifact's kernels were generated at: the precision recorded for the
// model's hidden-size RMSNorm kernel (every kernel of one compile shares it).
StatusOr<DeviceElement> kernelPrecision(const artifact::KernelTarget &target, int64_t hidden) {
  for (const artifact::Kernel &kernel : target.kernels) {
    if (kernel.kind != "rms_norm")
      continue;
    auto width = kernel.parameters.find("width");
    auto element = kernel.parameters.find("element");
    if (width == kernel.parameters.end() || element == kernel.parameters.end() ||
        width->second != artifact::AttributeValue(hidden) ||
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
  return Status::error("artifact has no rms_norm kernel of width " + str(hidden) + " for " +
                       target.target + "; recompile with dlmc compile --target cuda");
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
  DLM_ASSIGN_OR_RETURN(element_, kernelPrecision(modules_->target(), dims_.hidden));
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
  DLM_RETURN_IF_ERROR(findKernels(dims_));
  DLM_ASSIGN_OR_RETURN(weights_, DeviceWeights::upload(driver_, *hostWeights_, element_, element_));
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
  pageTokens_ = kernels_.attention.integer("page_size");
  if (pageTokens_ <= 0)
    return Status::error("attention kernel " + kernels_.attention.record->name +
                         " does not record its page_size");
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

Status CudaBackend::findKernels(const model::ModelDims &dims) {
  const std::string element = elementName(element_);
  auto integer = [](int64_t v) { return artifact::AttributeValue(v); };
  auto text = [](const std::string &v) { return artifact::AttributeValue(v); };
  DLM_ASSIGN_OR_RETURN(kernels_.embedding,
                       modules_->find("embedding", {{"width", integer(dims.hidden)},
                                                    {"element", text(element)}}));
  DLM_ASSIGN_OR_RETURN(kernels_.norm, modules_->find("rms_norm", {{"width", integer(dims.hidden)},
                                                                 {"element", text(element)},
                                                                 {"has_weight", true}}));
  if (hostWeights_->layers().front().qNorm) {
    DLM_ASSIGN_OR_RETURN(kernels_.headNorm,
                         modules_->find("rms_norm", {{"width", integer(dims.headDim)},
                                                     {"element", text(element)},
                                                     {"has_weight", true}}));
    kernels_.hasHeadNorm = true;
  }
  // NeoX RoPE over the whole head at the model's theta.
  DLM_ASSIGN_OR_RETURN(kernels_.rope, modules_->find("rope", {{"head_dim", integer(dims.headDim)},
                                                             {"rotary_dim", integer(dims.headDim)},
                                                             {"theta", dims.ropeTheta},
                                                             {"element", text(element)}}));
  DLM_ASSIGN_OR_RETURN(kernels_.attention,
                       modules_->find("attention",
                                      {{"head_dim", integer(dims.headDim)},
                                       {"heads", integer(dims.heads)},
                                       {"kv_heads", integer(dims.kvHeads)},
                                       {"mask", text(dims.causal ? "causal" : "bidirectional")},
                                       {"element", text(element)}}));
  DLM_ASSIGN_OR_RETURN(
      kernels_.kvStore,
      modules_->find("kv_store", {{"kv_width", integer(dims.kvWidth())},
                                  {"page_size", integer(kernels_.attention.integer("page_size"))},
                                  {"element", text(element)}}));
  DLM_ASSIGN_OR_RETURN(kernels_.gatedActivation,
                       modules_->find("gated_activation", {{"width", integer(dims.intermediate)},
                                                           {"activation", text("silu")},
                                                           {"element", text(element)}}));
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
  const size_t hidden = layout.add(rows(tokens, d.hidden));
  const size_t normed = layout.add(rows(tokens, d.hidden));
  const size_t q = layout.add(rows(tokens, d.qWidth()));
  const size_t k = layout.add(rows(tokens, d.kvWidth()));
  const size_t v = layout.add(rows(tokens, d.kvWidth()));
  const size_t attention = layout.add(rows(tokens, d.qWidth()));
  const size_t gate = layout.add(rows(tokens, d.intermediate));
  const size_t up = layout.add(rows(tokens, d.intermediate));
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
  hidden_ = base + hidden;
  normed_ = base + normed;
  q_ = base + q;
  k_ = base + k;
  v_ = base + v;
  attention_ = base + attention;
  gate_ = base + gate;
  up_ = base + up;
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

StatusOr<sampling::LogitsView> CudaBackend::run(const int32_t *tokens, int64_t count,
                                                int64_t first, sampling::LogitRows rows) {
  const model::ModelDims &d = dims_;
  DLM_RETURN_IF_ERROR(checkForwardArguments(tokens, count, first, rows, reservedTokens_,
                                            reservedLogitRows_, d.embeddingSize));
  const float *hostLogits = static_cast<const float *>(hostLogits_.data());
  if (count == 0)
    return sampling::LogitsView{hostLogits, 0, d.vocabSize};
  // The device work is timed as one span up to the logits' arrival on the host; per-kernel
  // device timings (events) are not recorded.
  profile::Scope forward(profiler_, profile::Category::forward, "forward",
                         profile::TrackKind::thread, 0, -1, count);
  DLM_RETURN_IF_ERROR(driver_->check(driver_->cuCtxSetCurrent(context_), "cuCtxSetCurrent"));
  DLM_RETURN_IF_ERROR(kv_->append(sequence_, count));
  DLM_RETURN_IF_ERROR(pageCopyStatus_);
  peakKvPages_ = std::max<int64_t>(peakKvPages_, kv_->pageCount() - kv_->freePages());

  const Shape shape{count, first, rows.begin, rows.end, inputs_};
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
  host[2 * T + 2] = static_cast<int32_t>(shape.first + shape.count);
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
                            int64_t rowsPerToken, const char *what) {
  long long xTokenStride = xStride, yTokenStride = yStride;
  int rowCount = static_cast<int>(rows), perToken = static_cast<int>(rowsPerToken);
  float eps = static_cast<float>(dims_.rmsNormEps);
  void *arguments[] = {&x, &xTokenStride, &y, &yTokenStride, &weight, &rowCount, &perToken, &eps};
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

Status CudaBackend::enqueueForward(const Shape &shape) {
  const model::ModelDims &d = dims_;
  CUdeviceptr tokens = shape.inputs;
  int count = static_cast<int>(shape.count);
  CUdeviceptr table = weights_->embed().data;
  long long tableRows = d.embeddingSize;
  CUdeviceptr out = hidden_;
  long long outStride = d.hidden;
  void *arguments[] = {&tokens, &count, &table, &tableRows, &out, &outStride};
  DLM_RETURN_IF_ERROR(launch(kernels_.embedding, static_cast<unsigned>(shape.count), 1, 1,
                             arguments, "embedding: cuLaunchKernel"));
  for (int64_t layer = 0; layer < d.layers; ++layer)
    DLM_RETURN_IF_ERROR(enqueueLayer(layer, shape));
  return enqueueLogits(shape);
}

Status CudaBackend::enqueueLayer(int64_t index, const Shape &shape) {
  const model::ModelDims &d = dims_;
  const DeviceLayerWeights &w = weights_->layers()[static_cast<size_t>(index)];
  const int64_t count = shape.count;
  const int64_t H = d.hidden, qW = d.qWidth(), kvW = d.kvWidth();
  const size_t e = elementBytes(element_);

  DLM_RETURN_IF_ERROR(rmsNorm(kernels_.norm, hidden_, H, normed_, H, w.attnNorm.data, count, 1,
                              "attn_norm: cuLaunchKernel"));
  DLM_RETURN_IF_ERROR(linear("q_proj", normed_, count, w.q, w.qBias, q_, false));
  DLM_RETURN_IF_ERROR(linear("k_proj", normed_, count, w.k, w.kBias, k_, false));
  DLM_RETURN_IF_ERROR(linear("v_proj", normed_, count, w.v, w.vBias, v_, false));
  if (w.qNorm) {
    // Per-head norm: [count, heads * headDim] is count * heads rows of headDim.
    DLM_RETURN_IF_ERROR(rmsNorm(kernels_.headNorm, q_, qW, q_, qW, w.qNorm.data,
                                count * d.heads, d.heads, "q_norm: cuLaunchKernel"));
    DLM_RETURN_IF_ERROR(rmsNorm(kernels_.headNorm, k_, kvW, k_, kvW, w.kNorm.data,
                                count * d.kvHeads, d.kvHeads, "k_norm: cuLaunchKernel"));
  }

  const CUdeviceptr positions =
      shape.inputs + static_cast<size_t>(reservedTokens_) * sizeof(int32_t);
  const CUdeviceptr queryStarts =
      positions + static_cast<size_t>(reservedTokens_) * sizeof(int32_t);
  const CUdeviceptr kvLengths = queryStarts + 2 * sizeof(int32_t);
  const CUdeviceptr blockTable = kvLengths + sizeof(int32_t);
  {
    int tokens = static_cast<int>(count);
    CUdeviceptr positionArg = positions;
    auto rope = [&](CUdeviceptr x, int64_t stride, int64_t heads, const char *what) {
      CUdeviceptr xArg = x;
      long long tokenStride = stride;
      int headCount = static_cast<int>(heads);
      void *arguments[] = {&xArg, &tokenStride, &headCount, &tokens, &positionArg};
      return launch(kernels_.rope, static_cast<unsigned>(count), 1, 1, arguments, what);
    };
    DLM_RETURN_IF_ERROR(rope(q_, qW, d.heads, "rope(q): cuLaunchKernel"));
    DLM_RETURN_IF_ERROR(rope(k_, kvW, d.kvHeads, "rope(k): cuLaunchKernel"));
  }

  // This layer's K and V pages: the pool is [layer][K|V][page][slot][kvWidth].
  const long long slotStride = kvW;
  const long long pageStride = pageTokens_ * kvW;
  const size_t regionBytes = static_cast<size_t>(kvPageCount_ * pageStride) * e;
  CUdeviceptr kPages = kvPool_.pointer() + static_cast<size_t>(2 * index) * regionBytes;
  CUdeviceptr vPages = kPages + regionBytes;
  CUdeviceptr tableArg = blockTable;
  {
    CUdeviceptr kArg = k_, vArg = v_;
    long long rowStride = kvW;
    int rows = static_cast<int>(count);
    int firstSlot = static_cast<int>(shape.first);
    long long pageStrideArg = pageStride, slotStrideArg = slotStride;
    void *arguments[] = {&kArg,    &vArg,   &rowStride,     &rows,         &tableArg,
                         &firstSlot, &kPages, &vPages, &pageStrideArg, &slotStrideArg};
    DLM_RETURN_IF_ERROR(launch(kernels_.kvStore, static_cast<unsigned>(count), 1, 1, arguments,
                               "kv_store: cuLaunchKernel"));
  }
  {
    CUdeviceptr qArg = q_, startsArg = queryStarts, positionArg = positions,
                lengthArg = kvLengths, causalFlags = 0, outArg = attention_;
    long long qStride = qW, outStride = qW, pageStrideArg = pageStride,
              slotStrideArg = slotStride;
    int maxPages = static_cast<int>(kv_->pagesFor(maxSequenceLength_));
    int window = 0, blockSize = 1;
    float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.headDim)));
    void *arguments[] = {&qArg,      &qStride,     &kPages,    &vPages,      &pageStrideArg,
                         &slotStrideArg, &tableArg, &maxPages, &startsArg,  &positionArg,
                         &lengthArg, &causalFlags, &window,    &blockSize,   &scale,
                         &outArg,    &outStride};
    const int64_t group = d.heads / d.kvHeads;
    const int64_t rowsPerBlock = (kernels_.attention.blockThreads / 32) *
                                 kernels_.attention.integer("rows_per_warp", 1);
    DLM_RETURN_IF_ERROR(launch(kernels_.attention, ceilDiv(count * group, rowsPerBlock),
                               static_cast<unsigned>(d.kvHeads), 1, arguments,
                               "attention: cuLaunchKernel"));
  }
  // o projection with the residual add: hidden += attention Wo^T.
  DLM_RETURN_IF_ERROR(linear("o_proj", attention_, count, w.o, {}, hidden_, true));

  DLM_RETURN_IF_ERROR(rmsNorm(kernels_.norm, hidden_, H, normed_, H, w.mlpNorm.data, count, 1,
                              "mlp_norm: cuLaunchKernel"));
  DLM_RETURN_IF_ERROR(linear("gate_proj", normed_, count, w.gate, {}, gate_, false));
  DLM_RETURN_IF_ERROR(linear("up_proj", normed_, count, w.up, {}, up_, false));
  {
    CUdeviceptr gateArg = gate_, upArg = up_, outArg = gate_;
    long long stride = d.intermediate;
    long long gateStride = stride, upStride = stride, outStride = stride;
    int rows = static_cast<int>(count);
    void *arguments[] = {&gateArg, &gateStride, &upArg, &upStride, &outArg, &outStride, &rows};
    // Over-covering the row is harmless: the kernel drops chunks past its width.
    DLM_RETURN_IF_ERROR(launch(kernels_.gatedActivation,
                               ceilDiv(d.intermediate, kernels_.gatedActivation.blockThreads),
                               static_cast<unsigned>(count), 1, arguments,
                               "gated_activation: cuLaunchKernel"));
  }
  // down projection with the residual add: hidden += act Wd^T.
  return linear("down_proj", gate_, count, w.down, {}, hidden_, true);
}

Status CudaBackend::enqueueLogits(const Shape &shape) {
  const model::ModelDims &d = dims_;
  const int64_t n = shape.rowsEnd - shape.rowsBegin;
  if (n == 0)
    return Status::ok();
  const size_t rowBytes = static_cast<size_t>(d.hidden) * elementBytes(element_);
  auto row = [&](CUdeviceptr base, int64_t r) { return base + static_cast<size_t>(r) * rowBytes; };
  const CUdeviceptr finalNorm = weights_->finalNorm().data;
  // The final norm writes straight into the LM head's input rows. Dream's logit shift: row r is
  // predicted at fed row r - 1 and row 0 keeps its own, so rows [b, e) read [b-1, e-1) (b > 0)
  // or row 0 then rows [0, e-1).
  if (!d.logitShift) {
    DLM_RETURN_IF_ERROR(rmsNorm(kernels_.norm, row(hidden_, shape.rowsBegin), d.hidden,
                                headInput_, d.hidden, finalNorm, n, 1,
                                "final_norm: cuLaunchKernel"));
  } else if (shape.rowsBegin > 0) {
    DLM_RETURN_IF_ERROR(rmsNorm(kernels_.norm, row(hidden_, shape.rowsBegin - 1), d.hidden,
                                headInput_, d.hidden, finalNorm, n, 1,
                                "final_norm: cuLaunchKernel"));
  } else {
    DLM_RETURN_IF_ERROR(rmsNorm(kernels_.norm, hidden_, d.hidden, headInput_, d.hidden,
                                finalNorm, 1, 1, "final_norm: cuLaunchKernel"));
    DLM_RETURN_IF_ERROR(rmsNorm(kernels_.norm, hidden_, d.hidden, row(headInput_, 1), d.hidden,
                                finalNorm, n - 1, 1, "final_norm: cuLaunchKernel"));
  }
  // Only the first vocabSize rows of the head (a padded embedding's extra rows are never
  // logits), written as float32 whatever the precision.
  LinearCall call;
  call.input = element_;
  call.output = DeviceElement::f32;
  call.x = headInput_;
  call.weight = weights_->lmHead().data;
  call.y = logits_;
  call.rows = n;
  call.in = d.hidden;
  call.out = d.vocabSize;
  return gemm_->run(stream_, call, "lm_head");
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
