// How the conformance tests compare a kernel's output with a reference value: one rule,
// |got - want| <= atol + rtol |want|, with a message naming the element on failure.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace dlm::reference {

inline ::testing::AssertionResult near(double got, double want, double atol, double rtol,
                                       const std::string &what) {
  if (std::isfinite(got) && std::fabs(got - want) <= atol + rtol * std::fabs(want))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": got " << got << ", want " << want << " (difference " << got - want << ")";
}

} // namespace dlm::reference
