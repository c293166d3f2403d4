// DLM_ADDRESS_SANITIZER is defined when this translation unit is compiled with AddressSanitizer
// (the checked build: clang's __has_feature, GCC's __SANITIZE_ADDRESS__), for code that must tell
// it something (fiber switches) or that only runs under it (the emulated device's memcheck).
#pragma once

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DLM_ADDRESS_SANITIZER 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(DLM_ADDRESS_SANITIZER)
#define DLM_ADDRESS_SANITIZER 1
#endif
