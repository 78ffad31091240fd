// fused_moe stream path, single-token fp8_tensor layer with the down weights streamed during the gate-up
// (stream_overlap.h).
//
// Why: at T = 1 the layer is two weight streams (Qwen3-30B: w13 25 MB, w2 12.6 MB) that the two-kernel stream path
// runs one after the other -- its gate-up fills every SM's shared memory with one-shot CTAs, so the down CTAs only
// become resident, and only start streaming w2, once the gate-up grid has drained (profile, bench/NOTES.md session
// 15: gate-up 11.1 us + down 7.6 us after it). Here the gate-up is a persistent grid of one CTA per SM with a ring
// of at most 64 KB, so the down CTAs fit beside it: the gate-up lets them launch (PDL) as soon as all its CTAs run,
// and each down CTA copies its whole w2 share into shared memory BEFORE its PDL wait. w2 streams while w13 does;
// after the gate-up grid completes only the intermediate (P x I bytes, from L2) and the MMAs are left.
//
// gate-up: a unit is (hit expert, 32 columns of I): A = its 32 gate and 32 up rows (64 x H, the wgmma M), B = x of
//   all T tokens (N = 8). A cluster of C CTAs takes units cl, cl + clusters, ... (round-robin), each CTA the K groups
//   [rank n, rank n + n) of every unit (n = H / 128 / C); the CTA's A tiles flow through a cp.async ring of 8 KB
//   stages across its units, x is quantized into B once. Per unit the partial tiles are added in rank order through
//   distributed shared memory and rank 0 writes inter[pair, cols] = e4m3(silu(gate) * up / a2_scale).
// down: a CTA takes 64 rows of H and the hit experts s = rank, rank + C2, ...; the expert index runs along K:
//   D[h, j] = sum_s w2[e_s, h, :] . B_s[j, :] with B_s[j] = inter[j] if pair j is routed to e_s, else 0 -- so column
//   j collects exactly its own expert's product and the other experts add exact zeros (bitwise the same result for
//   any split). The partial tiles are added in rank order (DSMEM); rank 0 scales column j by a2_scale * w2_scale[e_j]
//   and writes y[t, h] = sum_j (j order) w[t, j] * D[h, t k + j] (+ shared), the stream path's reduce.
// Both operands are K-major in shared memory under the 128-byte swizzle (wgmma_sm90.cuh); every K group's four
// m64n8k32 products are promoted into fp32 registers (the fp8 tensor-core accumulator is not a full fp32 one).
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <mutex>
#include <unordered_set>

#include "csrc/common/arch.h"
#include "csrc/common/launch.cuh"
#include "csrc/common/mma.cuh"
#include "csrc/common/numeric.h"
#include "csrc/moe/moe_common.cuh"
#include "csrc/moe/stream_overlap.h"
#include "csrc/moe/wgmma_sm90.cuh"

namespace hpc::moe {
namespace {

namespace cg = cooperative_groups;

// One warpgroup per CTA (16 warps copying measured slower: session 16).
constexpr int kThreads = 128;
constexpr int kChunks = 64 * 8 / kThreads;  // 16-byte chunks of one 64-row K group per thread
constexpr int kMmaThreads = 128;
constexpr int kUnitCols = 32;                      // gate-up: columns of I per unit (32 gate + 32 up rows = M 64)
constexpr int kDownRows = 64;                      // down: rows of H per CTA (M 64)
constexpr int kGroupK = 128;                       // K per group: one 128-byte swizzle atom row of e4m3
constexpr int kMaxPairs = 8;                       // T * top_k: the wgmma N
constexpr int kAGroupBytes = 64 * kGroupK;         // 8 KB
constexpr int kBGroupBytes = kMaxPairs * kGroupK;  // 1 KB
constexpr int kUpStages = 8;                       // gate-up ring: 64 KB, 7 groups in flight (1 CTA per SM)
constexpr int kMaxUpGroups = 16;                   // K groups per gate-up CTA (B staged once: <= 16 KB)
constexpr int kMaxCluster = 8;                     // portable cluster size
constexpr int kMaxDownShare = 96 * 1024;           // a down CTA's w2 share, all in shared memory at once
constexpr int kPartialBytes = kMmaThreads * 16;       // one CTA's m64n8 fp32 tile in registers (float4 per thread)
constexpr int kTileBytes = 64 * (kMaxPairs + 1) * 4;
constexpr int kSmPerSmBytes = 228 * 1024;          // shared memory per SM (each CTA also reserves 1 KB)

struct UpParams {
  OverlapArgs a;
  int cluster, clusters, groups_per_cta, col_blocks;
  int no_fence;  // diagnostic (HPC_XLA_MOE_OVERLAP_NOFENCE=1): WRONG results, times the ring without the proxy fence
};
struct DownParams {
  OverlapArgs a;
  int cluster, kgroups;  // kgroups = ceil(I / 128)
};

__device__ __forceinline__ uint32_t PackE4M3x4(float a, float b, float c, float d, float mul) {
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a * mul, b * mul), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c * mul, d * mul), __NV_SATFINITE, __NV_E4M3);
  return lo | (hi << 16);
}

