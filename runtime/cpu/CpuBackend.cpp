#include "runtime/cpu/CpuBackend.h"

#include "runtime/cpu/BlockedTileKernels.h"

#include "runtime/backend/SequenceForwards.h"
#include "runtime/model/KernelProgram.h"
#include "runtime/program/RecordProfile.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <set>
#include <string>

namespace dlm::cpu {

using program::KernelKind;
using program::KernelProgram;
using program::ProgramRecord;
namespace kp = spec::kernels;

namespace {

constexpr int64_t kDefaultMaxSequence = 4096;

std::string str(int64_t value) { return std::to_string(value); }

template <typename T> size_t bytesOf(const std::vector<T> &buffer) {
  return buffer.size() * sizeof(T);
}

// The weights `functions`' records read widened to float32 (their checks widened them).
template <typename Functions>
std::set<const model::HostTensor *> widenedWeights(const Functions &functions) {
  std::set<const model::HostTensor *> widened;
  for (const auto &[name, program] : functions)
    widened.insert(program.widenedWeights.begin(), program.widenedWeights.end());
  return widened;
}

} // namespace

StatusOr<std::unique_ptr<CpuBackend>>
CpuBackend::create(std::shared_ptr<const model::ModelWeights> weights,
                   const std::vector<artifact::Kernel> &records, int64_t maxPositions,
                   const BackendOptions &options) {
  if (!weights)
    return Status::error("cpu backend: no weights");
  StatusOr<std::map<std::string, KernelProgram>> functions = KernelProgram::buildFunctions(
      records, *weights,
      options.batchInvariant ? KernelProgram::ProjectionWeights::widened
                             : KernelProgram::ProjectionWeights::stored);
  if (!functions)
    return functions.status().withContext("cpu backend");
  if (options.kvPageTokens <= 0)
    return Status::error("cpu backend: kv page size must be positive, got " +
                         str(options.kvPageTokens));
  int64_t maxSequence = options.maxSequenceLength;
  if (maxSequence <= 0)
    maxSequence = maxPositions > 0 ? maxPositions : kDefaultMaxSequence;
  if (maxPositions > 0 && maxSequence > maxPositions)
    return Status::error("cpu backend: max sequence length " + str(maxSequence) +
                         " exceeds the model's " + str(maxPositions) + " positions");
  int64_t pages = options.kvPages;
  if (pages <= 0)
    pages = (maxSequence + options.kvPageTokens - 1) / options.kvPageTokens;
  if (pages > INT32_MAX)
    return Status::error("cpu backend: " + str(pages) + " KV pages is too many");
  StatusOr<PackedWeights> packed = packProjections(*weights, *functions, options);
  if (!packed)
    return packed.status().withContext("cpu backend");
  StatusOr<PackedExpertStacks> experts = packExperts(*weights, *functions, options);
  if (!experts)
    return experts.status().withContext("cpu backend");
  StatusOr<StoredTables> tables = copyStoredTables(*weights, *functions);
  if (!tables)
    return tables.status().withContext("cpu backend");
  std::unique_ptr<CpuBackend> backend(new CpuBackend(
      std::move(weights), std::move(*functions), std::move(*packed), maxSequence, pages, options));
  backend->packedExperts_ = std::move(*experts);
  backend->storedTables_ = std::move(*tables);
  return backend;
}

StatusOr<CpuBackend::StoredTables>
CpuBackend::copyStoredTables(const model::ModelWeights &weights,
                             const std::map<std::string, KernelProgram> &functions) {
  StoredTables tables;
  const std::set<const model::HostTensor *> widened = widenedWeights(functions);
  for (const auto &[name, program] : functions)
    for (const ProgramRecord &k : program.kernels) {
      if (k.kind() != KernelKind::embedding && k.kind() != KernelKind::softEmbedding)
        continue;
      const spec::kernels::WeightRef *table = k.weightParameter();
      if (widened.count(table->tensor) || tables.count(table->tensor))
        continue;
      StatusOr<std::shared_ptr<const StoredTable>> copy = weights.derived<StoredTable>(
          table->name, "cpu-stored-copy",
          [&](const model::StoredTensor &stored) -> StatusOr<std::shared_ptr<const StoredTable>> {
            auto made = std::make_shared<StoredTable>();
            // An i4 table's f16 group scales lie in the mapping too: copied after its codes (row
            // scales are widened host vectors already).
            const size_t codes = static_cast<size_t>(artifact::storageBytes(
                stored.dtype, static_cast<uint64_t>(stored.rows * stored.cols)));
            const size_t scales =
                stored.groupScales ? static_cast<size_t>(stored.rows * stored.groups()) * 2 : 0;
            made->bytes.resize(codes + scales);
            DLM_RETURN_IF_ERROR(weights.readStored([&] {
              std::memcpy(made->bytes.data(), stored.data, codes);
              if (scales)
                std::memcpy(made->bytes.data() + codes, stored.groupScales, scales);
            }));
            made->view = stored;
            made->view.data = made->bytes.data();
            if (scales)
              made->view.groupScales =
                  reinterpret_cast<const uint16_t *>(made->bytes.data() + codes);
            return std::shared_ptr<const StoredTable>(std::move(made));
          });
      if (!copy)
        return copy.status();
      tables.emplace(table->tensor, std::move(*copy));
    }
  return tables;
}

StatusOr<CpuBackend::PackedExpertStacks>
CpuBackend::packExperts(const model::ModelWeights &weights,
                        const std::map<std::string, KernelProgram> &functions,
                        const BackendOptions &options) {
  PackedExpertStacks packed;
  const std::set<const model::HostTensor *> widened = widenedWeights(functions);
  for (const auto &[name, program] : functions)
    for (const ProgramRecord &k : program.kernels) {
      if (k.kind() != KernelKind::moe)
        continue;
      const auto &p = k.as<spec::kernels::MoeParams>();
      for (const spec::kernels::WeightRef *stack : {&p.gateUp, &p.down}) {
        const model::StoredTensor *stored = weights.stored(stack->name);
        // Read widened (a batch-invariant backend reads every weight so).
        if (packed.count(stack->tensor) || !stored || widened.count(stack->tensor))
          continue;
        if (!PackedExperts::packs(stored->dtype)) {
          StatusOr<const model::HostTensor *> widened = weights.widened(stack->name);
          if (!widened)
            return widened.status();
          continue;
        }
        StatusOr<std::shared_ptr<const PackedExperts>> experts =
            PackedExperts::of(weights, stack->name, p.experts,
                              options.bf16Arithmetic ? PackedLinear::Bf16Gemm::bf16Arithmetic
                                                     : PackedLinear::Bf16Gemm::weightOnly);
        if (!experts)
          return experts.status();
        packed.emplace(stack->tensor, std::move(*experts));
      }
    }
  return packed;
}

StatusOr<CpuBackend::PackedWeights>
CpuBackend::packProjections(const model::ModelWeights &weights,
                            const std::map<std::string, KernelProgram> &functions,
                            const BackendOptions &options) {
  PackedWeights packed;
  if (options.batchInvariant)
    return packed;
  // A weight another kind of record reads widened too is used widened rather than held a second
  // time packed. Embedding and soft embedding records read their table as stored: a tied LM
  // head multiplies that copy where it lies when it is bf16 (readsInPlace), or float32 beside a
  // soft embedding (which used to read it widened, the head with it), else packs a copy (a
  // float32 head packed runs oneDNN's matmul, faster than an sgemm on the table as it lies).
  std::set<const model::HostTensor *> readOtherwise = widenedWeights(functions);
  for (const auto &[name, program] : functions)
    for (const ProgramRecord &k : program.kernels)
      if (k.kind() == KernelKind::embedding || k.kind() == KernelKind::softEmbedding)
        if (const model::StoredTensor *stored = weights.stored(k.weightParameter()->name);
            stored && readsInPlace(*stored) &&
            (stored->dtype != artifact::DType::f32 || k.kind() == KernelKind::softEmbedding))
          readOtherwise.insert(k.weight());
  for (const auto &[name, program] : functions)
    for (const ProgramRecord &k : program.kernels) {
      if (!k.projects() || readOtherwise.count(k.weight()) || packed.count(k.weight()))
        continue;
      // An LM head packs the vocabulary's rows of a padded table, a projection all of them.
      const int64_t outputs = k.kind() == KernelKind::lmHead
                                  ? program.slots[static_cast<size_t>(k.result)].width
                                  : k.weight()->rows;
      StatusOr<std::shared_ptr<const PackedLinear>> weight =
          PackedLinear::of(weights, k.weightParameter()->name, outputs,
                           options.bf16Arithmetic ? PackedLinear::Bf16Gemm::bf16Arithmetic
                                                  : PackedLinear::Bf16Gemm::weightOnly);
      if (!weight)
        return weight.status();
      packed.emplace(k.weight(), std::move(*weight));
    }
  return packed;
}

CpuBackend::CpuBackend(std::shared_ptr<const model::ModelWeights> weights,
                       std::map<std::string, KernelProgram> functions, PackedWeights packed,
                       int64_t maxSequenceLength, int64_t kvPages, const BackendOptions &options)
    : SequenceBackend(maxSequenceLength), weights_(std::move(weights)),
      functions_(functions.begin(), functions.end()), pool_(options.threads),
      pages_(static_cast<int32_t>(kvPages), options.kvPageTokens,
             functions_.begin()->second.kvLayerWidths),
      profiler_(options.profiler), batchInvariant_(options.batchInvariant),
      bf16Arithmetic_(options.bf16Arithmetic), widened_(widenedWeights(functions_)) {
  pool_.setProfiler(profiler_);
  packed_ = std::move(packed);
  for (const auto &[name, program] : functions_) {
    rowElements_ = std::max(rowElements_, program.rowElements);
    normRowElements_ = std::max(normRowElements_, program.normRowElements);
    captureWidth_ = std::max(captureWidth_, program.captureWidth);
    for (const ProgramRecord &k : program.kernels) {
      if (k.kind() == KernelKind::rope &&
          std::none_of(ropes_.begin(), ropes_.end(), [&](const Rope &r) {
            return sameRope(r.params, k.as<spec::kernels::RopeParams>());
          }))
        ropes_.push_back(Rope{k.as<spec::kernels::RopeParams>(), {}});
      if (k.kind() == KernelKind::softEmbedding)
        softEmbeddingRows_ = std::max(softEmbeddingRows_, k.weight()->rows);
      if (options.batchInvariant && k.projects() && !invariantGemms_.count(k.weight()->data))
        invariantGemms_.emplace(k.weight()->data, InvariantGemm(*k.weight()));
      if (k.kind() == KernelKind::moe) {
        const auto &moe = k.as<spec::kernels::MoeParams>();
        moeHidden_ = std::max(moeHidden_, program.slots[static_cast<size_t>(k.result)].width);
        moeExperts_ = std::max(moeExperts_, moe.experts);
        moeTopK_ = std::max(moeTopK_, moe.topK);
        moeWidth_ = std::max(moeWidth_, k.expertWidth);
      }
    }
  }
  if (moeExperts_ > 0)
    for (int t = 0; t < pool_.threads(); ++t)
      expertGemms_.push_back(std::make_unique<PackedGemm>());
  kv_ = std::make_unique<kv::PagedKvCache>(
      static_cast<int32_t>(kvPages), options.kvPageTokens,
      [this](kv::PageIndex from, kv::PageIndex to) { pages_.copyPage(from, to); });
  if (options.sharePrefixes) {
    std::vector<const KernelProgram *> all;
    for (const auto &[name, program] : functions_)
      all.push_back(&program);
    for (const auto &[name, program] : functions_)
      if (kvDependsOnPrefixOnly(program, all)) {
        sharingFunctions_.insert(name);
        kv_->enablePrefixSharing();
      }
  }
  sequence_ = kv_->create();
}

Status CpuBackend::reserve(int64_t tokens, int64_t logitRows) {
  if (tokens > maxSequenceLength_)
    return Status::error("a sequence of " + str(tokens) +
                         " tokens exceeds the session's maximum of " + str(maxSequenceLength_));
  return reservePacked(tokens, logitRows);
}

Status CpuBackend::reservePacked(int64_t tokens, int64_t logitRows) {
  const model::ModelDims &d = weights_->dims();
  if (tokens > reservedTokens_) {
    auto size = [tokens](int64_t width) { return static_cast<size_t>(tokens * width); };
    workspace_.resize(size(rowElements_));
    normed_.resize(size(normRowElements_));
    const std::vector<int64_t> &kvWidths = pages_.kvWidths();
    const int64_t widest =
        kvWidths.empty() ? 0 : *std::max_element(kvWidths.begin(), kvWidths.end());
    attentionScratch_.reserve(tokens, widest, pool_.threads());
    for (Rope &rope : ropes_)
      rope.table.build(tokens, rope.params.rotaryDim, rope.params.theta, rope.params.rotatedPairs);
    // A chunk's probabilities, for a mask token's scattered rows their products, and a panel
    // of the table where it is widened for the product.
    if (softEmbeddingRows_ > 0)
      softEmbeddingScratch_.resize(
          softEmbeddingScratchFloats(tokens, softEmbeddingRows_, d.hidden));
    if (moeExperts_ > 0)
      moeScratch_.reserve(tokens, moeHidden_, moeExperts_, moeTopK_, moeWidth_, pool_.threads(),
                          batchInvariant_);
    capture_.resize(size(captureWidth_));
    packedTokens_.reserve(static_cast<size_t>(tokens));
    captured_ = {};
    reservedTokens_ = tokens;
  }
  logitRows = std::min(logitRows, tokens);
  if (logitRows > reservedLogitRows_) {
    headInput_.resize(static_cast<size_t>(logitRows * d.hidden));
    if (bf16Arithmetic_ && hasBf16DotKernels() && projectsABf16TableInPlace())
      roundedInput_.resize(headInput_.size());
    logits_.resize(static_cast<size_t>(logitRows * d.vocabSize));
    reservedLogitRows_ = logitRows;
  }
  return Status::ok();
}

StatusOr<const KernelProgram *> CpuBackend::function(std::string_view name) const {
  return findFunction(functions_, name);
}

StatusOr<sampling::LogitsView>
CpuBackend::forwardBatch(std::string_view name, const std::vector<SequenceForward> &forwards) {
  captured_ = {};
  const KernelProgram *program = nullptr;
  DLM_ASSIGN_OR_RETURN(program, function(name));
  const bool share = sharingFunctions_.count(program->function) != 0;
  StatusOr<sampling::LogitsView> logits = forwardPacked(
      *kv_, *program, forwards,
      [&](std::vector<Part> &parts, bool *wrote) { return runParts(*program, parts, wrote); },
      share);
  // Functions that capture never share prefixes: every fed token is a captured row.
  if (logits && program->captureWidth > 0)
    captured_ =
        sampling::LogitsView{capture_.data(), packedFedTokens(forwards), program->captureWidth};
  return logits;
}

StatusOr<sampling::LogitsView> CpuBackend::runParts(const KernelProgram &program,
                                                    std::vector<Part> &parts, bool *wroteKv) {
  const model::ModelDims &d = weights_->dims();
  DLM_ASSIGN_OR_RETURN(const PackedSize size, layOutParts(parts, reservedTokens_,
                                                          reservedLogitRows_, d.embeddingSize));
  const int64_t count = size.tokens, logitRows = size.logitRows;
  if (count == 0)
    return sampling::LogitsView{logits_.data(), 0, d.vocabSize};
  profile::Scope forward(profiler_, profile::Category::forward, "forward",
                         profile::TrackKind::thread, 0, -1, count);
  packedTokens_.clear();
  for (const Part &part : parts) {
    DLM_RETURN_IF_ERROR(kv_->append(part.sequence, part.span.keys - kv_->length(part.sequence)));
    packedTokens_.insert(packedTokens_.end(), part.tokens, part.tokens + part.span.count);
  }
  peakKvPages_ = std::max<int64_t>(peakKvPages_, kv_->pageCount() - kv_->freePages());

  program_ = &program;
  if (wroteKv)
    *wroteKv = true;
  for (const ProgramRecord &kernel : program.kernels)
    DLM_RETURN_IF_ERROR(runKernel(kernel, parts, count));
  return sampling::LogitsView{logits_.data(), logitRows, d.vocabSize};
}

// Each kind's runner, in kind order (generated rows).
Status (CpuBackend::*const CpuBackend::kRunners[])(const RecordRun &) = {
#define DLM_KERNEL_CPU_RUNNERS
#define DLM_KERNEL_HANDLER(kind, member) &CpuBackend::member,
#include "runtime/schema/KernelRecordSpec.inc"
};

Status CpuBackend::runKernel(const ProgramRecord &k, const std::vector<Part> &parts,
                             int64_t count) {
  // The events' category, layer and GEMM shape, as every backend records them.
  const program::RecordProfile event = program::recordProfile(*program_, k);
  const int64_t width = k.result >= 0 ? slotWidth(k.result) : 0;
  const RecordRun run{k, parts, count, width, event, event.category, event.layer};
  static_assert(std::size(kRunners) == std::size(spec::kernels::kKindContracts));
  return (this->*kRunners[static_cast<size_t>(k.kind())])(run);
}

void CpuBackend::forEachRow(int64_t rows, sampling::RowBody body) {
  const int64_t threads = std::min<int64_t>(pool_.threads(), rows);
  pool_.parallelFor(threads, 2, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t)
      for (int64_t j = t; j < rows; j += threads)
        body(j);
  });
}

