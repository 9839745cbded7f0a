// dlopen-main.cpp - loads a CUDA library with dlopen() and runs its kernels:
//   dlopen-main /path/to/libkern.so
// Links no CUDA runtime itself: every CUDA call happens inside the library.
// It loads the library, runs it, closes it, then does all of that again
// (so a module is registered, unloaded and registered anew in one process),
// and prints the checksums of both rounds.
#include <cstdint>
#include <cstdio>
#include <dlfcn.h>

using KernRun = int (*)(int, uint32_t, uint64_t *);

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: dlopen-main <libkern.so>\n");
    return 1;
  }
  uint64_t first[2] = {0, 0};
  for (int round = 0; round < 2; ++round) {
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      std::fprintf(stderr, "dlopen-main: %s\n", dlerror());
      return 1;
    }
    auto run = reinterpret_cast<KernRun>(dlsym(lib, "kern_run"));
    if (!run) {
      std::fprintf(stderr, "dlopen-main: %s\n", dlerror());
      return 1;
    }
    uint64_t h[2];
    if (run(1 << 22, 12345u, h) != 0)
      return 1;
    std::printf("round %d smooth %016llx histogram %016llx\n", round,
                (unsigned long long)h[0], (unsigned long long)h[1]);
    if (round == 0) {
      first[0] = h[0];
      first[1] = h[1];
    } else if (h[0] != first[0] || h[1] != first[1]) {
      std::printf("rounds differ\n");
      return 1;
    }
    if (dlclose(lib) != 0) {
      std::fprintf(stderr, "dlopen-main: %s\n", dlerror());
      return 1;
    }
  }
  std::printf("rounds agree\n");
  return 0;
}