// The hit local experts in pair order, each once (repeated ids share one), and every pair's local expert or -1.
// Warp 0 writes them; returns after a barrier with the count (uniform).
__device__ int HitExperts(const OverlapArgs& a, int* pair_e, int* slot_e) {
  __shared__ int count;
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x, P = a.tokens * a.top_k;
    const int id = lane < P ? a.ids[lane] : -1;
    const int e = id - a.expert_offset;
    const bool local = lane < P && e >= 0 && e < a.experts;
    bool first = local;
    for (int j = 0; j < kMaxPairs; ++j) {  // an earlier pair with the same id makes this one a repeat
      const int other = __shfl_sync(0xffffffffu, id, j);
      if (j < lane && other == id) first = false;
    }
    const unsigned m = __ballot_sync(0xffffffffu, first);
    if (lane < kMaxPairs) pair_e[lane] = local ? e : -1;
    if (first) slot_e[__popc(m & ((1u << lane) - 1))] = e;
    if (lane == 0) count = __popc(m);
  }
  __syncthreads();
  return count;
}

// kSteps (1-4) k32 products of one K group into a fresh tile, promoted into acc (cf. WgmmaGroupE4M3; a compile-time
// count keeps ptxas from inserting warpgroup.arrive between the wgmmas).
template <int kSteps>
__device__ __forceinline__ void WgmmaGroupSteps(float (&acc)[4], uint32_t a_tile, uint32_t b_tile) {
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  FenceRegs(d);
  WgmmaFence();
#pragma unroll
  for (int ks = 0; ks < kSteps; ++ks) WgmmaE4M3(d, SmemDescSw128(a_tile + ks * 32), SmemDescSw128(b_tile + ks * 32), ks);
  WgmmaCommit();
  WgmmaWaitAll();
  FenceRegs(d);
#pragma unroll
  for (int i = 0; i < 4; ++i) acc[i] = __fadd_rn(acc[i], d[i]);
}

// The cluster's partial tiles added in rank order into rank 0's acc (every CTA calls it; red = rank 0's buffer of
// cluster - 1 tiles). Returns whether this CTA is rank 0. The first barrier also orders the previous call's reads
// of red before this call's writes.
__device__ __forceinline__ bool ClusterReduce(float (&acc)[4], float4* red, int cluster, int rank) {
  if (cluster == 1) return true;
  cg::cluster_group cl = cg::this_cluster();
  cl.sync();
  const bool mma = threadIdx.x < kMmaThreads;
  if (rank > 0 && mma) {
    *cl.map_shared_rank(red + (rank - 1) * kMmaThreads + threadIdx.x, 0) = make_float4(acc[0], acc[1], acc[2], acc[3]);
  }
  cl.sync();
  if (rank > 0) return false;
  for (int r = 1; r < cluster && mma; ++r) {
    const float4 o = red[(r - 1) * kMmaThreads + threadIdx.x];
    acc[0] = __fadd_rn(acc[0], o.x), acc[1] = __fadd_rn(acc[1], o.y);
    acc[2] = __fadd_rn(acc[2], o.z), acc[3] = __fadd_rn(acc[3], o.w);
  }
  return true;
}

