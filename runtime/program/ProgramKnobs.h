// Knob values for a decode program: what its `knob` records declare (type, default, optional,
// one_of, min, max), then the artifact's stored knobs (DecodeProgram::load), then a request's
// overrides. Replaces, for programs, the per-policy switch of runtime/sampling/DecodingKnobs.cpp
// and keeps its messages: "unknown knob 'stepz' (its knobs: ...)", "knob 'steps' must be an
// integer".
#pragma once

#include "runtime/program/DecodeProgram.h"

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace dlm::program {

// Sets `out` to `value` as `declaration` types it. An integral real is accepted as an integer
// (JSON and command lines do not always keep 16 apart from 16.0) and an integer as a real; the
// text "none" unsets an optional knob.
Status applyKnob(const KnobDeclaration &declaration, const artifact::AttributeValue &value,
                 KnobValue &out);

// A knob value as a command line writes it (dlmc --knob, dlm-run --knob): true/false or on/off,
// an integer, a real, else text. The program's declaration decides whether it fits (applyKnob:
// an integer serves a real knob).
artifact::AttributeValue knobValueFromText(const std::string &text);

// Names a knob another program of the artifact declares, which a request may set (ignored here).
using KnobFilter = std::function<bool(std::string_view)>;

// `out` = the program's knob values (declared defaults and stored knobs) with `overrides`
// applied; a name the program does not declare fails as unknown unless `declaredElsewhere`
// accepts it, naming `programName` (when given) and the knobs the program does take.
Status resolveKnobs(const DecodeProgram &program, const artifact::Attributes &overrides,
                    std::vector<KnobValue> &out, const KnobFilter &declaredElsewhere = {},
                    std::string_view programName = {});

} // namespace dlm::program
