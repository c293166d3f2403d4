// A layer's scalar factor (the `scale` record, DiffusionGemma's per-layer `layer_scalar`):
// out = x * factor[0] over rows of `width`, in float32; factor is a one-element device tensor of
// the device precision (the weight the record names), read once per thread. out may alias x.
//
// Arguments: x, xStride, factor, out, outStride (elements; multiples of the vector width), rows.
// Grid: x = ceil(width / vector / 256), y = rows; 256 threads.
#include "compiler/codegen/RecordKernels.h"
#include "compiler/codegen/kernels/RowChunkKernel.h"

namespace dlm::codegen {

StatusOr<KernelSource> generateScale(const ScaleParams &params) {
  RowChunkKernel spec;
  spec.kind = "scale";
  spec.namePrefix = "dlm_scale";
  spec.element = params.element;
  spec.width = params.width;
  spec.parameters = {{"const ${element} *", "x"},
                     {"long long", "xStride"},
                     {"const ${element} *__restrict__", "factor"},
                     {"${element} *", "out"},
                     {"long long", "outStride"}};
  spec.launchArguments = {"operand0", "operand0_stride", "weight:weight", "result",
                          "result_stride"};
  spec.chunk = R"cuda(  const float f = dlm_device::toFloat(factor[0]);
  float values[kVector];
  dlm_device::loadFloats<kVector>(x + (long long)row * xStride + chunk * kVector, values);
#pragma unroll
  for (int k = 0; k < kVector; ++k)
    values[k] *= f;
  dlm_device::storeFloats<kVector>(out + (long long)row * outStride + chunk * kVector, values);
)cuda";
  spec.summary = "x * factor[0]";
  return generateRowChunkKernel(spec);
}

Status RecordKernels::scale() {
  launched.push_back(generateScale({width, element}));
  return Status::ok();
}

} // namespace dlm::codegen
