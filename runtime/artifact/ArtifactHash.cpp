#include "runtime/artifact/ArtifactHash.h"

#include <xxhash.h>

#include <cassert>
#include <memory>

namespace dlm::artifact {

uint64_t hashBytes(const void *data, size_t size) { return XXH3_64bits(data, size); }

uint64_t hashMetadata(const uint8_t *bytes, size_t size, size_t hashFieldOffset) {
  assert(hashFieldOffset + sizeof(uint64_t) <= size);
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t *)> state(XXH3_createState(),
                                                                          XXH3_freeState);
  static const uint8_t zeros[sizeof(uint64_t)] = {};
  (void)XXH3_64bits_reset(state.get());
  (void)XXH3_64bits_update(state.get(), bytes, hashFieldOffset);
  (void)XXH3_64bits_update(state.get(), zeros, sizeof zeros);
  const size_t rest = hashFieldOffset + sizeof zeros;
  (void)XXH3_64bits_update(state.get(), bytes + rest, size - rest);
  return XXH3_64bits_digest(state.get());
}

} // namespace dlm::artifact
