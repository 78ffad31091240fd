// fused_moe stream path, gate-up on wgmma (stream_gate_up_wgmma.h).
//
// Why: the mma.sync gate-up (fused_moe_stream.cu) converts every e4m3 byte to f16 (sm_90 has no fp8 mma.sync) and
// quantizes x again for every group; wgmma reads e4m3 straight from shared memory, so a CTA's whole job is: copy
// its weight slice in, multiply, reduce, write. Measured (session 14, bench/NOTES.md): alone it is no faster than
// the mma.sync kernel -- both wait on memory (ncu, Qwen3-30B fp8 T=1: 15.3 / 14.9 us) -- but as one wave of one-shot
// CTAs it frees SMs early for the down kernel, so the layer gains at T = 1 (the rule is in fused_moe_stream.cu).
//
// Work: a unit is (hit expert e, 32 columns of I): A = its 32 gate rows then its 32 up rows (64 x H, the wgmma M),
// B = x of ALL T <= 8 tokens (the wgmma N = 8), so a token's column is computed whether or not it routed to e and
// only the routed ones are written -- no per-expert token lists, and repeated ids cost nothing. A cluster of C CTAs
// takes a unit, each CTA K groups [r G / C, (r + 1) G / C) of the G = H / 128 (at most 8: the whole slice is
// copied in at once, 8 KB per group, no ring to recycle); the CTAs' partial tiles are added in rank order through
// distributed shared memory (bitwise deterministic), and rank 0 runs the epilogue. The grid is one cluster per
// (pair slot, column block); a slot whose expert is another rank's, or repeats an earlier slot's, exits at once.
//
// Shared memory, both operands K-major in the 128-byte swizzle wgmma expects (an 8-row x 128-byte atom, 16-byte
// chunk c of row r stored at chunk c ^ (r % 8)): A stage s = 8 atoms (rows 0-63), B stage s = 1 atom (tokens 0-7,
// rows >= T zero). x is quantized once per CTA with the reference's rounding (fp32 multiply by 1 / a13_scale,
// saturating e4m3). The partial sums of each K group are promoted into fp32 registers after its 4 wgmmas (the
// fp8 tensor-core accumulator is not a full fp32 one over thousands of terms).
//
// The fused down (kFused, T = 1). Why: the down kernel's CTAs (144 KB of ring each) become resident only as gate-up
// CTAs leave, and only then start streaming w2 (12.6 MB at Qwen3-30B): s44c's timeline put 7.5 us between the last
// gate-up exit and the layer's end, with DRAM idle at the start of it. Here the unit's own CTAs take the down for
// their 32 columns of I -- partial[pair, unit block, h] = sum over those 32 columns of w2[e, h, c] x inter[pair, c]
// for the CTA's share of H (the rows of its K groups) -- with w2's 32-byte row pieces loaded into registers right
// after the w13 copies are issued, so all of the layer's weights are in flight at once. Every rank of the cluster
// adds every rank's gate-up partial tile in rank order (the same sum in each, bitwise), so each has the unit's
// intermediate without a round trip through rank 0. The down product is an m16n8k16 f16 mma.sync per 16 rows
// (e4m3 -> f16 is exact, the accumulator f32); the sum kernel (OneTokenDownSumKernel) then adds the blocks in
// order, scales, weights and adds the top-k slots in order, as the down kernel's reduce does.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>

#include "csrc/common/arch.h"
#include "csrc/common/launch.cuh"
#include "csrc/common/mma.cuh"
#include "csrc/common/numeric.h"
#include "csrc/moe/fused_moe.h"
#include "csrc/moe/fused_moe_plan.h"
#include "csrc/moe/moe_common.cuh"
#include "csrc/moe/stream_gate_up_wgmma.h"
#include "csrc/moe/wgmma_sm90.cuh"

