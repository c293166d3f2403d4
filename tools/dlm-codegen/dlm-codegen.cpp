// dlm-codegen: print one generated kernel.
//
//   dlm-codegen attention --head-dim=128 --heads=32 --kv-heads=8 --page-size=16 --mask=causal
//   dlm-codegen sampler --vocab=32000 --nvrtc=sm_80,sm_90
//   dlm-codegen kv_store --kv-width=256 --page-size=16 --element=f32
//
// Without --nvrtc the CUDA C++ translation unit goes to stdout; with it the kernel is compiled
// for each listed architecture and one resource line per architecture is printed. Errors go to
// stderr with exit status 1.
#include "compiler/codegen/Kernels.h"

#ifdef DLM_HAVE_NVRTC
#include "compiler/codegen/NvrtcCompiler.h"
#include "support/SplitText.h"
#endif

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

using namespace dlm;
using namespace dlm::codegen;

namespace {

constexpr const char *kUsage =
    "usage: dlm-codegen <kind> [--option=value ...] [--nvrtc=sm_80,sm_90]\n"
    "kinds and options:\n"
    "  rms_norm          --width --element=bf16|f32 --no-weight\n"
    "  rope              --head-dim --rotary-dim --frequency-pairs --frequency-dim --theta "
    "--element\n"
    "  attention         --head-dim --heads --kv-heads --page-size --mask=causal|bidirectional|"
    "block_causal|sliding_window|sliding_window_symmetric|bidirectional_window --rows-per-warp "
    "--element\n"
    "  gated_activation  --width --activation=silu|gelu_tanh --element\n"
    "  sampler           --vocab --logits=f32|bf16 --softcap --threads "
    "--confidence=unit_temperature|at_temperature --softmax-statistics\n"
    "  accept            --canvas --rule=entropy_bound|confidence_threshold|top_k "
    "--mask-absorbing\n"
    "  renoise           --vocab --noise=uniform|mask --candidates=every_rejected|masked_only "
    "--initial\n"
    "  embedding         --width --element\n"
    "  soft_embedding    --width --element\n"
    "  kv_store          --kv-width --page-size --element\n"
    "  block_loop_gate   --canvas\n";

// --key=value and --flag options; each is marked when read so that leftovers are reported.
class Options {
public:
  Status parse(int argc, char **argv, int first) {
    for (int i = first; i < argc; ++i) {
      std::string argument = argv[i];
      if (argument.rfind("--", 0) != 0)
        return Status::error("unexpected argument '" + argument + "'");
      const size_t equals = argument.find('=');
      if (equals == std::string::npos)
        values_[argument.substr(2)] = "";
      else
        values_[argument.substr(2, equals - 2)] = argument.substr(equals + 1);
    }
    return Status::ok();
  }

  StatusOr<int64_t> integer(const std::string &key, int64_t fallback, bool required = false) {
    auto found = values_.find(key);
    if (found == values_.end())
      return required ? StatusOr<int64_t>(Status::error("--" + key + " is required"))
                      : StatusOr<int64_t>(fallback);
    used_[key] = true;
    char *end = nullptr;
    const long long value = std::strtoll(found->second.c_str(), &end, 10);
    if (found->second.empty() || *end != '\0')
      return Status::error("--" + key + " expects an integer, got '" + found->second + "'");
    return static_cast<int64_t>(value);
  }

  StatusOr<double> real(const std::string &key, double fallback) {
    auto found = values_.find(key);
    if (found == values_.end())
      return fallback;
    used_[key] = true;
    char *end = nullptr;
    const double value = std::strtod(found->second.c_str(), &end);
    if (found->second.empty() || *end != '\0')
      return Status::error("--" + key + " expects a number, got '" + found->second + "'");
    return value;
  }

  std::string text(const std::string &key, const std::string &fallback) {
    auto found = values_.find(key);
    if (found == values_.end())
      return fallback;
    used_[key] = true;
    return found->second;
  }

  bool flag(const std::string &key) {
    auto found = values_.find(key);
    if (found == values_.end())
      return false;
    used_[key] = true;
    return true;
  }

