// Can a grouped GEMM's producer gather its A rows itself, one TMA box per row, instead of reading rows that a gather
// kernel wrote first? (dev tool, GPU only; session 35; bench/NOTES.md "the gather-in-the-producer lead".) The token
// gather costs ~28 us of Qwen3-30B's fp8 layer at T=4096 and ~66 us of Hy3-TP8's (H100, session 31 profile) and sits
// at 84% of its bytes' floor, so only removing it pays. Two questions before writing a mainloop:
//   check  does a 2D TMA load of a box of 1 row x 128 bytes with CU_TENSOR_MAP_SWIZZLE_128B, landing at
//          tile + 128 * r (tile 1024-byte aligned), put row r exactly where one 128-row box would (the K-major SW128
//          layout the wgmma descriptors read: 16-byte chunk c of row r at 128 r + 16 (c ^ (r % 8)))? Checked byte for
//          byte against that formula on random token ids, and the formula itself against one 128-row box.
//   speed  what 128 row boxes per k-block cost against one 128-row box: a persistent CTA per SM runs a 4-stage
//          ring of (A 128 x 128 B [+ B 256 x 128 B]) stages through full/empty mbarriers, consumer warps waiting on
//          each stage and (optionally) spinning ~an MMA's time before releasing it. Qwen3-30B fp8 gate-up at T=4096:
//          32768 rows (4096 tokens x top-8) in 256 tiles of 128, 6 N tiles of 256, K = 2048 (16 k-blocks); A rows
//          from x_q [4096, 2048] (8 MB, L2-resident) through random token ids, against today's contiguous gathered
//          rows [32768, 2048] (67 MB); B from a [128 x 1536, 2048] weight (403 MB, streamed).
//          Issuers: one lane issues all 128 row boxes, or the 32 lanes of the producer warp 4 each; or (cp.async,
//          added after session 35 measured the row boxes at ~58 cycles each) the producer warpgroup's 128 threads
//          copy the rows by 16-byte cp.async into the same swizzled layout, completing through the full barrier;
//          or one warp does (32 cp.async per lane per k-block: the ptr-array kernel's spare MainloopAux warp).
//   nvcc -std=c++17 -I. -I$CUTLASS_INCLUDE -gencode arch=compute_90a,code=sm_90a -O3 -o gather_tma_probe \
//        tools/gather_tma_probe.cu && ./gather_tma_probe [--check-only]
#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cute/arch/copy_sm90_tma.hpp"
#include "cutlass/arch/barrier.h"
#include "probe_graph.cuh"