namespace hpc::moe {
namespace {

namespace cg = cooperative_groups;

// Launches of this kernel (FusedMoeWgmmaGateUpLaunches: the tests' proof of which kernel ran).
std::atomic<int64_t> g_launches{0};
// Launches with the fused down (FusedMoeFusedDownLaunches).
std::atomic<int64_t> g_fused_down_launches{0};

constexpr int kThreads = 128;       // one warpgroup
constexpr int kUnitCols = 32;       // columns of I per unit: 32 gate + 32 up rows = the wgmma M of 64
constexpr int kGroupK = 128;        // K per group: one 128-byte swizzle atom row of e4m3
constexpr int kMaxGroups = 8;       // K groups per CTA
constexpr int kMaxCluster = 8;      // portable cluster size
constexpr int kMaxTokens = 8;       // the wgmma N
constexpr int kAGroupBytes = 64 * kGroupK;          // 8 KB
constexpr int kBGroupBytes = kMaxTokens * kGroupK;  // 1 KB
constexpr int kMaxPairs = kMaxTokens * 8;           // T * top_k <= 64 (ids held by two loads per lane)
static_assert(kMaxGroups <= 8, "CpAsyncWaitAtMost");

struct Params {
  WgmmaGateUpArgs a;
  int cluster;      // CTAs per unit
  int col_blocks;   // I / 32
};

// The fused down's share of a CTA: w2 rows of its K groups (n x 128), 16-row blocks over the 4 warps, so a
// thread holds 2n blocks' 2 x 8-byte pieces in registers (<= 64 with n <= 8).
constexpr int kDownBlocksPerWarp = kMaxGroups * kGroupK / 16 / (kThreads / 32);
static_assert(kUnitCols == kFusedDownCols, "a unit's columns are the fused down's block");

__device__ __forceinline__ uint2 LoadStreamingU2(const uint8_t* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

__device__ __forceinline__ uint32_t PackE4M3x4(float a, float b, float c, float d, float mul) {
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a * mul, b * mul), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c * mul, d * mul), __NV_SATFINITE, __NV_E4M3);
  return lo | (hi << 16);
}

// inter[t, col] of the unit from its f32 tile (gate rows 0-31, up rows 32-63, token columns, pitch 9): e4m3 of
// silu(gate * ts) * (up * ts) / a2_scale, the reference's rounding.
__device__ __forceinline__ __nv_fp8_storage_t InterE4M3(const float* tile, int col, int t, float ts, float out_mul) {
  constexpr int kPitch = kMaxTokens + 1;
  const float gv = __fmul_rn(tile[col * kPitch + t], ts), uv = __fmul_rn(tile[(kUnitCols + col) * kPitch + t], ts);
  const float h = __fmul_rn(Silu(gv), uv);
  return __nv_cvt_float_to_fp8(h * out_mul, __NV_SATFINITE, __NV_E4M3);
}

