#include "runtime/program/RecordProfile.h"

#include <iterator>

namespace dlm::program {

namespace {

using profile::Category;

// Each kind's category, in kind order (the table runtime/schema/KernelOps.td writes).
constexpr Category kCategories[] = {
#define DLM_KERNEL_PROFILE_CATEGORIES
#define DLM_KERNEL_HANDLER(kind, category) Category::category,
#include "runtime/schema/KernelRecordSpec.inc"
};
static_assert(std::size(kCategories) == std::size(spec::kernels::kKindContracts));

Category categoryOf(KernelKind kind) { return kCategories[static_cast<size_t>(kind)]; }

} // namespace

RecordProfile recordProfile(const KernelProgram &program, const ProgramRecord &record) {
  RecordProfile profile;
  profile.category = categoryOf(record.kind());
  profile.layer = record.kind() == KernelKind::lmHead ? -1 : record.layer;
  switch (record.kind()) {
  case KernelKind::normLinear:
    profile.normFirst = !record.reusesNorm;
    [[fallthrough]];
  case KernelKind::linear:
    profile.outputs = record.weight()->rows;
    profile.inputs = record.weight()->cols;
    break;
  case KernelKind::lmHead:
    // Only the vocabulary's rows of a padded embedding are logits: the result's width.
    profile.normFirst = record.norm() != nullptr;
    profile.outputs = program.slots[static_cast<size_t>(record.result)].width;
    profile.inputs = program.slots[static_cast<size_t>(record.operands[0])].width;
    break;
  default:
    break;
  }
  return profile;
}

profile::Event recordEvent(const ProgramRecord &record, const RecordProfile &profile, bool norm,
                           int64_t tokens) {
  profile::Event event{};
  event.name = norm ? record.normName.c_str() : record.name.c_str();
  event.category = norm ? Category::rmsnorm : profile.category;
  event.track = profile::TrackKind::thread;
  event.trackId = 0;
  event.layer = profile.layer;
  event.tokens = tokens;
  event.index = -1;
  event.outputs = norm ? -1 : profile.outputs;
  event.inputs = norm ? -1 : profile.inputs;
  return event;
}

} // namespace dlm::program
