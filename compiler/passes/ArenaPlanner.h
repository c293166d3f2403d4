// Packing of buffers with live ranges into one arena: dlm-lower-to-kernel-program's memory plan
// (elements per token row of @forward).
//
// Placement: buffers by decreasing size (equal sizes in program order, so the plan is
// deterministic), each at the lowest aligned offset that overlaps no placed buffer whose live
// range intersects its own — the greedy-by-size heuristic of TFLite's and XLA's arena planners.
#pragma once

#include <cstdint>
#include <vector>

namespace dlm::passes {

struct ArenaBuffer {
  int64_t first = 0, last = 0; // live range: program positions, both inclusive
  int64_t size = 0;
  int64_t offset = -1; // set by planArena
};

struct ArenaPlan {
  int64_t arenaSize = 0;     // the arena the placed buffers need
  int64_t unplannedSize = 0; // every buffer apart, each aligned: what no planning would take
};

// Sets every buffer's offset (a multiple of `alignment`, which must be positive).
ArenaPlan planArena(std::vector<ArenaBuffer> &buffers, int64_t alignment);

inline int64_t alignTo(int64_t value, int64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

} // namespace dlm::passes
