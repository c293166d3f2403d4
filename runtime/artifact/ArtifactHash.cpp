#include "runtime/artifact/ArtifactHash.h"

// The state's layout, so that it can live on the stack: the metadata is hashed inside a guarded
// read (MappedFile::guardedRead), which a SIGBUS leaves without running destructors.
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <cassert>

namespace dlm::artifact {

uint64_t hashBytes(const void *data, size_t size) { return XXH3_64bits(data, size); }

struct StreamingHash::State {
  XXH3_state_t xxh;
};

StreamingHash::StreamingHash() : state_(std::make_unique<State>()) {
  XXH3_INITSTATE(&state_->xxh);
  (void)XXH3_64bits_reset(&state_->xxh);
}

StreamingHash::~StreamingHash() = default;

void StreamingHash::update(const void *data, size_t size) {
  (void)XXH3_64bits_update(&state_->xxh, data, size);
}

uint64_t StreamingHash::digest() const { return XXH3_64bits_digest(&state_->xxh); }

uint64_t hashMetadata(const uint8_t *bytes, size_t size, size_t hashFieldOffset) {
  assert(hashFieldOffset + sizeof(uint64_t) <= size);
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  static const uint8_t zeros[sizeof(uint64_t)] = {};
  (void)XXH3_64bits_reset(&state);
  (void)XXH3_64bits_update(&state, bytes, hashFieldOffset);
  (void)XXH3_64bits_update(&state, zeros, sizeof zeros);
  const size_t rest = hashFieldOffset + sizeof zeros;
  (void)XXH3_64bits_update(&state, bytes + rest, size - rest);
  return XXH3_64bits_digest(&state);
}

} // namespace dlm::artifact
