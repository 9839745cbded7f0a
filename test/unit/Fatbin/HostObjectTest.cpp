//===- HostObjectTest.cpp - Fatbins in objects, executables, libraries ---===//

#include "CudaInputs.h"
#include "TestUtil.h"

#include "tally/Fatbin/HostObject.h"
#include "tally/Fatbin/Listing.h"

#include "llvm/BinaryFormat/ELF.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

using namespace llvm;
using namespace tally::fatbin;
using namespace tally::fatbin::test;

namespace {

class HostObjectTest : public ::testing::Test {
protected:
  static void SetUpTestSuite() { getCudaInputs(); }
  const CudaInputs &inputs() const { return getCudaInputs(); }

  // Section bytes must read and write back unchanged.
  void expectSectionsRoundTrip(StringRef File, const HostFatbins &H) {
    for (const FatbinSection &S : H.Sections) {
      SCOPED_TRACE(S.Name);
      ASSERT_LE(S.FileOffset + S.Size, File.size());
      StringRef Bytes = File.substr(S.FileOffset, S.Size);
      EXPECT_TRUE(writeOrFail(S.Fatbin) == Bytes);
    }
  }

  Expected<HostFatbins> read(const std::string &Bytes) {
    return readHostFatbins(MemoryBufferRef(Bytes, "test"));
  }
};

TEST_F(HostObjectTest, RelocatableObject) {
  REQUIRE_CUDA_INPUTS();
  std::string Bytes = inputs().read("k.o");
  ASSERT_EXPECTED(H, read(Bytes));
  EXPECT_EQ(H.ELFType, ELF::ET_REL);
  EXPECT_EQ(H.Machine, ELF::EM_X86_64);
  ASSERT_EQ(H.Sections.size(), 1u);
  const FatbinSection &S = H.Sections[0];
  EXPECT_EQ(S.Name, ".nv_fatbin");
  EXPECT_EQ(S.Address, 0u);
  EXPECT_EQ(S.Alignment, 8u);
  ASSERT_EQ(S.Fatbin.Containers.size(), 1u);
  EXPECT_EQ(S.Fatbin.Containers[0].Offset, S.FileOffset);
  ASSERT_EQ(S.Fatbin.Containers[0].Entries.size(), 2u);
  EXPECT_EQ(S.Fatbin.Containers[0].Entries[0].archName(), "sm_90");
  EXPECT_EQ(S.Fatbin.Containers[0].Entries[1].archName(), "compute_90");
  EXPECT_EQ(S.Fatbin.Containers[0].Entries[0].Origin->Offset,
            S.FileOffset + 16);

  ASSERT_EQ(H.Wrappers.size(), 1u);
  const FatbinWrapper &W = H.Wrappers[0];
  EXPECT_EQ(W.Version, 1u);
  EXPECT_TRUE(W.PointerFromRelocation);
  EXPECT_EQ(W.FatbinPointer, 0u);
  EXPECT_EQ(W.SectionIndex, std::optional<size_t>(0));
  EXPECT_EQ(W.SectionOffset, 0u);
  EXPECT_EQ(W.ContainerIndex, std::optional<size_t>(0));
  EXPECT_EQ(get32(Bytes, W.FileOffset), WrapperMagic);
  expectSectionsRoundTrip(Bytes, H);

  std::string Listing;
  raw_string_ostream OS(Listing);
  ASSERT_NO_ERROR(printFatbinListing(S.Fatbin, OS));
  EXPECT_NE(Listing.find("kernels: "), std::string::npos);
  EXPECT_NE(Listing.find("_Z6addOnePfi"), std::string::npos);
}

TEST_F(HostObjectTest, RdcObject) {
  REQUIRE_CUDA_INPUTS();
  for (const char *Name : {"l.o", "h.o"}) {
    SCOPED_TRACE(Name);
    std::string Bytes = inputs().read(Name);
    ASSERT_EXPECTED(H, read(Bytes));
    ASSERT_EQ(H.Sections.size(), 1u);
    EXPECT_EQ(H.Sections[0].Name, "__nv_relfatbin");
    EXPECT_EQ(H.findSection(".nv_fatbin"), nullptr);
    ASSERT_EQ(H.Wrappers.size(), 1u);
    EXPECT_EQ(H.Wrappers[0].SectionIndex, std::optional<size_t>(0));
    EXPECT_EQ(H.Wrappers[0].ContainerIndex, std::optional<size_t>(0));
    expectSectionsRoundTrip(Bytes, H);
  }
  // The relocatable cubin of l.o lists k3 as a kernel and the external
  // helper2 not at all; h.o defines helper2 as a device function.
  std::string L = inputs().read("l.o");
  ASSERT_EXPECTED(HL, read(L));
  ASSERT_EXPECTED(InfosL, describeFatbin(HL.Sections[0].Fatbin));
  EXPECT_EQ(InfosL[0].Kernels, std::vector<std::string>{"_Z2k3Pi"});
  EXPECT_TRUE(InfosL[0].DeviceFunctions.empty());
  std::string Hs = inputs().read("h.o");
  ASSERT_EXPECTED(HH, read(Hs));
  ASSERT_EXPECTED(InfosH, describeFatbin(HH.Sections[0].Fatbin));
  EXPECT_TRUE(InfosH[0].Kernels.empty());
  EXPECT_EQ(InfosH[0].DeviceFunctions, std::vector<std::string>{"_Z7helper2i"});
}

TEST_F(HostObjectTest, RdcExecutable) {
  REQUIRE_CUDA_INPUTS();
  std::string Bytes = inputs().read("app_rdc");
  ASSERT_EXPECTED(H, read(Bytes));
  EXPECT_EQ(H.ELFType, ELF::ET_DYN); // PIE
  const FatbinSection *Linked = H.findSection(".nv_fatbin");
  const FatbinSection *Rel = H.findSection("__nv_relfatbin");
  ASSERT_NE(Linked, nullptr);
  ASSERT_NE(Rel, nullptr);
  EXPECT_EQ(Linked->Fatbin.Containers.size(), 1u);
  ASSERT_EQ(Rel->Fatbin.Containers.size(), 3u);
  ASSERT_EQ(H.Wrappers.size(), 4u);
  size_t LinkedIdx = Linked - H.Sections.data();
  size_t RelIdx = Rel - H.Sections.data();
  EXPECT_EQ(H.Wrappers[0].Version, 2u);
  EXPECT_EQ(H.Wrappers[0].SectionIndex, std::optional<size_t>(LinkedIdx));
  EXPECT_EQ(H.Wrappers[0].ContainerIndex, std::optional<size_t>(0));
  EXPECT_NE(H.Wrappers[0].Data, 0u);
  for (size_t I = 1; I < 4; ++I) {
    SCOPED_TRACE("wrapper " + std::to_string(I));
    const FatbinWrapper &W = H.Wrappers[I];
    EXPECT_EQ(W.Version, 1u);
    EXPECT_TRUE(W.PointerFromRelocation);
    EXPECT_EQ(W.SectionIndex, std::optional<size_t>(RelIdx));
    EXPECT_EQ(W.ContainerIndex, std::optional<size_t>(I - 1));
    EXPECT_EQ(W.FatbinPointer, Rel->Address + W.SectionOffset);
  }
  expectSectionsRoundTrip(Bytes, H);

  // The device-linked image holds all three kernels.
  ASSERT_EXPECTED(Infos, describeFatbin(Linked->Fatbin));
  std::vector<std::string> Kernels;
  for (const EntryInfo &I : Infos)
    Kernels.insert(Kernels.end(), I.Kernels.begin(), I.Kernels.end());
  llvm::sort(Kernels);
  EXPECT_EQ(Kernels, (std::vector<std::string>{"_Z2k2Pi", "_Z2k3Pi"}));
}

TEST_F(HostObjectTest, ExecutableAndSharedLibrary) {
  REQUIRE_CUDA_INPUTS();
  for (const char *Name : {"app", "libl2.so"}) {
    SCOPED_TRACE(Name);
    std::string Bytes = inputs().read(Name);
    ASSERT_EXPECTED(H, read(Bytes));
    EXPECT_EQ(H.ELFType, ELF::ET_DYN);
    ASSERT_EQ(H.Sections.size(), 1u);
    const FatbinSection &S = H.Sections[0];
    EXPECT_EQ(S.Name, ".nv_fatbin");
    EXPECT_NE(S.Address, 0u);
    // The device-link output, then the translation unit's fatbin.
    ASSERT_EQ(S.Fatbin.Containers.size(), 2u);
    ASSERT_EQ(H.Wrappers.size(), 2u);
    for (size_t I = 0; I < 2; ++I) {
      const FatbinWrapper &W = H.Wrappers[I];
      EXPECT_EQ(W.Version, I == 0 ? 2u : 1u);
      EXPECT_TRUE(W.PointerFromRelocation);
      EXPECT_EQ(W.SectionIndex, std::optional<size_t>(0));
      EXPECT_EQ(W.ContainerIndex, std::optional<size_t>(I));
    }
    const auto &TU = S.Fatbin.Containers[1].Entries;
    ASSERT_EQ(TU.size(), 2u);
    EXPECT_TRUE(TU[1].isPTX());
    expectSectionsRoundTrip(Bytes, H);
  }
}

TEST_F(HostObjectTest, Errors) {
  auto Expect = [&](const std::string &Bytes, uint64_t Offset,
                    StringRef Message) {
    auto H = readHostFatbins(MemoryBufferRef(Bytes, "x"));
    ASSERT_FALSE(static_cast<bool>(H));
    ErrorParts P = takeError(H);
    EXPECT_EQ(P.Count, 1);
    EXPECT_TRUE(P.IsFormatError) << P.Full;
    EXPECT_EQ(P.Offset, Offset) << P.Full;
    EXPECT_TRUE(StringRef(P.Message).contains(Message))
        << P.Full << "\nexpected: " << Message.str();
  };
  Expect("", 0, "not an ELF file");
  Expect("hello world", 0, "not an ELF file");
  std::string Elf32 = "\x7f"
                      "ELF";
  Elf32 += std::string(60, '\0');
  Elf32[ELF::EI_CLASS] = ELF::ELFCLASS32;
  Elf32[ELF::EI_DATA] = ELF::ELFDATA2LSB;
  Expect(Elf32, 4, "unsupported ELF file: only 64-bit little-endian");

  // This test program has no device code.
  std::string Self = sys::fs::getMainExecutable(nullptr, nullptr);
  auto SelfBuf = MemoryBuffer::getFile(Self);
  ASSERT_TRUE(static_cast<bool>(SelfBuf));
  StringRef SelfBytes = (*SelfBuf)->getBuffer();
  uint64_t ShOff = get64(SelfBytes, 0x28);
  Expect(SelfBytes.str(), ShOff,
         "no fatbin in ELF file: no .nv_fatbin, __nv_relfatbin or "
         ".nvFatBinSegment section");
}

TEST_F(HostObjectTest, CorruptObjects) {
  REQUIRE_CUDA_INPUTS();
  std::string Good = inputs().read("k.o");
  ASSERT_EXPECTED(H, read(Good));
  const FatbinSection &S = H.Sections[0];
  uint64_t WrapperOff = H.Wrappers[0].FileOffset;

  auto ExpectAt = [&](const std::string &Bytes, uint64_t Offset,
                      StringRef Message) {
    auto R = readHostFatbins(MemoryBufferRef(Bytes, "x"));
    ASSERT_FALSE(static_cast<bool>(R));
    ErrorParts P = takeError(R);
    EXPECT_TRUE(P.IsFormatError) << P.Full;
    EXPECT_EQ(P.Offset, Offset) << P.Full;
    EXPECT_TRUE(StringRef(P.Message).contains(Message)) << P.Full;
  };

  // Offsets inside the fatbin are file offsets.
  std::string Bad = Good;
  Bad[S.FileOffset] ^= 1;
  ExpectAt(Bad, S.FileOffset, "bad fatbin magic");
  Bad = Good;
  uint64_t E0 = S.FileOffset + 16;
  put64(Bad, E0 + 8, 1 << 30);
  ExpectAt(Bad, E0,
           "entry payload size 1073741824 extends past end of "
           "fatbin (size ");

  Bad = Good;
  Bad[WrapperOff] ^= 1;
  ExpectAt(Bad, WrapperOff, "bad fatbin wrapper magic");

  // Every truncation is an error, never a crash.
  for (size_t Len = 0; Len < Good.size(); Len += 61) {
    auto R =
        readHostFatbins(MemoryBufferRef(StringRef(Good).take_front(Len), "x"));
    if (R)
      continue;
    ErrorParts P = takeError(R);
    EXPECT_EQ(P.Count, 1);
    EXPECT_TRUE(P.IsFormatError) << P.Full;
  }
}

TEST_F(HostObjectTest, ReplaceInRelocatableObjectGrows) {
  REQUIRE_CUDA_INPUTS();
  std::string Bytes = inputs().read("k.o");
  ASSERT_EXPECTED(H, read(Bytes));
  FatbinFile F = H.Sections[0].Fatbin;
  F.Containers[0].Entries.push_back(FatbinEntry::makeCubin(
      inputs().read("k80.cubin"), 80, Compression::None));
  SmallVector<char, 0> NewFatbin;
  std::vector<uint64_t> Offsets;
  ASSERT_NO_ERROR(writeFatbin(F, NewFatbin, {}, &Offsets));
  ASSERT_GT(NewFatbin.size(), H.Sections[0].Size);

  ASSERT_EXPECTED(NewObj,
                  replaceFatbinSection(
                      MemoryBufferRef(Bytes, "k.o"), ".nv_fatbin",
                      StringRef(NewFatbin.data(), NewFatbin.size()), Offsets));
  ASSERT_EXPECTED(H2, read(NewObj));
  ASSERT_EQ(H2.Sections.size(), 1u);
  EXPECT_EQ(H2.Sections[0].Size, NewFatbin.size());
  ASSERT_EQ(H2.Sections[0].Fatbin.numEntries(), 3u);
  EXPECT_EQ(H2.Sections[0].Fatbin.Containers[0].Entries[2].archName(), "sm_80");
  ASSERT_EQ(H2.Wrappers.size(), 1u);
  EXPECT_TRUE(H2.Wrappers[0].PointerFromRelocation);
  EXPECT_EQ(H2.Wrappers[0].ContainerIndex, std::optional<size_t>(0));

  // The system linker accepts the rewritten object.
  if (ErrorOr<std::string> Ld = sys::findProgramByName("ld")) {
    SmallString<128> In, Out;
    ASSERT_FALSE(sys::fs::createTemporaryFile("k-new", "o", In));
    ASSERT_FALSE(sys::fs::createTemporaryFile("k-linked", "o", Out));
    {
      std::error_code EC;
      raw_fd_ostream OS(In, EC);
      ASSERT_FALSE(EC);
      OS << NewObj;
    }
    StringRef Args[] = {*Ld, "-r", In, "-o", Out};
    std::string ErrMsg;
    int RC = sys::ExecuteAndWait(*Ld, Args, std::nullopt, {}, 0, 0, &ErrMsg);
    EXPECT_EQ(RC, 0) << ErrMsg;
    auto Linked = MemoryBuffer::getFile(Out);
    ASSERT_TRUE(static_cast<bool>(Linked));
    ASSERT_EXPECTED(H3, readHostFatbins((*Linked)->getMemBufferRef()));
    ASSERT_EQ(H3.Sections.size(), 1u);
    EXPECT_EQ(H3.Sections[0].Fatbin.numEntries(), 3u);
    EXPECT_EQ(H3.Wrappers[0].ContainerIndex, std::optional<size_t>(0));
    sys::fs::remove(In);
    sys::fs::remove(Out);
  }
}

TEST_F(HostObjectTest, ReplaceInPlaceInExecutable) {
  REQUIRE_CUDA_INPUTS();
  std::string Bytes = inputs().read("app");
  ASSERT_EXPECTED(H, read(Bytes));
  const FatbinSection &S = H.Sections[0];

  // Shrinking the last container keeps both wrapper targets.
  FatbinFile F = S.Fatbin;
  for (FatbinEntry &E : F.Containers[1].Entries)
    E.setCompression(Compression::Zstd);
  SmallVector<char, 0> NewFatbin;
  std::vector<uint64_t> Offsets;
  ASSERT_NO_ERROR(writeFatbin(F, NewFatbin, {}, &Offsets));
  ASSERT_LT(NewFatbin.size(), S.Size);
  StringRef NewBytes(NewFatbin.data(), NewFatbin.size());
  ASSERT_EXPECTED(NewApp,
                  replaceFatbinSection(MemoryBufferRef(Bytes, "app"),
                                       ".nv_fatbin", NewBytes, Offsets));
  EXPECT_EQ(NewApp.size(), Bytes.size());
  ASSERT_EXPECTED(H2, read(NewApp));
  const FatbinSection &S2 = H2.Sections[0];
  EXPECT_EQ(S2.Fatbin.Trailing.size(), S.Size - NewFatbin.size());
  for (const FatbinEntry &E : S2.Fatbin.Containers[1].Entries)
    EXPECT_EQ(E.compression(), Compression::Zstd);
  EXPECT_EQ(H2.Wrappers[1].ContainerIndex, std::optional<size_t>(1));

  // Shrinking the first container would move the second one, which a
  // wrapper points to.
  F = S.Fatbin;
  for (FatbinEntry &E : F.Containers[0].Entries)
    E.setCompression(Compression::Zstd);
  NewFatbin.clear();
  Offsets.clear();
  ASSERT_NO_ERROR(writeFatbin(F, NewFatbin, {}, &Offsets));
  auto Moved = replaceFatbinSection(
      MemoryBufferRef(Bytes, "app"), ".nv_fatbin",
      StringRef(NewFatbin.data(), NewFatbin.size()), Offsets);
  ASSERT_FALSE(static_cast<bool>(Moved));
  ErrorParts P = takeError(Moved);
  EXPECT_EQ(P.Offset, H.Wrappers[1].FileOffset);
  EXPECT_TRUE(StringRef(P.Message).contains("where the new contents start "
                                            "no container"))
      << P.Full;

  // Growing a linked file is refused.
  std::string Bigger(S.Size + 8, '\0');
  auto Grown =
      replaceFatbinSection(MemoryBufferRef(Bytes, "app"), ".nv_fatbin", Bigger,
                           {0, S.Fatbin.Containers[1].Offset - S.FileOffset});
  ASSERT_FALSE(static_cast<bool>(Grown));
  EXPECT_TRUE(StringRef(takeError(Grown).Message)
                  .contains("growing a section of a linked file is not "
                            "supported"));
}

// Shrinking a container that is not the last one: updateFatbinSection pads
// it to its old size so the containers after it stay put. (The runtime
// accepts the extra padding: checked on an H200 with driver 580.)
TEST_F(HostObjectTest, UpdateSectionPadsShrunkContainers) {
  REQUIRE_CUDA_INPUTS();
  std::string Bytes = inputs().read("app");
  ASSERT_EXPECTED(H, read(Bytes));
  const FatbinSection &S = H.Sections[0];
  FatbinFile F = S.Fatbin;
  for (FatbinEntry &E : F.Containers[0].Entries)
    E.setCompression(Compression::Zstd);
  ASSERT_EXPECTED(NewApp, updateFatbinSection(MemoryBufferRef(Bytes, "app"),
                                              ".nv_fatbin", F));
  ASSERT_EQ(NewApp.size(), Bytes.size());
  ASSERT_EXPECTED(H2, read(NewApp));
  const FatbinSection &S2 = H2.Sections[0];
  ASSERT_EQ(S2.Fatbin.Containers.size(), 2u);
  EXPECT_EQ(S2.Fatbin.Containers[1].Offset, S.Fatbin.Containers[1].Offset);
  EXPECT_EQ(H2.Wrappers[0].ContainerIndex, std::optional<size_t>(0));
  EXPECT_EQ(H2.Wrappers[1].ContainerIndex, std::optional<size_t>(1));
  const FatbinEntry &E = S2.Fatbin.Containers[0].Entries.back();
  EXPECT_EQ(E.compression(), Compression::Zstd);
  EXPECT_EQ(E.Payload, S.Fatbin.Containers[0].Entries.back().Payload);
  EXPECT_GT(E.Origin->StoredPayload.size(),
            alignTo(E.Origin->CompressedSize, 8));
  // The second container is byte for byte the old one.
  uint64_t C1 = S.Fatbin.Containers[1].Offset;
  EXPECT_EQ(StringRef(NewApp).substr(C1, S.FileOffset + S.Size - C1),
            StringRef(Bytes).substr(C1, S.FileOffset + S.Size - C1));

  // A grown first container cannot be placed.
  F = S.Fatbin;
  F.Containers[0].Entries.push_back(
      FatbinEntry::makePTX(".version 9.0\n", 90, 9, 0, Compression::None));
  auto Grown =
      updateFatbinSection(MemoryBufferRef(Bytes, "app"), ".nv_fatbin", F);
  ASSERT_FALSE(static_cast<bool>(Grown));
  EXPECT_TRUE(StringRef(takeError(Grown).Full)
                  .starts_with("container 0 of .nv_fatbin grows from "));

  // A relocatable object grows through objcopy.
  std::string Obj = inputs().read("k.o");
  ASSERT_EXPECTED(HO, read(Obj));
  FatbinFile FO = HO.Sections[0].Fatbin;
  FO.Containers[0].Entries.push_back(
      FatbinEntry::makeCubin(inputs().read("k80.cubin"), 80));
  ASSERT_EXPECTED(NewObj, updateFatbinSection(MemoryBufferRef(Obj, "k.o"),
                                              ".nv_fatbin", FO));
  ASSERT_EXPECTED(HO2, read(NewObj));
  EXPECT_EQ(HO2.Sections[0].Fatbin.numEntries(), 3u);
  EXPECT_EQ(HO2.Wrappers[0].ContainerIndex, std::optional<size_t>(0));
}

} // namespace
