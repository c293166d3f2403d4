// The next canvas after the accept rule, elementwise: a kept position takes its sampled token; a
// rejected candidate takes noise; a rejected position that is not a candidate keeps its token.
// The candidates are a specialisation chosen per decoding policy, as the CPU decoder does
// (RenoiseCandidates): every rejected position (the entropy-bound canvas, with either noise), or
// only the rejected positions holding the mask token (low-confidence blocks: a token once
// unmasked stays). Noise is the mask token, or a uniform token from the shared counter RNG:
// mix64(key(seed, request, renoise stream, step, position)) mod vocab. With `initialCanvas`
// every position takes noise from the initial-canvas stream (keep and sampled are not read): the
// first canvas of a block.
//
// Names: dlm_renoise_uniform_v<V>, dlm_renoise_mask_v<V> (masked only, LLaDA's blocks),
// dlm_renoise_mask_every_rejected_v<V> (an entropy-bound canvas re-masking), and
// dlm_initial_canvas_<noise>_v<V>.
//
// Arguments: rows, keep [rows], sampled [rows], canvas [rows] (in/out), rowRequest [rows],
// rowPosition [rows], per request: seed, id, step; maskToken.
#include "compiler/codegen/KernelText.h"
#include "compiler/codegen/Kernels.h"

namespace dlm::codegen {

namespace {

constexpr std::string_view kBody = R"cuda(constexpr int kVocab = ${vocab};
constexpr bool kUniformNoise = ${uniformNoise};
constexpr bool kInitialCanvas = ${initialCanvas};
constexpr bool kMaskedOnly = ${maskedOnly};

${entryPoint} {
  const int row = blockIdx.x * kThreads + threadIdx.x;
  if (row >= rows)
    return;
  const int token = canvas[row];
  // Masked only: a rejected position that already holds a token keeps it.
  const bool candidate = !kMaskedOnly || token == maskToken;
  if (!kInitialCanvas && keep[row]) {
    canvas[row] = sampled[row];
    return;
  }
  if (!kInitialCanvas && !candidate)
    return;
  int noise = maskToken;
  if (kUniformNoise) {
    const int request = rowRequest[row];
    const unsigned long long stream =
        kInitialCanvas ? dlm_device::kStreamInit : dlm_device::kStreamRenoise;
    const unsigned long long key = dlm_device::positionKey(
        dlm_device::stepKey(requestSeed[request], requestId[request], stream,
                            (unsigned long long)requestStep[request]),
        rowPosition[row]);
    noise = dlm_device::randomToken(key, kVocab);
  }
  canvas[row] = noise;
}
)cuda";

} // namespace

StatusOr<KernelSource> generateRenoise(const RenoiseParams &params) {
  if (params.vocab < 2 || params.vocab > (int64_t(1) << 30))
    return Status::error("renoise: vocab must be in [2, 2^30], got " +
                         std::to_string(params.vocab));
  const bool maskedOnly = params.candidates == RenoiseCandidates::maskedOnly;
  // The initial canvas is noise everywhere: it has no candidate rule to choose.
  if (maskedOnly && params.initialCanvas)
    return Status::error("renoise: the initial canvas is noise everywhere; masked-only "
                         "candidates do not apply to it");
  if (maskedOnly && params.noise == NoiseKind::uniform)
    return Status::error("renoise: masked-only candidates need mask noise (uniform noise leaves "
                         "no mask token to find)");
  KernelSource kernel;
  kernel.kind = "renoise";
  kernel.name = std::string(params.initialCanvas ? "dlm_initial_canvas_" : "dlm_renoise_") +
                std::string(noiseKindName(params.noise));
  if (!params.initialCanvas && !maskedOnly && params.noise == NoiseKind::maskToken)
    kernel.name += "_every_rejected";
  kernel.name += "_v" + std::to_string(params.vocab);
  kernel.hot = false;
  kernel.blockThreads = 256;
  kernel.grid = "x = ceil(rows / 256)";
  kernel.sharedMemoryBytes = 0;
  kernel.parameters = {
      {"int", "rows"},
      {"const unsigned char *__restrict__", "keep"},
      {"const int *__restrict__", "sampled"},
      {"int *__restrict__", "canvas"},
      {"const int *__restrict__", "rowRequest"},
      {"const int *__restrict__", "rowPosition"},
      {"const unsigned long long *__restrict__", "requestSeed"},
      {"const unsigned long long *__restrict__", "requestId"},
      {"const long long *__restrict__", "requestStep"},
      {"int", "maskToken"},
  };
  kernel.specialisation = {{"vocab", params.vocab},
                           {"noise", std::string(noiseKindName(params.noise))},
                           {"initial_canvas", params.initialCanvas},
                           {"candidates", std::string(renoiseCandidatesName(params.candidates))}};
  const std::string body =
      expandKernelBody(kernel, kBody,
                       {{"vocab", std::to_string(params.vocab)},
                        {"uniformNoise", boolLiteral(params.noise == NoiseKind::uniform)},
                        {"initialCanvas", boolLiteral(params.initialCanvas)},
                        {"maskedOnly", boolLiteral(maskedOnly)}});
  kernel.source = assembleTranslationUnit(
      kernel,
      std::string(params.initialCanvas ? "Initial canvas" : "Renoise") + " with " +
          std::string(noiseKindName(params.noise)) + " noise over a vocabulary of " +
          std::to_string(params.vocab) +
          (params.initialCanvas ? std::string(".")
                                : std::string(maskedOnly ? ", masked positions only."
                                                         : ", every rejected position.")),
      body);
  return kernel;
}

} // namespace dlm::codegen
