// A checkpoint's small JSON files as the importer reads them: the bytes as config.json (every
// family's reader, and DFlash's drafter reader against a known-good target), as DiffusionGemma's
// generation_config.json beside a known-good config.json, and as tokenizer_config.json /
// special_tokens_map.json for the chat template and its special tokens.
#include "fuzz/FuzzSupport.h"
#include "importer/model/ChatTemplateConfig.h"
#include "importer/model/DFlashFamily.h"
#include "importer/model/ModelFamily.h"
#include "support/JsonText.h"

#include <nlohmann/json.hpp>

#include <optional>

namespace {

using dlm::importer::ModelDescription;
using Json = nlohmann::json;

struct Fixtures {
  // What a drafter is read against: the DFlash fixtures' Qwen3 target.
  ModelDescription dflashTarget;
  // A config that reads generation_config.json (only DiffusionGemma does).
  Json diffusionGemmaConfig;
};
std::optional<Fixtures> fixtures;

Json readJsonFixture(const std::string &relative) {
  auto parsed = dlm::parseJsonText(dlm::fuzz::readFixture(relative), relative);
  if (!parsed) {
    std::fprintf(stderr, "dlm fuzz: %s\n", parsed.status().message().c_str());
    std::exit(1);
  }
  return *parsed;
}

void readChatConfig(std::string_view bytes) {
  const std::filesystem::path &directory = dlm::fuzz::scratchDirectory("config");
  if (!dlm::fuzz::writeFile(directory / "tokenizer_config.json", bytes) ||
      !dlm::fuzz::writeFile(directory / "special_tokens_map.json", bytes))
    return;
  dlm::fuzz::succeeded("readCheckpointChat", dlm::importer::readCheckpointChat(directory.string()));
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  auto target = dlm::importer::describeModel(
      readJsonFixture("tests/reference/dflash/fixtures/target/config.json"));
  if (!target) {
    std::fprintf(stderr, "dlm fuzz: DFlash target: %s\n", target.status().message().c_str());
    std::exit(1);
  }
  fixtures = Fixtures{std::move(*target), readJsonFixture("tests/reference/diffusion_gemma/"
                                                          "fixtures/tiny_bf16/config.json")};
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string_view bytes = dlm::fuzz::asText(data, size);
  readChatConfig(bytes);
  auto json = dlm::parseJsonText(bytes, "config.json");
  if (!dlm::fuzz::succeeded("parseJsonText", json))
    return 0;
  dlm::fuzz::succeeded("describeModel", dlm::importer::describeModel(*json));
  dlm::fuzz::succeeded("describeModel(generation_config.json)",
                       dlm::importer::describeModel(fixtures->diffusionGemmaConfig, &*json));
  dlm::fuzz::succeeded("describeDFlashDraft",
                       dlm::importer::describeDFlashDraft(*json, fixtures->dflashTarget));
  return 0;
}
