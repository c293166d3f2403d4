// The small emitter every kernel generator uses: CUDA text is written as a template with ${key}
// placeholders next to the code that fills them, then wrapped into one translation unit with the
// shared device helpers (DeviceCommon.cpp).
#pragma once

#include "compiler/codegen/KernelSource.h"
#include "compiler/codegen/Kernels.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dlm::codegen {

using TemplateValues = std::vector<std::pair<std::string, std::string>>;

// Replaces each ${key} in `text` by its value. A placeholder without a value, or a value no
// placeholder uses, is a bug in the generator: it aborts rather than emit broken CUDA.
std::string expandTemplate(std::string_view text, const TemplateValues &values);

// A C++ literal that reads back as exactly `value`: "0.5", "1e+06", "0.10000000000000001".
std::string doubleLiteral(double value);
// A float literal of `value` rounded to float: "0.5f".
std::string floatLiteral(double value);
std::string boolLiteral(bool value);
// `value` as part of a C identifier: "10000", "0p5", "1e06".
std::string identifierFragment(double value);

// "__nv_bfloat16" or "float".
std::string_view cudaElementType(ElementType type);
// A CUDA type of `bytes` (16, 8, 4 or 2) for copying raw element bits: "uint4", "uint2", ...
std::string_view rawChunkType(int bytes);

// How a copy kernel moves a row of `width` elements, one block per row: `vector` elements per
// access of `chunkBytes` raw bytes (rawChunkType), by `threads` threads (the accesses rounded up
// to warps, 32 to 256).
struct RowCopyShape {
  int vector = 1;
  int chunkBytes = 0;
  int64_t threads = 32;
};
RowCopyShape rowCopyShape(ElementType element, int64_t width);
// The launch of such a copy kernel: `shape.threads` threads per block, one block per row of
// `count` (grid "x = count"), no shared memory.
void setRowCopyLaunch(KernelSource &kernel, const RowCopyShape &shape);
inline int64_t roundUp(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// The error "<what> must be in [1, 2^<log2Limit>], got <width>" when `width` is outside that
// range: the limit keeps a generated kernel's index arithmetic in int.
Status checkWidth(std::string_view what, int64_t width, int log2Limit);

// A kernel of `kind` specialised on a row width and an element type: named
// "<namePrefix>_w<width>_<element>", with the specialisation {width, element}; a generator adds
// what else it is specialised on to both, and fills in the rest. `hot` and `blockThreads` are
// the KernelSource fields of those names.
KernelSource rowKernelSource(std::string kind, std::string_view namePrefix, int64_t width,
                             ElementType element, bool hot, unsigned blockThreads);

// The constants of a kernel body that walks rows of `width` elements in vectors of
// vectorWidth(element, width) elements: Element, kWidth, kVector and kChunks (vectors per row).
std::string rowVectorConstants(ElementType element, int64_t width);

// A kernel's body: `text` expanded with `values` and ${entryPoint}, the `extern "C"` declaration
// of the kernel's name and signature with __launch_bounds__(kThreads), preceded by
// `constexpr int kThreads = <kernel.blockThreads>;`. Every kernel relies on being launched with
// exactly that block size; taking it from the kernel here keeps the two from drifting apart.
std::string expandKernelBody(const KernelSource &kernel, std::string_view text,
                             TemplateValues values);

// Declares how the kernel is launched (runtime/model/DeclaredLaunch.h): one binding per
// parameter, in signature order, and the grid ("X,Y"), written into its specialisation for the
// CUDA backend's declared launcher. An error names a binding that is not in the vocabulary, a
// count that differs from the parameters' or a binding whose C type is not the parameter's.
Status declareLaunch(KernelSource &kernel, const std::vector<std::string> &arguments,
                     const std::string &grid);

// The translation unit around a kernel: a header comment, <cuda_bf16.h>, the shared device
// helpers and `body` inside namespace <name>_detail (so that several kernels can share one
// translation unit in the emulated device's build).
std::string assembleTranslationUnit(const KernelSource &kernel, std::string_view summary,
                                    std::string_view body);

} // namespace dlm::codegen
