// Writes a pass's new K and V rows into the paged KV cache, one block per token: row r of k and
// v goes to token slot s = firstSlot + r of the sequence, i.e. to
//   pages + blockTable[s / pageSize] * pageStride + (s % pageSize) * slotStride,
// the addressing the attention kernel reads (a slot holds all KV heads, head g at g * headDim).
// A pure copy, so raw bits move in the widest aligned access the row width allows.
//
// Arguments: k, v [count rows, kvWidth] (row stride rowStride: both are views into one fused
// QKV projection output), rowStride, count, blockTable [pages of the sequence], firstSlot,
// kPages, vPages, pageStride, slotStride (elements; rowStride, pageStride and slotStride are
// multiples of the access width).
#include "compiler/codegen/KernelText.h"
#include "compiler/codegen/Kernels.h"
#include "compiler/codegen/RecordKernels.h"

namespace dlm::codegen {

namespace {

constexpr std::string_view kBody =
    R"cuda(${rowConstants}// kVector elements moved as one ${chunkBytes}-byte access.
using Chunk = ${chunk};
constexpr int kPageSize = ${pageSize};

${entryPoint} {
  const int row = blockIdx.x;
  if (row >= count)
    return;
  const int slot = firstSlot + row;
  const long long at = (long long)blockTable[slot / kPageSize] * pageStride +
                       (long long)(slot % kPageSize) * slotStride;
  const Chunk *kFrom = reinterpret_cast<const Chunk *>(k + (long long)row * rowStride);
  const Chunk *vFrom = reinterpret_cast<const Chunk *>(v + (long long)row * rowStride);
  Chunk *kTo = reinterpret_cast<Chunk *>(kPages + at);
  Chunk *vTo = reinterpret_cast<Chunk *>(vPages + at);
  for (int chunk = threadIdx.x; chunk < kChunks; chunk += kThreads) {
    kTo[chunk] = kFrom[chunk];
    vTo[chunk] = vFrom[chunk];
  }
}
)cuda";

} // namespace

StatusOr<KernelSource> generateKvStore(const KvStoreParams &params) {
  DLM_RETURN_IF_ERROR(checkWidth("kv_store: kv_width", params.kvWidth, 20));
  if (params.pageSize <= 0 || params.pageSize > 65536)
    return Status::error("kv_store: page_size must be in [1, 65536], got " +
                         std::to_string(params.pageSize));
  const RowCopyShape copy = rowCopyShape(params.element, params.kvWidth);

  KernelSource kernel;
  kernel.kind = "kv_store";
  kernel.name = "dlm_kv_store_w" + std::to_string(params.kvWidth) + "_p" +
                std::to_string(params.pageSize) + "_" +
                std::string(elementTypeName(params.element));
  kernel.hot = false;
  setRowCopyLaunch(kernel, copy);
  const std::string element(cudaElementType(params.element));
  kernel.parameters = {
      {"const " + element + " *__restrict__", "k"},
      {"const " + element + " *__restrict__", "v"},
      {"long long", "rowStride"},
      {"int", "count"},
      {"const int *__restrict__", "blockTable"},
      {"int", "firstSlot"},
      {element + " *__restrict__", "kPages"},
      {element + " *__restrict__", "vPages"},
      {"long long", "pageStride"},
      {"long long", "slotStride"},
  };
  kernel.specialisation = {{"kv_width", params.kvWidth},
                           {"page_size", params.pageSize},
                           {"element", std::string(elementTypeName(params.element))}};
  const std::string body =
      expandKernelBody(kernel, kBody,
                       {{"rowConstants", rowVectorConstants(params.element, params.kvWidth)},
                        {"chunk", std::string(rawChunkType(copy.chunkBytes))},
                        {"chunkBytes", std::to_string(copy.chunkBytes)},
                        {"pageSize", std::to_string(params.pageSize)}});
  kernel.source = assembleTranslationUnit(
      kernel,
      "KV store: rows of " + std::to_string(params.kvWidth) + " " +
          std::string(elementTypeName(params.element)) + " into token slots of " +
          std::to_string(params.pageSize) + "-slot pages.",
      body);
  return kernel;
}

Status RecordKernels::kvStore() {
  DLM_ASSIGN_OR_RETURN(int64_t kvWidth, inputWidth());
  launched.push_back(generateKvStore({kvWidth, options.pageSize, element}));
  return Status::ok();
}

} // namespace dlm::codegen
