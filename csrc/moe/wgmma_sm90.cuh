// Hopper warpgroup MMA pieces for fp8 kernels with a narrow N (stream_gate_up_wgmma.cu: n8; the tiled path's GEMMs,
// moe_gemm.cuh: n16 / n32 / n64 = its M tile of tokens): e4m3 wgmma m64nNk32 with both operands K-major in shared
// memory under the 128-byte swizzle, its fences, and the swizzled offset those tiles are written at.
#pragma once

#include <cstdint>

#include "csrc/common/mma.cuh"

namespace hpc::moe {

// Offset of 16-byte chunk `c` (0-7) of row `r` in a tile of 128-byte rows stored as 8-row x 128-byte atoms, each
// atom 1024-byte aligned: the chunk index is XORed with r % 8 (the address bits wgmma's 128-byte swizzle flips).
__device__ __forceinline__ uint32_t Sw128(int r, int c) {
  return static_cast<uint32_t>((r / 8) * 1024 + (r % 8) * 128 + ((c ^ (r % 8)) << 4));
}

// Shared-memory matrix descriptor: K-major, 128-byte swizzle, 8-row groups 1024 bytes apart (leading offset unused
// under a swizzle and set to 1). A K step of 32 e4m3 inside the atom moves the start address by 32 bytes.
__device__ __forceinline__ uint64_t SmemDescSw128(uint32_t saddr) {
  return static_cast<uint64_t>((saddr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}

// d[m64 x n8] (+)= A[64 x 32] * B[8 x 32]^T, e4m3 in, fp32 accumulate; accumulate == 0 ignores d's old value.
// d: rows 16w + g (d[0], d[1]: columns 2q, 2q + 1) and 16w + g + 8 (d[2], d[3]) for warp w, lane 4g + q.
__device__ __forceinline__ void WgmmaE4M3(float (&d)[4], uint64_t a, uint64_t b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, %4, %5, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "l"(a), "l"(b), "r"(accumulate));
}
// d[m64 x nN] (+)= A[64 x 32] * B[N x 32]^T for N = 16, 32, 64 (d: N / 2 floats per thread; n8 block j of the
// n8 layout above in d[4j .. 4j + 3]).
template <int N>
__device__ __forceinline__ void WgmmaE4M3N(float (&d)[N / 2], uint64_t a, uint64_t b, int accumulate) {
  static_assert(N == 16 || N == 32 || N == 64, "wgmma N");
  if constexpr (N == 16) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "l"(a), "l"(b), "r"(accumulate));
  } else if constexpr (N == 32) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
        "%12, %13, %14, %15}, %16, %17, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(a), "l"(b), "r"(accumulate));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
        "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "%32, %33, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(a), "l"(b), "r"(accumulate));
  }
}

__device__ __forceinline__ void WgmmaFence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void WgmmaCommit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void WgmmaWaitAll() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Keeps the compiler from moving reads or writes of the accumulators across the asynchronous MMAs.
__device__ __forceinline__ void FenceRegs(float (&d)[4]) {
  asm volatile("" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])::"memory");
}
template <int R>
__device__ __forceinline__ void FenceRegsN(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// Generic-proxy writes to shared memory (st.shared, cp.async) made visible to wgmma's async proxy.
__device__ __forceinline__ void FenceProxyAsync() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Issues one 128-deep K group of one tile -- 4 wgmmas into d, zeroed here -- as one committed group, not waited for.
__device__ __forceinline__ void WgmmaIssueGroupE4M3(float (&d)[4], uint32_t a_tile, uint32_t b_tile) {
  d[0] = d[1] = d[2] = d[3] = 0.f;
  FenceRegs(d);
  WgmmaFence();
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) WgmmaE4M3(d, SmemDescSw128(a_tile + ks * 32), SmemDescSw128(b_tile + ks * 32), ks);
  WgmmaCommit();
}

// One 128-deep K group of one tile: 4 wgmmas into a fresh d, then promoted into acc with fp32 adds (the fp8 tensor-
// core accumulator is not a full fp32 one over thousands of terms). Every thread of the warpgroup calls it.
__device__ __forceinline__ void WgmmaGroupE4M3(float (&acc)[4], uint32_t a_tile, uint32_t b_tile) {
  float d[4];
  WgmmaIssueGroupE4M3(d, a_tile, b_tile);
  WgmmaWaitAll();
  FenceRegs(d);
#pragma unroll
  for (int i = 0; i < 4; ++i) acc[i] = __fadd_rn(acc[i], d[i]);
}

// One 128-deep K group of an m64 x nN tile (4 wgmmas into a fresh d), waited for and promoted into acc with fp32
// adds. Every thread of the warpgroup calls it; the operands' shared-memory writes must be fenced for the async
// proxy (FenceProxyAsync) and visible to the warpgroup (a barrier) before.
template <int N>
__device__ __forceinline__ void WgmmaGroupE4M3N(float (&acc)[N / 2], uint32_t a_tile, uint32_t b_tile) {
  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = 0.f;
  FenceRegsN(d);
  WgmmaFence();
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) WgmmaE4M3N<N>(d, SmemDescSw128(a_tile + ks * 32), SmemDescSw128(b_tile + ks * 32), ks);
  WgmmaCommit();
  WgmmaWaitAll();
  FenceRegsN(d);
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acc[i] = __fadd_rn(acc[i], d[i]);
}

}  // namespace hpc::moe
