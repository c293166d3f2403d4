#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/Vectorize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

namespace dlm::cpu {

void storeKv(HostKvPages &pages, const kv::PageIndex *blockTable, int64_t layer, int64_t firstSlot,
             int64_t count, const float *k, const float *v) {
  const int64_t width = pages.kvWidth(layer);
  const int64_t pageTokens = pages.pageTokens();
  for (int64_t r = 0; r < count; ++r) {
    const int64_t slot = firstSlot + r;
    const kv::PageIndex page = blockTable[slot / pageTokens];
    const int64_t offset = (slot % pageTokens) * width;
    std::memcpy(pages.keys(page, layer) + offset, k + r * width, width * sizeof(float));
    std::memcpy(pages.values(page, layer) + offset, v + r * width, width * sizeof(float));
  }
}

namespace {

// keys/values[g][j][d] = K/V of slot j, KV head g: contiguous per head, so that the score and
// value products are plain GEMMs.
void gatherKv(const HostKvPages &pages, const kv::PageIndex *blockTable, int64_t layer,
              int64_t keyCount, int64_t kvHeads, int64_t headDim, float *keys, float *values) {
  const int64_t width = pages.kvWidth(layer);
  const int64_t pageTokens = pages.pageTokens();
  for (int64_t first = 0; first < keyCount; first += pageTokens) {
    const float *pageKeys = pages.keys(blockTable[first / pageTokens], layer);
    const float *pageValues = pages.values(blockTable[first / pageTokens], layer);
    const int64_t inPage = std::min<int64_t>(pageTokens, keyCount - first);
    for (int64_t s = 0; s < inPage; ++s)
      for (int64_t g = 0; g < kvHeads; ++g) {
        const int64_t to = (g * keyCount + first + s) * headDim;
        std::memcpy(keys + to, pageKeys + s * width + g * headDim, headDim * sizeof(float));
        std::memcpy(values + to, pageValues + s * width + g * headDim, headDim * sizeof(float));
      }
  }
}

// Softmax over the scores [begin, end) of a row of keyCount; the rest become 0.
void softmaxRow(float *row, int64_t begin, int64_t end, int64_t keyCount) {
  softmaxInPlace(row + begin, end - begin);
  std::fill(row, row + begin, 0.0f);
  std::fill(row + end, row + keyCount, 0.0f);
}

} // namespace

namespace {

// The units [begin, end) of one part's attention (a unit: one head over one chunk of queries),
// its K/V already gathered into keys/values; `scores` holds one chunk of score rows.
Status attendUnits(const AttentionPart &part, const AttentionShape &shape, const float *keys,
                   const float *values, float *scores, int64_t begin, int64_t end) {
  const int64_t headDim = shape.headDim, keyCount = part.keyCount;
  const int64_t qWidth = shape.heads * headDim;
  const int64_t group = shape.heads / shape.kvHeads;
  const int64_t chunks = (part.queries + kAttentionQueryChunk - 1) / kAttentionQueryChunk;
  const float scale = static_cast<float>(
      shape.scale != 0 ? shape.scale : 1.0 / std::sqrt(static_cast<double>(headDim)));
  for (int64_t unit = begin; unit < end; ++unit) {
    const int64_t head = unit / chunks;
    const int64_t firstRow = (unit % chunks) * kAttentionQueryChunk;
    const int64_t rows = std::min(kAttentionQueryChunk, part.queries - firstRow);
    const float *headKeys = keys + (head / group) * keyCount * headDim;
    const float *headValues = values + (head / group) * keyCount * headDim;
    const float *query = part.q + firstRow * qWidth + head * headDim;
    DLM_RETURN_IF_ERROR(matmul(/*transposeB=*/true, rows, keyCount, headDim, scale, query, qWidth,
                               headKeys, headDim, scores, keyCount, 1));
    for (int64_t r = 0; r < rows; ++r) {
      // The visible keys [first, last) of the query at `position` (runtime/model/
      // KernelProgram.h): a causal mask ends them at the query, a block-causal one at the end
      // of its block; a window starts them W - 1 before the query (causal) or before the
      // forward's first position (bidirectional).
      const int64_t position = part.firstPosition + firstRow + r;
      const int64_t last = shape.causal ? std::min(keyCount, position + 1)
                           : shape.block
                               ? std::min(keyCount, (position / shape.block + 1) * shape.block)
                               : keyCount;
      const int64_t anchor = shape.causal ? position : part.firstPosition;
      const int64_t first = shape.window > 0 ? std::max<int64_t>(0, anchor - shape.window + 1) : 0;
      softmaxRow(scores + r * keyCount, first, last, keyCount);
    }
    DLM_RETURN_IF_ERROR(matmul(/*transposeB=*/false, rows, headDim, keyCount, 1.0f, scores,
                               keyCount, headValues, headDim,
                               part.out + firstRow * qWidth + head * headDim, qWidth, 1));
  }
  return Status::ok();
}

int64_t unitsOf(const AttentionPart &part, const AttentionShape &shape) {
  return shape.heads * ((part.queries + kAttentionQueryChunk - 1) / kAttentionQueryChunk);
}

} // namespace

Status pagedAttention(const float *q, int64_t queries, int64_t firstPosition, int64_t keyCount,
                      const AttentionShape &shape, const HostKvPages &pages,
                      const kv::PageIndex *blockTable, int64_t layer, float *out,
                      AttentionScratch &scratch, ThreadPool &pool) {
  const AttentionPart part{q, queries, firstPosition, keyCount, blockTable, out};
  gatherKv(pages, blockTable, layer, keyCount, shape.kvHeads, shape.headDim, scratch.keys.data(),
           scratch.values.data());
  const int64_t units = unitsOf(part, shape);
  // Spread (head, query chunk) units over the pool once a unit is worth a thread wake-up.
  const double unitFlops =
      4.0 * std::min(queries, kAttentionQueryChunk) * keyCount * shape.headDim;
  const int64_t minParallel = unitFlops * units > 4e6 ? 2 : units + 1;
  Status failure = Status::ok();
  std::mutex failureMutex;
  pool.parallelFor(units, minParallel, [&](int64_t begin, int64_t end, int thread) {
    float *scores = scratch.scores.data() + thread * scratch.scoresPerThread;
    Status status =
        attendUnits(part, shape, scratch.keys.data(), scratch.values.data(), scores, begin, end);
    if (!status.isOk()) {
      std::lock_guard<std::mutex> lock(failureMutex);
      failure = status;
    }
  });
  return failure;
}

Status pagedAttentionParts(const std::vector<AttentionPart> &parts, const AttentionShape &shape,
                           const HostKvPages &pages, int64_t layer, AttentionScratch &scratch,
                           ThreadPool &pool) {
  const int threads = pool.threads();
  if (parts.size() == 1 || threads == 1) {
    for (const AttentionPart &part : parts)
      DLM_RETURN_IF_ERROR(pagedAttention(part.q, part.queries, part.firstPosition, part.keyCount,
                                         shape, pages, part.blockTable, layer, part.out, scratch,
                                         pool));
    return Status::ok();
  }
  // Largest parts first, each to the thread with the least work so far.
  std::vector<size_t> order(parts.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  auto cost = [&](size_t i) { return parts[i].queries * parts[i].keyCount; };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cost(a) > cost(b); });
  std::vector<std::vector<size_t>> bins(static_cast<size_t>(threads));
  std::vector<int64_t> load(static_cast<size_t>(threads), 0);
  for (size_t i : order) {
    const size_t bin = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    bins[bin].push_back(i);
    load[bin] += cost(i);
  }
  std::vector<Status> failures(static_cast<size_t>(threads), Status::ok());
  pool.parallelFor(threads, 2, [&](int64_t begin, int64_t end, int thread) {
    float *keys = scratch.keys.data() + thread * scratch.keysPerThread;
    float *values = scratch.values.data() + thread * scratch.keysPerThread;
    float *scores = scratch.scores.data() + thread * scratch.scoresPerThread;
    for (int64_t bin = begin; bin < end; ++bin)
      for (size_t i : bins[static_cast<size_t>(bin)]) {
        const AttentionPart &part = parts[i];
        gatherKv(pages, part.blockTable, layer, part.keyCount, shape.kvHeads, shape.headDim, keys,
                 values);
        Status status = attendUnits(part, shape, keys, values, scores, 0, unitsOf(part, shape));
        if (!status.isOk() && failures[static_cast<size_t>(thread)].isOk())
          failures[static_cast<size_t>(thread)] = status;
      }
  });
  for (const Status &failure : failures)
    DLM_RETURN_IF_ERROR(failure);
  return Status::ok();
}

