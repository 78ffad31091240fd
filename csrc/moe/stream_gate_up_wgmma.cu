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
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>

#include "csrc/common/arch.h"
#include "csrc/common/launch.cuh"
#include "csrc/common/mma.cuh"
#include "csrc/common/numeric.h"
#include "csrc/moe/fused_moe.h"
#include "csrc/moe/moe_common.cuh"
#include "csrc/moe/stream_gate_up_wgmma.h"
#include "csrc/moe/wgmma_sm90.cuh"

namespace hpc::moe {
namespace {

namespace cg = cooperative_groups;

// Launches of this kernel (FusedMoeWgmmaGateUpLaunches: the tests' proof of which kernel ran).
std::atomic<int64_t> g_launches{0};

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

__device__ __forceinline__ uint32_t PackE4M3x4(float a, float b, float c, float d, float mul) {
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a * mul, b * mul), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c * mul, d * mul), __NV_SATFINITE, __NV_E4M3);
  return lo | (hi << 16);
}

template <bool kXFp8>
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
    const int w = tid / 32, g = lane / 4, q = lane % 4;
    constexpr int kPitch = kMaxTokens + 1;
    tile[(16 * w + g) * kPitch + 2 * q] = acc[0];
    tile[(16 * w + g) * kPitch + 2 * q + 1] = acc[1];
    tile[(16 * w + g + 8) * kPitch + 2 * q] = acc[2];
    tile[(16 * w + g + 8) * kPitch + 2 * q + 1] = acc[3];
  }
  __syncthreads();
  const float ts = __fmul_rn(*a.a13_scale, a.w13_scale[e]);
  const float out_mul = QuantMultiplier(*a.a2_scale);
  for (int i = tid; i < kUnitCols * a.tokens; i += kThreads) {
    constexpr int kPitch = kMaxTokens + 1;
    const int col = i % kUnitCols, t = i / kUnitCols;
    const float gv = __fmul_rn(tile[col * kPitch + t], ts), uv = __fmul_rn(tile[(kUnitCols + col) * kPitch + t], ts);
    const float h = __fmul_rn(Silu(gv), uv);
    const __nv_fp8_storage_t v = __nv_cvt_float_to_fp8(h * out_mul, __NV_SATFINITE, __NV_E4M3);
    for (int j = 0; j < a.top_k; ++j) {
      const int pair = t * a.top_k + j;
      if (ids_s[pair] == mine) a.inter[static_cast<int64_t>(pair) * I + cb * kUnitCols + col] = v;
    }
  }
}

// CTAs per unit: as few as keep each at <= kMaxGroups K groups.
int ClusterFor(int groups) { return (groups + kMaxGroups - 1) / kMaxGroups; }

}  // namespace

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
  auto* kernel = a.x_fp8 ? &GateUpWgmmaKernel<true> : &GateUpWgmmaKernel<false>;
  // AllowSmem raises the limit once per kernel: give it the largest size any shape asks for
  constexpr int kMaxSmem = kMaxGroups * (kAGroupBytes + kBGroupBytes) + 1024;
  static_assert(kStreamGateUpWgmmaCtasPerSm * (kMaxSmem + 1024) <= 228 * 1024, "CTAs per SM (+1 KB reserved each)");
  HPC_RETURN_IF_ERROR(AllowSmem(reinterpret_cast<const void*>(kernel), kMaxSmem));
  const int64_t ctas = StreamGateUpWgmmaCtas(a.tokens, a.top_k, a.hidden, a.inter_size);
  HPC_RETURN_IF_ERROR(LaunchCluster("fused_moe stream gate-up (wgmma) launch", kernel, dim3(static_cast<unsigned>(ctas)),
                                    dim3(kThreads), smem, static_cast<unsigned>(p.cluster), stream, p));
  g_launches.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

}  // namespace hpc::moe

namespace hpc {
int64_t FusedMoeWgmmaGateUpLaunches() { return moe::g_launches.load(std::memory_order_relaxed); }
}  // namespace hpc
