// Builds a hot loop for several x86-64 levels and picks one at load time by cpuid, so that the
// CPU backend uses AVX-512 / AVX2 where the machine has it without the build probing the build
// machine or raising the baseline for the whole project (STYLE.md).
#pragma once

#if defined(__x86_64__) && defined(__clang__) && !defined(DLM_NO_TARGET_CLONES)
#define DLM_VECTOR_CLONES                                                                          \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DLM_VECTOR_CLONES
#endif
