#include "runtime/session/Session.h"

#include "runtime/backend/BackendRegistry.h"
#include "runtime/model/ModelSpec.h"
#include "runtime/program/DecodeInterpreter.h"
#include "runtime/program/ModelFactChecks.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace dlm {

StatusOr<std::shared_ptr<LoadedModel>> LoadedModel::open(const std::string &path,
                                                         const OpenOptions &options) {
  StatusOr<artifact::ArtifactReader> reader = artifact::ArtifactReader::open(path);
  if (!reader)
    return reader.status();
  if (options.verifyIntegrity)
    DLM_RETURN_IF_ERROR(reader->verifyIntegrity());
  auto model = std::make_shared<LoadedModel>(std::move(*reader));
  StatusOr<model::ModelDims> dims = model::modelDims(model->config());
  if (!dims)
    return dims.status().withContext("artifact '" + path + "'");
  model->dims_ = *dims;

  const artifact::ModelConfig &config = model->config();
  StatusOr<sampling::TokenFacts> facts = program::modelTokenFacts(config);
  if (!facts)
    return facts.status().withContext("artifact '" + path + "'");
  model->facts_ = std::move(*facts);
  if (config.maskTokenId >= config.vocabSize)
    return Status::error("artifact '" + path + "': mask token id " +
                         std::to_string(config.maskTokenId) + " is outside the vocabulary");

  StatusOr<program::DecodeProgramSet> programs =
      program::DecodeProgramSet::load(model->reader_.decodePrograms());
  if (!programs)
    return programs.status().withContext("artifact '" + path + "'");
  model->decodePrograms_ = std::move(*programs);

  if (!model->reader_.tokenizerJson().empty()) {
    StatusOr<Tokenizer> tokenizer =
        Tokenizer::fromJson(std::string(model->reader_.tokenizerJson()));
    if (!tokenizer)
      return tokenizer.status().withContext("artifact '" + path + "': tokenizer");
    model->tokenizer_.emplace(std::move(*tokenizer));
  }

  // dlmc parsed the template, so a failure here means a damaged or foreign artifact.
  if (std::optional<std::string_view> source = model->reader_.chatTemplate()) {
    ChatPrompt::SpecialTokens specialTokens;
    for (const auto &[name, value] : model->reader_.chatSpecialTokens())
      specialTokens.emplace_back(name, std::get<std::string>(value));
    StatusOr<ChatPrompt> chat =
        ChatPrompt::create(*source, std::move(specialTokens), model->tokenizer());
    if (!chat)
      return chat.status().withContext("artifact '" + path + "': the chat template");
    model->chat_.emplace(std::move(*chat));
  }
  return model;
}

namespace {

constexpr const char *kNoChatTemplate =
    "the artifact has no chat template (its checkpoint had none)";

} // namespace

StatusOr<std::string> LoadedModel::renderChat(const nlohmann::ordered_json &messages,
                                              bool addGenerationPrompt,
                                              const nlohmann::ordered_json &extra) const {
  if (!chat_)
    return Status::error(kNoChatTemplate);
  ChatRequest request;
  request.messages = messages;
  request.addGenerationPrompt = addGenerationPrompt;
  request.extra = extra;
  return chat_->render(request);
}

StatusOr<std::vector<int32_t>> LoadedModel::encodeChat(const ChatRequest &request) const {
  if (!chat_)
    return Status::error(kNoChatTemplate);
  return chat_->encode(request);
}

StatusOr<std::shared_ptr<const model::ModelWeights>> LoadedModel::hostWeights() const {
  std::lock_guard<std::mutex> lock(weightsMutex_);
  if (!weights_) {
    StatusOr<std::shared_ptr<const model::ModelWeights>> loaded =
        model::ModelWeights::load(reader_);
    if (!loaded)
      return loaded.status();
    weights_ = *loaded;
  }
  return weights_;
}

StatusOr<std::unique_ptr<Backend>> createBackend(const std::string &name, const LoadedModel &model,
                                                 const BackendOptions &options) {
  BackendSource source{model.artifact(), [&model] { return model.hostWeights(); }, options};
  return BackendRegistry::builtin().create(name, source);
}

StatusOr<std::unique_ptr<Session>> Session::create(std::shared_ptr<const LoadedModel> model,
                                                   const SessionOptions &options) {
  if (!model)
    return Status::error("no model");
  StatusOr<std::unique_ptr<Backend>> backend = createBackend(options.backend, *model, options);
  if (!backend)
    return backend.status();
  return std::unique_ptr<Session>(
      new Session(std::move(model), std::move(*backend), options.profiler));
}

