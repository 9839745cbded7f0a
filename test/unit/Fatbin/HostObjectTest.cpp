//===- HostObjectTest.cpp - Fatbins in objects, executables, libraries ---===//

#include "CudaInputs.h"
#include "TestUtil.h"

#include "tally/Fatbin/HostObject.h"
#include "tally/Fatbin/Listing.h"

#include "llvm/BinaryFormat/ELF.h"
#include "llvm/Object/ELF.h"
#include "llvm/Object/ObjectFile.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cstring>

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

  // Growing a linked file appends the new contents (see GrowLinkedFiles);
  // wrappers keep their section offsets.
  F = S.Fatbin;
  F.Containers[1].Entries.back().ExtraPadding = 64;
  NewFatbin.clear();
  Offsets.clear();
  ASSERT_NO_ERROR(writeFatbin(F, NewFatbin, {}, &Offsets));
  ASSERT_GT(NewFatbin.size(), S.Size);
  auto Grown = replaceFatbinSection(
      MemoryBufferRef(Bytes, "app"), ".nv_fatbin",
      StringRef(NewFatbin.data(), NewFatbin.size()), Offsets);
  ASSERT_TRUE(static_cast<bool>(Grown)) << toString(Grown.takeError());
  ASSERT_EXPECTED(H3, read(*Grown));
  EXPECT_EQ(H3.Sections[0].Size, NewFatbin.size());
  EXPECT_GE(H3.Sections[0].FileOffset, Bytes.size());
  EXPECT_EQ(H3.Wrappers[0].ContainerIndex, std::optional<size_t>(0));
  EXPECT_EQ(H3.Wrappers[1].ContainerIndex, std::optional<size_t>(1));
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

  // A grown first container cannot stay in place: the section moves to the
  // end of the file and the second wrapper follows its container.
  F = S.Fatbin;
  F.Containers[0].Entries.push_back(
      FatbinEntry::makePTX(".version 9.0\n", 90, 9, 0, Compression::None));
  ASSERT_EXPECTED(Grown, updateFatbinSection(MemoryBufferRef(Bytes, "app"),
                                             ".nv_fatbin", F));
  ASSERT_EXPECTED(H3, read(Grown));
  const FatbinSection &S3 = H3.Sections[0];
  EXPECT_GE(S3.FileOffset, Bytes.size());
  ASSERT_EQ(S3.Fatbin.Containers.size(), 2u);
  EXPECT_EQ(S3.Fatbin.Containers[0].Entries.size(),
            S.Fatbin.Containers[0].Entries.size() + 1);
  EXPECT_EQ(H3.Wrappers[0].ContainerIndex, std::optional<size_t>(0));
  EXPECT_EQ(H3.Wrappers[1].ContainerIndex, std::optional<size_t>(1));

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

// Growing the fatbin of linked files: PIE and non-PIE executables and a
// shared library. The new contents are appended at the end of the file and
// mapped by a PT_NOTE program header turned into a PT_LOAD.
struct RunResult {
  int Status = -1;
  std::string Output;
};

static RunResult runProgram(StringRef Program, ArrayRef<StringRef> Args) {
  RunResult R;
  SmallString<128> OutFile;
  if (sys::fs::createTemporaryFile("tally-run", "txt", OutFile))
    return R;
  std::optional<StringRef> Redirects[] = {std::nullopt, StringRef(OutFile),
                                          StringRef(OutFile)};
  std::vector<StringRef> Argv = {Program};
  Argv.insert(Argv.end(), Args.begin(), Args.end());
  std::string ErrMsg;
  R.Status = sys::ExecuteAndWait(Program, Argv, std::nullopt, Redirects, 60, 0,
                                 &ErrMsg);
  if (auto Buf = MemoryBuffer::getFile(OutFile))
    R.Output = (*Buf)->getBuffer().str();
  R.Output += ErrMsg;
  sys::fs::remove(OutFile);
  return R;
}

static std::string writeTemp(StringRef Prefix, StringRef Suffix,
                             StringRef Bytes) {
  SmallString<128> Path;
  if (sys::fs::createTemporaryFile(Prefix, Suffix, Path))
    return std::string();
  std::error_code EC;
  {
    raw_fd_ostream OS(Path, EC);
    OS << Bytes;
  }
  sys::fs::setPermissions(Path, sys::fs::perms(0755));
  return Path.str().str();
}

