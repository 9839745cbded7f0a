//===- ProfileCacheTest.cpp - the runtime's persistent profile cache ------===//
//
// The cache directory's precedence, round trips through the file, merging
// of several writers (objects in one process, and forked processes saving
// at the same time, whose counts must add up exactly), damaged files of
// every kind (each bad line dropped alone, a bad header replaced by the
// next save), the caps, clear() and the listing `tally profile show`
// prints. Every test works in its own mkdtemp() directory.
//
//===----------------------------------------------------------------------===//

#include "tally/Runtime/ProfileCache.h"

#include "gtest/gtest.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace tally::rt;

namespace {

/// A fresh directory, removed with its files afterwards.
class TempDir {
public:
  TempDir() {
    const char *Base = std::getenv("TMPDIR");
    std::string Tmpl = std::string(Base && *Base ? Base : "/tmp") +
                       "/tally-profile-test-XXXXXX";
    std::vector<char> Buf(Tmpl.begin(), Tmpl.end());
    Buf.push_back('\0');
    if (::mkdtemp(Buf.data()))
      Path = Buf.data();
  }
  ~TempDir() {
    if (!Path.empty())
      removeTree(Path);
  }
  const std::string &path() const { return Path; }

  static void removeTree(const std::string &P) {
    if (DIR *D = ::opendir(P.c_str())) {
      while (dirent *E = ::readdir(D)) {
        std::string N = E->d_name;
        if (N == "." || N == "..")
          continue;
        std::string Child = P + "/" + N;
        struct stat St;
        if (::lstat(Child.c_str(), &St) == 0 && S_ISDIR(St.st_mode))
          removeTree(Child);
        else
          ::unlink(Child.c_str());
      }
      ::closedir(D);
    }
    ::rmdir(P.c_str());
  }

private:
  std::string Path;
};

std::vector<std::string> listDir(const std::string &Dir) {
  std::vector<std::string> Names;
  if (DIR *D = ::opendir(Dir.c_str())) {
    while (dirent *E = ::readdir(D))
      if (std::strcmp(E->d_name, ".") && std::strcmp(E->d_name, ".."))
        Names.push_back(E->d_name);
    ::closedir(D);
  }
  return Names;
}

bool hasTempFiles(const std::string &Dir) {
  for (const std::string &N : listDir(Dir))
    if (N.find(".tmp.") != std::string::npos)
      return true;
  return false;
}

std::string readAll(const std::string &Path) {
  std::ifstream In(Path, std::ios::binary);
  std::stringstream SS;
  SS << In.rdbuf();
  return SS.str();
}

void writeAll(const std::string &Path, const std::string &Text) {
  std::ofstream Out(Path, std::ios::binary | std::ios::trunc);
  Out << Text;
}

ProfileKey key(const std::string &Kernel, uint32_t GridX = 128,
               uint32_t BlockX = 256, uint32_t Shared = 0) {
  ProfileKey K;
  K.Kernel = Kernel;
  K.Grid[0] = GridX;
  K.Block[0] = BlockX;
  K.Shared = Shared;
  return K;
}

const ProfileEntry *entry(const ProfileCache &C, const ProfileKey &K,
                          const std::string &Candidate) {
  const std::vector<ProfileEntry> *Es = C.lookup(K);
  if (!Es)
    return nullptr;
  for (const ProfileEntry &E : *Es)
    if (E.Candidate == Candidate)
      return &E;
  return nullptr;
}

/// Parses a copy of \p Text in a buffer of exactly its size, so a read past
/// the end is caught by ASan.
bool parse(const std::string &Text, ProfileMap &M, size_t &Dropped,
           std::string &Why) {
  std::unique_ptr<char[]> Buf(new char[Text.size() ? Text.size() : 1]);
  std::memcpy(Buf.get(), Text.data(), Text.size());
  return parseProfileText(std::string_view(Buf.get(), Text.size()), M, Dropped,
                          Why);
}

/// A file of three records (three lines) made by the writer itself.
std::string threeRecords() {
  ProfileMap M;
  M[key("gemm@1")].push_back({"original", 3, 100, 330});
  M[key("gemm@1")].push_back({"ptb:w=2,c=4", 2, 90, 200});
  M[key("reduce@2", 64, 128, 4096)].push_back({"slice:b=264", 1, 50, 50});
  return formatProfileText(M);
}

// Test environments for defaultDir().
std::map<std::string, std::string> *Env;
const char *fakeGetEnv(const char *Name) {
  auto It = Env->find(Name);
  return It == Env->end() ? nullptr : It->second.c_str();
}

} // namespace