bool CpuBackend::projectsABf16TableInPlace() const {
  for (const auto &[name, program] : functions_)
    for (const ProgramRecord &k : program.kernels)
      if (k.projects() && !packed_.count(k.weight()))
        if (auto table = storedTables_.find(k.weight());
            table != storedTables_.end() && table->second->view.dtype == artifact::DType::bf16 &&
            readsInPlace(table->second->view))
          return true;
  return false;
}

model::StoredTensor CpuBackend::tableAsStored(const model::HostTensor *table) const {
  if (auto copy = storedTables_.find(table); copy != storedTables_.end())
    return copy->second->view;
  return model::StoredTensor{artifact::DType::f32, table->data, table->rows, table->cols, nullptr};
}

// Every form this backend holds of the weight: packed, packed experts, a stored table's copy and
// the float32 one its records read (a tied table can be both a copy and a packed LM head).
size_t CpuBackend::heldBytes(const model::HostTensor *weight) const {
  size_t bytes = 0;
  if (auto packed = packed_.find(weight); packed != packed_.end())
    bytes += packed->second->bytes();
  if (auto experts = packedExperts_.find(weight); experts != packedExperts_.end())
    bytes += experts->second->bytes();
  if (auto table = storedTables_.find(weight); table != storedTables_.end())
    bytes += table->second->bytes.size();
  if (widened_.count(weight))
    bytes += static_cast<size_t>(weight->rows * weight->cols) * sizeof(float);
  return bytes;
}

