#include "runtime/artifact/ContainerReader.h"

#include "runtime/artifact/ArtifactHash.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>

namespace dlm::artifact {

// Weight shapes are handed out as raw pointers into the little-endian file.
static_assert(FLATBUFFERS_LITTLEENDIAN, "the container reader maps little-endian data in place");

namespace {

constexpr uint64_t kUint64Max = std::numeric_limits<uint64_t>::max();
constexpr uint64_t kSizePrefixBytes = sizeof(flatbuffers::uoffset_t);
// Size prefix, root table offset, file identifier.
constexpr uint64_t kHeaderBytes =
    kSizePrefixBytes + sizeof(flatbuffers::uoffset_t) + flatbuffers::kFileIdentifierLength;
constexpr uint64_t kIdentifierOffset = kHeaderBytes - flatbuffers::kFileIdentifierLength;

// The containers there are, to name a file that is the other kind.
constexpr const ContainerFormat *kKnownContainers[] = {&kArtifactContainer,
                                                      &kParameterFileContainer};

// The identifier as text, with bytes that are not printable ASCII escaped.
std::string identifierText(const uint8_t *bytes) {
  static const char *hex = "0123456789abcdef";
  std::string text;
  for (size_t i = 0; i < flatbuffers::kFileIdentifierLength; ++i) {
    const uint8_t c = bytes[i];
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      text += static_cast<char>(c);
    } else {
      text += "\\x";
      text += hex[c >> 4];
      text += hex[c & 15];
    }
  }
  return text;
}

bool sameIdentifier(const uint8_t *bytes, const char *identifier, size_t length) {
  return std::memcmp(bytes, identifier, length) == 0;
}

// Decimal text of a sum that may not fit in 64 bits (a damaged offset plus the section start).
std::string decimal(unsigned __int128 value) {
  std::string digits;
  do {
    digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(value % 10)));
    value /= 10;
  } while (value != 0);
  return digits;
}

std::string_view view(const flatbuffers::String *text) {
  return text ? std::string_view(text->c_str(), text->size()) : std::string_view();
}

} // namespace

Status MappedContainer::open(const std::string &path, const ContainerFormat &format) {
  format_ = &format;
  StatusOr<MappedFile> file = MappedFile::open(path);
  if (!file)
    return file.status();
  const uint64_t fileSize = file->size();
  const std::string noun = std::string("dlm ") + format.noun;
  if (fileSize < kHeaderBytes) {
    if (fileSize == 0)
      return Status::error("empty file (0 bytes), not a " + noun);
    return Status::error("too small to be a " + noun + " (" + std::to_string(fileSize) +
                         " bytes; the header alone takes " + std::to_string(kHeaderBytes) + ")");
  }
  file_ = std::move(*file);
  DLM_RETURN_IF_ERROR(checkHeader());
  return checkSchemaVersion();
}

Status MappedContainer::checkHeader() {
  const uint8_t *identifier = data() + kIdentifierOffset;
  const char *expected = format_->identifier();
  const size_t length = flatbuffers::kFileIdentifierLength;
  if (!sameIdentifier(identifier, expected, length)) {
    const std::string found = identifierText(identifier);
    // Same family, other container layout: say so rather than "not a dlm artifact".
    if (sameIdentifier(identifier, expected, length - 1))
      return Status::error(std::string(format_->noun) + " layout '" + found +
                           "' is not supported by this runtime (it reads '" + expected + "')");
    std::string other;
    for (const ContainerFormat *known : kKnownContainers)
      if (known != format_ && sameIdentifier(identifier, known->identifier(), length))
        other = std::string(" but a dlm ") + known->noun;
    return Status::error("not a dlm " + std::string(format_->noun) + other +
                         " (file identifier '" + found + "', expected '" + expected + "')");
  }
  const uint64_t flatbufferSize = flatbuffers::ReadScalar<flatbuffers::uoffset_t>(data());
  metadataEnd_ = kSizePrefixBytes + flatbufferSize;
  if (metadataEnd_ < kHeaderBytes)
    return Status::error("corrupt header: metadata size " + std::to_string(flatbufferSize) +
                         " is too small to hold a flatbuffer");
  if (metadataEnd_ > size())
    return Status::error("truncated: the metadata needs " + std::to_string(metadataEnd_) +
                         " bytes but the file has only " + std::to_string(size()) + " bytes");
  if (metadataEnd_ >= FLATBUFFERS_MAX_BUFFER_SIZE)
    return Status::error("corrupt header: metadata size " + std::to_string(flatbufferSize) +
                         " exceeds the 2 GiB a flatbuffer can hold");
  return Status::ok();
}

