// The moe record's kernels: routing, the per-expert token lists, the grouped expert products
// (gate_up, then down) and the weighted sum (MoeRoute.cpp, MoePlan.cpp, MoeExperts.cpp,
// MoeCombine.cpp), specialised on the shapes of its weights.
#include "compiler/codegen/RecordKernels.h"

namespace dlm::codegen {

Status RecordKernels::moe() {
  const auto &p = as<kp::MoeParams>();
  MoeParams moe;
  moe.element = element;
  moe.experts = p.experts;
  moe.topK = p.topK;
  moe.routerNorm = p.routerNorm;
  moe.sigmoidScores = p.sigmoidScores;
  moe.groups = p.groups;
  moe.topGroups = p.topGroups;
  moe.normalizeTopK = p.normalizeTopK;
  moe.activation =
      p.activation == kp::MoeActivation::geluTanh ? Activation::geluTanh : Activation::silu;
  DLM_ASSIGN_OR_RETURN(std::vector<int64_t> router, shapeOf(p.router));
  DLM_ASSIGN_OR_RETURN(std::vector<int64_t> gateUp, shapeOf(p.gateUp));
  if (router.size() != 2 || gateUp.size() != 3 || gateUp[1] % 2 != 0)
    return r.error("moe weights of unexpected ranks (router [E, H], gate_up [E, 2I, H])");
  moe.hidden = router[1];
  moe.expertWidth = gateUp[1] / 2;
  launched.push_back(generateMoeRoute(moe));
  launched.push_back(generateMoePlan(moe));
  launched.push_back(generateMoeExperts(moe, true));
  launched.push_back(generateMoeExperts(moe, false));
  launched.push_back(generateMoeCombine(moe));
  return Status::ok();
}

} // namespace dlm::codegen
