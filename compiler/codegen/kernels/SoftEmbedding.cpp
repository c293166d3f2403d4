// The soft_embedding record (runtime/model/KernelProgram.h): out[row] = scale *
// softmax(input[row]) @ table[:inputWidth] for the forward's float32 input rows, zero rows when
// the forward has none (input null: self-conditioning's first step). The CPU backend streams it
// row by row into a GEMM (runtime/cpu/SoftEmbedding.cpp); here it is one kernel: a block
// computes a 64-row x 128-column tile of out. It first finds its 64 rows' softmax statistics
// (max, then the sum of e^(x - max), each warp 8 rows, in fp32), then walks the input columns in
// tiles of 16: the 256 threads turn 64 x 16 inputs into probabilities and 16 x 128 table elements
// into floats in shared memory, and each thread accumulates its 4 x 8 outputs in fp32 registers.
// The probabilities are never stored. The statistics are recomputed by each of the
// ceil(width / 128) column blocks of a row tile: one read of the rows against 128 multiply-adds
// per element in the product. SIMT FMAs, not tensor cores: at DiffusionGemma's shapes (canvas
// 256, vocabulary 262144, H 2816) that is ~190 G multiply-adds per step, so a tensor-core (mma)
// version is the next step once a GPU can time it.
//
// Arguments: input [rows, inputWidth] f32 (row stride inputStride) or null, inputWidth (<= the
// table's rows), rows, table [>= inputWidth, width] (rows contiguous, the device precision),
// scale, tokens [rows] and maskToken (>= 0: a row of another token is a zero row; iteration
// smoothing's masked positions), inputScale (a device float the forward's caller sets, which
// multiplies scale: a graph's replay reads the new forward's), out [rows, width] (row stride
// outStride, the device precision).
// Grid: x = ceil(width / 128), y = ceil(rows / 64); 256 threads.
#include "compiler/codegen/KernelText.h"
#include "compiler/codegen/Kernels.h"
#include "compiler/codegen/RecordKernels.h"

namespace dlm::codegen {

namespace {

constexpr int64_t kTileRows = 64;
constexpr int64_t kTileColumns = 128;
constexpr int64_t kTileInput = 16;
constexpr int64_t kThreads = 256;

constexpr std::string_view kBody = R"cuda(using Element = ${element};
constexpr int kWidth = ${width};
constexpr int kWarps = kThreads / 32;
constexpr int kTileRows = ${tileRows};
constexpr int kTileColumns = ${tileColumns};
constexpr int kTileInput = ${tileInput};
constexpr int kRowsPerThread = 4;
constexpr int kColumnsPerThread = 8;
constexpr int kColumnThreads = kTileColumns / kColumnsPerThread; // 16
constexpr int kPitch = kTileRows + 4;

${entryPoint} {
  __shared__ __align__(16) float sProbability[kTileInput][kPitch]; // [input in tile][row]
  __shared__ __align__(16) float sTable[kTileInput][kTileColumns]; // [input in tile][column]
  __shared__ float sMax[kTileRows];
  __shared__ float sInverseSum[kTileRows]; // 0 for a row outside or of another token

  const int firstRow = blockIdx.y * kTileRows;
  const int firstColumn = blockIdx.x * kTileColumns;
  const int columnThread = threadIdx.x % kColumnThreads;
  const int rowThread = threadIdx.x / kColumnThreads;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;

  if (input == nullptr) { // no input rows: zeros (uniform over the block, before any barrier)
    for (int item = threadIdx.x; item < kTileRows * kTileColumns; item += kThreads) {
      const int row = firstRow + item / kTileColumns, column = firstColumn + item % kTileColumns;
      if (row < rows && column < kWidth)
        dlm_device::storeFloat(out + (long long)row * outStride + column, 0.f);
    }
    return;
  }

  // The rows' softmax statistics: warp w takes rows w, w + 8, ...
  for (int r = warp; r < kTileRows; r += kWarps) {
    const int row = firstRow + r;
    float max = dlm_device::negativeInfinity(), sum = 0.f;
    const bool used = row < rows && (maskToken < 0 || tokens[row] == maskToken);
    if (used) {
      const float *in = input + (long long)row * inputStride;
      for (int j = lane; j < inputWidth; j += 32)
        max = fmaxf(max, in[j]);
      max = dlm_device::warpMax(max);
      for (int j = lane; j < inputWidth; j += 32)
        sum += expf(in[j] - max);
      sum = dlm_device::warpSum(sum);
    }
    if (lane == 0) {
      sMax[r] = used ? max : 0.f;
      sInverseSum[r] = used ? 1.f / sum : 0.f;
    }
  }
  __syncthreads();

  float accumulator[kRowsPerThread][kColumnsPerThread];
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
    for (int j = 0; j < kColumnsPerThread; ++j)
      accumulator[i][j] = 0.f;

  for (int firstInput = 0; firstInput < inputWidth; firstInput += kTileInput) {
#pragma unroll
    for (int part = 0; part < kTileRows * kTileInput / kThreads; ++part) {
      const int index = threadIdx.x + part * kThreads;
      const int r = index / kTileInput, k = index % kTileInput;
      const int row = firstRow + r, column = firstInput + k;
      float probability = 0.f;
      if (row < rows && column < inputWidth && sInverseSum[r] != 0.f)
        probability =
            expf(input[(long long)row * inputStride + column] - sMax[r]) * sInverseSum[r];
      sProbability[k][r] = probability;
    }
#pragma unroll
    for (int part = 0; part < kTileInput * kTileColumns / kThreads; ++part) {
      const int index = threadIdx.x + part * kThreads;
      const int k = index / kTileColumns, c = index % kTileColumns;
      const int tableRow = firstInput + k, column = firstColumn + c;
      sTable[k][c] = tableRow < inputWidth && column < kWidth
                         ? dlm_device::toFloat(table[(long long)tableRow * kWidth + column])
                         : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kTileInput; ++k) {
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

  const float factor = scale * *inputScale;
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
                               accumulator[i][j] * factor);
    }
  }
}
)cuda";

} // namespace

