#include "runtime/cuda/CublasLt.h"

#include <dlfcn.h>

namespace dlm::cuda {

namespace {

std::string lastDlError() {
  const char *message = dlerror();
  return message ? message : "unknown error";
}

} // namespace

StatusOr<std::shared_ptr<const CublasLt>> CublasLt::load(const char *library) {
  dlerror(); // clear a stale message
  // Never unmapped, even after dlclose: cuBLASLt keeps what it allocated at load until the
  // process ends, and LeakSanitizer can only name (and the checked build suppress) those blocks
  // while the library is still mapped (scripts/lsan.supp).
  void *handle = dlopen(library, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!handle)
    return Status::error("cuBLASLt not available: " + std::string(library) + ": " + lastDlError());
  std::shared_ptr<CublasLt> table(new CublasLt());
  table->handle_ = handle;
  table->library_ = library;

  // cublasLt.h maps none of these names onto versioned symbols, so the name is the symbol.
#define DLM_CUBLASLT_RESOLVE(name)                                                                 \
  table->name = reinterpret_cast<decltype(&::name)>(dlsym(handle, #name));                         \
  if (!table->name)                                                                                \
    return Status::error("cuBLASLt " + std::string(library) +                                      \
                         " lacks " #name " (a library older than CUDA " +                          \
                         std::to_string(CUBLAS_VER_MAJOR) + "?)");
  DLM_CUBLASLT_SYMBOLS(DLM_CUBLASLT_RESOLVE)
#undef DLM_CUBLASLT_RESOLVE

  return std::shared_ptr<const CublasLt>(std::move(table));
}

CublasLt::~CublasLt() {
  if (handle_)
    dlclose(handle_);
}

Status CublasLt::check(cublasStatus_t status, const char *what) const {
  if (status == CUBLAS_STATUS_SUCCESS)
    return Status::ok();
  const char *name = cublasLtGetStatusName ? cublasLtGetStatusName(status) : nullptr;
  const char *description = cublasLtGetStatusString ? cublasLtGetStatusString(status) : nullptr;
  return Status::error(std::string(what) + ": " + (name ? name : "cuBLAS error") + " (" +
                       (description ? description : "no description") + ") [" +
                       std::to_string(static_cast<int>(status)) + "]");
}

} // namespace dlm::cuda
