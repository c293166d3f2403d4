// The cuBLASLt entry points the cuda backend's GEMMs use, in one X-macro list: X(name) for each,
// named as in cublasLt.h. Add an entry here, and only here, to make another function available
// (the emulated cuBLASLt, runtime/cuda/emu/EmuCublasLt.cpp, must then provide it too).
#pragma once

#define DLM_CUBLASLT_SYMBOLS(X)                                                                \
  /* Handle and status names */                                                                \
  X(cublasLtCreate)                                                                            \
  X(cublasLtDestroy)                                                                           \
  X(cublasLtGetStatusName)                                                                     \
  X(cublasLtGetStatusString)                                                                   \
  /* Operation descriptor */                                                                   \
  X(cublasLtMatmulDescCreate)                                                                  \
  X(cublasLtMatmulDescDestroy)                                                                 \
  X(cublasLtMatmulDescSetAttribute)                                                            \
  /* Matrix layouts */                                                                         \
  X(cublasLtMatrixLayoutCreate)                                                                \
  X(cublasLtMatrixLayoutDestroy)                                                               \
  X(cublasLtMatrixLayoutSetAttribute)                                                          \
  /* Algorithm choice */                                                                       \
  X(cublasLtMatmulPreferenceCreate)                                                            \
  X(cublasLtMatmulPreferenceDestroy)                                                           \
  X(cublasLtMatmulPreferenceSetAttribute)                                                      \
  X(cublasLtMatmulAlgoGetHeuristic)                                                            \
  /* The GEMM */                                                                               \
  X(cublasLtMatmul)
