// fused_moe's stream path (decode regime, M tile 8): fused_moe_stream.h, fused_moe_plan.h.
//
// Why a third path: at <= 8 rows per expert the layer is bound by streaming the hit experts' weights once
// (Qwen3-30B fp8 at T=1: 38 MB, ~9 us at the copy ceiling), but the tiled path runs five kernels (align, quant,
// two GEMMs, reduce), each waiting for the previous one to drain, and its GEMM grids (an expert tile x N block
// per CTA) leave most SMs idle at T=1 (28.9 us measured, bench/NOTES.md). Here two kernels do all of it:
//   gate-up: warp-persistent; a warp's jobs are units (hit expert, 8 columns of I): the 8 gate rows and the 8
//     matching up rows form one m16 tile, so silu(gate)*up is register-local; the expert's tokens are the N side,
//     8 per n8 MMA (nothing is padded to 16 rows). x is quantized on load as the reference does; the
//     intermediate is written per pair.
//   down:    CTA = 16 columns of H for every token; its 8 warps take (hit expert, K split) tasks; per-pair partials
//     stay in shared memory, then the CTA does the weighted top-k sum in j order (bitwise deterministic),
//     + shared_output, bf16 out.
// Each CTA finds the hit experts (ascending) and their pairs (ascending) from topk_ids itself: no align kernel.
// The down kernel builds that list before its PDL wait (topk_ids is an input of the op, complete once the
// gate-up kernel, which waited for its predecessors, has started it).
//
// Operands reach the MMAs through a per-warp cp.async ring (RunJobs) without any re-layout: thread (g, q) reads 16
// consecutive K elements [16q, 16q + 16) of each 64-wide K step for its A rows g, g + 8 and its B column g.
// mma.m16n8k16 only needs A and B to agree on which K index a register slot holds, and a dot product ignores K
// order: slot vk = 2q + i of virtual step v (0..3) holds element 4v + i, slot vk = 2q + 8 + i holds element
// 4v + 2 + i, in A and B alike. One 16-byte read (fp8) feeds four MMAs.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cub/block/block_scan.cuh>
#include <type_traits>

#include "csrc/common/arch.h"
#include "csrc/common/launch.cuh"
#include "csrc/common/mma.cuh"
#include "csrc/common/numeric.h"
#include "csrc/moe/fused_moe_stream.h"
#include "csrc/moe/moe_common.cuh"
#include "csrc/moe/stream_gate_up_wgmma.h"

namespace hpc::moe {
namespace {

struct StreamParams {
  const void* x;              // [T, H] bf16 | e4m3
  const float* x_scale;       // fp8 x with fp8_block128: [T, H/128]
  const uint8_t* w13;         // [E, 2I, H] (rows: W13GateRow / W13UpDelta of w13_interleaved)
  bool w13_interleaved;
  const float* w13_scale;     // fp8_tensor [E]; block128 [E, 2I/128, H/128]
  const uint8_t* w2;          // [E, H, I]
  const float* w2_scale;      // fp8_tensor [E]; block128 [E, H/128, I/128]
  const float* a13_scale;     // fp8_tensor: x's static scale
  const float* a2_scale;      // fp8_tensor: the intermediate's static scale
  const float* weights;       // [T, k]
  const int32_t* ids;         // [T, k] global expert ids
  const __nv_bfloat16* shared;
  __nv_bfloat16* out;
  void* inter;                // [P, I]: e4m3 (fp8_tensor) | bf16 (none) | f32 (fp8_block128)
  int tokens, top_k, pairs, experts, expert_offset, hidden, inter_size;
  int up_splits;              // 1: a gate-up unit per warp; kUpWarps: the CTA's warps split H of each unit
  int down_splits;            // StreamDownSplits
};

constexpr int kUpWarps = 4;
constexpr int kUpThreads = 32 * kUpWarps;
constexpr int kDownRows = 16;   // columns of H per down CTA (one m16 tile)
constexpr int kStep = 64;       // K elements per fragment step (4 threads x 16)
constexpr int kGroup = 128;     // K elements per ring stage: 2 steps, one fp8_block128 block
constexpr int kDownRedBytes = kStreamMaxPairs * kDownRows * 4;  // splits * P * 16 f32 <= this (StreamDownSplits)
// Ring bytes per gate-up CTA: bf16 96 KB (2 CTAs = 8 warps per SM; 4 KB A stages stream at ~3.8 TB/s); fp8 48 KB
// (4 CTAs = 16 warps per SM: its fragments cost ~5x the instructions per byte -- e4m3 -> f16 conversions and the
// quantization of x on load -- so it needs warps more than stages).
template <bool kFp8>
constexpr int kUpRingBytes = kFp8 ? 48 * 1024 : 96 * 1024;
constexpr int kDownRingBytes = 144 * 1024;  // per down CTA (1 per SM, next to its partials)
// fp8 down CTAs when H / 16 exceeds the SMs (H = 4096: 256 CTAs): 8 warps and half the ring, so two fit per SM and
// the grid is one wave instead of two (Hy3-TP8 T=1: the down kernel took 10 us for 6.3 MB in two waves).
constexpr int kDownNarrowWarps = 8;
constexpr int kDownNarrowRingBytes = 72 * 1024;

// ------------------------------------------------------------------------------ hit experts and their pairs
template <int THREADS>
struct HitList {
  int flags[kMaxMoeCudaExperts];
  int hit[kMaxMoeCudaExperts];  // hit local experts, ascending
  typename cub::BlockScan<int, THREADS>::TempStorage scan;
};

// ids_local[pair] = local expert or -1; returns the number of hit experts (uniform across the block).
template <int THREADS>
__device__ int BuildHitList(const StreamParams& p, int* ids_local, HitList<THREADS>& s) {
  constexpr int kItems = kMaxMoeCudaExperts / THREADS;
  for (int i = threadIdx.x; i < kMaxMoeCudaExperts; i += THREADS) s.flags[i] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < p.pairs; i += THREADS) {
    const int e = p.ids[i] - p.expert_offset;
    const int local = e >= 0 && e < p.experts ? e : -1;
    ids_local[i] = local;
    if (local >= 0) s.flags[local] = 1;
  }
  __syncthreads();
  int f[kItems], rank[kItems], total;
#pragma unroll
  for (int i = 0; i < kItems; ++i) f[i] = s.flags[threadIdx.x * kItems + i];
  cub::BlockScan<int, THREADS>(s.scan).ExclusiveSum(f, rank, total);
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    if (f[i]) s.hit[rank[i]] = threadIdx.x * kItems + i;
  }
  __syncthreads();
  return total;
}