namespace {

constexpr int kRows = 128;         // the A tile's rows (a 128-row cooperative tile)
constexpr int kKBytes = 128;       // one k-block of e4m3: one 128-byte swizzle row
constexpr int kBRows = 256;        // the B tile's rows (N = 256)
constexpr int kStages = 4;
constexpr int kABytes = kRows * kKBytes;    // 16 KB
constexpr int kBBytes = kBRows * kKBytes;   // 32 KB
constexpr int kThreads = 256;               // warps 0-3 produce (a producer warpgroup), 4-7 consume
constexpr int kProducerThreads = 128;       // TMA modes issue from warp 0 only; cp.async uses all four warps
constexpr int kConsumerWarps = 4;

// Qwen3-30B-A3B's gate-up at T=4096, fp8
constexpr int kTokens = 4096, kTopK = 8, kHidden = 2048, kExperts = 128, kN = 1536;
constexpr int kPairs = kTokens * kTopK;
constexpr int kMTiles = kPairs / kRows, kNTiles = kN / kBRows, kKBlocks = kHidden / kKBytes;

// kCpAsync: the producer warpgroup (4 warps) gathers; kCpAsyncOneWarp: one warp does (CUTLASS's ptr-array kernels
// have one spare producer warp, MainloopAux, that the blockwise-scaling collective already feeds by cp.async).
enum class AMode { kBox, kRowsOneLane, kRowsWarp, kCpAsync, kCpAsyncOneWarp };

struct Smem {
  alignas(1024) uint8_t a[kStages][kABytes];
  alignas(1024) uint8_t b[kStages][kBBytes];
  alignas(8) uint64_t full[kStages];
  alignas(8) uint64_t empty[kStages];
  int ids[kRows];
};

using Barrier = cutlass::arch::ClusterTransactionBarrier;
using EmptyBarrier = cutlass::arch::ClusterBarrier;

__device__ __forceinline__ void LoadRow(const CUtensorMap* map, uint64_t* bar, uint8_t* dst, int k, int row) {
  cute::SM90_TMA_LOAD_2D::copy(map, bar, 0, dst, k, row);
}

// One tile's A for k-block kb into `dst`: one 128-row box (rows `row0`..) or a box per row through `ids`.
template <AMode kMode>
__device__ __forceinline__ void LoadA(const CUtensorMap* box_map, const CUtensorMap* row_map, uint64_t* bar,
                                      uint8_t* dst, int kb, int row0, const int* ids, int lane) {
  if constexpr (kMode == AMode::kBox) {
    if (lane == 0) LoadRow(box_map, bar, dst, kb * kKBytes, row0);
  } else if constexpr (kMode == AMode::kRowsOneLane) {
    if (lane == 0) {
      for (int r = 0; r < kRows; ++r) LoadRow(row_map, bar, dst + r * kKBytes, kb * kKBytes, ids[r]);
    }
  } else {
#pragma unroll
    for (int j = 0; j < kRows / 32; ++j) {
      const int r = lane + 32 * j;
      LoadRow(row_map, bar, dst + r * kKBytes, kb * kKBytes, ids[r]);
    }
  }
}

// The cp.async gather (CUTLASS's KernelCpAsyncWarpSpecialized form): producer thread t copies 16-byte chunk t % 8 of
// rows t / 8 + 16 j (j = 0..7) -- a warp instruction moves 4 whole 128-byte rows -- to where the 128B swizzle puts
// it (chunk c of row r at 128 r + 16 (c ^ (r % 8))). `tok` holds the thread's 8 rows' tokens.
__device__ __forceinline__ void GatherA(const uint8_t* x, uint8_t* dst, int kb, const int (&tok)[8], int t) {
  const int chunk = t % 8, row0 = t / 8;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int r = row0 + 16 * j;
    const uint32_t d = cute::cast_smem_ptr_to_uint(dst + r * kKBytes + 16 * (chunk ^ (r % 8)));
    const uint8_t* src = x + static_cast<int64_t>(tok[j]) * kHidden + kb * kKBytes + 16 * chunk;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
  }
}

// The same from one warp: lane l copies chunk l % 8 of rows l / 8 + 4 j (j = 0..31), tokens from the tile's ids in
// shared memory (32 per lane would not fit a producer warp's ~40 registers).
__device__ __forceinline__ void GatherAOneWarp(const uint8_t* x, uint8_t* dst, int kb, const int* ids, int lane) {
  const int chunk = lane % 8, row0 = lane / 8;
#pragma unroll 8
  for (int j = 0; j < kRows / 4; ++j) {
    const int r = row0 + 4 * j;
    const uint32_t d = cute::cast_smem_ptr_to_uint(dst + r * kKBytes + 16 * (chunk ^ (r % 8)));
    const uint8_t* src = x + static_cast<int64_t>(ids[r]) * kHidden + kb * kKBytes + 16 * chunk;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
  }
}

// This thread's cp.asyncs so far arrive on `bar` when they land (noinc: the arrival is one of the barrier's count).
__device__ __forceinline__ void CpAsyncArriveNoinc(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(cute::cast_smem_ptr_to_uint(bar))
               : "memory");
}

struct Params {
  CUtensorMap a_box;   // gathered rows [kPairs, kHidden], box {128, 128}
  CUtensorMap a_row;   // x_q [kTokens, kHidden], box {128, 1}
  CUtensorMap b_box;   // w [kExperts * kN, kHidden], box {128, 256}
  const uint8_t* x;    // x_q [kTokens, kHidden] (the cp.async mode's source)
  const int* ids;      // [kPairs] token of each sorted row
  int tiles;           // work tiles (M tile x N tile), handed out tile += gridDim.x
  int spin;            // consumer cycles per stage after it landed (~ the stage's MMAs)
  bool with_b;
  uint32_t* sink;
};

