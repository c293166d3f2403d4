// Attention over a paged KV cache, flash style: no [queries x keys] matrix is ever formed.
//
// A block serves one request, one KV head and kRows (query, head-in-group) rows, so a GQA group
// shares every K/V tile it loads. Each warp owns kRowsPerWarp rows. Per tile of 32 keys:
//   1. the block copies the keys (and values) of the tile from their pages into shared memory
//      (16-byte loads; key rows padded to an odd number of words so that lane j reading key j
//      hits bank j);
//   2. lane j scores key j against each of the warp's rows (the query row, pre-scaled, is a
//      broadcast read from shared memory) and the mask hides what the row may not see;
//   3. the online softmax update: new max m' = max(m, max_j s_j), rescale factor e^(m - m'),
//      l = l e^(m - m') + sum_j e^(s_j - m'), and the weights e^(s_j - m') go to shared memory;
//   4. each lane accumulates its ceil(kHeadDim / 32) output dimensions over the tile's values
//      (below 32, or at a head dim that is not a multiple of 32, the lanes past the head's last
//      dimension idle in this step: small heads are the tiny test models', not a hot shape).
// Tiles outside the union of what the block's rows can see are never loaded.
//
// Storage (q, K/V pages, out) is bf16 or f32 (a float32 device runs the whole model in f32);
// scores, softmax and accumulation are fp32 either way. An f32 key tile is twice as large, which
// the shared-memory layout choice accounts for.
//
// Masks are positions: key j of a request sits at position j (its slot in the block table),
// query rows carry explicit positions. A request whose causal flag is set is treated as causal
// (windowed too for the sliding kinds), so prefill/commit passes and bidirectional canvases mix
// in one batch. A row that sees no key yields zeros.
//
// Arguments: q [tokens, heads, headDim] (token stride qStride), kPages and vPages (key j of head
// g at pages + pageTable[j / pageSize] * pageStride + (j % pageSize) * slotStride + g * headDim),
// blockTables [requests, maxPagesPerRequest], queryStarts [requests + 1] (a request's query
// tokens are q rows queryStarts[r] ..), queryPositions [tokens], kvLengths [requests],
// causalFlags [requests] or null, window, blockSize, scale, out (like q, stride outStride). The
// bidirectional window anchors on each request's first query position (queryPositions at
// queryStarts[r]): the forward's first fed token.
// Strides must be multiples of 16 bytes (8 bf16 / 4 f32 elements).
#include "compiler/codegen/KernelText.h"
#include "compiler/codegen/Kernels.h"
#include "compiler/codegen/RecordKernels.h"

#include <algorithm>

