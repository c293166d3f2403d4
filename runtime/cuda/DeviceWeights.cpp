#include "runtime/cuda/DeviceWeights.h"

#include "support/FloatFormats.h"

#include <cstring>
#include <map>

namespace dlm::cuda {

StatusOr<std::unique_ptr<DeviceWeights>>
DeviceWeights::upload(std::shared_ptr<const CudaDriver> driver, const model::ModelWeights &host,
                      const std::vector<std::string> &names, DeviceElement element) {
  std::unique_ptr<DeviceWeights> weights(new DeviceWeights());
  weights->element_ = element;
  const size_t elementSize = elementBytes(element);
  // Every distinct host tensor gets one offset (tied weights share theirs).
  std::vector<std::pair<std::string, const model::HostTensor *>> tensors;
  ArenaLayout layout;
  std::map<const float *, size_t> offsets;
  for (const std::string &name : names) {
    const model::HostTensor *t = host.find(name);
    if (!t)
      return Status::error("cuda backend: the kernel program names weight '" + name +
                           "', which the artifact lacks");
    tensors.emplace_back(name, t);
    if (!offsets.count(t->data))
      offsets[t->data] = layout.add(static_cast<size_t>(t->rows * t->cols) * elementSize);
  }
  DLM_RETURN_IF_ERROR(weights->memory_.allocate(driver, layout.size(), "weights"));

  // Converted and copied one tensor at a time through one staging buffer.
  std::vector<uint16_t> staging;
  std::map<const float *, bool> uploaded;
  for (const auto &[name, t] : tensors) {
    const size_t count = static_cast<size_t>(t->rows * t->cols);
    DeviceTensor device{weights->memory_.pointer() + offsets.at(t->data), t->rows, t->cols};
    weights->byName_[name] = device;
    if (uploaded[t->data])
      continue;
    uploaded[t->data] = true;
    const void *source = t->data;
    if (element == DeviceElement::bf16) {
      staging.resize(count);
      for (size_t i = 0; i < count; ++i)
        staging[i] = bf16FromFloat(t->data[i]);
      source = staging.data();
    }
    DLM_RETURN_IF_ERROR(driver->check(driver->cuMemcpyHtoD(device.data, source,
                                                           count * elementSize),
                                      "uploading weights: cuMemcpyHtoD"));
  }
  return weights;
}

} // namespace dlm::cuda