// Reads only the version, verifying just the bytes on the way to it, so that a file of another
// major version is reported as such instead of failing verification as "corrupt".
Status MappedContainer::checkSchemaVersion() {
  flatbuffers::Verifier verifier(data(), metadataEnd_);
  const flatbuffers::uoffset_t rootOffset = verifier.VerifyOffset(kSizePrefixBytes);
  if (rootOffset == 0)
    return Status::error("corrupt metadata: the root table offset is out of range");
  const auto *root =
      reinterpret_cast<const flatbuffers::Table *>(data() + kSizePrefixBytes + rootOffset);
  if (!root->VerifyTableStart(verifier) ||
      !root->VerifyField<fb::SchemaVersion>(verifier, format_->schemaVersionField,
                                            alignof(fb::SchemaVersion)))
    return Status::error("corrupt metadata: the schema version cannot be read");
  const auto *version = root->GetStruct<const fb::SchemaVersion *>(format_->schemaVersionField);
  if (!version)
    return Status::error("corrupt metadata: no schema version");
  schemaVersion_ = {version->major(), version->minor()};
  const std::string versionText =
      std::to_string(version->major()) + "." + std::to_string(version->minor());
  const std::string supported = std::to_string(format_->schemaMajor) + ".x";
  const std::string what = std::string(format_->noun) + " schema version " + versionText;
  if (version->major() > format_->schemaMajor)
    return Status::error(what + " is newer than this runtime supports (" + supported + ")");
  if (version->major() < format_->schemaMajor)
    return Status::error(what + " is older than this runtime supports (" + supported + ")");
  return Status::ok();
}

Status MappedContainer::readWeightIndex(const flatbuffers::Table &root, bool withWeights) {
  DLM_RETURN_IF_ERROR(readMetadataHash(root));
  DLM_RETURN_IF_ERROR(checkWeightSection(root));
  return withWeights ? readWeights(root) : Status::ok();
}

// The hash of the metadata is stored inside it: remember where, to read those 8 bytes as zeros
// when verifying.
Status MappedContainer::readMetadataHash(const flatbuffers::Table &root) {
  if (schemaVersion_.minor < format_->firstMinorWithHashes)
    return Status::ok();
  const uint8_t *field = root.GetAddressOf(format_->metadataHashField);
  if (!field)
    return Status::error("corrupt metadata: schema " + std::to_string(schemaVersion_.major) + "." +
                         std::to_string(schemaVersion_.minor) +
                         " records a metadata hash, but the field is missing");
  metadataHash_ = MetadataHash{root.GetField<uint64_t>(format_->metadataHashField, 0),
                               metadataEnd_, static_cast<uint64_t>(field - data())};
  return Status::ok();
}

Status MappedContainer::checkWeightSection(const flatbuffers::Table &root) {
  sectionStart_ = root.GetField<uint64_t>(format_->weightSectionOffsetField, 0);
  sectionSize_ = root.GetField<uint64_t>(format_->weightSectionSizeField, 0);
  const std::string start = std::to_string(sectionStart_);
  if (sectionStart_ % kWeightAlignment != 0)
    return Status::error("the weight section starts at byte " + start + ", not a multiple of " +
                         std::to_string(kWeightAlignment));
  if (sectionStart_ < metadataEnd_)
    return Status::error("the weight section starts at byte " + start +
                         ", inside the metadata (which ends at byte " +
                         std::to_string(metadataEnd_) + ")");
  if (sectionSize_ > kUint64Max - sectionStart_)
    return Status::error("the weight section (" + std::to_string(sectionSize_) +
                         " bytes at byte " + start + ") ends past 2^64");
  const uint64_t sectionEnd = sectionStart_ + sectionSize_;
  if (sectionEnd > size())
    return Status::error("truncated: the weight section ends at byte " +
                         std::to_string(sectionEnd) + " but the file has only " +
                         std::to_string(size()) + " bytes");
  // The writer ends the file with the section; anything after it means the file is not what the
  // metadata describes.
  if (sectionEnd < size())
    return Status::error(std::to_string(size() - sectionEnd) +
                         " unexpected bytes after the weight section (which ends at byte " +
                         std::to_string(sectionEnd) + " of " + std::to_string(size()) + ")");
  return Status::ok();
}

Status MappedContainer::readWeights(const flatbuffers::Table &root) {
  const auto *weights =
      root.GetPointer<const flatbuffers::Vector<flatbuffers::Offset<fb::Weight>> *>(
          format_->weightsField);
  if (!weights)
    return Status::ok();
  weights_.reserve(weights->size());
  for (size_t i = 0; i < weights->size(); ++i) {
    WeightView weight;
    DLM_RETURN_IF_ERROR(
        readWeight(*weights->Get(static_cast<flatbuffers::uoffset_t>(i)), i, weight));
    if (!weightIndex_.emplace(weight.name, weights_.size()).second)
      return Status::error("weight " + quotedName(weight.name) + " appears twice");
    weights_.push_back(weight);
  }
  return checkOverlaps();
}