// The fused down of one CTA (T = 1; see the top): its 32 intermediate values, then per 16-row block of its share
// of H one m16n8k16 over each half of the 32 columns, into partials[pair, cb, h] for every pair routed to `mine`.
// mma.sync only needs A and B to agree on which column a register slot holds: step s's slots 2q, 2q + 1 hold
// bytes 8q + 4s + {0, 1} and slots 2q + 8, 2q + 9 bytes 8q + 4s + {2, 3} -- the 8 bytes thread (g, q) loaded.
__device__ __forceinline__ void FusedDown(const WgmmaGateUpArgs& a, const float* tile, float ts, float out_mul,
                                          int mine, const int* ids_s, int cb, int h0, int n,
                                          const uint2 (&w2r)[kDownBlocksPerWarp][2]) {
  __shared__ __align__(8) uint8_t inter_s[kUnitCols];
  const int tid = threadIdx.x, lane = tid % 32, g = lane / 4, q = lane % 4, warp = tid / 32;
  if (tid < kUnitCols) inter_s[tid] = InterE4M3(tile, tid, 0, ts, out_mul);
  __syncthreads();
  // B: column g is token g; only token 0 exists
  uint32_t b[2][2] = {{0u, 0u}, {0u, 0u}};
  if (g == 0) {
    const uint2 v = *reinterpret_cast<const uint2*>(inter_s + 8 * q);
    b[0][0] = E4M3x2ToHalf2(v.x & 0xffffu), b[0][1] = E4M3x2ToHalf2(v.x >> 16);
    b[1][0] = E4M3x2ToHalf2(v.y & 0xffffu), b[1][1] = E4M3x2ToHalf2(v.y >> 16);
  }
  uint64_t pairs = 0;  // the pairs routed to this expert (T * top_k <= 64)
  for (int pair = 0; pair < a.tokens * a.top_k; ++pair) pairs |= static_cast<uint64_t>(ids_s[pair] == mine) << pair;
  const int64_t H = a.hidden, cbs = a.inter_size / kUnitCols;
#pragma unroll
  for (int i = 0; i < kDownBlocksPerWarp; ++i) {
    if (i >= 2 * n) continue;
    float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int st = 0; st < 2; ++st) {
      const uint32_t lo = st == 0 ? w2r[i][0].x : w2r[i][0].y, hi = st == 0 ? w2r[i][1].x : w2r[i][1].y;
      const uint32_t af[4] = {E4M3x2ToHalf2(lo & 0xffffu), E4M3x2ToHalf2(hi & 0xffffu), E4M3x2ToHalf2(lo >> 16),
                              E4M3x2ToHalf2(hi >> 16)};
      Mma16816<__half>(d, af, b[st][0], b[st][1]);
    }
    if (q != 0) continue;  // column 0 (token 0): d[0] row g, d[2] row g + 8
    const int64_t h = h0 + 16 * (warp + 4 * i) + g;
    for (uint64_t m = pairs; m != 0; m &= m - 1) {
      float* dst = a.partials + (static_cast<int64_t>(__ffsll(static_cast<long long>(m)) - 1) * cbs + cb) * H + h;
      dst[0] = d[0];
      dst[8] = d[2];
    }
  }
}

// The unfused epilogue: inter[pair, cb * 32 + col] for every pair (t, j) routed to this expert.
__device__ __forceinline__ void EpilogueToInter(const WgmmaGateUpArgs& a, const float* tile, float ts, float out_mul,
                                                int mine, const int* ids_s, int cb) {
  const int64_t I = a.inter_size;
  for (int i = threadIdx.x; i < kUnitCols * a.tokens; i += kThreads) {
    const int col = i % kUnitCols, t = i / kUnitCols;
    const __nv_fp8_storage_t v = InterE4M3(tile, col, t, ts, out_mul);
    for (int j = 0; j < a.top_k; ++j) {
      const int pair = t * a.top_k + j;
      if (ids_s[pair] == mine) a.inter[static_cast<int64_t>(pair) * I + cb * kUnitCols + col] = v;
    }
  }
}