namespace dlm::codegen {

namespace {

constexpr std::string_view kBody = R"cuda(using Element = ${element};
constexpr int kHeadDim = ${headDim};
constexpr int kHeads = ${heads};
constexpr int kKvHeads = ${kvHeads};
constexpr int kGroup = kHeads / kKvHeads;
constexpr int kPageSize = ${pageSize};
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerWarp = ${rowsPerWarp};
constexpr int kRows = kWarps * kRowsPerWarp;
constexpr int kTileKeys = 32;
constexpr int kDimsPerLane = (kHeadDim + 31) / 32;
// Whether every lane owns kDimsPerLane real dimensions (no idle lanes to test for).
constexpr bool kWholeWarpDims = kHeadDim % 32 == 0;
// 16-byte accesses: kVector elements of one key or query row.
constexpr int kVector = 16 / (int)sizeof(Element);
constexpr int kChunks = kHeadDim / kVector;
// A key row in shared memory is an odd number of 4-byte words (${keyWordText}), so lane j
// reading key j hits bank j.
using KeyWord = ${keyWord};
constexpr int kKeyWords = kHeadDim * (int)sizeof(Element) / 4 + 1;
// The value tile reuses the key tile's storage when both would not fit in 48 KiB of static
// shared memory; it then costs two more barriers per tile.
constexpr bool kValuesShareKeyTile = ${valuesShareKeyTile};

// ${maskRule}
// `anchor` is the request's first query position (its first fed token).
__device__ __forceinline__ bool visible(int query, int key, bool causal, int window,
                                        int blockSize, int anchor) {
${visibleBody}
}

// [lo, hi): every key that one of the rows at positions [minQuery, maxQuery] may see.
__device__ __forceinline__ void keyRange(long long minQuery, long long maxQuery, long long keys,
                                         bool causal, long long window, long long blockSize,
                                         long long anchor, int &lo, int &hi) {
  long long first = 0, last = keys;
${rangeBody}
  lo = (int)(first < 0 ? 0 : first);
  hi = (int)(last > keys ? keys : last);
}

__device__ __forceinline__ const Element *slot(const Element *pages, const int *pageTable,
                                              int key, long long pageStride,
                                              long long slotStride, int kvHead) {
  return pages + (long long)pageTable[key / kPageSize] * pageStride +
         (long long)(key % kPageSize) * slotStride + kvHead * kHeadDim;
}

// The block's query rows (row = query * kGroup + head in the group) into shared memory,
// pre-scaled; rows past the request's last are zero.
__device__ __forceinline__ void loadQueries(const Element *q, long long qStride, int queryBegin,
                                            int firstRow, int rows, int kvHead, float scale,
                                            float (*sQuery)[kHeadDim]) {
  for (int item = threadIdx.x; item < kRows * kChunks; item += kThreads) {
    const int row = item / kChunks, chunk = item % kChunks;
    float values[kVector];
#pragma unroll
    for (int k = 0; k < kVector; ++k)
      values[k] = 0.f;
    if (firstRow + row < rows) {
      const int query = (firstRow + row) / kGroup;
      const int head = kvHead * kGroup + (firstRow + row) % kGroup;
      dlm_device::loadFloats<kVector>(q + (long long)(queryBegin + query) * qStride +
                                          head * kHeadDim + chunk * kVector,
                                      values);
    }
#pragma unroll
    for (int k = 0; k < kVector; ++k)
      sQuery[row][chunk * kVector + k] = values[k] * scale;
  }
}

// The warp's rows of the output: each lane's dimensions of acc over the row's softmax sum (a row
// that saw no key: zeros).
__device__ __forceinline__ void storeRows(Element *out, long long outStride, int queryBegin,
                                          int firstRow, int kvHead, const int *sPosition,
                                          const float (&rowSum)[kRowsPerWarp],
                                          const float (&acc)[kRowsPerWarp][kDimsPerLane]) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int row = warp * kRowsPerWarp + r;
    if (sPosition[row] < 0)
      continue;
    const int query = (firstRow + row) / kGroup;
    const int head = kvHead * kGroup + (firstRow + row) % kGroup;
    const float inverse = rowSum[r] > 0.f ? 1.f / rowSum[r] : 0.f;
    Element *to = out + (long long)(queryBegin + query) * outStride + head * kHeadDim;
#pragma unroll
    for (int t = 0; t < kDimsPerLane; ++t)
      if (kWholeWarpDims || lane + 32 * t < kHeadDim)
        dlm_device::storeFloat(to + lane + 32 * t, acc[r][t] * inverse);
  }
}

