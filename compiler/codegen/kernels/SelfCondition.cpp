// DiffusionGemma's self-conditioning input (SPECS §1.4): s[row] = scale * softmax(z_row) @ E,
// with z = softcap(logits) / T exactly as the sampler computes it (same float operations: the
// soft-cap, then a multiply by 1 / T; T <= 0 leaves z = softcap(logits)), E the [vocab, width]
// embedding table and scale sqrt(H) for DiffusionGemma (passed in, so the caller decides its
// rounding). The probabilities are never stored: they come from the sampler's per-row softmax
// statistics (SamplerParams::softmaxStatistics: max of z and sum of e^(z - max)), so each one is
// a single e^(z - max) / sum computed where it is used, kept in fp32 (as vLLM's fp32 buffer;
// HF rounds logits and probabilities to bf16 on the way).
//
// It is a [rows x vocab] x [vocab x width] product with that prologue fused. A block computes a
// 64-row x 128-column tile of s, walking the vocabulary in tiles of 16: the 256 threads turn
// 64 x 16 logits into probabilities and 16 x 128 table elements into floats in shared memory,
// then each thread accumulates its 4 x 8 outputs in fp32 registers. SIMT FMAs, not tensor cores:
// at DiffusionGemma's shapes (canvas 256, vocab 262144, H 2816) this is ~190 G multiply-adds per
// step, so a tensor-core (mma) version is the next step once a GPU can time it; this one fixes
// the semantics and the interface. Not wired into any model yet: importing DiffusionGemma is
// "not supported yet".
//
// Arguments: logits [rows, vocab] f32 (row stride rowStride), rows, rowRequest [rows],
// requestTemperature [requests] (the sampler's), softmaxMax [rows] and softmaxSum [rows] (the
// sampler's statistics of the same rows), table [vocab, width] (rows contiguous), scale, out
// [rows, width] (row stride outStride), of the table's element type.
// Grid: x = ceil(width / 128), y = ceil(rows / 64); 256 threads.
#include "compiler/codegen/KernelText.h"
#include "compiler/codegen/Kernels.h"

