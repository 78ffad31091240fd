// fused_moe's single-token fp8_tensor layer in one cooperative kernel (stream_one_kernel.h; experiment 41).
//
// Why: at T = 1 the layer is ~38 MB of weights (Qwen3-30B: 25 MB of w13, 12.6 MB of w2), ~9 us at the copy ceiling,
// but the two-kernel stream path takes ~19 us on the H200: each stage is a one-wave grid of one-shot CTAs (load,
// multiply, reduce, write) streaming at ~2.3 / 1.65 TB/s, and the down grid can only become resident and stream
// w2 once the gate-up grid has drained (bench/NOTES.md, sessions 14-15). Here one persistent grid (one CTA per SM)
// runs both stages and keeps ONE ring of weight chunks per SM full across them: the w2 chunks of a CTA's second
// stage are issued while its first stage still computes, before any barrier; only the activations (tiny) wait for
// the grid barriers.
//
// Work, all of it a sequence of 8 KB chunks: 64 weight rows x 128 K bytes, one wgmma A tile (m64n8k32 e4m3, four k
// steps), K-major in the 128-byte swizzle.
//   Stage 1 (gate-up): a unit is (hit expert, 32 columns of I): its 32 gate rows and 32 up rows over H, H / 128
//     chunks; B = x (quantized once per CTA, token 0 of the n8). The flat (unit, chunk) sequence is split across CTAs
//     at chunk granularity; every chunk's 64 results go to `partial` (256 B), so a unit may straddle CTAs.
//   Barrier. Activation: unit u's columns by CTA u % grid: the chunk partials summed in chunk order (bitwise
//     independent of how the chunks were split), silu(gate) * up, e4m3 with a2_scale, written for every pair of
//     the expert.
//   Barrier. Stage 2 (down): a tile is rps rows of H for each of the <= 8 local pairs (slot j's rows j * rps ..,
//     rps = 64 / slots), I / 128 chunks; B = the intermediate of all top_k pairs (the n8 columns), so slot j's
//     result is column pair(j) of its rows. At a tile's last chunk the CTA sums its rows' slots in pair order
//     (the weighted top-k sum of the other paths, + shared_output) and writes bf16 out. Tiles are whole to a CTA.
// Balance: the down tiles go to CTAs in contiguous runs; the gate-up chunks fill each CTA up to the mean work (in
// 128-byte rows, + kIterCost per chunk), so a CTA with more down rows takes fewer gate-up chunks.
// Rows past the local pairs and columns past I are zero-filled by the copies (zero B rows too), so every MMA input
// is finite and K tails need no special steps.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <atomic>

#include "csrc/common/arch.h"
#include "csrc/common/launch.cuh"
#include "csrc/common/mma.cuh"
#include "csrc/common/numeric.h"
#include "csrc/common/occupancy.h"
#include "csrc/moe/fused_moe.h"
#include "csrc/moe/moe_common.cuh"
#include "csrc/moe/stream_one_kernel.h"
#include "csrc/moe/wgmma_sm90.cuh"

