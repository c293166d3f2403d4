// Reads a whole (small) text file such as config.json or tokenizer.json.
#pragma once

#include "support/Status.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace dlm {

inline StatusOr<std::string> readTextFile(const std::filesystem::path &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return Status::error("cannot read " + path.string());
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad())
    return Status::error("cannot read " + path.string() + ": I/O error");
  return text.str();
}

} // namespace dlm
