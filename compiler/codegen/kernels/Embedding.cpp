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

// The lookup; ${copyRow} moves row `from` (table row `token`, or row 0 when the token is out of
// range) to `to`, zeros when !valid, in accesses of kVector elements.
constexpr std::string_view kBody = R"cuda(${rowConstants}${copyConstants}
${entryPoint} {
  const int row = blockIdx.x;
  if (row >= count)
    return;
  const long long token = tokens[row];
  const bool valid = token >= 0 && token < tableRows;
  const Element *from = table + (valid ? token : 0) * kWidth;
  Element *to = out + (long long)row * outStride;
${copyRow}}
)cuda";

// A plain lookup moves raw bits, kVector elements as one access of a raw chunk type.
constexpr std::string_view kRawConstants =
    R"cuda(// kVector elements moved as one ${chunkBytes}-byte access.
using Chunk = ${chunk};
)cuda";
constexpr std::string_view kRawCopy =
    R"cuda(  const Chunk *fromChunks = reinterpret_cast<const Chunk *>(from);
  Chunk *toChunks = reinterpret_cast<Chunk *>(to);
  for (int chunk = threadIdx.x; chunk < kChunks; chunk += kThreads)
    toChunks[chunk] = valid ? fromChunks[chunk] : Chunk{};
)cuda";

// A scaled lookup (Gemma's sqrt(H) embedding scale): the row times the factor in float32.
constexpr std::string_view kScaledConstants = "constexpr float kScale = ${scale};\n";
constexpr std::string_view kScaledCopy =
    R"cuda(  for (int chunk = threadIdx.x; chunk < kChunks; chunk += kThreads) {
    float values[kVector];
    dlm_device::loadFloats<kVector>(from + chunk * kVector, values);
#pragma unroll
    for (int k = 0; k < kVector; ++k)
      values[k] = valid ? values[k] * kScale : 0.f;
    dlm_device::storeFloats<kVector>(to + chunk * kVector, values);
  }
)cuda";

} // namespace

StatusOr<KernelSource> generateEmbedding(const EmbeddingParams &params) {
  DLM_RETURN_IF_ERROR(checkWidth("embedding: width", params.width, 20));
  if (!(params.scale > 0) || !std::isfinite(params.scale))
    return Status::error("embedding: scale must be a positive finite number");
  const bool scaled = params.scale != 1.0;
  // The scaled lookup reads and writes in accesses of the same kVector elements.
  const RowCopyShape copy = rowCopyShape(params.element, params.width);

  // setRowCopyLaunch sets the block's threads.
  KernelSource kernel =
      rowKernelSource("embedding", "dlm_embedding", params.width, params.element, false, 0);
  if (scaled) {
    kernel.name += "_s" + identifierFragment(params.scale);
    kernel.specialisation["scale"] = params.scale;
  }
  setRowCopyLaunch(kernel, copy);
  const std::string element(cudaElementType(params.element));
  kernel.parameters = {
      {"const int *__restrict__", "tokens"},
      {"int", "count"},
      {"const " + element + " *__restrict__", "table"},
      {"long long", "tableRows"},
      {element + " *__restrict__", "out"},
      {"long long", "outStride"},
  };
  DLM_RETURN_IF_ERROR(declareLaunch(
      kernel, {"tokens", "rows", "weight:weight", "weight_rows:weight", "result", "result_stride"},
      "rows,1"));
  const std::string copyConstants =
      scaled ? expandTemplate(kScaledConstants, {{"scale", floatLiteral(params.scale)}})
             : expandTemplate(kRawConstants, {{"chunk", std::string(rawChunkType(copy.chunkBytes))},
                                              {"chunkBytes", std::to_string(copy.chunkBytes)}});
  const std::string body =
      expandKernelBody(kernel, kBody,
                       {{"rowConstants", rowVectorConstants(params.element, params.width)},
                        {"copyConstants", copyConstants},
                        {"copyRow", std::string(scaled ? kScaledCopy : kRawCopy)}});
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
