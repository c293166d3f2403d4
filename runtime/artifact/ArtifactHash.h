// The integrity hashes an artifact records (schema 1.4): XXH3-64 (Debian's libxxhash), fast
// enough to check a model's weights at load (tens of GB/s) and certain to change when a byte
// flips. They find damage, not tampering: anyone who can rewrite the file can rewrite a hash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace dlm::artifact {

uint64_t hashBytes(const void *data, size_t size);

// XXH3-64 of bytes given in pieces, equal to hashBytes of them in one piece: a generated weight
// (RandomParameters.h) is hashed without ever being whole in memory.
class StreamingHash {
public:
  StreamingHash();
  StreamingHash(const StreamingHash &) = delete;
  StreamingHash &operator=(const StreamingHash &) = delete;
  ~StreamingHash();

  void update(const void *data, size_t size);
  // The hash of everything given so far.
  uint64_t digest() const;

private:
  // The xxhash state, whose layout only ArtifactHash.cpp sees.
  struct State;
  std::unique_ptr<State> state_;
};

// The metadata's hash: bytes [0, size) with the 8 bytes at `hashFieldOffset` (where the hash
// itself is stored) read as zeros.
uint64_t hashMetadata(const uint8_t *bytes, size_t size, size_t hashFieldOffset);

} // namespace dlm::artifact
