// Mixture of experts, step 4 of 4: y[t] = sum of weight[t, j] * out[t * k + j] over the token's
// k experts taken in ascending expert id (the CPU backend's order: it accumulates expert by
// expert), in fp32, stored at the device precision. One block per token.
//
// Arguments: choice [tokens, k], weight [tokens, k] (f32), expertOut [tokens * k, H] (f32),
// tokens, y [tokens, H] (token stride yStride). Grid: x = tokens; 256 threads.
#include "compiler/codegen/KernelText.h"
#include "compiler/codegen/Kernels.h"

namespace dlm::codegen {

namespace {

constexpr std::string_view kBody = R"cuda(using Element = ${element};
constexpr int kHidden = ${hidden};
constexpr int kTopK = ${topK};

${entryPoint} {
  const int token = blockIdx.x;
  if (token >= tokens)
    return;
  __shared__ int sOrder[kTopK];
  if (threadIdx.x == 0) {
    // The token's choices by ascending expert id (they are distinct).
    const int *chosen = choice + (long long)token * kTopK;
    int previous = -1;
    for (int j = 0; j < kTopK; ++j) {
      int next = -1;
      for (int i = 0; i < kTopK; ++i)
        if (chosen[i] > previous && (next < 0 || chosen[i] < chosen[next]))
          next = i;
      sOrder[j] = next;
      previous = chosen[next];
    }
  }
  __syncthreads();
  const long long firstSlot = (long long)token * kTopK;
  for (int h = threadIdx.x; h < kHidden; h += kThreads) {
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < kTopK; ++j) {
      const long long slot = firstSlot + sOrder[j];
      sum += weight[slot] * expertOut[slot * kHidden + h];
    }
    dlm_device::storeFloat(y + (long long)token * yStride + h, sum);
  }
}
)cuda";

} // namespace

StatusOr<KernelSource> generateMoeCombine(const MoeParams &params) {
  DLM_RETURN_IF_ERROR(checkMoeParams(params));
  const std::string element(cudaElementType(params.element));
  KernelSource kernel;
  kernel.kind = "moe_combine";
  kernel.name = "dlm_moe_combine_h" + std::to_string(params.hidden) + "_k" +
                std::to_string(params.topK) + "_" + std::string(elementTypeName(params.element));
  kernel.hot = false;
  kernel.blockThreads = 256;
  kernel.grid = "x = tokens";
  kernel.sharedMemoryBytes = static_cast<unsigned>(4 * params.topK);
  kernel.parameters = {
      {"const int *__restrict__", "choice"},
      {"const float *__restrict__", "weight"},
      {"const float *__restrict__", "expertOut"},
      {"int", "tokens"},
      {element + " *__restrict__", "y"},
      {"long long", "yStride"},
  };
  kernel.specialisation = {{"hidden", params.hidden},
                           {"top_k", params.topK},
                           {"element", std::string(elementTypeName(params.element))}};
  const std::string body = expandKernelBody(kernel, kBody,
                                            {{"element", element},
                                             {"hidden", std::to_string(params.hidden)},
                                             {"topK", std::to_string(params.topK)}});
  kernel.source = assembleTranslationUnit(
      kernel, "MoE weighted sum of " + std::to_string(params.topK) + " experts per token.", body);
  return kernel;
}

} // namespace dlm::codegen
