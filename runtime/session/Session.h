// The runtime's C++ API: open an artifact (LoadedModel), create a Session on a backend, generate
// from a prompt with knobs overriding the artifact's defaults, receive committed blocks as they
// are decided, read the statistics. No global state: everything hangs off these objects. The C
// header runtime/include/dlm/dlm.h wraps exactly this.
#pragma once

#include "runtime/artifact/ArtifactReader.h"
#include "runtime/chat/ChatPrompt.h"
#include "runtime/model/ModelWeights.h"
#include "runtime/program/DecodeInterpreter.h"
#include "runtime/program/DecodeProgramSet.h"
#include "runtime/sampling/Decoding.h"
#include "runtime/backend/Backend.h"
#include "runtime/tokenizer/Tokenizer.h"

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace dlm {

// An opened artifact: the verified mapping, its tokenizer, what decoding needs to know about the
// vocabulary. Shared by the sessions created from it; immutable except for the weights loaded on
// first use.
class LoadedModel {
public:
  struct OpenOptions {
    // Recompute the integrity hashes dlmc recorded (reading every byte of the file) before
    // anything is used: a damaged weight fails here instead of giving wrong output.
    bool verifyIntegrity = false;
  };
  // Errors name the file and the problem (artifact damage, an unsupported config, a bad
  // tokenizer.json).
  static StatusOr<std::shared_ptr<LoadedModel>> open(const std::string &path,
                                                     const OpenOptions &options);
  static StatusOr<std::shared_ptr<LoadedModel>> open(const std::string &path) {
    return open(path, OpenOptions{});
  }

  const artifact::ArtifactReader &artifact() const { return reader_; }
  const artifact::ModelConfig &config() const { return reader_.config(); }
  // The seed of the weights' contents when they are generated, not trained (`dlmc compile
  // --random-parameters`): outputs then mean nothing, timings do. nullopt for real weights.
  std::optional<uint64_t> randomWeightSeed() const { return reader_.randomWeightSeed(); }
  const model::ModelDims &dims() const { return dims_; }
  // nullptr when the artifact carries no tokenizer.json.
  const Tokenizer *tokenizer() const { return tokenizer_ ? &*tokenizer_ : nullptr; }
  const sampling::TokenFacts &tokenFacts() const { return facts_; }
  // The artifact's decode programs, loaded once (empty for artifacts before schema 1.2).
  const program::DecodeProgramSet &decodePrograms() const { return decodePrograms_; }

  // The checkpoint's chat template with its special tokens and this tokenizer, parsed once at
  // open (a template the runtime cannot parse fails open()); nullptr when the artifact has none.
  const ChatPrompt *chat() const { return chat_ ? &*chat_ : nullptr; }
  // The chat rendered as text, as transformers' apply_chat_template(tokenize=False) renders it:
  // `messages` [{role, content}, ...], add_generation_prompt, `extra` template variables
  // (enable_thinking, ...). Errors: "the artifact has no chat template (its checkpoint had
  // none)", the template's own.
  StatusOr<std::string> renderChat(
      const nlohmann::ordered_json &messages, bool addGenerationPrompt,
      const nlohmann::ordered_json &extra = nlohmann::ordered_json::object()) const;
  // The chat as prompt ids. User text never becomes a special token unless
  // request.parseSpecialTokensInInput asks for it (ChatPrompt.h says how, and how that relates
  // to transformers).
  StatusOr<std::vector<int32_t>> encodeChat(const ChatRequest &request) const;

  // The weights as float32 host tensors, converted on the first call and then shared.
  StatusOr<std::shared_ptr<const model::ModelWeights>> hostWeights() const;

  // Use open().
  explicit LoadedModel(artifact::ArtifactReader reader) : reader_(std::move(reader)) {}

private:
  artifact::ArtifactReader reader_;
  model::ModelDims dims_;
  std::optional<Tokenizer> tokenizer_;
  // Points at tokenizer_ (a LoadedModel never moves: it lives in a shared_ptr).
  std::optional<ChatPrompt> chat_;
  sampling::TokenFacts facts_;
  program::DecodeProgramSet decodePrograms_;
  mutable std::mutex weightsMutex_;
  mutable std::shared_ptr<const model::ModelWeights> weights_;
};

struct SessionOptions : BackendOptions {
  // "cpu", "cuda" (libcuda + cuBLASLt) or "cuda-emu" (the emulated device; DLM_CUDA_GRAPHS=0
  // turns CUDA graphs off for both).
  std::string backend = "cpu";
};

struct GenerateRequest {
  // The prompt: ids, or text encoded with the artifact's tokenizer (special tokens added as the
  // tokenizer's post-processor says, like Hugging Face's encode). Text wins when both are set.
  std::vector<int32_t> promptIds;
  std::optional<std::string> promptText;
  // Knob overrides by their names ("gen_length", "threshold", "cache", "policy", ...): what the
  // artifact's programs declare (dlmc compile --emit=decode shows them).
  artifact::Attributes knobs;
  uint64_t seed = 0;
  uint64_t requestId = 0;
  // Keep the first decoded forward's logits (every row) in the result.
  bool captureFirstLogits = false;
  // The first canvas's initial tokens instead of noise, exactly one canvas of them
  // (program::ProgramRequest::initialNoise).
  std::vector<int32_t> initialCanvas;
};

// A committed block as streamed to the caller.
struct StreamedBlock {
  int64_t index = 0;
  const int32_t *ids = nullptr;
  int64_t count = 0;
  // Text that became complete with this block (whole UTF-8 characters; special tokens skipped);
  // empty without a tokenizer.
  std::string text;
};
using StreamCallback = std::function<void(const StreamedBlock &)>;

struct GenerationStats {
  int64_t forwards = 0;
  int64_t decodeSteps = 0;
  int64_t blocks = 0;
  int64_t generatedTokens = 0;
  // Wall time of the decoding loop (tokenization and loading excluded).
  double seconds = 0;
  double tokensPerSecond() const { return seconds > 0 ? generatedTokens / seconds : 0; }
  double tokensPerForward() const {
    return forwards > 0 ? static_cast<double>(generatedTokens) / forwards : 0;
  }
};

struct GenerateResult {
  std::vector<int32_t> promptIds;
  // Generated ids, prompt excluded, up to and including the first EOS.
  std::vector<int32_t> outputIds;
  // outputIds decoded with special tokens skipped; empty without a tokenizer.
  std::string text;
  GenerationStats stats;
  // The decode program that ran and its knobs as the request resolved them (unset optional
  // knobs left out).
  std::string policy;
  artifact::Attributes knobs;
  // [firstLogitRows, vocabSize] float32 when captureFirstLogits.
  std::vector<float> firstLogits;
  int64_t firstLogitRows = 0;
  int64_t vocabSize = 0;
};

// How likely the model finds a continuation of a prompt, read left to right: token i of the
// continuation is predicted from the prompt and continuation[0, i), with every later position
// masked. Needs a model with a mask token (the masked-diffusion models). One forward per token.
struct ScoreResult {
  // Mean negative log-likelihood per continuation token, in nats; perplexity = exp(meanNll).
  double meanNll = 0;
  int64_t tokens = 0;
  int64_t forwards = 0;
};

class Session {
public:
  // Errors: "CUDA driver not available: ...", "cuBLASLt not available: ...", "artifact has no
  // CUDA kernels; compile it with --target cuda or all", "unknown backend 'x' (expected cpu, cuda
  // or cuda-emu)".
  static StatusOr<std::unique_ptr<Session>> create(std::shared_ptr<const LoadedModel> model,
                                                   const SessionOptions &options = {});

  // Runs one request to completion, calling onBlock for each committed block. Errors name the
  // problem: empty prompt, prompt longer than the model allows, gen_length not a multiple of
  // block_length, steps not divisible by the number of blocks, unknown policy or knob, KV cache
  // exhausted.
  StatusOr<GenerateResult> generate(const GenerateRequest &request,
                                    const StreamCallback &onBlock = {});
  // The same request on another model of this session's backend: the serving engine's
  // per-request view (runtime/engine/Engine.h). Thread-safe when `model` is the caller's own and
  // the session has no profiler.
  StatusOr<GenerateResult> generateOn(sampling::DecodeModel &model, const GenerateRequest &request,
                                      const StreamCallback &onBlock = {}) const;

  // Scores `continuation` after `prompt` (see ScoreResult). Errors: empty prompt or
  // continuation, ids outside the vocabulary, no mask token, too long for the session.
  StatusOr<ScoreResult> score(const std::vector<int32_t> &prompt,
                              const std::vector<int32_t> &continuation);

  const LoadedModel &model() const { return *model_; }
  Backend &backend() { return *backend_; }

private:
  Session(std::shared_ptr<const LoadedModel> model, std::unique_ptr<Backend> backend,
          profile::Profiler *profiler)
      : model_(std::move(model)), backend_(std::move(backend)), profiler_(profiler) {}

  // The request as the decode program it selects (its index in `programIndex`) takes it.
  StatusOr<program::ProgramRequest> programRequest(const GenerateRequest &request,
                                                   size_t &programIndex) const;

  std::shared_ptr<const LoadedModel> model_;
  std::unique_ptr<Backend> backend_;
  profile::Profiler *profiler_;
};

// The backend called `name` for `model`.
StatusOr<std::unique_ptr<Backend>> createBackend(const std::string &name, const LoadedModel &model,
                                                 const BackendOptions &options);

} // namespace dlm
