#include "runtime/artifact/ParameterFilePath.h"

#include <filesystem>

namespace dlm::artifact {
namespace {

namespace fs = std::filesystem;

// The absolute, normalised form of `path`, symbolic links in the part that exists resolved.
fs::path canonicalForm(const std::string &path) {
  std::error_code error;
  fs::path canonical = fs::weakly_canonical(fs::absolute(path), error);
  return error ? fs::absolute(path).lexically_normal() : canonical;
}

} // namespace

std::string defaultParameterFilePath(const std::string &artifactPath) {
  return fs::path(artifactPath).replace_extension(".dlmp").string();
}

std::string recordedParameterFilePath(const std::string &artifactPath,
                                      const std::string &parameterPath) {
  const fs::path parameters = canonicalForm(parameterPath);
  if (parameters.parent_path() == canonicalForm(artifactPath).parent_path())
    return parameters.filename().string();
  return parameters.string();
}

std::string resolveParameterFilePath(const std::string &artifactPath,
                                     const std::string &recorded) {
  const fs::path path(recorded);
  if (path.is_absolute())
    return recorded;
  return (fs::path(artifactPath).parent_path() / path).string();
}

bool sameFilePath(const std::string &a, const std::string &b) {
  return canonicalForm(a) == canonicalForm(b);
}

} // namespace dlm::artifact
