//===- PtxLoader.h - PTX loaded at run time gets Tally's variants -*- C++ -*-===//
//
// Programs that make kernels at run time (NVRTC, CuPy with PTX, Numba)
// hand PTX text to the driver: cuModuleLoadData(Ex), cuLibraryLoadData,
// cuLinkAddData. Before the driver sees it, the runtime gives the module
// the variants and the embedded metadata tally-opt adds ahead of time.
//
// The runtime does not link LLVM: tally-opt runs as a helper process (with
// a time limit, without LD_PRELOAD), and what it made is kept in an on-disk
// cache keyed by the PTX's hash, the GPU's architecture and the Tally
// version (with the helper's size and modification time), so each module
// is transformed once per machine. Modules tally-opt refuses are cached as
// refused, with its reason. Nothing here calls the driver: the runtime
// (ModuleLoad.cpp) decides when to ask and what to load.
//
// A cache entry is one file, <dir>/<32 hex digits>.ptxc (from the source's
// hash and the key), written under a
// temporary name and renamed into place (concurrent writers: every rename
// is a complete entry; the last one stays). Format (docs/ptx-cache.md):
//
//   tally-ptx-cache 1\n
//   source <bytes> <hash 1> <hash 2>\n        (16 hex digits each)
//   key <text>\n                              (architecture, versions)
//   status ok|refused\n
//   body <bytes> <hash>\n
//   <body: the transformed PTX, or the reason it was refused>
//
// Every field is checked on read: an entry that does not match (corrupt,
// truncated, for another source or key) is a miss, and is rewritten.
//
//===----------------------------------------------------------------------===//
#ifndef TALLY_RUNTIME_PTXLOADER_H
#define TALLY_RUNTIME_PTXLOADER_H

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tally::rt {

/// Whether \p Image (a driver image argument: NUL-terminated PTX, an ELF
/// cubin or a fatbin) is PTX text: no binary magic, and a `.version`
/// directive before the first NUL within the first 64 KiB, after only
/// comments and white space. Returns the text (up to its NUL) when it is.
std::optional<std::string_view> ptxImage(const void *Image);

/// The two 64-bit hashes that name a source (FNV-1a with two bases).
struct PtxHash {
  uint64_t A = 0, B = 0;
  bool operator==(const PtxHash &O) const { return A == O.A && B == O.B; }
};
PtxHash hashPtx(std::string_view Text);

/// The `.target` of \p Ptx's first such directive ("sm_80", "sm_90a"), or
/// "" when there is none or it is not an identifier.
std::string ptxTarget(std::string_view Ptx);

/// Every `.entry` name in \p Ptx, in order (a plain scan; comments and
/// strings are skipped).
std::vector<std::string> ptxEntryNames(std::string_view Ptx);

struct PtxCacheEntry {
  bool Ok = false;  ///< transformed (Body is PTX) or refused (Body is why)
  std::string Body;
};

/// The bytes of an entry for source \p Src (hash and size) under \p Key.
std::string encodePtxCacheEntry(const PtxHash &Src, uint64_t SrcBytes, std::string_view Key,
                                const PtxCacheEntry &E);
/// Reads an entry; nullopt (with \p Why) when it is malformed or is not for
/// this source and key.
std::optional<PtxCacheEntry> decodePtxCacheEntry(std::string_view File, const PtxHash &Src,
                                                 uint64_t SrcBytes, std::string_view Key,
                                                 std::string &Why);

/// Reads an entry whatever its source (`tally ptx-cache show`): its key in
/// \p Key; nullopt (with \p Why) when it is malformed.
std::optional<PtxCacheEntry> readPtxCacheEntry(std::string_view File, std::string &Key,
                                               std::string &Why);

class PtxTransformer {
public:
  struct Options {
    std::string Helper;   ///< tally-opt
    std::string CacheDir; ///< "" or unwritable: no cache (a temporary folder)
    unsigned TimeoutSeconds = 120;
    bool UseCache = true;
  };

  struct Result {
    enum Kind {
      Transformed, ///< Ptx holds the module with variants
      Refused,     ///< tally-opt refused this PTX (Why); cached as such
      Failed,      ///< the helper did not run or did not finish (Why); not cached
    } What = Failed;
    std::string Ptx;
    std::string Why;
    bool FromCache = false;
    double Millis = 0; ///< time spent here (lookup, helper, store)
  };

  explicit PtxTransformer(Options O);

  /// \p Ptx with Tally's variants, for a GPU of architecture \p DeviceArch
  /// ("sm_90"): from the cache, else made by the helper and cached.
  Result transform(std::string_view Ptx, const std::string &DeviceArch);

  /// The cache key of \p DeviceArch (the architecture, the Tally version
  /// and the helper's identity).
  std::string keyFor(const std::string &DeviceArch) const;
  /// The entry of source \p H under \p Key (one file per source and key).
  std::string entryPath(const PtxHash &H, const std::string &Key) const;

private:
  Options O;
  std::string HelperId; ///< "<size>-<mtime ns>" of the helper, "" if missing
};

/// Runs \p Argv (Argv[0] a path) with the environment less LD_PRELOAD,
/// standard input closed, standard output discarded and standard error into
/// \p StderrPath; kills it after \p TimeoutSeconds. Returns true when it
/// exited with status 0; otherwise \p Why says how it ended (exit status 1
/// sets \p ExitedOne). When the application reaps children itself (SIGCHLD
/// ignored), the status is unknown: \p Unknown is set and the caller judges
/// by the output.
bool runHelper(const std::vector<std::string> &Argv, const std::string &StderrPath,
               unsigned TimeoutSeconds, std::string &Why, bool &ExitedOne, bool &Unknown);

} // namespace tally::rt

#endif