// The m64n8 tile into shared memory (row-major, pitch 9): wgmma's d layout, rows 16w + g (+ 8), columns 2q (+ 1).
__device__ __forceinline__ void StoreTile(float* tile, const float (&acc)[4]) {
  if (threadIdx.x >= kMmaThreads) return;
  const int w = threadIdx.x / 32, g = (threadIdx.x % 32) / 4, q = threadIdx.x % 4;
  constexpr int kPitch = kMaxPairs + 1;
  tile[(16 * w + g) * kPitch + 2 * q] = acc[0];
  tile[(16 * w + g) * kPitch + 2 * q + 1] = acc[1];
  tile[(16 * w + g + 8) * kPitch + 2 * q] = acc[2];
  tile[(16 * w + g + 8) * kPitch + 2 * q + 1] = acc[3];
}

__device__ __forceinline__ uint8_t* Align1024(uint8_t* dyn) {
  const uint32_t raw = SmemAddr(dyn);
  return dyn + (((raw + 1023u) & ~1023u) - raw);
}

// ------------------------------------------------------------------------------------------------ gate-up
template <bool kXFp8, int kUpStages>
__global__ void __launch_bounds__(kThreads) OverlapGateUpKernel(const __grid_constant__ UpParams p) {
  extern __shared__ uint8_t dyn[];
  __shared__ int pair_e[kMaxPairs], slot_e[kMaxPairs];
  const OverlapArgs& a = p.a;
  const int tid = threadIdx.x;
  const int C = p.cluster, n = p.groups_per_cta;
  const int rank = static_cast<int>(blockIdx.x) % C, cl = static_cast<int>(blockIdx.x) / C;
  PdlWait();              // topk_ids and x may come from the previous kernel (routing)
  PdlLaunchDependents();  // the down CTAs start copying w2 once every gate-up CTA runs
  const int n_hit = HitExperts(a, pair_e, slot_e);
  const int units = n_hit * p.col_blocks;
  const int my_units = units > cl ? (units - cl + p.clusters - 1) / p.clusters : 0;  // the cluster's, uniform
  if (my_units == 0) return;
  const int jobs = my_units * n;

  uint8_t* ring = Align1024(dyn);
  const uint32_t ring_s = SmemAddr(ring);
  uint8_t* b_ptr = ring + kUpStages * kAGroupBytes;
  const uint32_t b_s = SmemAddr(b_ptr);
  float4* red = reinterpret_cast<float4*>(b_ptr + n * kBGroupBytes);
  float* tile = reinterpret_cast<float*>(b_ptr + n * kBGroupBytes + (C - 1) * kPartialBytes);
  const int64_t H = a.hidden, I = a.inter_size;
  const int g0 = rank * n;

  // Job j = (the cluster's unit j / n, K group j % n): 512 chunks of 16 bytes, one per thread.
  int64_t row_off[kChunks];
  uint32_t sw[kChunks];
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    const int r = (tid + i * kThreads) / 8, c = tid % 8;  // rows 0-31 gate, 32-63 up (I rows further on)
    row_off[i] = (r < 32 ? r : I + r - 32) * H + c * 16;
    sw[i] = Sw128(r, c);
  }
  auto issue = [&](int j) {
    const int u = cl + (j / n) * p.clusters, s = j % n;
    const int e = slot_e[u / p.col_blocks], cb = u % p.col_blocks;
    const uint8_t* gate = a.w13 + (static_cast<int64_t>(e) * 2 * I + cb * kUnitCols) * H + (g0 + s) * kGroupK;
#pragma unroll
    for (int i = 0; i < kChunks; ++i) CpAsync16(ring_s + (j % kUpStages) * kAGroupBytes + sw[i], gate + row_off[i], true);
  };
