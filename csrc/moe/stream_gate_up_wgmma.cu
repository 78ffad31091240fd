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
// The T = 1 fused form (kFused): the same grid also runs the down projection, so the w2 stream overlaps the w13
// stream instead of starting after it (the two-kernel layer measured 11.1 + 7.6 us at Qwen3-30B fp8 T=1, the down
// kernel only able to start streaming once the gate-up grid had drained; bench/NOTES.md session 15). A unit's 32
// columns of I are a 32-wide K slice of the down GEMM: each CTA of the unit's cluster loads, at its start and into
// registers, w2[e, rows, 32 columns] for its share of the H rows (<= 1024 rows: 16 x 16 bytes per thread), and once
// rank 0 has the unit's 32 quantized intermediate values (shared with the cluster through distributed shared
// memory), computes partials[pair, unit column block, rows] = w2 slice . inter on the CUDA cores (32 MACs a row).
// A second kernel (PDL) sums each row's partials over the column blocks in order, then the top-k in j order:
// bitwise deterministic, no atomics, no grid-wide barrier.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "csrc/common/arch.h"
#include "csrc/common/launch.cuh"
#include "csrc/common/mma.cuh"
#include "csrc/common/numeric.h"
#include "csrc/moe/moe_common.cuh"
#include "csrc/moe/stream_gate_up_wgmma.h"
#include "csrc/moe/wgmma_sm90.cuh"

namespace hpc::moe {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 128;       // one warpgroup
constexpr int kUnitCols = kWgmmaUnitCols;  // columns of I per unit: 32 gate + 32 up rows = the wgmma M of 64
constexpr int kGroupK = kWgmmaGroupK;      // K per group: one 128-byte swizzle atom row of e4m3
constexpr int kMaxGroups = kWgmmaMaxGroups;
constexpr int kMaxTokens = kWgmmaMaxTokens;
constexpr int kAGroupBytes = 64 * kGroupK;          // 8 KB
constexpr int kBGroupBytes = kMaxTokens * kGroupK;  // 1 KB
constexpr int kMaxPairs = kWgmmaMaxPairs;           // T * top_k <= 64 (ids held by two loads per lane)
static_assert(kMaxGroups <= 8, "CpAsyncWaitAtMost");
static_assert(kMaxPairs == 2 * 32, "ids: two per lane");
// Fused form: a CTA's down rows are 64-row blocks (2 threads x 16 bytes per row, 128 threads); H / cluster <= 8 x
// 128 rows, so at most 16 blocks = 16 registers of uint4 per thread.
constexpr int kDownRowBlock = kThreads / 2;
constexpr int kMaxDownBlocks = kMaxGroups * kGroupK / kDownRowBlock;
constexpr int kReduceRows = 32;     // reduce kernel: rows of H per CTA (one per lane)
constexpr int kReduceWarps = 8;

struct Params {
  WgmmaGateUpArgs a;
  WgmmaDownArgs d;  // the fused form only
  int cluster;      // CTAs per unit
  int col_blocks;   // I / 32
  int probe;        // PROBE (dev, session 15): HPC_XLA_MOE_T1_PROBE 0 normal, 1 w2 loaded late, 2 contiguous (wrong), 3 none
};

// 16 bytes of weights read once: not kept in L1.
__device__ __forceinline__ uint4 LdgStream16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// sum_i w[i] * q[i] over 16 e4m3 weights (in order), q already floats.
__device__ __forceinline__ float Dot16E4M3(const uint4& w, const float (&q)[16]) {
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(words[i] >> (16 * h)), __NV_E4M3);
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&r));
      s = __fmaf_rn(f.x, q[4 * i + 2 * h], s);
      s = __fmaf_rn(f.y, q[4 * i + 2 * h + 1], s);
    }
  }
  return s;
}

__device__ __forceinline__ uint32_t PackE4M3x4(float a, float b, float c, float d, float mul) {
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a * mul, b * mul), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c * mul, d * mul), __NV_SATFINITE, __NV_E4M3);
  return lo | (hi << 16);
}

