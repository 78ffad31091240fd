// Does a persistent CTA streaming weights through a ring of 8 KB shared-memory stages reach the copy ceiling on the
// H200, and what does it take? (dev tool, GPU only; session 16). Session 16's overlapped T=1 MoE layer ran its
// gate-up as one CTA per SM with an 8-stage cp.async ring and streamed at ~0.9 TB/s, where one-shot CTAs (3 per SM,
// 64 KB issued at once) reach 2.3-3.5 TB/s (tools/stream_probe.cu). This times the ring alone, no MMA: 25.9 MB per
// launch (132 SMs x 24 stages x 8 KB, the Qwen3-30B gate-up's bytes), cold L2 (each launch reads a fresh slice of a
// 4 GB buffer), 20 launches in a CUDA graph, for
//   copy     cp.async (LDGSTS, 4 x 16 B per thread per stage, wait_group + barrier per stage) | bulk (cp.async.bulk
//            issued by one thread, completing on a per-stage mbarrier; a barrier per stage guards slot reuse)
//   layout   rows: a stage is 64 rows x 128 B, 2 KB apart (a gate-up K group; 8 stages cover 1 KB of each row) |
//            contig: a stage is 8 KB contiguous
//   CTAs/SM  1, 2, 3 (the 24 stages per SM split among them), ring depth 4 or 8 stages
//   spin     cycles of busy work per stage after its data landed (0, or ~ a stage's wgmma chain)
//   nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -O3 -o ring_probe tools/ring_probe.cu && ./ring_probe
#include <cstdint>

#include "probe_graph.cuh"

constexpr int kStageBytes = 8192;
constexpr int kThreads = 128;

struct Params {
  const uint8_t* src;
  int stages;     // stages this CTA streams
  bool rows;      // layout
  int spin;       // busy cycles per stage
  uint32_t* out;
};

__device__ __forceinline__ uint32_t Smem(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// Byte offset of 16-byte chunk i (0-511) of stage k within the CTA's span.
__device__ __forceinline__ int64_t ChunkOffset(bool rows, int k, int i) {
  if (!rows) return static_cast<int64_t>(k) * kStageBytes + i * 16;
  const int r = i / 8, c = i % 8;  // unit k / 8 = 64 rows of 2 KB; group k % 8 = columns [128 g, 128 g + 128)
  return static_cast<int64_t>(k / 8) * 64 * 2048 + r * 2048 + (k % 8) * 128 + c * 16;
}

__device__ __forceinline__ void Spin(int cycles) {
  if (cycles <= 0) return;
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

template <int S>
__global__ void __launch_bounds__(kThreads) CpAsyncRing(Params p, int64_t cta_span) {
  extern __shared__ __align__(1024) uint8_t ring[];
  const uint8_t* base = p.src + blockIdx.x * cta_span;
  auto issue = [&](int k) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int i = threadIdx.x + q * kThreads;
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(Smem(ring + (k % S) * kStageBytes + i * 16)),
                   "l"(base + ChunkOffset(p.rows, k, i)));
    }
  };
  for (int k = 0; k < S - 1; ++k) {
    if (k < p.stages) issue(k);
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  }
  uint32_t acc = 0;
  for (int k = 0; k < p.stages; ++k) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(S - 2) : "memory");
    __syncthreads();
    if (k + S - 1 < p.stages) issue(k + S - 1);
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    acc ^= reinterpret_cast<const uint32_t*>(ring + (k % S) * kStageBytes)[threadIdx.x];
    Spin(p.spin);
  }
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
  if (acc == 0x12345678u) p.out[blockIdx.x] = acc;
}

