// How fast can the decode kernel's KV stream go on this GPU with no attention math at all? (dev tool, GPU only;
// session 45, issue #3.) The bf16 8/1/128 decode rows stream at ~69-73% of the copy ceiling on the H200 (README)
// and ~80% on an H100, FlashInfer about the same -- but the issue asks >= 85% (1x128K+31x4K <= 34 us, floor 30.9).
// Before another kernel change, this measures the ceiling of the kernel's own memory skeleton on the benchmark's
// exact pattern: 64-token tiles of 32 KB (a page of 64 tokens, K then V, [NB, 2, 64, 1, 128] bf16, as
// hpc_xla/bench/decode.py lays it out), blocks in a random permutation of a pool of two sets (the launches
// alternate sets, as the bench's rotating sets do, so L2 holds none of a launch's tiles), each CTA a contiguous run
// of tiles (the planner's even share). Per launch, in a CUDA graph of 20 (the bench's timing):
//   copy    2 GB device to device by an SM copy kernel (16-byte loads and stores), as torch's copy_ in the bench's
//           ceiling (hpc_xla/bench/timing.py; read + write bytes / time). Not a cudaMemcpy node: captured in a graph
//           it may run on the copy engines, and read 2.44 TB/s on an H100 where the bench reads 3.01 (s45c).
//   ldg     16-byte loads into registers, a tile's 16 per thread issued together (no shared memory)
//   ring    the kernel's skeleton (decode_kernel.cuh's tile loop): S stages of 32 KB, each thread 16 cp.async.cg per
//           tile, one commit group a tile; refill the slot the last tile left, wait_group S-1 + barrier (S-1 tiles
//           in flight), read the tile back from shared memory (every 16 B once, as the MMAs' ldmatrix reads do), then
//           `spin` cycles of busy wait (a stand-in for the math: the kernel's per-CTA trace puts its compute at ~800
//           cycles a tile), barrier
//   bulk    the same ring fed by the TMA unit: one thread issues the tile as two half-tile cp.async.bulk copies
//           completing on the stage's mbarrier (the tile is contiguous at page size 64)
// Both KV dtypes: bf16 (32 KB tiles) and fp8 (16 KB: fp8 8/1 rows sit at ~67% of the ceiling on an H100 -- the
// stream, or the per-tile e4m3 conversions?).
// Read: if `ring S=3, 2 CTAs/SM, spin 800` lands near the kernel's TB/s and deeper rings or bulk copies land
// clearly higher, the stream mechanism is the lever; if every form stays near the kernel, the pattern / DRAM is.
//   nvcc -std=c++17 -I. -gencode arch=compute_90a,code=sm_90a -O3 -o decode_ring_probe tools/decode_ring_probe.cu
//   ./decode_ring_probe
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "probe_graph.cuh"

// kTile: a 64-token tile's bytes, K then V: 32768 for bf16 8/1/128, 16384 for fp8.
constexpr int kThreads = 128;  // the decode kernel's 4 warps

struct Params {
  const uint8_t* kv;      // the block pool
  const int32_t* blocks;  // tile -> block of this launch's set
  int tiles;
  int ctas;
  int spin;
  uint32_t* out;
};

__device__ __forceinline__ uint32_t Smem(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void Spin(int cycles) {
  if (cycles <= 0) return;
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

// The contiguous tile run [begin, end) of this CTA: the planner's even share.
__device__ __forceinline__ void Share(const Params& p, int* begin, int* end) {
  const int per = (p.tiles + p.ctas - 1) / p.ctas;
  *begin = min(p.tiles, static_cast<int>(blockIdx.x) * per);
  *end = min(p.tiles, *begin + per);
}

template <int kTile>
__global__ void __launch_bounds__(kThreads) LdgKernel(Params p) {
  constexpr int kChunks = kTile / 16;
  int begin, end;
  Share(p, &begin, &end);
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (int t = begin; t < end; ++t) {
    const uint4* src = reinterpret_cast<const uint4*>(p.kv + static_cast<int64_t>(p.blocks[t]) * kTile);
    uint4 v[kChunks / kThreads];
#pragma unroll
    for (int i = 0; i < kChunks / kThreads; ++i) {
      asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(v[i].x), "=r"(v[i].y), "=r"(v[i].z), "=r"(v[i].w)
                   : "l"(src + threadIdx.x + i * kThreads));
    }
#pragma unroll
    for (int i = 0; i < kChunks / kThreads; ++i) {
      acc.x ^= v[i].x;
      acc.y ^= v[i].y;
      acc.z ^= v[i].z;
      acc.w ^= v[i].w;
    }
    Spin(p.spin);
  }
  if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x12345678u) p.out[blockIdx.x] = acc.x;
}

