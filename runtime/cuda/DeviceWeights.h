// The model's weights on the device at the kernels' precision (f32, or bf16 rounded to nearest
// even from ModelWeights' float32 host tensors), in one allocation, looked up by the canonical
// names the kernel records give. Tied weights are uploaded once and shared, as on the host.
// Narrow weights (8-bit: i8 or fp8_e4m3 with per-row f32 scales; 4-bit: i4 with f16 group scales;
// ModelWeights' StoredTensor) that a kernel widens per GEMM (the widen_weight kernel) are uploaded
// as stored, bytes and scales.
#pragma once

#include "runtime/cuda/DeviceMemory.h"
#include "runtime/cuda/LinearGemm.h"
#include "runtime/model/ModelWeights.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace dlm::cuda {

// A device tensor: 0 means absent (an optional weight the model does not have).
struct DeviceTensor {
  CUdeviceptr data = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  // A narrow weight: its dtype (i8, fp8_e4m3 or i4; invalid for a weight at the device precision)
  // and its row scales [rows] f32 (i4: group scales [rows, cols / groupSize] f16).
  artifact::DType narrow = artifact::DType::invalid;
  CUdeviceptr scale = 0;
  int64_t groupSize = 0;
  explicit operator bool() const { return data != 0; }
};

// The weights a kernel program names, on the device by their canonical names.
class DeviceWeights {
public:
  // Uploads the host tensors called `names` (each once; names of one tensor, as tied weights
  // are, share it) at `element`, those in `narrow` as stored. Errors: a name the host weights
  // lack; a `narrow` name whose weight is not an 8-bit matrix with row scales or a 4-bit one with
  // group scales.
  static StatusOr<std::unique_ptr<DeviceWeights>> upload(std::shared_ptr<const CudaDriver> driver,
                                                         const model::ModelWeights &host,
                                                         const std::vector<std::string> &names,
                                                         DeviceElement element,
                                                         const std::set<std::string> &narrow = {});

  DeviceElement element() const { return element_; }
  // The tensor called `name`, or null.
  const DeviceTensor *find(const std::string &name) const {
    auto it = byName_.find(name);
    return it == byName_.end() ? nullptr : &it->second;
  }
  size_t bytes() const { return memory_.bytes(); }

private:
  DeviceWeights() = default;

  DeviceElement element_ = DeviceElement::f32;
  DeviceAllocation memory_;
  std::map<std::string, DeviceTensor> byName_;
};

} // namespace dlm::cuda