template <bool kXFp8, bool kFused>
__global__ void __launch_bounds__(kThreads) GateUpWgmmaKernel(const __grid_constant__ Params p) {
  extern __shared__ uint8_t dyn[];
  __shared__ int ids_s[kMaxPairs];
  const WgmmaGateUpArgs& a = p.a;
  const int tid = threadIdx.x, lane = tid % 32;
  const int rank = static_cast<int>(blockIdx.x) % p.cluster, unit = static_cast<int>(blockIdx.x) / p.cluster;
  const int slot = unit / p.col_blocks, cb = unit % p.col_blocks;
  const int P = a.tokens * a.top_k;
  PdlWait();  // topk_ids and x may come from the previous kernel (routing)
  // The slot's expert. Every warp of every CTA of the cluster decides alike: the cluster runs or exits as one.
  const int id_lo = lane < P ? a.ids[lane] : -1, id_hi = lane + 32 < P ? a.ids[lane + 32] : -1;
  const int mine = __shfl_sync(0xffffffffu, slot < 32 ? id_lo : id_hi, slot % 32);
  const bool repeat = __any_sync(0xffffffffu, (lane < slot && id_lo == mine) || (lane + 32 < slot && id_hi == mine));
  const int e = mine - a.expert_offset;
  if (repeat || e < 0 || e >= a.experts) return;
  PdlLaunchDependents();  // the down kernel may start its prologue
  if (tid < 32) ids_s[tid] = id_lo, ids_s[tid + 32] = id_hi;

  // 1024-byte aligned operand tiles (the swizzle is a function of the address bits).
  const uint32_t raw = SmemAddr(dyn);
  const uint32_t a_base = (raw + 1023u) & ~1023u;
  uint8_t* a_ptr = dyn + (a_base - raw);
  const int64_t H = a.hidden, I = a.inter_size;
  const int groups = static_cast<int>(H / kGroupK);
  const int g0 = rank * groups / p.cluster, n = (rank + 1) * groups / p.cluster - g0;
  const uint32_t b_base = a_base + n * kAGroupBytes;
  uint8_t* b_ptr = a_ptr + n * kAGroupBytes;

  // A: 512 chunks of 16 bytes per group, 4 per thread; a thread's rows share r % 8, so its chunks keep one swizzle.
  // a unit's 32 columns lie inside one 64-block, so its gate rows and its up rows are two contiguous runs
  const uint8_t* gate = a.w13 + (static_cast<int64_t>(e) * 2 * I + W13GateRow(cb * kUnitCols, a.w13_interleaved)) * H +
                        g0 * kGroupK;
  const int64_t up_delta = W13UpDelta(I, a.w13_interleaved);
  const int r0 = tid / 8, c = tid % 8;
#pragma unroll
  for (int s = 0; s < kMaxGroups; ++s) {
    if (s < n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = r0 + 16 * i;  // rows 0-31 gate, 32-63 up (up_delta rows further on)
        const uint8_t* src = gate + (r < 32 ? r : up_delta + r - 32) * H + s * kGroupK + c * 16;
        CpAsync16(a_base + s * kAGroupBytes + Sw128(r, c), src, true);
      }
    }
    CpAsyncCommit();
  }
  // The fused down's w2 pieces (see the top): block i of this warp is rows 16 (warp + 4 i) + {g, g + 8} of the CTA's
  // share, bytes [8 q, 8 q + 8) of the unit's 32 columns. Loaded now so they stream with w13; used after the epilogue.
  const int g = lane / 4, q = lane % 4, warp = tid / 32;
  uint2 w2r[kFused ? kDownBlocksPerWarp : 1][2];
  if constexpr (kFused) {
    const uint8_t* w2 = a.w2 + (static_cast<int64_t>(e) * H + g0 * kGroupK + g) * I + cb * kUnitCols + 8 * q;
#pragma unroll
    for (int i = 0; i < kDownBlocksPerWarp; ++i) {
      if (i < 2 * n) {
        const uint8_t* row = w2 + static_cast<int64_t>(16 * (warp + 4 * i)) * I;
        w2r[i][0] = LoadStreamingU2(row);
        w2r[i][1] = LoadStreamingU2(row + 8 * I);
      }
    }
  }
  // B: x of tokens 0..T-1 over this CTA's K groups, e4m3; rows T..7 zero.
  const float mul = kXFp8 ? 1.f : QuantMultiplier(*a.a13_scale);
  for (int i = tid; i < n * kMaxTokens * 8; i += kThreads) {
    const int s = i / (kMaxTokens * 8), t = (i / 8) % kMaxTokens, ch = i % 8;
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
        for (int j = 0; j < 8; ++j) f[2 * j] = __uint_as_float(w[j] << 16), f[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
        v.x = PackE4M3x4(f[0], f[1], f[2], f[3], mul), v.y = PackE4M3x4(f[4], f[5], f[6], f[7], mul);
        v.z = PackE4M3x4(f[8], f[9], f[10], f[11], mul), v.w = PackE4M3x4(f[12], f[13], f[14], f[15], mul);
      }
    }
    *reinterpret_cast<uint4*>(b_ptr + s * kBGroupBytes + Sw128(t, ch)) = v;
  }

  // Per K group: wait for its copies (kMaxGroups commit groups were issued, empty ones past n, so group s has
  // landed when at most kMaxGroups - 1 - s are pending), then 4 wgmmas promoted into acc.
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int s = 0; s < kMaxGroups; ++s) {
    if (s < n) {
      CpAsyncWaitAtMost(kMaxGroups - 1 - s);
      FenceProxyAsync();
      __syncthreads();
      WgmmaGroupE4M3(acc, a_base + s * kAGroupBytes, b_base + s * kBGroupBytes);
    }
  }

  // The cluster's partial tiles, added in rank order on rank 0 (its A tiles are free once every CTA is past the
  // first barrier: each waited for its own wgmmas).
  float4* red = reinterpret_cast<float4*>(a_ptr);
  if (kFused && p.cluster > 1) {
    // every rank's tile to every other rank (slot = its rank), then the same rank-order sum in each
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    const float4 mine4 = make_float4(acc[0], acc[1], acc[2], acc[3]);
    for (int r = 0; r < p.cluster; ++r) {
      if (r != rank) *cluster.map_shared_rank(red + rank * kThreads + tid, r) = mine4;
    }
    cluster.sync();
    for (int r = 0; r < p.cluster; ++r) {
      const float4 o = r == rank ? mine4 : red[r * kThreads + tid];
      if (r == 0) {
        acc[0] = o.x, acc[1] = o.y, acc[2] = o.z, acc[3] = o.w;
      } else {
        acc[0] = __fadd_rn(acc[0], o.x), acc[1] = __fadd_rn(acc[1], o.y);
        acc[2] = __fadd_rn(acc[2], o.z), acc[3] = __fadd_rn(acc[3], o.w);
      }
    }
  } else if (p.cluster > 1) {
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    if (rank > 0) {
      float4* dst = cluster.map_shared_rank(red + (rank - 1) * kThreads + tid, 0);
      *dst = make_float4(acc[0], acc[1], acc[2], acc[3]);
    }
    cluster.sync();
    if (rank > 0) return;
    for (int r = 1; r < p.cluster; ++r) {
      const float4 o = red[(r - 1) * kThreads + tid];
      acc[0] = __fadd_rn(acc[0], o.x), acc[1] = __fadd_rn(acc[1], o.y);
      acc[2] = __fadd_rn(acc[2], o.z), acc[3] = __fadd_rn(acc[3], o.w);
    }
  }
  // Epilogue: the tile through shared memory (gate rows sit in warps 0-1, up rows in warps 2-3), then
  // inter[pair, col] = e4m3(silu(gate * ts) * (up * ts) / a2_scale) for every pair (t, j) routed to e. The tile
  // (2.3 KB) goes where A was: every wgmma has completed and the partials were read before this barrier.
  float* tile = reinterpret_cast<float*>(a_ptr);
  __syncthreads();
  {
    constexpr int kPitch = kMaxTokens + 1;
    tile[(16 * warp + g) * kPitch + 2 * q] = acc[0];
    tile[(16 * warp + g) * kPitch + 2 * q + 1] = acc[1];
    tile[(16 * warp + g + 8) * kPitch + 2 * q] = acc[2];
    tile[(16 * warp + g + 8) * kPitch + 2 * q + 1] = acc[3];
  }
  __syncthreads();
  const float ts = __fmul_rn(*a.a13_scale, a.w13_scale[e]);
  const float out_mul = QuantMultiplier(*a.a2_scale);
  if constexpr (kFused) {
    FusedDown(a, tile, ts, out_mul, mine, ids_s, cb, g0 * kGroupK, n, w2r);
  } else {
    EpilogueToInter(a, tile, ts, out_mul, mine, ids_s, cb);
  }
}

