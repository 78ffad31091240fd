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
// Rows past the local pairs and columns past I are zero-filled by the copies (zero B rows too), so K tails need no
// special steps. (Under EP the down B tiles' rows of remote pairs hold stale workspace, possibly e4m3 NaN: such a
// row only reaches its own output column, which no slot reads.)
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <atomic>
#include <map>
#include <mutex>

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
constexpr int kAtomK = 128;                      // K bytes per swizzle atom row (4 wgmma k32 steps)
constexpr int kAtomTileBytes = kRows * kAtomK;   // one A atom column: 8 KB
constexpr int kChunkAtoms = 2;                   // K atoms per chunk (16 KB, 8 wgmmas: half the per-chunk overhead)
constexpr int kChunkK = kChunkAtoms * kAtomK;
constexpr int kChunkBytes = kRows * kChunkK;     // 16 KB
constexpr int kStages = 4;                       // ring: 64 KB per CTA, two CTAs per SM where the B tiles fit
constexpr int kUnitCols = 32;                    // I columns per gate-up unit: 32 gate + 32 up rows
constexpr int kAtomBytes = 1024;                 // a B tile per K atom: 8 rows (tokens / pairs) x 128 bytes
constexpr int kIterCost = 16;                    // a chunk iteration's fixed cost in 128-byte rows (balance only)
constexpr int kMaxXAtoms = static_cast<int>(kOneKernelMaxHidden / kAtomK);
constexpr int kMaxInterAtoms = static_cast<int>(kOneKernelMaxInter / kAtomK);
// Dynamic shared memory of a shape: + 1 KB for the 1024-byte alignment the swizzle needs, the ring, x's and the
// intermediate's B atoms (whole chunks of them). Qwen3-30B (H 2048, I 768): 87 KB -> two CTAs per SM (experiment
// 41c: 41b's single warpgroup per SM was bound by its per-chunk instruction chain; two CTAs interleave two chains).
constexpr int SmemBytes(int64_t hidden, int64_t inter) {
  return static_cast<int>(1024 + kStages * kChunkBytes +
                          (2 * ((hidden + kChunkK - 1) / kChunkK) + 2 * ((inter + kChunkK - 1) / kChunkK)) * kAtomBytes);
}
constexpr int kSmemMaxBytes = SmemBytes(kOneKernelMaxHidden, kOneKernelMaxInter);
static_assert(kSmemMaxBytes <= 227 * 1024, "at least one CTA per SM");
static_assert(kMaxXAtoms % kChunkAtoms == 0 && kMaxInterAtoms % kChunkAtoms == 0, "whole chunks of B atoms");
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

// d = A[64 x 256] * B[8 x 256]^T over one chunk's two K atoms (8 wgmmas into a fresh d), issued, not waited for.
__device__ __forceinline__ void IssueChunkWgmmas(float (&d)[4], uint32_t a_chunk, uint32_t b_atom0) {
  d[0] = d[1] = d[2] = d[3] = 0.f;
  FenceRegs(d);
  WgmmaFence();
#pragma unroll
  for (int at = 0; at < kChunkAtoms; ++at) {
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      WgmmaE4M3(d, SmemDescSw128(a_chunk + at * kAtomTileBytes + ks * 32),
                SmemDescSw128(b_atom0 + at * kAtomBytes + ks * 32), at + ks);
    }
  }
  WgmmaCommit();
}

// B tiles (atoms) of `n_atoms`: row r of atom at = 16 bytes x 8 of `row(r)` at K offset at * 128 (zero where
// row(r) is null or past `k_end`).
template <class RowFn>
__device__ __forceinline__ void FillBAtoms(uint8_t* b, int n_atoms, int64_t k_end, RowFn row, bool l2) {
  for (int idx = threadIdx.x; idx < n_atoms * 64; idx += kThreads) {
    const int at = idx / 64, r = (idx / 8) % 8, ch = idx % 8;
    const int64_t k = static_cast<int64_t>(at) * kAtomK + ch * 16;
    const uint8_t* src = row(r);
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (src != nullptr && k < k_end) v = l2 ? __ldcg(reinterpret_cast<const uint4*>(src + k)) : *reinterpret_cast<const uint4*>(src + k);
    *reinterpret_cast<uint4*>(b + at * kAtomBytes + Sw128(r, ch)) = v;
  }
}