namespace dlm::codegen {

namespace {

constexpr int64_t kTileRows = 64;
constexpr int64_t kTileColumns = 128;
constexpr int64_t kTileVocab = 16;
constexpr int64_t kThreads = 256;

constexpr std::string_view kBody = R"cuda(using Element = ${element};
constexpr int kVocab = ${vocab};
constexpr int kWidth = ${width};
constexpr int kThreads = ${threads};
constexpr int kTileRows = ${tileRows};
constexpr int kTileColumns = ${tileColumns};
constexpr int kTileVocab = ${tileVocab};
// Each thread owns kRowsPerThread x kColumnsPerThread outputs of the tile.
constexpr int kRowsPerThread = 4;
constexpr int kColumnsPerThread = 8;
constexpr int kColumnThreads = kTileColumns / kColumnsPerThread; // 16
// The probability tile's row pitch: a multiple of 4 keeps float4 reads aligned; the 4 extra
// floats spread the transposing stores over more banks.
constexpr int kPitch = kTileRows + 4;
constexpr bool kSoftcap = ${hasSoftcap};
constexpr float kSoftcapValue = ${softcap};

extern "C" __global__ void __launch_bounds__(kThreads) ${name}(
${signature}) {
  // 16-byte aligned: both are read as float4.
  __shared__ __align__(16) float sProbability[kTileVocab][kPitch]; // [vocab in tile][row in tile]
  __shared__ __align__(16) float sTable[kTileVocab][kTileColumns]; // [vocab in tile][column]
  __shared__ float sInverseTemperature[kTileRows];
  __shared__ float sMax[kTileRows];
  __shared__ float sInverseSum[kTileRows];

  const int firstRow = blockIdx.y * kTileRows;
  const int firstColumn = blockIdx.x * kTileColumns;
  const int columnThread = threadIdx.x % kColumnThreads;
  const int rowThread = threadIdx.x / kColumnThreads;

  if (threadIdx.x < kTileRows) {
    const int row = firstRow + threadIdx.x;
    float inverseTemperature = 1.f, max = 0.f, inverseSum = 0.f;
    if (row < rows) {
      // As the sampler: greedy rows (T <= 0) keep z = logit.
      const float temperature = requestTemperature[rowRequest[row]];
      inverseTemperature = temperature > 0.f ? 1.f / temperature : 1.f;
      max = softmaxMax[row];
      inverseSum = 1.f / softmaxSum[row];
    }
    sInverseTemperature[threadIdx.x] = inverseTemperature;
    sMax[threadIdx.x] = max;
    sInverseSum[threadIdx.x] = inverseSum;
  }
  __syncthreads();

  float accumulator[kRowsPerThread][kColumnsPerThread];
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
    for (int j = 0; j < kColumnsPerThread; ++j)
      accumulator[i][j] = 0.f;

  for (int firstToken = 0; firstToken < kVocab; firstToken += kTileVocab) {
    // Probabilities: 16 consecutive threads read 16 consecutive logits of one row.
#pragma unroll
    for (int part = 0; part < kTileRows * kTileVocab / kThreads; ++part) {
      const int index = threadIdx.x + part * kThreads;
      const int r = index / kTileVocab, k = index % kTileVocab;
      const int row = firstRow + r, token = firstToken + k;
      float probability = 0.f;
      if (row < rows && token < kVocab) {
        float logit = logits[(long long)row * rowStride + token];
        if (kSoftcap)
          logit = kSoftcapValue * tanhf(logit / kSoftcapValue);
        // e^-inf = 0: a -inf logit has no weight.
        probability = __expf(logit * sInverseTemperature[r] - sMax[r]) * sInverseSum[r];
      }
      sProbability[k][r] = probability;
    }
    // Table rows: a warp reads 32 consecutive elements of one row of E.
#pragma unroll
    for (int part = 0; part < kTileVocab * kTileColumns / kThreads; ++part) {
      const int index = threadIdx.x + part * kThreads;
      const int k = index / kTileColumns, c = index % kTileColumns;
      const int token = firstToken + k, column = firstColumn + c;
      sTable[k][c] = token < kVocab && column < kWidth
                         ? dlm_device::toFloat(table[(long long)token * kWidth + column])
                         : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kTileVocab; ++k) {
      const float4 p = *reinterpret_cast<const float4 *>(&sProbability[k][rowThread * 4]);
      const float4 e0 =
          *reinterpret_cast<const float4 *>(&sTable[k][columnThread * kColumnsPerThread]);
      const float4 e1 =
          *reinterpret_cast<const float4 *>(&sTable[k][columnThread * kColumnsPerThread + 4]);
      const float ps[kRowsPerThread] = {p.x, p.y, p.z, p.w};
      const float es[kColumnsPerThread] = {e0.x, e0.y, e0.z, e0.w, e1.x, e1.y, e1.z, e1.w};
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
        for (int j = 0; j < kColumnsPerThread; ++j)
          accumulator[i][j] = fmaf(ps[i], es[j], accumulator[i][j]);
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    const int row = firstRow + rowThread * kRowsPerThread + i;
    if (row >= rows)
      continue;
#pragma unroll
    for (int j = 0; j < kColumnsPerThread; ++j) {
      const int column = firstColumn + columnThread * kColumnsPerThread + j;
      if (column < kWidth)
        dlm_device::storeFloat(out + (long long)row * outStride + column,
                               accumulator[i][j] * scale);
    }
  }
}
)cuda";

} // namespace

StatusOr<KernelSource> generateSelfCondition(const SelfConditionParams &params) {
  if (params.vocab < 2 || params.vocab > (int64_t(1) << 30))
    return Status::error("self_condition: vocab must be in [2, 2^30], got " +
                         std::to_string(params.vocab));
  if (params.width <= 0 || params.width > (int64_t(1) << 20))
    return Status::error("self_condition: width must be in [1, 2^20], got " +
                         std::to_string(params.width));
  if (params.softcap < 0)
    return Status::error("self_condition: softcap must be >= 0 (0: none)");

  KernelSource kernel;
  kernel.kind = "self_condition";
  kernel.name = "dlm_self_condition_v" + std::to_string(params.vocab) + "_w" +
                std::to_string(params.width) + "_" +
                std::string(elementTypeName(params.element));
  if (params.softcap > 0)
    kernel.name += "_cap" + identifierFragment(params.softcap);
  kernel.hot = true;
  kernel.blockThreads = static_cast<unsigned>(kThreads);
  kernel.grid = "x = ceil(width / " + std::to_string(kTileColumns) + "), y = ceil(rows / " +
                std::to_string(kTileRows) + ")";
  kernel.sharedMemoryBytes = static_cast<unsigned>(
      4 * (kTileVocab * (kTileRows + 4) + kTileVocab * kTileColumns + 3 * kTileRows));
  const std::string element(cudaElementType(params.element));
  kernel.parameters = {
      {"const float *__restrict__", "logits"},
      {"long long", "rowStride"},
      {"int", "rows"},
      {"const int *__restrict__", "rowRequest"},
      {"const float *__restrict__", "requestTemperature"},
      {"const float *__restrict__", "softmaxMax"},
      {"const float *__restrict__", "softmaxSum"},
      {"const " + element + " *__restrict__", "table"},
      {"float", "scale"},
      {element + " *__restrict__", "out"},
      {"long long", "outStride"},
  };
  kernel.specialisation = {{"vocab", params.vocab},
                           {"width", params.width},
                           {"softcap", params.softcap},
                           {"element", std::string(elementTypeName(params.element))}};
  const std::string body =
      expandTemplate(kBody, {{"element", element},
                             {"vocab", std::to_string(params.vocab)},
                             {"width", std::to_string(params.width)},
                             {"threads", std::to_string(kThreads)},
                             {"tileRows", std::to_string(kTileRows)},
                             {"tileColumns", std::to_string(kTileColumns)},
                             {"tileVocab", std::to_string(kTileVocab)},
                             {"hasSoftcap", boolLiteral(params.softcap > 0)},
                             {"softcap", floatLiteral(params.softcap > 0 ? params.softcap : 1.0)},
                             {"name", kernel.name},
                             {"signature", renderSignature(kernel.parameters)}});
  kernel.source = assembleTranslationUnit(
      kernel,
      "Self-conditioning input: softmax(logits / T) @ E * scale over a vocabulary of " +
          std::to_string(params.vocab) + " and rows of " + std::to_string(params.width) + " " +
          std::string(elementTypeName(params.element)) + ", probabilities never stored.",
      body);
  return kernel;
}

} // namespace dlm::codegen