TEST(ProfileCache, DefaultDirPrecedence) {
  std::map<std::string, std::string> E;
  Env = &E;
  EXPECT_EQ(ProfileCache::defaultDir(fakeGetEnv), "");
  E["HOME"] = "/home/u";
  EXPECT_EQ(ProfileCache::defaultDir(fakeGetEnv), "/home/u/.cache/tally");
  E["XDG_CACHE_HOME"] = "relative/cache"; // the XDG spec ignores these
  EXPECT_EQ(ProfileCache::defaultDir(fakeGetEnv), "/home/u/.cache/tally");
  E["XDG_CACHE_HOME"] = "/xdg";
  EXPECT_EQ(ProfileCache::defaultDir(fakeGetEnv), "/xdg/tally");
  E["TALLY_CACHE_DIR"] = "";
  EXPECT_EQ(ProfileCache::defaultDir(fakeGetEnv), "/xdg/tally");
  E["TALLY_CACHE_DIR"] = "/opt/tally-cache";
  EXPECT_EQ(ProfileCache::defaultDir(fakeGetEnv), "/opt/tally-cache");
  E.erase("HOME");
  E.erase("XDG_CACHE_HOME");
  EXPECT_EQ(ProfileCache::defaultDir(fakeGetEnv), "/opt/tally-cache");
  E["HOME"] = "";
  E.erase("TALLY_CACHE_DIR");
  EXPECT_EQ(ProfileCache::defaultDir(fakeGetEnv), "");
  Env = nullptr;
}

TEST(ProfileCache, PathFor) {
  EXPECT_EQ(ProfileCache::pathFor("/c", "NVIDIA H100 80GB/GPU-1a2b"),
            "/c/profile-NVIDIA_H100_80GB_GPU-1a2b.v1");
  EXPECT_EQ(ProfileCache::pathFor("/c/", "../x"), "/c/profile-.._x.v1");
  EXPECT_EQ(ProfileCache::pathFor("/c", ""), "/c/profile-unknown.v1");
  EXPECT_EQ(ProfileCache::pathFor("", "gpu"), "");
  std::string Long = ProfileCache::pathFor("/c", std::string(1000, 'a'));
  EXPECT_EQ(Long, "/c/profile-" + std::string(128, 'a') + ".v1");
}

TEST(ProfileCache, KeyOrderAndValidity) {
  ProfileKey A = key("a"), B = key("a");
  EXPECT_TRUE(A == B);
  B.Grid[2] = 2;
  EXPECT_TRUE(A < B);
  EXPECT_FALSE(B < A);
  EXPECT_FALSE(A == B);

  std::string Why;
  EXPECT_TRUE(isValidProfileKey(A));
  EXPECT_FALSE(isValidProfileKey(key("")));
  EXPECT_FALSE(isValidProfileKey(key("a\tb"), &Why));
  EXPECT_EQ(Why, "bad kernel name");
  EXPECT_FALSE(isValidProfileKey(key("a", 0), &Why));
  EXPECT_EQ(Why, "grid out of range");
  ProfileKey Big = key("a", 1, 32);
  Big.Block[1] = 64; // 2048 threads
  EXPECT_FALSE(isValidProfileKey(Big, &Why));
  EXPECT_EQ(Why, "block out of range");
  EXPECT_FALSE(isValidProfileKey(key("a", 1, 1, (1u << 20) + 1)));

  EXPECT_TRUE(isValidCandidate("ptb:w=2,c=4"));
  EXPECT_TRUE(isValidCandidate("slice:b=264"));
  EXPECT_FALSE(isValidCandidate(""));
  EXPECT_FALSE(isValidCandidate("PTB"));
  EXPECT_FALSE(isValidCandidate("ptb w=2"));
  EXPECT_FALSE(isValidCandidate(std::string(65, 'a')));
}

