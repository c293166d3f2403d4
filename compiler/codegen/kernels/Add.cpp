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
  RowChunkKernel spec;
  spec.kind = "add";
  spec.namePrefix = "dlm_add";
  spec.element = params.element;
  spec.width = params.width;
  spec.parameters = {{"const ${element} *", "a"}, {"long long", "aStride"},
                     {"const ${element} *", "b"}, {"long long", "bStride"},
                     {"${element} *", "out"},     {"long long", "outStride"}};
  spec.launchArguments = {"operand0",        "operand0_stride", "operand1",
                          "operand1_stride", "result",          "result_stride"};
  spec.chunk = R"cuda(  float x[kVector], y[kVector];
  dlm_device::loadFloats<kVector>(a + (long long)row * aStride + chunk * kVector, x);
  dlm_device::loadFloats<kVector>(b + (long long)row * bStride + chunk * kVector, y);
#pragma unroll
  for (int k = 0; k < kVector; ++k)
    x[k] += y[k];
  dlm_device::storeFloats<kVector>(out + (long long)row * outStride + chunk * kVector, x);
)cuda";
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
