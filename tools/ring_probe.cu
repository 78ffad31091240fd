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
//   mma      (second table) each landed stage also feeds the overlap gate-up's per-stage work: a proxy fence, then
//            4 chained e4m3 wgmma m64n8k32 on it (B a 1 KB tile), waited for and promoted -- or issued and waited one
//            stage later
//   unit     (third table) with the mma: every 8 stages (a gate-up unit) a cluster barrier pair (clusters of 2) and/or
//            busy cycles on rank 0 (the unit's epilogue), as the overlap kernel does
//   links    (fourth table, not yet run on the GPU) with clusters, barriers and a 500-cycle epilogue: 3 dependent cold
//            loads before the first copy (the kernel's ids -> expert -> address) and/or a cold load opening each
//            epilogue (its w13_scale[e])
//   nvcc -std=c++17 -I. -gencode arch=compute_90a,code=sm_90a -O3 -o ring_probe tools/ring_probe.cu && ./ring_probe
#include <cooperative_groups.h>

#include <cstdint>

#include "csrc/moe/wgmma_sm90.cuh"
#include "probe_graph.cuh"

constexpr int kStageBytes = 8192;
constexpr int kThreads = 128;

struct Params {
  const uint8_t* src;
  int stages;     // stages this CTA streams
  bool rows;      // layout
  int spin;       // busy cycles per stage
  int unit_spin;  // busy cycles per 8 stages (rank 0)
  int hops;       // dependent cold global loads before the first copy (the kernel's ids -> expert -> address chain)
  bool epi_load;  // rank 0's unit epilogue starts with a cold global load (the kernel's w13_scale[e])
  const uint32_t* cold;  // what those loads read: a region no launch streams
  int64_t cold_words;
  uint32_t* out;
};

// A dependent cold load: the next address depends on the value (memset bytes 1, so the value is 0x01010101).
__device__ __forceinline__ uint32_t ColdHop(const Params& p, uint32_t seed) {
  const int64_t i = (static_cast<int64_t>(seed) * 2654435761u + blockIdx.x * 40503u) % p.cold_words;
  uint32_t v;
  asm volatile("ld.global.cg.u32 %0, [%1];\n" : "=r"(v) : "l"(p.cold + i));
  return v + seed;
}

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

// kMma: 0 none, 1 wgmma group per stage waited at once, 2 waited one stage later (the slot refilled is then j - 2's).
// kUnit: every 8 stages, 1 = two cluster barriers then p.unit_spin cycles on rank 0 (launch in clusters of 2), 2 = the
// busy cycles only, on every CTA.
template <int S, int kMma = 0, int kUnit = 0>
__global__ void __launch_bounds__(kThreads) CpAsyncRing(Params p, int64_t cta_span) {
  extern __shared__ __align__(1024) uint8_t ring[];
  __shared__ __align__(1024) uint8_t b_tile[1024];
  float acc[4] = {0.f, 0.f, 0.f, 0.f}, d[4] = {0.f, 0.f, 0.f, 0.f};
  constexpr int kAhead = kMma == 2 ? S - 2 : S - 1;  // stages in flight
  const uint8_t* base = p.src + blockIdx.x * cta_span;
  auto issue = [&](int k) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int i = threadIdx.x + q * kThreads;
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(Smem(ring + (k % S) * kStageBytes + i * 16)),
                   "l"(base + ChunkOffset(p.rows, k, i)));
    }
  };
  if (kMma) reinterpret_cast<uint64_t*>(b_tile)[threadIdx.x] = 0;
  uint32_t seed = 1;
  for (int h = 0; h < p.hops; ++h) seed = ColdHop(p, seed);
  if (seed == 0x12345678u) p.out[blockIdx.x] = seed;  // keeps the chain ahead of the first copy
  for (int k = 0; k < kAhead; ++k) {
    if (k < p.stages) issue(k);
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  }
  uint32_t x = 0;
  for (int k = 0; k < p.stages; ++k) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kAhead - 1) : "memory");
    if (kMma) hpc::moe::FenceProxyAsync();
    __syncthreads();
    if (k + kAhead < p.stages) issue(k + kAhead);
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    x ^= reinterpret_cast<const uint32_t*>(ring + (k % S) * kStageBytes)[threadIdx.x];
    if constexpr (kMma == 1) {
      hpc::moe::WgmmaGroupE4M3(acc, Smem(ring + (k % S) * kStageBytes), Smem(b_tile));
    } else if constexpr (kMma == 2) {
      if (k > 0) {
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        hpc::moe::FenceRegs(d);
        for (int i = 0; i < 4; ++i) acc[i] += d[i];
      }
      hpc::moe::WgmmaIssueGroupE4M3(d, Smem(ring + (k % S) * kStageBytes), Smem(b_tile));
    }
    Spin(p.spin);
    if constexpr (kUnit != 0) {
      if (k % 8 == 7) {
        int rank = 0;
        if constexpr (kUnit == 1) {
          cooperative_groups::cluster_group cl = cooperative_groups::this_cluster();
          cl.sync();
          cl.sync();
          rank = static_cast<int>(cl.block_rank());
        }
        if (rank == 0) {
          if (p.epi_load && ColdHop(p, k) == 0x12345678u) p.out[blockIdx.x] = k;
          Spin(p.unit_spin);
        }
      }
    }
  }
  if constexpr (kMma == 2) hpc::moe::WgmmaWaitAll();
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
  if (x == 0x12345678u || acc[0] + d[0] == 1.2345f) p.out[blockIdx.x] = x;
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
    MbarWaitParity(Smem(&full[k % S]), (k / S) & 1);
    acc ^= reinterpret_cast<const uint32_t*>(ring + (k % S) * kStageBytes)[threadIdx.x];
    Spin(p.spin);
    __syncthreads();  // every thread is done with stage k's slot, so stage k - 1's is surely free to refill
    if (threadIdx.x == 0 && k + S - 1 < p.stages) issue(k + S - 1);
  }
  if (acc == 0x12345678u) p.out[blockIdx.x] = acc;
}

