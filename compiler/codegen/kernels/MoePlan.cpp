// Mixture of experts, step 2 of 4: each expert's slots. Slot s = t * k + j is token t's j-th
// choice (MoeRoute.cpp); expert e's list holds, in ascending order, the slots that chose it, and
// counts[e] their number (at most `tokens`: a token chooses an expert once). One block; thread i
// scans the choices for experts i, i + 256, ...: deterministic, no atomics, no zeroing.
//
// Arguments: choice [tokens * k], tokens, lists [E, tokens] (row stride tokens), counts [E].
// Grid: x = 1; 256 threads.
#include "compiler/codegen/KernelText.h"
#include "compiler/codegen/Kernels.h"

namespace dlm::codegen {

namespace {

constexpr std::string_view kBody = R"cuda(constexpr int kExperts = ${experts};
constexpr int kTopK = ${topK};

${entryPoint} {
  const int slots = tokens * kTopK;
  for (int e = threadIdx.x; e < kExperts; e += kThreads) {
    int *list = lists + (long long)e * tokens;
    int count = 0;
    for (int s = 0; s < slots; ++s)
      if (choice[s] == e)
        list[count++] = s;
    counts[e] = count;
  }
}
)cuda";

} // namespace

StatusOr<KernelSource> generateMoePlan(const MoeParams &params) {
  DLM_RETURN_IF_ERROR(checkMoeParams(params));
  KernelSource kernel;
  kernel.kind = "moe_plan";
  kernel.name = "dlm_moe_plan_e" + std::to_string(params.experts) + "_k" +
                std::to_string(params.topK);
  kernel.hot = false;
  kernel.blockThreads = 256;
  kernel.grid = "x = 1";
  kernel.sharedMemoryBytes = 0;
  kernel.parameters = {
      {"const int *__restrict__", "choice"},
      {"int", "tokens"},
      {"int *__restrict__", "lists"},
      {"int *__restrict__", "counts"},
  };
  kernel.specialisation = {{"experts", params.experts}, {"top_k", params.topK}};
  const std::string body = expandKernelBody(
      kernel, kBody,
      {{"experts", std::to_string(params.experts)}, {"topK", std::to_string(params.topK)}});
  kernel.source = assembleTranslationUnit(
      kernel, "MoE plan: the slots of each of " + std::to_string(params.experts) + " experts.",
      body);
  return kernel;
}

} // namespace dlm::codegen