${entryPoint} {
  const int request = blockIdx.z;
  const int kvHead = blockIdx.y;
  const int queryBegin = queryStarts[request];
  const int rows = (queryStarts[request + 1] - queryBegin) * kGroup;
  const int firstRow = blockIdx.x * kRows;
  if (firstRow >= rows)
    return; // the whole block: before any barrier
  const int keys = kvLengths[request];
  const bool causal = ${kindIsCausal} || (causalFlags != nullptr && causalFlags[request] != 0);
  const int *pageTable = blockTables + (long long)request * maxPagesPerRequest;
  const int anchor = queryPositions[queryBegin];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;

  __shared__ __align__(16) float sQuery[kRows][kHeadDim];
  __shared__ int sPosition[kRows];
  __shared__ int sKeyRange[2];
  __shared__ float sWeight[kWarps][kRowsPerWarp][kTileKeys];
  __shared__ __align__(16) KeyWord sKey[kTileKeys][kKeyWords];
${valueTile}

  loadQueries(q, qStride, queryBegin, firstRow, rows, kvHead, scale, sQuery);
  for (int row = threadIdx.x; row < kRows; row += kThreads)
    sPosition[row] =
        firstRow + row < rows ? queryPositions[queryBegin + (firstRow + row) / kGroup] : -1;
  __syncthreads();
  if (threadIdx.x == 0) {
    int minQuery = 0x7fffffff, maxQuery = 0;
    for (int row = 0; row < kRows; ++row) {
      if (sPosition[row] < 0)
        continue;
      minQuery = sPosition[row] < minQuery ? sPosition[row] : minQuery;
      maxQuery = sPosition[row] > maxQuery ? sPosition[row] : maxQuery;
    }
    keyRange(minQuery, maxQuery, keys, causal, window, blockSize, anchor, sKeyRange[0],
             sKeyRange[1]);
  }
  __syncthreads();
  const int keyBegin = sKeyRange[0], keyEnd = sKeyRange[1];

  float rowMax[kRowsPerWarp], rowSum[kRowsPerWarp], acc[kRowsPerWarp][kDimsPerLane];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    rowMax[r] = dlm_device::negativeInfinity();
    rowSum[r] = 0.f;
#pragma unroll
    for (int t = 0; t < kDimsPerLane; ++t)
      acc[r][t] = 0.f;
  }

  for (int tile = keyBegin; tile < keyEnd; tile += kTileKeys) {
    __syncthreads(); // every warp is done with the previous tile
    for (int item = threadIdx.x; item < kTileKeys * kChunks; item += kThreads) {
      const int key = item / kChunks, chunk = item % kChunks;
      uint4 keyBits = make_uint4(0u, 0u, 0u, 0u), valueBits = make_uint4(0u, 0u, 0u, 0u);
      if (tile + key < keyEnd) {
        keyBits = *reinterpret_cast<const uint4 *>(
            slot(kPages, pageTable, tile + key, pageStride, slotStride, kvHead) + chunk * kVector);
        if (!kValuesShareKeyTile)
          valueBits = *reinterpret_cast<const uint4 *>(
              slot(vPages, pageTable, tile + key, pageStride, slotStride, kvHead) +
              chunk * kVector);
      }
      const KeyWord *words = reinterpret_cast<const KeyWord *>(&keyBits);
#pragma unroll
      for (int k = 0; k < 4; ++k)
        sKey[key][chunk * 4 + k] = words[k];
      if (!kValuesShareKeyTile)
        *reinterpret_cast<uint4 *>(&sValue[key][chunk * kVector]) = valueBits;
    }
    __syncthreads();

#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int row = warp * kRowsPerWarp + r;
      const int position = sPosition[row];
      if (position < 0) { // warp-uniform: the row does not exist
        sWeight[warp][r][lane] = 0.f;
        continue;
      }
      float score = dlm_device::negativeInfinity();
      if (tile + lane < keyEnd && visible(position, tile + lane, causal, window, blockSize,
                                               anchor)) {
${dotProduct}
        score = dot;
      }
      // Online softmax: a row that has seen no visible key keeps max = -inf and sum = 0.
      const float newMax = fmaxf(rowMax[r], dlm_device::warpMax(score));
      const float weight =
          score == dlm_device::negativeInfinity() ? 0.f : __expf(score - newMax);
      const float rescale =
          rowMax[r] == dlm_device::negativeInfinity() ? 0.f : __expf(rowMax[r] - newMax);
      rowSum[r] = rowSum[r] * rescale + dlm_device::warpSum(weight);
      rowMax[r] = newMax;
#pragma unroll
      for (int t = 0; t < kDimsPerLane; ++t)
        acc[r][t] *= rescale;
      sWeight[warp][r][lane] = weight;
    }

    if (kValuesShareKeyTile) {
      __syncthreads(); // the key tile is dead: values take its place
      for (int item = threadIdx.x; item < kTileKeys * kChunks; item += kThreads) {
        const int key = item / kChunks, chunk = item % kChunks;
        uint4 valueBits = make_uint4(0u, 0u, 0u, 0u);
        if (tile + key < keyEnd)
          valueBits = *reinterpret_cast<const uint4 *>(
              slot(vPages, pageTable, tile + key, pageStride, slotStride, kvHead) +
              chunk * kVector);
        *reinterpret_cast<uint4 *>(&sValue[key][chunk * kVector]) = valueBits;
      }
      __syncthreads();
    } else {
      __syncwarp(); // the warp's weights are visible to all its lanes
    }

    const int tileKeys = keyEnd - tile < kTileKeys ? keyEnd - tile : kTileKeys;
    for (int key = 0; key < tileKeys; ++key) {
#pragma unroll
      for (int t = 0; t < kDimsPerLane; ++t) {
        if (!kWholeWarpDims && lane + 32 * t >= kHeadDim)
          continue; // an idle lane: past the head's last dimension
        const float value = dlm_device::toFloat(sValue[key][lane + 32 * t]);
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r)
          acc[r][t] = fmaf(sWeight[warp][r][key], value, acc[r][t]);
      }
    }
  }

  storeRows(out, outStride, queryBegin, firstRow, kvHead, sPosition, rowSum, acc);
}
)cuda";