TEST(ProfileCache, RoundTrip) {
  TempDir T;
  ASSERT_FALSE(T.path().empty());
  // A directory that does not exist yet: save() creates it, mode 0700.
  std::string Dir = T.path() + "/cache/tally";
  std::string Path = ProfileCache::pathFor(Dir, "gpu0");
  ProfileKey K = key("gemm_tiled@3f2a9c01", 132, 256, 1024);
  K.Grid[1] = 4;
  {
    ProfileCache C(Path);
    std::string W;
    EXPECT_TRUE(C.load(W)); // missing file: an empty cache
    EXPECT_EQ(W, "");
    EXPECT_EQ(C.keys(), 0u);
    C.record(K, "original", 1000);
    C.record(K, "original", 800);
    C.record(K, "ptb:w=2,c=4", 700);
    C.record(key("other@1"), "slice:b=264", 5);
    // Refused: bad candidate, bad key.
    C.record(K, "Bad Candidate", 1);
    C.record(key("", 1), "original", 1);
    EXPECT_TRUE(C.dirty());
    // Visible before it is saved.
    ASSERT_NE(entry(C, K, "original"), nullptr);
    EXPECT_EQ(entry(C, K, "original")->Count, 2u);
    std::string E;
    ASSERT_TRUE(C.save(E)) << E;
    EXPECT_FALSE(C.dirty());
  }
  struct stat St;
  ASSERT_EQ(::stat(Dir.c_str(), &St), 0);
  EXPECT_EQ(St.st_mode & 0777, 0700u);
  EXPECT_FALSE(hasTempFiles(Dir));

  ProfileCache C(Path);
  std::string W;
  ASSERT_TRUE(C.load(W));
  EXPECT_EQ(W, "");
  EXPECT_EQ(C.keys(), 2u);
  const std::vector<ProfileEntry> *Es = C.lookup(K);
  ASSERT_NE(Es, nullptr);
  ASSERT_EQ(Es->size(), 2u);
  EXPECT_EQ((*Es)[0].Candidate, "original");
  EXPECT_EQ((*Es)[0].Count, 2u);
  EXPECT_EQ((*Es)[0].BestNs, 800u);
  EXPECT_EQ((*Es)[0].TotalNs, 1800u);
  EXPECT_EQ((*Es)[1].Candidate, "ptb:w=2,c=4");
  EXPECT_EQ((*Es)[1].Count, 1u);
  EXPECT_EQ((*Es)[1].BestNs, 700u);
  ProfileKey Other = K;
  Other.Shared = 0;
  EXPECT_EQ(C.lookup(Other), nullptr);

  std::vector<std::string> Seen;
  C.forEach([&](const ProfileKey &Key, const std::vector<ProfileEntry> &) {
    Seen.push_back(Key.Kernel);
  });
  EXPECT_EQ(Seen, (std::vector<std::string>{"gemm_tiled@3f2a9c01", "other@1"}));
}

TEST(ProfileCache, RepeatedSaveDoesNotDoubleCount) {
  TempDir T;
  std::string Path = ProfileCache::pathFor(T.path(), "gpu");
  ProfileCache C(Path);
  std::string E, W;
  C.record(key("k"), "original", 10);
  ASSERT_TRUE(C.save(E)) << E;
  ASSERT_TRUE(C.save(E)) << E; // nothing new
  C.record(key("k"), "original", 20);
  ASSERT_TRUE(C.save(E)) << E;
  ASSERT_TRUE(C.save(E)) << E;
  EXPECT_EQ(entry(C, key("k"), "original")->Count, 2u);

  ProfileCache D(Path);
  ASSERT_TRUE(D.load(W)) << W;
  const ProfileEntry *P = entry(D, key("k"), "original");
  ASSERT_NE(P, nullptr);
  EXPECT_EQ(P->Count, 2u);
  EXPECT_EQ(P->TotalNs, 30u);
  EXPECT_EQ(P->BestNs, 10u);
}

TEST(ProfileCache, TwoObjectsOneFile) {
  TempDir T;
  std::string Path = ProfileCache::pathFor(T.path(), "gpu");
  ProfileCache A(Path), B(Path);
  std::string E, W;
  ASSERT_TRUE(A.load(W));
  ASSERT_TRUE(B.load(W));
  A.record(key("a"), "original", 100);
  A.record(key("shared"), "original", 10);
  B.record(key("b"), "ptb:w=1,c=1", 200);
  B.record(key("shared"), "original", 30);
  ASSERT_TRUE(A.save(E)) << E;
  ASSERT_TRUE(B.save(E)) << E;
  // B re-read the file under the lock: its view now holds A's too.
  EXPECT_NE(B.lookup(key("a")), nullptr);
  ASSERT_TRUE(A.save(E)) << E;

  ProfileCache C(Path);
  ASSERT_TRUE(C.load(W)) << W;
  EXPECT_EQ(C.keys(), 3u);
  ASSERT_NE(entry(C, key("a"), "original"), nullptr);
  ASSERT_NE(entry(C, key("b"), "ptb:w=1,c=1"), nullptr);
  const ProfileEntry *S = entry(C, key("shared"), "original");
  ASSERT_NE(S, nullptr);
  EXPECT_EQ(S->Count, 2u);
  EXPECT_EQ(S->TotalNs, 40u);
  EXPECT_EQ(S->BestNs, 10u);

  // load() keeps measurements not yet saved.
  A.record(key("unsaved"), "original", 1);
  ASSERT_TRUE(A.load(W));
  EXPECT_NE(A.lookup(key("unsaved")), nullptr);
  EXPECT_NE(A.lookup(key("b")), nullptr);
}