namespace hpc::moe {
namespace {

namespace cg = cooperative_groups;

// Launches of this kernel (FusedMoeOneKernelLaunches: the tests' proof that it ran).
std::atomic<int64_t> g_launches{0};

constexpr int kThreads = 128;                    // one warpgroup: the wgmma's
constexpr int kRows = 64;                        // A rows per chunk: the wgmma M
constexpr int kChunkK = 128;                     // K bytes per chunk: one swizzle-atom row, 4 wgmma k32 steps
constexpr int kChunkBytes = kRows * kChunkK;     // 8 KB
constexpr int kStages = 16;                      // ring: 128 KB per SM, 15 chunks in flight
constexpr int kUnitCols = 32;                    // I columns per gate-up unit: 32 gate + 32 up rows
constexpr int kAtomBytes = 1024;                 // a B tile per K chunk: 8 rows (tokens / pairs) x 128 bytes
constexpr int kIterCost = 8;                     // a chunk iteration's fixed cost in 128-byte rows (balance only)
constexpr int kMaxXAtoms = static_cast<int>(kOneKernelMaxHidden / kChunkK);
constexpr int kMaxInterAtoms = static_cast<int>(kOneKernelMaxInter / kChunkK);
// + 1 KB for the 1024-byte alignment the swizzle needs
constexpr int kSmemBytes = 1024 + kStages * kChunkBytes + (kMaxXAtoms + kMaxInterAtoms) * kAtomBytes;
static_assert(kSmemBytes <= 227 * 1024, "one CTA per SM");
static_assert(kOneKernelMaxTopK <= 8, "the pairs are the n8 columns of the down MMAs");

struct Params {
  OneKernelArgs a;
};

// Who is routed where (one token): written by warp 0, read by every thread after the first barrier.
struct Routing {
  int n_hit;        // distinct local experts
  int n_local;      // local pairs
  int hit[8];       // local expert of each hit, in order of first appearance
  int pair_local[8];  // local expert of pair p, -1 where remote (or p >= top_k)
  int slot_pair[8];   // pair of local slot j (ascending pairs)
  int slot_expert[8];
  float slot_w[8];    // its routing weight
  float slot_ts[8];   // its down dequant scale a2_scale * w2_scale[e]
};

__device__ __forceinline__ int64_t WarpMax(int64_t v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__global__ void __launch_bounds__(kThreads, 1) OneKernel(const __grid_constant__ Params p) {
  const OneKernelArgs& a = p.a;
  extern __shared__ uint8_t dyn[];
  __shared__ Routing rt;
  __shared__ float ytile[kRows];
  const int t = threadIdx.x, w = t / 32, lane = t % 32, g = lane / 4, q = lane % 4;
  const int G = gridDim.x, c = blockIdx.x;
  const int64_t H = a.hidden, I = a.inter_size;

  PdlWait();  // topk_ids and x may come from the previous kernel (routing)
  if (w == 0) {
    const int e = lane < a.top_k ? a.ids[lane] - a.expert_offset : -1;
    const bool local = lane < a.top_k && e >= 0 && e < a.experts;
    const unsigned same = __match_any_sync(0xffffffffu, local ? e : -1 - lane);  // non-local lanes match nobody
    const bool first = local && __ffs(same) - 1 == lane;
    const unsigned below = (1u << lane) - 1u;
    const unsigned firsts = __ballot_sync(0xffffffffu, first), locals = __ballot_sync(0xffffffffu, local);
    if (first) rt.hit[__popc(firsts & below)] = e;
    if (local) {
      const int j = __popc(locals & below);
      rt.slot_pair[j] = lane;
      rt.slot_expert[j] = e;
      rt.slot_w[j] = a.weights[lane];
      rt.slot_ts[j] = __fmul_rn(*a.a2_scale, a.w2_scale[e]);
    }
    if (lane < 8) rt.pair_local[lane] = local ? e : -1;
    if (lane == 0) rt.n_hit = __popc(firsts), rt.n_local = __popc(locals);
  }
  __syncthreads();
  const int n_hit = rt.n_hit, n_local = rt.n_local;
  if (n_local == 0) {  // no local expert (expert parallelism): out = shared_output or 0, no barrier anywhere
    for (int64_t h = static_cast<int64_t>(c) * kThreads + t; h < H; h += static_cast<int64_t>(G) * kThreads) {
      a.out[h] = a.shared != nullptr ? a.shared[h] : __float2bfloat16_rn(0.f);
    }
    PdlLaunchDependents();
    return;
  }

  // ------------------------------------------------------------------ this CTA's work
  const int k1 = a.hidden / kChunkK;                      // gate-up chunks per unit
  const int col_blocks = a.inter_size / kUnitCols;
  const int nk2 = (a.inter_size + kChunkK - 1) / kChunkK;  // down chunks per tile
  const int64_t n1_all = static_cast<int64_t>(n_hit) * col_blocks * k1;
  const int slots = n_local <= 1 ? 1 : (n_local <= 2 ? 2 : (n_local <= 4 ? 4 : 8));
  const int rps = kRows / slots;                          // H rows per slot in a down tile
  const int tiles = a.hidden / rps;
  const int64_t chunk_cost = kRows + kIterCost, tile_cost = static_cast<int64_t>(nk2) * (n_local * rps + kIterCost);
  const int64_t total = n1_all * chunk_cost + tiles * tile_cost;
  const int v0 = static_cast<int>(static_cast<int64_t>(c) * tiles / G);
  const int v1 = static_cast<int>(static_cast<int64_t>(c + 1) * tiles / G);
  // Gate-up chunks before CTA cc: what its mean share leaves after the down tiles before it, made monotone by a
  // running max (a CTA whose tiles alone exceed the mean takes no gate-up chunk); all of them at cc = G.
  auto before = [&](int cc) -> int64_t {
    const int64_t num = cc * total - static_cast<int64_t>(G) * tile_cost * (static_cast<int64_t>(cc) * tiles / G);
    return num <= 0 ? 0 : std::min<int64_t>(n1_all, num / (static_cast<int64_t>(G) * chunk_cost));
  };
  int64_t m0 = 0, m1 = 0;
#pragma unroll 1
  for (int cc = lane; cc <= c + 1; cc += 32) {
    const int64_t f = before(cc);
    if (cc <= c) m0 = max(m0, f);
    m1 = max(m1, f);
  }
  // (chunk counts fit an int: n1_all <= 8 x 128 x 32; 32-bit indices keep the per-chunk divisions short)
  const int a0 = static_cast<int>(WarpMax(m0)), a1 = static_cast<int>(c + 1 == G ? n1_all : WarpMax(m1));
  const int n1 = a1 - a0, n_total = n1 + (v1 - v0) * nk2;

  // ------------------------------------------------------------------ shared memory
  const uint32_t raw = SmemAddr(dyn);
  const uint32_t ring = (raw + 1023u) & ~1023u;
  const uint32_t xb = ring + kStages * kChunkBytes;       // k1 B atoms: x quantized (row 0), rows 1-7 zero
  const uint32_t ib = xb + k1 * kAtomBytes;               // nk2 B atoms: the pairs' intermediate rows
  uint8_t* xb_ptr = dyn + (xb - raw);
  uint8_t* ib_ptr = dyn + (ib - raw);

  // Chunk i of this CTA into ring slot i % kStages; always commits a group (empty past the end), so waiting for
  // kStages - 2 pending groups at chunk i means chunk i has landed.
  const int c8 = t % 8, r0 = t / 8;  // this thread's 16-byte column and first row (+ 16 per copy)
  auto issue = [&](int i) {
    if (i < n_total) {
      const uint32_t stage = ring + static_cast<uint32_t>(i % kStages) * kChunkBytes;
      if (i < n1) {
        const int f = a0 + i;
        const int u = f / k1, k = f % k1;
        const int e = rt.hit[u / col_blocks], cb = u % col_blocks;
        // a unit's 32 columns lie inside one 64-block: its gate rows and its up rows are two contiguous runs
        const uint8_t* gate = a.w13 + (static_cast<int64_t>(e) * 2 * I + W13GateRow(cb * kUnitCols, a.w13_interleaved)) * H +
                              k * kChunkK + c8 * 16;
        const int64_t up = W13UpDelta(I, a.w13_interleaved) * H;
#pragma unroll
        for (int ii = 0; ii < 4; ++ii) {
          const int r = r0 + 16 * ii;
          CpAsync16(stage + Sw128(r, c8), gate + (r < kUnitCols ? r * H : up + (r - kUnitCols) * H), true);
        }
      } else {
        const int j2 = i - n1;
        const int v = v0 + j2 / nk2, k2 = j2 % nk2;
        const int64_t col = static_cast<int64_t>(k2) * kChunkK + c8 * 16;
#pragma unroll
        for (int ii = 0; ii < 4; ++ii) {
          const int r = r0 + 16 * ii, j = r / rps, hh = r % rps;
          const bool ok = j < n_local && col < I;
          const uint8_t* src = a.w2;
          if (ok) src += (static_cast<int64_t>(rt.slot_expert[j]) * H + static_cast<int64_t>(v) * rps + hh) * I + col;
          CpAsync16(stage + Sw128(r, c8), src, ok);
        }
      }
    }
    CpAsyncCommit();
  };
#pragma unroll 1
  for (int i = 0; i < kStages - 1; ++i) issue(i);

  // x as the gate-up B tiles, quantized as the reference does (while the first chunks fly).
  {
    const float mul = a.x_fp8 ? 1.f : QuantMultiplier(*a.a13_scale);
    for (int idx = t; idx < k1 * 64; idx += kThreads) {
      const int atom = idx / 64, r = (idx / 8) % 8, ch = idx % 8;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (r == 0) {
        const int64_t k = static_cast<int64_t>(atom) * kChunkK + ch * 16;
        if (a.x_fp8) {
          v = *reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(a.x) + k);
        } else {
          const uint4* src = reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(a.x) + k);
          const uint4 w0 = src[0], w1 = src[1];
          const uint32_t wv[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
          float f[16];
#pragma unroll
          for (int j = 0; j < 8; ++j) f[2 * j] = __uint_as_float(wv[j] << 16), f[2 * j + 1] = __uint_as_float(wv[j] & 0xffff0000u);
          v.x = PackE4M3x4(f[0], f[1], f[2], f[3], mul), v.y = PackE4M3x4(f[4], f[5], f[6], f[7], mul);
          v.z = PackE4M3x4(f[8], f[9], f[10], f[11], mul), v.w = PackE4M3x4(f[12], f[13], f[14], f[15], mul);
        }
      }
      *reinterpret_cast<uint4*>(xb_ptr + atom * kAtomBytes + Sw128(r, ch)) = v;
    }
  }
  auto wait_chunk = [&]() {
    CpAsyncWait<kStages - 2>();
    FenceProxyAsync();  // this thread's copies (and B tiles) visible to the async proxy the wgmmas read through
    __syncthreads();    // everyone's, and every thread is past the previous chunk's wgmmas: its slot may be refilled
  };

  // ------------------------------------------------------------------ stage 1: gate-up chunks -> partials
  for (int i = 0; i < n1; ++i) {
    wait_chunk();
    const int f = a0 + i;
    float d[4];
    WgmmaIssueGroupE4M3(d, ring + static_cast<uint32_t>(i % kStages) * kChunkBytes,
                        xb + static_cast<uint32_t>(f % k1) * kAtomBytes);
    issue(i + kStages - 1);  // while the wgmmas run (another slot: the one chunk i - 1 freed)
    WgmmaWaitAll();
    FenceRegs(d);
    if (q == 0) {  // column 0 (the token): rows 16w + g and 16w + g + 8
      float* dst = a.partial + static_cast<int64_t>(f) * kRows;
      dst[16 * w + g] = d[0];
      dst[16 * w + g + 8] = d[2];
    }
  }

  // ------------------------------------------------------------------ activation
  cg::grid_group grid = cg::this_grid();
  grid.sync();  // every chunk's partials written (the w2 chunks already issued keep streaming meanwhile)
  {
    const int units = n_hit * col_blocks;
    const float ts_a = *a.a13_scale, out_mul = QuantMultiplier(*a.a2_scale);
    for (int64_t idx = static_cast<int64_t>(c) * kThreads + t; idx < static_cast<int64_t>(units) * kUnitCols;
         idx += static_cast<int64_t>(G) * kThreads) {
      const int u = static_cast<int>(idx / kUnitCols), col = static_cast<int>(idx % kUnitCols);
      const int e = rt.hit[u / col_blocks], cb = u % col_blocks;
      const float* src = a.partial + static_cast<int64_t>(u) * k1 * kRows;
      float gs = 0.f, us = 0.f;
#pragma unroll 8
      for (int k = 0; k < k1; ++k) {  // chunk order: the same sums however the chunks were split across CTAs
        gs = __fadd_rn(gs, __ldcg(src + k * kRows + col));
        us = __fadd_rn(us, __ldcg(src + k * kRows + kUnitCols + col));
      }
      const float ts = __fmul_rn(ts_a, a.w13_scale[e]);
      const float h = __fmul_rn(Silu(__fmul_rn(gs, ts)), __fmul_rn(us, ts));
      const __nv_fp8_storage_t v = __nv_cvt_float_to_fp8(h * out_mul, __NV_SATFINITE, __NV_E4M3);
      for (int pr = 0; pr < a.top_k; ++pr) {
        if (rt.pair_local[pr] == e) a.inter[static_cast<int64_t>(pr) * I + cb * kUnitCols + col] = v;
      }
    }
  }
  grid.sync();  // every pair's intermediate written
  // The down B tiles: row p = pair p's intermediate (rows past top_k and columns past I zero).
  for (int idx = t; idx < nk2 * 64; idx += kThreads) {
    const int atom = idx / 64, r = (idx / 8) % 8, ch = idx % 8;
    const int64_t col = static_cast<int64_t>(atom) * kChunkK + ch * 16;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (r < a.top_k && col < I) v = __ldcg(reinterpret_cast<const uint4*>(a.inter + r * I + col));
    *reinterpret_cast<uint4*>(ib_ptr + atom * kAtomBytes + Sw128(r, ch)) = v;
  }
  PdlLaunchDependents();

  // ------------------------------------------------------------------ stage 2: down tiles -> out
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int i = n1; i < n_total; ++i) {
    wait_chunk();  // (its fence and barrier also publish the B tiles above, at the first chunk)
    const int j2 = i - n1;
    const int k2 = j2 % nk2;
    if (k2 == 0) acc[0] = acc[1] = acc[2] = acc[3] = 0.f;
    float d[4];
    WgmmaIssueGroupE4M3(d, ring + static_cast<uint32_t>(i % kStages) * kChunkBytes, ib + k2 * kAtomBytes);
    issue(i + kStages - 1);
    WgmmaWaitAll();
    FenceRegs(d);
#pragma unroll
    for (int r = 0; r < 4; ++r) acc[r] = __fadd_rn(acc[r], d[r]);  // promoted per chunk, as the gate-up is
    if (k2 == nk2 - 1) {  // the tile's rows: slot j's value is column pair(j) of its rows
#pragma unroll
      for (int i4 = 0; i4 < 4; ++i4) {
        const int m = 16 * w + g + (i4 >= 2 ? 8 : 0), n = 2 * q + (i4 & 1), j = m / rps;
        if (j < n_local && rt.slot_pair[j] == n) ytile[m] = acc[i4];
      }
      __syncthreads();
      if (t < rps) {  // y = sum over local pairs in pair order of w * (dot * ts) (+ shared): the reduce's rounding
        float y = 0.f;
        for (int j = 0; j < n_local; ++j) y = __fadd_rn(y, __fmul_rn(rt.slot_w[j], __fmul_rn(ytile[j * rps + t], rt.slot_ts[j])));
        const int64_t h = static_cast<int64_t>(v0 + j2 / nk2) * rps + t;
        if (a.shared != nullptr) y = __fadd_rn(y, __bfloat162float(a.shared[h]));
        a.out[h] = __float2bfloat16_rn(y);
      }
    }
  }
  CpAsyncWait<0>();
}

}  // namespace

Status LaunchStreamOneKernel(const OneKernelArgs& a, int device, cudaStream_t stream) {
  auto* kernel = &OneKernel;
  HPC_RETURN_IF_ERROR(AllowSmem(reinterpret_cast<const void*>(kernel), kSmemBytes));
  int per_sm = 0;
  HPC_RETURN_IF_ERROR(ResidentCtasPerSm(reinterpret_cast<const void*>(kernel), kThreads, kSmemBytes,
                                        "fused_moe one-kernel occupancy", &per_sm));
  // a cooperative grid: every CTA resident at once (the grid barriers), one per SM by its shared memory
  const int grid = per_sm * MultiprocessorCount(device);
  Params p = {a};
  LaunchOptions options;
  options.cooperative = true;
  options.pdl = a.pdl;
  HPC_RETURN_IF_ERROR(LaunchWith("fused_moe one-kernel launch", kernel, dim3(grid), dim3(kThreads), kSmemBytes, options,
                                 stream, p));
  g_launches.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

}  // namespace hpc::moe

namespace hpc {
int64_t FusedMoeOneKernelLaunches() { return moe::g_launches.load(std::memory_order_relaxed); }
}  // namespace hpc
