//===- PTB.cpp - the persistent-thread-block form of a kernel -------------===//
//
// A clone of the kernel inside a worker loop that claims logical blocks from
// a counter in global memory, with the unified synchronisation rewrite on
// its body (PTB.h).
//
//===----------------------------------------------------------------------===//

#include "tally/Transforms/PTB.h"

#include "RewriteHelpers.h"
#include "UnifySyncInternal.h"

#include "tally/Analysis/Liveness.h"
#include "tally/PTX/CFG.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"

using namespace llvm;
using namespace tally::ptx;
using namespace tally::detail;

namespace tally {

/// Instructions giving a constant to each register the body of \p K may
/// read before writing it (see Liveness.h), so that no value stays live
/// from one logical block to the next. Only registers declared at the top
/// of the body (before its first instruction), of types with a plain `mov`.
static std::string zeroLiveIns(const Function &K, RewriteStats &Stats) {
  CFG G(const_cast<Function &>(K));
  std::vector<std::string> Live = getLiveInRegisters(G);
  if (Live.empty())
    return {};
  // Register name -> its declaration's type; `%r<N>` covers %r0..%r(N-1).
  // Only the declarations before the first instruction: the constants go
  // there (insertAtTop), and a register is used after its declaration.
  StringMap<StringRef> Exact;
  StringMap<std::pair<StringRef, unsigned>> Ranges;
  for (const auto &S : K.Body->Body) {
    if (!isa<DeclStmt>(S.get()) && !isa<DirectiveStmt>(S.get()))
      break;
    auto *D = dyn_cast<DeclStmt>(S.get());
    if (!D || D->D.getStateSpace() != ".reg" || D->D.getVectorWidth() != 1)
      continue;
    for (const Declarator &X : D->D.Decls) {
      if (!X.Dims.empty())
        continue;
      unsigned Count = 0;
      if (!X.Range)
        Exact[X.Name] = D->D.getType();
      else if (!X.Range->getAsInteger(10, Count))
        Ranges[X.Name] = {D->D.getType(), Count};
    }
  }
  auto TypeOf = [&](StringRef R) -> StringRef {
    if (auto It = Exact.find(R); It != Exact.end())
      return It->second;
    size_t Digits = R.size();
    while (Digits > 0 && isDigit(R[Digits - 1]))
      --Digits;
    unsigned Num = 0;
    if (Digits == R.size() || R.substr(Digits).getAsInteger(10, Num))
      return {};
    if (R.size() - Digits > 1 && R[Digits] == '0')
      return {}; // %r01 is not %r<N>'s register 1
    auto It = Ranges.find(R.substr(0, Digits));
    if (It == Ranges.end() || Num >= It->second.second)
      return {};
    return It->second.first;
  };
  std::string Text;
  for (const std::string &R : Live) {
    StringRef T = TypeOf(R);
    unsigned Bits = 0;
    if (T == ".pred") {
      Text += "setp.ne.u32 " + R + ", 0, 0;\n";
      ++Stats.ZeroedRegisters;
      continue;
    }
    if (T == ".b16" || T == ".u16" || T == ".s16" || T == ".f16" || T == ".bf16")
      Bits = 16;
    else if (T == ".b32" || T == ".u32" || T == ".s32" || T == ".f32" || T == ".f16x2" ||
             T == ".bf16x2")
      Bits = 32;
    else if (T == ".b64" || T == ".u64" || T == ".s64" || T == ".f64")
      Bits = 64;
    if (!Bits)
      continue;
    Text += formatv("mov.b{0} {1}, 0;\n", Bits, R).str();
    ++Stats.ZeroedRegisters;
  }
  return Text;
}

Expected<VariantRecord> addPtbVariant(Module &M, const Function &K,
                                      const Legality &L, RewriteStats &Stats) {
  if (!L.PtbOK)
    return internalError("PTB form of a kernel that cannot take it");
  VariantRecord V;
  V.Kind = "ptb";
  V.BarrierId = L.BarrierId;
  uint64_t Orig = paramBytes(K);
  Function &F = addClone(M, K, "ptb");
  V.Name = F.Name.str();
  // `.reqntid` becomes `.maxntid` (same dimensions; the runtime launches
  // the original's block shape): measured on an H100/H200 with ptxas 13.0,
  // a kernel with `.reqntid 64` got its claim barrier, which the leader
  // reaches after the other lanes of its warp, compiled as if the warp
  // arrived converged (compute-sanitizer synccheck: "divergent threads in
  // warp"); the other threads read the claim before it was written and the
  // results were wrong. With `.maxntid` the same code is correct and clean.
  for (Directive &D : F.Directives)
    if (D.Name == ".reqntid")
      D.Name = ".maxntid";
  if (Error E = addParams(M, F, Orig,
                          {{"__tly_ctrl", "control"},
                           {"__tly_grid_x", "grid_x"},
                           {"__tly_grid_y", "grid_y"},
                           {"__tly_grid_z", "grid_z"},
                           {"__tly_chunk", "chunk"}},
                          {"u64", "u32", "u32", "u32", "u32"}, V))
    return std::move(E);

  // Slot layout in shared memory (words): [0] claimed index or -1 (leave),
  // [1..3] the block's x, y, z (only those the kernel reads are decoded),
  // [4] blocks this worker claimed (all finish before it leaves), [5] next
  // index of the claimed chunk, [6] blocks left in it, [7] the counter's
  // value after this worker's last claim. Words 4-7 belong to the leader.
  bool Reads[3] = {false, false, false};
  auto Load = [&](SregUse U) -> std::string {
    if (U.Base == "%nctaid")
      return formatv("ld.param.u32 %__tly_nctaid_{0}, [__tly_grid_{0}];\n", U.Comp).str();
    Reads[U.Comp - 'x'] = true;
    unsigned Off = 4 * (1 + (U.Comp - 'x'));
    return formatv("ld.shared.u32 %__tly_ctaid_{0}, [__tly_slot+{1}];\n", U.Comp, Off).str();
  };
  if (Error E = rewriteGridSregs(M, F, Stats, Load))
    return std::move(E);
  if (L.anyConvergedBarrier())
    if (Error E = addConvBarrierFunc(M, L.BarrierId))
      return std::move(E);
  std::string Conv;
  if (Error E = rewriteSyncSites(M, F, L, Stats, Conv))
    return std::move(E);

  // Decoding keeps few values live: the claimed index, then one divisor at
  // a time.
  std::string Decode;
  if (Reads[0] || Reads[1] || Reads[2])
    Decode += "ld.param.u32 %__tly_t1, [__tly_grid_x];\n";
  // The remainders are skipped where the quotient is already in range (a
  // 1-D grid's x, a 2-D grid's y).
  if (Reads[0])
    Decode += "setp.lt.u32 %__tly_p0, %__tly_t0, %__tly_t1;\n"
              "mov.u32 %__tly_t2, %__tly_t0;\n"
              "@!%__tly_p0 rem.u32 %__tly_t2, %__tly_t0, %__tly_t1;\n"
              "st.shared.u32 [__tly_slot+4], %__tly_t2;\n";
  if (Reads[1] || Reads[2])
    Decode += "div.u32 %__tly_t0, %__tly_t0, %__tly_t1;\n"
              "ld.param.u32 %__tly_t1, [__tly_grid_y];\n";
  if (Reads[1])
    Decode += "setp.lt.u32 %__tly_p0, %__tly_t0, %__tly_t1;\n"
              "mov.u32 %__tly_t2, %__tly_t0;\n"
              "@!%__tly_p0 rem.u32 %__tly_t2, %__tly_t0, %__tly_t1;\n"
              "st.shared.u32 [__tly_slot+8], %__tly_t2;\n";
  if (Reads[2])
    Decode += "div.u32 %__tly_t2, %__tly_t0, %__tly_t1;\n"
              "st.shared.u32 [__tly_slot+12], %__tly_t2;\n";

  // Thread 0 leads; computed where needed so nothing stays live across the
  // body.
  const char *LeaderText = "mov.u32 %__tly_t0, %tid.x;\n"
                           "mov.u32 %__tly_t1, %tid.y;\n"
                           "or.b32 %__tly_t0, %__tly_t0, %__tly_t1;\n"
                           "mov.u32 %__tly_t1, %tid.z;\n"
                           "or.b32 %__tly_t0, %__tly_t0, %__tly_t1;\n"
                           "setp.eq.u32 %__tly_lead, %__tly_t0, 0;\n";
  // Every warp reconverges before the body. The leader's claim leaves warp
  // 0 split, and so may the convergence block's paths; a barrier does not
  // reconverge a warp, and the body may start with warp-wide `.aligned`
  // instructions (ldmatrix, mma, shfl.sync, bar.sync) whose behaviour is
  // undefined on a split warp. The mask names the lanes the warp has: all
  // 32, or fewer in a block's last warp (warps are cut from the linear
  // thread id; a shift by 32 or more gives 0, so the mask is -1 then).
  const char *WarpSyncText = "mov.u32 %__tly_t0, %tid.z;\n"
                             "mov.u32 %__tly_t1, %ntid.y;\n"
                             "mov.u32 %__tly_t2, %tid.y;\n"
                             "mad.lo.u32 %__tly_t0, %__tly_t0, %__tly_t1, %__tly_t2;\n"
                             "mov.u32 %__tly_t1, %ntid.x;\n"
                             "mov.u32 %__tly_t2, %tid.x;\n"
                             "mad.lo.u32 %__tly_t0, %__tly_t0, %__tly_t1, %__tly_t2;\n"
                             "and.b32 %__tly_t0, %__tly_t0, -32;\n"
                             "mov.u32 %__tly_t2, %ntid.y;\n"
                             "mul.lo.u32 %__tly_t1, %__tly_t1, %__tly_t2;\n"
                             "mov.u32 %__tly_t2, %ntid.z;\n"
                             "mul.lo.u32 %__tly_t1, %__tly_t1, %__tly_t2;\n"
                             "sub.u32 %__tly_t1, %__tly_t1, %__tly_t0;\n"
                             "shl.b32 %__tly_t0, 1, %__tly_t1;\n"
                             "sub.u32 %__tly_t0, %__tly_t0, 1;\n"
                             "bar.warp.sync %__tly_t0;\n";
  unsigned B = L.BarrierId;
  std::string Top = std::string(GridSregDecls) + SyncDeclsText +
                    ".reg .b32 %__tly_t<4>;\n"
                    ".reg .b64 %__tly_ctrl, %__tly_w;\n"
                    ".reg .pred %__tly_lead, %__tly_p0;\n"
                    ".shared .align 16 .b32 __tly_slot[8];\n" + LeaderText +
                    "@%__tly_lead st.shared.u32 [__tly_slot+16], 0;\n"
                    "@%__tly_lead st.shared.u32 [__tly_slot+24], 0;\n"
                    "@%__tly_lead st.shared.u32 [__tly_slot+28], 0;\n"
                    // Claim: thread 0 of the block leaves when preempted or
                    // when no block is left.
                    "$__tly_claim:\n" + LeaderText +
                    "@!%__tly_lead bra $__tly_wait;\n"
                    "mov.u32 %__tly_t3, -1;\n"
                    // Blocks left in the chunk claimed last: no atomic, no
                    // flag check (claimed blocks always run).
                    "ld.shared.u32 %__tly_t0, [__tly_slot+24];\n"
                    "setp.ne.u32 %__tly_p0, %__tly_t0, 0;\n"
                    "@%__tly_p0 bra $__tly_take;\n"
                    // One atomic claims the chunk and reads the flag: the
                    // 64-bit add lands on `next` (low word) and returns
                    // the flag (high word) as it was at that moment.
                    //
                    // The chunk: guided self-scheduling, capped by
                    // __tly_chunk (the runtime's bound on the turnaround):
                    // min(__tly_chunk, max(1, left / (2 * workers))), where
                    // `left` counts from the counter value this worker saw
                    // last (slot word 7), so few atomics while much is
                    // left and single blocks at the end, where balance
                    // matters. One counter, so blocks are still claimed in
                    // increasing order.
                    "ld.param.u32 %__tly_t1, [__tly_grid_x];\n"
                    "ld.param.u32 %__tly_t3, [__tly_grid_y];\n"
                    "mul.lo.u32 %__tly_t1, %__tly_t1, %__tly_t3;\n"
                    "ld.param.u32 %__tly_t3, [__tly_grid_z];\n"
                    "mul.lo.u32 %__tly_t1, %__tly_t1, %__tly_t3;\n"
                    "ld.shared.u32 %__tly_t0, [__tly_slot+28];\n"
                    "sub.u32 %__tly_t0, %__tly_t1, %__tly_t0;\n"
                    "mov.u32 %__tly_t3, %nctaid.x;\n"
                    "shl.b32 %__tly_t3, %__tly_t3, 1;\n"
                    "div.u32 %__tly_t0, %__tly_t0, %__tly_t3;\n"
                    "ld.param.u32 %__tly_t2, [__tly_chunk];\n"
                    "min.u32 %__tly_t2, %__tly_t2, %__tly_t0;\n"
                    "max.u32 %__tly_t2, %__tly_t2, 1;\n"
                    "ld.param.u64 %__tly_ctrl, [__tly_ctrl];\n"
                    "cvta.to.global.u64 %__tly_ctrl, %__tly_ctrl;\n"
                    "cvt.u64.u32 %__tly_w, %__tly_t2;\n"
                    "atom.global.add.u64 %__tly_w, [%__tly_ctrl], %__tly_w;\n"
                    "mov.b64 {%__tly_t0, %__tly_t1}, %__tly_w;\n"
                    "setp.ne.u32 %__tly_p0, %__tly_t1, 0;\n"
                    "@%__tly_p0 bra $__tly_giveback;\n"
                    "add.u32 %__tly_t3, %__tly_t0, %__tly_t2;\n"
                    "st.shared.u32 [__tly_slot+28], %__tly_t3;\n"
                    "ld.param.u32 %__tly_t1, [__tly_grid_x];\n"
                    "ld.param.u32 %__tly_t3, [__tly_grid_y];\n"
                    "mul.lo.u32 %__tly_t1, %__tly_t1, %__tly_t3;\n"
                    "ld.param.u32 %__tly_t3, [__tly_grid_z];\n"
                    "mul.lo.u32 %__tly_t1, %__tly_t1, %__tly_t3;\n"
                    "mov.u32 %__tly_t3, -1;\n"
                    "setp.ge.u32 %__tly_p0, %__tly_t0, %__tly_t1;\n"
                    "@%__tly_p0 bra $__tly_publish;\n"
                    // The chunk may run past the grid's end.
                    "sub.u32 %__tly_t1, %__tly_t1, %__tly_t0;\n"
                    "min.u32 %__tly_t2, %__tly_t2, %__tly_t1;\n"
                    "st.shared.u32 [__tly_slot+20], %__tly_t0;\n"
                    "st.shared.u32 [__tly_slot+24], %__tly_t2;\n"
                    // Every block claimed here runs before the worker
                    // leaves: count the chunk as finished now, once.
                    "ld.shared.u32 %__tly_t1, [__tly_slot+16];\n"
                    "add.u32 %__tly_t1, %__tly_t1, %__tly_t2;\n"
                    "st.shared.u32 [__tly_slot+16], %__tly_t1;\n"
                    "$__tly_take:\n"
                    "ld.shared.u32 %__tly_t0, [__tly_slot+20];\n"
                    "ld.shared.u32 %__tly_t2, [__tly_slot+24];\n"
                    "add.u32 %__tly_t1, %__tly_t0, 1;\n"
                    "st.shared.u32 [__tly_slot+20], %__tly_t1;\n"
                    "sub.u32 %__tly_t2, %__tly_t2, 1;\n"
                    "st.shared.u32 [__tly_slot+24], %__tly_t2;\n"
                    "mov.u32 %__tly_t3, %__tly_t0;\n" +
                    Decode +
                    "$__tly_publish:\n"
                    "st.shared.u32 [__tly_slot], %__tly_t3;\n"
                    "$__tly_wait:\n" +
                    formatv("barrier.sync {0};\n", B).str() + WarpSyncText +
                    "ld.shared.u32 %__tly_t0, [__tly_slot];\n"
                    "setp.eq.u32 %__tly_p0, %__tly_t0, -1;\n"
                    "@%__tly_p0 bra $__tly_exit;\n" + zeroLiveIns(K, Stats);
  auto TopCode = code(M, Top);
  if (!TopCode)
    return TopCode.takeError();
  insertAtTop(F, std::move(*TopCode));

  // After the body: all threads meet and go back to claim the next block.
  auto End = code(M, Conv +
                         "$__tly_done:\n"
                         "bra $__tly_claim;\n"
                         // Leaving: the leader adds the blocks this worker
                         // finished to the done count, with release
                         // semantics so their writes are visible first.
                         "$__tly_exit:\n" + LeaderText +
                         "@!%__tly_lead bra $__tly_ret;\n"
                         "ld.shared.u32 %__tly_t0, [__tly_slot+16];\n"
                         "setp.eq.u32 %__tly_p0, %__tly_t0, 0;\n"
                         "@%__tly_p0 bra $__tly_ret;\n"
                         "ld.param.u64 %__tly_ctrl, [__tly_ctrl];\n"
                         "cvta.to.global.u64 %__tly_ctrl, %__tly_ctrl;\n"
                         "red.release.gpu.global.add.u32 [%__tly_ctrl+8], %__tly_t0;\n"
                         "$__tly_ret:\n"
                         "ret;\n"
                         // Preempted: the leader takes its claim back and
                         // publishes -1 (the worker leaves). Every claim
                         // made after the flag was set is taken back, and
                         // all come after those made before, so once the
                         // workers have left `next` is again the first
                         // block not run.
                         "$__tly_giveback:\n"
                         "mov.u32 %__tly_t3, -1;\n"
                         "cvt.u64.u32 %__tly_w, %__tly_t2;\n"
                         "neg.s64 %__tly_w, %__tly_w;\n"
                         "red.global.add.u64 [%__tly_ctrl], %__tly_w;\n"
                         "bra $__tly_publish;\n");
  if (!End)
    return End.takeError();
  append(F.Body->Body, std::move(*End));
  return std::move(V);
}


} // namespace tally