constexpr int kStagesPerSm = 24;

// A ring kernel (8 stages of dynamic shared memory) in clusters of `cluster` CTAs.
void LaunchClustered(void (*kernel)(Params, int64_t), int cluster, int ctas, cudaStream_t s, const Params& p,
                     int64_t cta_span) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(ctas);
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = 8 * kStageBytes;
  config.stream = s;
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = cluster;
  attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
  config.attrs = &attr;
  config.numAttrs = 1;
  CHECK(cudaLaunchKernelEx(&config, kernel, p, cta_span));
}

// One configuration: per_sm CTAs per SM share each SM's 24 stages; go(p, ctas, cta_span, stream) launches one call on
// the slice p.src. Returns the microseconds per launch and sets *tbps.
template <typename Go>
double TimeRing(const ProbeSetup& ps, int per_sm, bool rows, Params base, Go&& go, double* tbps) {
  const int ctas = per_sm * ps.sms, stages = kStagesPerSm / per_sm;
  // rows: a CTA's span holds its units of 64 rows x 2 KB (only 1 KB of each row is read)
  const int64_t cta_span = rows ? ((stages + 7) / 8) * 64 * 2048LL : stages * int64_t{kStageBytes};
  const int64_t span = ctas * cta_span, bytes = static_cast<int64_t>(ctas) * stages * kStageBytes;
  const int slices = static_cast<int>(ps.buf_bytes / span);
  base.stages = stages;
  base.rows = rows;
  base.out = ps.out;
  auto launch = [&](int it, cudaStream_t s) {
    Params p = base;
    p.src = ps.buf + (it % slices) * span;
    go(p, ctas, cta_span, s);
  };
  const double us = GraphMicrosPerCall(launch, 20, 7);
  *tbps = bytes / us / 1e6;
  return us;
}

