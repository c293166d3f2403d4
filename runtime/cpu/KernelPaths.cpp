// CpuBackend::kernelPaths: which GEMM each weight's records take on this CPU (PackedLinear's
// choice, made once at load), and which level of the vectorised loops the loader picked, for
// dlm-prof to print.
#include "runtime/cpu/BlockedTileKernels.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/Kernels.h"

namespace dlm::cpu {

using program::KernelKind;
using program::ProgramRecord;

namespace {

// The x86-64 level of the DLM_VECTOR_CLONES loops this CPU runs (the clones' cpuid test).
std::string vectorLoopLevel() {
#if defined(__x86_64__) && defined(__clang__) && !defined(DLM_NO_TARGET_CLONES)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("x86-64-v4"))
    return "x86-64-v4 (AVX-512)";
  if (__builtin_cpu_supports("x86-64-v3"))
    return "x86-64-v3 (AVX2, FMA)";
  return "x86-64 (SSE2)";
#else
  return "the build's target (no per-CPU clones in this build)";
#endif
}

// A projection whose weight is not packed: every one when batch-invariant, else one that
// another record reads widened and that is read so rather than held twice.
std::string unpackedPath(bool batchInvariant) {
  return batchInvariant ? "float32, InvariantGemm (batch-invariant)"
                        : "float32 widened at load (another record reads it so), InvariantGemm";
}

// A tied LM head that reads the embedding table's copy where it lies (readsInPlace).
std::string inPlacePath(artifact::DType dtype, bool bf16Arithmetic) {
  const std::string stored = std::string(artifact::dtypeName(dtype)) +
                             " as stored (the embedding table's copy, held once), ";
  if (dtype == artifact::DType::f32)
    return stored + "oneDNN sgemm";
  return stored + (bf16Arithmetic && hasBf16DotKernels()
                       ? "bf16 x bf16 AVX-512-BF16 dot products"
                       : "AVX-512 dot products, float32 arithmetic");
}

} // namespace

std::vector<std::string> CpuBackend::kernelPaths() const {
  // The distinct weights that took each path, by the kind of record that reads them.
  std::map<std::string, std::set<const model::HostTensor *>> byPath;
  for (const auto &[name, program] : functions_)
    for (const ProgramRecord &k : program.kernels) {
      if (k.projects()) {
        auto packed = packed_.find(k.weight());
        auto table = storedTables_.find(k.weight());
        const std::string path = packed != packed_.end() ? packed->second->path()
                                 : table != storedTables_.end() && readsInPlace(table->second->view)
                                     ? inPlacePath(table->second->view.dtype, bf16Arithmetic_)
                                     : unpackedPath(batchInvariant_);
        byPath[std::string(k.kind() == KernelKind::lmHead ? "LM head" : "projections") + ": " +
               path]
            .insert(k.weight());
      } else if (k.kind() == KernelKind::softEmbedding) {
        byPath["soft-embedding tables: " + softEmbeddingPath(tableAsStored(k.weight()))].insert(
            k.weight());
      } else if (k.kind() == KernelKind::moe) {
        const auto &p = k.as<spec::kernels::MoeParams>();
        for (const spec::kernels::WeightRef *stack : {&p.gateUp, &p.down}) {
          auto packed = packedExperts_.find(stack->tensor);
          byPath["expert stacks: " + (packed != packedExperts_.end()
                                          ? packed->second->expert(0).path()
                                          : std::string("float32, widened at load"))]
              .insert(stack->tensor);
        }
      }
    }
  std::vector<std::string> lines;
  for (const auto &[path, weights] : byPath)
    lines.push_back(std::to_string(weights.size()) + " " + path);
  if (batchInvariant_)
    lines.push_back("batch-invariant: every product a row at a time");
  lines.push_back("vectorised loops: " + vectorLoopLevel());
  return lines;
}

} // namespace dlm::cpu