// Fused form (T = 1), after the unit's intermediate is in inter_s: for every pair routed to this unit's expert
// (bit j of `routed`),
// partials[pair, cb, row] = sum over the unit's 32 columns i of w2[e, row, 32 cb + i] * inter[i] (the e4m3 values
// as stored; the reduce kernel applies a2_scale * w2_scale[e] and the top-k weight). Lane pairs split a row's 32
// columns; the even lane adds its partner's half after its own (one order). Each row's dot product is computed once
// and stored for every pair of the expert (top-k with a repeated id).
__device__ __forceinline__ void DownPartials(const Params& p, const uint4 (&w2r)[kMaxDownBlocks],
                                             const uint8_t (&inter_s)[kUnitCols], uint64_t routed, int cb, int rb0,
                                             int nrb) {
  const int tid = threadIdx.x, half = tid % 2;
  const int64_t H = p.a.hidden;
  float q[16];
#pragma unroll
  for (int i = 0; i < 16; i += 2) {
    const __half2_raw r =
        __nv_cvt_fp8x2_to_halfraw2(*reinterpret_cast<const __nv_fp8x2_storage_t*>(&inter_s[16 * half + i]), __NV_E4M3);
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&r));
    q[i] = f.x, q[i + 1] = f.y;
  }
  float* dst = p.d.partials + static_cast<int64_t>(cb) * H + rb0 * kDownRowBlock + tid / 2;
  const int64_t pair_stride = static_cast<int64_t>(p.col_blocks) * H;
#pragma unroll
  for (int m = 0; m < kMaxDownBlocks; ++m) {
    if (m < nrb) {
      const float own = Dot16E4M3(w2r[m], q);
      const float other = __shfl_xor_sync(0xffffffffu, own, 1);
      if (half == 0) {
        const float sum = __fadd_rn(own, other);
#pragma unroll 1
        for (uint64_t left = routed; left != 0; left &= left - 1) {
          dst[(__ffsll(static_cast<long long>(left)) - 1) * pair_stride + m * kDownRowBlock] = sum;
        }
      }
    }
  }
}

// Fused form, second kernel (T = 1): out[h] = sum_j (j order) w_j * ((sum_cb partials[j, cb, h]) * a2 * w2_scale[e_j])
// (+ shared[h]), the stream down kernel's rounding order with its K splits = the column blocks. CTA: 32 rows,
// its warps take the pairs j, j + 8, ...
__global__ void __launch_bounds__(kReduceWarps * 32) T1FusedReduceKernel(const __grid_constant__ Params p) {
  __shared__ float v_s[kMaxPairs][kReduceRows];
  const WgmmaGateUpArgs& a = p.a;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t H = a.hidden;
  const int64_t h = static_cast<int64_t>(blockIdx.x) * kReduceRows + lane;
  PdlWait();  // the partials come from the gate-up grid
  PdlLaunchDependents();
  for (int j = warp; j < a.top_k; j += kReduceWarps) {
    const int e = a.ids[j] - a.expert_offset;
    if (e < 0 || e >= a.experts) continue;
    const float* src = p.d.partials + static_cast<int64_t>(j) * p.col_blocks * H + h;
    // 8 loads in flight, then their sum in order (a loop of load-add pairs ran one L2 round trip per block)
    float v = 0.f;
    for (int cb0 = 0; cb0 < p.col_blocks; cb0 += 8) {
      float part[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) part[k] = cb0 + k < p.col_blocks ? __ldcg(src + (cb0 + k) * H) : 0.f;
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        if (cb0 + k < p.col_blocks) v = cb0 + k == 0 ? part[0] : __fadd_rn(v, part[k]);
      }
    }
    v_s[j][lane] = __fmul_rn(v, __fmul_rn(*a.a2_scale, p.d.w2_scale[e]));
  }
  __syncthreads();
  if (warp > 0) return;
  float y = 0.f;
  for (int j = 0; j < a.top_k; ++j) {
    const int e = a.ids[j] - a.expert_offset;
    if (e < 0 || e >= a.experts) continue;  // another rank's expert: contributes 0
    y = __fadd_rn(y, __fmul_rn(p.d.weights[j], v_s[j][lane]));
  }
  if (p.d.shared != nullptr) y = __fadd_rn(y, __bfloat162float(static_cast<const __nv_bfloat16*>(p.d.shared)[h]));
  static_cast<__nv_bfloat16*>(p.d.out)[h] = __float2bfloat16_rn(y);
}

