//===- ErrorTest.cpp - Bad fatbins give one error at the right offset ----===//
//
// Corrupt variants of a small fatbin built by the writer (no CUDA needed) and
// of nvcc's output. Each must give exactly one FormatError naming the offset
// of the broken structure; none may crash (the tests also run under ASan and
// UBSan).
//
//===----------------------------------------------------------------------===//

#include "CudaInputs.h"
#include "TestUtil.h"

#include "tally/Fatbin/Fatbin.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include "gtest/gtest.h"

#include <random>

using namespace llvm;
using namespace tally::fatbin;
using namespace tally::fatbin::test;

namespace {

std::string samplePTX() {
  std::string Text = ".version 9.0\n.target sm_90\n.address_size 64\n";
  for (int I = 0; I < 40; ++I)
    Text += formatv(".visible .entry k{0}() {{ ret; }\n", I).str();
  return Text;
}

// Container 0: PTX (zstd), fake cubin (stored, with identifier), PTX (LZ4).
// Container 1: one stored PTX entry.
FatbinFile sampleFatbin() {
  FatbinFile F;
  F.Containers.resize(2);
  auto &Es = F.Containers[0].Entries;
  Es.push_back(FatbinEntry::makePTX(samplePTX(), 90, 9, 0, Compression::Zstd));
  Es.push_back(FatbinEntry::makeCubin(std::string(100, 'E'), 80));
  Es.back().Identifier = "sample.cu";
  Es.push_back(FatbinEntry::makePTX(samplePTX(), 80, 9, 0, Compression::LZ4));
  F.Containers[1].Entries.push_back(
      FatbinEntry::makePTX("ptx", 75, 8, 0, Compression::None));
  return F;
}

class ErrorTest : public ::testing::Test {
protected:
  void SetUp() override {
    Good = writeOrFail(sampleFatbin());
    auto F = readFatbin(StringRef(Good));
    ASSERT_TRUE(static_cast<bool>(F)) << toString(F.takeError());
    Parsed = std::move(*F);
    ASSERT_EQ(Parsed.Containers.size(), 2u);
    for (const FatbinEntry &E : Parsed.Containers[0].Entries)
      Entry.push_back(E.Origin->Offset);
    Container1 = Parsed.Containers[1].Offset;
  }

  // Header size of entry \p I of container 0.
  uint64_t headerSize(size_t I) const {
    return Parsed.Containers[0].Entries[I].Origin->Header.size();
  }
  uint64_t payloadOffset(size_t I) const { return Entry[I] + headerSize(I); }

  // Reading \p Bytes must fail with one FormatError at \p Offset whose
  // message contains \p Message.
  void expectError(StringRef Bytes, uint64_t Offset, StringRef Message,
                   const ReadOptions &Opts = {}) {
    auto F = readFatbin(Bytes, Opts);
    ASSERT_FALSE(static_cast<bool>(F)) << "unexpectedly parsed";
    ErrorParts P = takeError(F);
    EXPECT_EQ(P.Count, 1);
    EXPECT_TRUE(P.IsFormatError) << P.Full;
    EXPECT_EQ(P.Offset, Offset) << P.Full;
    EXPECT_TRUE(StringRef(P.Message).contains(Message))
        << "message: " << P.Full << "\nexpected: " << Message.str();
    // Style: lower case, no trailing period.
    ASSERT_FALSE(P.Message.empty());
    EXPECT_FALSE(isUpper(P.Message[0])) << P.Full;
    EXPECT_NE(P.Message.back(), '.') << P.Full;
  }

