#include "tools/dlm-serve/ServedModel.h"

#include "runtime/program/DecodeProgramSet.h"
#include "runtime/program/ProgramKnobs.h"
#include "runtime/session/Session.h"

#include <algorithm>
#include <filesystem>
#include <map>

namespace dlm::serve {

namespace {

std::string normalizedPolicy(std::string name) {
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

// The most text bytes `maxPositions` tokens can stand for: each token covers at most as many
// bytes as its vocabulary string has (byte-level and SentencePiece strings are at least as long
// as the text they decode to), times 4 for normalizers that shorten the input text (NFKC folds
// a 3-byte ligature into 2 bytes, say) and for added tokens.
int64_t promptBytesBound(const Tokenizer &tokenizer, int64_t maxPositions) {
  size_t longest = 1;
  for (int32_t id = 0; id < tokenizer.vocabSize(); ++id)
    if (std::optional<std::string> token = tokenizer.idToToken(id))
      longest = std::max(longest, token->size());
  for (const AddedToken &added : tokenizer.addedTokens())
    longest = std::max(longest, added.content.size());
  const int64_t perToken = static_cast<int64_t>(longest) * 4;
  return maxPositions > INT64_MAX / perToken ? 0 : maxPositions * perToken;
}

} // namespace

const ServedPolicy *ServedModel::policy(const std::string &name) const {
  if (policies.empty())
    return nullptr;
  if (name.empty())
    return &policies.front();
  for (const ServedPolicy &candidate : policies)
    if (normalizedPolicy(candidate.name) == normalizedPolicy(name))
      return &candidate;
  return nullptr;
}

bool ServedModel::declaresKnob(const std::string &knob) const {
  return std::any_of(policies.begin(), policies.end(),
                     [&](const ServedPolicy &policy) { return policy.knobs.names.count(knob) > 0; });
}

ServedModel describeModel(const LoadedModel &model, std::string id) {
  ServedModel served;
  served.id = std::move(id);
  served.maxPositions = model.config().maxPositions;
  served.vocabSize = model.config().vocabSize;
  const program::DecodeProgramSet &programs = model.decodePrograms();
  for (size_t i = 0; i < programs.names().size(); ++i) {
    ServedPolicy policy;
    policy.name = programs.names()[i];
    policy.knobs = tools::declaredKnobs(programs.program(i));
    std::map<std::string, program::KnobDeclaration> declarations;
    for (const program::KnobDeclaration &knob : programs.program(i).knobs())
      declarations.emplace(knob.name, knob);
    policy.checkKnob = [declarations](const std::string &name,
                                      const artifact::AttributeValue &value) {
      auto found = declarations.find(name);
      program::KnobValue ignored;
      return found == declarations.end() ? Status::ok()
                                         : program::applyKnob(found->second, value, ignored);
    };
    served.policies.push_back(std::move(policy));
  }
  const LoadedModel *loaded = &model;
  if (const Tokenizer *tokenizer = model.tokenizer(); tokenizer && served.maxPositions > 0)
    served.maxPromptBytes = promptBytesBound(*tokenizer, served.maxPositions);
  if (const Tokenizer *tokenizer = model.tokenizer())
    served.encode = [tokenizer](const std::string &text, bool parseSpecialTokens) {
      return tokenizer->encode(text, /*addSpecialTokens=*/true,
                               /*specialTokensAsText=*/!parseSpecialTokens);
    };
  if (model.chat())
    served.encodeChat = [loaded](const ChatRequest &request) { return loaded->encodeChat(request); };
  return served;
}

std::string modelIdFromPath(const std::string &path) {
  return std::filesystem::path(path).stem().string();
}

} // namespace dlm::serve