template <int S>
__global__ void __launch_bounds__(kThreads) BulkRing(Params p, int64_t cta_span) {
  extern __shared__ __align__(1024) uint8_t ring[];
  __shared__ __align__(8) uint64_t full[S];
  const uint8_t* base = p.src + blockIdx.x * cta_span;
  auto issue = [&](int k) {  // thread 0 only
    const uint32_t bar = Smem(&full[k % S]);
    uint8_t* dst = ring + (k % S) * kStageBytes;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(kStageBytes) : "memory");
    if (p.rows) {
      for (int r = 0; r < 64; ++r) {
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 128, [%2];\n" ::"r"(
                         Smem(dst + r * 128)),
                     "l"(base + ChunkOffset(true, k, r * 8)), "r"(bar)
                     : "memory");
      }
    } else {
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                       Smem(dst)),
                   "l"(base + static_cast<int64_t>(k) * kStageBytes), "r"(kStageBytes), "r"(bar)
                   : "memory");
    }
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(Smem(&full[s])));
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    for (int k = 0; k < S - 1 && k < p.stages; ++k) issue(k);
  }
  __syncthreads();
  uint32_t acc = 0;
  for (int k = 0; k < p.stages; ++k) {
    const uint32_t bar = Smem(&full[k % S]);
    const uint32_t parity = (k / S) & 1;
    uint32_t done = 0;
    while (!done) {
      asm volatile("{\n.reg .pred q;\nmbarrier.try_wait.parity.shared::cta.b64 q, [%1], %2;\nselp.u32 %0, 1, 0, q;\n}\n"
                   : "=r"(done)
                   : "r"(bar), "r"(parity)
                   : "memory");
    }
    acc ^= reinterpret_cast<const uint32_t*>(ring + (k % S) * kStageBytes)[threadIdx.x];
    Spin(p.spin);
    __syncthreads();  // every thread is done with stage k - 1's slot... and k's (reused at k + S)
    if (threadIdx.x == 0 && k + S - 1 < p.stages) issue(k + S - 1);
  }
  if (acc == 0x12345678u) p.out[blockIdx.x] = acc;
}

int main() {
  const ProbeSetup ps = SetUpStreamProbe();
  for (auto k : {(const void*)CpAsyncRing<4>, (const void*)CpAsyncRing<8>, (const void*)BulkRing<4>,
                 (const void*)BulkRing<8>}) {
    CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 8 * kStageBytes));
    CHECK(cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  }
  constexpr int kStagesPerSm = 24;
  std::printf("%-6s %-6s %6s %6s %6s %9s %9s\n", "copy", "layout", "CTA/SM", "depth", "spin", "us/launch", "TB/s");
  for (int bulk = 0; bulk < 2; ++bulk) {
    for (int rows = 1; rows >= 0; --rows) {
      for (int per_sm : {1, 2, 3}) {
        for (int depth : {4, 8}) {
          for (int spin : {0, 1000}) {
            const int ctas = per_sm * ps.sms, stages = kStagesPerSm / per_sm;
            // rows: a CTA's span holds its units of 64 rows x 2 KB (only 1 KB of each row is read)
            const int64_t cta_span = rows ? ((stages + 7) / 8) * 64 * 2048LL : stages * int64_t{kStageBytes};
            const int64_t span = ctas * cta_span, bytes = static_cast<int64_t>(ctas) * stages * kStageBytes;
            const int slices = static_cast<int>(ps.buf_bytes / span);
            const int smem = depth * kStageBytes;
            auto launch = [&](int it, cudaStream_t s) {
              Params p = {};
              p.src = ps.buf + (it % slices) * span;
              p.stages = stages;
              p.rows = rows != 0;
              p.spin = spin;
              p.out = ps.out;
              if (bulk) {
                if (depth == 4) BulkRing<4><<<ctas, kThreads, smem, s>>>(p, cta_span);
                else BulkRing<8><<<ctas, kThreads, smem, s>>>(p, cta_span);
              } else {
                if (depth == 4) CpAsyncRing<4><<<ctas, kThreads, smem, s>>>(p, cta_span);
                else CpAsyncRing<8><<<ctas, kThreads, smem, s>>>(p, cta_span);
              }
            };
            const double us = GraphMicrosPerCall(launch, 20, 7);
            std::printf("%-6s %-6s %6d %6d %6d %9.2f %9.2f\n", bulk ? "bulk" : "cp", rows ? "rows" : "contig", per_sm,
                        depth, spin, us, bytes / us / 1e6);
          }
        }
      }
    }
  }
  return 0;
}