#pragma unroll
  for (int j = 0; j < kUpStages - 1; ++j) {
    if (j < jobs) issue(j);
    CpAsyncCommit();
  }
  // B: x of tokens 0..T-1 over this CTA's K groups, e4m3 with the reference's rounding; rows T..7 zero.
  const float mul = kXFp8 ? 1.f : QuantMultiplier(*a.a13_scale);
  for (int i = tid; i < n * kMaxPairs * 8; i += kThreads) {
    const int s = i / (kMaxPairs * 8), t = (i / 8) % kMaxPairs, ch = i % 8;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (t < a.tokens) {
      const int64_t k = static_cast<int64_t>(g0 + s) * kGroupK + ch * 16;
      if constexpr (kXFp8) {
        v = *reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(a.x) + t * H + k);
      } else {
        const uint4* src = reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(a.x) + t * H + k);
        const uint4 w0 = src[0], w1 = src[1];
        const uint32_t w[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
        float f[16];
#pragma unroll
        for (int q = 0; q < 8; ++q) f[2 * q] = __uint_as_float(w[q] << 16), f[2 * q + 1] = __uint_as_float(w[q] & 0xffff0000u);
        v.x = PackE4M3x4(f[0], f[1], f[2], f[3], mul), v.y = PackE4M3x4(f[4], f[5], f[6], f[7], mul);
        v.z = PackE4M3x4(f[8], f[9], f[10], f[11], mul), v.w = PackE4M3x4(f[12], f[13], f[14], f[15], mul);
      }
    }
    *reinterpret_cast<uint4*>(b_ptr + s * kBGroupBytes + Sw128(t, ch)) = v;
  }
  const float a13 = *a.a13_scale, out_mul = QuantMultiplier(*a.a2_scale);

  float acc[4];
  for (int j = 0; j < jobs; ++j) {
    CpAsyncWait<kUpStages - 2>();  // job j's copies (this thread's) have landed
    if (!p.no_fence) FenceProxyAsync();
    __syncthreads();               // ... everyone's, and job j - 1's stage is free (its wgmmas were waited for)
    if (j + kUpStages - 1 < jobs) issue(j + kUpStages - 1);
    CpAsyncCommit();
    const int s = j % n;
    if (s == 0) acc[0] = acc[1] = acc[2] = acc[3] = 0.f;
    if (tid < kMmaThreads) WgmmaGroupE4M3(acc, ring_s + (j % kUpStages) * kAGroupBytes, b_s + s * kBGroupBytes);
    if (s != n - 1) continue;
    // The unit is complete on every rank: reduce, then rank 0 writes its 32 columns for the routed pairs.
    if (!ClusterReduce(acc, red, C, rank)) continue;
    const int u = cl + (j / n) * p.clusters;
    const int e = slot_e[u / p.col_blocks], cb = u % p.col_blocks;
    StoreTile(tile, acc);
    __syncthreads();
    const float ts = __fmul_rn(a13, a.w13_scale[e]);
    for (int i = tid; i < kUnitCols * a.tokens; i += kThreads) {
      constexpr int kPitch = kMaxPairs + 1;
      const int col = i % kUnitCols, t = i / kUnitCols;
      const float gv = __fmul_rn(tile[col * kPitch + t], ts), uv = __fmul_rn(tile[(kUnitCols + col) * kPitch + t], ts);
      const __nv_fp8_storage_t v = __nv_cvt_float_to_fp8(__fmul_rn(Silu(gv), uv) * out_mul, __NV_SATFINITE, __NV_E4M3);
      for (int k = 0; k < a.top_k; ++k) {
        const int pair = t * a.top_k + k;
        if (pair_e[pair] == e) a.inter[static_cast<int64_t>(pair) * I + cb * kUnitCols + col] = v;
      }
    }
    // the tile is rewritten only after the next unit's per-job barriers
  }
  CpAsyncWait<0>();
}