// Reads every 16 bytes of a landed stage once (the MMAs' ldmatrix traffic) and folds them into acc.
template <int kTile>
__device__ __forceinline__ uint32_t ReadStage(const uint8_t* stage) {
  constexpr int kChunks = kTile / 16;
  uint4 a = make_uint4(0, 0, 0, 0);
#pragma unroll 4
  for (int i = threadIdx.x; i < kChunks; i += kThreads) {
    const uint4 v = reinterpret_cast<const uint4*>(stage)[i];
    a.x ^= v.x;
    a.y ^= v.y;
    a.z ^= v.z;
    a.w ^= v.w;
  }
  return a.x ^ a.y ^ a.z ^ a.w;
}

template <int kTile, int S>
__global__ void __launch_bounds__(kThreads) CpAsyncRing(Params p) {
  constexpr int kChunks = kTile / 16;
  extern __shared__ __align__(1024) uint8_t ring[];
  int begin, end;
  Share(p, &begin, &end);
  auto issue = [&](int t) {
    const uint8_t* src = p.kv + static_cast<int64_t>(p.blocks[t]) * kTile;
    uint8_t* dst = ring + ((t - begin) % S) * kTile;
#pragma unroll
    for (int i = 0; i < kChunks / kThreads; ++i) {
      const int c = threadIdx.x + i * kThreads;
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(Smem(dst + c * 16)), "l"(src + c * 16));
    }
  };
  for (int k = 0; k < S - 1; ++k) {
    if (begin + k < end) issue(begin + k);
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  }
  uint32_t acc = 0;
  for (int t = begin; t < end; ++t) {
    // as the decode kernel's loop: refill the slot tile t - 1 left, then wait for tile t (S - 1 tiles stay in flight)
    if (t + S - 1 < end) issue(t + S - 1);
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    asm volatile("cp.async.wait_group %0;\n" ::"n"(S - 1) : "memory");
    __syncthreads();
    acc ^= ReadStage<kTile>(ring + ((t - begin) % S) * kTile);
    Spin(p.spin);
    __syncthreads();  // tile t's slot is free for the next iteration's refill
  }
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
  if (acc == 0x12345678u) p.out[blockIdx.x] = acc;
}

template <int kTile, int S>
__global__ void __launch_bounds__(kThreads) BulkRing(Params p) {
  extern __shared__ __align__(1024) uint8_t ring[];
  __shared__ __align__(8) uint64_t full[S];
  int begin, end;
  Share(p, &begin, &end);
  auto issue = [&](int t) {  // thread 0 only
    const int slot = (t - begin) % S;
    const uint32_t bar = Smem(&full[slot]);
    const uint8_t* src = p.kv + static_cast<int64_t>(p.blocks[t]) * kTile;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(kTile) : "memory");
    for (int h = 0; h < 2; ++h) {
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                       Smem(ring + slot * kTile + h * (kTile / 2))),
                   "l"(src + h * (kTile / 2)), "r"(kTile / 2), "r"(bar)
                   : "memory");
    }
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(Smem(&full[s])));
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    for (int k = 0; k < S - 1 && begin + k < end; ++k) issue(begin + k);
  }
  __syncthreads();
  uint32_t acc = 0;
  for (int t = begin; t < end; ++t) {
    const int i = t - begin;
    MbarWaitParity(Smem(&full[i % S]), (i / S) & 1);
    acc ^= ReadStage<kTile>(ring + (i % S) * kTile);
    Spin(p.spin);
    __syncthreads();  // every thread is done with tile t's slot
    if (threadIdx.x == 0 && t + S - 1 < end) issue(t + S - 1);
  }
  if (acc == 0x12345678u) p.out[blockIdx.x] = acc;
}