MemoryUsage CpuBackend::memoryUsage() const {
  MemoryUsage usage;
  // The weights the records read, packed, widened or as stored (an embedding table read row by
  // row); tied weights are one tensor, counted once.
  std::set<const model::HostTensor *> seen;
  for (const auto &[name, program] : functions_)
    for (const ProgramRecord &k : program.kernels)
      for (const spec::kernels::WeightRef *w : k.weights())
        if (seen.insert(w->tensor).second)
          usage.weightBytes += heldBytes(w->tensor);
  usage.convertedWeightBytes = weights_->ownedBytes();
  for (const auto &[tensor, packed] : packed_)
    usage.convertedWeightBytes += packed->bytes();
  for (const auto &[tensor, experts] : packedExperts_)
    usage.convertedWeightBytes += experts->bytes();
  for (const auto &[tensor, table] : storedTables_)
    usage.convertedWeightBytes += table->bytes.size();
  for (const auto &[data, gemm] : invariantGemms_)
    usage.convertedWeightBytes += gemm.packedBytes();
  const size_t pageBytes = pages_.pageBytes();
  usage.kvPoolBytes = static_cast<size_t>(kv_->pageCount()) * pageBytes;
  usage.kvInUseBytes = static_cast<size_t>(kv_->pageCount() - kv_->freePages()) * pageBytes;
  usage.kvPeakBytes = static_cast<size_t>(peakKvPages_) * pageBytes;
  usage.activationBytes = bytesOf(workspace_) + bytesOf(normed_) + bytesOf(attentionScratch_.keys) +
                          bytesOf(attentionScratch_.values) + bytesOf(attentionScratch_.scores) +
                          bytesOf(headInput_) + bytesOf(roundedInput_) + bytesOf(logits_) +
                          bytesOf(softEmbeddingScratch_) + moeScratch_.bytes() + bytesOf(capture_);
  return usage;
}

} // namespace dlm::cpu
