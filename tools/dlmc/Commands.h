// The dlmc subcommands; each returns the process exit code and prints its own errors.
#pragma once

#include "compiler/pipeline/Compilation.h"

#include <cstdint>
#include <optional>
#include <string>

namespace dlm::dlmc {

int runImport(const std::string &checkpoint, const std::string &emit);

// dlmc compile: what to compile (compiler/pipeline/Compilation.h) and what to print or write.
struct CompileCommand {
  pipeline::CompileOptions options;
  std::string output;
  std::string emit; // "artifact", "dlm", "kernels", "decode" or "cuda"
  // "embedded": the weights in the artifact; "external": in a parameter file, `parameterFile`
  // (empty: the output with its extension replaced by .dlmp).
  std::string parameters = "embedded";
  std::string parameterFile;
  // --random-parameters SEED: the weights' contents are generated (RandomParameters.h), the
  // checkpoint supplying only their shapes; the parameter file is left to dlm-params random.
  std::optional<uint64_t> randomSeed;
};
int runCompile(const CompileCommand &command);

int runInspect(const std::string &artifactPath, bool verify);

// dlmc list architectures|policies.
int runList(const std::string &what);

} // namespace dlm::dlmc