// Real writers in several processes: each saves while the others do, and
// every measurement must be in the file once.
TEST(ProfileCache, ConcurrentProcesses) {
  TempDir T;
  std::string Path = ProfileCache::pathFor(T.path(), "gpu");
  constexpr int Children = 4, PerChild = 200, Saves = 5;
  std::vector<pid_t> Pids;
  for (int Child = 0; Child < Children; ++Child) {
    pid_t Pid = ::fork();
    ASSERT_GE(Pid, 0);
    if (Pid == 0) {
      // The child must leave through _exit(): gtest's state belongs to
      // the parent.
      ProfileCache C(Path);
      std::string W, E;
      C.load(W);
      int Failures = 0;
      for (int I = 0; I < PerChild; ++I) {
        ProfileKey K = key("kernel" + std::to_string(Child) + "@abc", I + 1);
        // Key I gets (I % 3) + 1 measurements.
        for (int R = 0; R <= I % 3; ++R)
          C.record(K, "ptb:w=" + std::to_string(Child) + ",c=1",
                   1000 + I * 10 + R);
        C.record(key("common@0"), "original", 7);
        if ((I + 1) % (PerChild / Saves) == 0 && !C.save(E))
          ++Failures;
      }
      ::_exit(Failures ? 1 : 0);
    }
    Pids.push_back(Pid);
  }
  for (pid_t Pid : Pids) {
    int Status = 0;
    ASSERT_EQ(::waitpid(Pid, &Status, 0), Pid);
    ASSERT_TRUE(WIFEXITED(Status));
    EXPECT_EQ(WEXITSTATUS(Status), 0) << "a child's save() failed";
  }

  ProfileCache C(Path);
  std::string W;
  ASSERT_TRUE(C.load(W)) << W;
  EXPECT_EQ(W, "");
  EXPECT_EQ(C.keys(), size_t(Children * PerChild + 1));
  size_t Records = 0;
  C.forEach([&](const ProfileKey &, const std::vector<ProfileEntry> &Es) {
    Records += Es.size();
  });
  EXPECT_EQ(Records, size_t(Children * PerChild + 1));
  for (int Child = 0; Child < Children; ++Child)
    for (int I = 0; I < PerChild; ++I) {
      ProfileKey K = key("kernel" + std::to_string(Child) + "@abc", I + 1);
      const ProfileEntry *E =
          entry(C, K, "ptb:w=" + std::to_string(Child) + ",c=1");
      ASSERT_NE(E, nullptr) << Child << " " << I;
      uint32_t N = I % 3 + 1;
      EXPECT_EQ(E->Count, N);
      EXPECT_EQ(E->BestNs, uint64_t(1000 + I * 10));
      EXPECT_EQ(E->TotalNs, N * uint64_t(1000 + I * 10) + N * (N - 1) / 2);
    }
  const ProfileEntry *Common = entry(C, key("common@0"), "original");
  ASSERT_NE(Common, nullptr);
  EXPECT_EQ(Common->Count, uint32_t(Children * PerChild));
  EXPECT_EQ(Common->TotalNs, uint64_t(Children * PerChild * 7));
  EXPECT_FALSE(hasTempFiles(T.path()));
}

TEST(ProfileCache, StaleTempFileRemoved) {
  TempDir T;
  std::string Path = ProfileCache::pathFor(T.path(), "gpu");
  writeAll(Path + ".tmp.999999", "half a file");
  ProfileCache C(Path);
  std::string E;
  C.record(key("k"), "original", 1);
  ASSERT_TRUE(C.save(E)) << E;
  EXPECT_FALSE(hasTempFiles(T.path()));
}

