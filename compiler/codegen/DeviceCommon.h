// Device helpers every generated kernel shares: the counter-based RNG (bit for bit as
// tests/reference/counter_rng.py), warp reductions, bf16/f32 access in fp32 and vector loads.
#pragma once

#include <string_view>

namespace dlm::codegen {

// CUDA C++ text guarded by DLM_DEVICE_COMMON, so several kernels can share a translation unit.
std::string_view deviceCommonSource();

} // namespace dlm::codegen