static std::optional<std::string> findReadelf() {
  if (sys::fs::can_execute("/usr/lib/llvm-22/bin/llvm-readelf"))
    return std::string("/usr/lib/llvm-22/bin/llvm-readelf");
  if (ErrorOr<std::string> P = sys::findProgramByName("llvm-readelf"))
    return *P;
  return std::nullopt;
}

class GrowLinkedTest : public HostObjectTest,
                       public ::testing::WithParamInterface<const char *> {};

TEST_P(GrowLinkedTest, AppendsAndRepoints) {
  REQUIRE_CUDA_INPUTS();
  using ELFT = object::ELF64LE;
  std::string Name = GetParam();
  bool IsLib = StringRef(Name).ends_with(".so");
  bool IsPIE = Name != "probe_nopie";
  std::string Bytes = inputs().read(Name);
  ASSERT_EXPECTED(H, read(Bytes));
  EXPECT_EQ(H.ELFType, IsPIE ? ELF::ET_DYN : ELF::ET_EXEC);
  const FatbinSection &S = H.Sections[0];
  ASSERT_EQ(S.Name, ".nv_fatbin");
  ASSERT_EQ(S.Fatbin.Containers.size(), 2u);
  ASSERT_EQ(H.Wrappers.size(), 2u);
  for (const FatbinWrapper &W : H.Wrappers) {
    EXPECT_EQ(W.PointerFromRelocation, IsPIE);
    EXPECT_EQ(W.PointerRelocationOffset.has_value(), IsPIE);
  }

  // Container 0 (the device-link output) gets a PTX entry, so container 1
  // moves; container 1 gets 8 KB of padding: the section grows by more than
  // two pages.
  FatbinFile F = S.Fatbin;
  const FatbinEntry *PTX = nullptr;
  for (const FatbinEntry &E : F.Containers[1].Entries)
    if (E.isPTX())
      PTX = &E;
  ASSERT_NE(PTX, nullptr);
  FatbinEntry NewPTX = *PTX;
  NewPTX.setCompression(Compression::None);
  F.Containers[0].Entries.push_back(NewPTX);
  F.Containers[1].Entries.back().ExtraPadding = 8192;
  ASSERT_EXPECTED(
      New, updateFatbinSection(MemoryBufferRef(Bytes, Name), ".nv_fatbin", F));
  ASSERT_GT(New.size(), Bytes.size() + 0x2000);

  // The new fatbin is found through the section header and the wrappers.
  ASSERT_EXPECTED(H2, read(New));
  ASSERT_EQ(H2.Sections.size(), 1u);
  const FatbinSection &S2 = H2.Sections[0];
  EXPECT_GT(S2.Size, S.Size + 0x1000);
  EXPECT_EQ(S2.FileOffset % 0x1000, 0u);
  EXPECT_GE(S2.FileOffset, Bytes.size());
  EXPECT_EQ(S2.FileOffset + S2.Size, New.size());
  EXPECT_EQ(S2.Address % 0x1000, S2.FileOffset % 0x1000);
  EXPECT_EQ(S2.Alignment, S.Alignment);
  ASSERT_EQ(S2.Fatbin.Containers.size(), 2u);
  EXPECT_EQ(S2.Fatbin.Containers[0].Entries.size(),
            S.Fatbin.Containers[0].Entries.size() + 1);
  EXPECT_TRUE(S2.Fatbin.Containers[0].Entries.back().isPTX());
  EXPECT_EQ(S2.Fatbin.Containers[1].Entries.back().Payload,
            S.Fatbin.Containers[1].Entries.back().Payload);
  expectSectionsRoundTrip(New, H2);
  ASSERT_EQ(H2.Wrappers.size(), 2u);
  for (size_t I = 0; I < 2; ++I) {
    SCOPED_TRACE("wrapper " + std::to_string(I));
    const FatbinWrapper &W = H2.Wrappers[I];
    EXPECT_EQ(W.FileOffset, H.Wrappers[I].FileOffset);
    EXPECT_EQ(W.ContainerIndex, std::optional<size_t>(I));
    EXPECT_EQ(W.FatbinPointer,
              S2.Address + S2.Fatbin.Containers[I].Offset - S2.FileOffset);
    EXPECT_EQ(W.Data, H.Wrappers[I].Data);
    // The value in the file is the address too (GNU ld writes it in place
    // under the RELATIVE relocation as well).
    EXPECT_EQ(get64(New, W.FileOffset + 8), W.FatbinPointer);
    if (IsPIE) {
      EXPECT_EQ(W.PointerRelocationOffset,
                H.Wrappers[I].PointerRelocationOffset);
    }
  }

  // LLVM's ELF reader: a new read-only PT_LOAD maps the section, above
  // every other segment, and the PT_LOADs stay sorted.
  auto Obj = object::ObjectFile::createObjectFile(MemoryBufferRef(New, Name));
  ASSERT_TRUE(static_cast<bool>(Obj)) << toString(Obj.takeError());
  auto File = object::ELFFile<ELFT>::create(New);
  ASSERT_TRUE(static_cast<bool>(File)) << toString(File.takeError());
  auto OldFile = object::ELFFile<ELFT>::create(Bytes);
  ASSERT_TRUE(static_cast<bool>(OldFile));
  auto Phdrs = File->program_headers();
  auto OldPhdrs = OldFile->program_headers();
  ASSERT_TRUE(static_cast<bool>(Phdrs) && static_cast<bool>(OldPhdrs));
  ASSERT_EQ(Phdrs->size(), OldPhdrs->size());
  size_t Notes = 0, OldNotes = 0, Loads = 0, OldLoads = 0;
  uint64_t PrevLoad = 0, MaxOldEnd = 0;
  const ELFT::Phdr *NewLoad = nullptr;
  for (const ELFT::Phdr &P : *OldPhdrs) {
    OldNotes += P.p_type == ELF::PT_NOTE;
    OldLoads += P.p_type == ELF::PT_LOAD;
    MaxOldEnd = std::max<uint64_t>(MaxOldEnd, P.p_vaddr + P.p_memsz);
  }
  for (const ELFT::Phdr &P : *Phdrs) {
    Notes += P.p_type == ELF::PT_NOTE;
    if (P.p_type != ELF::PT_LOAD)
      continue;
    ++Loads;
    EXPECT_GE(uint64_t(P.p_vaddr), PrevLoad);
    PrevLoad = P.p_vaddr + P.p_memsz;
    if (P.p_offset == S2.FileOffset)
      NewLoad = &P;
  }
  EXPECT_EQ(Notes + 1, OldNotes);
  EXPECT_EQ(Loads, OldLoads + 1);
  ASSERT_NE(NewLoad, nullptr);
  EXPECT_EQ(uint64_t(NewLoad->p_vaddr), S2.Address);
  EXPECT_EQ(uint64_t(NewLoad->p_filesz), S2.Size);
  EXPECT_EQ(uint64_t(NewLoad->p_memsz), S2.Size);
  EXPECT_EQ(uint32_t(NewLoad->p_flags), uint32_t(ELF::PF_R));
  EXPECT_GE(S2.Address, alignTo(MaxOldEnd, 0x1000));
  EXPECT_EQ(NewLoad->p_vaddr % NewLoad->p_align,
            NewLoad->p_offset % NewLoad->p_align);

  // Everything else is byte-identical: the changes are the program header
  // table, the section header, the wrappers' pointers, their relocations'
  // addends and the values of symbols in the section.
  std::vector<std::pair<uint64_t, uint64_t>> Allowed = {
      {File->getHeader().e_phoff,
       File->getHeader().e_phnum * sizeof(ELFT::Phdr)},
      {File->getHeader().e_shoff + S.Index * sizeof(ELFT::Shdr),
       sizeof(ELFT::Shdr)}};
  for (const FatbinWrapper &W : H.Wrappers) {
    Allowed.push_back({W.FileOffset + 8, 8});
    if (W.PointerRelocationOffset)
      Allowed.push_back({*W.PointerRelocationOffset + 16, 8});
  }
  auto Sections = OldFile->sections();
  ASSERT_TRUE(static_cast<bool>(Sections));
  size_t MovedSymbols = 0;
  for (const ELFT::Shdr &Sec : *Sections) {
    if (Sec.sh_type != ELF::SHT_SYMTAB && Sec.sh_type != ELF::SHT_DYNSYM)
      continue;
    auto Syms = OldFile->symbols(&Sec);
    ASSERT_TRUE(static_cast<bool>(Syms));
    for (size_t I = 0; I < Syms->size(); ++I)
      if ((*Syms)[I].st_shndx == S.Index) {
        Allowed.push_back({Sec.sh_offset + I * sizeof(ELFT::Sym) + 8, 8});
        uint64_t V = (*Syms)[I].st_value;
        uint64_t NewV = get64(New, Sec.sh_offset + I * sizeof(ELFT::Sym) + 8);
        // `fatbinData` labels a container start; it moves with it.
        for (size_t C = 0; C < 2; ++C)
          if (V - S.Address == S.Fatbin.Containers[C].Offset - S.FileOffset) {
            EXPECT_EQ(NewV - S2.Address,
                      S2.Fatbin.Containers[C].Offset - S2.FileOffset);
            ++MovedSymbols;
          }
      }
  }
  if (!IsLib) { // nvcc leaves local `fatbinData` symbols in the executables
    EXPECT_GT(MovedSymbols, 0u);
  }
  size_t Changed = 0;
  for (uint64_t Off = 0; Off < Bytes.size(); ++Off) {
    if (Bytes[Off] == New[Off])
      continue;
    bool Ok = any_of(Allowed, [&](const std::pair<uint64_t, uint64_t> &A) {
      return Off >= A.first && Off - A.first < A.second;
    });
    EXPECT_TRUE(Ok) << "unexpected change at offset " << Off;
    if (!Ok && ++Changed > 5)
      break;
  }
  for (uint64_t Off = Bytes.size(); Off < S2.FileOffset; ++Off)
    ASSERT_EQ(New[Off], '\0') << Off;

  std::string NewPath = writeTemp(Name + "-grown", IsLib ? "so" : "", New);
  ASSERT_FALSE(NewPath.empty());

  // llvm-readelf agrees and does not warn.
  if (std::optional<std::string> Readelf = findReadelf()) {
    RunResult R = runProgram(*Readelf, {"-lS", NewPath});
    EXPECT_EQ(R.Status, 0) << R.Output;
    EXPECT_FALSE(StringRef(R.Output).contains("warning")) << R.Output;
    std::string LoadLine =
        formatv("LOAD           {0:x6} {1:x16}", S2.FileOffset, S2.Address)
            .str();
    EXPECT_TRUE(StringRef(R.Output).contains(LoadLine)) << LoadLine << "\n"
                                                        << R.Output;
  }

  // The loader maps it and cudart registers the fatbin before main.
  if (IsLib) {
    RunResult R = runProgram(inputs().path("dlopen_host"), {NewPath});
    EXPECT_EQ(R.Status, 0) << R.Output;
    EXPECT_TRUE(StringRef(R.Output).starts_with("ok")) << R.Output;
  } else {
    RunResult Before = runProgram(inputs().path(Name), {});
    RunResult R = runProgram(NewPath, {});
    EXPECT_EQ(R.Status, 0) << R.Output;
    EXPECT_TRUE(StringRef(R.Output).starts_with("ok")) << R.Output;
    EXPECT_EQ(R.Output, Before.Output);
  }
  if (!std::getenv("TALLY_KEEP_TEST_DIR"))
    sys::fs::remove(NewPath);

  // Growing it again reuses the new segment (the shared library has no
  // second PT_NOTE): the file ends with the section, the PT_LOAD follows.
  FatbinFile F2 = S2.Fatbin;
  // (The reader counts the padding it finds in the stored payload.)
  F2.Containers[1].Entries.back().ExtraPadding = 8192 + 4096;
  ASSERT_EXPECTED(
      New2, updateFatbinSection(MemoryBufferRef(New, Name), ".nv_fatbin", F2));
  ASSERT_EXPECTED(H3, read(New2));
  const FatbinSection &S3 = H3.Sections[0];
  EXPECT_EQ(S3.FileOffset, S2.FileOffset);
  EXPECT_EQ(S3.Address, S2.Address);
  EXPECT_EQ(S3.Size, S2.Size + 4096);
  EXPECT_EQ(New2.size(), S3.FileOffset + S3.Size);
  // Before the section only the PT_LOAD's and the section's sizes change.
  uint64_t PhBegin = File->getHeader().e_phoff,
           PhEnd = PhBegin + Phdrs->size() * sizeof(ELFT::Phdr);
  uint64_t ShBegin = File->getHeader().e_shoff + S.Index * sizeof(ELFT::Shdr);
  for (uint64_t Off = 0; Off < S2.FileOffset; ++Off)
    if (New[Off] != New2[Off]) {
      ASSERT_TRUE((Off >= PhBegin && Off < PhEnd) ||
                  (Off >= ShBegin && Off < ShBegin + sizeof(ELFT::Shdr)))
          << Off;
    }
  for (size_t I = 0; I < 2; ++I)
    EXPECT_EQ(H3.Wrappers[I].ContainerIndex, std::optional<size_t>(I));
  auto File3 = object::ELFFile<ELFT>::create(New2);
  ASSERT_TRUE(static_cast<bool>(File3));
  auto Phdrs3 = File3->program_headers();
  ASSERT_TRUE(static_cast<bool>(Phdrs3));
  size_t Loads3 = 0;
  for (const ELFT::Phdr &P : *Phdrs3)
    if (P.p_type == ELF::PT_LOAD) {
      ++Loads3;
      if (P.p_offset == S3.FileOffset) {
        EXPECT_EQ(uint64_t(P.p_filesz), S3.Size);
      }
    }
  EXPECT_EQ(Loads3, Loads);
  std::string NewPath2 = writeTemp(Name + "-grown2", IsLib ? "so" : "", New2);
  RunResult R2 = IsLib ? runProgram(inputs().path("dlopen_host"), {NewPath2})
                       : runProgram(NewPath2, {});
  EXPECT_EQ(R2.Status, 0) << R2.Output;
  EXPECT_TRUE(StringRef(R2.Output).starts_with("ok")) << R2.Output;
  sys::fs::remove(NewPath2);
}