// The pairs of local expert e are numbered in ascending pair order. One warp, every lane: returns how many there
// are and sets `mine` to pair number `want` (or -1): a ballot walk over ids_local, no list in memory.
__device__ __forceinline__ int PairOf(const int* ids_local, int pairs, int e, int want, int* mine) {
  const int lane = threadIdx.x % 32;
  int n = 0;
  *mine = -1;
  for (int base = 0; base < pairs; base += 32) {
    const unsigned m = __ballot_sync(0xffffffffu, base + lane < pairs && ids_local[base + lane] == e);
    const int c = __popc(m);
    if (want >= n && want < n + c) *mine = base + static_cast<int>(__fns(m, 0, want - n + 1));
    n += c;
  }
  return n;
}

// ------------------------------------------------------------------------------------------ fragments
// B column sources (the N side of the MMAs): what is loaded and how it becomes an MMA operand.
enum class Col {
  kBf16,            // bf16 row, bf16 MMA (no quantization)
  kFp8,             // e4m3 row (its scale is a tensor scale applied in the epilogue)
  kFp8Block,        // e4m3 row with per-128 scales from an array (fp8 x, fp8_block128)
  kBf16ToFp8,       // bf16 row quantized with a static scale (bf16 x, fp8_tensor)
  kBf16ToFp8Block,  // bf16 row quantized per 128 columns, scale amax / 448 (bf16 x, fp8_block128)
  kF32ToFp8Block,   // f32 row quantized per 128 columns (the intermediate, fp8_block128)
};

template <Col C>
struct ColTraits {
  static constexpr int kElemBytes = C == Col::kF32ToFp8Block ? 4 : (C == Col::kFp8 || C == Col::kFp8Block ? 1 : 2);
  static constexpr bool kFp8Out = C != Col::kBf16;  // MMA operands e4m3 (-> f16) or bf16
  static constexpr bool kBlock = C == Col::kFp8Block || C == Col::kBf16ToFp8Block || C == Col::kF32ToFp8Block;
};

// A load group: for each of its 2 steps, a 16-element segment as kLoads 16-byte vectors (elements in order).
template <int kLoads>
struct Raw {
  uint4 v[2][kLoads];
};

// MMA-ready words of one step's segment: e4m3 (word v = elements 4v..4v+3) or 16-bit (word j = 2j, 2j+1).
template <bool kFp8>
struct Frag {
  uint32_t w[kFp8 ? 4 : 8];
};

template <bool kFp8>
__device__ __forceinline__ Frag<kFp8> RawFrag(const Raw<kFp8 ? 1 : 2>& r, int s) {
  Frag<kFp8> f;
#pragma unroll
  for (int i = 0; i < (kFp8 ? 1 : 2); ++i) {
    f.w[4 * i] = r.v[s][i].x, f.w[4 * i + 1] = r.v[s][i].y, f.w[4 * i + 2] = r.v[s][i].z, f.w[4 * i + 3] = r.v[s][i].w;
  }
  return f;
}

// Virtual step v's halves: slots (2q, 2q + 1) and (2q + 8, 2q + 9), packed in the MMA type.
template <bool kFp8>
__device__ __forceinline__ void Halves(const Frag<kFp8>& f, int v, uint32_t& lo, uint32_t& hi) {
  if constexpr (kFp8) {
    lo = E4M3x2ToHalf2(static_cast<uint16_t>(f.w[v]));
    hi = E4M3x2ToHalf2(static_cast<uint16_t>(f.w[v] >> 16));
  } else {
    lo = f.w[2 * v];
    hi = f.w[2 * v + 1];
  }
}

// acc[m16 x n8] += A rows (g: row_lo, g + 8: row_hi) x B column g, over one 64-wide K step.
template <bool kFp8>
__device__ __forceinline__ void MmaStep(float (&acc)[4], const Frag<kFp8>& row_lo, const Frag<kFp8>& row_hi,
                                        const Frag<kFp8>& col) {
  using CT = std::conditional_t<kFp8, __half, __nv_bfloat16>;
#pragma unroll
  for (int v = 0; v < 4; ++v) {
    uint32_t a[4], b0, b1;
    Halves<kFp8>(row_lo, v, a[0], a[2]);
    Halves<kFp8>(row_hi, v, a[1], a[3]);
    Halves<kFp8>(col, v, b0, b1);
    Mma16816<CT>(acc, a, b0, b1);
  }
}

__device__ __forceinline__ uint32_t PackE4M3x4(float a, float b, float c, float d, float mul) {
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a * mul, b * mul), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c * mul, d * mul), __NV_SATFINITE, __NV_E4M3);
  return lo | (hi << 16);
}

// 16 elements of one step as floats (bf16: 2 vectors, f32: 4 vectors).
template <int kLoads>
__device__ __forceinline__ void StepFloats(const Raw<kLoads>& r, int s, float (&x)[16]) {
  if constexpr (kLoads == 2) {
    const uint32_t w[8] = {r.v[s][0].x, r.v[s][0].y, r.v[s][0].z, r.v[s][0].w,
                           r.v[s][1].x, r.v[s][1].y, r.v[s][1].z, r.v[s][1].w};
#pragma unroll
    for (int j = 0; j < 8; ++j) x[2 * j] = __uint_as_float(w[j] << 16), x[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      x[4 * i] = __uint_as_float(r.v[s][i].x), x[4 * i + 1] = __uint_as_float(r.v[s][i].y);
      x[4 * i + 2] = __uint_as_float(r.v[s][i].z), x[4 * i + 3] = __uint_as_float(r.v[s][i].w);
    }
  }
}

