// The LM head's soft-cap, in place over its float32 logits: x = softcap * tanh(x / softcap), the
// same float32 operations as the CPU backend (runtime/cpu/Elementwise.cpp softcapInPlace).
//
// Arguments: logits (f32, contiguous), count (elements). Grid: x = ceil(count / 1024) (each of
// the 256 threads takes four elements, a block-stride apart); 256 threads.
#include "compiler/codegen/KernelText.h"
#include "compiler/codegen/Kernels.h"

#include <cmath>

namespace dlm::codegen {

namespace {

constexpr std::string_view kBody = R"cuda(constexpr int kPerThread = 4;
constexpr float kCap = ${softcap};

${entryPoint} {
  const long long first = (long long)blockIdx.x * kThreads * kPerThread + threadIdx.x;
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const long long i = first + (long long)k * kThreads;
    if (i < count)
      logits[i] = kCap * tanhf(logits[i] / kCap);
  }
}
)cuda";

} // namespace

StatusOr<KernelSource> generateSoftcap(const SoftcapParams &params) {
  if (!(params.softcap > 0) || !std::isfinite(params.softcap))
    return Status::error("softcap: the cap must be a positive finite number");
  KernelSource kernel;
  kernel.kind = "softcap";
  kernel.name = "dlm_softcap_" + identifierFragment(params.softcap);
  kernel.hot = false;
  kernel.blockThreads = 256;
  kernel.grid = "x = ceil(count / 1024)";
  kernel.sharedMemoryBytes = 0;
  kernel.parameters = {
      {"float *__restrict__", "logits"},
      {"long long", "count"},
  };
  kernel.specialisation = {{"softcap", params.softcap}};
  const std::string body =
      expandKernelBody(kernel, kBody, {{"softcap", floatLiteral(params.softcap)}});
  kernel.source = assembleTranslationUnit(
      kernel, "Logit soft-cap " + doubleLiteral(params.softcap) + " * tanh(x / cap), float32.",
      body);
  return kernel;
}

} // namespace dlm::codegen
