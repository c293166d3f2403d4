// The chat template and the special-token variables of a checkpoint, found as transformers 5.23's
// tokenizer from_pretrained finds them (tokenization_utils_base.py):
//   - chat_template.jinja beside the tokenizer wins over tokenizer_config.json; with extra
//     templates in chat_templates/*.jinja the set is named and chat_template.jinja is "default";
//   - else tokenizer_config.json's "chat_template": a string, or a list of {name, template};
//   - of a named set, apply_chat_template uses "default" when no name is given (dlm carries only
//     that one; a set without "default" counts as no template, since transformers refuses to pick
//     one). The "tool_use" variant transformers picks when tools are passed is not carried.
// The special tokens (transformers' special_tokens_map: bos_token, eos_token, unk_token,
// sep_token, pad_token, cls_token, mask_token, then the names of a dict extra_special_tokens)
// come from tokenizer_config.json, each a string or an AddedToken object {"content": ...}; null
// means unset. Without "added_tokens_decoder" there (an older checkpoint), special_tokens_map.json
// overrides them, as transformers' legacy path does.
#pragma once

#include "runtime/artifact/ArtifactFormat.h"
#include "support/Status.h"

#include <optional>
#include <string>

namespace dlm::importer {

struct CheckpointChat {
  // Absent: the checkpoint has no (default) chat template; that is not an error.
  std::optional<std::string> chatTemplate;
  // The file the template came from ("chat_template.jinja" or "tokenizer_config.json").
  std::string templateFile;
  // Name -> token text, kind text.
  artifact::Attributes specialTokens;
};

// Reads `directory`'s chat_template.jinja, chat_templates/, tokenizer_config.json and
// special_tokens_map.json (all optional). Errors: unreadable or invalid JSON files, a
// chat_template that is neither a string nor a list of {name, template}, a special token that
// is neither a string nor an object with a "content" string.
StatusOr<CheckpointChat> readCheckpointChat(const std::string &directory);

} // namespace dlm::importer