namespace {

// Turns committed ids into text as it becomes complete, for streaming.
class TextStream {
public:
  explicit TextStream(const Tokenizer *tokenizer) : tokenizer_(tokenizer) {}

  std::string push(const int32_t *ids, int64_t count, bool last) {
    if (!tokenizer_)
      return {};
    ids_.insert(ids_.end(), ids, ids + count);
    // The last push takes the final text, which may repair what was held back.
    StatusOr<std::string> bytes = tokenizer_->decodeGenerated(ids_, last);
    if (!bytes || bytes->size() < emitted_)
      return {};
    const size_t ready = last ? bytes->size() : Tokenizer::streamableLength(*bytes);
    if (ready <= emitted_)
      return {};
    std::string text = bytes->substr(emitted_, ready - emitted_);
    emitted_ = ready;
    return text;
  }

private:
  const Tokenizer *tokenizer_;
  std::vector<int32_t> ids_;
  size_t emitted_ = 0;
};

} // namespace

namespace {

// The request's policy (a knob in name only: it selects the program) and its other knobs, with
// the cache mode as the programs' `cache` knob.
std::string takePolicy(artifact::Attributes &knobs) {
  std::string policy;
  auto found = knobs.find(std::string(spec::kKnobPolicy));
  if (found == knobs.end())
    return policy;
  if (const auto *text = std::get_if<std::string>(&found->second))
    policy = *text;
  else
    policy = artifact::attributeValueText(found->second);
  knobs.erase(found);
  return policy;
}

} // namespace

StatusOr<program::ProgramRequest> Session::programRequest(const GenerateRequest &request,
                                                          size_t &programIndex) const {
  program::ProgramRequest decodeRequest;
  decodeRequest.knobs = request.knobs;
  const std::string policy = takePolicy(decodeRequest.knobs);
  const program::DecodeProgramSet &programs = model_->decodePrograms();
  StatusOr<size_t> selected = programs.select(policy);
  if (!selected)
    return selected.status();
  programIndex = *selected;
  decodeRequest.declaredElsewhere = programs.declaredByOthers(programIndex);
  decodeRequest.seed = request.seed;
  decodeRequest.request = request.requestId;
  decodeRequest.captureFirstLogits = request.captureFirstLogits;
  decodeRequest.initialNoise = request.initialCanvas;
  decodeRequest.profiler = profiler_;
  if (request.promptText) {
    const Tokenizer *tokenizer = model_->tokenizer();
    if (!tokenizer)
      return Status::error("a text prompt needs a tokenizer; the artifact has none");
    decodeRequest.prompt = tokenizer->encode(*request.promptText);
  } else {
    decodeRequest.prompt = request.promptIds;
  }
  if (decodeRequest.prompt.empty())
    return Status::error("empty prompt");
  const int64_t maxPositions = model_->config().maxPositions;
  if (maxPositions > 0 && maxPositions <= backend_->maxSequenceLength()) {
    decodeRequest.maxTokens = maxPositions;
    decodeRequest.maxTokensLimit = "the model allows " + std::to_string(maxPositions);
  } else {
    decodeRequest.maxTokens = backend_->maxSequenceLength();
    decodeRequest.maxTokensLimit = "the session's maximum sequence length is " +
                                   std::to_string(decodeRequest.maxTokens);
  }
  return decodeRequest;
}

StatusOr<GenerateResult> Session::generate(const GenerateRequest &request,
                                           const StreamCallback &onBlock) {
  // Every request starts on an empty K/V sequence: a program whose first forward is a cached one
  // (block-refinement's, for a prompt shorter than a block) must not meet the last request's.
  DLM_RETURN_IF_ERROR(backend_->trimCache(0));
  return generateOn(*backend_, request, onBlock);
}