Status readWeightDescriptor(const fb::Weight &from, size_t index, WeightView &weight) {
  weight.name = view(from.name());
  if (weight.name.empty())
    return Status::error("weight #" + std::to_string(index) + " has an empty name");
  weight.dtype = from.dtype();
  if (const auto *shape = from.shape()) {
    // flatbuffers leaves an empty vector (a scalar's shape) unaligned: nothing is read from it.
    if (shape->size() && reinterpret_cast<uintptr_t>(shape->data()) % alignof(int64_t) != 0)
      return Status::error("weight " + quotedName(weight.name) +
                           ": corrupt metadata: the shape is misaligned");
    weight.shape = ShapeView(shape->data(), shape->size());
  }
  weight.size = from.byte_size();
  weight.contentHash = from.content_hash();
  return checkWeightByteSize(weight.name, weight.dtype, weight.shape, weight.size);
}

Status MappedContainer::readWeight(const fb::Weight &from, size_t index,
                                   WeightView &weight) const {
  DLM_RETURN_IF_ERROR(readWeightDescriptor(from, index, weight));
  const std::string item = "weight " + quotedName(weight.name);
  const uint64_t offset = from.offset();
  const std::string where = std::to_string(weight.size) + " bytes at offset " +
                            std::to_string(offset) + " of the weight section";
  if (offset % kWeightAlignment != 0)
    return Status::error(item + " (" + where + ") is not " + std::to_string(kWeightAlignment) +
                         "-byte aligned");
  if (weight.size > kUint64Max - offset)
    return Status::error(item + " (" + where + "): offset + size overflows 64 bits");
  if (offset + weight.size > sectionSize_)
    return Status::error(
        item + " (" + where + ") ends at byte " +
        decimal(static_cast<unsigned __int128>(sectionStart_) + offset + weight.size) +
        ", past the end of the file (" + std::to_string(size()) + " bytes)");
  weight.fileOffset = sectionStart_ + offset;
  weight.data = data() + weight.fileOffset;
  return Status::ok();
}

Status MappedContainer::checkOverlaps() const {
  std::vector<const WeightView *> byOffset;
  for (const WeightView &weight : weights_)
    if (weight.size > 0) // an empty tensor occupies no bytes, wherever it points
      byOffset.push_back(&weight);
  std::sort(byOffset.begin(), byOffset.end(), [](const WeightView *a, const WeightView *b) {
    return a->fileOffset < b->fileOffset;
  });
  auto range = [](const WeightView &weight) {
    return "bytes " + std::to_string(weight.fileOffset) + " to " +
           std::to_string(weight.fileOffset + weight.size);
  };
  for (size_t i = 1; i < byOffset.size(); ++i) {
    const WeightView &previous = *byOffset[i - 1], &next = *byOffset[i];
    if (next.fileOffset < previous.fileOffset + previous.size)
      return Status::error("weights " + quotedName(previous.name) + " (" + range(previous) + ") and " +
                           quotedName(next.name) + " (" + range(next) + ") overlap");
  }
  return Status::ok();
}

const WeightView *MappedContainer::findWeight(std::string_view name) const {
  auto it = weightIndex_.find(name);
  return it == weightIndex_.end() ? nullptr : &weights_[it->second];
}

StatusOr<std::vector<std::string>> MappedContainer::damagedSections() const {
  // The hashes first, under the guard (it leaves by siglongjmp: nothing there may own memory),
  // then the comparison.
  std::vector<uint64_t> actual(weights_.size() + 1);
  DLM_RETURN_IF_ERROR(guardedRead([&] {
    actual[0] = hashMetadata(data(), metadataHash_->size, metadataHash_->fieldOffset);
    for (size_t i = 0; i < weights_.size(); ++i)
      actual[i + 1] = hashBytes(weights_[i].data, weights_[i].size);
  }));
  std::vector<std::string> damaged;
  auto check = [&](const std::string &section, uint64_t begin, uint64_t end, uint64_t hash,
                   uint64_t recorded) {
    if (hash != recorded)
      damaged.push_back(section + " (bytes " + std::to_string(begin) + " to " +
                        std::to_string(end) + ") hashes to " + hexHash(hash) +
                        ", dlmc recorded " + hexHash(recorded));
  };
  check("the metadata", 0, metadataHash_->size, actual[0], metadataHash_->recorded);
  for (size_t i = 0; i < weights_.size(); ++i) {
    const WeightView &weight = weights_[i];
    check("weight " + quotedName(weight.name), weight.fileOffset, weight.fileOffset + weight.size,
          actual[i + 1], weight.contentHash);
  }
  return damaged;
}

std::string hexHash(uint64_t value) {
  char text[19];
  std::snprintf(text, sizeof text, "0x%016llx", static_cast<unsigned long long>(value));
  return text;
}

std::string listDamage(const std::vector<std::string> &damaged) {
  constexpr size_t kNamed = 8;
  std::string list;
  for (size_t i = 0; i < std::min(damaged.size(), kNamed); ++i)
    list += (i ? "; " : "") + damaged[i];
  if (damaged.size() > kNamed)
    list += "; and " + std::to_string(damaged.size() - kNamed) + " more";
  return list;
}

} // namespace dlm::artifact