// The fused down's sum: a CTA per kSumCols columns of H. Each (pair, chunk of kSumChunk blocks, 4 columns) adds its
// blocks in order (the loads issued together), then each (pair, column) adds its chunks in order, scales by
// a2_scale x w2_scale[e] and weights by the top-k weight, then each column adds the slots in order (+ shared) --
// the down kernel's reduce, with blocks of I where it had K splits. Pairs of other ranks' experts contribute 0.
constexpr int kSumCols = 32;
constexpr int kSumThreads = 256;
constexpr int kSumChunk = 8;

__host__ __device__ int SumChunks(int inter_size) { return (inter_size / kUnitCols + kSumChunk - 1) / kSumChunk; }
int SumSmemBytes(int top_k, int inter_size) { return top_k * SumChunks(inter_size) * kSumCols * 4; }

__global__ void __launch_bounds__(kSumThreads) OneTokenDownSumKernel(const __grid_constant__ WgmmaGateUpArgs a) {
  extern __shared__ float4 part_s[];  // [pair][chunk][kSumCols / 4]
  __shared__ float pair_ts[kMaxPairs], pair_w[kMaxPairs];
  __shared__ bool local[kMaxPairs];
  const int tid = threadIdx.x, P = a.top_k;
  const int64_t H = a.hidden;
  const int cbs = a.inter_size / kUnitCols, chunks = SumChunks(a.inter_size), h0 = blockIdx.x * kSumCols;
  // inputs of the op, complete once the gate-up kernel (which waited for its predecessors) has started us
  for (int i = tid; i < P; i += kSumThreads) {
    const int e = a.ids[i] - a.expert_offset;
    local[i] = a.ids[i] >= 0 && e >= 0 && e < a.experts;
    pair_ts[i] = local[i] ? __fmul_rn(*a.a2_scale, a.w2_scale[e]) : 0.f;
    pair_w[i] = a.weights[i];
  }
  __syncthreads();
  PdlWait();  // the partials come from the gate-up kernel
  PdlLaunchDependents();
  constexpr int kQuads = kSumCols / 4;
  for (int it = tid; it < P * chunks * kQuads; it += kSumThreads) {
    const int pc = it / kQuads, pair = pc / chunks, ch = pc % chunks;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (local[pair]) {
      const int b0 = ch * kSumChunk, nb = min(kSumChunk, cbs - b0);
      const float4* src = reinterpret_cast<const float4*>(a.partials + (static_cast<int64_t>(pair) * cbs + b0) * H + h0) +
                          it % kQuads;
      float4 x[kSumChunk];
#pragma unroll
      for (int b = 0; b < kSumChunk; ++b) {
        if (b < nb) x[b] = __ldcg(src + b * H / 4);
      }
      v = x[0];
#pragma unroll
      for (int b = 1; b < kSumChunk; ++b) {
        if (b < nb) {
          v.x = __fadd_rn(v.x, x[b].x), v.y = __fadd_rn(v.y, x[b].y);
          v.z = __fadd_rn(v.z, x[b].z), v.w = __fadd_rn(v.w, x[b].w);
        }
      }
    }
    part_s[it] = v;
  }
  __syncthreads();
  float* part = reinterpret_cast<float*>(part_s);
  for (int it = tid; it < P * kSumCols; it += kSumThreads) {
    const int pair = it / kSumCols, c = it % kSumCols;
    if (!local[pair]) continue;
    float* row = part + static_cast<int64_t>(pair) * chunks * kSumCols + c;
    float v = row[0];
    for (int ch = 1; ch < chunks; ++ch) v = __fadd_rn(v, row[ch * kSumCols]);
    row[0] = __fmul_rn(pair_w[pair], __fmul_rn(v, pair_ts[pair]));
  }
  __syncthreads();
  if (tid < kSumCols) {
    float y = 0.f;
    for (int pair = 0; pair < P; ++pair) {
      if (local[pair]) y = __fadd_rn(y, part[static_cast<int64_t>(pair) * chunks * kSumCols + tid]);
    }
    if (a.shared != nullptr) y = __fadd_rn(y, __bfloat162float(a.shared[h0 + tid]));
    a.out[h0 + tid] = __float2bfloat16_rn(y);
  }
}