TEST(ProfileCache, FlippedByteDropsOneLine) {
  TempDir T;
  std::string Path = ProfileCache::pathFor(T.path(), "gpu");
  std::string Text = threeRecords();
  // A bit flip in the second record's count: still a digit, so only the
  // checksum can tell.
  size_t Line2 = Text.find('\n', Text.find('\n') + 1) + 1;
  size_t Pos = Text.find("\t2\t90\t", Line2);
  ASSERT_NE(Pos, std::string::npos);
  Text[Pos + 1] = '3';
  writeAll(Path, Text);

  ProfileCache C(Path);
  std::string W;
  ASSERT_TRUE(C.load(W));
  EXPECT_NE(W.find("dropped 1 corrupt record"), std::string::npos) << W;
  EXPECT_NE(W.find("line 3: checksum mismatch"), std::string::npos) << W;
  EXPECT_NE(entry(C, key("gemm@1"), "original"), nullptr);
  EXPECT_EQ(entry(C, key("gemm@1"), "ptb:w=2,c=4"), nullptr);
  EXPECT_NE(entry(C, key("reduce@2", 64, 128, 4096), "slice:b=264"), nullptr);

  // The next save writes the good records back and drops the bad one.
  C.record(key("new"), "original", 1);
  std::string E;
  ASSERT_TRUE(C.save(E)) << E;
  ProfileCache D(Path);
  ASSERT_TRUE(D.load(W));
  EXPECT_EQ(W, "");
  EXPECT_EQ(D.keys(), 3u);
}

TEST(ProfileCache, TruncatedLastLine) {
  TempDir T;
  std::string Path = ProfileCache::pathFor(T.path(), "gpu");
  std::string Text = threeRecords();
  writeAll(Path, Text.substr(0, Text.size() - 5));
  ProfileCache C(Path);
  std::string W;
  ASSERT_TRUE(C.load(W));
  EXPECT_NE(W.find("line 4: truncated line"), std::string::npos) << W;
  EXPECT_EQ(C.keys(), 1u);
  // Only the newline missing: the line is still refused, a writer never
  // leaves one like that.
  writeAll(Path, Text.substr(0, Text.size() - 1));
  ASSERT_TRUE(C.load(W));
  EXPECT_NE(W.find("truncated"), std::string::npos) << W;
}

TEST(ProfileCache, GarbageHeaderIsReplaced) {
  TempDir T;
  std::string Path = ProfileCache::pathFor(T.path(), "gpu");
  writeAll(Path, "this is not a profile\n" + threeRecords());
  ProfileCache C(Path);
  std::string W, E;
  EXPECT_FALSE(C.load(W));
  EXPECT_NE(W.find("bad header"), std::string::npos) << W;
  EXPECT_EQ(C.keys(), 0u);
  C.record(key("k"), "original", 5);
  ASSERT_TRUE(C.save(E)) << E;
  EXPECT_EQ(readAll(Path).rfind("tally-profile 1\n", 0), 0u);
  ProfileCache D(Path);
  ASSERT_TRUE(D.load(W)) << W;
  EXPECT_EQ(W, "");
  EXPECT_EQ(D.keys(), 1u);

  writeAll(Path, "tally-profile 2\n");
  EXPECT_FALSE(D.load(W));
  EXPECT_NE(W.find("unsupported version '2'"), std::string::npos) << W;
  writeAll(Path, "");
  EXPECT_FALSE(D.load(W));
  EXPECT_NE(W.find("empty file"), std::string::npos) << W;
}

TEST(ProfileCache, BinaryJunk) {
  TempDir T;
  std::string Path = ProfileCache::pathFor(T.path(), "gpu");
  std::string Junk;
  uint32_t X = 12345;
  for (int I = 0; I < 100000; ++I) {
    X = X * 1103515245 + 12345;
    Junk += char(X >> 24);
  }
  writeAll(Path, Junk);
  ProfileCache C(Path);
  std::string W;
  EXPECT_FALSE(C.load(W));
  EXPECT_EQ(C.keys(), 0u);

  // Junk after a good header: every line dropped, none loaded.
  writeAll(Path, "tally-profile 1\n" + Junk);
  ASSERT_TRUE(C.load(W));
  EXPECT_EQ(C.keys(), 0u);
  EXPECT_NE(W.find("dropped"), std::string::npos) << W;

  // Junk between good lines.
  std::string Good = threeRecords();
  writeAll(Path,
           Good + std::string("\x01\x02\x00\xff\t\t\n", 7) + Good.substr(16));
  ASSERT_TRUE(C.load(W));
  EXPECT_NE(W.find("dropped 1 corrupt record"), std::string::npos) << W;
  EXPECT_EQ(entry(C, key("gemm@1"), "original")->Count, 6u);
}

