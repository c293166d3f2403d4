// The integrity hashes an artifact records (schema 1.4): XXH3-64 (Debian's libxxhash), fast
// enough to check a model's weights at load (tens of GB/s) and certain to change when a byte
// flips. They find damage, not tampering: anyone who can rewrite the file can rewrite a hash.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dlm::artifact {

uint64_t hashBytes(const void *data, size_t size);

// The metadata's hash: bytes [0, size) with the 8 bytes at `hashFieldOffset` (where the hash
// itself is stored) read as zeros.
uint64_t hashMetadata(const uint8_t *bytes, size_t size, size_t hashFieldOffset);

} // namespace dlm::artifact
