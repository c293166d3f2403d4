#include "runtime/artifact/ContainerWriter.h"

#include "runtime/artifact/ArtifactHash.h"
#include "support/TemporaryFiles.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

namespace dlm::artifact {
namespace {

constexpr uint64_t kUint64Max = std::numeric_limits<uint64_t>::max();
// The flatbuffer, its size prefix and slack for our estimate's error must stay under the 2 GiB
// flatbuffers can address; past it the builder aborts (or, with NDEBUG, emits garbage).
constexpr uint64_t kMaxMetadataBytes = FLATBUFFERS_MAX_BUFFER_SIZE - (uint64_t{1} << 24);

uint64_t alignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

uint64_t saturatingAdd(uint64_t a, uint64_t b) { return a > kUint64Max - b ? kUint64Max : a + b; }

std::string systemError(const std::string &what) { return what + ": " + std::strerror(errno); }

// A file created next to its destination, renamed over it by commit(); removed if destroyed
// before that.
class TemporaryFile {
public:
  explicit TemporaryFile(std::string destination) : destination_(std::move(destination)) {}
  TemporaryFile(const TemporaryFile &) = delete;
  TemporaryFile &operator=(const TemporaryFile &) = delete;
  ~TemporaryFile() {
    if (fd_ >= 0)
      ::close(fd_);
    if (!path_.empty()) {
      ::unlink(path_.c_str());
      unregisterTemporaryFile(path_);
    }
  }

  Status create() {
    // Same directory as the destination, so the final rename cannot cross file systems.
    static std::atomic<unsigned> counter{0};
    for (int attempt = 0; attempt < 100; ++attempt) {
      std::string candidate =
          destination_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
      // 0666 and the process umask: the permissions any newly created file would get.
      fd_ = ::open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ >= 0) {
        path_ = std::move(candidate);
        registerTemporaryFile(path_); // removed if the process ends on a fault meanwhile
        return Status::ok();
      }
      if (errno != EEXIST)
        return Status::error(systemError("cannot create temporary file '" + candidate + "'"));
    }
    return Status::error("cannot create a temporary file next to it: too many name collisions");
  }

  Status write(const void *data, uint64_t size, const std::string &what) {
    const auto *bytes = static_cast<const uint8_t *>(data);
    while (size > 0) {
      // Linux writes at most ~2 GiB per call anyway; a bound keeps the count in ssize_t.
      const size_t chunk = static_cast<size_t>(std::min<uint64_t>(size, uint64_t{1} << 30));
      const ssize_t written = ::write(fd_, bytes, chunk);
      if (written < 0) {
        if (errno == EINTR)
          continue;
        return Status::error(systemError("cannot write " + what + " to '" + path_ + "'"));
      }
      bytes += written;
      size -= static_cast<uint64_t>(written);
    }
    return Status::ok();
  }

  // Alignment padding, or a gap a layout read from an artifact leaves between two weights.
  Status writeZeros(uint64_t count) {
    static const uint8_t zeros[4096] = {};
    while (count > 0) {
      const uint64_t piece = std::min<uint64_t>(count, sizeof zeros);
      DLM_RETURN_IF_ERROR(write(zeros, piece, "padding"));
      count -= piece;
    }
    return Status::ok();
  }

  Status commit() {
    if (::fsync(fd_) != 0)
      return Status::error(systemError("cannot sync '" + path_ + "'"));
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0)
      return Status::error(systemError("cannot close '" + path_ + "'"));
    if (::rename(path_.c_str(), destination_.c_str()) != 0)
      return Status::error(systemError("cannot rename '" + path_ + "' to '" + destination_ + "'"));
    unregisterTemporaryFile(path_);
    path_.clear();
    return Status::ok();
  }

private:
  std::string destination_;
  std::string path_;
  int fd_ = -1;
};

} // namespace

