// How an artifact names the parameter file its weights live in (schema 1.5, Artifact.parameters):
// the default file dlmc writes, the path the artifact records, and where a reader finds it. A
// relative path is relative to the artifact's directory, so that the two files move together.
#pragma once

#include <string>

namespace dlm::artifact {

// The parameter file dlmc writes when not told where: the artifact's path with its extension
// replaced by ".dlmp" (out/model.dlm -> out/model.dlmp; "model" -> "model.dlmp").
std::string defaultParameterFilePath(const std::string &artifactPath);

// What an artifact at `artifactPath` records for the parameter file at `parameterPath` (both as
// given on the command line): the file's name when it lies in the artifact's directory, else its
// absolute path (the path as given would be read from the artifact's directory, not from the
// directory dlmc ran in).
std::string recordedParameterFilePath(const std::string &artifactPath,
                                      const std::string &parameterPath);

// Where the parameter file an artifact at `artifactPath` records as `recorded` is: a relative
// path from the artifact's directory, an absolute one as it is.
std::string resolveParameterFilePath(const std::string &artifactPath, const std::string &recorded);

// Whether the two paths name the same file (whether or not it exists yet).
bool sameFilePath(const std::string &a, const std::string &b);

} // namespace dlm::artifact
