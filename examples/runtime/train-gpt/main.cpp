// main.cpp - the command line of train-gpt:
//   train-gpt [--steps N] [--gradcheck]
// Prints the loss of every step as `step N loss L bits XXXXXXXX` and a
// checksum of the trained parameters; --gradcheck compares the backward
// pass with finite differences instead of training.
#include <cstdio>
#include <cstdlib>
#include <cstring>

int runGpt(int steps, bool gradcheck);

int main(int argc, char **argv) {
  int steps = 50;
  bool gradcheck = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--gradcheck")) {
      gradcheck = true;
    } else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) {
      char *end;
      long n = std::strtol(argv[++i], &end, 10);
      if (*end || n < 1 || n > 100000) {
        std::fprintf(stderr, "train-gpt: bad step count '%s'\n", argv[i]);
        return 1;
      }
      steps = (int)n;
    } else {
      std::fprintf(stderr, "usage: train-gpt [--steps N] [--gradcheck]\n");
      return 1;
    }
  }
  return runGpt(steps, gradcheck);
}
