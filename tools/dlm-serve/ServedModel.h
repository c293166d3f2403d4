// What request parsing needs to know about the served model, apart from the model itself so the
// parser is tested without an artifact: its id, its length limit, its decode programs' knobs,
// and how it turns text and chats into prompt ids.
#pragma once

#include "runtime/artifact/ArtifactFormat.h"
#include "runtime/chat/ChatPrompt.h"
#include "tools/dlm-run/RequestLength.h"
#include "support/Status.h"

#include <functional>
#include <set>
#include <string>
#include <vector>

namespace dlm {
class LoadedModel;
}

namespace dlm::serve {

struct ServedPolicy {
  std::string name;
  // The knobs the program declares, with their values when it has one (declared default or the
  // artifact's stored knob).
  tools::DeclaredKnobs knobs;
  // Whether a value suits the declared knob `name` (its type, range, choices): the program's
  // own message when not. Unset: not checked before generation.
  std::function<Status(const std::string &name, const artifact::AttributeValue &value)> checkKnob;
};

struct ServedModel {
  // The `model` field requests name and /v1/models lists: the artifact's file stem.
  std::string id;
  // Prompt plus generation may not pass this (0: no limit known).
  int64_t maxPositions = 0;
  int64_t vocabSize = 0;
  // A prompt text longer than this cannot fit in maxPositions tokens, and is refused before it
  // is tokenized (0: no limit known).
  int64_t maxPromptBytes = 0;
  // The artifact's decode programs, the default first.
  std::vector<ServedPolicy> policies;
  // Text as prompt ids; parseSpecialTokens false: special added tokens in the text are text.
  std::function<std::vector<int32_t>(const std::string &text, bool parseSpecialTokens)> encode;
  // A chat as prompt ids; unset when the artifact has no chat template.
  std::function<StatusOr<std::vector<int32_t>>(const ChatRequest &)> encodeChat;

  // The policy called `name` (hyphens and underscores alike; empty: the default), or null.
  const ServedPolicy *policy(const std::string &name) const;
  // Whether any program declares the knob.
  bool declaresKnob(const std::string &knob) const;
};

// The model as served under `id`.
ServedModel describeModel(const LoadedModel &model, std::string id);

// The artifact's file stem: "/x/demo.dlm" -> "demo".
std::string modelIdFromPath(const std::string &path);

} // namespace dlm::serve
