// Writing the container an artifact and a parameter file share (ContainerFormat.h): the weights'
// checks, layout and descriptors, the metadata's seal (the weight section's start and the
// metadata hash patched into the finished flatbuffer), and the file itself, written beside its
// destination and renamed over it once complete.
#pragma once

#include "runtime/artifact/ContainerFormat.h"
#include "support/Status.h"

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace dlm::artifact {

// A weight whose bytes are already in memory, typically in an mmapped safetensors file. The
// writer streams them straight to the file, so they are never copied into a second buffer.
struct WeightSource {
  std::string name;
  DType dtype = DType::invalid;
  std::vector<int64_t> shape;
  // Must stay valid until the write returns; may be null when size is 0.
  const void *data = nullptr;
  // Must equal storageBytes(dtype, product(shape)).
  uint64_t size = 0;
};

// Where a weight lies in its weight section (a multiple of 64 from the section's start) and the
// XXH3-64 of its bytes.
struct WeightPlacement {
  uint64_t offset = 0;
  uint64_t contentHash = 0;
};

// A weight section holding some weights: one placement per weight, in the weights' order.
struct WeightLayout {
  std::vector<WeightPlacement> placements;
  uint64_t sectionSize = 0;
};

// Unique non-empty names and byte sizes matching shape x dtype; the data are not looked at (a
// generated weight has none until it is written).
Status checkWeightDescriptors(const std::vector<WeightSource> &weights);

// checkWeightDescriptors, and data behind every byte.
Status checkWeightSources(const std::vector<WeightSource> &weights);

// The weights one after another, each at the next 64-byte boundary, with their hashes (which read
// every byte). Errors: checkWeightSources', and weights adding up to more than 2^64 bytes.
StatusOr<WeightLayout> layOutWeights(const std::vector<WeightSource> &weights);

// The same places, with the content hashes given (one per weight, in order) instead of read from
// the data: those of a generator's bytes (RandomParameters.h). Errors: checkWeightDescriptors',
// a count of hashes that differs, more than 2^64 bytes.
StatusOr<WeightLayout> layOutWeights(const std::vector<WeightSource> &weights,
                                     const std::vector<uint64_t> &contentHashes);

// Whether `layout` can be written for `weights`: a placement per weight, 64-byte aligned, in
// increasing order without overlap, the last ending within the section. A layout read from a file
// rather than made by layOutWeights must pass this before it is written.
Status checkWeightLayout(const std::vector<WeightSource> &weights, const WeightLayout &layout);

// What the metadata estimates below charge for one item (string, vector, table) beyond its bytes:
// length prefix, terminator, alignment padding, vtable and table fields.
inline constexpr uint64_t kMetadataItemOverhead = 256;

// An upper bound on the flatbuffer bytes the weights' descriptors take.
uint64_t estimateWeightIndexBytes(const std::vector<WeightSource> &weights);

// An error when metadata of about `estimate` bytes would not fit in a flatbuffer (whose builder
// cannot report running out of its 2 GiB: it asserts).
Status checkMetadataEstimate(uint64_t estimate);

// The descriptors of `weights` placed at `placements` (same order), for the root table.
flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::Weight>>>
createWeightIndex(flatbuffers::FlatBufferBuilder &builder, const std::vector<WeightSource> &weights,
                  const std::vector<WeightPlacement> &placements);

// After the root was finished size-prefixed by a builder with ForceDefaults (so that every scalar
// is stored and can be patched in place): sets the weight section's start, the first 64-byte
// boundary after the buffer, then the metadata hash over everything else. Returns the start.
uint64_t sealMetadata(flatbuffers::FlatBufferBuilder &builder, const ContainerFormat &format);

// Writes the sealed metadata, zero padding up to `sectionStart` and each weight at its placement
// to a temporary file beside `path`, syncs it and renames it over `path`: a failure never leaves a
// partial file at `path` (an existing one stays as it was). I/O errors carry the system's reason.
// The placements must be in increasing order (layOutWeights', or checkWeightLayout's).
Status writeContainerFile(const std::string &path, const flatbuffers::FlatBufferBuilder &metadata,
                          uint64_t sectionStart, const std::vector<WeightSource> &weights,
                          const std::vector<WeightPlacement> &placements);

// Takes a piece of a weight's bytes (valid during the call).
using ByteSink = std::function<Status(const void *data, size_t size)>;
// Gives weight `index`'s bytes, all of them and in order, to `sink`, in pieces of any size.
using WeightBytes = std::function<Status(size_t index, const ByteSink &sink)>;

// The same, each weight's bytes coming from `bytes` as they are written, so that a weight need
// never be whole in memory. A weight given more or fewer bytes than its size is an error naming
// it.
Status writeContainerFile(const std::string &path, const flatbuffers::FlatBufferBuilder &metadata,
                          uint64_t sectionStart, const std::vector<WeightSource> &weights,
                          const std::vector<WeightPlacement> &placements,
                          const WeightBytes &bytes);

} // namespace dlm::artifact