// The B operand of a group from its raw loads. Block sources: the column's scale (amax over its 128 elements,
// held by the 4 threads of the column: every lane of the warp must call this) -> xs.
template <Col C>
__device__ __forceinline__ void ColFrags(const Raw<ColTraits<C>::kElemBytes>& r, float mul,
                                         Frag<ColTraits<C>::kFp8Out> (&f)[2], float& xs) {
  if constexpr (C == Col::kBf16 || C == Col::kFp8 || C == Col::kFp8Block) {
    f[0] = RawFrag<ColTraits<C>::kFp8Out>(r, 0);
    f[1] = RawFrag<ColTraits<C>::kFp8Out>(r, 1);
  } else {
    float x[2][16];
    StepFloats(r, 0, x[0]);
    StepFloats(r, 1, x[1]);
    if constexpr (ColTraits<C>::kBlock) {
      float amax = 0.f;
#pragma unroll
      for (int s = 0; s < 2; ++s)
#pragma unroll
        for (int i = 0; i < 16; ++i) amax = fmaxf(amax, fabsf(x[s][i]));
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
      xs = amax / kFp8E4M3Max;  // the reference's scale of this (row, 128-column block)
      mul = QuantMultiplier(xs);
    }
#pragma unroll
    for (int s = 0; s < 2; ++s)
#pragma unroll
      for (int v = 0; v < 4; ++v) f[s].w[v] = PackE4M3x4(x[s][4 * v], x[s][4 * v + 1], x[s][4 * v + 2], x[s][4 * v + 3], mul);
  }
}

// ------------------------------------------------------------------------------------------ the warp engine
// A warp works through a stream of jobs. A job is one m16 x n8 tile: 16 weight rows (rows 0-7 at `lo`, 8-15 at
// `hi`, pitch row_bytes) times up to 8 token columns (this lane's column: `col`, null = none) over the K groups
// [g0, g0 + n). Each ring stage holds one K group of a job: A (16 rows x 128 elements, the chunk index XOR-swizzled
// with the row's parity so an LDS phase hits distinct banks) and B (8 columns x 128 elements), copied by
// cp.async. Copies run kStages - 1 groups ahead across job boundaries (into the next job), so a warp's stream
// never drains between jobs; nothing is held in registers while in flight. (The first versions loaded A
// and/or B into registers a group ahead and restarted the pipeline per job: 1.4-2.8 TB/s, bench/NOTES.md.)
struct Job {
  const uint8_t* lo;
  const uint8_t* hi;
  const uint8_t* col;
  int64_t row_bytes;
  int g0, n;       // K groups
  int e;           // local expert
  int first;       // gate-up: first column of I; down: K split index
  int pair;        // this lane's column's pair (lane 4c holds column c), -1 if none
  float scale;     // gate-up, fp8_tensor: the expert's w13 scale, loaded when the job is formed (a job ahead of its
                   // epilogue, so the epilogue waits on no global load)
};

template <bool kFp8, int kB>
struct Ring {
  static constexpr int kA = kFp8 ? 1 : 2;
  static constexpr int kARowBytes = kGroup * kA;
  static constexpr int kAChunks = kARowBytes / 16;          // per row
  static constexpr int kABytes = 16 * kARowBytes;           // 2 KB | 4 KB
  static constexpr int kBRowBytes = kGroup * kB;            // one column's 128 elements
  static constexpr int kStageBytes = kABytes + 8 * kBRowBytes;
  static constexpr int kACopies = 16 * kAChunks / 32;       // 16-byte copies per lane
  static constexpr int kBCopies = kBRowBytes / 16 / 4;      // a column's chunks over its 4 lanes
  static constexpr int kSwizzle = kFp8 ? 4 : 1;
  __device__ static int AOffset(int row, int chunk) { return row * kARowBytes + ((chunk ^ ((row & 1) * kSwizzle)) << 4); }
  template <int kBudget, int kWarps>  // stages that fit kBudget bytes of rings for kWarps warps (at most 8)
  static constexpr int kStages = kBudget / kWarps / kStageBytes > 8 ? 8 : kBudget / kWarps / kStageBytes;
};

// Warps of a down CTA: 16 where the ring still gives each warp 3 stages (fp8 operands), else 8. The grid is H / 16
// CTAs, one per SM, and a warp's (expert, K split) task is a serial chain of fragment conversions and MMAs (ncu at
// Qwen3 fp8 T=1: 2 warps per scheduler, 0.32 issued per cycle, stall_wait first), so more warps, each with a shorter
// K split (StreamDownSplits), is what shortens the kernel.
template <bool kFp8, int kB>
constexpr int kDownWarps = kDownRingBytes / 16 / Ring<kFp8, kB>::kStageBytes >= 3 ? 16 : 8;

