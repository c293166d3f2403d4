// cuBLASLt, opened at run time like the driver (CudaDriver.h): CublasLt::load() dlopens the
// library and resolves every entry of CublasLtSymbols.h; a missing library or symbol is a named
// error. emu::emulatedCublasLt() (runtime/cuda/emu/EmuDriver.h) fills the same table with an
// emulation that runs on the emulated driver's streams.
//
// Call through the members as through cublasLt.h: lt->cublasLtMatmul(handle, ...).
#pragma once

#include "runtime/cuda/CublasLtSymbols.h"
#include "support/Status.h"

#include <cublasLt.h>

#include <memory>
#include <string>

namespace dlm::emu {
class EmulatedTables;
} // namespace dlm::emu

namespace dlm::cuda {

// The library cuBLASLt is normally installed as (CUDA 13).
inline constexpr const char *kCublasLtLibrary = "libcublasLt.so.13";

class CublasLt {
public:
  // Opens `library` (a file name searched like dlopen does, or a path) and resolves the table.
  // Errors: "cuBLASLt not available: libcublasLt.so.13: <dlerror>", or
  // "cuBLASLt libcublasLt.so.13 lacks cublasLtMatmul (...)".
  static StatusOr<std::shared_ptr<const CublasLt>> load(const char *library = kCublasLtLibrary);

  CublasLt(const CublasLt &) = delete;
  CublasLt &operator=(const CublasLt &) = delete;
  ~CublasLt();

  // ok, or "<what>: CUBLAS_STATUS_NOT_SUPPORTED (<the library's description>) [15]".
  Status check(cublasStatus_t status, const char *what) const;

  const std::string &library() const { return library_; }
  // True for the emulation of emu::emulatedCublasLt().
  bool emulated() const { return emulated_; }

#define DLM_CUBLASLT_MEMBER(name) decltype(&::name) name = nullptr;
  DLM_CUBLASLT_SYMBOLS(DLM_CUBLASLT_MEMBER)
#undef DLM_CUBLASLT_MEMBER

private:
  friend class ::dlm::emu::EmulatedTables; // fills the table with the emulation
  CublasLt() = default;

  void *handle_ = nullptr;
  std::string library_;
  bool emulated_ = false;
};

} // namespace dlm::cuda