// The score of key `lane` against the warp's row: pairs of bf16 as float2, or floats.
constexpr std::string_view kBf16Dot = R"cuda(        const float2 *query = reinterpret_cast<const float2 *>(sQuery[row]);
        float dot = 0.f;
#pragma unroll 8
        for (int p = 0; p < kHeadDim / 2; ++p) {
          const float2 k2 = __bfloat1622float2(sKey[lane][p]);
          const float2 q2 = query[p];
          dot = fmaf(q2.x, k2.x, dot);
          dot = fmaf(q2.y, k2.y, dot);
        })cuda";
constexpr std::string_view kF32Dot = R"cuda(        const float *query = sQuery[row];
        float dot = 0.f;
#pragma unroll 8
        for (int p = 0; p < kHeadDim; ++p)
          dot = fmaf(query[p], sKey[lane][p], dot);)cuda";

struct MaskText {
  std::string_view rule;
  std::string_view kindIsCausal;
  std::string_view visible;
  std::string_view range;
};

MaskText maskText(MaskKind mask) {
  switch (mask) {
  case MaskKind::causal:
    return {"causal: key <= query.", "true", "  return key <= query;", "  last = maxQuery + 1;"};
  case MaskKind::bidirectional:
    return {"bidirectional: every key (causal requests: key <= query).", "false",
            "  return !causal || key <= query;", "  if (causal)\n    last = maxQuery + 1;"};
  case MaskKind::blockCausal:
    return {"block causal: key / blockSize <= query / blockSize (causal requests: key <= "
            "query).",
            "false", "  return causal ? key <= query : key / blockSize <= query / blockSize;",
            "  last = causal ? maxQuery + 1 : (maxQuery / blockSize + 1) * blockSize;"};
  case MaskKind::slidingWindow:
    return {"sliding window: 0 <= query - key < window.", "true",
            "  return key <= query && query - key < window;",
            "  first = minQuery - window + 1;\n  last = maxQuery + 1;"};
  case MaskKind::slidingWindowSymmetric:
    return {"symmetric sliding window: |query - key| < window (causal requests: 0 <= query - "
            "key < window).",
            "false",
            "  return query - key < window && (causal ? key <= query : key - query < window);",
            "  first = minQuery - window + 1;\n  last = causal ? maxQuery + 1 : maxQuery + "
            "window;"};
  case MaskKind::bidirectionalWindow:
    return {"bidirectional window: keys at or after the request's first query position, and "
            "those before it with first - key < window (causal requests: 0 <= query - key < "
            "window).",
            "false",
            "  return causal ? key <= query && query - key < window : anchor - key < window;",
            "  first = (causal ? minQuery : anchor) - window + 1;\n  if (causal)\n    last = "
            "maxQuery + 1;"};
  }
  return {};
}