  std::string Good;
  FatbinFile Parsed;
  std::vector<uint64_t> Entry; // Entry header offsets in container 0.
  uint64_t Container1 = 0;
};

TEST_F(ErrorTest, SampleRoundTrips) {
  EXPECT_EQ(Entry[0], 16u);
  EXPECT_TRUE(writeOrFail(Parsed) == Good);
}

TEST_F(ErrorTest, Empty) { expectError("", 0, "empty fatbin"); }

TEST_F(ErrorTest, EveryTruncationFails) {
  for (size_t Len = 1; Len < Good.size(); ++Len) {
    StringRef Prefix = StringRef(Good).take_front(Len);
    auto F = readFatbin(Prefix);
    if (F) {
      // Cutting inside zero padding leaves a valid fatbin.
      EXPECT_TRUE(writeOrFail(*F) == Prefix) << "length " << Len;
      continue;
    }
    ErrorParts P = takeError(F);
    EXPECT_EQ(P.Count, 1);
    EXPECT_TRUE(P.IsFormatError) << P.Full;
    EXPECT_LT(P.Offset, Len) << P.Full;
  }
}

TEST_F(ErrorTest, BadMagic) {
  std::string S = Good;
  S[0] ^= 1;
  expectError(S, 0, "bad fatbin magic 0xba55ed51, expected 0xba55ed50");
  ReadOptions Opts;
  Opts.BaseOffset = 0x1000;
  expectError(S, 0x1000, "bad fatbin magic", Opts);
  // A magic that is not the first thing after a container.
  S = Good;
  S[Container1 + 3] = 0;
  expectError(S, Container1, "unexpected data after fatbin container at 0x0");
}

TEST_F(ErrorTest, ContainerHeader) {
  std::string S = Good;
  put16(S, 4, 2);
  expectError(S, 0, "unsupported fatbin version 2");
  S = Good;
  put16(S, 6, 8);
  expectError(S, 0, "fatbin header size 8 is smaller than 16");
  S = Good;
  put16(S, 6, 0xffff);
  expectError(S, 0,
              formatv("fatbin header size 65535 extends past end of fatbin "
                      "(size {0})",
                      Good.size())
                  .str());
  S = Good;
  put64(S, Container1 + 8, get64(S, Container1 + 8) + 1);
  expectError(S, Container1,
              formatv("fatbin payload size {0} extends past end of fatbin "
                      "(size {1})",
                      get64(S, Container1 + 8), Good.size())
                  .str());
  S = Good;
  put64(S, 8, ~uint64_t(0));
  expectError(S, 0, "fatbin payload size 18446744073709551615 extends past");
}

TEST_F(ErrorTest, EntrySizes) {
  std::string S = Good;
  put32(S, Entry[1] + 4, 32);
  expectError(S, Entry[1], "entry header size 32 is smaller than 64");
  S = Good;
  put32(S, Entry[1] + 4, 0xffffffff);
  expectError(S, Entry[1],
              formatv("entry header size 4294967295 extends past end of its "
                      "container at {0:x}",
                      Container1)
                  .str());
  S = Good;
  put64(S, Entry[1] + 8, uint64_t(1) << 63);
  expectError(S, Entry[1],
              "entry payload size 9223372036854775808 extends past end of "
              "its container");
  // The last entry of the last container: past the end of the data.
  S = Good;
  uint64_t Last = Parsed.Containers[1].Entries[0].Origin->Offset;
  put64(S, Last + 8, 123456);
  expectError(S, Last,
              formatv("entry payload size 123456 extends past end of fatbin "
                      "(size {0})",
                      Good.size())
                  .str());
}

// An entry that runs into the next container: its sizes say it overlaps.
TEST_F(ErrorTest, EntryOverlapsNextContainer) {
  std::string S = Good;
  put64(S, Entry[2] + 8, get64(S, Entry[2] + 8) + 8);
  expectError(
      S, Entry[2],
      formatv("extends past end of its container at {0:x}", Container1).str());
}

TEST_F(ErrorTest, TruncatedEntryHeaderInContainer) {
  // 24 non-zero bytes after the last entry of container 1, inside its
  // payload.
  std::string S = Good + std::string(24, '\x01');
  put64(S, Container1 + 8, get64(S, Container1 + 8) + 24);
  expectError(S, Good.size(),
              "entry header truncated: 24 bytes left in container, need 64");
}

TEST_F(ErrorTest, StringsOutsideHeader) {
  std::string S = Good;
  put32(S, Entry[1] + 0x20, 8); // Identifier inside the fixed header.
  expectError(S, Entry[1], "entry identifier (offset 8, size 9) lies outside");
  S = Good;
  put32(S, Entry[1] + 0x24, 1000);
  expectError(S, Entry[1], "entry identifier (offset 64, size 1000) lies");
  S = Good;
  put32(S, Entry[0] + 0x14, uint32_t(headerSize(0)));
  expectError(
      S, Entry[0],
      formatv("entry options pointer at offset {0} lies outside", headerSize(0))
          .str());
  S = Good;
  uint64_t Pair = get32(S, Entry[0] + 0x14);
  put32(S, Entry[0] + Pair + 4, 0x7fffffff);
  expectError(S, Entry[0], "entry options (offset 72, size 2147483647) lie");
}

TEST_F(ErrorTest, CompressionFields) {
  std::string S = Good;
  put64(S, Entry[0] + 0x28,
        get64(S, Entry[0] + 0x28) | entry_flags::CompressedLZ4);
  expectError(S, Entry[0], "ask for both LZ4 and zstd compression");
  S = Good;
  put32(S, Entry[0] + 0x10, 0);
  expectError(S, Entry[0], "entry compressed size 0 does not fit");
  S = Good;
  put32(S, Entry[0] + 0x10, uint32_t(get64(S, Entry[0] + 8) + 1));
  expectError(S, Entry[0], "does not fit the padded payload size");
  S = Good;
  put64(S, Entry[0] + 0x38, uint64_t(1) << 40);
  expectError(S, Entry[0],
              "entry uncompressed size 1099511627776 exceeds the limit of "
              "1073741824 bytes");
  ReadOptions Small;
  Small.MaxUncompressedSize = 100;
  expectError(Good, Entry[0], "exceeds the limit of 100 bytes", Small);
}

TEST_F(ErrorTest, CorruptZstd) {
  std::string S = Good;
  uint64_t P = payloadOffset(0);
  S[P] ^= 0xff; // Frame magic.
  expectError(S, P, "zstd payload of PTX entry: corrupt zstd frame");
  S = Good;
  uint32_t CSize = get32(S, Entry[0] + 0x10);
  for (uint32_t I = 12; I < CSize; ++I)
    S[P + I] = char(0xa5);
  expectError(S, P, "corrupt zstd frame");
  S = Good;
  uint64_t USize = get64(S, Entry[0] + 0x38);
  put64(S, Entry[0] + 0x38, USize - 1);
  expectError(S, P,
              formatv("zstd frame content size {0} differs from header size "
                      "{1}",
                      USize, USize - 1)
                  .str());
}

TEST_F(ErrorTest, CorruptLZ4) {
  std::string S = Good;
  uint64_t P = payloadOffset(2);
  uint32_t CSize = get32(S, Entry[2] + 0x10);
  for (uint32_t I = 0; I < CSize; ++I)
    S[P + I] = char(0xff);
  expectError(S, P, "lz4 payload of PTX entry: corrupt LZ4 block");
  S = Good;
  uint64_t USize = get64(S, Entry[2] + 0x38);
  put64(S, Entry[2] + 0x38, USize + 5);
  expectError(S, P,
              formatv("LZ4 block decompressed to {0} bytes, header says {1}",
                      USize, USize + 5)
                  .str());
  S = Good;
  put64(S, Entry[2] + 0x38, USize - 1);
  expectError(S, P, "corrupt LZ4 block");
}

TEST_F(ErrorTest, TrailingData) {
  std::string S = Good + "abc";
  expectError(S, Good.size(),
              formatv("unexpected data after fatbin container at {0:x}: "
                      "expected zero padding or magic 0xba55ed50",
                      Container1)
                  .str());
  ReadOptions Opts;
  Opts.AllowTrailingData = true;
  auto F = readFatbin(StringRef(S), Opts);
  ASSERT_TRUE(static_cast<bool>(F)) << toString(F.takeError());
  EXPECT_EQ(F->Trailing, "abc");
  EXPECT_TRUE(writeOrFail(*F) == S);
}

// cuobjdump calls this an invalid fatbin header and the CUDA runtime hangs
// on it (checked on an H200 with driver 580).
TEST_F(ErrorTest, ZeroTailInsideContainerIsRejected) {
  for (uint64_t N : {8, 64, 128}) {
    std::string S = Good + std::string(N, '\0');
    put64(S, Container1 + 8, get64(S, Container1 + 8) + N);
    expectError(S, Good.size(),
                formatv("{0} zero bytes after the last entry inside the "
                        "container",
                        N)
                    .str());
  }
}

TEST_F(ErrorTest, ExtraPadding) {
  FatbinFile F = Parsed;
  FatbinEntry &E = F.Containers[0].Entries[1]; // Stored, 100 bytes.
  E.ExtraPadding = 16;
  std::string S = writeOrFail(F);
  ASSERT_EQ(S.size(), Good.size() + 16);
  EXPECT_EQ(get64(S, Entry[1] + 8), 104u + 16u);
  auto Back = readFatbin(StringRef(S));
  ASSERT_TRUE(static_cast<bool>(Back)) << toString(Back.takeError());
  EXPECT_EQ(Back->Containers[0].Entries[1].Payload.size(), 120u);
  EXPECT_EQ(Back->Containers[0].Entries[2].Payload,
            Parsed.Containers[0].Entries[2].Payload);
  // On a compressed entry the compressed size stays exact.
  F = Parsed;
  F.Containers[0].Entries[0].ExtraPadding = 8;
  S = writeOrFail(F);
  EXPECT_EQ(get32(S, Entry[0] + 0x10), get32(Good, Entry[0] + 0x10));
  EXPECT_EQ(get64(S, Entry[0] + 8), get64(Good, Entry[0] + 8) + 8);
  Back = readFatbin(StringRef(S));
  ASSERT_TRUE(static_cast<bool>(Back)) << toString(Back.takeError());
  EXPECT_EQ(Back->Containers[0].Entries[0].Payload,
            Parsed.Containers[0].Entries[0].Payload);

  F = Parsed;
  F.Containers[0].Entries[1].ExtraPadding = 3;
  SmallVector<char, 0> Out;
  EXPECT_EQ(takeError(writeFatbin(F, Out)).Full,
            "entry 1: extra padding 3 is not a multiple of 8");
}

TEST_F(ErrorTest, WriterRejectsConflictingFlags) {
  FatbinFile F = Parsed;
  F.Containers[0].Entries[1].Flags |= entry_flags::CompressionMask;
  SmallVector<char, 0> Out;
  ErrorParts P = takeError(writeFatbin(F, Out));
  EXPECT_EQ(P.Full, "entry 1: flags ask for both LZ4 and zstd compression");
}

// Whatever random damage the reader accepts, it writes back unchanged.
void mutateAndCheck(const std::string &Input, unsigned Iterations,
                    unsigned Seed) {
  std::mt19937 Rng(Seed);
  for (unsigned It = 0; It < Iterations; ++It) {
    std::string S = Input;
    unsigned N = 1 + Rng() % 4;
    for (unsigned K = 0; K < N; ++K) {
      // Mostly hit header bytes, where the sizes and offsets live.
      size_t Pos = (Rng() % 2) ? Rng() % std::min<size_t>(S.size(), 256)
                               : Rng() % S.size();
      S[Pos] = char(Rng());
    }
    if (Rng() % 8 == 0)
      S.resize(Rng() % S.size());
    ReadOptions Opts;
    Opts.MaxUncompressedSize = 1 << 24;
    auto F = readFatbin(StringRef(S), Opts);
    if (!F) {
      ErrorParts P = takeError(F);
      EXPECT_TRUE(P.IsFormatError) << P.Full;
      EXPECT_LE(P.Offset, S.size()) << P.Full;
      continue;
    }
    SmallVector<char, 0> Out;
    if (Error E = writeFatbin(*F, Out)) {
      ADD_FAILURE() << "iteration " << It << ": " << toString(std::move(E));
      continue;
    }
    EXPECT_TRUE(StringRef(Out.data(), Out.size()) == S)
        << "iteration " << It << " does not round-trip";
  }
}

TEST_F(ErrorTest, RandomMutationsOfSample) { mutateAndCheck(Good, 3000, 1); }

TEST_F(ErrorTest, RandomMutationsOfNvccOutput) {
  REQUIRE_CUDA_INPUTS();
  mutateAndCheck(getCudaInputs().read("fb_speed.fatbin"), 1500, 2);
  mutateAndCheck(getCudaInputs().read("nvcc.fatbin"), 1500, 3);
}

} // namespace