template <AMode kMode>
__global__ void __launch_bounds__(kThreads, 1) RingKernel(const __grid_constant__ Params p) {
  extern __shared__ uint8_t dyn[];
  Smem& s = *reinterpret_cast<Smem*>((reinterpret_cast<uintptr_t>(dyn) + 1023) / 1024 * 1024);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) {
      // cp.async: every producer thread's noinc arrival, plus thread 0's (which carries B's transaction bytes)
      const int arrivals = kMode == AMode::kCpAsync ? kProducerThreads + 1 : kMode == AMode::kCpAsyncOneWarp ? 33 : 1;
      Barrier::init(&s.full[i], arrivals);
      EmptyBarrier::init(&s.empty[i], kConsumerWarps);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  const uint32_t bytes = kABytes + (p.with_b ? kBBytes : 0);
  int it = 0;
  constexpr bool kByCpAsync = kMode == AMode::kCpAsync || kMode == AMode::kCpAsyncOneWarp;
  if (warp < 4) {  // the producer warpgroup: all four warps gather in kCpAsync, warp 0 issues in the other modes
    if (kMode != AMode::kCpAsync && warp > 0) return;
    const int t = threadIdx.x;
    for (int tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
      const int m = tile % kMTiles, n = tile / kMTiles, expert = (m * kRows / (kPairs / kExperts)) % kExperts;
      int tok[8];  // kCpAsync: this thread's 8 rows' tokens; the other modes read the tile's ids from shared memory
      if constexpr (kMode == AMode::kCpAsync) {
#pragma unroll
        for (int j = 0; j < 8; ++j) tok[j] = p.ids[m * kRows + t / 8 + 16 * j];
      } else {
        __syncwarp();
        for (int r = lane; r < kRows; r += 32) s.ids[r] = p.ids[m * kRows + r];
        __syncwarp();
      }
      for (int kb = 0; kb < kKBlocks; ++kb, ++it) {
        const int st = it % kStages;
        if (it >= kStages) EmptyBarrier::wait(&s.empty[st], ((it / kStages) - 1) & 1);
        // thread 0 arrives first, carrying the TMA bytes (B's only when A comes by cp.async)
        if (t == 0) Barrier::arrive_and_expect_tx(&s.full[st], kByCpAsync ? bytes - kABytes : bytes);
        if constexpr (!kByCpAsync) __syncwarp();
        const int b_row = expert * kN + n * kBRows;
        // B: before the cp.async gather (in flight while the lanes copy), after the TMA modes' A (as measured)
        if (kByCpAsync && p.with_b && t == 0) LoadRow(&p.b_box, &s.full[st], s.b[st], kb * kKBytes, b_row);
        if constexpr (kMode == AMode::kCpAsync) {
          GatherA(p.x, s.a[st], kb, tok, t);
        } else if constexpr (kMode == AMode::kCpAsyncOneWarp) {
          GatherAOneWarp(p.x, s.a[st], kb, s.ids, lane);
        } else {
          LoadA<kMode>(&p.a_box, &p.a_row, &s.full[st], s.a[st], kb, m * kRows, s.ids, lane);
          if (p.with_b && t == 0) LoadRow(&p.b_box, &s.full[st], s.b[st], kb * kKBytes, b_row);
        }
        if constexpr (kByCpAsync) CpAsyncArriveNoinc(&s.full[st]);
      }
    }
  } else {
    uint32_t acc = 0;
    for (int tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
      for (int kb = 0; kb < kKBlocks; ++kb, ++it) {
        const int st = it % kStages;
        Barrier::wait(&s.full[st], (it / kStages) & 1);
        // generic-proxy (cp.async) writes before the async proxy's (wgmma's) reads: the real consumer's fence
        if constexpr (kByCpAsync) cutlass::arch::fence_view_async_shared();
        acc += s.a[st][(threadIdx.x * 37) % kABytes];
        if (p.spin > 0) {
          const long long t0 = clock64();
          while (clock64() - t0 < p.spin) {
          }
        }
        __syncwarp();
        if (lane == 0) EmptyBarrier::arrive(&s.empty[st]);
      }
    }
    if (acc == 0xdeadbeef) p.sink[threadIdx.x] = acc;
  }
}

