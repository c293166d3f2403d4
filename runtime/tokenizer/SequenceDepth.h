// How deep a tokenizer.json may nest Sequences of normalizers, pre-tokenizers, post-processors or
// decoders: allowed, but not without bound, as each loader recurses into them.
#pragma once

#include "support/Status.h"

#include <string>

namespace dlm::tokenizer {

inline constexpr int kMaxSequenceDepth = 16;

// "<stage> Sequences are nested more than 16 deep" when a Sequence at `depth` may not open.
inline Status checkSequenceDepth(const std::string &stage, int depth) {
  if (depth >= kMaxSequenceDepth)
    return Status::error(stage + " Sequences are nested more than " +
                         std::to_string(kMaxSequenceDepth) + " deep");
  return Status::ok();
}

} // namespace dlm::tokenizer
