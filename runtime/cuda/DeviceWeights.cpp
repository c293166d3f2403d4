#include "runtime/cuda/DeviceWeights.h"

#include "support/FloatFormats.h"

#include <cstring>
#include <map>

namespace dlm::cuda {

namespace {

// One distinct tensor to upload: a wide one from its float32 host copy, or a narrow one as
// stored (bytes, then its row or group scales).
struct Source {
  const model::HostTensor *wide = nullptr;
  const model::StoredTensor *narrow = nullptr;
  size_t offset = 0, scaleOffset = 0;
  const void *key() const { return narrow ? narrow->data : static_cast<const void *>(wide->data); }
};

Status checkNarrow(const std::string &name, const model::StoredTensor *stored) {
  if (!stored ||
      (stored->dtype != artifact::DType::i8 && stored->dtype != artifact::DType::fp8_e4m3 &&
       stored->dtype != artifact::DType::i4))
    return Status::error("cuda backend: weight '" + name +
                         "' has a widening kernel but is not stored in 8 or 4 bits (i8, fp8_e4m3 "
                         "or i4); recompile the artifact");
  if (stored->dtype == artifact::DType::i4 ? !stored->groupScales : !stored->rowScales)
    return Status::error("cuda backend: narrow weight '" + name + "' has no scales");
  return Status::ok();
}

// The bytes of a narrow weight's codes and of its scales.
size_t codeBytes(const model::StoredTensor &n) {
  return static_cast<size_t>(
      artifact::storageBytes(n.dtype, static_cast<uint64_t>(n.rows * n.cols)));
}
size_t scaleBytes(const model::StoredTensor &n) {
  return n.dtype == artifact::DType::i4
             ? static_cast<size_t>(n.rows * n.groups()) * sizeof(uint16_t)
             : static_cast<size_t>(n.rows) * sizeof(float);
}

} // namespace

StatusOr<std::unique_ptr<DeviceWeights>>
DeviceWeights::upload(std::shared_ptr<const CudaDriver> driver, const model::ModelWeights &host,
                      const std::vector<std::string> &names, DeviceElement element,
                      const std::set<std::string> &narrow) {
  std::unique_ptr<DeviceWeights> weights(new DeviceWeights());
  weights->element_ = element;
  const size_t elementSize = elementBytes(element);
  // Every distinct tensor gets one place (tied weights share theirs).
  std::vector<std::pair<std::string, Source>> tensors;
  ArenaLayout layout;
  std::map<const void *, Source> places;
  for (const std::string &name : names) {
    Source source;
    if (narrow.count(name)) {
      source.narrow = host.stored(name);
      DLM_RETURN_IF_ERROR(checkNarrow(name, source.narrow));
    } else {
      if (!host.find(name))
        return Status::error("cuda backend: the kernel program names weight '" + name +
                             "', which the artifact lacks");
      DLM_ASSIGN_OR_RETURN(source.wide, host.widened(name));
    }
    auto [place, added] = places.emplace(source.key(), source);
    if (added) {
      const model::StoredTensor *n = source.narrow;
      if (n) {
        place->second.offset = layout.add(codeBytes(*n));
        place->second.scaleOffset = layout.add(scaleBytes(*n));
      } else {
        place->second.offset =
            layout.add(static_cast<size_t>(source.wide->rows * source.wide->cols) * elementSize);
      }
    }
    tensors.emplace_back(name, place->second);
  }
  DLM_RETURN_IF_ERROR(weights->memory_.allocate(driver, layout.size(), "weights"));

  // Converted (or, narrow, read under the artifact's guard) and copied one tensor at a time
  // through one staging buffer.
  std::vector<uint8_t> staging;
  std::map<const void *, bool> uploaded;
  auto copy = [&](CUdeviceptr to, const void *from, size_t bytes) {
    return driver->check(driver->cuMemcpyHtoD(to, from, bytes), "uploading weights: cuMemcpyHtoD");
  };
  for (const auto &[name, source] : tensors) {
    const CUdeviceptr base = weights->memory_.pointer();
    DeviceTensor device;
    device.data = base + source.offset;
    if (source.narrow) {
      device.rows = source.narrow->rows;
      device.cols = source.narrow->cols;
      device.narrow = source.narrow->dtype;
      device.scale = base + source.scaleOffset;
      device.groupSize = source.narrow->groupSize;
    } else {
      device.rows = source.wide->rows;
      device.cols = source.wide->cols;
    }
    weights->byName_[name] = device;
    if (uploaded[source.key()])
      continue;
    uploaded[source.key()] = true;
    const size_t count = static_cast<size_t>(device.rows * device.cols);
    if (source.narrow) {
      const model::StoredTensor &n = *source.narrow;
      const size_t codes = codeBytes(n), scales = scaleBytes(n);
      // Row scales are widened host vectors; group scales lie in the mapping, as the codes do.
      staging.resize(codes + scales);
      DLM_RETURN_IF_ERROR(host.readStored([&] {
        std::memcpy(staging.data(), n.data, codes);
        std::memcpy(staging.data() + codes,
                    n.groupScales ? static_cast<const void *>(n.groupScales)
                                  : static_cast<const void *>(n.rowScales),
                    scales);
      }));
      DLM_RETURN_IF_ERROR(copy(device.data, staging.data(), codes));
      DLM_RETURN_IF_ERROR(copy(device.scale, staging.data() + codes, scales));
      continue;
    }
    const void *from = source.wide->data;
    if (element == DeviceElement::bf16) {
      staging.resize(count * sizeof(uint16_t));
      auto *to = reinterpret_cast<uint16_t *>(staging.data());
      for (size_t i = 0; i < count; ++i)
        to[i] = bf16FromFloat(source.wide->data[i]);
      from = staging.data();
    }
    DLM_RETURN_IF_ERROR(copy(device.data, from, count * elementSize));
  }
  return weights;
}

} // namespace dlm::cuda
