#include "runtime/artifact/ParameterFileReader.h"

#include <cstring>
#include <fstream>

namespace dlm::artifact {

StatusOr<ParameterFileReader> ParameterFileReader::open(const std::string &path) {
  ParameterFileReader reader;
  reader.path_ = path;
  if (Status loaded = reader.load(); !loaded)
    return loaded.withContext("parameter file '" + path + "'");
  return std::move(reader);
}

Status ParameterFileReader::load() {
  DLM_RETURN_IF_ERROR(container_.open(path_, kParameterFileContainer));
  flatbuffers::Verifier verifier(container_.data(), container_.metadataEnd());
  if (!fb::VerifySizePrefixedParameterArchiveBuffer(verifier))
    return Status::error("corrupt metadata: the flatbuffer (bytes 0 to " +
                         std::to_string(container_.metadataEnd()) + ") failed verification");
  const fb::ParameterArchive *root = fb::GetSizePrefixedParameterArchive(container_.data());
  if (const flatbuffers::String *producer = root->producer())
    producer_ = std::string_view(producer->c_str(), producer->size());
  randomSeed_ = root->random_seed() < 0 ? kNoRandomSeed : root->random_seed();
  return container_.readWeightIndex(*reinterpret_cast<const flatbuffers::Table *>(root));
}

Status ParameterFileReader::guardedRead(const std::function<void()> &read) const {
  return container_.guardedRead(read).withContext("parameter file '" + path_ + "'");
}

Status ParameterFileReader::verifyIntegrity() const {
  StatusOr<std::vector<std::string>> damaged = container_.damagedSections();
  if (!damaged)
    return damaged.status().withContext("parameter file '" + path_ + "'");
  if (damaged->empty())
    return Status::ok();
  return Status::error("parameter file '" + path_ + "': damaged: " + listDamage(*damaged));
}

bool hasParameterFileIdentifier(const std::string &path) {
  // The size prefix and the root table's offset, then the identifier.
  constexpr size_t kIdentifierOffset = 2 * sizeof(flatbuffers::uoffset_t);
  char header[kIdentifierOffset + flatbuffers::kFileIdentifierLength];
  std::ifstream file(path, std::ios::binary);
  if (!file.read(header, sizeof header))
    return false;
  return std::memcmp(header + kIdentifierOffset, fb::ParameterArchiveIdentifier(),
                     flatbuffers::kFileIdentifierLength) == 0;
}

} // namespace dlm::artifact