Status CpuBackend::runKvStore(const RecordRun &run) {
  const program::ProgramRecord &k = run.k;
  const std::vector<int64_t> &in = run.k.operands;
  const int64_t kWidth = slotWidth(in[0]), vWidth = slotWidth(in[1]);
  timedRecord(run, [&] {
    for (const Part &part : run.parts)
      storeKv(pages_, kv_->blockTable(part.sequence).data(), k.layer, part.span.first,
              part.span.count, operand(run, 0) + part.offset * kWidth,
              operand(run, 1) + part.offset * vWidth);
  });
  return Status::ok();
}

Status CpuBackend::runAttention(const RecordRun &run) {
  const program::ProgramRecord &k = run.k;
  const int64_t width = run.width;
  const std::vector<int64_t> &in = run.k.operands;
  const auto &p = k.as<spec::kernels::AttentionParams>();
  AttentionShape shape{p.heads,
                       p.kvHeads,
                       p.headDim,
                       p.mask == spec::kernels::AttentionMask::causal,
                       p.scale,
                       p.window.value_or(0),
                       p.blockSize.value_or(0)};
  const int64_t qWidth = slotWidth(in[0]);
  return timedRecord(run, [&] {
    // A member, so that a forward does not allocate per record.
    std::vector<AttentionPart> &attended = attentionParts_;
    attended.clear();
    for (const Part &part : run.parts)
      attended.push_back({operand(run, 0) + part.offset * qWidth, part.span.count, part.span.first,
                          part.span.keys, kv_->blockTable(part.sequence).data(),
                          result(run) + part.offset * width});
    return pagedAttentionParts(attended, shape, pages_, k.layer, attentionScratch_, pool_);
  });
}

} // namespace dlm::cpu