INSTANTIATE_TEST_SUITE_P(HostObject, GrowLinkedTest,
                         ::testing::Values("probe_pie", "probe_nopie",
                                           "libl2.so"),
                         [](const ::testing::TestParamInfo<const char *> &I) {
                           std::string N = I.param;
                           for (char &C : N)
                             if (!isalnum(static_cast<unsigned char>(C)))
                               C = '_';
                           return N;
                         });

// A PT_NOTE before the PT_LOADs: the new PT_LOAD is moved after the last one
// so that the PT_LOADs stay sorted by address, and the program still runs.
TEST_F(HostObjectTest, GrowLinkedFileNoteBeforeLoads) {
  REQUIRE_CUDA_INPUTS();
  using ELFT = object::ELF64LE;
  std::string Bytes = inputs().read("probe_pie");
  auto File = object::ELFFile<ELFT>::create(Bytes);
  ASSERT_TRUE(static_cast<bool>(File));
  uint64_t PhOff = File->getHeader().e_phoff;
  auto Phdrs = File->program_headers();
  ASSERT_TRUE(static_cast<bool>(Phdrs));
  std::vector<ELFT::Phdr> Table(Phdrs->begin(), Phdrs->end());
  // Keep PT_PHDR and PT_INTERP first; move every PT_NOTE right after them.
  std::stable_partition(Table.begin(), Table.end(), [](const ELFT::Phdr &P) {
    return P.p_type == ELF::PT_PHDR || P.p_type == ELF::PT_INTERP;
  });
  auto FirstOther = std::find_if(Table.begin(), Table.end(), [](auto &P) {
    return P.p_type != ELF::PT_PHDR && P.p_type != ELF::PT_INTERP;
  });
  std::stable_partition(FirstOther, Table.end(), [](const ELFT::Phdr &P) {
    return P.p_type == ELF::PT_NOTE;
  });
  ASSERT_EQ(FirstOther->p_type, ELF::PT_NOTE);
  std::memcpy(&Bytes[PhOff], Table.data(), Table.size() * sizeof(ELFT::Phdr));
  {
    std::string Path = writeTemp("probe-notes-first", "", Bytes);
    RunResult R = runProgram(Path, {});
    EXPECT_TRUE(StringRef(R.Output).starts_with("ok")) << R.Output;
    sys::fs::remove(Path);
  }

  ASSERT_EXPECTED(H, read(Bytes));
  FatbinFile F = H.Sections[0].Fatbin;
  F.Containers[1].Entries.back().ExtraPadding = 8192;
  ASSERT_EXPECTED(New, updateFatbinSection(MemoryBufferRef(Bytes, "probe"),
                                           ".nv_fatbin", F));
  ASSERT_EXPECTED(H2, read(New));
  EXPECT_EQ(H2.Wrappers[1].ContainerIndex, std::optional<size_t>(1));
  auto NewFile = object::ELFFile<ELFT>::create(New);
  ASSERT_TRUE(static_cast<bool>(NewFile));
  auto NewPhdrs = NewFile->program_headers();
  ASSERT_TRUE(static_cast<bool>(NewPhdrs));
  uint64_t Prev = 0;
  const ELFT::Phdr *Last = nullptr;
  for (const ELFT::Phdr &P : *NewPhdrs) {
    if (P.p_type != ELF::PT_LOAD)
      continue;
    EXPECT_GE(uint64_t(P.p_vaddr), Prev);
    Prev = P.p_vaddr + P.p_memsz;
    Last = &P;
  }
  ASSERT_NE(Last, nullptr);
  EXPECT_EQ(uint64_t(Last->p_offset), H2.Sections[0].FileOffset);
  EXPECT_EQ(NewPhdrs->front().p_type, ELF::PT_PHDR);
  std::string Path = writeTemp("probe-notes-first-grown", "", New);
  RunResult R = runProgram(Path, {});
  EXPECT_EQ(R.Status, 0) << R.Output;
  EXPECT_TRUE(StringRef(R.Output).starts_with("ok")) << R.Output;
  sys::fs::remove(Path);
}