constexpr int64_t kStaticSharedLimit = 48 * 1024;

struct Layout {
  int64_t rowsPerWarp;
  bool valuesShareKeyTile;
  int64_t sharedBytes;
};

Layout layoutFor(int64_t headDim, ElementType element, int64_t rowsPerWarp, int64_t warps,
                 bool share) {
  const int64_t rows = warps * rowsPerWarp;
  const int64_t keyTile = 32 * (headDim * elementBytes(element) / 4 + 1) * 4;
  const int64_t valueTile = share ? 0 : 32 * headDim * elementBytes(element);
  const int64_t bytes =
      rows * headDim * 4 + rows * 4 + 8 + warps * rowsPerWarp * 32 * 4 + keyTile + valueTile;
  return {rowsPerWarp, share, bytes};
}

} // namespace

StatusOr<KernelSource> generateAttention(const AttentionParams &params) {
  const int64_t headDim = params.headDim;
  if (headDim <= 0 || headDim % 8 != 0 || headDim > 1024)
    return Status::error("attention: head_dim must be a multiple of 8 in [8, 1024], got " +
                         std::to_string(headDim));
  if (params.heads <= 0 || params.kvHeads <= 0 || params.heads % params.kvHeads != 0)
    return Status::error("attention: heads (" + std::to_string(params.heads) +
                         ") must be a positive multiple of kv_heads (" +
                         std::to_string(params.kvHeads) + ")");
  if (params.pageSize <= 0 || params.pageSize > 65536)
    return Status::error("attention: page_size must be in [1, 65536], got " +
                         std::to_string(params.pageSize));
  if (params.rowsPerWarp < 0 || params.rowsPerWarp > 8)
    return Status::error("attention: rows_per_warp must be in [0, 8]");

  constexpr int64_t warps = 4;
  // About 16 accumulators per lane: 4 rows at head_dim 128, 2 at 256, 1 at 512.
  int64_t rowsPerWarp = params.rowsPerWarp;
  if (rowsPerWarp == 0)
    rowsPerWarp = std::max<int64_t>(1, std::min<int64_t>(4, 512 / headDim));
  // sm_80's ptxas spills 8 bytes of the unwindowed bidirectional f32 kernel at head_dim 32 with 4
  // rows per warp (a tiny-model shape: DiffusionGemma's fixtures' full layers); 3 do not.
  if (params.rowsPerWarp == 0 && headDim == 32 && params.element == ElementType::f32 &&
      params.mask == MaskKind::bidirectional)
    rowsPerWarp = 3;
  const ElementType element = params.element;
  Layout layout = layoutFor(headDim, element, rowsPerWarp, warps, false);
  if (layout.sharedBytes > kStaticSharedLimit)
    layout = layoutFor(headDim, element, rowsPerWarp, warps, true);
  while (layout.sharedBytes > kStaticSharedLimit && params.rowsPerWarp == 0 &&
         layout.rowsPerWarp > 1)
    layout = layoutFor(headDim, element, layout.rowsPerWarp - 1, warps, true);
  if (layout.sharedBytes > kStaticSharedLimit)
    return Status::error("attention: " + std::string(elementTypeName(element)) + " head_dim " +
                         std::to_string(headDim) + " with " +
                         std::to_string(layout.rowsPerWarp) + " rows per warp needs " +
                         std::to_string(layout.sharedBytes) +
                         " bytes of shared memory, over the 48 KiB static limit");

  const MaskText mask = maskText(params.mask);
  KernelSource kernel;
  kernel.kind = "attention";
  kernel.name = "dlm_attention_" + std::string(maskKindName(params.mask)) + "_" +
                std::string(elementTypeName(element)) + "_d" +
                std::to_string(headDim) + "_h" + std::to_string(params.heads) + "_kv" +
                std::to_string(params.kvHeads) + "_p" + std::to_string(params.pageSize);
  if (params.rowsPerWarp)
    kernel.name += "_r" + std::to_string(params.rowsPerWarp);
  kernel.hot = true;
  kernel.blockThreads = static_cast<unsigned>(warps * 32);
  kernel.grid = "x = ceil(max queries per request * " +
                std::to_string(params.heads / params.kvHeads) + " / " +
                std::to_string(warps * layout.rowsPerWarp) +
                "), y = " + std::to_string(params.kvHeads) + " (kv heads), z = requests";
  kernel.sharedMemoryBytes = static_cast<unsigned>(layout.sharedBytes);
  const std::string type(cudaElementType(element));
  kernel.parameters = {
      {"const " + type + " *__restrict__", "q"},
      {"long long", "qStride"},
      {"const " + type + " *__restrict__", "kPages"},
      {"const " + type + " *__restrict__", "vPages"},
      {"long long", "pageStride"},
      {"long long", "slotStride"},
      {"const int *__restrict__", "blockTables"},
      {"int", "maxPagesPerRequest"},
      {"const int *__restrict__", "queryStarts"},
      {"const int *__restrict__", "queryPositions"},
      {"const int *__restrict__", "kvLengths"},
      {"const unsigned char *__restrict__", "causalFlags"},
      {"int", "window"},
      {"int", "blockSize"},
      {"float", "scale"},
      {type + " *__restrict__", "out"},
      {"long long", "outStride"},
  };
  kernel.specialisation = {{"head_dim", headDim},
                           {"heads", params.heads},
                           {"kv_heads", params.kvHeads},
                           {"page_size", params.pageSize},
                           {"mask", std::string(maskKindName(params.mask))},
                           {"element", std::string(elementTypeName(element))},
                           {"rows_per_warp", layout.rowsPerWarp}};
  const std::string valueTile =
      layout.valuesShareKeyTile
          ? "  Element (*const sValue)[kHeadDim] =\n"
            "      reinterpret_cast<Element (*)[kHeadDim]>(&sKey[0][0]);"
          : "  __shared__ __align__(16) Element sValueTile[kTileKeys][kHeadDim];\n"
            "  Element (*const sValue)[kHeadDim] = sValueTile;";
  const bool bf16 = element == ElementType::bf16;
  const std::string body =
      expandKernelBody(kernel, kBody,
                       {{"element", type},
                        {"keyWord", bf16 ? "__nv_bfloat162" : "float"},
                        {"keyWordText", bf16 ? "bf16 pairs" : "floats"},
                        {"dotProduct", std::string(bf16 ? kBf16Dot : kF32Dot)},
                        {"headDim", std::to_string(headDim)},
                        {"heads", std::to_string(params.heads)},
                        {"kvHeads", std::to_string(params.kvHeads)},
                        {"pageSize", std::to_string(params.pageSize)},
                        {"rowsPerWarp", std::to_string(layout.rowsPerWarp)},
                        {"valuesShareKeyTile", boolLiteral(layout.valuesShareKeyTile)},
                        {"maskRule", std::string(mask.rule)},
                        {"visibleBody", std::string(mask.visible)},
                        {"rangeBody", std::string(mask.range)},
                        {"kindIsCausal", std::string(mask.kindIsCausal)},
                        {"valueTile", valueTile}});
  kernel.source = assembleTranslationUnit(kernel,
                                          "Paged attention, " + std::string(mask.rule) +
                                              " Online softmax, GQA group " +
                                              std::to_string(params.heads / params.kvHeads) + ", " +
                                              std::string(elementTypeName(element)) +
                                              " storage.",
                                          body);
  return kernel;
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
  else if (p.mask == kp::AttentionMask::blockCausal)
    attention.mask = MaskKind::blockCausal;
  else
    attention.mask = windowed ? MaskKind::bidirectionalWindow : MaskKind::bidirectional;
  attention.pageSize = options.pageSize;
  attention.element = element;
  launched.push_back(generateAttention(attention));
  return Status::ok();
}

} // namespace dlm::codegen
