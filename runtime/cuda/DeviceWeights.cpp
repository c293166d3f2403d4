#include "runtime/cuda/DeviceWeights.h"

#include <cstring>
#include <map>

namespace dlm::cuda {

uint16_t toBfloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu))
    return static_cast<uint16_t>((bits >> 16) | 0x40); // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float fromBfloat16(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof(value));
  return value;
}

StatusOr<std::unique_ptr<DeviceWeights>>
DeviceWeights::upload(std::shared_ptr<const CudaDriver> driver, const model::ModelWeights &host,
                      DeviceElement element, DeviceElement normElement) {
  std::unique_ptr<DeviceWeights> weights(new DeviceWeights());
  weights->element_ = element;
  weights->normElement_ = normElement;
  // Norm weights are vectors the norm kernel reads in its own weight type.
  std::map<const float *, DeviceElement> elementOf;
  auto norm = [&](const model::HostTensor &t) {
    if (t)
      elementOf[t.data] = normElement;
  };
  norm(host.finalNorm());
  for (const model::LayerWeights &l : host.layers())
    for (const model::HostTensor *t : {&l.attnNorm, &l.qNorm, &l.kNorm, &l.mlpNorm})
      norm(*t);
  auto typeOf = [&](const float *data) {
    auto it = elementOf.find(data);
    return it == elementOf.end() ? element : it->second;
  };

  // Every distinct host tensor gets one offset (tied weights share theirs).
  std::vector<const model::HostTensor *> tensors;
  auto collect = [&](const model::HostTensor &t) {
    if (t)
      tensors.push_back(&t);
  };
  collect(host.embed());
  collect(host.finalNorm());
  collect(host.lmHead());
  for (const model::LayerWeights &l : host.layers())
    for (const model::HostTensor *t : {&l.attnNorm, &l.q, &l.k, &l.v, &l.qBias, &l.kBias,
                                       &l.vBias, &l.qNorm, &l.kNorm, &l.o, &l.mlpNorm, &l.gate,
                                       &l.up, &l.down})
      collect(*t);
  ArenaLayout layout;
  std::map<const float *, size_t> offsets;
  for (const model::HostTensor *t : tensors)
    if (!offsets.count(t->data))
      offsets[t->data] =
          layout.add(static_cast<size_t>(t->rows * t->cols) * elementBytes(typeOf(t->data)));
  DLM_RETURN_IF_ERROR(weights->memory_.allocate(driver, layout.size(), "weights"));

  // Converted and copied one tensor at a time through one staging buffer.
  std::vector<uint16_t> staging;
  std::map<const float *, bool> uploaded;
  auto place = [&](const model::HostTensor &t) -> StatusOr<DeviceTensor> {
    if (!t)
      return DeviceTensor{};
    const size_t count = static_cast<size_t>(t.rows * t.cols);
    DeviceTensor device{weights->memory_.pointer() + offsets.at(t.data), t.rows, t.cols};
    if (uploaded[t.data])
      return device;
    uploaded[t.data] = true;
    const void *source = t.data;
    const DeviceElement type = typeOf(t.data);
    const size_t elementSize = elementBytes(type);
    if (type == DeviceElement::bf16) {
      staging.resize(count);
      for (size_t i = 0; i < count; ++i)
        staging[i] = toBfloat16(t.data[i]);
      source = staging.data();
    }
    DLM_RETURN_IF_ERROR(driver->check(driver->cuMemcpyHtoD(device.data, source,
                                                           count * elementSize),
                                      "uploading weights: cuMemcpyHtoD"));
    return device;
  };
  DLM_ASSIGN_OR_RETURN(weights->embed_, place(host.embed()));
  DLM_ASSIGN_OR_RETURN(weights->finalNorm_, place(host.finalNorm()));
  DLM_ASSIGN_OR_RETURN(weights->lmHead_, place(host.lmHead()));
  for (const model::LayerWeights &l : host.layers()) {
    DeviceLayerWeights d;
    DLM_ASSIGN_OR_RETURN(d.attnNorm, place(l.attnNorm));
    DLM_ASSIGN_OR_RETURN(d.q, place(l.q));
    DLM_ASSIGN_OR_RETURN(d.k, place(l.k));
    DLM_ASSIGN_OR_RETURN(d.v, place(l.v));
    DLM_ASSIGN_OR_RETURN(d.qBias, place(l.qBias));
    DLM_ASSIGN_OR_RETURN(d.kBias, place(l.kBias));
    DLM_ASSIGN_OR_RETURN(d.vBias, place(l.vBias));
    DLM_ASSIGN_OR_RETURN(d.qNorm, place(l.qNorm));
    DLM_ASSIGN_OR_RETURN(d.kNorm, place(l.kNorm));
    DLM_ASSIGN_OR_RETURN(d.o, place(l.o));
    DLM_ASSIGN_OR_RETURN(d.mlpNorm, place(l.mlpNorm));
    DLM_ASSIGN_OR_RETURN(d.gate, place(l.gate));
    DLM_ASSIGN_OR_RETURN(d.up, place(l.up));
    DLM_ASSIGN_OR_RETURN(d.down, place(l.down));
    weights->layers_.push_back(d);
  }
  return weights;
}

} // namespace dlm::cuda
