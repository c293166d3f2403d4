// A .dlm artifact as dlmc inspect --verify and the runtime read it: ArtifactReader::open and
// verifyIntegrity, then LoadedModel::open (tokenizer, chat template, decode programs), a cpu
// Session and one generation of a few tokens, streamed, and the chat encoded when the artifact has
// a template. The same bytes are also read as a parameter file (.dlmp, the same container):
// ParameterFileReader::open, verifyIntegrity and every weight's bytes. Damaged weights pass open (only the hashes see them), so the generation runs on
// whatever bytes the fuzzer puts there. The generation is kept small whatever the artifact's
// defaults say: a short sequence limit, one thread, and the length and step knobs bounded to a
// few tokens.
#include "fuzz/FuzzSupport.h"
#include "runtime/artifact/ArtifactReader.h"
#include "runtime/artifact/ParameterFileReader.h"
#include "runtime/session/Session.h"

#include <numeric>
#include <set>

namespace {

constexpr int64_t kTokens = 4;
// Prompt plus generation; also the size of the KV pool the session allocates.
constexpr int64_t kMaxSequence = 64;

const std::filesystem::path &artifactPath() {
  static const std::filesystem::path path =
      dlm::fuzz::scratchDirectory("artifact") / "input.dlm";
  return path;
}

// The default program's length and step knobs, where it declares them, bounded to a few tokens
// and steps: the artifact stores their defaults, and a damaged one (up to the programs' bound of
// 65536 steps; 2^52 before that bound) would otherwise run for minutes on a model that never
// converges. Only integer knobs above the bound
// change, so a knob's other values and relations (gen_length a multiple of block_length) stay.
dlm::artifact::Attributes shortKnobs(const dlm::LoadedModel &model) {
  static const std::set<std::string> bounded = {"gen_length", "block_length", "steps",
                                                "max_new_tokens", "max_steps", "step_cap",
                                                "canvas_length", "depth", "stride"};
  dlm::artifact::Attributes knobs;
  if (model.decodePrograms().empty())
    return knobs;
  for (const dlm::program::KnobDeclaration &knob : model.decodePrograms().program(0).knobs())
    if (bounded.count(knob.name) && knob.type == dlm::program::ValueType::integer &&
        (!knob.value.defined || knob.value.integer > kTokens))
      knobs[knob.name] = kTokens;
  return knobs;
}

void generate(const std::shared_ptr<dlm::LoadedModel> &model) {
  dlm::SessionOptions options;
  options.threads = 1;
  options.maxSequenceLength = kMaxSequence;
  auto session = dlm::Session::create(model, options);
  if (!dlm::fuzz::succeeded("Session::create", session))
    return;
  dlm::GenerateRequest request;
  if (model->tokenizer())
    request.promptText = "a b";
  else
    request.promptIds = {0, 1};
  request.knobs = shortKnobs(*model);
  std::string streamed;
  auto result = (*session)->generate(
      request, [&](const dlm::StreamedBlock &block) { streamed += block.text; });
  dlm::fuzz::succeeded("generate", result);
}

void encodeChat(const dlm::LoadedModel &model) {
  if (!model.chat())
    return;
  dlm::ChatRequest chat;
  chat.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "a b"}])");
  chat.addGenerationPrompt = true;
  dlm::fuzz::succeeded("encodeChat", model.encodeChat(chat));
}

// The input as dlmc inspect --verify reads a parameter file.
void readAsParameterFile() {
  auto file = dlm::artifact::ParameterFileReader::open(artifactPath().string());
  if (!dlm::fuzz::succeeded("ParameterFileReader::open", file))
    return;
  dlm::fuzz::succeeded("ParameterFileReader::verifyIntegrity", file->verifyIntegrity());
  volatile uint64_t sink = 0;
  for (const dlm::artifact::WeightView &weight : file->weights()) {
    const auto *bytes = static_cast<const uint8_t *>(weight.data);
    sink = sink + std::accumulate(bytes, bytes + weight.size, uint64_t{0}) + weight.shape.rank();
  }
  (void)sink;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!dlm::fuzz::writeFile(artifactPath(), dlm::fuzz::asText(data, size)))
    return 0;
  readAsParameterFile();
  auto reader = dlm::artifact::ArtifactReader::open(artifactPath().string());
  if (!dlm::fuzz::succeeded("ArtifactReader::open", reader))
    return 0;
  dlm::fuzz::succeeded("verifyIntegrity", reader->verifyIntegrity());
  auto model = dlm::LoadedModel::open(artifactPath().string());
  if (!dlm::fuzz::succeeded("LoadedModel::open", model))
    return 0;
  encodeChat(**model);
  generate(*model);
  return 0;
}
