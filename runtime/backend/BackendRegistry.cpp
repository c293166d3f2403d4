#include "runtime/backend/BackendRegistry.h"

namespace dlm {

const BackendRegistry &BackendRegistry::builtin() {
  static const BackendRegistry registry = [] {
    BackendRegistry r;
    registerBuiltinBackends(r);
    return r;
  }();
  return registry;
}

} // namespace dlm
