// segv-backtrace.c - a debugging aid for the GPU machine, which has no gdb:
// preloaded (LD_PRELOAD=segv-backtrace.so, after libtally.so), it prints
// the stack of a crash (SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL) to stderr
// as object+offset lines, which `addr2line -e OBJECT OFFSET` turns into
// source lines here. scripts/gpu-runtime.sh uses it when a run crashes.
// Build: cc -O1 -g -shared -fPIC segv-backtrace.c -o segv-backtrace.so
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void onCrash(int Sig, siginfo_t *Info, void *Ctx) {
  (void)Ctx;
  void *Frames[64];
  int N = backtrace(Frames, 64);
  fprintf(stderr, "segv-backtrace: signal %d (%s) at address %p, %d frames\n", Sig,
          strsignal(Sig), Info->si_addr, N);
  for (int I = 0; I < N; ++I) {
    Dl_info D;
    if (dladdr(Frames[I], &D) && D.dli_fname)
      fprintf(stderr, "  #%d %s+0x%lx (%s)\n", I, D.dli_fname,
              (unsigned long)((char *)Frames[I] - (char *)D.dli_fbase),
              D.dli_sname ? D.dli_sname : "?");
    else
      fprintf(stderr, "  #%d %p\n", I, Frames[I]);
  }
  fflush(stderr);
  signal(Sig, SIG_DFL);
  raise(Sig);
}

__attribute__((constructor)) static void install(void) {
  struct sigaction A;
  memset(&A, 0, sizeof A);
  A.sa_sigaction = onCrash;
  A.sa_flags = SA_SIGINFO | SA_RESETHAND;
  sigaction(SIGSEGV, &A, 0);
  sigaction(SIGBUS, &A, 0);
  sigaction(SIGABRT, &A, 0);
  sigaction(SIGFPE, &A, 0);
  sigaction(SIGILL, &A, 0);
}