// --------------------------------------------------------------------------------------------------- down
__global__ void __launch_bounds__(kThreads) OverlapDownKernel(const __grid_constant__ DownParams p) {
  extern __shared__ uint8_t dyn[];
  __shared__ int pair_e[kMaxPairs], slot_e[kMaxPairs];
  __shared__ float pair_ts[kMaxPairs], pair_w[kMaxPairs];
  const OverlapArgs& a = p.a;
  const int tid = threadIdx.x, C = p.cluster, KG = p.kgroups;
  const int rank = static_cast<int>(blockIdx.x) % C;
  const int h0 = (static_cast<int>(blockIdx.x) / C) * kDownRows;
  const int64_t H = a.hidden, I = a.inter_size;
  const int P = a.tokens * a.top_k;
  // Before the PDL wait: only inputs of the op (topk_ids, weights, scales), complete once the gate-up kernel -- which
  // waited for its predecessors -- let us start. The w2 share is copied now, while the gate-up streams w13.
  const int n_hit = HitExperts(a, pair_e, slot_e);
  const int mine = n_hit > rank ? (n_hit - rank + C - 1) / C : 0;
  // red first: rank r > 0 writes into rank 0's red at its own red's offset, so it must not depend on `mine`.
  float4* red = reinterpret_cast<float4*>(Align1024(dyn));
  uint8_t* a_ptr = reinterpret_cast<uint8_t*>(red) + (C - 1) * kPartialBytes;  // 1024-aligned (2 KB per partial)
  const uint32_t a_s = SmemAddr(a_ptr);
  const int a_bytes = mine * KG * kAGroupBytes;
  const uint32_t b_s = a_s + a_bytes;
  uint8_t* b_ptr = a_ptr + a_bytes;
  float* tile = reinterpret_cast<float*>(a_ptr);  // reuses A once every wgmma has completed (DownSmem: >= the tile)
  {
    // Row-major issue order: a warp's 32 copies cover 512 contiguous bytes of w2 (the 64 rows of one expert are one
    // contiguous 64 I-byte block), so DRAM sees long runs rather than 128-byte pieces 768 bytes apart.
    const int row_chunks = static_cast<int>(I / 16);
    for (int m = 0; m < mine; ++m) {
      const uint8_t* block = a.w2 + (static_cast<int64_t>(slot_e[rank + m * C]) * H + h0) * I;
      const uint32_t dst = a_s + m * KG * kAGroupBytes;
      for (int q = tid; q < kDownRows * row_chunks; q += kThreads) {
        const int r = q / row_chunks, ch = q % row_chunks;
        CpAsync16(dst + (ch / 8) * kAGroupBytes + Sw128(r, ch % 8), block + static_cast<int64_t>(q) * 16, true);
      }
    }
    CpAsyncCommit();
  }
  if (tid < P) {
    const int e = pair_e[tid];
    pair_w[tid] = a.weights[tid];
    pair_ts[tid] = e >= 0 ? __fmul_rn(*a.a2_scale, a.w2_scale[e]) : 0.f;
  }
  PdlWait();  // the intermediate comes from the gate-up kernel
  PdlLaunchDependents();
  // B of hit expert m, K group kg: row j = inter[j, 128 kg ...] if pair j is routed to it, else zeros.
  for (int i = tid; i < mine * KG * kMaxPairs * 8; i += kThreads) {
    const int ch = i % 8, j = (i / 8) % kMaxPairs, mk = i / (8 * kMaxPairs);
    const int m = mk / KG, kg = mk % KG;
    const int64_t k = static_cast<int64_t>(kg) * kGroupK + ch * 16;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (j < P && k < I && pair_e[j] == slot_e[rank + m * C]) v = *reinterpret_cast<const uint4*>(a.inter + j * I + k);
    *reinterpret_cast<uint4*>(b_ptr + mk * kBGroupBytes + Sw128(j, ch)) = v;
  }
  CpAsyncWait<0>();
  FenceProxyAsync();
  __syncthreads();
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int mk = 0; mk < mine * KG; ++mk) {
    const int kg = mk % KG;
    const int left = static_cast<int>((I - kg * kGroupK) / 32);  // I % 32 == 0: the last group may hold 1-3 steps
    const uint32_t at = a_s + mk * kAGroupBytes, bt = b_s + mk * kBGroupBytes;
    if (tid >= kMmaThreads) break;  // warpgroup 0 multiplies (uniform per warpgroup)
    switch (left < 4 ? left : 4) {
      case 1: WgmmaGroupSteps<1>(acc, at, bt); break;
      case 2: WgmmaGroupSteps<2>(acc, at, bt); break;
      case 3: WgmmaGroupSteps<3>(acc, at, bt); break;
      default: WgmmaGroupSteps<4>(acc, at, bt); break;
    }
  }
  if (!ClusterReduce(acc, red, C, rank)) return;
  __syncthreads();  // every warp's wgmmas are done before the tile overwrites A
  StoreTile(tile, acc);
  __syncthreads();
  // y[t, h0 + r] = sum_j (j order) w[t, j] * (D[r, t k + j] * ts_j) (+ shared): the stream path's reduce.
  for (int i = tid; i < a.tokens * kDownRows; i += kThreads) {
    const int r = i % kDownRows, t = i / kDownRows;
    float y = 0.f;
    for (int k = 0; k < a.top_k; ++k) {
      const int pair = t * a.top_k + k;
      if (pair_e[pair] < 0) continue;  // another rank's expert: contributes 0
      y = __fadd_rn(y, __fmul_rn(pair_w[pair], __fmul_rn(tile[r * (kMaxPairs + 1) + pair], pair_ts[pair])));
    }
    const int64_t off = static_cast<int64_t>(t) * H + h0 + r;
    if (a.shared != nullptr) y = __fadd_rn(y, __bfloat162float(a.shared[off]));
    a.out[off] = __float2bfloat16_rn(y);
  }
}

