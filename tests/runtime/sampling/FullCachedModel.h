// A base for the tests' fake models: DecodeModel's one forward served for the default function
// without input in the full and cached modes (what most decode tests need) through runFull and
// runCached, every other forward refused by name as a model without it refuses it. A fake that
// serves more overrides forward() and hands the rest to this one.
#pragma once

#include "runtime/sampling/DecodeModel.h"

namespace dlm::sampling::testing {

class FullCachedModel : public DecodeModel {
public:
  StatusOr<LogitsView> forward(const ForwardSpec &spec) override {
    if (spec.mode == ForwardSpec::Mode::window)
      return Status::error("not supported yet: window forwards (the dual cache) on this model");
    if (spec.function.empty() && !spec.input) {
      if (spec.mode == ForwardSpec::Mode::full)
        return runFull(spec.tokens, spec.count, spec.keep, spec.rows);
      if (spec.mode == ForwardSpec::Mode::cached)
        return runCached(spec.tokens, spec.count, spec.keep, spec.rows);
    }
    return Status::error("not supported yet: forwards of named functions, with inputs or in "
                         "append or extend mode on this model");
  }

protected:
  virtual StatusOr<LogitsView> runFull(const int32_t *tokens, int64_t count, int64_t keep,
                                       LogitRows rows) = 0;
  virtual StatusOr<LogitsView> runCached(const int32_t *tokens, int64_t count, int64_t keep,
                                         LogitRows rows) = 0;
};

} // namespace dlm::sampling::testing