// Runs this warp's jobs: next(job) fills the next one (false: none left), finish(job, acc) takes each finished
// tile. ws_of(job, group): the (rows 0-7, rows 8-15) weight scales of a group, xs_of(job, group): the column's scale
// (Col::kFp8Block), both fp8_block128 only (acc += part * x_scale * w_scale per group, the reference's order).
template <MoeQuant Q, Col C, int kStages, class Next, class Finish, class WScale, class XScale>
__device__ __forceinline__ void RunJobs(uint8_t* ring, int64_t k_total, float col_mul, Next next, Finish finish,
                                        WScale ws_of, XScale xs_of) {
  constexpr bool kFp8 = Q != MoeQuant::kNone;
  constexpr int kB = ColTraits<C>::kElemBytes;
  using R = Ring<kFp8, kB>;
  static_assert(ColTraits<C>::kFp8Out == kFp8, "A and B operand types must match");
  static_assert(kStages >= 2 && kStages <= 8, "ring depth");
  const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  // Lane constants, computed once (ncu: the copy and fragment addresses, recomputed per group, were most of a
  // group's instructions). A copy c of this lane: row a_row + kRowStep * c (rows 0-7 from `lo`, 8-15 from `hi`),
  // chunk a_chunk; kRowStep is even, so every row of the lane has the same swizzle parity and the shared offset
  // advances by a constant.
  constexpr int kRowStep = 32 / R::kAChunks, kHalf = R::kACopies / 2;
  static_assert(kRowStep % 2 == 0 && kRowStep * kHalf == 8, "A copy layout");
  const int a_row = lane / R::kAChunks, a_chunk = lane % R::kAChunks;
  const int a_dst = R::AOffset(a_row, a_chunk), a_k = a_chunk * 16 / R::kA;
  int frag_a[2][R::kA];  // fragment reads: row g's chunk of step s (row g + 8: + 8 rows)
#pragma unroll
  for (int s = 0; s < 2; ++s)
#pragma unroll
    for (int h = 0; h < R::kA; ++h) frag_a[s][h] = R::AOffset(g, kFp8 ? 4 * s + q : 8 * s + 2 * q + h);
  const int frag_b = R::kABytes + g * R::kBRowBytes + 16 * q * kB;
  const int k_end = static_cast<int>(k_total);
  auto copy = [&](const Job& j, int grp, int slot) {
    uint8_t* stage = ring + slot * R::kStageBytes;
    const int k0 = grp * kGroup;
    const bool ok_a = k0 + a_k < k_end;
    const int64_t a_off = static_cast<int64_t>(a_row) * j.row_bytes + grp * R::kARowBytes + a_chunk * 16;
#pragma unroll
    for (int c = 0; c < R::kACopies; ++c) {
      const uint8_t* src = (c < kHalf ? j.lo : j.hi) + a_off + (c % kHalf) * kRowStep * j.row_bytes;
      CpAsync16(stage + a_dst + c * kRowStep * R::kARowBytes, ok_a ? src : j.lo, ok_a);
    }
#pragma unroll
    for (int c = 0; c < R::kBCopies; ++c) {  // column g: chunks q, q + 4, ... of its 128 elements
      const int chunk = q + 4 * c;
      const bool ok = j.col != nullptr && k0 + chunk * 16 / kB < k_end;
      CpAsync16(stage + R::kABytes + g * R::kBRowBytes + chunk * 16,
                ok ? j.col + static_cast<int64_t>(k0) * kB + chunk * 16 : j.lo, ok);
    }
    CpAsyncCommit();
  };
  Job cur, nxt;
  bool have_cur = next(cur);
  bool have_nxt = have_cur && next(nxt);
  int in_flight = 0, issue_slot = 0, use_slot = 0;  // ring slots wrap by compare (kStages is often 3 or 6)
  bool cursor_in_nxt = false;  // copy cursor: group `cursor` of cur (or of nxt)
  int cursor = 0;
  auto try_copy = [&]() {
    while (in_flight < kStages - 1) {
      if (!cursor_in_nxt && cursor >= cur.n) {
        if (!have_nxt) return;
        cursor_in_nxt = true;
        cursor = 0;
      }
      if (cursor_in_nxt && cursor >= nxt.n) return;
      if (cursor_in_nxt) {  // (two calls, not a reference to either: that put both jobs in local memory)
        copy(nxt, nxt.g0 + cursor, issue_slot);
      } else {
        copy(cur, cur.g0 + cursor, issue_slot);
      }
      issue_slot = issue_slot + 1 == kStages ? 0 : issue_slot + 1;
      ++in_flight;
      ++cursor;
    }
  };
  while (have_cur) {
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int i = 0; i < cur.n; ++i) {
      try_copy();
      CpAsyncWaitAtMost(in_flight - 1);
      __syncwarp();  // every lane's copies of this stage have landed
      const uint8_t* stage = ring + use_slot * R::kStageBytes;
      Frag<kFp8> lo[2], hi[2], fb[2];
      Raw<kB> b;
#pragma unroll
      for (int s = 0; s < 2; ++s) {
#pragma unroll
        for (int h = 0; h < R::kA; ++h) {
          const uint4 x = *reinterpret_cast<const uint4*>(stage + frag_a[s][h]);
          const uint4 y = *reinterpret_cast<const uint4*>(stage + frag_a[s][h] + 8 * R::kARowBytes);
          lo[s].w[4 * h] = x.x, lo[s].w[4 * h + 1] = x.y, lo[s].w[4 * h + 2] = x.z, lo[s].w[4 * h + 3] = x.w;
          hi[s].w[4 * h] = y.x, hi[s].w[4 * h + 1] = y.y, hi[s].w[4 * h + 2] = y.z, hi[s].w[4 * h + 3] = y.w;
        }
#pragma unroll
        for (int h = 0; h < kB; ++h) {  // elements [64 s + 16 q, + 16) of column g
          b.v[s][h] = *reinterpret_cast<const uint4*>(stage + frag_b + 64 * s * kB + 16 * h);
        }
      }
      __syncwarp();  // the stage may be refilled
      use_slot = use_slot + 1 == kStages ? 0 : use_slot + 1;
      --in_flight;
      try_copy();
      const int grp = cur.g0 + i;
      float xs = 0.f;
      ColFrags<C>(b, col_mul, fb, xs);
      if constexpr (ColTraits<C>::kBlock) {
        if constexpr (C == Col::kFp8Block) xs = xs_of(cur, grp);
        float part[4] = {0.f, 0.f, 0.f, 0.f};
        MmaStep<kFp8>(part, lo[0], hi[0], fb[0]);
        MmaStep<kFp8>(part, lo[1], hi[1], fb[1]);  // block128: K % 128 == 0
        const float xs0 = __shfl_sync(0xffffffffu, xs, 8 * q), xs1 = __shfl_sync(0xffffffffu, xs, 8 * q + 4);
        const float2 w = ws_of(cur, grp);
        acc[0] = __fadd_rn(acc[0], __fmul_rn(__fmul_rn(part[0], xs0), w.x));
        acc[1] = __fadd_rn(acc[1], __fmul_rn(__fmul_rn(part[1], xs1), w.x));
        acc[2] = __fadd_rn(acc[2], __fmul_rn(__fmul_rn(part[2], xs0), w.y));
        acc[3] = __fadd_rn(acc[3], __fmul_rn(__fmul_rn(part[3], xs1), w.y));
      } else {
        MmaStep<kFp8>(acc, lo[0], hi[0], fb[0]);
        if (static_cast<int64_t>(grp) * kGroup + kStep < k_total) MmaStep<kFp8>(acc, lo[1], hi[1], fb[1]);
      }
    }
    finish(cur, acc);
    if (cursor_in_nxt) {
      cursor_in_nxt = false;  // the cursor moves with nxt -> cur
    } else {
      cursor = 0;
    }
    cur = nxt;
    have_cur = have_nxt;
    have_nxt = have_cur && next(nxt);
  }
  CpAsyncWait<0>();
  __syncwarp();
}

