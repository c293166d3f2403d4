// What the elementwise row kernels (add, scale, gated_activation) share: 256 threads per block,
// each thread one vector of a row (grid x = ceil(width / vector / 256), y = rows), the guard, the
// launch fields and the declared launch, the specialisation {width, element} and the translation
// unit. A kernel gives only its parameters, their bindings and the code for one (row, chunk).
#pragma once

#include "compiler/codegen/KernelSource.h"
#include "compiler/codegen/Kernels.h"

#include <string>
#include <vector>

namespace dlm::codegen {

struct RowChunkKernel {
  std::string kind;
  // The entry point's name without the "_w<width>_<element>" suffix the helper adds.
  std::string namePrefix;
  ElementType element = ElementType::bf16;
  int64_t width = 0;
  // Before the trailing `int rows` the helper adds; ${element} stands for the CUDA element type.
  std::vector<KernelParameter> parameters;
  // What the CUDA backend binds each of them to (runtime/model/DeclaredLaunch.h), in order; the
  // helper adds `rows` and the grid.
  std::vector<std::string> launchArguments;
  // Device functions before the kernel (may be empty).
  std::string helpers;
  // The body for one (row, chunk): Element, kWidth, kVector and kChunks are defined.
  std::string chunk;
  // The header comment's line, without the " over rows of <width>." the helper adds.
  std::string summary;
  // Entries of the specialisation besides width and element.
  artifact::Attributes specialisation;
};

// The kernel, or an error naming the kind when the width is outside [1, 2^24].
StatusOr<KernelSource> generateRowChunkKernel(const RowChunkKernel &spec);

// The kernels of two row-strided operands (the record's operand0 and operand1, named `first` and
// `second` in the source) and a result: out[k] = `combine`, a CUDA expression of x[k] and y[k],
// the two operands' values in float32. out may alias either operand. Sets all but summary,
// helpers and the extra specialisation.
RowChunkKernel pairRowChunkKernel(std::string kind, std::string namePrefix, ElementType element,
                                  int64_t width, const std::string &first,
                                  const std::string &second, const std::string &combine);

} // namespace dlm::codegen