StatusOr<KernelSource> generateSoftEmbedding(const SoftEmbeddingParams &params) {
  DLM_RETURN_IF_ERROR(checkWidth("soft_embedding: width", params.width, 20));
  KernelSource kernel = rowKernelSource("soft_embedding", "dlm_soft_embedding", params.width,
                                        params.element, true, static_cast<unsigned>(kThreads));
  kernel.grid = "x = ceil(width / " + std::to_string(kTileColumns) + "), y = ceil(rows / " +
                std::to_string(kTileRows) + ")";
  kernel.sharedMemoryBytes = static_cast<unsigned>(
      4 * (kTileInput * (kTileRows + 4) + kTileInput * kTileColumns + 2 * kTileRows));
  const std::string element(cudaElementType(params.element));
  kernel.parameters = {
      {"const float *__restrict__", "input"},
      {"long long", "inputStride"},
      {"int", "inputWidth"},
      {"int", "rows"},
      {"const " + element + " *__restrict__", "table"},
      {"float", "scale"},
      {"const int *__restrict__", "tokens"},
      {"int", "maskToken"},
      {"const float *__restrict__", "inputScale"},
      {element + " *__restrict__", "out"},
      {"long long", "outStride"},
  };
  const std::string body = expandKernelBody(kernel, kBody,
                                            {{"element", element},
                                             {"width", std::to_string(params.width)},
                                             {"tileRows", std::to_string(kTileRows)},
                                             {"tileColumns", std::to_string(kTileColumns)},
                                             {"tileInput", std::to_string(kTileInput)}});
  kernel.source = assembleTranslationUnit(
      kernel,
      "Soft embedding: softmax(input rows) @ table * scale into rows of " +
          std::to_string(params.width) + " " + std::string(elementTypeName(params.element)) +
          ", probabilities never stored.",
      body);
  return kernel;
}

Status RecordKernels::softEmbedding() {
  launched.push_back(generateSoftEmbedding({width, element}));
  return Status::ok();
}

} // namespace dlm::codegen