// The two pair numbers this lane's epilogue handles (columns 2q, 2q + 1 of the tile; lanes 8q and 8q + 4 hold them).
__device__ __forceinline__ void EpiloguePairs(const Job& j, int (&pr)[2]) {
  const int q = threadIdx.x % 4;
  pr[0] = __shfl_sync(0xffffffffu, j.pair, 8 * q);
  pr[1] = __shfl_sync(0xffffffffu, j.pair, 8 * q + 4);
}

// ------------------------------------------------------------------------------------------ gate-up kernel
// Jobs: units (hit expert s, 8-column block of I) in s-major order, each in passes of 8 of its tokens. A unit's
// m16 tile is the 8 gate rows and the 8 matching up rows, so silu(gate) * up of column c, token t is
// register-local: acc[0 | 1] = gate of tokens 2q | 2q + 1, acc[2 | 3] = up. up_splits = 1 (many units): units
// w, w + W, ... for global warp w of W, warps independent after the hit list. up_splits = 4 (few units, e.g.
// T = 1): units b, b + B, ... for CTA b of B, each warp a quarter of H, the quarters added in warp order.
template <MoeQuant Q, Col C>
__global__ void __launch_bounds__(kUpThreads) MoeStreamGateUpKernel(const __grid_constant__ StreamParams p) {
  constexpr bool kFp8 = Q != MoeQuant::kNone;
  constexpr int kA = kFp8 ? 1 : 2;
  constexpr int kXBytes = ColTraits<C>::kElemBytes;
  using R = Ring<kFp8, kXBytes>;
  constexpr int kStages = R::template kStages<kUpRingBytes<kFp8>, kUpWarps>;
  extern __shared__ __align__(128) uint8_t rings[];  // [warp][kStages] stages
  __shared__ HitList<kUpThreads> hits;
  __shared__ int ids_local[kStreamMaxPairs];
  __shared__ float4 red[kUpThreads];  // up_splits > 1: the warps' partial tiles
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
  PdlWait();  // topk_ids and x may come from the previous kernel (routing)
  PdlLaunchDependents();  // the down kernel may start: it builds its hit list before its own wait
  const float ts_a = Q == MoeQuant::kFp8Tensor ? *p.a13_scale : 1.f;
  const int n_hit = BuildHitList<kUpThreads>(p, ids_local, hits);
  const int64_t H = p.hidden, I = p.inter_size;
  const int blocks = static_cast<int>(I / 8);
  const int units = n_hit * blocks;
  const bool split = p.up_splits > 1;  // (uniform)
  const int first_unit = split ? blockIdx.x : blockIdx.x * kUpWarps + warp;
  const int unit_stride = split ? gridDim.x : gridDim.x * kUpWarps;
  const int groups = static_cast<int>((H + kGroup - 1) / kGroup);
  const int g0 = split ? warp * groups / kUpWarps : 0, g1 = split ? (warp + 1) * groups / kUpWarps : groups;
  const int kblocks = static_cast<int>(H / kMoeBlock);
  const int64_t nblocks = 2 * I / kMoeBlock;
  const uint8_t* x = static_cast<const uint8_t*>(p.x);
  int u = first_unit, base = 0;  // job generator state: unit, first token of the pass
  auto next = [&](Job& j) {
    while (u < units) {
      const int e = hits.hit[u / blocks];
      int pair;
      const int n_e = PairOf(ids_local, p.pairs, e, base + g, &pair);
      if (base < n_e) {
        j.e = e;
        j.first = (u % blocks) * 8;
        // 8 columns never straddle a 64-block: gate and up are two 8-row runs in either layout
        j.lo = p.w13 + (static_cast<int64_t>(e) * 2 * I + W13GateRow(j.first, p.w13_interleaved)) * H * kA;
        j.hi = j.lo + W13UpDelta(I, p.w13_interleaved) * H * kA;
        j.row_bytes = H * kA;
        j.g0 = g0;
        j.n = g1 - g0;  // may be 0 (H of one group split 4 ways): the job still joins the CTA's barriers
        j.pair = pair;
        j.col = pair >= 0 ? x + static_cast<int64_t>(pair / p.top_k) * H * kXBytes : nullptr;
        j.scale = Q == MoeQuant::kFp8Tensor ? p.w13_scale[e] : 1.f;
        base += 8;
        if (base >= n_e) u += unit_stride, base = 0;
        return true;
      }
      u += unit_stride;
      base = 0;
    }
    return false;
  };
  const float out_mul = Q == MoeQuant::kFp8Tensor ? QuantMultiplier(*p.a2_scale) : 1.f;
  auto epilogue = [&](const Job& j, const float (&acc)[4]) {
    int pr[2];
    EpiloguePairs(j, pr);
    const float ts = Q == MoeQuant::kFp8Tensor ? __fmul_rn(ts_a, j.scale) : 1.f;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (pr[i] < 0) continue;
      float gv = acc[i], uv = acc[2 + i];
      if constexpr (Q == MoeQuant::kFp8Tensor) gv = __fmul_rn(gv, ts), uv = __fmul_rn(uv, ts);
      const float h = __fmul_rn(Silu(gv), uv);
      const int64_t off = static_cast<int64_t>(pr[i]) * I + j.first + g;
      if constexpr (Q == MoeQuant::kFp8Tensor) {
        static_cast<__nv_fp8_storage_t*>(p.inter)[off] = __nv_cvt_float_to_fp8(h * out_mul, __NV_SATFINITE, __NV_E4M3);
      } else if constexpr (Q == MoeQuant::kNone) {
        static_cast<__nv_bfloat16*>(p.inter)[off] = __float2bfloat16_rn(h);
      } else {
        static_cast<float*>(p.inter)[off] = h;  // quantized per 128 columns by the down kernel
      }
    }
  };
  auto finish = [&](const Job& j, const float (&acc)[4]) {
    if (!split) return epilogue(j, acc);
    red[threadIdx.x] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    __syncthreads();
    if (warp == 0) {  // the quarters of H in warp order
      float sum[4] = {acc[0], acc[1], acc[2], acc[3]};
#pragma unroll
      for (int w = 1; w < kUpWarps; ++w) {
        const float4 o = red[w * 32 + lane];
        sum[0] = __fadd_rn(sum[0], o.x), sum[1] = __fadd_rn(sum[1], o.y);
        sum[2] = __fadd_rn(sum[2], o.z), sum[3] = __fadd_rn(sum[3], o.w);
      }
      epilogue(j, sum);
    }
    __syncthreads();  // red is reused by the next job
  };
  RunJobs<Q, C, kStages>(
      rings + warp * kStages * R::kStageBytes, H, C == Col::kBf16ToFp8 ? QuantMultiplier(ts_a) : 1.f,
      next, finish,
      [&](const Job& j, int grp) {
        if constexpr (Q == MoeQuant::kFp8Block128) {
          return make_float2(p.w13_scale[(j.e * nblocks + j.first / kMoeBlock) * kblocks + grp],
                             p.w13_scale[(j.e * nblocks + (I + j.first) / kMoeBlock) * kblocks + grp]);
        } else {
          return make_float2(1.f, 1.f);
        }
      },
      [&](const Job& j, int grp) { return j.pair >= 0 ? p.x_scale[(j.pair / p.top_k) * kblocks + grp] : 0.f; });
}

