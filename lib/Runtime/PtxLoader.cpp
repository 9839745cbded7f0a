//===- PtxLoader.cpp - PTX loaded at run time gets Tally's variants -------===//
//
// Recognising PTX images, the cache entry format, and running tally-opt as
// a helper process. See PtxLoader.h; docs/ptx-cache.md has the format.
//
//===----------------------------------------------------------------------===//

#include "tally/Runtime/PtxLoader.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>

extern char **environ;

namespace tally::rt {

//===----------------------------------------------------------------------===//
// Recognising PTX
//===----------------------------------------------------------------------===//

namespace {
constexpr size_t ScanLimit = 64 * 1024;

/// Whether the bytes at \p P start with \p Magic; reads no byte past the
/// first that differs (a short NUL-terminated string is never overrun).
bool startsWith(const unsigned char *P, const unsigned char *Magic, size_t N) {
  for (size_t I = 0; I < N; ++I)
    if (P[I] != Magic[I])
      return false;
  return true;
}

bool isSpace(char C) { return C == ' ' || C == '\t' || C == '\n' || C == '\r' || C == '\f' || C == '\v'; }
bool isIdent(char C) {
  return (C >= 'a' && C <= 'z') || (C >= 'A' && C <= 'Z') || (C >= '0' && C <= '9') || C == '_' ||
         C == '$' || C == '%' || C == '.';
}

/// A scanner over PTX text that skips comments and string literals.
struct Scanner {
  std::string_view S;
  size_t I = 0;

  /// Moves to the next character that is not white space or in a comment.
  void skipBlank() {
    while (I < S.size()) {
      if (isSpace(S[I])) {
        ++I;
      } else if (S.compare(I, 2, "//") == 0) {
        size_t E = S.find('\n', I);
        I = E == std::string_view::npos ? S.size() : E + 1;
      } else if (S.compare(I, 2, "/*") == 0) {
        size_t E = S.find("*/", I + 2);
        I = E == std::string_view::npos ? S.size() : E + 2;
      } else {
        return;
      }
    }
  }