// mbarriers for experiment 41d's producer / consumer warpgroups (shared::cta, arrival counts of one warpgroup).
__device__ __forceinline__ void MbarInit(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(SmemAddr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void MbarArrive(uint64_t* bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(SmemAddr(bar)) : "memory");
}
// Until the phase of parity `parity` has completed.
__device__ __forceinline__ void MbarWait(uint64_t* bar, int parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(SmemAddr(bar)), "r"(parity) : "memory");
}
// The consumer warpgroup alone (named barrier 1; barrier 0 is __syncthreads and the grid barrier's).
__device__ __forceinline__ void ConsumerSync() { asm volatile("bar.sync 1, %0;\n" ::"n"(kThreads) : "memory"); }

constexpr int kLag = 2;  // 41d: a producer thread publishes chunk i - kLag after issuing chunk i (< kStages)
static_assert(kLag < kStages, "the producer waits for a slot only after publishing its previous use");

// kWs = false: experiment 41c, one warpgroup copies and multiplies. kWs = true: experiment 41d, warpgroup 1 copies
// (its threads publish each chunk through a full mbarrier once their copies landed) and warpgroup 0 multiplies
// (releasing each slot through an empty mbarrier), so the copy instructions leave the multiply chain.
template <bool kWs>
__global__ void __launch_bounds__(kWs ? 2 * kThreads : kThreads, 2) OneKernel(const __grid_constant__ Params p) {
  constexpr int kNT = kWs ? 2 * kThreads : kThreads;
  const OneKernelArgs& a = p.a;
  extern __shared__ uint8_t dyn[];
  __shared__ Routing rt;
  __shared__ float ytile[kRows];
  __shared__ __align__(16) uint8_t xq[kOneKernelMaxHidden];  // x quantized (bf16 x), the B row 0 source
  __shared__ __align__(8) uint64_t full[kStages], empty[kStages];  // 41d only
  const int t = threadIdx.x, w = t / 32, lane = t % 32, g = lane / 4, q = lane % 4;
  if (kWs && t == 0) {
    for (int i = 0; i < kStages; ++i) MbarInit(&full[i], kThreads), MbarInit(&empty[i], kThreads);
  }
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
    for (int64_t h = static_cast<int64_t>(c) * kNT + t; h < H; h += static_cast<int64_t>(G) * kNT) {
      a.out[h] = a.shared != nullptr ? a.shared[h] : __float2bfloat16_rn(0.f);
    }
    PdlLaunchDependents();
    return;
  }

  // ------------------------------------------------------------------ this CTA's work
  const int k1 = (a.hidden + kChunkK - 1) / kChunkK;      // gate-up chunks per unit
  const int col_blocks = a.inter_size / kUnitCols;
  const int nk2 = (a.inter_size + kChunkK - 1) / kChunkK;  // down chunks per tile
  const int64_t n1_all = static_cast<int64_t>(n_hit) * col_blocks * k1;
  const int slots = n_local <= 1 ? 1 : (n_local <= 2 ? 2 : (n_local <= 4 ? 4 : 8));
  const int rps = kRows / slots;                          // H rows per slot in a down tile
  const int tiles = a.hidden / rps;
  const int64_t chunk_cost = kRows * kChunkAtoms + kIterCost;
  const int64_t tile_cost = static_cast<int64_t>(nk2) * (n_local * rps * kChunkAtoms + kIterCost);
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
  // (chunk counts fit an int: n1_all <= 8 x 128 x 16)
  const int a0 = static_cast<int>(WarpMax(m0)), a1 = static_cast<int>(c + 1 == G ? n1_all : WarpMax(m1));
  const int n1 = a1 - a0, n_total = n1 + (v1 - v0) * nk2;

  // ------------------------------------------------------------------ shared memory
  const uint32_t raw = SmemAddr(dyn);
  const uint32_t ring = (raw + 1023u) & ~1023u;
  const uint32_t xb = ring + kStages * kChunkBytes;       // 2 k1 B atoms: x quantized (row 0), rows 1-7 zero
  const uint32_t ib = xb + 2 * k1 * kAtomBytes;           // 2 nk2 B atoms: the pairs' intermediate rows
  uint8_t* xb_ptr = dyn + (xb - raw);
  uint8_t* ib_ptr = dyn + (ib - raw);

  // The copy cursor: chunks are issued strictly in order, so each thread walks them incrementally -- its 4 rows'
  // pointers change only at a unit or tile boundary (no per-chunk division: the first version spent most of a
  // chunk's ~400 instructions on index math, ncu: 1 warp per scheduler issuing every 4.8 cycles).
  const int pt = kWs ? t - kThreads : t;  // copy-thread index: 41d's producer warpgroup, 41c's only one
  const int c8 = pt % 8, r0 = pt / 8;     // this thread's 16-byte column and first row (+ 16 per copy)
  int next = 0;                      // next chunk to issue
  int cu_k = a0 % k1, cu_cb = (a0 / k1) % col_blocks, cu_s = a0 / k1 / col_blocks;  // stage 1: unit and chunk
  int cv = v0, ck2 = 0;                                                               // stage 2: tile and chunk
  const uint8_t* rows[4];
  const int64_t up = W13UpDelta(I, a.w13_interleaved) * H;
  auto unit_rows = [&]() {
    const uint8_t* gate = a.w13 + (static_cast<int64_t>(rt.hit[cu_s]) * 2 * I +
                                   W13GateRow(cu_cb * kUnitCols, a.w13_interleaved)) * H + c8 * 16;
#pragma unroll
    for (int ii = 0; ii < 4; ++ii) {
      const int r = r0 + 16 * ii;  // rows 0-31 gate, 32-63 up (a unit's 32 columns lie inside one 64-block)
      rows[ii] = gate + (r < kUnitCols ? r * H : up + (r - kUnitCols) * H);
    }
  };
  auto tile_rows = [&]() {
#pragma unroll
    for (int ii = 0; ii < 4; ++ii) {
      const int r = r0 + 16 * ii, j = r / rps, hh = r % rps;
      rows[ii] = j < n_local ? a.w2 + (static_cast<int64_t>(rt.slot_expert[j]) * H + static_cast<int64_t>(cv) * rps + hh) * I + c8 * 16
                             : nullptr;
    }
  };
  if (!kWs || t >= kThreads) {  // copy threads only (41d's consumers have pt < 0: no rows of theirs)
    if (n1 > 0) {
      unit_rows();
    } else if (n_total > 0) {
      tile_rows();
    }
  }
  // Issues the next chunk into its ring slot; always commits a group (empty past the end), so waiting for
  // kStages - 2 pending groups at chunk i means chunk i has landed.
  auto issue = [&]() {
    if (next < n_total) {
      const uint32_t stage = ring + static_cast<uint32_t>(next % kStages) * kChunkBytes;
      if (next < n1) {
#pragma unroll
        for (int at = 0; at < kChunkAtoms; ++at) {
          const int64_t k = static_cast<int64_t>(cu_k) * kChunkK + at * kAtomK;  // (+ c8 * 16 in rows)
          const bool ok = k < H;
#pragma unroll
          for (int ii = 0; ii < 4; ++ii) {
            CpAsync16(stage + at * kAtomTileBytes + Sw128(r0 + 16 * ii, c8), ok ? rows[ii] + k : a.w13, ok);
          }
        }
        if (++cu_k == k1) {
          cu_k = 0;
          if (++cu_cb == col_blocks) cu_cb = 0, ++cu_s;
          if (next + 1 < n1) unit_rows();
        }
        if (next + 1 == n1 && n1 < n_total) tile_rows();  // (a CTA's last gate-up chunk may end mid-unit)
      } else {
#pragma unroll
        for (int at = 0; at < kChunkAtoms; ++at) {
          const int64_t k = static_cast<int64_t>(ck2) * kChunkK + at * kAtomK;
          const bool col_ok = k + c8 * 16 < I;
#pragma unroll
          for (int ii = 0; ii < 4; ++ii) {
            const bool ok = col_ok && rows[ii] != nullptr;
            CpAsync16(stage + at * kAtomTileBytes + Sw128(r0 + 16 * ii, c8), ok ? rows[ii] + k : a.w2, ok);
          }
        }
        if (++ck2 == nk2) {
          ck2 = 0;
          ++cv;
          if (next + 1 < n_total) tile_rows();
        }
      }
      ++next;
    }
    CpAsyncCommit();
  };
  // x as the gate-up B tiles, quantized as the reference does (while the first chunks fly): the multiplying
  // threads (41d: warpgroup 0 alone, its named barrier)
  auto x_tiles = [&](auto sync) {
    if (!a.x_fp8) {
      const float mul = QuantMultiplier(*a.a13_scale);
      for (int k = t * 16; k < a.hidden; k += kThreads * 16) {
        const uint4* src = reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(a.x) + k);
        const uint4 w0 = src[0], w1 = src[1];
        const uint32_t wv[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
        float f[16];
#pragma unroll
        for (int j = 0; j < 8; ++j) f[2 * j] = __uint_as_float(wv[j] << 16), f[2 * j + 1] = __uint_as_float(wv[j] & 0xffff0000u);
        uint4 v;
        v.x = PackE4M3x4(f[0], f[1], f[2], f[3], mul), v.y = PackE4M3x4(f[4], f[5], f[6], f[7], mul);
        v.z = PackE4M3x4(f[8], f[9], f[10], f[11], mul), v.w = PackE4M3x4(f[12], f[13], f[14], f[15], mul);
        *reinterpret_cast<uint4*>(xq + k) = v;
      }
      sync();
    }
    const uint8_t* x8 = a.x_fp8 ? static_cast<const uint8_t*>(a.x) : xq;
    FillBAtoms(xb_ptr, 2 * k1, H, [&](int r) { return r == 0 ? x8 : nullptr; }, false);
  };
  // Gate-up chunk i's 64 results (column 0: the token) to its partial; the caller has its slot's data published.
  int kx = a0 % k1;  // the chunk's K index within its unit (its B atoms)
  auto stage1_multiply = [&](int i, auto during) {
    float d[4];
    IssueChunkWgmmas(d, ring + static_cast<uint32_t>(i % kStages) * kChunkBytes, xb + kx * kChunkAtoms * kAtomBytes);
    during();  // 41c: the next copies, while the wgmmas run (another slot: the one chunk i - 1 freed)
    WgmmaWaitAll();
    FenceRegs(d);
    if (q == 0) {  // column 0 (the token): rows 16w + g and 16w + g + 8
      float* dst = a.partial + static_cast<int64_t>(a0 + i) * kRows;
      dst[16 * w + g] = d[0];
      dst[16 * w + g + 8] = d[2];
    }
    if (++kx == k1) kx = 0;
  };
  // The activation of this CTA's units (after the first grid barrier), by `nt` threads.
  auto activation = [&](int tid, int nt) {
    const int units = n_hit * col_blocks;
    const float ts_a = *a.a13_scale, out_mul = QuantMultiplier(*a.a2_scale);
    for (int64_t idx = static_cast<int64_t>(c) * nt + tid; idx < static_cast<int64_t>(units) * kUnitCols;
         idx += static_cast<int64_t>(G) * nt) {
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
  };
  // The down B tiles: row p = pair p's intermediate (rows past top_k and columns past I zero), through L2.
  auto inter_tiles = [&]() {
    FillBAtoms(ib_ptr, 2 * nk2, I, [&](int r) { return r < a.top_k ? a.inter + r * I : nullptr; }, true);
  };
  // Down chunk i into the tile's sums; at a tile's last chunk, its rows' outputs (slot j's value is column pair(j)).
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  int k2 = 0, v = v0;
  // (sync: the threads that multiply, before the tile's sums read ytile; reread: before ytile may be written again --
  // 41c's next chunk starts with a block barrier anyway, 41d's consumers pass none between chunks)
  auto stage2_multiply = [&](int i, auto during, auto sync, auto reread) {
    if (k2 == 0) acc[0] = acc[1] = acc[2] = acc[3] = 0.f;
    float d[4];
    IssueChunkWgmmas(d, ring + static_cast<uint32_t>(i % kStages) * kChunkBytes, ib + k2 * kChunkAtoms * kAtomBytes);
    during();
    WgmmaWaitAll();
    FenceRegs(d);
#pragma unroll
    for (int r = 0; r < 4; ++r) acc[r] = __fadd_rn(acc[r], d[r]);  // promoted per chunk, as the gate-up is
    if (++k2 == nk2) {
      k2 = 0;
#pragma unroll
      for (int i4 = 0; i4 < 4; ++i4) {
        const int m = 16 * w + g + (i4 >= 2 ? 8 : 0), n = 2 * q + (i4 & 1), j = m / rps;
        if (j < n_local && rt.slot_pair[j] == n) ytile[m] = acc[i4];
      }
      sync();
      if (t < rps) {  // y = sum over local pairs in pair order of w * (dot * ts) (+ shared): the reduce's rounding
        float y = 0.f;
        for (int j = 0; j < n_local; ++j) y = __fadd_rn(y, __fmul_rn(rt.slot_w[j], __fmul_rn(ytile[j * rps + t], rt.slot_ts[j])));
        const int64_t h = static_cast<int64_t>(v) * rps + t;
        if (a.shared != nullptr) y = __fadd_rn(y, __bfloat162float(a.shared[h]));
        a.out[h] = __float2bfloat16_rn(y);
      }
      reread();
      ++v;
    }
  };
  cg::grid_group grid = cg::this_grid();

  if constexpr (!kWs) {  // ------------------------------------------------ 41c: one warpgroup does everything
    auto block_sync = [] { __syncthreads(); };
#pragma unroll 1
    for (int i = 0; i < kStages - 1; ++i) issue();
    x_tiles(block_sync);
    auto wait_chunk = [&]() {
      CpAsyncWait<kStages - 2>();
      FenceProxyAsync();  // this thread's copies (and B tiles) visible to the async proxy the wgmmas read through
      __syncthreads();    // everyone's, and every thread is past the previous chunk's wgmmas: its slot may be refilled
    };
    for (int i = 0; i < n1; ++i) {
      wait_chunk();
      stage1_multiply(i, issue);
    }
    grid.sync();  // every chunk's partials written (the w2 chunks already issued keep streaming meanwhile)
    activation(t, kNT);
    grid.sync();  // every pair's intermediate written
    inter_tiles();
    PdlLaunchDependents();
    for (int i = n1; i < n_total; ++i) {
      wait_chunk();  // (its fence and barrier also publish the B tiles above, at the first chunk)
      stage2_multiply(i, issue, block_sync, [] {});
    }
    CpAsyncWait<0>();
  } else if (t >= kThreads) {  // -------------------------------------------- 41d: the producer warpgroup
    // Chunk `pub` is published once this thread's copies of it landed (at most `pending` later groups still in
    // flight): wait, fence them for the async proxy the wgmmas read through, arrive on its full barrier.
    int pub = 0;
    auto arrive = [&]() {
      FenceProxyAsync();
      MbarArrive(&full[pub % kStages]);
      ++pub;
    };
    auto publish = [&](int pending) {
      CpAsyncWaitAtMost(pending);
      arrive();
    };
    auto publish_lagged = [&]() {  // chunk pub with kLag later groups committed (chunk pub + kLag just issued)
      CpAsyncWait<kLag>();
      arrive();
    };
    auto acquire = [&](int i) {  // slot of chunk i, once the consumers released its previous use
      if (i >= kStages) MbarWait(&empty[i % kStages], (i / kStages - 1) & 1);
    };
    // Before the grid barriers: every gate-up chunk and at most one ring of down chunks (their slots are released
    // by gate-up chunks), every gate-up chunk published -- the consumers wait for those before the barriers.
    const int lim = min(n_total, n1 + kStages);
    // In the loops i - pub == kLag whenever it publishes: the wait's count is a constant there (an immediate, not
    // CpAsyncWaitAtMost's switch in the producer's per-chunk chain); only the flushes need the runtime form.
    for (int i = 0; i < lim; ++i) {
      acquire(i);
      issue();
      if (i - pub >= kLag) publish_lagged();
    }
    while (pub < n1) publish(lim - 1 - pub);
    grid.sync();
    activation(t, kNT);
    grid.sync();
    while (pub < lim) publish(lim - 1 - pub);  // the ring's down chunks issued before the barriers
    for (int i = lim; i < n_total; ++i) {
      acquire(i);
      issue();
      if (i - pub >= kLag) publish_lagged();
    }
    while (pub < n_total) publish(n_total - 1 - pub);
    CpAsyncWait<0>();
  } else {  // --------------------------------------------------------------- 41d: the consumer warpgroup
    auto consumer_sync = [] { ConsumerSync(); };
    auto nothing = [] {};
    x_tiles(consumer_sync);
    FenceProxyAsync();
    ConsumerSync();
    for (int i = 0; i < n1; ++i) {
      MbarWait(&full[i % kStages], (i / kStages) & 1);
      stage1_multiply(i, nothing);
      MbarArrive(&empty[i % kStages]);  // its wgmmas have completed: the slot may be refilled
    }
    grid.sync();
    activation(t, kNT);
    grid.sync();
    inter_tiles();
    FenceProxyAsync();
    ConsumerSync();
    PdlLaunchDependents();
    for (int i = n1; i < n_total; ++i) {
      MbarWait(&full[i % kStages], (i / kStages) & 1);
      stage2_multiply(i, nothing, consumer_sync, consumer_sync);
      MbarArrive(&empty[i % kStages]);
    }
  }
}

}  // namespace