// One CTA: tile 0's rows through random ids, by row boxes, checked byte for byte against the SW128 formula; then
// rows 0-127 of x by one box against the same formula (the formula's own check); then the cp.async gather's rows.
// Mismatches counted into out[0], [1], [2]. Run with 128 threads.
__global__ void CheckKernel(const __grid_constant__ Params p, const uint8_t* x, int kb, uint32_t* out) {
  extern __shared__ uint8_t dyn[];
  Smem& s = *reinterpret_cast<Smem*>((reinterpret_cast<uintptr_t>(dyn) + 1023) / 1024 * 1024);
  const int lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    Barrier::init(&s.full[0], 1);
    Barrier::init(&s.full[1], 1);
    cutlass::arch::fence_barrier_init();
  }
  for (int r = threadIdx.x; r < kRows; r += blockDim.x) s.ids[r] = p.ids[r];
  __syncthreads();
  if (threadIdx.x < 32) {
    if (lane == 0) Barrier::arrive_and_expect_tx(&s.full[0], kABytes);
    __syncwarp();
    LoadA<AMode::kRowsWarp>(&p.a_box, &p.a_row, &s.full[0], s.a[0], kb, 0, s.ids, lane);
    if (lane == 0) {
      Barrier::arrive_and_expect_tx(&s.full[1], kABytes);
      LoadRow(&p.a_box, &s.full[1], s.a[1], kb * kKBytes, 0);
    }
  }
  int tok[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) tok[j] = s.ids[threadIdx.x / 8 + 16 * j];
  GatherA(x, s.a[2], kb, tok, threadIdx.x);
  asm volatile("cp.async.wait_all;" ::: "memory");
  Barrier::wait(&s.full[0], 0);
  Barrier::wait(&s.full[1], 0);
  __syncthreads();
  uint32_t bad_rows = 0, bad_box = 0, bad_cp = 0;
  for (int i = threadIdx.x; i < kABytes; i += blockDim.x) {
    const int r = i / kKBytes, c = i % kKBytes;
    const int at = r * kKBytes + 16 * ((c / 16) ^ (r % 8)) + c % 16;
    bad_rows += s.a[0][at] != x[static_cast<int64_t>(s.ids[r]) * kHidden + kb * kKBytes + c];
    // the box holds rows 0..127 of the gathered buffer, which the host filled as x[ids[row]]
    bad_box += s.a[1][at] != x[static_cast<int64_t>(p.ids[r]) * kHidden + kb * kKBytes + c];
    bad_cp += s.a[2][at] != x[static_cast<int64_t>(s.ids[r]) * kHidden + kb * kKBytes + c];
  }
  atomicAdd(&out[0], bad_rows);
  atomicAdd(&out[1], bad_box);
  atomicAdd(&out[2], bad_cp);
}

PFN_cuTensorMapEncodeTiled_v12000 Encoder() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
  if (fn == nullptr || q != cudaDriverEntryPointSuccess) {
    std::printf("cuTensorMapEncodeTiled not found\n");
    std::exit(1);
  }
  return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
}

CUtensorMap Map2D(const void* base, int64_t rows, int64_t cols, int box_rows) {
  CUtensorMap m;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols)};
  const cuuint32_t box[2] = {kKBytes, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem[2] = {1, 1};
  const CUresult r = Encoder()(&m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box, elem,
                               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::printf("cuTensorMapEncodeTiled failed: %d\n", static_cast<int>(r));
    std::exit(1);
  }
  return m;
}

