// The decode programs dlmc puts into artifacts, one per decoding policy: what the runtime's decode
// interpreter runs (runtime/program/DecodeInterpreter.h). Written by hand in
// compiler/programs/decode/*.decode and embedded at build time, until dlm-lower-to-decode-program
// derives them from @generate (docs/design/decode-program.md).
#pragma once

#include "runtime/artifact/ArtifactFormat.h"
#include "support/Status.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dlm::programs {

// The policies there is a decode program for: the default ones in dlmc's default order, then
// those embedded only on request (diffusion-gemma).
std::vector<std::string> decodeProgramPolicies();
// The ones dlmc compile embeds without --policy, in its default order.
std::vector<std::string> defaultDecodeProgramPolicies();

// Whether `policy` decodes a causal model left to right over its plain forward (autoregressive,
// introspective-strided, dflash): it needs a causal model, neither @generate nor the device block
// loop's decoding kernels.
bool decodesLeftToRight(std::string_view policy);

// The program of `policy` as artifact records. Of `knobs` (dlmc's defaults for this artifact),
// those the program declares become its stored knobs; `unroll` becomes every denoise loop's unroll
// hint. The program is loaded once to check it: an unknown policy (the error names the known
// ones) or a knob value the program rejects fails here, at compile time, not in a request.
StatusOr<artifact::DecodingProgram> buildDecodeProgram(std::string_view policy,
                                                       const artifact::Attributes &knobs,
                                                       int64_t unroll);

} // namespace dlm::programs