// Diagnostic knob (session 16): HPC_XLA_MOE_OVERLAP_UP_PER_SM = 2 | 3 gate-up CTAs per SM with 4 | 3 ring stages.
int UpCtasPerSm() {
  static const int n = std::min(3, std::max(1, EnvInt("HPC_XLA_MOE_OVERLAP_UP_PER_SM", 1)));
  return n;
}
int UpStages() { return UpCtasPerSm() == 1 ? 8 : UpCtasPerSm() == 2 ? 4 : 3; }

int UpSmem(int cluster, int groups_per_cta, int stages) {
  return 1024 + stages * kAGroupBytes + groups_per_cta * kBGroupBytes + (cluster - 1) * kPartialBytes + kTileBytes;
}
int DownSmem(int cluster, int per_cta, int kgroups) {
  const int a_or_tile = std::max(per_cta * kgroups * kAGroupBytes, kTileBytes);
  return 1024 + (cluster - 1) * kPartialBytes + a_or_tile + per_cta * kgroups * kBGroupBytes;
}
constexpr int kMaxUpSmem = 1024 + kUpStages * kAGroupBytes + kMaxUpGroups * kBGroupBytes +
                           (kMaxCluster - 1) * kPartialBytes + kTileBytes;
constexpr int kMaxDownSmem = 1024 + kMaxDownShare + kMaxDownShare / kAGroupBytes * kBGroupBytes +
                             (kMaxCluster - 1) * kPartialBytes;

// Both kernels' attributes, once: the largest dynamic shared memory any shape asks for, and the whole 228 KB as
// shared memory. Without the carveout the driver may configure an SM for the gate-up kernel's own occupancy (e.g.
// 2 x 79 KB), leaving no room for a down CTA beside it until the SM drains -- the overlap this design is for.
Status PrepareKernel(const void* fn, int max_smem) {
  HPC_RETURN_IF_ERROR(AllowSmem(fn, max_smem));
  static std::mutex mu;
  static std::unordered_set<const void*> done;
  std::lock_guard<std::mutex> lock(mu);
  if (done.count(fn)) return Status::Ok();
  HPC_RETURN_IF_ERROR(CudaStatus(
      cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared),
      "fused_moe: shared memory carveout"));
  done.insert(fn);
  return Status::Ok();
}

}  // namespace

