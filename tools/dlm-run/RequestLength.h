// One request length for every decode program (issue 31): OpenAI's `max_tokens` and dlm-run's
// `--max-new-tokens` mean "generate this many tokens" whatever the program. A program that
// declares `max_new_tokens` (autoregressive, DFlash, DiffusionGemma) takes it as it is; one that
// spreads `steps` over blocks of `block_length` filling `gen_length` (low-confidence,
// entropy-bound) gets `gen_length` rounded up to whole blocks and, unless the request set `steps`
// itself, `steps` scaled so that each block keeps the program's default steps per block;
// block-refinement, whose blocks are the model's from position 0, gets gen_length = N. It lives
// with the tools, not in runtime/: the runtime runs the programs' knobs as given and knows no
// policy's length rule.
#pragma once

#include "runtime/artifact/ArtifactFormat.h"
#include "support/Status.h"

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace dlm::program {
class DecodeProgram;
}

namespace dlm::tools {

// What a program declares about its knobs: their names, and the values of those that have one
// (the declared default or the artifact's stored knob).
struct DeclaredKnobs {
  std::set<std::string> names;
  artifact::Attributes values;
};
DeclaredKnobs declaredKnobs(const program::DecodeProgram &program);

// An integer knob's value (a whole real counts), or nullopt.
std::optional<int64_t> integerKnob(const artifact::Attributes &knobs, std::string_view name);
// A text knob's value ("cache": "prefix"), or empty when there is none.
std::string textKnob(const artifact::Attributes &knobs, std::string_view name);

// Sets in `knobs` what makes the program generate `maxNewTokens` tokens (see above); a
// `block_length` in `knobs` is honoured, and their `steps` when `stepsGiven` (the request set it,
// not a default). Errors: the length overflows, or the program has no length knob.
// `programName` names it in the error.
Status setRequestLength(std::string_view programName, const DeclaredKnobs &program,
                        int64_t maxNewTokens, bool stepsGiven, artifact::Attributes &knobs);

// The error for a request that sets `gen_length` on a program without one: the program's length
// is `max_new_tokens`, which --max-new-tokens / max_tokens set for every program. Ok otherwise.
Status checkGenLengthKnob(std::string_view programName, const DeclaredKnobs &program,
                          const artifact::Attributes &knobs);

} // namespace dlm::tools
