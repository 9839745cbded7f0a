//===- FatbinTest.cpp - Reading, listing and writing real fatbins --------===//
//
// Inputs come from nvcc and fatbinary (CudaInputs.cpp): the same cubins and
// PTX packed with every compression mode, with and without an identifier and
// options, and a plain `nvcc -fatbin`.
//
//===----------------------------------------------------------------------===//

#include "CudaInputs.h"
#include "TestUtil.h"

#include "tally/Fatbin/Compression.h"
#include "tally/Fatbin/Fatbin.h"
#include "tally/Fatbin/Listing.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

#include <algorithm>

using namespace llvm;
using namespace tally::fatbin;
using namespace tally::fatbin::test;

namespace {

// Every fatbinary output packs these four images, in this order.
const char *const ImageArchs[] = {"sm_80", "sm_90", "compute_90", "sm_90a"};
const char *const ImageCubins[] = {"k80.cubin", "k90.cubin", nullptr,
                                   "k90a.cubin"};

struct ModeCase {
  const char *File;
  Compression PTX;
  Compression ELF;
};

// What each fatbinary compression mode does (verified: docs/fatbin-format.md).
const ModeCase ModeCases[] = {
    {"fb_none.fatbin", Compression::None, Compression::None},
    {"fb_default.fatbin", Compression::Zstd, Compression::None},
    {"fb_speed.fatbin", Compression::LZ4, Compression::None},
    {"fb_size.fatbin", Compression::Zstd, Compression::Zstd},
    {"fb_lz4all.fatbin", Compression::LZ4, Compression::LZ4},
    {"fb_zstdall.fatbin", Compression::Zstd, Compression::Zstd},
    {"fb_ident.fatbin", Compression::None, Compression::None},
};

const char *const AllFatbins[] = {"fb_none.fatbin",   "fb_default.fatbin",
                                  "fb_speed.fatbin",  "fb_size.fatbin",
                                  "fb_lz4all.fatbin", "fb_zstdall.fatbin",
                                  "fb_ident.fatbin",  "nvcc.fatbin",
                                  "lto.fatbin",       "lto_none.fatbin"};

// A stand-in for the PTX parser: the names after `.entry`.
std::vector<std::string> ptxEntries(StringRef Text) {
  std::vector<std::string> Names;
  while (true) {
    size_t P = Text.find(".entry ");
    if (P == StringRef::npos)
      break;
    Text = Text.substr(P + 7);
    Names.push_back(
        Text.take_until([](char C) { return C == '(' || isSpace(C); }).str());
  }
  return Names;
}

// PTX with comments removed, each line trimmed and runs of blanks squeezed:
// what fatbinary stores.
std::string normalizePTX(StringRef Text) {
  std::string Out;
  SmallVector<StringRef, 0> Lines;
  Text.split(Lines, '\n');
  for (size_t I = 0; I < Lines.size(); ++I) {
    StringRef L = Lines[I];
    L = L.take_front(L.find("//")).trim();
    bool Blank = false;
    for (char C : L) {
      if (C == ' ' || C == '\t') {
        Blank = true;
        continue;
      }
      if (Blank)
        Out += ' ';
      Blank = false;
      Out += C;
    }
    if (I + 1 < Lines.size())
      Out += '\n';
  }
  return Out;
}

std::vector<std::string> sorted(std::vector<std::string> V) {
  llvm::sort(V);
  return V;
}

class FatbinTest : public ::testing::Test {
protected:
  static void SetUpTestSuite() { getCudaInputs(); }
  const CudaInputs &inputs() const { return getCudaInputs(); }
};

TEST_F(FatbinTest, NvccFatbinListing) {
  REQUIRE_CUDA_INPUTS();
  std::string Bytes = inputs().read("nvcc.fatbin");
  ASSERT_EXPECTED(F, readFatbin(StringRef(Bytes)));
  ASSERT_EQ(F.Containers.size(), 1u);
  const FatbinContainer &C = F.Containers[0];
  EXPECT_EQ(C.Version, 1u);
  EXPECT_TRUE(C.HeaderExtra.empty());
  EXPECT_TRUE(F.Trailing.empty());
  ASSERT_EQ(C.Entries.size(), 4u);
  for (size_t I = 0; I < 4; ++I)
    EXPECT_EQ(C.Entries[I].archName(), ImageArchs[I]) << "entry " << I;

  // nvcc 13's default: PTX compressed with zstd, cubins stored.
  const FatbinEntry &PTX = C.Entries[2];
  EXPECT_TRUE(PTX.isPTX());
  EXPECT_EQ(PTX.compression(), Compression::Zstd);
  EXPECT_EQ(PTX.Arch, 90u);
  EXPECT_TRUE(PTX.Options.has_value());
  EXPECT_EQ(C.Entries[3].Flags & entry_flags::ArchA, entry_flags::ArchA);
  EXPECT_EQ(C.Entries[0].Flags, entry_flags::Is64Bit | entry_flags::HostLinux);
  for (const FatbinEntry &E : C.Entries) {
    EXPECT_EQ(E.Version, EntryHeaderVersion);
    if (!E.isELF())
      continue;
    EXPECT_EQ(E.compression(), Compression::None);
    EXPECT_EQ(E.MajorVersion, 1u);
    EXPECT_EQ(E.MinorVersion, 8u);
    EXPECT_FALSE(E.Options.has_value());
  }

  ASSERT_EXPECTED(Text, getPTXText(PTX));
  std::string Version =
      formatv(".version {0}.{1}\n", PTX.MajorVersion, PTX.MinorVersion).str();
  EXPECT_NE(Text.find(Version), std::string::npos) << Text;
  EXPECT_EQ(Text.find('\0'), std::string::npos);

  ListingOptions Opts;
  int Calls = 0;
  Opts.PTXKernelNames = [&](StringRef T) {
    ++Calls;
    EXPECT_TRUE(T.contains(".target sm_90"));
    return ptxEntries(T);
  };
  ASSERT_EXPECTED(Infos, describeFatbin(F, Opts));
  EXPECT_EQ(Calls, 1);
  ASSERT_EQ(Infos.size(), 4u);
  std::vector<std::string> Kernels = {"_Z5scalePffi", "_Z6addOnePfi"};
  for (const EntryInfo &I : Infos) {
    EXPECT_EQ(sorted(I.Kernels), Kernels) << "entry " << I.Index;
    EXPECT_TRUE(I.DeviceFunctions.empty());
    ASSERT_TRUE(I.Offset.has_value());
    EXPECT_EQ(*I.Offset % 8, 0u);
  }
  EXPECT_EQ(*Infos[0].Offset, 16u);
  EXPECT_EQ(Infos[2].Comp, Compression::Zstd);
  EXPECT_LT(*Infos[2].StoredSize, Infos[2].PayloadSize);

  std::string Listing;
  raw_string_ostream OS(Listing);
  ASSERT_NO_ERROR(printFatbinListing(F, OS, Opts));
  EXPECT_NE(Listing.find("fatbin: 1 container, 4 entries"), std::string::npos)
      << Listing;
  EXPECT_NE(Listing.find("entry 0 (container 0, entry 0) at 0x10: ELF sm_80, "
                         "version 1.8"),
            std::string::npos)
      << Listing;
  EXPECT_NE(Listing.find(": ELF sm_90a"), std::string::npos) << Listing;
  EXPECT_NE(Listing.find(": PTX compute_90, PTX ISA"), std::string::npos);
  EXPECT_NE(Listing.find("compression zstd"), std::string::npos);
  EXPECT_NE(Listing.find("flags: 0x100011 (64bit|linux|arch-a)"),
            std::string::npos)
      << Listing;
  EXPECT_NE(Listing.find("kernels: "), std::string::npos);
  EXPECT_NE(Listing.find("options: \"\""), std::string::npos) << Listing;
}

TEST_F(FatbinTest, CompressionModes) {
  REQUIRE_CUDA_INPUTS();
  std::string PTXSource = inputs().read("k90.ptx");
  std::string ReferencePTX;
  for (const ModeCase &M : ModeCases) {
    SCOPED_TRACE(M.File);
    std::string Bytes = inputs().read(M.File);
    ASSERT_EXPECTED(F, readFatbin(StringRef(Bytes)));
    ASSERT_EQ(F.Containers.size(), 1u);
    ASSERT_EQ(F.Containers[0].Entries.size(), 4u);
    for (size_t I = 0; I < 4; ++I) {
      SCOPED_TRACE("entry " + std::to_string(I));
      const FatbinEntry &E = F.Containers[0].Entries[I];
      EXPECT_EQ(E.archName(), ImageArchs[I]);
      EXPECT_EQ(E.compression(), E.isPTX() ? M.PTX : M.ELF);
      uint64_t Stored = E.Origin->StoredPayload.size();
      EXPECT_EQ(Stored % 8, 0u);
      if (E.compression() != Compression::None) {
        // The compressed size excludes the padding to 8 bytes.
        EXPECT_GT(E.Origin->CompressedSize + 8, Stored);
        EXPECT_LE(E.Origin->CompressedSize, Stored);
      }
      if (E.isELF()) {
        // The decoded cubin is the ptxas output, plus padding when stored.
        std::string Cubin = inputs().read(ImageCubins[I]);
        ASSERT_GE(E.Payload.size(), Cubin.size());
        EXPECT_EQ(E.Payload.substr(0, Cubin.size()), Cubin);
        EXPECT_EQ(E.Payload.find_first_not_of('\0', Cubin.size()),
                  std::string::npos);
        continue;
      }
      ASSERT_EXPECTED(Text, getPTXText(E));
      EXPECT_EQ(Text, normalizePTX(PTXSource));
      if (E.compression() != Compression::None) {
        // Compressed PTX stores the text and its NUL, unpadded.
        EXPECT_EQ(E.Payload.size(), Text.size() + 1);
        EXPECT_EQ(E.Payload.back(), '\0');
      }
      if (ReferencePTX.empty())
        ReferencePTX = Text;
      EXPECT_EQ(Text, ReferencePTX);
    }
  }
}

TEST_F(FatbinTest, IdentifierAndOptions) {
  REQUIRE_CUDA_INPUTS();
  std::string Bytes = inputs().read("fb_ident.fatbin");
  ASSERT_EXPECTED(F, readFatbin(StringRef(Bytes)));
  for (const FatbinEntry &E : F.Containers[0].Entries) {
    EXPECT_EQ(E.Identifier, "kernels.cu");
    if (E.isPTX()) {
      ASSERT_TRUE(E.Options.has_value());
      EXPECT_EQ(*E.Options, "-O3 -lineinfo");
    } else {
      EXPECT_FALSE(E.Options.has_value());
    }
  }
  std::string Listing;
  raw_string_ostream OS(Listing);
  ASSERT_NO_ERROR(printFatbinListing(F, OS));
  EXPECT_NE(Listing.find("identifier: kernels.cu"), std::string::npos);
  EXPECT_NE(Listing.find("options: \"-O3 -lineinfo\""), std::string::npos);
}

TEST_F(FatbinTest, UnchangedRoundTripIsByteIdentical) {
  REQUIRE_CUDA_INPUTS();
  for (const char *Name : AllFatbins) {
    SCOPED_TRACE(Name);
    std::string Bytes = inputs().read(Name);
    ASSERT_EXPECTED(F, readFatbin(StringRef(Bytes)));
    for (const FatbinContainer &C : F.Containers)
      for (const FatbinEntry &E : C.Entries)
        EXPECT_TRUE(E.isUnchanged());
    EXPECT_EQ(writeOrFail(F), Bytes);
    // Copies share the source bytes and write the same.
    FatbinFile Copy = F;
    EXPECT_EQ(writeOrFail(Copy), Bytes);
  }
}

// The writer's layout of new entries is fatbinary's: building fb_none and
// fb_ident from their images gives the same bytes.
TEST_F(FatbinTest, NewEntriesMatchFatbinaryLayout) {
  REQUIRE_CUDA_INPUTS();
  for (bool WithIdent : {false, true}) {
    SCOPED_TRACE(WithIdent ? "fb_ident" : "fb_none");
    std::string Expected =
        inputs().read(WithIdent ? "fb_ident.fatbin" : "fb_none.fatbin");
    ASSERT_EXPECTED(Old, readFatbin(StringRef(Expected)));
    ASSERT_EXPECTED(PTXText, getPTXText(Old.Containers[0].Entries[2]));
    const FatbinEntry &OldPTX = Old.Containers[0].Entries[2];

    FatbinFile F;
    F.Containers.emplace_back();
    std::vector<FatbinEntry> &Es = F.Containers[0].Entries;
    Es.push_back(FatbinEntry::makeCubin(inputs().read("k80.cubin"), 80));
    Es.push_back(FatbinEntry::makeCubin(inputs().read("k90.cubin"), 90));
    Es.push_back(FatbinEntry::makePTX(PTXText, 90, OldPTX.MajorVersion,
                                      OldPTX.MinorVersion, Compression::None));
    Es.push_back(FatbinEntry::makeCubin(inputs().read("k90a.cubin"), 90,
                                        Compression::None, entry_flags::ArchA));
    if (WithIdent) {
      for (FatbinEntry &E : Es)
        E.Identifier = "kernels.cu";
      Es[2].Options = "-O3 -lineinfo";
    }
    std::string Written = writeOrFail(F);
    EXPECT_EQ(Written.size(), Expected.size());
    EXPECT_TRUE(Written == Expected);
  }
}

// zstd level 5 reproduces nvcc's default mode exactly (with libzstd 1.5.4).
TEST_F(FatbinTest, ZstdLevel5MatchesFatbinaryDefaultMode) {
  REQUIRE_CUDA_INPUTS();
  if (zstdVersionNumber() != 10504)
    GTEST_SKIP() << "needs libzstd 1.5.4, have " << zstdVersionNumber();
  std::string None = inputs().read("fb_none.fatbin");
  std::string Default = inputs().read("fb_default.fatbin");
  ASSERT_EXPECTED(F, readFatbin(StringRef(None)));
  FatbinEntry &PTX = F.Containers[0].Entries[2];
  ASSERT_EXPECTED(Text, getPTXText(PTX));
  PTX.Payload = Text + '\0';
  PTX.setCompression(Compression::Zstd);
  EXPECT_TRUE(writeOrFail(F) == Default);
}

TEST_F(FatbinTest, RecompressEveryEntry) {
  REQUIRE_CUDA_INPUTS();
  for (const char *Name : {"fb_none.fatbin", "fb_speed.fatbin",
                           "fb_zstdall.fatbin", "nvcc.fatbin"}) {
    std::string Bytes = inputs().read(Name);
    ASSERT_EXPECTED(Orig, readFatbin(StringRef(Bytes)));
    for (Compression C :
         {Compression::None, Compression::LZ4, Compression::Zstd}) {
      SCOPED_TRACE(std::string(Name) + " to " + compressionName(C).str());
      FatbinFile F = Orig;
      for (FatbinContainer &Ct : F.Containers)
        for (FatbinEntry &E : Ct.Entries)
          E.setCompression(C);
      std::string Written = writeOrFail(F);
      ASSERT_EXPECTED(Back, readFatbin(StringRef(Written)));
      ASSERT_EQ(Back.numEntries(), Orig.numEntries());
      for (size_t I = 0; I < Orig.Containers[0].Entries.size(); ++I) {
        const FatbinEntry &A = Orig.Containers[0].Entries[I];
        const FatbinEntry &B = Back.Containers[0].Entries[I];
        EXPECT_EQ(B.compression(), C);
        // Uncompressed payloads are read back with their padding.
        if (C == Compression::None)
          EXPECT_EQ(B.Payload,
                    A.Payload + std::string(alignTo(A.Payload.size(), 8) -
                                                A.Payload.size(),
                                            '\0'));
        else
          EXPECT_EQ(B.Payload, A.Payload);
        EXPECT_EQ(B.Identifier, A.Identifier);
        EXPECT_EQ(B.Options, A.Options);
        EXPECT_EQ(B.Arch, A.Arch);
        EXPECT_EQ(B.Origin->Offset % 8, 0u);
        EXPECT_EQ(B.Origin->Header.size() % 8, 0u);
        EXPECT_EQ(B.Origin->StoredPayload.size() % 8, 0u);
      }
      // A second round trip changes nothing.
      EXPECT_TRUE(writeOrFail(Back) == Written);
    }
  }
}

TEST_F(FatbinTest, ReplaceAndAddEntries) {
  REQUIRE_CUDA_INPUTS();
  std::string Bytes = inputs().read("nvcc.fatbin");
  ASSERT_EXPECTED(F, readFatbin(StringRef(Bytes)));
  std::vector<FatbinEntry> &Es = F.Containers[0].Entries;
  std::string OldSm80Header = Es[0].Origin->Header;
  std::string OldSm80Payload = Es[0].Payload;

  // Drop the sm_90 cubin and the PTX, add a new PTX (LZ4) and a new sm_90
  // cubin (zstd) at the end, rename the sm_90a entry.
  std::string NewPTX =
      normalizePTX(inputs().read("k90.ptx")) + "\n// rewritten by tally\n";
  Es.erase(Es.begin() + 1, Es.begin() + 3);
  Es.push_back(FatbinEntry::makePTX(NewPTX, 90, 9, 0, Compression::LZ4));
  Es.push_back(FatbinEntry::makeCubin(inputs().read("k90.cubin"), 90,
                                      Compression::Zstd));
  Es[1].Identifier = "renamed.cu";

  std::string Written = writeOrFail(F);
  ASSERT_FALSE(Written.empty());
  EXPECT_EQ(Written.size() % 8, 0u);
  EXPECT_EQ(get64(Written, 8), Written.size() - 16);
  ASSERT_EXPECTED(Back, readFatbin(StringRef(Written)));
  ASSERT_EQ(Back.Containers.size(), 1u);
  const std::vector<FatbinEntry> &Bs = Back.Containers[0].Entries;
  ASSERT_EQ(Bs.size(), 4u);
  EXPECT_EQ(Bs[0].archName(), "sm_80");
  EXPECT_EQ(Bs[0].Origin->Header, OldSm80Header);
  EXPECT_EQ(Bs[0].Payload, OldSm80Payload);
  EXPECT_EQ(Bs[1].archName(), "sm_90a");
  EXPECT_EQ(Bs[1].Identifier, "renamed.cu");
  EXPECT_EQ(Bs[1].Payload, Es[1].Payload);
  EXPECT_EQ(Bs[2].archName(), "compute_90");
  EXPECT_EQ(Bs[2].compression(), Compression::LZ4);
  ASSERT_EXPECTED(Text, getPTXText(Bs[2]));
  EXPECT_EQ(Text, NewPTX);
  EXPECT_EQ(Bs[3].archName(), "sm_90");
  EXPECT_EQ(Bs[3].compression(), Compression::Zstd);
  EXPECT_EQ(Bs[3].Payload, inputs().read("k90.cubin"));
  for (const FatbinEntry &E : Bs) {
    EXPECT_EQ(E.Origin->Offset % 8, 0u);
    EXPECT_EQ(E.Origin->Header.size() % 8, 0u);
  }
  ASSERT_EXPECTED(Infos, describeFatbin(Back));
  EXPECT_EQ(sorted(Infos[3].Kernels),
            (std::vector<std::string>{"_Z5scalePffi", "_Z6addOnePfi"}));
}

// Changing only the payload keeps the header bytes, strings included.
TEST_F(FatbinTest, PayloadChangeKeepsHeaderStrings) {
  REQUIRE_CUDA_INPUTS();
  std::string Bytes = inputs().read("fb_ident.fatbin");
  ASSERT_EXPECTED(F, readFatbin(StringRef(Bytes)));
  FatbinEntry &PTX = F.Containers[0].Entries[2];
  ASSERT_TRUE(PTX.isPTX());
  std::string OldHeader = PTX.Origin->Header;
  PTX.Payload = ".version 9.0\n.target sm_90\n.address_size 64\n";
  PTX.Payload += '\0';
  std::string Written = writeOrFail(F);
  ASSERT_EXPECTED(Back, readFatbin(StringRef(Written)));
  const FatbinEntry &B = Back.Containers[0].Entries[2];
  EXPECT_EQ(B.Identifier, "kernels.cu");
  EXPECT_EQ(B.Options, std::optional<std::string>("-O3 -lineinfo"));
  StringRef NewHeader = B.Origin->Header;
  ASSERT_EQ(NewHeader.size(), OldHeader.size());
  // Only the padded size at 0x08 differs.
  EXPECT_EQ(NewHeader.substr(0, 8), StringRef(OldHeader).substr(0, 8));
  EXPECT_EQ(NewHeader.substr(16), StringRef(OldHeader).substr(16));
  EXPECT_EQ(get64(NewHeader, 8), 48u);
  EXPECT_EQ(B.Payload.substr(0, PTX.Payload.size()), PTX.Payload);
}

TEST_F(FatbinTest, MultipleContainersAndPadding) {
  REQUIRE_CUDA_INPUTS();
  std::string A = inputs().read("fb_default.fatbin");
  std::string B = inputs().read("fb_speed.fatbin");
  // Containers with zero padding between them and after them, as a linker
  // aligning sections to 16 would leave.
  std::string Joined = A + std::string(8, '\0') + B + std::string(24, '\0');
  ASSERT_EXPECTED(F, readFatbin(StringRef(Joined)));
  ASSERT_EQ(F.Containers.size(), 2u);
  EXPECT_EQ(F.Containers[1].LeadingPadding, 8u);
  EXPECT_EQ(F.Containers[1].Offset, A.size() + 8);
  EXPECT_EQ(F.Trailing, std::string(24, '\0'));
  EXPECT_TRUE(writeOrFail(F) == Joined);

  std::vector<uint64_t> Offsets;
  SmallVector<char, 0> Out;
  ASSERT_NO_ERROR(writeFatbin(F, Out, {}, &Offsets));
  EXPECT_EQ(Offsets, (std::vector<uint64_t>{0, A.size() + 8}));
  std::string Listing;
  raw_string_ostream OS(Listing);
  ASSERT_NO_ERROR(printFatbinListing(F, OS));
  EXPECT_NE(Listing.find("fatbin: 2 containers, 8 entries, 24 trailing bytes"),
            std::string::npos)
      << Listing;
  EXPECT_NE(Listing.find("entry 7 (container 1, entry 3)"), std::string::npos);
}

// LTO-IR: stored plainly without compression; compressed, the payload is
// obfuscated and kept opaque.
TEST_F(FatbinTest, LTOIREntries) {
  REQUIRE_CUDA_INPUTS();
  std::string PlainBytes = inputs().read("lto_none.fatbin");
  ASSERT_EXPECTED(Plain, readFatbin(StringRef(PlainBytes)));
  ASSERT_EQ(Plain.numEntries(), 1u);
  const FatbinEntry &P = Plain.Containers[0].Entries[0];
  EXPECT_TRUE(P.isLTOIR());
  EXPECT_EQ(P.archName(), "lto_90");
  EXPECT_EQ(P.compression(), Compression::None);
  EXPECT_FALSE(P.isObfuscated());
  EXPECT_EQ(P.MajorVersion, 1u);
  EXPECT_EQ(P.MinorVersion, 0x41u);
  EXPECT_EQ(P.Reserved, 0u);
  ASSERT_TRUE(P.Options.has_value());
  EXPECT_TRUE(StringRef(*P.Options).contains("-ftz=0"));
  // NVVM IR container magic.
  EXPECT_EQ(get32(P.Payload, 0), 0x7f4e43edu);

  std::string Bytes = inputs().read("lto.fatbin");
  ASSERT_EXPECTED(F, readFatbin(StringRef(Bytes)));
  FatbinEntry &E = F.Containers[0].Entries[0];
  EXPECT_TRUE(E.isLTOIR());
  EXPECT_TRUE(E.isObfuscated());
  EXPECT_EQ(E.compression(), Compression::Zstd);
  EXPECT_EQ(E.Payload, E.Origin->StoredPayload);
  EXPECT_NE(E.Reserved, 0u);
  EXPECT_EQ(uint32_t(E.Reserved), get32(P.Payload, 40));
  EXPECT_TRUE(writeOrFail(F) == Bytes);

  std::string Listing;
  raw_string_ostream OS(Listing);
  ASSERT_NO_ERROR(printFatbinListing(F, OS));
  EXPECT_NE(Listing.find(": LTO-IR lto_90, version 1.65"), std::string::npos)
      << Listing;
  EXPECT_NE(Listing.find("size: obfuscated payload "), std::string::npos);
  EXPECT_NE(Listing.find("uncompressed "), std::string::npos);
  EXPECT_NE(Listing.find("(64bit|linux|zstd|obfuscated)"), std::string::npos);

  // The header can change; the payload cannot be re-encoded.
  E.Identifier = "h.cu";
  std::string Written = writeOrFail(F);
  ASSERT_EXPECTED(Back, readFatbin(StringRef(Written)));
  const FatbinEntry &B = Back.Containers[0].Entries[0];
  EXPECT_EQ(B.Identifier, "h.cu");
  EXPECT_EQ(B.Payload, E.Payload);
  EXPECT_EQ(B.Origin->CompressedSize, E.Origin->CompressedSize);
  EXPECT_EQ(B.Origin->UncompressedSize, E.Origin->UncompressedSize);
  EXPECT_EQ(B.Reserved, E.Reserved);

  FatbinFile G = F;
  G.Containers[0].Entries[0].setCompression(Compression::None);
  SmallVector<char, 0> Out;
  EXPECT_TRUE(StringRef(takeError(writeFatbin(G, Out)).Full)
                  .contains("cannot encode an obfuscated payload"));
  G = F;
  G.Containers[0].Entries[0].Payload += "x";
  EXPECT_TRUE(StringRef(takeError(writeFatbin(G, Out)).Full)
                  .contains("cannot encode an obfuscated payload"));
}

// A cubin whose symbol table is empty (or missing) lists no functions.
TEST_F(FatbinTest, CubinWithEmptySymbolTable) {
  REQUIRE_CUDA_INPUTS();
  std::string Cubin = inputs().read("k90.cubin");
  uint64_t ShOff = get64(Cubin, 0x28);
  uint16_t ShNum = uint16_t(get32(Cubin, 0x3c));
  bool Found = false;
  for (uint16_t I = 0; I < ShNum; ++I) {
    uint64_t H = ShOff + uint64_t(I) * 64;
    if (get32(Cubin, H + 4) == 2 /* SHT_SYMTAB */) {
      put64(Cubin, H + 32, 0); // sh_size
      Found = true;
    }
  }
  ASSERT_TRUE(Found);
  ASSERT_EXPECTED(Fns, readCubinFunctions(Cubin));
  EXPECT_TRUE(Fns.Kernels.empty());
  EXPECT_TRUE(Fns.DeviceFunctions.empty());

  // Not an ELF file: an error, not a crash.
  auto Bad = readCubinFunctions("not an elf");
  ASSERT_FALSE(static_cast<bool>(Bad));
  EXPECT_EQ(takeError(Bad).Full, "cubin is not an ELF file");
}

} // namespace