// Rank 0's epilogue: the tile through shared memory (gate rows sit in warps 0-1, up rows in warps 2-3), then
// e4m3(silu(gate * ts) * (up * ts) / a2_scale) of each (column, token): into inter[pair, col] for every pair (t, j)
// routed to e, or (kFused, T = 1) into inter_s of every CTA of the cluster. The tile (2.3 KB) goes where A was:
// every wgmma has completed and the cluster's partials were read before its first barrier.
template <bool kFused>
__device__ __forceinline__ void Epilogue(const Params& p, const float (&acc)[4], uint8_t* a_ptr, const int* ids_s,
                                         uint8_t (&inter_s)[kUnitCols], int mine, int e, int cb) {
  const WgmmaGateUpArgs& a = p.a;
  const int tid = threadIdx.x, lane = tid % 32;
  const int64_t I = a.inter_size;
  constexpr int kPitch = kMaxTokens + 1;
  float* tile = reinterpret_cast<float*>(a_ptr);
  __syncthreads();
  {
    const int w = tid / 32, g = lane / 4, q = lane % 4;
    tile[(16 * w + g) * kPitch + 2 * q] = acc[0];
    tile[(16 * w + g) * kPitch + 2 * q + 1] = acc[1];
    tile[(16 * w + g + 8) * kPitch + 2 * q] = acc[2];
    tile[(16 * w + g + 8) * kPitch + 2 * q + 1] = acc[3];
  }
  __syncthreads();
  const float ts = __fmul_rn(*a.a13_scale, a.w13_scale[e]);
  const float out_mul = QuantMultiplier(*a.a2_scale);
  for (int i = tid; i < kUnitCols * a.tokens; i += kThreads) {
    const int col = i % kUnitCols, t = i / kUnitCols;
    const float gv = __fmul_rn(tile[col * kPitch + t], ts), uv = __fmul_rn(tile[(kUnitCols + col) * kPitch + t], ts);
    const float h = __fmul_rn(Silu(gv), uv);
    const __nv_fp8_storage_t v = __nv_cvt_float_to_fp8(h * out_mul, __NV_SATFINITE, __NV_E4M3);
    if constexpr (kFused) {
      if (p.cluster > 1) {
        cg::cluster_group cluster = cg::this_cluster();
        for (int r = 0; r < p.cluster; ++r) *cluster.map_shared_rank(&inter_s[col], r) = v;
      } else {
        inter_s[col] = v;
      }
    } else {
      for (int j = 0; j < a.top_k; ++j) {
        const int pair = t * a.top_k + j;
        if (ids_s[pair] == mine) a.inter[static_cast<int64_t>(pair) * I + cb * kUnitCols + col] = v;
      }
    }
  }
}

