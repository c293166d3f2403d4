#include "compiler/passes/ArenaPlanner.h"

#include <algorithm>

namespace dlm::passes {

ArenaPlan planArena(std::vector<ArenaBuffer> &buffers, int64_t alignment) {
  std::vector<ArenaBuffer *> order;
  for (ArenaBuffer &buffer : buffers)
    order.push_back(&buffer);
  // Larger first; equal sizes in program order (then in the caller's order), so the plan is
  // deterministic.
  std::sort(order.begin(), order.end(), [](ArenaBuffer *a, ArenaBuffer *b) {
    if (a->size != b->size)
      return a->size > b->size;
    return a->first != b->first ? a->first < b->first : a < b;
  });
  ArenaPlan plan;
  std::vector<ArenaBuffer *> placed;
  for (ArenaBuffer *buffer : order) {
    std::vector<ArenaBuffer *> conflicts;
    for (ArenaBuffer *other : placed)
      if (other->first <= buffer->last && buffer->first <= other->last)
        conflicts.push_back(other);
    std::sort(conflicts.begin(), conflicts.end(),
              [](ArenaBuffer *a, ArenaBuffer *b) { return a->offset < b->offset; });
    int64_t offset = 0;
    for (ArenaBuffer *other : conflicts) {
      if (offset + buffer->size <= other->offset)
        break;
      offset = std::max(offset, alignTo(other->offset + other->size, alignment));
    }
    buffer->offset = offset;
    placed.push_back(buffer);
    plan.arenaSize = std::max(plan.arenaSize, alignTo(offset + buffer->size, alignment));
    plan.unplannedSize += alignTo(buffer->size, alignment);
  }
  return plan;
}

} // namespace dlm::passes
