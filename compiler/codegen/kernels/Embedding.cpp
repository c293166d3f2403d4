// Token embedding lookup, one block per token: out row r is table row tokens[r], copied in the
// widest aligned accesses the row width allows (16 bytes when it divides). No arithmetic, so the
// copy moves raw bits and f32 and bf16 tables differ only in the access width. A token outside
// [0, tableRows) writes a zero row instead of reading out of bounds; the host validates ids
// before the launch, so that is a guard, not a feature.
//
// Arguments: tokens [count], count, table [tableRows, width] (rows contiguous), tableRows, out,
// outStride (elements between output rows; a multiple of the access width).
#include "compiler/codegen/KernelText.h"
#include "compiler/codegen/Kernels.h"
#include "compiler/codegen/RecordKernels.h"

#include <cmath>

namespace dlm::codegen {

namespace {

constexpr std::string_view kBody = R"cuda(using Element = ${element};
// kVector elements moved as one ${chunkBytes}-byte access.
using Chunk = ${chunk};
constexpr int kWidth = ${width};
constexpr int kThreads = ${threads};
constexpr int kVector = ${vector};
constexpr int kChunks = kWidth / kVector;

extern "C" __global__ void __launch_bounds__(kThreads) ${name}(
${signature}) {
  const int row = blockIdx.x;
  if (row >= count)
    return;
  const long long token = tokens[row];
  const bool valid = token >= 0 && token < tableRows;
  const Chunk *from = reinterpret_cast<const Chunk *>(table + (valid ? token : 0) * kWidth);
  Chunk *to = reinterpret_cast<Chunk *>(out + (long long)row * outStride);
  for (int chunk = threadIdx.x; chunk < kChunks; chunk += kThreads)
    to[chunk] = valid ? from[chunk] : Chunk{};
}
)cuda";

// A scaled lookup (Gemma's sqrt(H) embedding scale): the row times the factor in float32, in
// accesses of kVector elements.
constexpr std::string_view kScaledBody = R"cuda(using Element = ${element};
constexpr int kWidth = ${width};
constexpr int kThreads = ${threads};
constexpr int kVector = ${vector};
constexpr int kChunks = kWidth / kVector;
constexpr float kScale = ${scale};

extern "C" __global__ void __launch_bounds__(kThreads) ${name}(
${signature}) {
  const int row = blockIdx.x;
  if (row >= count)
    return;
  const long long token = tokens[row];
  const bool valid = token >= 0 && token < tableRows;
  const Element *from = table + (valid ? token : 0) * kWidth;
  Element *to = out + (long long)row * outStride;
  for (int chunk = threadIdx.x; chunk < kChunks; chunk += kThreads) {
    float values[kVector];
    dlm_device::loadFloats<kVector>(from + chunk * kVector, values);
#pragma unroll
    for (int k = 0; k < kVector; ++k)
      values[k] = valid ? values[k] * kScale : 0.f;
    dlm_device::storeFloats<kVector>(to + chunk * kVector, values);
  }
}
)cuda";

} // namespace

StatusOr<KernelSource> generateEmbedding(const EmbeddingParams &params) {
  if (params.width <= 0 || params.width > (int64_t(1) << 20))
    return Status::error("embedding: width must be in [1, 2^20], got " +
                         std::to_string(params.width));
  if (!(params.scale > 0) || !std::isfinite(params.scale))
    return Status::error("embedding: scale must be a positive finite number");
  const bool scaled = params.scale != 1.0;
  // The scaled lookup reads and writes in accesses of the same kVector elements.
  const RowCopyShape copy = rowCopyShape(params.element, params.width);

  KernelSource kernel;
  kernel.kind = "embedding";
  kernel.name = "dlm_embedding_w" + std::to_string(params.width) + "_" +
                std::string(elementTypeName(params.element)) +
                (scaled ? "_s" + identifierFragment(params.scale) : "");
  kernel.hot = false;
  kernel.blockThreads = static_cast<unsigned>(copy.threads);
  kernel.grid = "x = count";
  kernel.sharedMemoryBytes = 0;
  const std::string element(cudaElementType(params.element));
  kernel.parameters = {
      {"const int *__restrict__", "tokens"},
      {"int", "count"},
      {"const " + element + " *__restrict__", "table"},
      {"long long", "tableRows"},
      {element + " *__restrict__", "out"},
      {"long long", "outStride"},
  };
  kernel.specialisation = {{"width", params.width},
                           {"element", std::string(elementTypeName(params.element))}};
  if (scaled)
    kernel.specialisation["scale"] = params.scale;
  DLM_RETURN_IF_ERROR(declareLaunch(
      kernel, {"tokens", "rows", "weight:weight", "weight_rows:weight", "result", "result_stride"},
      "rows,1"));
  const std::string body =
      scaled ? expandTemplate(kScaledBody, {{"element", element},
                                            {"width", std::to_string(params.width)},
                                            {"threads", std::to_string(copy.threads)},
                                            {"vector", std::to_string(copy.vector)},
                                            {"scale", floatLiteral(params.scale)},
                                            {"name", kernel.name},
                                            {"signature", renderSignature(kernel.parameters)}})
             : expandTemplate(kBody, {{"element", element},
                             {"chunk", std::string(rawChunkType(copy.chunkBytes))},
                             {"chunkBytes", std::to_string(copy.chunkBytes)},
                             {"width", std::to_string(params.width)},
                             {"threads", std::to_string(copy.threads)},
                             {"vector", std::to_string(copy.vector)},
                             {"name", kernel.name},
                             {"signature", renderSignature(kernel.parameters)}});
  kernel.source = assembleTranslationUnit(
      kernel,
      "Embedding lookup: rows of " + std::to_string(params.width) + " " +
          std::string(elementTypeName(params.element)) + ", a zero row for an out-of-range token.",
      body);
  return kernel;
}

Status RecordKernels::embedding() {
  launched.push_back(generateEmbedding({width, element, as<kp::EmbeddingParams>().scale}));
  return Status::ok();
}

} // namespace dlm::codegen