  Status checkAllUsed() const {
    for (const auto &[key, value] : values_)
      if (!used_.count(key))
        return Status::error("unknown option --" + key + " for this kernel kind");
    return Status::ok();
  }

private:
  std::map<std::string, std::string> values_;
  std::map<std::string, bool> used_;
};

template <typename Enum>
StatusOr<Enum> choose(const std::string &option, const std::string &value,
                      const std::vector<std::pair<const char *, Enum>> &choices) {
  std::string names;
  for (const auto &[name, choice] : choices) {
    if (value == name)
      return choice;
    names += names.empty() ? name : std::string(", ") + name;
  }
  return Status::error("--" + option + " must be one of " + names + ", got '" + value + "'");
}

StatusOr<ElementType> element(Options &options, const std::string &key,
                              const std::string &fallback) {
  return choose<ElementType>(key, options.text(key, fallback),
                             {{"bf16", ElementType::bf16}, {"f32", ElementType::f32}});
}

StatusOr<KernelSource> generate(const std::string &kind, Options &options) {
  if (kind == "rms_norm") {
    RmsNormParams params;
    DLM_ASSIGN_OR_RETURN(params.width, options.integer("width", 0, true));
    DLM_ASSIGN_OR_RETURN(params.element, element(options, "element", "bf16"));
    params.hasWeight = !options.flag("no-weight");
    DLM_RETURN_IF_ERROR(options.checkAllUsed());
    return generateRmsNorm(params);
  }
  if (kind == "rope") {
    RopeParams params;
    DLM_ASSIGN_OR_RETURN(params.headDim, options.integer("head-dim", 0, true));
    DLM_ASSIGN_OR_RETURN(params.rotaryDim, options.integer("rotary-dim", 0));
    DLM_ASSIGN_OR_RETURN(params.frequencyPairs, options.integer("frequency-pairs", 0));
    DLM_ASSIGN_OR_RETURN(params.frequencyDim, options.integer("frequency-dim", 0));
    DLM_ASSIGN_OR_RETURN(params.theta, options.real("theta", 10000.0));
    DLM_ASSIGN_OR_RETURN(params.element, element(options, "element", "bf16"));
    DLM_RETURN_IF_ERROR(options.checkAllUsed());
    return generateRope(params);
  }
  if (kind == "attention") {
    AttentionParams params;
    DLM_ASSIGN_OR_RETURN(params.headDim, options.integer("head-dim", 0, true));
    DLM_ASSIGN_OR_RETURN(params.heads, options.integer("heads", 0, true));
    DLM_ASSIGN_OR_RETURN(params.kvHeads, options.integer("kv-heads", params.heads));
    DLM_ASSIGN_OR_RETURN(params.pageSize, options.integer("page-size", 16));
    DLM_ASSIGN_OR_RETURN(params.rowsPerWarp, options.integer("rows-per-warp", 0));
    DLM_ASSIGN_OR_RETURN(params.element, element(options, "element", "bf16"));
    DLM_ASSIGN_OR_RETURN(params.mask, choose<MaskKind>("mask", options.text("mask", "causal"),
                                                       {{"causal", MaskKind::causal},
                                                        {"bidirectional", MaskKind::bidirectional},
                                                        {"block_causal", MaskKind::blockCausal},
                                                        {"sliding_window", MaskKind::slidingWindow},
                                                        {"sliding_window_symmetric",
                                                         MaskKind::slidingWindowSymmetric},
                                                        {"bidirectional_window",
                                                         MaskKind::bidirectionalWindow}}));
    DLM_RETURN_IF_ERROR(options.checkAllUsed());
    return generateAttention(params);
  }
  if (kind == "gated_activation") {
    GatedActivationParams params;
    DLM_ASSIGN_OR_RETURN(params.width, options.integer("width", 0, true));
    DLM_ASSIGN_OR_RETURN(
        params.activation,
        choose<Activation>("activation", options.text("activation", "silu"),
                           {{"silu", Activation::silu}, {"gelu_tanh", Activation::geluTanh}}));
    DLM_ASSIGN_OR_RETURN(params.element, element(options, "element", "bf16"));
    DLM_RETURN_IF_ERROR(options.checkAllUsed());
    return generateGatedActivation(params);
  }
  if (kind == "sampler") {
    SamplerParams params;
    DLM_ASSIGN_OR_RETURN(params.vocab, options.integer("vocab", 0, true));
    DLM_ASSIGN_OR_RETURN(params.logits, element(options, "logits", "f32"));
    DLM_ASSIGN_OR_RETURN(params.softcap, options.real("softcap", 0.0));
    DLM_ASSIGN_OR_RETURN(params.threads, options.integer("threads", 256));
    DLM_ASSIGN_OR_RETURN(params.confidence,
                         choose<SamplerConfidence>(
                             "confidence", options.text("confidence", "unit_temperature"),
                             {{"unit_temperature", SamplerConfidence::unitTemperature},
                              {"at_temperature", SamplerConfidence::atTemperature}}));
    params.softmaxStatistics = options.flag("softmax-statistics");
    DLM_RETURN_IF_ERROR(options.checkAllUsed());
    return generateSampler(params);
  }
  if (kind == "accept") {
    AcceptParams params;
    DLM_ASSIGN_OR_RETURN(params.canvas, options.integer("canvas", 0, true));
    DLM_ASSIGN_OR_RETURN(
        params.rule, choose<AcceptRule>("rule", options.text("rule", "entropy_bound"),
                                        {{"entropy_bound", AcceptRule::entropyBound},
                                         {"confidence_threshold", AcceptRule::confidenceThreshold},
                                         {"top_k", AcceptRule::topK}}));
    params.maskAbsorbing = options.flag("mask-absorbing");
    DLM_RETURN_IF_ERROR(options.checkAllUsed());
    return generateAccept(params);
  }
  if (kind == "renoise") {
    RenoiseParams params;
    DLM_ASSIGN_OR_RETURN(params.vocab, options.integer("vocab", 0, true));
    DLM_ASSIGN_OR_RETURN(params.noise, choose<NoiseKind>("noise", options.text("noise", "uniform"),
                                                         {{"uniform", NoiseKind::uniform},
                                                          {"mask", NoiseKind::maskToken}}));
    DLM_ASSIGN_OR_RETURN(params.candidates,
                         choose<RenoiseCandidates>(
                             "candidates", options.text("candidates", "every_rejected"),
                             {{"every_rejected", RenoiseCandidates::everyRejected},
                              {"masked_only", RenoiseCandidates::maskedOnly}}));
    params.initialCanvas = options.flag("initial");
    DLM_RETURN_IF_ERROR(options.checkAllUsed());
    return generateRenoise(params);
  }
  if (kind == "block_loop_gate") {
    BlockLoopGateParams params;
    DLM_ASSIGN_OR_RETURN(params.canvas, options.integer("canvas", 0, true));
    DLM_RETURN_IF_ERROR(options.checkAllUsed());
    return generateBlockLoopGate(params);
  }
  if (kind == "embedding") {
    EmbeddingParams params;
    DLM_ASSIGN_OR_RETURN(params.width, options.integer("width", 0, true));
    DLM_ASSIGN_OR_RETURN(params.element, element(options, "element", "bf16"));
    DLM_RETURN_IF_ERROR(options.checkAllUsed());
    return generateEmbedding(params);
  }
  if (kind == "soft_embedding") {
    SoftEmbeddingParams params;
    DLM_ASSIGN_OR_RETURN(params.width, options.integer("width", 0, true));
    DLM_ASSIGN_OR_RETURN(params.element, element(options, "element", "bf16"));
    DLM_RETURN_IF_ERROR(options.checkAllUsed());
    return generateSoftEmbedding(params);
  }
  if (kind == "kv_store") {
    KvStoreParams params;
    DLM_ASSIGN_OR_RETURN(params.kvWidth, options.integer("kv-width", 0, true));
    DLM_ASSIGN_OR_RETURN(params.pageSize, options.integer("page-size", 16));
    DLM_ASSIGN_OR_RETURN(params.element, element(options, "element", "bf16"));
    DLM_RETURN_IF_ERROR(options.checkAllUsed());
    return generateKvStore(params);
  }
  return Status::error("unknown kernel kind '" + kind + "'");
}

int fail(const std::string &message) {
  std::fprintf(stderr, "dlm-codegen: error: %s\n", message.c_str());
  return 1;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 1 : 0;
  }
  Options options;
  if (Status status = options.parse(argc, argv, 2); !status)
    return fail(status.message());
  const std::string targets = options.text("nvrtc", "");
  StatusOr<KernelSource> kernel = generate(argv[1], options);
  if (!kernel)
    return fail(kernel.status().message());
  if (targets.empty()) {
    std::fputs(kernel->source.c_str(), stdout);
    return 0;
  }
#ifdef DLM_HAVE_NVRTC
  codegen::NvrtcCompiler compiler;
  for (std::string_view piece : splitText(targets, ',')) {
    const std::string target(piece);
    StatusOr<codegen::CompiledKernel> compiled =
        compiler.compile(kernel->source, kernel->name, target);
    if (!compiled)
      return fail(compiled.status().message());
    const artifact::KernelResources &r = compiled->resources;
    std::printf("%s %s%s: registers=%u spill_stores=%u spill_loads=%u stack=%u smem=%u "
                "cubin=%zu ptx=%zu\n",
                kernel->name.c_str(), target.c_str(), kernel->hot ? " (hot)" : "", r.registers,
                r.spillStoreBytes, r.spillLoadBytes, r.stackBytes, r.sharedMemoryBytes,
                compiled->cubin.size(), compiled->ptx.size());
  }
  return 0;
#else
  return fail("--nvrtc: this dlm-codegen was built without the CUDA toolkit");
#endif
}