TEST(ProfileCache, OverlongLine) {
  std::string Text = "tally-profile 1\n" + std::string(100000, 'k') + "\n" +
                     threeRecords().substr(16);
  ProfileMap M;
  size_t Dropped;
  std::string Why;
  ASSERT_TRUE(parse(Text, M, Dropped, Why));
  EXPECT_EQ(Dropped, 1u);
  EXPECT_EQ(Why, "line 2: line too long");
  EXPECT_EQ(M.size(), 2u);

  // A kernel name over the cap, with a valid checksum, is refused too, and
  // record() ignores it.
  ProfileMap Long;
  Long[key(std::string(5000, 'k'))].push_back({"original", 1, 1, 1});
  ASSERT_TRUE(parse(formatProfileText(Long), M, Dropped, Why));
  EXPECT_EQ(Dropped, 1u);
  EXPECT_TRUE(M.empty());
  ProfileCache C("/nonexistent/x");
  C.record(key(std::string(5000, 'k')), "original", 1);
  EXPECT_EQ(C.keys(), 0u);
}

TEST(ProfileCache, BadFieldsWithGoodChecksums) {
  // Lines a buggy or hostile writer could produce: the checksum is right,
  // the content is not.
  auto One = [](ProfileKey K, ProfileEntry E) {
    ProfileMap M;
    M[K].push_back(E);
    std::string Text = formatProfileText(M);
    ProfileMap Out;
    size_t Dropped;
    std::string Why;
    EXPECT_TRUE(parse(Text, Out, Dropped, Why));
    EXPECT_TRUE(Out.empty());
    EXPECT_EQ(Dropped, 1u);
    return Why;
  };
  EXPECT_EQ(One(key("k"), {"ptb w=2", 1, 1, 1}), "line 2: bad candidate");
  EXPECT_EQ(One(key("k"), {"PTB", 1, 1, 1}), "line 2: bad candidate");
  EXPECT_EQ(One(key("k"), {"original", 0, 0, 0}), "line 2: count out of range");
  EXPECT_EQ(One(key("k"), {"original", 2, 10, 15}),
            "line 2: best time above the mean");
  EXPECT_EQ(One(key("k"), {"original", 1, 1, 2000000000000ull}),
            "line 2: time out of range");
  EXPECT_EQ(One(key("k", 0), {"original", 1, 1, 1}),
            "line 2: grid out of range");
  EXPECT_EQ(One(key("k", 1, 2000), {"original", 1, 1, 1}),
            "line 2: block out of range");
  EXPECT_EQ(One(key("k", 1, 1, 1u << 30), {"original", 1, 1, 1}),
            "line 2: shared memory size out of range");
  EXPECT_EQ(One(key("a b"), {"original", 1, 1, 1}), "line 2: bad kernel name");

  // Hand-made lines: numbers with signs or leading zeros, a missing field.
  auto Line = [](std::string Body) {
    uint64_t H = 0xcbf29ce484222325ull;
    for (unsigned char C : Body)
      H = (H ^ C) * 0x100000001b3ull;
    char Hex[17];
    std::snprintf(Hex, sizeof(Hex), "%016llx", (unsigned long long)H);
    return Body + "\t" + Hex + "\n";
  };
  ProfileMap Out;
  size_t Dropped;
  std::string Why;
  ASSERT_TRUE(parse(
      "tally-profile 1\n" + Line("k\t1,1,1\t1,1,1\t0\toriginal\t1\t5\t5") +
          Line("k\t1,1,1\t1,1,1\t0\toriginal\t01\t5\t5") +
          Line("k\t1,1,1\t1,1,1\t0\toriginal\t+1\t5\t5") +
          Line("k\t1,1\t1,1,1\t0\toriginal\t1\t5\t5") +
          Line("k\t1,1,1\t1,1,1\toriginal\t1\t5\t5") +
          Line("k\t1,1,1\t1,1,1\t0\toriginal\t1\t5\t5\t9") +
          Line("k\t1,1,1\t1,1,1\t0\toriginal\t1\t5\t99999999999999999999"),
      Out, Dropped, Why));
  EXPECT_EQ(Dropped, 6u);
  EXPECT_EQ(Why, "line 3: bad number");
  ASSERT_EQ(Out.size(), 1u);
  EXPECT_EQ(Out.begin()->second.at(0).Count, 1u);
}