// kFused: 3 CTAs per SM (the one-wave rule) leave 170 registers a thread; the w2 slice takes 64 of them.
template <bool kXFp8, bool kFused>
__global__ void __launch_bounds__(kThreads, kFused ? kStreamGateUpWgmmaCtasPerSm : 1)
    GateUpWgmmaKernel(const __grid_constant__ Params p) {
  extern __shared__ uint8_t dyn[];
  __shared__ int ids_s[kMaxPairs];
  __shared__ uint8_t inter_s[kUnitCols];  // fused (T = 1): the unit's e4m3 intermediate
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
  const uint8_t* gate = a.w13 + (static_cast<int64_t>(e) * 2 * I + cb * kUnitCols) * H + g0 * kGroupK;
  const int r0 = tid / 8, c = tid % 8;
#pragma unroll
  for (int s = 0; s < kMaxGroups; ++s) {
    if (s < n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = r0 + 16 * i;  // rows 0-31 gate, 32-63 up (I rows further on)
        const uint8_t* src = gate + (r < 32 ? r : I + r - 32) * H + s * kGroupK + c * 16;
        CpAsync16(a_base + s * kAGroupBytes + Sw128(r, c), src, true);
      }
    }
    CpAsyncCommit();
  }
  // Fused: this CTA's share of the unit's w2 slice, in flight with the w13 copies. Thread: row block m's row
  // tid / 2, bytes [16 (tid % 2), + 16) of the slice's 32 (a warp reads 16 whole 32-byte sectors per load).
  uint4 w2r[kFused ? kMaxDownBlocks : 1];
  const int row_blocks = static_cast<int>(H / kDownRowBlock);
  const int rb0 = rank * row_blocks / p.cluster, nrb = (rank + 1) * row_blocks / p.cluster - rb0;
  auto load_w2 = [&](bool contiguous) {
    if constexpr (!kFused) return;
    const uint8_t* src = p.d.w2 + (static_cast<int64_t>(e) * H + rb0 * kDownRowBlock + tid / 2) * I +
                         cb * kUnitCols + (tid % 2) * 16;
    const int64_t step = static_cast<int64_t>(kDownRowBlock) * I;
    if (contiguous) src = p.d.w2 + static_cast<int64_t>(e) * H * I + (static_cast<int64_t>(cb) * H + rb0 * kDownRowBlock + tid / 2) * kUnitCols + (tid % 2) * 16;
#pragma unroll
    for (int m = 0; m < kMaxDownBlocks; ++m) {
      if (m < nrb) w2r[m] = LdgStream16(src + m * (contiguous ? kDownRowBlock * kUnitCols : step));
      else w2r[m] = make_uint4(0u, 0u, 0u, 0u);
    }
  };
  if constexpr (kFused) {
    if (p.probe == 0 || p.probe == 2) load_w2(p.probe == 2);
    if (p.probe == 3) {
#pragma unroll
      for (int m = 0; m < kMaxDownBlocks; ++m) w2r[m] = make_uint4(0u, 0u, 0u, 0u);
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
  if (p.cluster > 1) {
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    if (rank > 0) {
      float4* dst = cluster.map_shared_rank(red + (rank - 1) * kThreads + tid, 0);
      *dst = make_float4(acc[0], acc[1], acc[2], acc[3]);
    }
    cluster.sync();
    if (rank > 0 && !kFused) return;
    if (rank == 0) {
      for (int r = 1; r < p.cluster; ++r) {
        const float4 o = red[(r - 1) * kThreads + tid];
        acc[0] = __fadd_rn(acc[0], o.x), acc[1] = __fadd_rn(acc[1], o.y);
        acc[2] = __fadd_rn(acc[2], o.z), acc[3] = __fadd_rn(acc[3], o.w);
      }
    }
  }
  if (rank == 0) Epilogue<kFused>(p, acc, a_ptr, ids_s, inter_s, mine, e, cb);
  if constexpr (kFused) {
    if (p.probe == 1) load_w2(false);
    if (p.cluster > 1) {
      cg::this_cluster().sync();  // rank 0 has written the intermediate into every rank's inter_s
    } else {
      __syncthreads();
    }
    // The pairs routed to this unit's expert (T = 1: slots j < top_k <= 64), as a mask: one dot product per row,
    // stored for each (a repeated id) without an unrolled pair loop per row (ncu: that code, twice inlined, made
    // the kernel ~170 KB of SASS and 38% of its stall samples instruction-cache misses).
    uint64_t routed = 0;
    for (int j = 0; j < a.top_k; ++j) routed |= static_cast<uint64_t>(ids_s[j] == mine) << j;
    DownPartials(p, w2r, inter_s, routed, cb, rb0, nrb);
  }
}
// The gate-up grid (either form) on `stream`.
template <bool kFused>
Status LaunchGateUpGrid(const Params& p, cudaStream_t stream) {
  const WgmmaGateUpArgs& a = p.a;
  const int per_cta = (a.hidden / kGroupK + p.cluster - 1) / p.cluster;
  // operands + 1 KB for the 1024-byte alignment; the reduce (<= 7 x 2 KB) and epilogue tiles reuse A and B
  const int smem = per_cta * (kAGroupBytes + kBGroupBytes) + 1024;
  auto* kernel = a.x_fp8 ? &GateUpWgmmaKernel<true, kFused> : &GateUpWgmmaKernel<false, kFused>;
  // AllowSmem raises the limit once per kernel: give it the largest size any shape asks for
  constexpr int kMaxSmem = kMaxGroups * (kAGroupBytes + kBGroupBytes) + 1024;
  static_assert(kStreamGateUpWgmmaCtasPerSm * (kMaxSmem + 1024) <= 228 * 1024, "CTAs per SM (+1 KB reserved each)");
  HPC_RETURN_IF_ERROR(AllowSmem(reinterpret_cast<const void*>(kernel), kMaxSmem));
  const int64_t ctas = StreamGateUpWgmmaCtas(a.tokens, a.top_k, a.hidden, a.inter_size);
  return LaunchCluster(kFused ? "fused_moe stream T=1 fused gate-up+down launch" : "fused_moe stream gate-up (wgmma) launch",
                       kernel, dim3(static_cast<unsigned>(ctas)), dim3(kThreads), smem,
                       static_cast<unsigned>(p.cluster), stream, p);
}

}  // namespace

Status LaunchStreamGateUpWgmma(const WgmmaGateUpArgs& a, cudaStream_t stream) {
  const Params p = {a, WgmmaDownArgs{}, static_cast<int>(StreamGateUpWgmmaCluster(a.hidden)),
                    a.inter_size / kUnitCols, 0};
  return LaunchGateUpGrid<false>(p, stream);
}

Status LaunchStreamT1Fused(const WgmmaGateUpArgs& a, const WgmmaDownArgs& d, cudaStream_t stream) {
  if (a.tokens != 1 || !StreamT1FusedFits(a.top_k, a.hidden, a.inter_size) || d.partials == nullptr) {
    return Status::Internal("hpc_xla: fused_moe T=1 fused kernels called outside their shapes");
  }
  static const int probe = EnvInt("HPC_XLA_MOE_T1_PROBE", 0);
  const Params p = {a, d, static_cast<int>(StreamGateUpWgmmaCluster(a.hidden)), a.inter_size / kUnitCols, probe};
  HPC_RETURN_IF_ERROR(LaunchGateUpGrid<true>(p, stream));
  return Launch("fused_moe stream T=1 reduce launch", &T1FusedReduceKernel, dim3(a.hidden / kReduceRows),
                dim3(kReduceWarps * 32), 0, stream, p);
}

}  // namespace hpc::moe