OverlapPlan StreamOverlapPlanFor(int tokens, int top_k, int experts, int hidden, int inter_size, int sms) {
  OverlapPlan plan;
  const int P = tokens * top_k;
  if (tokens < 1 || P > kMaxPairs || hidden % kGroupK != 0 || inter_size % kUnitCols != 0 || sms < 1) return plan;
  // The worst-case hit count: the grids are sized for it (the device finds the real one).
  const int max_hit = std::min(P, experts);
  // gate-up: the cluster size with the fewest K groups on the busiest CTA (clusters of one CTA per SM).
  const int groups = hidden / kGroupK, units = max_hit * (inter_size / kUnitCols);
  int64_t best = -1;
  for (int c = 1; c <= kMaxCluster; c *= 2) {
    if (groups % c != 0 || groups / c > kMaxUpGroups || sms / c < 1) continue;
    const int clusters = UpCtasPerSm() * sms / c;
    const int64_t cost = static_cast<int64_t>((units + clusters - 1) / clusters) * (groups / c);
    if (best < 0 || cost < best) best = cost, plan.up_cluster = c, plan.up_clusters = clusters;
  }
  if (best < 0) return plan;
  // down: the most CTAs (hit experts split over a cluster) that stay within one per SM, each share in shared memory.
  const int kgroups = (inter_size + kGroupK - 1) / kGroupK, row_blocks = hidden / kDownRows;
  for (int c = kMaxCluster; c >= 1; c /= 2) {
    const int per_cta = (max_hit + c - 1) / c;
    if (row_blocks * c > sms || per_cta * kgroups * kAGroupBytes > kMaxDownShare) continue;
    plan.down_cluster = c;
    plan.down_smem = DownSmem(c, per_cta, kgroups);
    break;
  }
  if (plan.down_cluster == 0) return plan;
  plan.up_smem = UpSmem(plan.up_cluster, groups / plan.up_cluster, UpStages());
  // One gate-up and one down CTA per SM together (+1 KB reserved each), or the overlap is not there.
  plan.fits = plan.up_smem + plan.down_smem + 2 * 1024 <= kSmPerSmBytes || UpCtasPerSm() > 1;
  return plan;
}

Status LaunchStreamOverlap(const OverlapArgs& a, const OverlapPlan& plan, cudaStream_t stream) {
  if (!plan.fits) return Status::Internal("fused_moe: the overlapped stream path does not fit these shapes");
  UpParams up = {};
  up.a = a;
  up.cluster = plan.up_cluster;
  up.clusters = plan.up_clusters;
  up.groups_per_cta = a.hidden / kGroupK / plan.up_cluster;
  up.col_blocks = a.inter_size / kUnitCols;
  up.no_fence = EnvInt("HPC_XLA_MOE_OVERLAP_NOFENCE", 0);
  auto* up_kernel = UpStages() == 8 ? (a.x_fp8 ? &OverlapGateUpKernel<true, 8> : &OverlapGateUpKernel<false, 8>)
                    : UpStages() == 4 ? (a.x_fp8 ? &OverlapGateUpKernel<true, 4> : &OverlapGateUpKernel<false, 4>)
                                      : (a.x_fp8 ? &OverlapGateUpKernel<true, 3> : &OverlapGateUpKernel<false, 3>);
  HPC_RETURN_IF_ERROR(PrepareKernel(reinterpret_cast<const void*>(up_kernel), kMaxUpSmem));
  HPC_RETURN_IF_ERROR(LaunchCluster("fused_moe overlapped gate-up launch", up_kernel,
                                    dim3(static_cast<unsigned>(plan.up_clusters * plan.up_cluster)), dim3(kThreads),
                                    plan.up_smem, static_cast<unsigned>(plan.up_cluster), stream, up));
  DownParams down = {};
  down.a = a;
  down.cluster = plan.down_cluster;
  down.kgroups = (a.inter_size + kGroupK - 1) / kGroupK;
  HPC_RETURN_IF_ERROR(PrepareKernel(reinterpret_cast<const void*>(&OverlapDownKernel), kMaxDownSmem));
  return LaunchCluster("fused_moe overlapped down launch", &OverlapDownKernel,
                       dim3(static_cast<unsigned>(a.hidden / kDownRows * plan.down_cluster)), dim3(kThreads),
                       plan.down_smem, static_cast<unsigned>(plan.down_cluster), stream, down);
}

}  // namespace hpc::moe