  /// The next token: an identifier or directive, a string, or one character.
  std::string_view next() {
    skipBlank();
    if (I >= S.size())
      return {};
    size_t B = I;
    if (S[I] == '"') {
      ++I;
      while (I < S.size() && S[I] != '"' && S[I] != '\n')
        I += S[I] == '\\' ? 2 : 1;
      I = std::min(S.size(), I + 1);
    } else if (isIdent(S[I])) {
      while (I < S.size() && isIdent(S[I]))
        ++I;
    } else {
      ++I;
    }
    return S.substr(B, I - B);
  }
};
} // namespace

std::optional<std::string_view> ptxImage(const void *Image) {
  if (!Image)
    return std::nullopt;
  const auto *P = static_cast<const unsigned char *>(Image);
  static const unsigned char Elf[] = {0x7f, 'E', 'L', 'F'};
  static const unsigned char Fatbin[] = {0x50, 0xed, 0x55, 0xba};
  static const unsigned char Wrapper[] = {0xb1, 0x43, 0x62, 0x46};
  if (startsWith(P, Elf, 4) || startsWith(P, Fatbin, 4) || startsWith(P, Wrapper, 4))
    return std::nullopt;
  // Text: the first token after comments must be .version, within the scan
  // limit and before the terminating NUL.
  size_t N = ::strnlen(reinterpret_cast<const char *>(P), ScanLimit);
  Scanner Sc{std::string_view(reinterpret_cast<const char *>(P), N)};
  if (Sc.next() != ".version")
    return std::nullopt;
  if (N == ScanLimit)
    N = std::strlen(reinterpret_cast<const char *>(P));
  return std::string_view(reinterpret_cast<const char *>(P), N);
}

PtxHash hashPtx(std::string_view Text) {
  PtxHash H;
  H.A = 0xcbf29ce484222325ull;
  H.B = 0x6a09e667f3bcc909ull;
  for (unsigned char C : Text) {
    H.A = (H.A ^ C) * 0x100000001b3ull;
    H.B = (H.B + C + 1) * 0x9e3779b97f4a7c15ull;
    H.B ^= H.B >> 29;
  }
  return H;
}

std::string ptxTarget(std::string_view Ptx) {
  Scanner Sc{Ptx};
  for (std::string_view T = Sc.next(); !T.empty(); T = Sc.next())
    if (T == ".target") {
      // A target is an identifier (sm_90a); anything else, such as a string
      // literal in malformed PTX, is no target at all.
      std::string_view N = Sc.next();
      if (N.empty() || !isIdent(N[0]))
        return std::string();
      return std::string(N);
    }
  return std::string();
}

std::vector<std::string> ptxEntryNames(std::string_view Ptx) {
  std::vector<std::string> Names;
  Scanner Sc{Ptx};
  for (std::string_view T = Sc.next(); !T.empty(); T = Sc.next())
    if (T == ".entry") {
      std::string_view N = Sc.next();
      if (!N.empty() && isIdent(N[0]))
        Names.emplace_back(N);
    }
  return Names;
}

//===----------------------------------------------------------------------===//
// Cache entries
//===----------------------------------------------------------------------===//

namespace {
constexpr std::string_view Magic = "tally-ptx-cache 1\n";

void appendHex(std::string &Out, uint64_t V) {
  for (int I = 0; I < 16; ++I)
    Out += "0123456789abcdef"[(V >> (60 - 4 * I)) & 0xf];
}

uint64_t bodyHash(std::string_view Body) { return hashPtx(Body).A; }

/// Takes the line at the front of \p S (without its newline).
bool takeLine(std::string_view &S, std::string_view &Line) {
  size_t E = S.find('\n');
  if (E == std::string_view::npos)
    return false;
  Line = S.substr(0, E);
  S.remove_prefix(E + 1);
  return true;
}

bool parseDec(std::string_view S, uint64_t &V) {
  if (S.empty() || S.size() > 19 || (S.size() > 1 && S[0] == '0'))
    return false;
  auto R = std::from_chars(S.data(), S.data() + S.size(), V);
  return R.ec == std::errc() && R.ptr == S.data() + S.size();
}

bool parseHex(std::string_view S, uint64_t &V) {
  // Exactly as written: 16 lower-case digits.
  if (S.size() != 16 || S.find_first_not_of("0123456789abcdef") != std::string_view::npos)
    return false;
  auto R = std::from_chars(S.data(), S.data() + S.size(), V, 16);
  return R.ec == std::errc() && R.ptr == S.data() + S.size();
}

/// Splits "<word> <rest>" and checks the word.
bool field(std::string_view Line, std::string_view Word, std::string_view &Rest) {
  if (Line.size() <= Word.size() || Line.compare(0, Word.size(), Word) != 0 ||
      Line[Word.size()] != ' ')
    return false;
  Rest = Line.substr(Word.size() + 1);
  return true;
}

/// Splits \p S at single spaces into exactly \p N parts.
bool split(std::string_view S, std::string_view *Parts, size_t N) {
  for (size_t I = 0; I < N; ++I) {
    size_t E = I + 1 < N ? S.find(' ') : S.size();
    if (E == std::string_view::npos || E == 0)
      return false;
    Parts[I] = S.substr(0, E);
    S.remove_prefix(I + 1 < N ? E + 1 : E);
  }
  return S.empty();
}
} // namespace

std::string encodePtxCacheEntry(const PtxHash &Src, uint64_t SrcBytes, std::string_view Key,
                                const PtxCacheEntry &E) {
  std::string Out(Magic);
  Out += "source " + std::to_string(SrcBytes) + ' ';
  appendHex(Out, Src.A);
  Out += ' ';
  appendHex(Out, Src.B);
  Out += "\nkey ";
  for (char C : Key)
    Out += C == '\n' ? ' ' : C;
  Out += E.Ok ? "\nstatus ok\n" : "\nstatus refused\n";
  Out += "body " + std::to_string(E.Body.size()) + ' ';
  appendHex(Out, bodyHash(E.Body));
  Out += '\n';
  Out += E.Body;
  return Out;
}

std::optional<PtxCacheEntry> decodePtxCacheEntry(std::string_view File, const PtxHash &Src,
                                                 uint64_t SrcBytes, std::string_view Key,
                                                 std::string &Why) {
  auto Bad = [&](const char *W) -> std::optional<PtxCacheEntry> {
    Why = W;
    return std::nullopt;
  };
  if (File.compare(0, Magic.size(), Magic) != 0)
    return Bad("not a Tally PTX cache entry of version 1");
  File.remove_prefix(Magic.size());
  std::string_view Line, Rest, P[3];
  uint64_t Bytes = 0, A = 0, B = 0;
  if (!takeLine(File, Line) || !field(Line, "source", Rest) || !split(Rest, P, 3) ||
      !parseDec(P[0], Bytes) || !parseHex(P[1], A) || !parseHex(P[2], B))
    return Bad("bad source line");
  if (Bytes != SrcBytes || A != Src.A || B != Src.B)
    return Bad("for another source");
  std::string KeyLine(Key);
  for (char &C : KeyLine)
    if (C == '\n')
      C = ' ';
  if (!takeLine(File, Line) || !field(Line, "key", Rest))
    return Bad("bad key line");
  if (Rest != KeyLine)
    return Bad("for another architecture or version");
  PtxCacheEntry E;
  if (!takeLine(File, Line))
    return Bad("bad status line");
  if (Line == "status ok")
    E.Ok = true;
  else if (Line != "status refused")
    return Bad("bad status line");
  uint64_t BodyBytes = 0, Sum = 0;
  if (!takeLine(File, Line) || !field(Line, "body", Rest) || !split(Rest, P, 2) ||
      !parseDec(P[0], BodyBytes) || !parseHex(P[1], Sum))
    return Bad("bad body line");
  if (BodyBytes != File.size())
    return Bad("truncated or overlong body");
  if (bodyHash(File) != Sum)
    return Bad("body checksum mismatch");
  E.Body.assign(File);
  return E;
}

std::optional<PtxCacheEntry> readPtxCacheEntry(std::string_view File, std::string &Key,
                                               std::string &Why) {
  std::string_view Rest = File, Line, Src, P[3];
  uint64_t Bytes = 0;
  PtxHash H;
  if (Rest.compare(0, Magic.size(), Magic) != 0) {
    Why = "not a Tally PTX cache entry of version 1";
    return std::nullopt;
  }
  Rest.remove_prefix(Magic.size());
  if (!takeLine(Rest, Line) || !field(Line, "source", Src) || !split(Src, P, 3) ||
      !parseDec(P[0], Bytes) || !parseHex(P[1], H.A) || !parseHex(P[2], H.B)) {
    Why = "bad source line";
    return std::nullopt;
  }
  std::string_view K;
  if (!takeLine(Rest, Line) || !field(Line, "key", K)) {
    Why = "bad key line";
    return std::nullopt;
  }
  Key.assign(K);
  return decodePtxCacheEntry(File, H, Bytes, Key, Why);
}

//===----------------------------------------------------------------------===//
// The helper process
//===----------------------------------------------------------------------===//

bool runHelper(const std::vector<std::string> &Argv, const std::string &StderrPath,
               unsigned TimeoutSeconds, std::string &Why, bool &ExitedOne, bool &Unknown) {
  ExitedOne = Unknown = false;
  if (Argv.empty()) {
    Why = "no command";
    return false;
  }
  std::vector<char *> Args;
  for (const std::string &A : Argv)
    Args.push_back(const_cast<char *>(A.c_str()));
  Args.push_back(nullptr);
  // The environment without LD_PRELOAD: the helper must not load libtally.
  std::vector<char *> Env;
  for (char **E = environ; E && *E; ++E)
    if (std::strncmp(*E, "LD_PRELOAD=", 11) != 0)
      Env.push_back(*E);
  Env.push_back(nullptr);

  posix_spawn_file_actions_t Fa;
  if (posix_spawn_file_actions_init(&Fa) != 0) {
    Why = "cannot prepare the helper process";
    return false;
  }
  posix_spawn_file_actions_addopen(&Fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&Fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&Fa, 2, StderrPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  posix_spawnattr_t At;
  posix_spawnattr_init(&At);
  // Default signal handling in the helper, whatever the application set.
  sigset_t Def;
  sigemptyset(&Def);
  for (int S : {SIGCHLD, SIGPIPE, SIGTERM, SIGINT, SIGHUP})
    sigaddset(&Def, S);
  sigset_t None;
  sigemptyset(&None);
  posix_spawnattr_setsigdefault(&At, &Def);
  posix_spawnattr_setsigmask(&At, &None);
  posix_spawnattr_setflags(&At, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  pid_t Pid = -1;
  int Err = posix_spawn(&Pid, Args[0], &Fa, &At, Args.data(), Env.data());
  posix_spawn_file_actions_destroy(&Fa);
  posix_spawnattr_destroy(&At);
  if (Err != 0) {
    Why = std::string("cannot run ") + Argv[0] + ": " + std::strerror(Err);
    return false;
  }

  auto Start = std::chrono::steady_clock::now();
  auto Limit = std::chrono::seconds(TimeoutSeconds);
  long SleepUs = 200;
  auto Nap = [&] {
    timespec Ts{0, SleepUs * 1000};
    ::nanosleep(&Ts, nullptr);
    SleepUs = std::min(SleepUs * 2, 20000L);
  };
  for (;;) {
    int St = 0;
    pid_t R = ::waitpid(Pid, &St, WNOHANG);
    if (R == Pid) {
      if (WIFEXITED(St) && WEXITSTATUS(St) == 0)
        return true;
      if (WIFEXITED(St)) {
        ExitedOne = WEXITSTATUS(St) == 1;
        Why = std::string(Argv[0]) + " exited with status " + std::to_string(WEXITSTATUS(St));
      } else {
        Why = std::string(Argv[0]) + " was killed by signal " + std::to_string(WTERMSIG(St));
      }
      return false;
    }
    if (R < 0 && errno == EINTR)
      continue;
    if (R < 0) {
      // Reaped by the application (SIGCHLD ignored, or its own waitpid):
      // wait until it is gone; the caller judges by the output.
      Unknown = true;
      while (::kill(Pid, 0) == 0 && std::chrono::steady_clock::now() - Start < Limit)
        Nap();
      if (::kill(Pid, 0) == 0) {
        ::kill(Pid, SIGKILL);
        Unknown = false;
        Why = std::string(Argv[0]) + " did not finish within " + std::to_string(TimeoutSeconds) +
              " s";
        return false;
      }
      Why = "the helper's exit status was taken by the application";
      return false;
    }
    if (std::chrono::steady_clock::now() - Start >= Limit) {
      ::kill(Pid, SIGKILL);
      while (::waitpid(Pid, &St, 0) < 0 && errno == EINTR) {
      }
      Why = std::string(Argv[0]) + " did not finish within " + std::to_string(TimeoutSeconds) +
            " s";
      return false;
    }
    Nap();
  }
}

//===----------------------------------------------------------------------===//
// PtxTransformer
//===----------------------------------------------------------------------===//

namespace {
bool readWhole(const std::string &Path, std::string &Out) {
  int Fd = ::open(Path.c_str(), O_RDONLY | O_CLOEXEC);
  if (Fd < 0)
    return false;
  Out.clear();
  char Buf[65536];
  for (;;) {
    ssize_t N = ::read(Fd, Buf, sizeof Buf);
    if (N < 0 && errno == EINTR)
      continue;
    if (N < 0) {
      ::close(Fd);
      return false;
    }
    if (N == 0)
      break;
    Out.append(Buf, size_t(N));
  }
  ::close(Fd);
  return true;
}

bool writeWhole(const std::string &Path, std::string_view Data) {
  int Fd = ::open(Path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (Fd < 0)
    return false;
  while (!Data.empty()) {
    ssize_t N = ::write(Fd, Data.data(), Data.size());
    if (N < 0 && errno == EINTR)
      continue;
    if (N <= 0) {
      ::close(Fd);
      ::unlink(Path.c_str());
      return false;
    }
    Data.remove_prefix(size_t(N));
  }
  if (::close(Fd) != 0) {
    ::unlink(Path.c_str());
    return false;
  }
  return true;
}

/// mkdir -p with mode 0700 for what it creates.
bool makeDirs(const std::string &Dir) {
  if (Dir.empty())
    return false;
  for (size_t I = 1; I <= Dir.size(); ++I)
    if (I == Dir.size() || Dir[I] == '/') {
      std::string Part = Dir.substr(0, I);
      if (::mkdir(Part.c_str(), 0700) != 0 && errno != EEXIST)
        return false;
    }
  struct stat St;
  return ::stat(Dir.c_str(), &St) == 0 && S_ISDIR(St.st_mode) && ::access(Dir.c_str(), W_OK) == 0;
}

/// The first line of \p Text that says "error:", else its last non-empty
/// line; at most 400 characters.
std::string errorLine(const std::string &Text) {
  size_t At = Text.find("error:");
  size_t B, E;
  if (At != std::string::npos) {
    B = Text.rfind('\n', At);
    B = B == std::string::npos ? 0 : B + 1;
    E = Text.find('\n', At);
    E = E == std::string::npos ? Text.size() : E;
  } else {
    size_t Last = Text.find_last_not_of(" \t\r\n");
    if (Last == std::string::npos)
      return std::string();
    E = Last + 1;
    B = Text.rfind('\n', Last);
    B = B == std::string::npos ? 0 : B + 1;
  }
  std::string L = Text.substr(B, E - B);
  return L.size() > 400 ? L.substr(0, 397) + "..." : L;
}

/// The number of "sm_NN" (no suffix), or -1.
int plainSm(const std::string &Arch) {
  if (Arch.size() < 4 || Arch.compare(0, 3, "sm_") != 0)
    return -1;
  int V = 0;
  for (size_t I = 3; I < Arch.size(); ++I) {
    if (Arch[I] < '0' || Arch[I] > '9' || V > 10000)
      return -1;
    V = V * 10 + (Arch[I] - '0');
  }
  return V;
}

std::atomic<unsigned> TempCounter{0};
} // namespace

PtxTransformer::PtxTransformer(Options Opt) : O(std::move(Opt)) {
  struct stat St;
  if (!O.Helper.empty() && ::stat(O.Helper.c_str(), &St) == 0 && S_ISREG(St.st_mode) &&
      ::access(O.Helper.c_str(), X_OK) == 0)
    HelperId = std::to_string(St.st_size) + "-" +
               std::to_string(uint64_t(St.st_mtim.tv_sec) * 1000000000ull + St.st_mtim.tv_nsec);
}

std::string PtxTransformer::keyFor(const std::string &DeviceArch) const {
  return "arch=" + DeviceArch + " tally=" TALLY_VERSION_STRING " helper=" + HelperId;
}

std::string PtxTransformer::entryPath(const PtxHash &H, const std::string &Key) const {
  std::string P = O.CacheDir;
  if (!P.empty() && P.back() != '/')
    P += '/';
  appendHex(P, H.A);
  appendHex(P, hashPtx(Key).A ^ H.B);
  return P + ".ptxc";
}

PtxTransformer::Result PtxTransformer::transform(std::string_view Ptx,
                                                 const std::string &DeviceArch) {
  auto T0 = std::chrono::steady_clock::now();
  Result R;
  auto Done = [&]() -> Result {
    R.Millis = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - T0)
                   .count();
    return std::move(R);
  };
  try {
    PtxHash H = hashPtx(Ptx);
    std::string Key = keyFor(DeviceArch);
    bool Cache = O.UseCache && makeDirs(O.CacheDir);
    std::string Entry = Cache ? entryPath(H, Key) : std::string();
    if (Cache) {
      std::string File, Why;
      if (readWhole(Entry, File))
        if (auto E = decodePtxCacheEntry(File, H, Ptx.size(), Key, Why)) {
          R.FromCache = true;
          R.What = E->Ok ? Result::Transformed : Result::Refused;
          (E->Ok ? R.Ptx : R.Why) = std::move(E->Body);
          return Done();
        }
    }
    if (HelperId.empty()) {
      R.Why = O.Helper.empty() ? "no tally-opt to transform it with (set TALLY_OPT)"
                               : "no tally-opt at " + O.Helper;
      return Done();
    }

    // Work files: in the cache folder (renamed into place from there), else
    // in a private temporary folder.
    std::string Dir = Cache ? O.CacheDir : std::string();
    std::string TmpDir;
    if (Dir.empty()) {
      const char *T = std::getenv("TMPDIR");
      std::string Tpl = std::string(T && *T == '/' ? T : "/tmp") + "/tally-ptx.XXXXXX";
      std::vector<char> Buf(Tpl.begin(), Tpl.end());
      Buf.push_back('\0');
      if (!::mkdtemp(Buf.data())) {
        R.Why = "cannot make a temporary folder for tally-opt";
        return Done();
      }
      Dir = TmpDir = Buf.data();
    }
    if (Dir.back() != '/')
      Dir += '/';
    std::string Base = Dir + ".tmp-" + std::to_string(::getpid()) + "-" +
                       std::to_string(TempCounter.fetch_add(1)) + "-";
    std::string In = Base + "in.ptx", Out = Base + "out.ptx", Err = Base + "err.txt";
    auto Cleanup = [&] {
      for (const std::string *P : {&In, &Out, &Err})
        ::unlink(P->c_str());
      if (!TmpDir.empty())
        ::rmdir(TmpDir.c_str());
    };
    if (!writeWhole(In, Ptx)) {
      Cleanup();
      R.Why = "cannot write " + In;
      return Done();
    }
    std::vector<std::string> Argv = {O.Helper, "-q"};
    // Variants compiled for the GPU the module runs on, when the PTX allows
    // it (a plain sm_NN target up to the GPU's); else the module's target.
    int Want = plainSm(ptxTarget(Ptx)), Have = plainSm(DeviceArch);
    if (Want > 0 && Have >= Want) {
      Argv.push_back("--arch");
      Argv.push_back(DeviceArch);
    }
    Argv.insert(Argv.end(), {In, "-o", Out});
    bool ExitedOne = false, Unknown = false;
    std::string Why;
    bool Ran = runHelper(Argv, Err, O.TimeoutSeconds, Why, ExitedOne, Unknown);
    std::string Text, ErrText;
    bool HaveOut = (Ran || Unknown) && readWhole(Out, Text);
    readWhole(Err, ErrText);
    // A Tally bug (tally-opt asks for the input with its report): the
    // input stays in the cache folder, and the warning says where and
    // gives ptxas's first complaint (the error's second line on).
    std::string Internal;
    // ("internal error: ptxas accepts the input but rejects ...", "internal
    // error in a Tally rewrite: ...")
    if (size_t At = ErrText.find("internal error"); ExitedOne && At != std::string::npos) {
      // ptxas's lines read "ptxas FILE, line N; error   : ...".
      size_t E = ErrText.find("error", ErrText.find('\n', At));
      if (E != std::string::npos) {
        size_t B = ErrText.rfind('\n', E) + 1, End = ErrText.find('\n', E);
        Internal += ": " + ErrText.substr(B, std::min<size_t>(End - B, 300));
      }
      std::string Kept = Dir + "failed-";
      appendHex(Kept, H.A);
      Kept += ".ptx";
      if (Cache && ::rename(In.c_str(), Kept.c_str()) == 0)
        Internal += " (the input is kept for a report: " + Kept + ")";
    }
    Cleanup();
    if (HaveOut) {
      // Every kernel of the original must be there, and the metadata.
      std::vector<std::string> Was = ptxEntryNames(Ptx), Is = ptxEntryNames(Text);
      bool AllThere = Text.find("__tally_metadata") != std::string::npos;
      for (const std::string &N : Was)
        AllThere = AllThere && std::find(Is.begin(), Is.end(), N) != Is.end();
      if (!AllThere) {
        R.Why = "tally-opt's output lacks kernels of the original";
        return Done();
      }
      R.What = Result::Transformed;
      R.Ptx = std::move(Text);
    } else if (std::string L = errorLine(ErrText);
               ExitedOne && L.compare(0, In.size() + 1, In + ":") == 0) {
      // An error at a place in the PTX (file:line:col): about the module
      // itself, so it is cached; anything else (no ptxas, a crash, a time
      // out) may go away and is not.
      R.What = Result::Refused;
      R.Why = "tally-opt: <ptx>" + L.substr(In.size()) + Internal;
    } else {
      R.Why = (L.empty() ? Why : Why + " (" + L + ")") + Internal;
      return Done();
    }
    if (Cache) {
      PtxCacheEntry E;
      E.Ok = R.What == Result::Transformed;
      E.Body = E.Ok ? R.Ptx : R.Why;
      std::string Tmp = Base + "entry";
      if (writeWhole(Tmp, encodePtxCacheEntry(H, Ptx.size(), Key, E)) &&
          ::rename(Tmp.c_str(), Entry.c_str()) != 0)
        ::unlink(Tmp.c_str());
    }
    return Done();
  } catch (...) {
    // Out of memory: the caller loads the original.
    R = Result();
    R.Why = "out of memory";
    return Done();
  }
}

} // namespace tally::rt