// --------------------------------------------------------------------------------------------- down kernel
// CTA = 16 columns of H for every token. Warp w takes tasks (hit expert s, K split) w, w + kWarps, ..., each in
// passes of 8 of the expert's pairs; the per-pair partials stay in shared memory; then the CTA finishes its columns:
// the weighted top-k sum in j order (bitwise deterministic), + shared_output, bf16 out.
template <MoeQuant Q, Col C, int kWarps, int kRingBytes>
__global__ void __launch_bounds__(32 * kWarps) MoeStreamDownKernel(const __grid_constant__ StreamParams p) {
  constexpr bool kFp8 = Q != MoeQuant::kNone;
  constexpr int kA = kFp8 ? 1 : 2;
  constexpr int kB = ColTraits<C>::kElemBytes;
  constexpr int kThreads = 32 * kWarps;
  constexpr int kStages = Ring<kFp8, kB>::template kStages<kRingBytes, kWarps>;
  __shared__ HitList<kThreads> hits;
  __shared__ int ids_local[kStreamMaxPairs];
  __shared__ float pair_w[kStreamMaxPairs], pair_ts[kStreamMaxPairs];  // top-k weight, fp8 dequant scale
  extern __shared__ __align__(128) uint8_t dyn[];  // [warp][kStages] stages, then [splits][P][16] f32 partials
  float* red = reinterpret_cast<float*>(dyn + kWarps * kStages * Ring<kFp8, kB>::kStageBytes);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
  const int64_t H = p.hidden, I = p.inter_size;
  const int h0 = blockIdx.x * kDownRows;
  const int splits = p.down_splits, P = p.pairs;
  // Before the PDL wait: only inputs of the op (topk_ids), complete once the gate-up kernel has started us.
  const int n_hit = BuildHitList<kThreads>(p, ids_local, hits);
  // The final sum's per-pair factors, loaded now (inputs of the op too): in the sum itself they were a chain of
  // dependent global loads, one per top-k slot (ncu's top stall site at T=1).
  for (int i = threadIdx.x; i < P; i += kThreads) {
    const int e = ids_local[i];
    pair_w[i] = p.weights[i];
    pair_ts[i] = Q == MoeQuant::kFp8Tensor && e >= 0 ? __fmul_rn(*p.a2_scale, p.w2_scale[e]) : 1.f;
  }
  const int tasks = n_hit * splits;
  PdlWait();  // the intermediate comes from the gate-up kernel
  PdlLaunchDependents();
  const int groups = static_cast<int>((I + kGroup - 1) / kGroup);
  const int kblocks = static_cast<int>(I / kMoeBlock);
  const int64_t hblocks = H / kMoeBlock;
  const uint8_t* inter = static_cast<const uint8_t*>(p.inter);
  int task = warp, base = 0;
  auto next = [&](Job& j) {
    while (task < tasks) {
      const int e = hits.hit[task / splits], split = task % splits;
      int pair;
      const int n_e = PairOf(ids_local, P, e, base + g, &pair);
      if (base < n_e) {
        j.e = e;
        j.first = split;
        j.lo = p.w2 + (static_cast<int64_t>(e) * H + h0) * I * kA;
        j.hi = j.lo + 8 * I * kA;
        j.row_bytes = I * kA;
        j.g0 = split * groups / splits;
        j.n = (split + 1) * groups / splits - j.g0;
        j.pair = pair;
        j.col = pair >= 0 ? inter + static_cast<int64_t>(pair) * I * kB : nullptr;
        base += 8;
        if (base >= n_e) task += kWarps, base = 0;
        if (j.n > 0) return true;
        continue;
      }
      task += kWarps;
      base = 0;
    }
    return false;
  };
  auto finish = [&](const Job& j, const float (&acc)[4]) {  // D[h0 + g (+ 8)][columns 2q, 2q + 1]
    int pr[2];
    EpiloguePairs(j, pr);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (pr[i] < 0) continue;
      float* row = red + (static_cast<int64_t>(j.first) * P + pr[i]) * kDownRows;
      row[g] = acc[i];
      row[g + 8] = acc[2 + i];
    }
  };
  RunJobs<Q, C, kStages>(
      dyn + warp * kStages * Ring<kFp8, kB>::kStageBytes, I, 1.f, next, finish,
      [&](const Job& j, int grp) {
        const float w = Q == MoeQuant::kFp8Block128 ? p.w2_scale[(j.e * hblocks + h0 / kMoeBlock) * kblocks + grp] : 1.f;
        return make_float2(w, w);
      },
      [](const Job&, int) { return 0.f; });
  __syncthreads();
  // y[t, h0 + c (+1)] = sum_j (j order) w[t, j] * down[t*k + j] (+ shared): the reduce of the other paths.
  // In two passes -- each (pair, column pair) adds its splits, scales and weights them into split 0's row, then each
  // (token, column pair) adds its top_k slots: the same operations in the same order as one pass (bitwise equal),
  // but a thread's serial chain is splits + top_k shared-memory reads, not splits * top_k (experiments 42/43, H200,
  // Qwen3 fp8 T=1: this phase 1.5 -> 0.7 us; s40b: the layer 19.0-19.1 -> 18.3 us, Hy3-TP8 14.9-15.0 -> 14.4).
  for (int it = threadIdx.x; it < P * (kDownRows / 2); it += kThreads) {
    const int pair = it / (kDownRows / 2);
    const int c = 2 * (it % (kDownRows / 2));
    if (ids_local[pair] < 0) continue;  // another rank's expert: contributes 0 (skipped below)
    float* part = red + static_cast<int64_t>(pair) * kDownRows + c;
    float v0 = part[0], v1 = part[1];
    for (int s = 1; s < splits; ++s) {
      v0 = __fadd_rn(v0, part[static_cast<int64_t>(s) * P * kDownRows]);
      v1 = __fadd_rn(v1, part[static_cast<int64_t>(s) * P * kDownRows + 1]);
    }
    if constexpr (Q == MoeQuant::kFp8Tensor) {
      const float ts = pair_ts[pair];
      v0 = __fmul_rn(v0, ts), v1 = __fmul_rn(v1, ts);
    }
    const float w = pair_w[pair];
    part[0] = __fmul_rn(w, v0), part[1] = __fmul_rn(w, v1);
  }
  __syncthreads();
  for (int it = threadIdx.x; it < p.tokens * (kDownRows / 2); it += kThreads) {
    const int64_t t = it / (kDownRows / 2);
    const int c = 2 * (it % (kDownRows / 2));
    const int64_t off = t * H + h0 + c;
    const __nv_bfloat162 sh = p.shared != nullptr ? *reinterpret_cast<const __nv_bfloat162*>(p.shared + off)
                                                  : __nv_bfloat162();
    float y0 = 0.f, y1 = 0.f;
    for (int j = 0; j < p.top_k; ++j) {
      const int pair = static_cast<int>(t) * p.top_k + j;
      if (ids_local[pair] < 0) continue;
      const float* part = red + static_cast<int64_t>(pair) * kDownRows + c;
      y0 = __fadd_rn(y0, part[0]);
      y1 = __fadd_rn(y1, part[1]);
    }
    if (p.shared != nullptr) {
      y0 = __fadd_rn(y0, __low2float(sh));
      y1 = __fadd_rn(y1, __high2float(sh));
    }
    *reinterpret_cast<__nv_bfloat162*>(p.out + off) = __floats2bfloat162_rn(y0, y1);
  }
}