Status checkWeightDescriptors(const std::vector<WeightSource> &weights) {
  std::set<std::string_view> names;
  for (const WeightSource &weight : weights) {
    if (weight.name.empty())
      return Status::error("a weight has an empty name");
    if (!names.insert(weight.name).second)
      return Status::error("weight '" + weight.name + "' appears twice");
    DLM_RETURN_IF_ERROR(
        checkWeightByteSize(weight.name, weight.dtype, ShapeView(weight.shape), weight.size));
  }
  return Status::ok();
}

Status checkWeightSources(const std::vector<WeightSource> &weights) {
  DLM_RETURN_IF_ERROR(checkWeightDescriptors(weights));
  for (const WeightSource &weight : weights)
    if (weight.size && !weight.data)
      return Status::error("weight '" + weight.name + "' has " + std::to_string(weight.size) +
                           " bytes but no data");
  return Status::ok();
}

StatusOr<WeightLayout> layOutWeights(const std::vector<WeightSource> &weights) {
  // Hashing reads every byte: the sizes and data pointers must be right first.
  DLM_RETURN_IF_ERROR(checkWeightSources(weights));
  std::vector<uint64_t> hashes;
  hashes.reserve(weights.size());
  for (const WeightSource &weight : weights)
    hashes.push_back(hashBytes(weight.data, static_cast<size_t>(weight.size)));
  return layOutWeights(weights, hashes);
}

StatusOr<WeightLayout> layOutWeights(const std::vector<WeightSource> &weights,
                                     const std::vector<uint64_t> &contentHashes) {
  DLM_RETURN_IF_ERROR(checkWeightDescriptors(weights));
  if (contentHashes.size() != weights.size())
    return Status::error(std::to_string(contentHashes.size()) + " content hashes for " +
                         std::to_string(weights.size()) + " weights");
  WeightLayout layout;
  layout.placements.reserve(weights.size());
  for (size_t i = 0; i < weights.size(); ++i) {
    const WeightSource &weight = weights[i];
    const uint64_t offset = alignUp(layout.sectionSize, kWeightAlignment);
    if (offset < layout.sectionSize || weight.size > kUint64Max - offset)
      return Status::error("weights add up to more than 2^64 bytes at weight '" + weight.name +
                           "'");
    layout.placements.push_back({offset, contentHashes[i]});
    layout.sectionSize = offset + weight.size;
  }
  return layout;
}

Status checkWeightLayout(const std::vector<WeightSource> &weights, const WeightLayout &layout) {
  if (layout.placements.size() != weights.size())
    return Status::error("the layout places " + std::to_string(layout.placements.size()) +
                         " weights but there are " + std::to_string(weights.size()));
  uint64_t end = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const uint64_t offset = layout.placements[i].offset;
    const std::string item = "weight '" + weights[i].name + "' at offset " +
                             std::to_string(offset) + " of the weight section";
    if (offset % kWeightAlignment != 0)
      return Status::error(item + " is not " + std::to_string(kWeightAlignment) +
                           "-byte aligned");
    if (offset < end)
      return Status::error(item + " starts before the weight before it ends (byte " +
                           std::to_string(end) + ")");
    if (weights[i].size > layout.sectionSize || offset > layout.sectionSize - weights[i].size)
      return Status::error(item + " ends past the weight section (" +
                           std::to_string(layout.sectionSize) + " bytes)");
    end = offset + weights[i].size;
  }
  // A section longer than its weights (a layout read from an artifact that says so) would be
  // written as that many zeros: refused, as the reader would refuse the file afterwards.
  if (layout.sectionSize != end)
    return Status::error("the weight section is " + std::to_string(layout.sectionSize) +
                         " bytes but its last weight ends at byte " + std::to_string(end));
  return Status::ok();
}

uint64_t estimateWeightIndexBytes(const std::vector<WeightSource> &weights) {
  uint64_t total = 0;
  for (const WeightSource &weight : weights)
    total = saturatingAdd(total, saturatingAdd(weight.name.size() + 8 * weight.shape.size(),
                                               kMetadataItemOverhead));
  return total;
}

