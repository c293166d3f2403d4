// dlmc compile --parameters external: an artifact holding its program and the weights'
// descriptors, with the weights' bytes in a parameter file (ParameterFileWriter.h). A parameter
// file that already holds every weight of the compile (same name, dtype, shape and content hash,
// its bytes still hashing as recorded) is left as it is, so recompiling a model's program
// (another policy, target or knob) rewrites no weights.
#pragma once

#include "runtime/artifact/ArtifactWriter.h"

#include <cstdint>
#include <string>

namespace dlm::artifact {

// What became of the parameter file.
struct ParameterFileOutcome {
  // False when the file already held these weights and was left as it was.
  bool written = false;
  // Why an existing file was rewritten ("it lacks weight 'lm_head'", ...); empty when it was not,
  // or when there was none.
  std::string rewriteReason;
  size_t weightCount = 0;
  uint64_t fileSize = 0;
};

// Writes the artifact at `artifactPath` with `contents`' weights in the parameter file at
// `parameterPath` (each path as given; the artifact records the parameter file as
// ParameterFilePath.h says), (re)writing that file only when it does not already hold them. A
// file at `parameterPath` that is not a dlm parameter file is never overwritten: that is an
// error, as is a parameter path naming the artifact itself. Both files are written by rename, the
// parameter file first.
StatusOr<ParameterFileOutcome> writeArtifactWithParameterFile(const std::string &artifactPath,
                                                              const std::string &parameterPath,
                                                              const ArtifactContents &contents);

// `dlmc compile --random-parameters SEED`: writes the artifact at `artifactPath` as above, but
// describing `contents`' weights with the contents RandomParameters.h generates for `seed` (their
// hashes, computed as they are generated; the checkpoint's bytes are never read) and recording
// the seed. The parameter file at `parameterPath` is neither written nor read: `dlm-params random`
// writes it (RandomParameterFile.h). Errors: a parameter path naming the artifact itself, a
// weight of a dtype the generator does not make, the artifact's write.
Status writeArtifactWithRandomParameters(const std::string &artifactPath,
                                         const std::string &parameterPath,
                                         const ArtifactContents &contents, uint64_t seed);

} // namespace dlm::artifact
