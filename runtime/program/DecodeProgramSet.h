// The decode programs of one artifact, loaded once: a request selects one by its policy name
// (the first is the default), and may set knobs any of them declares.
#pragma once

#include "runtime/program/DecodeProgram.h"
#include "runtime/program/ProgramKnobs.h"

#include <string>
#include <string_view>
#include <vector>

namespace dlm::program {

class DecodeProgramSet {
public:
  // Loads every program with its stored knobs. Errors name the program.
  static StatusOr<DecodeProgramSet> load(const std::vector<artifact::DecodingProgram> &programs);

  bool empty() const { return programs_.empty(); }
  const std::vector<std::string> &names() const { return names_; }

  // The program called `policy` (hyphens and underscores alike); empty: the default. Errors:
  // "unknown policy 'magic' (expected low-confidence or entropy-bound)", or no program at all.
  StatusOr<size_t> select(std::string_view policy) const;
  const DecodeProgram &program(size_t index) const { return programs_[index]; }

  // Whether a program other than `index` declares the knob `name`: a request may set it, and
  // the selected program ignores it.
  KnobFilter declaredByOthers(size_t index) const;

private:
  std::vector<std::string> names_;
  std::vector<DecodeProgram> programs_;
};

// "a", "a or b", "a, b or c": names as an error message lists them.
std::string oneOf(const std::vector<std::string> &names);

// The knobs of `program` as `values` resolves them (unset optional knobs left out), typed as
// their declarations say.
artifact::Attributes knobAttributes(const DecodeProgram &program,
                                    const std::vector<KnobValue> &values);

} // namespace dlm::program