Status checkMetadataEstimate(uint64_t estimate) {
  if (estimate <= kMaxMetadataBytes)
    return Status::ok();
  return Status::error("metadata (config, tokenizer, program, kernels, weight index) needs about " +
                       std::to_string(estimate) + " bytes, more than the " +
                       std::to_string(kMaxMetadataBytes) +
                       " a flatbuffer can hold; weights are stored outside it");
}

flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::Weight>>>
createWeightIndex(flatbuffers::FlatBufferBuilder &builder, const std::vector<WeightSource> &weights,
                  const std::vector<WeightPlacement> &placements) {
  assert(weights.size() == placements.size());
  std::vector<flatbuffers::Offset<fb::Weight>> descriptors;
  descriptors.reserve(weights.size());
  for (size_t i = 0; i < weights.size(); ++i) {
    const WeightSource &weight = weights[i];
    auto name = builder.CreateString(weight.name);
    auto shape = builder.CreateVector(weight.shape);
    descriptors.push_back(fb::CreateWeight(builder, name, weight.dtype, shape,
                                           placements[i].offset, weight.size,
                                           placements[i].contentHash));
  }
  return builder.CreateVector(descriptors);
}

uint64_t sealMetadata(flatbuffers::FlatBufferBuilder &builder, const ContainerFormat &format) {
  uint8_t *buffer = builder.GetBufferPointer();
  const uint64_t sectionStart = alignUp(builder.GetSize(), kWeightAlignment);
  auto *root = flatbuffers::GetMutableSizePrefixedRoot<flatbuffers::Table>(buffer);
  bool patched = root->SetField<uint64_t>(format.weightSectionOffsetField, sectionStart);
  // The hash covers everything else in the buffer, the section offset included.
  const uint8_t *hashField = root->GetAddressOf(format.metadataHashField);
  patched = patched && hashField &&
            root->SetField<uint64_t>(
                format.metadataHashField,
                hashMetadata(buffer, builder.GetSize(), static_cast<size_t>(hashField - buffer)));
  (void)patched;
  assert(patched && "ForceDefaults stores the fields, so they can be patched");
  return sectionStart;
}

Status writeContainerFile(const std::string &path, const flatbuffers::FlatBufferBuilder &metadata,
                          uint64_t sectionStart, const std::vector<WeightSource> &weights,
                          const std::vector<WeightPlacement> &placements) {
  return writeContainerFile(path, metadata, sectionStart, weights, placements,
                            [&weights](size_t index, const ByteSink &sink) {
                              const WeightSource &weight = weights[index];
                              return sink(weight.data, static_cast<size_t>(weight.size));
                            });
}

Status writeContainerFile(const std::string &path, const flatbuffers::FlatBufferBuilder &metadata,
                          uint64_t sectionStart, const std::vector<WeightSource> &weights,
                          const std::vector<WeightPlacement> &placements,
                          const WeightBytes &bytes) {
  assert(weights.size() == placements.size());
  TemporaryFile file(path);
  DLM_RETURN_IF_ERROR(file.create());
  DLM_RETURN_IF_ERROR(file.write(metadata.GetBufferPointer(), metadata.GetSize(), "metadata"));
  uint64_t position = metadata.GetSize();
  DLM_RETURN_IF_ERROR(file.writeZeros(sectionStart - position));
  position = sectionStart;
  for (size_t i = 0; i < weights.size(); ++i) {
    const WeightSource &weight = weights[i];
    const uint64_t start = sectionStart + placements[i].offset;
    assert(start >= position && "placements in increasing order");
    DLM_RETURN_IF_ERROR(file.writeZeros(start - position));
    const std::string what = "weight '" + weight.name + "'";
    uint64_t given = 0;
    DLM_RETURN_IF_ERROR(bytes(i, [&](const void *data, size_t size) {
      if (size > weight.size - given)
        return Status::error(what + ": given more than its " + std::to_string(weight.size) +
                             " bytes");
      given += size;
      return file.write(data, size, what);
    }));
    if (given != weight.size)
      return Status::error(what + ": given " + std::to_string(given) + " of its " +
                           std::to_string(weight.size) + " bytes");
    position = start + weight.size;
  }
  return file.commit();
}

} // namespace dlm::artifact
