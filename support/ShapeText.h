// A tensor shape as error messages write it: "[2, 3]".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace dlm {

inline std::string shapeText(const int64_t *dims, size_t count) {
  std::string text = "[";
  for (size_t i = 0; i < count; ++i)
    text += (i ? ", " : "") + std::to_string(dims[i]);
  return text + "]";
}

// Any contiguous sequence of int64_t (std::vector, llvm::ArrayRef).
template <typename Shape> std::string shapeText(const Shape &shape) {
  return shapeText(shape.data(), shape.size());
}

} // namespace dlm