Status LaunchStreamOneKernel(const OneKernelArgs& a, int device, cudaStream_t stream) {
  auto* kernel = a.warp_specialized ? &OneKernel<true> : &OneKernel<false>;
  const int threads = a.warp_specialized ? 2 * kThreads : kThreads;
  HPC_RETURN_IF_ERROR(AllowSmem(reinterpret_cast<const void*>(kernel), kSmemMaxBytes));
  const int smem = SmemBytes(a.hidden, a.inter_size);
  // a cooperative grid: every CTA resident at once (the grid barriers); CTAs per SM by this shape's shared memory
  // (cached per kernel and size: the occupancy query is a driver call)
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, int> per_sm_of;
  int per_sm = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    const std::pair<const void*, int> key(reinterpret_cast<const void*>(kernel), smem);
    auto it = per_sm_of.find(key);
    if (it == per_sm_of.end()) {
      int n = 0;
      HPC_RETURN_IF_ERROR(CudaStatus(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem),
                                     "fused_moe one-kernel occupancy"));
      if (n < 1) return Status::Internal("fused_moe one-kernel: the kernel does not fit on an SM");
      it = per_sm_of.emplace(key, n).first;
    }
    per_sm = it->second;
  }
  const int grid = per_sm * MultiprocessorCount(device);
  Params p = {a};
  LaunchOptions options;
  options.cooperative = true;
  options.pdl = a.pdl;
  HPC_RETURN_IF_ERROR(LaunchWith("fused_moe one-kernel launch", kernel, dim3(grid), dim3(threads), smem, options,
                                 stream, p));
  g_launches.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

}  // namespace hpc::moe

namespace hpc {
int64_t FusedMoeOneKernelLaunches() { return moe::g_launches.load(std::memory_order_relaxed); }
}  // namespace hpc
