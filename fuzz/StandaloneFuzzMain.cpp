//===- StandaloneFuzzMain.cpp - run a fuzz target without libFuzzer -------===//
//
// Feeds each file named on the command line (or each file in a directory) to
// LLVMFuzzerTestOneInput once. Used where libFuzzer is not available, and by
// the tests to replay the seed corpus under the sanitizers.
//
//===----------------------------------------------------------------------===//

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *Data, size_t Size);

static void runFile(const std::filesystem::path &P) {
  std::ifstream In(P, std::ios::binary);
  std::vector<char> Bytes((std::istreambuf_iterator<char>(In)),
                          std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t *>(Bytes.data()),
                         Bytes.size());
}

int main(int argc, char **argv) {
  size_t N = 0;
  for (int I = 1; I < argc; ++I) {
    std::filesystem::path P(argv[I]);
    if (std::filesystem::is_directory(P)) {
      for (const auto &E : std::filesystem::recursive_directory_iterator(P))
        if (E.is_regular_file()) {
          runFile(E.path());
          ++N;
        }
    } else {
      runFile(P);
      ++N;
    }
  }
  std::printf("ran %zu inputs\n", N);
  return 0;
}