struct Workload {
  const char* name;
  int tiles;
};

int main() {
  double ceiling = 0;
  const int sms = PrintDeviceAndCopyCeiling(&ceiling);

  const Workload workloads[] = {{"64x4K", 4096}, {"1x128K+31x4K", 4032}};
  const int max_tiles = 4096;
  const int pool = 2 * max_tiles + 1;  // two sets, as the bench's rotating sets (3 x L2 / KV bytes -> 2)
  uint8_t* kv = nullptr;
  CHECK(cudaMalloc(&kv, static_cast<int64_t>(pool) * 32768));
  CHECK(cudaMemset(kv, 1, static_cast<int64_t>(pool) * 32768));
  std::vector<int32_t> perm(pool);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(0));
  int32_t* blocks = nullptr;
  CHECK(cudaMalloc(&blocks, 2 * max_tiles * sizeof(int32_t)));
  CHECK(cudaMemcpy(blocks, perm.data(), 2 * max_tiles * sizeof(int32_t), cudaMemcpyHostToDevice));
  uint32_t* out = nullptr;
  CHECK(cudaMalloc(&out, 1 << 20));

  struct Form {
    const char* name;
    void (*kernel)(Params);
    int stages, per_sm;  // stages of dynamic shared memory (0: none)
  };
  auto run = [&](const char* kv_name, int tile_bytes, const std::vector<Form>& forms) {
    for (const Form& f : forms) {
      const int smem = f.stages * tile_bytes;
      if (smem > 48 * 1024) CHECK(cudaFuncSetAttribute(f.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    }
    for (const Workload& w : workloads) {
      for (const Form& f : forms) {
        for (int spin : {0, 800, 1600}) {
          Params p = {kv, blocks, w.tiles, f.per_sm * sms, spin, out};
          const double us = GraphMicrosPerCall([&](int i, cudaStream_t s) {
            Params q = p;
            q.blocks = blocks + (i % 2) * max_tiles;  // alternate the two sets
            f.kernel<<<q.ctas, kThreads, f.stages * tile_bytes, s>>>(q);
          });
          const double tbps = static_cast<double>(w.tiles) * tile_bytes / us * 1e-6;
          std::printf("%-5s %-14s %-22s %5d %9.1f %7.2f %7.0f%%\n", kv_name, w.name, f.name, spin, us, tbps,
                      100 * tbps / ceiling);
        }
      }
    }
  };
  std::printf("%-5s %-14s %-22s %5s %9s %7s %8s\n", "kv", "workload", "form", "spin", "us", "TB/s", "%ceil");
  run("bf16", 32768,
      {{"ldg, 2 CTAs/SM", LdgKernel<32768>, 0, 2},
       {"ldg, 4 CTAs/SM", LdgKernel<32768>, 0, 4},
       {"ring S=3, 2 CTAs/SM", CpAsyncRing<32768, 3>, 3, 2},
       {"ring S=6, 1 CTA/SM", CpAsyncRing<32768, 6>, 6, 1},
       {"bulk S=3, 2 CTAs/SM", BulkRing<32768, 3>, 3, 2},
       {"bulk S=6, 1 CTA/SM", BulkRing<32768, 6>, 6, 1}});
  // fp8 KV: 16 KB tiles; the kernel's ring is 4 stages (decode_kernel.cuh: up to 96 KB)
  run("fp8", 16384,
      {{"ldg, 4 CTAs/SM", LdgKernel<16384>, 0, 4},
       {"ring S=4, 2 CTAs/SM", CpAsyncRing<16384, 4>, 4, 2},
       {"ring S=4, 3 CTAs/SM", CpAsyncRing<16384, 4>, 4, 3},
       {"bulk S=4, 2 CTAs/SM", BulkRing<16384, 4>, 4, 2}});
  return 0;
}
