// An add record the compiler did not fold into a GEMM's epilogue (DiffusionGemma's residual adds
// around its post-norms and experts): out = a + b elementwise over rows of `width`, in float32.
// out may alias a or b (the compiler plans it in place).
//
// Arguments: a, aStride, b, bStride, out, outStride (elements; multiples of the vector width),
// rows. Grid: x = ceil(width / vector / 256), y = rows; 256 threads.
#include "compiler/codegen/RecordKernels.h"
#include "compiler/codegen/kernels/RowChunkKernel.h"

namespace dlm::codegen {

StatusOr<KernelSource> generateAdd(const AddParams &params) {
  RowChunkKernel spec =
      pairRowChunkKernel("add", "dlm_add", params.element, params.width, "a", "b", "x[k] + y[k]");
  spec.summary = "a + b";
  return generateRowChunkKernel(spec);
}

// An add no GEMM absorbed (dlm-lower-to-kernel-program folds a residual add into the GEMM
// before it when it can).
Status RecordKernels::add() {
  launched.push_back(generateAdd({width, element}));
  return Status::ok();
}

} // namespace dlm::codegen
