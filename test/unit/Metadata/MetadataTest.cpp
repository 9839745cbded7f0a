//===- MetadataTest.cpp - the metadata schema, written and read back ------===//

#include "tally/Metadata/Metadata.h"

#include "llvm/Support/Error.h"

#include "gtest/gtest.h"

using namespace tally;

namespace {

Metadata sample() {
  Metadata M;
  KernelRecord &K = M.getOrAddKernel("stride");
  K.ReadsGridSize = true;
  K.Notes.push_back("reads %nctaid: grid-stride or persistent loop");
  K.OriginalRes.push_back({"sm_90a", 12, 0, 0, 0, 0, 1024});
  VariantRecord P;
  P.Kind = "ptb";
  P.Name = "stride__tally_ptb";
  P.OriginalParamBytes = 12;
  P.ParamBytes = 40;
  P.BarrierId = 1;
  P.ExtraParams.push_back({"__tly_ctrl", "u64", 16, 8, "control"});
  P.ExtraParams.push_back({"__tly_chunk", "u32", 36, 4, "chunk"});
  P.Res.push_back({"sm_90a", 16, 32, 0, 0, 0, 1024});
  K.Variants.push_back(P);
  K.Reason = "slice: the variant spills (8 bytes at 255 registers, the original uses 255)";
  KernelRecord &R = M.getOrAddKernel("grid_sync");
  R.Reason = "slice: grid-wide synchronisation; ptb: grid-wide synchronisation";
  M.finalize();
  return M;
}

TEST(Metadata, RoundTrip) {
  Metadata M = sample();
  std::string Text = M.toYAML();
  auto Back = Metadata::fromYAML(Text);
  ASSERT_TRUE(bool(Back)) << llvm::toString(Back.takeError());
  EXPECT_EQ(Back->toYAML(), Text);
  const KernelRecord *K = Back->findKernel("stride");
  ASSERT_NE(K, nullptr);
  EXPECT_TRUE(K->ReadsGridSize);
  EXPECT_EQ(K->Status, "partial");
  ASSERT_EQ(K->Variants.size(), 1u);
  EXPECT_EQ(K->Variants[0].BarrierId, 1u);
  EXPECT_EQ(K->Variants[0].ExtraParams[0].Role, "control");
  EXPECT_EQ(K->Variants[0].ExtraParams[1].Offset, 36u);
  EXPECT_EQ(K->Variants[0].Res[0].SharedBytes, 32u);
  const KernelRecord *R = Back->findKernel("grid_sync");
  ASSERT_NE(R, nullptr);
  EXPECT_FALSE(R->ReadsGridSize);
  EXPECT_EQ(R->Status, "rejected");
  // The flag is written only when set.
  EXPECT_EQ(Text.find("reads_grid_size"), Text.rfind("reads_grid_size"));
}

std::string errorOf(const std::string &Text) {
  auto M = Metadata::fromYAML(Text);
  if (M)
    return "";
  return llvm::toString(M.takeError());
}

TEST(Metadata, SchemaErrorsNameLineAndColumn) {
  EXPECT_EQ(errorOf("tally_metadata_version: 2\nkernels: []\n"),
            "metadata:1:1: unsupported metadata version 2");
  EXPECT_EQ(errorOf("tally_metadata_version: 1\nkernels:\n  - status: transformed\n"),
            "metadata:3:5: missing 'name'");
  EXPECT_EQ(errorOf("tally_metadata_version: 1\nkernels:\n  - name: k\n    status: partial\n"
                    "    reads_grid_size: maybe\n"),
            "metadata:5:22: 'reads_grid_size' must be true or false");
  EXPECT_EQ(errorOf("tally_metadata_version: 1\nkernels: {}\n"),
            "metadata:2:10: 'kernels' must be a list");
  EXPECT_EQ(errorOf("tally_metadata_version: 1\n"), "metadata:1:1: missing 'kernels'");
  EXPECT_NE(errorOf("tally_metadata_version: 1\nkernels: [\n"), "");
}

} // namespace