// ------------------------------------------------------------------------------------------------ launch
// The gate-up kernel: a warp-persistent grid of one wave, and no more warps than the most units any routing can give.
template <MoeQuant Q, Col C>
Status LaunchGateUp(StreamParams p, int device, cudaStream_t stream) {
  using R = Ring<Q != MoeQuant::kNone, ColTraits<C>::kElemBytes>;
  auto* up = &MoeStreamGateUpKernel<Q, C>;
  constexpr int smem = kUpWarps * R::template kStages<kUpRingBytes<Q != MoeQuant::kNone>, kUpWarps> * R::kStageBytes;
  HPC_RETURN_IF_ERROR(AllowSmem(reinterpret_cast<const void*>(up), smem));
  int per_sm = 0;
  HPC_RETURN_IF_ERROR(ResidentCtasPerSm(reinterpret_cast<const void*>(up), kUpThreads, smem,
                                        "fused_moe: stream gate-up occupancy", &per_sm));
  // Few units (the routing's upper bound min(P, E) x I/8 under 4 per resident warp, e.g. T = 1, or EP where most
  // pairs are remote): the CTA's warps split H of each unit, so every resident warp streams. A function of the
  // shapes only, so no token's result depends on the other tokens.
  const int64_t resident = static_cast<int64_t>(per_sm) * MultiprocessorCount(device);
  const int64_t max_units = static_cast<int64_t>(std::min(p.pairs, p.experts)) * (p.inter_size / 8);
  p.up_splits = max_units < 4 * resident * kUpWarps ? kUpWarps : 1;
  const int64_t unit_ctas = p.up_splits > 1 ? max_units : (max_units + kUpWarps - 1) / kUpWarps;
  const int up_grid = static_cast<int>(std::min(unit_ctas, resident));
  return Launch("fused_moe stream gate-up launch", up, dim3(up_grid), dim3(kUpThreads), smem, stream, p);
}

// The down kernel: CTA = 16 columns of H (one m16 tile), kWarps warps over kRingBytes of rings.
template <MoeQuant Q, Col C, int kWarps, int kRingBytes, bool kSplitsByHits>
Status LaunchDown(StreamParams p, cudaStream_t stream) {
  using R = Ring<Q != MoeQuant::kNone, ColTraits<C>::kElemBytes>;
  constexpr int kRings = kWarps * R::template kStages<kRingBytes, kWarps> * R::kStageBytes;
  auto* down = &MoeStreamDownKernel<Q, C, kWarps, kRingBytes>;
  HPC_RETURN_IF_ERROR(AllowSmem(reinterpret_cast<const void*>(down), kRings + kDownRedBytes));
  p.down_splits = StreamDownSplits(p.pairs, p.experts, p.inter_size, kWarps, kSplitsByHits);
  const int red_bytes = p.down_splits * p.pairs * kDownRows * 4;
  return Launch("fused_moe stream down launch", down, dim3(static_cast<unsigned>(p.hidden / kDownRows)),
                dim3(32 * kWarps), kRings + red_bytes, stream, p);
}