// Without a PT_NOTE there is no program header to map the new bytes with.
TEST_F(HostObjectTest, GrowLinkedFileWithoutNote) {
  REQUIRE_CUDA_INPUTS();
  using ELFT = object::ELF64LE;
  std::string Bytes = inputs().read("probe_pie");
  auto File = object::ELFFile<ELFT>::create(Bytes);
  ASSERT_TRUE(static_cast<bool>(File));
  uint64_t PhOff = File->getHeader().e_phoff;
  auto Phdrs = File->program_headers();
  ASSERT_TRUE(static_cast<bool>(Phdrs));
  for (size_t I = 0; I < Phdrs->size(); ++I)
    if ((*Phdrs)[I].p_type == ELF::PT_NOTE)
      put32(Bytes, PhOff + I * sizeof(ELFT::Phdr), ELF::PT_NULL);
  ASSERT_EXPECTED(H, read(Bytes));
  FatbinFile F = H.Sections[0].Fatbin;
  F.Containers[1].Entries.back().ExtraPadding = 4096;
  auto New = updateFatbinSection(MemoryBufferRef(Bytes, "x"), ".nv_fatbin", F);
  ASSERT_FALSE(static_cast<bool>(New));
  ErrorParts P = takeError(New);
  EXPECT_TRUE(P.IsFormatError) << P.Full;
  EXPECT_EQ(P.Offset, PhOff);
  EXPECT_TRUE(StringRef(P.Message).contains("no PT_NOTE")) << P.Full;

  // A wrapper set by a relocation that is not RELATIVE is not re-pointed.
  Bytes = inputs().read("probe_pie");
  ASSERT_EXPECTED(H2, read(Bytes));
  uint64_t Rel = *H2.Wrappers[1].PointerRelocationOffset;
  put32(Bytes, Rel + 8, ELF::R_X86_64_64); // r_info, symbol 0
  New = updateFatbinSection(MemoryBufferRef(Bytes, "x"), ".nv_fatbin", F);
  ASSERT_FALSE(static_cast<bool>(New));
  P = takeError(New);
  EXPECT_EQ(P.Offset, Rel) << P.Full;
  EXPECT_TRUE(StringRef(P.Message).contains("not a relative one")) << P.Full;
}

} // namespace
