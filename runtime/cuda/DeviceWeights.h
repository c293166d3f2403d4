// The model's weights on the device at the kernels' precision (f32, or bf16 rounded to nearest
// even from ModelWeights' float32 host tensors), in one allocation; norm weights in the type the
// norm kernel reads them. Tied weights are uploaded
// once and shared, as on the host.
#pragma once

#include "runtime/cuda/DeviceMemory.h"
#include "runtime/cuda/LinearGemm.h"
#include "runtime/model/ModelWeights.h"

#include <memory>
#include <vector>

namespace dlm::cuda {

// A device tensor: 0 means absent (an optional weight the model does not have).
struct DeviceTensor {
  CUdeviceptr data = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  explicit operator bool() const { return data != 0; }
};

struct DeviceLayerWeights {
  DeviceTensor attnNorm, q, k, v, qBias, kBias, vBias, qNorm, kNorm, o;
  DeviceTensor mlpNorm, gate, up, down;
};

class DeviceWeights {
public:
  static StatusOr<std::unique_ptr<DeviceWeights>>
  upload(std::shared_ptr<const CudaDriver> driver, const model::ModelWeights &host,
         DeviceElement element, DeviceElement normElement);

  DeviceElement element() const { return element_; }
  // The RMSNorm weights' type (the norm kernel's weight parameter).
  DeviceElement normElement() const { return normElement_; }
  const DeviceTensor &embed() const { return embed_; }
  const DeviceTensor &finalNorm() const { return finalNorm_; }
  const DeviceTensor &lmHead() const { return lmHead_; }
  const std::vector<DeviceLayerWeights> &layers() const { return layers_; }
  size_t bytes() const { return memory_.bytes(); }

private:
  DeviceWeights() = default;

  DeviceElement element_ = DeviceElement::f32;
  DeviceElement normElement_ = DeviceElement::f32;
  DeviceAllocation memory_;
  DeviceTensor embed_, finalNorm_, lmHead_;
  std::vector<DeviceLayerWeights> layers_;
};

// Round-to-nearest-even float -> bfloat16 bits (NaN stays NaN).
uint16_t toBfloat16(float value);
float fromBfloat16(uint16_t bits);

} // namespace dlm::cuda