// CTAs per unit: as few as keep each at <= kMaxGroups K groups.
int ClusterFor(int groups) { return (groups + kMaxGroups - 1) / kMaxGroups; }

}  // namespace

bool StreamFusedDownFits(int tokens, int top_k, int hidden, int inter_size) {
  return tokens == 1 && StreamGateUpWgmmaFits(tokens, top_k, hidden, inter_size) && hidden % kSumCols == 0 &&
         SumSmemBytes(top_k, inter_size) <= 32 * 1024;
}

bool StreamGateUpWgmmaFits(int tokens, int top_k, int hidden, int inter_size) {
  return tokens >= 1 && tokens <= kMaxTokens && tokens * top_k <= kMaxPairs && hidden % kGroupK == 0 &&
         hidden <= kGroupK * kMaxGroups * kMaxCluster && inter_size % kUnitCols == 0;
}

int64_t StreamGateUpWgmmaCtas(int tokens, int top_k, int hidden, int inter_size) {
  return static_cast<int64_t>(tokens) * top_k * (inter_size / kUnitCols) * ClusterFor(hidden / kGroupK);
}

Status LaunchStreamGateUpWgmma(const WgmmaGateUpArgs& a, cudaStream_t stream) {
  const int groups = a.hidden / kGroupK;
  Params p = {a, ClusterFor(groups), a.inter_size / kUnitCols};
  const int per_cta = (groups + p.cluster - 1) / p.cluster;
  // operands + 1 KB for the 1024-byte alignment; the reduce (<= 7 x 2 KB) and epilogue tiles reuse A and B
  const int smem = per_cta * (kAGroupBytes + kBGroupBytes) + 1024;
  const bool fused = a.partials != nullptr;
  if (fused && !StreamFusedDownFits(a.tokens, a.top_k, a.hidden, a.inter_size)) {
    return Status::Internal("hpc_xla: fused_moe: the fused down was asked for shapes it does not take");
  }
  auto* kernel = a.x_fp8 ? (fused ? &GateUpWgmmaKernel<true, true> : &GateUpWgmmaKernel<true, false>)
                         : (fused ? &GateUpWgmmaKernel<false, true> : &GateUpWgmmaKernel<false, false>);
  // AllowSmem raises the limit once per kernel: give it the largest size any shape asks for
  constexpr int kMaxSmem = kMaxGroups * (kAGroupBytes + kBGroupBytes) + 1024;
  static_assert(kStreamGateUpWgmmaCtasPerSm * (kMaxSmem + 1024) <= 228 * 1024, "CTAs per SM (+1 KB reserved each)");
  HPC_RETURN_IF_ERROR(AllowSmem(reinterpret_cast<const void*>(kernel), kMaxSmem));
  const int64_t ctas = StreamGateUpWgmmaCtas(a.tokens, a.top_k, a.hidden, a.inter_size);
  HPC_RETURN_IF_ERROR(LaunchCluster("fused_moe stream gate-up (wgmma) launch", kernel, dim3(static_cast<unsigned>(ctas)),
                                    dim3(kThreads), smem, static_cast<unsigned>(p.cluster), stream, p));
  g_launches.fetch_add(1, std::memory_order_relaxed);
  if (!fused) return Status::Ok();
  HPC_RETURN_IF_ERROR(Launch("fused_moe stream down sum launch", &OneTokenDownSumKernel,
                             dim3(static_cast<unsigned>(a.hidden / kSumCols)), dim3(kSumThreads),
                             SumSmemBytes(a.top_k, a.inter_size), stream, a));
  g_fused_down_launches.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

}  // namespace hpc::moe

namespace hpc {
int64_t FusedMoeWgmmaGateUpLaunches() { return moe::g_launches.load(std::memory_order_relaxed); }
int64_t FusedMoeFusedDownLaunches() { return moe::g_fused_down_launches.load(std::memory_order_relaxed); }
}  // namespace hpc
