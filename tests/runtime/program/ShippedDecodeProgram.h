// The decode programs the tests run are the ones dlmc ships: compiler/programs/DecodePrograms.h
// builds them (every denoise loop unrolled 4, as dlmc's default --unroll).
#pragma once

#include "compiler/programs/DecodePrograms.h"
#include "runtime/program/DecodeProgram.h"

#include <gtest/gtest.h>

#include <string>

namespace dlm::program::testing {

// The records of `policy` ("low-confidence", or "low-confidence.decode").
inline DecodeProgramText shippedDecodeProgram(std::string policy) {
  const std::string suffix = ".decode";
  if (policy.size() > suffix.size() &&
      policy.compare(policy.size() - suffix.size(), suffix.size(), suffix) == 0)
    policy.resize(policy.size() - suffix.size());
  StatusOr<artifact::DecodingProgram> built = programs::buildDecodeProgram(policy, {}, 4);
  EXPECT_TRUE(built.isOk()) << policy << ": " << built.status().message();
  if (!built)
    return {};
  return {built->policy, built->ops};
}

// The same in the records' text notation.
inline std::string shippedDecodeProgramText(const std::string &policy) {
  return printDecodeProgram(shippedDecodeProgram(policy));
}

} // namespace dlm::program::testing