TEST(ProfileCache, DuplicateLinesMerge) {
  std::string Body = threeRecords().substr(16);
  ProfileMap M;
  size_t Dropped;
  std::string Why;
  ASSERT_TRUE(parse("tally-profile 1\n" + Body + Body, M, Dropped, Why));
  EXPECT_EQ(Dropped, 0u);
  EXPECT_EQ(Why, "");
  const ProfileEntry &E = M.at(key("gemm@1")).at(0);
  EXPECT_EQ(E.Candidate, "original");
  EXPECT_EQ(E.Count, 6u);
  EXPECT_EQ(E.TotalNs, 660u);
  EXPECT_EQ(E.BestNs, 100u);
  // The format is canonical: what is read is written back the same.
  ProfileMap Again;
  std::string Text = formatProfileText(M);
  ASSERT_TRUE(parse(Text, Again, Dropped, Why));
  EXPECT_EQ(Dropped, 0u);
  EXPECT_EQ(formatProfileText(Again), Text);
}

TEST(ProfileCache, CountCapKeepsTheMean) {
  TempDir T;
  std::string Path = ProfileCache::pathFor(T.path(), "gpu");
  ProfileMap M;
  uint32_t Max = profile_limits::MaxCount;
  M[key("k")].push_back({"original", Max, 100, uint64_t(Max) * 150});
  writeAll(Path, formatProfileText(M));
  ProfileCache C(Path);
  std::string W, E;
  ASSERT_TRUE(C.load(W)) << W;
  C.record(key("k"), "original", 150);
  C.record(key("k"), "original", 90);
  ASSERT_TRUE(C.save(E)) << E;
  const ProfileEntry *P = entry(C, key("k"), "original");
  ASSERT_NE(P, nullptr);
  EXPECT_LE(P->Count, Max);
  EXPECT_GE(P->Count, Max / 2);
  EXPECT_EQ(P->BestNs, 90u);
  EXPECT_NEAR(double(P->TotalNs) / P->Count, 150.0, 0.1);
  EXPECT_LE(P->BestNs * P->Count, P->TotalNs);
  ProfileCache D(Path);
  ASSERT_TRUE(D.load(W));
  EXPECT_EQ(W, "");
}

TEST(ProfileCache, RecordCap) {
  std::string Text = "tally-profile 1\n";
  ProfileMap M;
  for (size_t I = 0; I < profile_limits::MaxRecords + 10; ++I)
    M[key("k" + std::to_string(I))].push_back({"original", 1, 1, 1});
  Text = formatProfileText(M);
  ProfileMap Out;
  size_t Dropped;
  std::string Why;
  ASSERT_TRUE(parse(Text, Out, Dropped, Why));
  EXPECT_EQ(Out.size(), profile_limits::MaxRecords);
  EXPECT_EQ(Dropped, 10u);
  EXPECT_NE(Why.find("more than 100000 records"), std::string::npos) << Why;

  // save() keeps the file within the cap: a new record is not added.
  TempDir T;
  std::string Path = ProfileCache::pathFor(T.path(), "gpu");
  M.erase(M.begin(), std::next(M.begin(), 10));
  writeAll(Path, formatProfileText(M));
  ProfileCache C(Path);
  std::string W, E;
  ASSERT_TRUE(C.load(W)) << W;
  C.record(key("new"), "original", 1);
  C.record(M.begin()->first, "original", 1); // on disk: still counted
  ASSERT_TRUE(C.save(E)) << E;
  EXPECT_EQ(C.lookup(key("new")), nullptr);
  EXPECT_EQ(C.lookup(M.begin()->first)->at(0).Count, 2u);
  ProfileCache D(Path);
  ASSERT_TRUE(D.load(W));
  EXPECT_EQ(W, "");
  EXPECT_EQ(D.keys(), profile_limits::MaxRecords);
}

