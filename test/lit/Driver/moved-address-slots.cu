// The original kernels of a plain `nvcc -arch=sm_90 -c` object keep their
// machine code up to addresses the loader fills in. The cubin is an
// executable one: kernels read the addresses of globals and of vprintf from
// 8-byte slots of constant bank 4, which .rela.nv.constant4 fills at load
// time. The __tally_metadata global that tally-opt adds takes a slot before
// vprintf's, so `report` loads vprintf's address from c[0x4][0x28] instead
// of c[0x4][0x20]: one byte of an immediate differs, and it is no reason to
// warn (tally-opt once said "the input was built with other ptxas options").
// --stats counts such kernels.
// REQUIRES: nvcc
// RUN: rm -rf %t && mkdir -p %t
// RUN: %nvcc -arch=sm_90 -c %s -o %t/k.o
// RUN: tally-opt %t/k.o -o %t/out.o --stats 2> %t/err
// RUN: FileCheck --check-prefix=MOVED --implicit-check-not=warning %s < %t/err
// MOVED: 1 fatbin.kernels-recompiled-with-moved-addresses
//
// A real difference still warns, saying what differs: built with
// `ptxas --def-load-cache=cg`, loads differ in their cache bits; in `report`
// that is one byte beside the moved slot offset, which counts as an address.
// RUN: %nvcc -arch=sm_90 -c -Xptxas --def-load-cache=cg %s -o %t/cg.o
// RUN: tally-opt %t/cg.o -o %t/cg.out.o -q 2>&1 | FileCheck --check-prefix=DIFF %s
// DIFF-DAG: warning: {{.*}}cg.o:.nv_fatbin:entry1.compute_90: kernel _Z6reporti compiles to different code for sm_90 than in the input: section .text._Z6reporti: 2 of its {{[0-9]+}} bytes differ (at 0x{{[0-9a-f]+}}, 0x{{[0-9a-f]+}}), 1 in address fields
// DIFF-DAG: warning: {{.*}}cg.o:.nv_fatbin:entry1.compute_90: kernel _Z4geluPfi compiles to different code for sm_90 than in the input: section .text._Z4geluPfi: {{[0-9]+}} of its {{[0-9]+}} bytes differ (at 0x{{.*}}), none in address fields
//
// And one that changes the size.
// RUN: %nvcc -arch=sm_90 -c -Xptxas -O0 %s -o %t/o0.o
// RUN: tally-opt %t/o0.o -o %t/o0.out.o -q 2>&1 | FileCheck --check-prefix=SIZE %s
// SIZE: warning: {{.*}}kernel _Z4geluPfi compiles to different code for sm_90 than in the input: section .text._Z4geluPfi: {{[0-9]+}} bytes in the input, {{[0-9]+}} bytes recompiled

#include <cstdio>

__device__ float gScale[64] = {1.0f, 2.0f, 3.0f};
__constant__ float cTable[32] = {0.5f, 0.25f};
__device__ unsigned gCount;
__device__ double gOffset = 3.0;
__constant__ int cIndex[4] = {1, 2, 3, 4};

// Not inlined: a function of its own in the cubin, called by `gelu`.
__device__ __noinline__ float lookup(float a, int i) {
  return a * cTable[i & 31] + gScale[i & 63];
}

__global__ void report(int n) {
  if (threadIdx.x == 0 && n < 0)
    printf("n = %d, scale = %f\n", n, gScale[2]);
}

__global__ void gelu(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float v = x[i];
    x[i] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v))) *
               gScale[5] +
           lookup(v, 3);
  }
}
