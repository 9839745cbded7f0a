// common.h - what the runtime test programs share: checked CUDA calls and
// FNV-1a 64 checksums, printed as exact hex so that a run under libtally.so
// can be compared byte for byte with a plain run.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CHECK(call)                                                            \
  do {                                                                         \
    cudaError_t err_ = (call);                                                 \
    if (err_ != cudaSuccess) {                                                 \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__,       \
                   #call, cudaGetErrorString(err_));                           \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

// Checks a kernel launch: the launch itself, not its completion.
#define CHECK_LAUNCH() CHECK(cudaGetLastError())

inline uint64_t fnv1a(const void *data, size_t bytes,
                      uint64_t h = 0xcbf29ce484222325ull) {
  const unsigned char *p = static_cast<const unsigned char *>(data);
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}
