// CudaBackend's device workspace: the activation arena a reservation sizes (one allocation
// holding every scratch buffer at its offset), the pinned host staging buffers, and the buffer an
// 8-bit or 4-bit weight is widened into. Reserving more drops the captured graphs, which hold the
// old buffers' addresses.
#include "runtime/cuda/CudaBackend.h"

#include <algorithm>

namespace dlm::cuda {

namespace {

std::string str(int64_t value) { return std::to_string(value); }

} // namespace

Status CudaBackend::allocateWidenedWeight() {
  size_t bytes = 0;
  for (const auto &[name, function] : functions_)
    for (const BoundRecord &bound : function.bound)
      if (bound.widen.function && bound.weight && !bound.fp8Gemm)
        bytes = std::max(bytes, static_cast<size_t>(bound.weight->rows * bound.weight->cols) *
                                    elementBytes(element_));
  if (bytes == 0)
    return Status::ok();
  return widenedWeight_.allocate(driver_, bytes, "the widened narrow weight");
}

Status CudaBackend::reserve(int64_t tokens, int64_t logitRows) {
  if (tokens > maxSequenceLength_)
    return Status::error("a sequence of " + str(tokens) +
                         " tokens exceeds the session's maximum of " + str(maxSequenceLength_));
  return reserveBuffers(tokens, logitRows, 1);
}

// Packed runs of up to this many parts fit the buffers reservePacked sizes; a run of more grows
// them (and drops the captured graphs) once.
constexpr int64_t kReservedPackedParts = 64;

Status CudaBackend::reservePacked(int64_t tokens, int64_t logitRows) {
  return reserveBuffers(tokens, logitRows,
                        std::min(std::max<int64_t>(tokens, 1), kReservedPackedParts));
}

CudaBackend::InputLayout CudaBackend::inputLayout() const {
  InputLayout layout;
  layout.positions = reservedTokens_;
  layout.queryStarts = 2 * reservedTokens_;
  layout.kvLengths = layout.queryStarts + reservedParts_ + 1;
  layout.inputScales = layout.kvLengths + reservedParts_;
  layout.blockTables = layout.inputScales + reservedParts_;
  layout.end = layout.blockTables + reservedParts_ * tablePages_;
  return layout;
}

Status CudaBackend::reserveBuffers(int64_t tokens, int64_t logitRows, int64_t parts) {
  logitRows = std::min(logitRows, tokens);
  if (tokens <= reservedTokens_ && logitRows <= reservedLogitRows_ && parts <= reservedParts_)
    return Status::ok();
  tokens = std::max(tokens, reservedTokens_);
  logitRows = std::max(logitRows, reservedLogitRows_);
  parts = std::max(parts, reservedParts_);
  DLM_RETURN_IF_ERROR(driver_->check(driver_->cuCtxSetCurrent(context_), "cuCtxSetCurrent"));
  DLM_RETURN_IF_ERROR(
      driver_->check(driver_->cuStreamSynchronize(stream_), "reserve: cuStreamSynchronize"));
  // Graphs read the old buffers' addresses.
  graphs_->clear();
  clearLoopGraphs();

  const model::ModelDims &d = dims_;
  const size_t e = elementBytes(element_);
  auto rows = [&](int64_t count, int64_t width) { return static_cast<size_t>(count * width) * e; };
  ArenaLayout layout;
  const size_t activations = layout.add(rows(tokens, rowElements_));
  const size_t normed = layout.add(rows(tokens, normRowElements_));
  const size_t headInput = layout.add(rows(logitRows, d.hidden));
  const size_t logits = layout.add(static_cast<size_t>(logitRows * d.vocabSize) * sizeof(float));
  const int64_t tablePages = kv_->pagesFor(maxSequenceLength_);
  inputBytes_ =
      static_cast<size_t>(2 * tokens + 3 * parts + 1 + parts * tablePages) * sizeof(int32_t);
  const size_t inputs = layout.add(inputBytes_);
  const size_t loopInputs = layout.add(inputBytes_);
  // Float rows for a soft embedding, or forward_input rows at the device precision (no wider).
  const size_t inputRows =
      layout.add(static_cast<size_t>(tokens * std::max(softEmbeddingRows_, forwardInputWidth_)) *
                 sizeof(float));
  const size_t captureRows = layout.add(rows(tokens, captureWidth_));
  const int64_t slots = tokens * moeTopK_;
  const size_t moeChoice = layout.add(static_cast<size_t>(slots) * sizeof(int32_t));
  const size_t moeWeight = layout.add(static_cast<size_t>(slots) * sizeof(float));
  const size_t moeLists = layout.add(static_cast<size_t>(moeExperts_ * tokens) * sizeof(int32_t));
  const size_t moeCounts = layout.add(static_cast<size_t>(moeExperts_) * sizeof(int32_t));
  const size_t moeAct = layout.add(static_cast<size_t>(slots * moeWidth_) * sizeof(float));
  const size_t moeOut = layout.add(static_cast<size_t>(slots * moeHidden_) * sizeof(float));
  const size_t fp8Rows = layout.add(static_cast<size_t>(tokens * fp8InputWidth_));
  const size_t fp8RowScales =
      layout.add(fp8InputWidth_ > 0 ? static_cast<size_t>(tokens) * sizeof(float) : 0);

  // Nothing is reserved until every allocation succeeds (allocate frees the old buffer first).
  reservedTokens_ = 0;
  reservedLogitRows_ = 0;
  reservedParts_ = 0;
  DLM_RETURN_IF_ERROR(workspace_.allocate(driver_, layout.size(), "activation workspace"));
  const CUdeviceptr base = workspace_.pointer();
  activations_ = base + activations;
  normed_ = base + normed;
  headInput_ = base + headInput;
  logits_ = base + logits;
  inputs_ = base + inputs;
  loopInputs_ = base + loopInputs;
  inputRows_ = base + inputRows;
  captureRows_ = base + captureRows;
  moeChoice_ = base + moeChoice;
  moeWeight_ = base + moeWeight;
  moeLists_ = base + moeLists;
  moeCounts_ = base + moeCounts;
  moeAct_ = base + moeAct;
  moeOut_ = base + moeOut;
  fp8Rows_ = base + fp8Rows;
  fp8RowScales_ = base + fp8RowScales;
  DLM_RETURN_IF_ERROR(hostInputs_.allocate(driver_, inputBytes_, "forward inputs (pinned)"));
  DLM_RETURN_IF_ERROR(hostLogits_.allocate(
      driver_, static_cast<size_t>(logitRows * d.vocabSize) * sizeof(float), "logits (pinned)"));
  if (captureWidth_ > 0)
    DLM_RETURN_IF_ERROR(
        hostCapture_.allocate(driver_, rows(tokens, captureWidth_), "captured rows (pinned)"));
  capture_.resize(static_cast<size_t>(tokens * captureWidth_));
  stagedInput_.resize(rows(tokens, forwardInputWidth_));
  captured_ = {};
  reservedTokens_ = tokens;
  reservedLogitRows_ = logitRows;
  reservedParts_ = parts;
  tablePages_ = tablePages;
  return Status::ok();
}

} // namespace dlm::cuda
