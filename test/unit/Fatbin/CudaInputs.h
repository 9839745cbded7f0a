//===- CudaInputs.h - Test inputs compiled with the CUDA toolkit -*- C++
//-*-===//
//
// The fatbin tests read what nvcc, ptxas and fatbinary really produce. The
// inputs are compiled once per process, from the small CUDA sources in
// CudaInputs.cpp, into a temporary directory.
//
//===----------------------------------------------------------------------===//

#ifndef TALLY_TEST_UNIT_FATBIN_CUDAINPUTS_H
#define TALLY_TEST_UNIT_FATBIN_CUDAINPUTS_H

#include "gtest/gtest.h"

#include <string>

namespace tally {
namespace fatbin {
namespace test {

struct CudaInputs {
  /// False if the toolkit is missing; SkipReason says why.
  bool Available = false;
  std::string SkipReason;
  /// Non-empty if compiling the inputs failed: the commands' output.
  std::string BuildError;
  std::string Dir;

  std::string path(const std::string &Name) const { return Dir + "/" + Name; }
  /// Contents of an input file; fails the test if it cannot be read.
  std::string read(const std::string &Name) const;
};

/// Compile the inputs on first use.
const CudaInputs &getCudaInputs();

} // namespace test
} // namespace fatbin
} // namespace tally

/// Skip the test without a CUDA toolkit; fail it if the inputs did not build.
#define REQUIRE_CUDA_INPUTS()                                                  \
  do {                                                                         \
    const auto &Inputs_ = ::tally::fatbin::test::getCudaInputs();              \
    if (!Inputs_.Available)                                                    \
      GTEST_SKIP() << Inputs_.SkipReason;                                      \
    ASSERT_TRUE(Inputs_.BuildError.empty()) << Inputs_.BuildError;             \
  } while (false)

#endif // TALLY_TEST_UNIT_FATBIN_CUDAINPUTS_H