int main() {
  const ProbeSetup ps = SetUpStreamProbe();
  for (auto k : {(const void*)CpAsyncRing<4>, (const void*)CpAsyncRing<8>, (const void*)BulkRing<4>,
                 (const void*)BulkRing<8>, (const void*)CpAsyncRing<8, 1>, (const void*)CpAsyncRing<8, 2>,
                 (const void*)CpAsyncRing<8, 1, 1>, (const void*)CpAsyncRing<8, 1, 2>}) {
    CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 8 * kStageBytes));
    CHECK(cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  }
  double tbps = 0;
  std::printf("%-6s %-6s %6s %6s %6s %9s %9s\n", "copy", "layout", "CTA/SM", "depth", "spin", "us/launch", "TB/s");
  for (int bulk = 0; bulk < 2; ++bulk) {
    for (int rows = 1; rows >= 0; --rows) {
      for (int per_sm : {1, 2, 3}) {
        for (int depth : {4, 8}) {
          for (int spin : {0, 1000}) {
            Params base = {};
            base.spin = spin;
            const int smem = depth * kStageBytes;
            const double us = TimeRing(ps, per_sm, rows != 0, base, [&](const Params& p, int ctas, int64_t cta_span,
                                                                        cudaStream_t s) {
              if (bulk) {
                if (depth == 4) BulkRing<4><<<ctas, kThreads, smem, s>>>(p, cta_span);
                else BulkRing<8><<<ctas, kThreads, smem, s>>>(p, cta_span);
              } else {
                if (depth == 4) CpAsyncRing<4><<<ctas, kThreads, smem, s>>>(p, cta_span);
                else CpAsyncRing<8><<<ctas, kThreads, smem, s>>>(p, cta_span);
              }
            }, &tbps);
            std::printf("%-6s %-6s %6d %6d %6d %9.2f %9.2f\n", bulk ? "bulk" : "cp", rows ? "rows" : "contig", per_sm,
                        depth, spin, us, tbps);
          }
        }
      }
    }
  }
  std::printf("\n%-6s %-6s %6s %6s %6s %9s %9s\n", "copy", "layout", "CTA/SM", "depth", "mma", "us/launch", "TB/s");
  for (int per_sm : {1, 2, 3}) {
    for (int mma : {0, 1, 2}) {
      const double us = TimeRing(ps, per_sm, true, Params{}, [&](const Params& p, int ctas, int64_t cta_span,
                                                                 cudaStream_t s) {
        if (mma == 0) CpAsyncRing<8, 0><<<ctas, kThreads, 8 * kStageBytes, s>>>(p, cta_span);
        if (mma == 1) CpAsyncRing<8, 1><<<ctas, kThreads, 8 * kStageBytes, s>>>(p, cta_span);
        if (mma == 2) CpAsyncRing<8, 2><<<ctas, kThreads, 8 * kStageBytes, s>>>(p, cta_span);
      }, &tbps);
      std::printf("%-6s %-6s %6d %6d %6d %9.2f %9.2f\n", "cp", "rows", per_sm, 8, mma, us, tbps);
    }
  }
  std::printf("\n%-8s %-10s %9s %9s\n", "cluster", "unit_spin", "us/launch", "TB/s");
  for (int unit : {1, 2}) {
    for (int unit_spin : {0, 2000}) {
      Params base = {};
      base.unit_spin = unit_spin;
      const double us = TimeRing(ps, 1, true, base, [&](const Params& p, int ctas, int64_t cta_span, cudaStream_t s) {
        if (unit == 1) LaunchClustered(CpAsyncRing<8, 1, 1>, 2, ctas, s, p, cta_span);
        else LaunchClustered(CpAsyncRing<8, 1, 2>, 1, ctas, s, p, cta_span);
      }, &tbps);
      std::printf("%-8s %-10d %9.2f %9.2f\n", unit == 1 ? "2" : "none", unit_spin, us, tbps);
    }
  }
  // The kernel's other serial links on top of the clustered ring: the prologue's dependent loads, the epilogue's load.
  std::printf("\n%-5s %-9s %-10s %9s %9s\n", "hops", "epi_load", "unit_spin", "us/launch", "TB/s");
  for (int hops : {0, 3}) {
    for (int epi : {0, 1}) {
      Params base = {};
      base.unit_spin = 500;
      base.hops = hops;
      base.epi_load = epi != 0;
      base.cold = reinterpret_cast<const uint32_t*>(ps.buf + ps.buf_bytes - (int64_t{256} << 20));
      base.cold_words = (int64_t{256} << 20) / 4;
      const double us = TimeRing(ps, 1, true, base, [&](const Params& p, int ctas, int64_t cta_span, cudaStream_t s) {
        LaunchClustered(CpAsyncRing<8, 1, 1>, 2, ctas, s, p, cta_span);
      }, &tbps);
      std::printf("%-5d %-9d %-10d %9.2f %9.2f\n", hops, epi, 500, us, tbps);
    }
  }
  return 0;
}
