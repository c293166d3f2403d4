// A request body of POST /v1/completions or /v1/chat/completions as a GenerateRequest, or the
// OpenAI error that refuses it. The rules (docs/design/serving.md §6):
//   - `model`: the served model's id, else 404 model_not_found (absent: the served model).
//   - `prompt` (completions): a string, a list of token ids, or a list holding one of those.
//     Text is encoded with special tokens as text unless `"parse_special_tokens": true`.
//   - `messages` (chat): rendered with the artifact's chat template (LoadedModel::encodeChat:
//     user text never becomes a special token); no template is a 400 naming it.
//   - `max_tokens` (chat: also `max_completion_tokens`) sets the length knob of the policy as
//     dlm-run's --max-new-tokens does (tools::setRequestLength):
//     gen_length, or max_new_tokens for the programs that have that instead. A diffusion
//     policy's gen_length must be a multiple of block_length, so max_tokens is rounded up to
//     one and the output cut back to max_tokens tokens (finish_reason "length" when cut), which is
//     what a client asking for at most N tokens expects. When the request does not set `steps`,
//     the steps scale with the blocks, so each block keeps the artifact's steps per block
//     (64 steps over gen_length 64 in blocks of 32 is 32 per block: max_tokens 96 runs 96).
//     Without max_tokens the program's gen_length is generated, uncut.
//   - `temperature`, `top_p`: the knobs of those names when the selected policy declares them;
//     when it does not, only the value that changes nothing is accepted (top_p 1; no
//     temperature value is neutral, so any is refused) and others are a 400 naming the policy.
//   - `seed` (default 0, so a request without one is reproducible), `stop` (a string or a list
//     of up to 4), `stream`, `stream_options.include_usage`, `user` (ignored).
//   - Diffusion knobs as extra fields: `policy`, `cache` (none|prefix|dual), and any knob a
//     decode program of the artifact declares, by name (`steps`, `block_length`, `threshold`,
//     ...); the engine checks their values. Any other field is a 400 naming it.
//   - Refused by name: `n` > 1, `best_of` > 1, `logprobs`, `top_logprobs`, `echo`, `suffix`,
//     `tools`, non-zero `presence_penalty` / `frequency_penalty`, non-empty `logit_bias`.
//   - prompt + generation past the model's positions: 400 context_length_exceeded.
#pragma once

#include "runtime/session/Session.h"
#include "tools/dlm-serve/ApiError.h"
#include "tools/dlm-serve/ServedModel.h"

#include <nlohmann/json.hpp>

#include <string>
#include <variant>
#include <vector>

namespace dlm::serve {

enum class Endpoint { completions, chatCompletions };

struct ParsedRequest {
  // Prompt ids, knobs, seed and cache, ready for Engine::generate.
  GenerateRequest request;
  // The most completion tokens the client takes (the output is cut there); -1: all generated.
  int64_t maxTokens = -1;
  std::vector<std::string> stop;
  bool stream = false;
  bool includeUsage = false;
};

// `body` is the raw request body; `base` holds the server's defaults (knobs from its command
// line, seed, cache), which the request's fields override.
std::variant<ParsedRequest, ApiError> parseRequest(Endpoint endpoint, const std::string &body,
                                                   const ServedModel &model,
                                                   const GenerateRequest &base = {});

} // namespace dlm::serve