TEST(ProfileCache, SizeCap) {
  // Records of long kernel names reach the byte cap before the record cap.
  ProfileMap M;
  std::string Long(4000, 'k');
  for (int I = 0; I < 8400; ++I)
    M[key(Long + std::to_string(I))].push_back({"original", 1, 1, 1});
  std::string Text = formatProfileText(M);
  ASSERT_GT(Text.size(), profile_limits::MaxFileBytes);
  ProfileMap Out;
  size_t Dropped;
  std::string Why;
  ASSERT_TRUE(parse(Text, Out, Dropped, Why));
  EXPECT_NE(Why.find("larger than 32 MiB"), std::string::npos) << Why;
  EXPECT_EQ(Dropped, 1u);
  EXPECT_GT(Out.size(), 8000u);
  EXPECT_LT(Out.size(), 8400u);

  // save() keeps the file within the cap: a new long record is not added,
  // and every reader loads all of the file.
  TempDir T;
  std::string Path = ProfileCache::pathFor(T.path(), "gpu");
  writeAll(Path, formatProfileText(Out));
  ProfileCache C(Path);
  std::string W, E;
  ASSERT_TRUE(C.load(W)) << W;
  EXPECT_EQ(W, "");
  C.record(key(std::string(4096, 'n')), "original", 1);
  ASSERT_TRUE(C.save(E)) << E;
  EXPECT_EQ(C.lookup(key(std::string(4096, 'n'))), nullptr);
  ProfileCache D(Path);
  ASSERT_TRUE(D.load(W));
  EXPECT_EQ(W, "");
  EXPECT_EQ(D.keys(), Out.size());
}

TEST(ProfileCache, NotAFile) {
  TempDir T;
  std::string Path = ProfileCache::pathFor(T.path(), "gpu");
  ASSERT_EQ(::mkdir(Path.c_str(), 0700), 0);
  ProfileCache C(Path);
  std::string W, E;
  EXPECT_FALSE(C.load(W));
  EXPECT_NE(W.find("not a regular file"), std::string::npos) << W;
  C.record(key("k"), "original", 1);
  EXPECT_FALSE(C.save(E));
  EXPECT_NE(E.find("not a regular file"), std::string::npos) << E;
  EXPECT_TRUE(C.dirty()); // kept for a later save
  EXPECT_FALSE(hasTempFiles(T.path()));

  // A FIFO in its place must not block the program.
  std::string Fifo = ProfileCache::pathFor(T.path(), "fifo");
  ASSERT_EQ(::mkfifo(Fifo.c_str(), 0600), 0);
  ProfileCache F(Fifo);
  EXPECT_FALSE(F.load(W));
  EXPECT_NE(W.find("not a regular file"), std::string::npos) << W;

  ProfileCache None("");
  EXPECT_FALSE(None.load(W));
  None.record(key("k"), "original", 1);
  EXPECT_FALSE(None.save(E));
}

TEST(ProfileCache, Clear) {
  TempDir T;
  std::string Path = ProfileCache::pathFor(T.path(), "gpu");
  std::string E, W;
  EXPECT_TRUE(ProfileCache::clear(Path, E)) << E; // nothing there
  ProfileCache C(Path);
  C.record(key("k"), "original", 1);
  ASSERT_TRUE(C.save(E)) << E;
  ASSERT_EQ(::access(Path.c_str(), F_OK), 0);
  EXPECT_TRUE(ProfileCache::clear(Path, E)) << E;
  EXPECT_NE(::access(Path.c_str(), F_OK), 0);
  ProfileCache D(Path);
  EXPECT_TRUE(D.load(W));
  EXPECT_EQ(D.keys(), 0u);
  EXPECT_FALSE(ProfileCache::clear("", E));
  EXPECT_TRUE(ProfileCache::clear(T.path() + "/no/such/dir/profile-x.v1", E))
      << E;
}

TEST(ProfileCache, Print) {
  ProfileMap M;
  M[key("gemm@1")].push_back({"original", 2, 10500, 23000});   // mean 11.5
  M[key("gemm@1")].push_back({"ptb:w=2,c=4", 4, 9000, 40000}); // mean 10
  TempDir T;
  std::string Path = ProfileCache::pathFor(T.path(), "gpu");
  writeAll(Path, formatProfileText(M));
  ProfileCache C(Path);
  std::string W;
  ASSERT_TRUE(C.load(W));
  std::ostringstream OS;
  C.print(OS);
  EXPECT_EQ(OS.str(),
            "gemm@1 grid=128,1,1 block=256,1,1 shared=0    original count=2 "
            "best=10.500us mean=11.500us\n"
            "gemm@1 grid=128,1,1 block=256,1,1 shared=0  * ptb:w=2,c=4 "
            "count=4 best=9.000us mean=10.000us\n");
}
