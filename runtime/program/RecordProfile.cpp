#include "runtime/program/RecordProfile.h"

namespace dlm::program {

namespace {

using profile::Category;

Category categoryOf(KernelKind kind) {
  switch (kind) {
  case KernelKind::embedding:
  case KernelKind::softEmbedding:
  case KernelKind::forwardInput:
    return Category::embedding;
  case KernelKind::rmsNorm:
    return Category::rmsnorm;
  case KernelKind::normLinear:
  case KernelKind::linear:
    return Category::gemm;
  case KernelKind::rope:
    return Category::rope;
  case KernelKind::kvStore:
    return Category::kvStore;
  case KernelKind::attention:
    return Category::attention;
  case KernelKind::moe:
    return Category::moe;
  case KernelKind::lmHead:
    return Category::lmHead;
  // Row copies and element-by-element arithmetic.
  case KernelKind::selectInputRows:
  case KernelKind::capture:
  case KernelKind::scale:
  case KernelKind::add:
  case KernelKind::siluMul:
  case KernelKind::geluMul:
    return Category::elementwise;
  }
  return Category::elementwise;
}

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