// fp8_tensor: the gate-up stage on wgmma (stream_gate_up_wgmma.cu) where it measured faster (session 14, H200,
// bench moe, us, mma.sync -> wgmma): single-token decode whose wgmma grid fits one wave -- Qwen3-30B 21.2 -> 18.7,
// Hy3-TP8 16.9 -> 15.1. In isolation (ncu) both kernels take the same time (Qwen3 T=1: 14.9 / 15.3 us, ~2.1 TB/s);
// the layer gains, our reading, because its one-shot CTAs finish and free their SMs progressively, so down CTAs
// become resident and build their hit lists (before their PDL wait) during the gate-up tail. Where the grid needs
// more waves, or T >= 2, it lost: Hy3-EP8 T=1 (4 waves, mostly idle slots) 18.1 -> 19.7, T=2 Hy3-TP8 20.4 -> 21.7,
// T=4 Qwen3 52.8 -> 54.7.
// HPC_XLA_MOE_UP_WGMMA=1 forces it wherever the shape fits, =0 never (A/B).
bool UseWgmmaGateUp(const StreamParams& p, int device) {
  static const int knob = EnvInt("HPC_XLA_MOE_UP_WGMMA", -1);
  if (knob == 0 || !StreamGateUpWgmmaFits(p.tokens, p.top_k, p.hidden, p.inter_size)) return false;
  if (knob > 0) return true;
  return p.tokens == 1 && StreamGateUpWgmmaCtas(p.tokens, p.top_k, p.hidden, p.inter_size) <=
                              static_cast<int64_t>(kStreamGateUpWgmmaCtasPerSm) * MultiprocessorCount(device);
}

template <Col C>
Status LaunchWgmmaGateUp(const StreamParams& p, cudaStream_t stream) {
  static_assert(C == Col::kFp8 || C == Col::kBf16ToFp8, "fp8_tensor columns");
  WgmmaGateUpArgs a = {};
  a.x = p.x;
  a.x_fp8 = C == Col::kFp8;
  a.w13 = p.w13;
  a.w13_interleaved = p.w13_interleaved;
  a.w13_scale = p.w13_scale;
  a.a13_scale = p.a13_scale;
  a.a2_scale = p.a2_scale;
  a.ids = p.ids;
  a.inter = static_cast<uint8_t*>(p.inter);
  a.tokens = p.tokens, a.top_k = p.top_k, a.experts = p.experts, a.expert_offset = p.expert_offset;
  a.hidden = p.hidden, a.inter_size = p.inter_size;
  return LaunchStreamGateUpWgmma(a, stream);
}

template <MoeQuant Q, Col CUp, Col CDown>
Status LaunchStream(const StreamParams& p, int device, cudaStream_t stream) {
  constexpr bool kFp8 = Q != MoeQuant::kNone;
  if constexpr (Q == MoeQuant::kFp8Tensor) {
    if (UseWgmmaGateUp(p, device)) {
      HPC_RETURN_IF_ERROR(LaunchWgmmaGateUp<CUp>(p, stream));
    } else {
      HPC_RETURN_IF_ERROR((LaunchGateUp<Q, CUp>(p, device, stream)));
    }
  } else {
    HPC_RETURN_IF_ERROR((LaunchGateUp<Q, CUp>(p, device, stream)));
  }
  if constexpr (CDown == Col::kFp8) {
    if (p.hidden / kDownRows > MultiprocessorCount(device)) {
      return LaunchDown<Q, CDown, kDownNarrowWarps, kDownNarrowRingBytes, false>(p, stream);
    }
  }
  return LaunchDown<Q, CDown, kDownWarps<kFp8, ColTraits<CDown>::kElemBytes>, kDownRingBytes, true>(p, stream);
}

}  // namespace

Status RunStreamMoe(const FusedMoeArgs& a, const MoePlan& plan, cudaStream_t stream) {
  StreamParams sp = {};
  sp.x = a.x.data;
  sp.x_scale = a.x_scale.present() ? a.x_scale.ptr<const float>() : nullptr;
  sp.w13 = static_cast<const uint8_t*>(a.w13.data);
  sp.w13_interleaved = a.w13_interleaved;
  sp.w13_scale = a.w13_scale.present() ? a.w13_scale.ptr<const float>() : nullptr;
  sp.w2 = static_cast<const uint8_t*>(a.w2.data);
  sp.w2_scale = a.w2_scale.present() ? a.w2_scale.ptr<const float>() : nullptr;
  sp.a13_scale = a.a13_scale.present() ? a.a13_scale.ptr<const float>() : nullptr;
  sp.a2_scale = a.a2_scale.present() ? a.a2_scale.ptr<const float>() : nullptr;
  sp.weights = a.topk_weights.ptr<const float>();
  sp.ids = a.topk_ids.ptr<const int32_t>();
  sp.shared = a.shared_output.present() ? a.shared_output.ptr<const __nv_bfloat16>() : nullptr;
  sp.out = a.out.ptr<__nv_bfloat16>();
  sp.inter = a.workspace.ptr<uint8_t>() + plan.inter;
  sp.tokens = static_cast<int>(a.x.shape[0]);
  sp.top_k = static_cast<int>(a.topk_ids.shape[1]);
  sp.pairs = static_cast<int>(plan.pairs);
  sp.experts = static_cast<int>(a.w13.shape[0]);
  sp.expert_offset = static_cast<int>(a.expert_offset);
  sp.hidden = static_cast<int>(a.x.shape[1]);
  sp.inter_size = static_cast<int>(a.w13.shape[1] / 2);
  const bool x_fp8 = a.x.dtype == DType::kF8E4M3;
  const int dev = a.x.device_id;
  switch (a.quant) {
    case MoeQuant::kNone:
      return LaunchStream<MoeQuant::kNone, Col::kBf16, Col::kBf16>(sp, dev, stream);
    case MoeQuant::kFp8Tensor:
      return x_fp8 ? LaunchStream<MoeQuant::kFp8Tensor, Col::kFp8, Col::kFp8>(sp, dev, stream)
                   : LaunchStream<MoeQuant::kFp8Tensor, Col::kBf16ToFp8, Col::kFp8>(sp, dev, stream);
    default:
      return x_fp8 ? LaunchStream<MoeQuant::kFp8Block128, Col::kFp8Block, Col::kF32ToFp8Block>(sp, dev, stream)
                   : LaunchStream<MoeQuant::kFp8Block128, Col::kBf16ToFp8Block, Col::kF32ToFp8Block>(sp, dev, stream);
  }
}

}  // namespace hpc::moe
