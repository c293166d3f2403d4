// The dlmc subcommands; each returns the process exit code and prints its own errors.
#pragma once

#include <cstdint>
#include <string>

namespace dlm::dlmc {

int runImport(const std::string &checkpoint, const std::string &emit);

struct CompileOptions {
  std::string checkpoint;
  std::string output;
  std::string emit; // "artifact" or "dlm"
  std::string target;
  std::string precision; // "f32", "bf16", or empty: from the checkpoint's weights
  std::string policy;
  int64_t genLength = 0;
  int64_t blockLength = 0;
  int64_t steps = 0;
  double threshold = 0.0;
  double temperature = 0.0;
  int64_t unroll = 4;
};
int runCompile(const CompileOptions &options);

int runInspect(const std::string &artifactPath);

} // namespace dlm::dlmc