template <AMode kMode>
double Time(Params p, int sms, int smem) {
  CHECK(cudaFuncSetAttribute(RingKernel<kMode>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  return GraphMicrosPerCall([&](int, cudaStream_t st) { RingKernel<kMode><<<sms, kThreads, smem, st>>>(p); });
}

}  // namespace

int main(int argc, char** argv) {
  const bool check_only = argc > 1 && std::string(argv[1]) == "--check-only";  // for compute-sanitizer
  int sms = 0, clock_khz = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  // x_q and the gathered rows the gather kernel would write from it (x_g[i] = x_q[ids[i]]), random ids
  std::mt19937 rng(35);
  std::vector<int> ids(kPairs);
  for (int& t : ids) t = static_cast<int>(rng() % kTokens);
  std::vector<uint8_t> x(static_cast<size_t>(kTokens) * kHidden);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  std::vector<uint8_t> xg(static_cast<size_t>(kPairs) * kHidden);
  for (int i = 0; i < kPairs; ++i) {
    std::copy_n(&x[static_cast<size_t>(ids[i]) * kHidden], kHidden, &xg[static_cast<size_t>(i) * kHidden]);
  }
  uint8_t *dx, *dxg, *dw;
  int* dids;
  uint32_t *dout, *sink;
  const size_t w_bytes = static_cast<size_t>(kExperts) * kN * kHidden;
  CHECK(cudaMalloc(&dx, x.size()));
  CHECK(cudaMalloc(&dxg, xg.size()));
  CHECK(cudaMalloc(&dw, w_bytes));
  CHECK(cudaMalloc(&dids, kPairs * sizeof(int)));
  CHECK(cudaMalloc(&dout, 64));
  CHECK(cudaMalloc(&sink, 4096));
  CHECK(cudaMemcpy(dx, x.data(), x.size(), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dxg, xg.data(), xg.size(), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dw, 1, w_bytes));
  CHECK(cudaMemcpy(dids, ids.data(), kPairs * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dout, 0, 64));

  Params p{};
  p.a_box = Map2D(dxg, kPairs, kHidden, kRows);
  p.a_row = Map2D(dx, kTokens, kHidden, 1);
  p.b_box = Map2D(dw, static_cast<int64_t>(kExperts) * kN, kHidden, kBRows);
  p.x = dx;
  p.ids = dids;
  p.tiles = kMTiles * kNTiles;
  p.sink = sink;
  const int smem = static_cast<int>(sizeof(Smem)) + 1024;

  // check, on two k-blocks
  CHECK(cudaFuncSetAttribute(CheckKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  uint32_t bad[3] = {0, 0, 0};
  for (int kb : {0, 5}) {
    CheckKernel<<<1, 128, smem>>>(p, dx, kb, dout);
    CHECK(cudaDeviceSynchronize());
  }
  CHECK(cudaMemcpy(bad, dout, 12, cudaMemcpyDeviceToHost));
  std::printf("check (bad bytes of %d each): row boxes vs SW128 formula %u; one 128-row box vs formula %u; cp.async "
              "gather vs formula %u\n", 2 * kABytes, bad[0], bad[1], bad[2]);
  if (check_only) return bad[0] + bad[1] + bad[2] == 0 ? 0 : 2;

  const double a_mb = static_cast<double>(kPairs) * kHidden * kNTiles / 1e6;  // A bytes the GEMM loads (per N tile)
  const double b_mb = static_cast<double>(kMTiles) * kNTiles * kBBytes * kKBlocks / 1e6;
  std::printf("%d SMs, %d MHz; per launch %d tiles x %d k-blocks; A %.0f MB into shared memory, B %.0f MB\n", sms,
              clock_khz / 1000, p.tiles, kKBlocks, a_mb, b_mb);
  std::printf("%-8s %-6s %-14s %10s %12s %14s\n", "B", "spin", "A", "us", "A GB/s", "cyc/k-block/SM");
  for (bool with_b : {false, true}) {
    for (int spin : {0, 1000, 1700}) {
      p.with_b = with_b;
      p.spin = spin;
      const double t[5] = {Time<AMode::kBox>(p, sms, smem), Time<AMode::kRowsOneLane>(p, sms, smem),
                           Time<AMode::kRowsWarp>(p, sms, smem), Time<AMode::kCpAsync>(p, sms, smem),
                           Time<AMode::kCpAsyncOneWarp>(p, sms, smem)};
      const char* names[5] = {"box (today)", "rows, 1 lane", "rows, warp", "cp.async, WG", "cp.async, warp"};
      for (int i = 0; i < 5; ++i) {
        const double kblocks_per_sm = static_cast<double>(p.tiles) * kKBlocks / sms;
        std::printf("%-8s %-6d %-14s %10.1f %12.0f %14.0f\n", with_b ? "yes" : "no", spin, names[i], t[i],
                    a_mb * 1e3 / t[i], t[i] * clock_khz / 1e3 / kblocks_per_sm);
      }
    }
  }
  return 0;
}