StatusOr<GenerateResult> Session::generateOn(sampling::DecodeModel &model,
                                             const GenerateRequest &request,
                                             const StreamCallback &onBlock) const {
  size_t programIndex = 0;
  StatusOr<program::ProgramRequest> decodeRequest = programRequest(request, programIndex);
  if (!decodeRequest)
    return decodeRequest.status();
  const program::DecodeProgram &program = model_->decodePrograms().program(programIndex);
  std::vector<program::KnobValue> knobs;
  DLM_RETURN_IF_ERROR(program::resolveKnobs(program, decodeRequest->knobs, knobs,
                                            decodeRequest->declaredElsewhere,
                                            model_->decodePrograms().names()[programIndex]));

  TextStream stream(model_->tokenizer());
  sampling::BlockCallback forward;
  if (onBlock) {
    forward = [&](const sampling::CommittedBlock &block) {
      StreamedBlock streamed;
      streamed.index = block.index;
      streamed.ids = block.ids;
      streamed.count = block.count;
      streamed.text = stream.push(block.ids, block.count, block.last);
      onBlock(streamed);
    };
  }

  const auto start = std::chrono::steady_clock::now();
  StatusOr<sampling::DecodeOutcome> outcome = program::DecodeInterpreter(program).run(
      model, model_->tokenFacts(), *decodeRequest, forward);
  const auto stop = std::chrono::steady_clock::now();
  if (!outcome)
    return outcome.status();

  GenerateResult result;
  result.promptIds = decodeRequest->prompt;
  result.outputIds = std::move(outcome->outputIds);
  result.policy = model_->decodePrograms().names()[programIndex];
  result.knobs = program::knobAttributes(program, knobs);
  result.stats.forwards = outcome->forwards;
  result.stats.decodeSteps = outcome->decodeSteps;
  result.stats.blocks = outcome->blocks;
  result.stats.generatedTokens = static_cast<int64_t>(result.outputIds.size());
  result.stats.seconds = std::chrono::duration<double>(stop - start).count();
  result.firstLogits = std::move(outcome->firstLogits);
  result.firstLogitRows = outcome->firstLogitRows;
  result.vocabSize = model.vocabSize();
  if (const Tokenizer *tokenizer = model_->tokenizer()) {
    StatusOr<std::string> text = tokenizer->decodeGenerated(result.outputIds, /*final=*/true);
    if (!text)
      return text.status().withContext("decoding the output");
    result.text = std::move(*text);
  }
  return result;
}

StatusOr<ScoreResult> Session::score(const std::vector<int32_t> &prompt,
                                     const std::vector<int32_t> &continuation) {
  const sampling::TokenFacts &facts = model_->tokenFacts();
  if (facts.maskTokenId < 0)
    return Status::error("not supported yet: scoring with a model that has no mask token");
  if (prompt.empty() || continuation.empty())
    return Status::error("scoring needs a non-empty prompt and continuation");
  const int64_t vocab = backend_->vocabSize();
  auto outside = [vocab](int32_t id) { return id < 0 || id >= vocab; };
  if (std::any_of(prompt.begin(), prompt.end(), outside) ||
      std::any_of(continuation.begin(), continuation.end(), outside))
    return Status::error("scoring: a token id is outside the vocabulary of " +
                         std::to_string(vocab));
  const int64_t promptLength = static_cast<int64_t>(prompt.size());
  const int64_t total = promptLength + static_cast<int64_t>(continuation.size());
  if (total > backend_->maxSequenceLength())
    return Status::error("scoring: " + std::to_string(total) +
                         " tokens exceed the session's maximum sequence length of " +
                         std::to_string(backend_->maxSequenceLength()));
  if (Status reserved = backend_->reserve(total, 1); !reserved.isOk())
    return reserved;

  std::vector<int32_t> tokens(prompt);
  tokens.resize(static_cast<size_t>(total), static_cast<int32_t>(facts.maskTokenId));
  ScoreResult result;
  double nllSum = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(continuation.size()); ++i) {
    const int64_t position = promptLength + i;
    StatusOr<sampling::LogitsView> logits =
        backend_->forwardFull(tokens.data(), total, 0, sampling::LogitRows{position, position + 1});
    if (!logits)
      return logits.status();
    ++result.forwards;
    const float *row = logits->row(0);
    const double peak = *std::max_element(row, row + vocab);
    double sum = 0;
    for (int64_t v = 0; v < vocab; ++v)
      sum += std::exp(static_cast<double>(row[v]) - peak);
    nllSum += peak + std::log(sum) - static_cast<double>(row[continuation[i]]);
    tokens[position] = continuation[i];
  }
  result.tokens = static_cast<int64_t>(continuation.size());
  result.meanNll = nllSum / static_cast<double>(result.tokens);
  return result;
}

} // namespace dlm
