// Host side of decode attention on sm_90a: picks the kernel instantiation for (head_dim, row tiles, K/V type),
// sizes the persistent grid with the occupancy API, builds the plan on the GPU, and launches attention +
// combine (PDL-chained).
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "csrc/attention/decode.h"
#include "csrc/attention/decode_kernel.cuh"
#include "csrc/common/arch.h"
#include "csrc/common/check.h"
#include "csrc/common/device_check.h"
#include "csrc/common/occupancy.h"

namespace hpc {
namespace {

using attention::DecodeParams;
using attention::Fp8E4M3;

struct KernelChoice {
  const void* fn = nullptr;
  int smem = 0;
};

template <int D, int MT, typename KV, typename CT>
KernelChoice Choice() {
  return {reinterpret_cast<const void*>(&attention::DecodeAttentionKernel<D, MT, KV, CT>),
          attention::DecodeShape<D, MT, KV, CT>::kSmemBytes};
}

template <int D, int MT>
KernelChoice ChooseType(DType kv, DType q) {
  if (kv == DType::kF8E4M3) return Choice<D, MT, Fp8E4M3, __half>();
  if (kv == DType::kF16) return Choice<D, MT, __half, __half>();
  (void)q;
  return Choice<D, MT, __nv_bfloat16, __nv_bfloat16>();
}

template <int D>
KernelChoice ChooseRows(int rows, DType kv, DType q) {
  if (rows <= 8) return ChooseType<D, 0>(kv, q);  // half an m16 tile live (GQA <= 8 at q_len 1)
  if (rows <= 16) return ChooseType<D, 1>(kv, q);
  if (rows <= 32) return ChooseType<D, 2>(kv, q);
  return ChooseType<D, 4>(kv, q);
}

KernelChoice ChooseKernel(const DecodeConfig& cfg) {
  const int rows = cfg.q_len * (cfg.num_q_heads / cfg.num_kv_heads);
  switch (cfg.head_dim) {
    case 64: return ChooseRows<64>(rows, cfg.kv_dtype, cfg.q_dtype);
    case 128: return ChooseRows<128>(rows, cfg.kv_dtype, cfg.q_dtype);
    default: return ChooseRows<256>(rows, cfg.kv_dtype, cfg.q_dtype);
  }
}

// Raises the kernel's dynamic shared-memory limit once (not on the hot path) and returns resident CTAs/SM.
Status PrepareKernel(const KernelChoice& k, int* ctas_per_sm) {
  HPC_RETURN_IF_ERROR(AllowDynamicSmem(k.fn, k.smem, "decode_attention: shared memory attribute"));
  return ResidentCtasPerSm(k.fn, attention::kDecodeThreads, k.smem, "decode_attention: occupancy", ctas_per_sm);
}

// x summed over this lane and the lanes below it (an int2: both halves, their shuffles side by side).
__device__ __forceinline__ int WarpInclusiveSum(int x) {
  const int lane = static_cast<int>(threadIdx.x % 32);
#pragma unroll
  for (int o = 1; o < 32; o *= 2) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  return x;
}
__device__ __forceinline__ int2 WarpInclusiveSum(int2 v) { return make_int2(WarpInclusiveSum(v.x), WarpInclusiveSum(v.y)); }
__device__ __forceinline__ int Plus(int a, int b) { return a + b; }
__device__ __forceinline__ int2 Plus(int2 a, int2 b) { return make_int2(a.x + b.x, a.y + b.y); }
__device__ __forceinline__ int Minus(int a, int b) { return a - b; }
__device__ __forceinline__ int2 Minus(int2 a, int2 b) { return make_int2(a.x - b.x, a.y - b.y); }
__device__ __forceinline__ int ShflFrom(int v, int lane) { return __shfl_sync(0xffffffffu, v, lane); }
__device__ __forceinline__ int2 ShflFrom(int2 v, int lane) { return make_int2(ShflFrom(v.x, lane), ShflFrom(v.y, lane)); }

// The exclusive prefix sum of weight(b) (an int, or an int2 for two sums at once) over b < batch, in chunks of the
// block's width (a multiple of 32): emit(b, sum before b) for each b. Returns the total to every thread, every emit
// done (the trailing barrier). `totals` holds the warps' sums, a buffer per chunk parity so that one barrier a chunk
// suffices. Written here rather than taken from cub::BlockScan because cub's block scans are sized at compile time
// (1024 threads) and the plan's block is sized to its work (ChoosingPlanThreads, PlainPlanThreads), and for latency:
// the plan kernel is instruction-bound (session 48, ncu on an H100), and here each warp scans the warp sums with
// shuffles where cub's warp-scans variant had every thread read and add all 32. Session 50 (H100, experiment 66p): the
// plain plan 2.3-2.6 us, was 2.9-3.3.
template <class V, class Weight, class Emit>
__device__ V BlockExclusiveSum(V (&totals)[2][32], int batch, Weight weight, Emit emit) {
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int warps = static_cast<int>(blockDim.x / 32);
  V running{};
  for (int base = 0, buf = 0; base < batch; base += static_cast<int>(blockDim.x), buf ^= 1) {
    const int b = base + static_cast<int>(threadIdx.x);
    const V w = b < batch ? weight(b) : V{};
    const V x = WarpInclusiveSum(w);
    if (lane == 31) totals[buf][warp] = x;
    __syncthreads();
    const V t = lane < warps ? totals[buf][lane] : V{};
    const V tx = WarpInclusiveSum(t);
    const V before = ShflFrom(Minus(tx, t), warp);
    if (b < batch) emit(b, Plus(Plus(running, before), Minus(x, w)));
    running = Plus(running, ShflFrom(tx, 31));
  }
  __syncthreads();
  return running;
}

// An aligned candidate's CTAs for one sequence, ceil(tiles / q), without the integer division's ~20 instructions (the
// plan is issue-bound: experiment 70), for q < kRcpLimit (the caller's warp-uniform check): with rq = 1 / q rounded
// once per candidate, n = tiles + q - 1 < 2^23 is exact in a float and n x rq is within 1 of n / q (q = 1: exact), so
// one correction step gives the exact quotient (bench/calls/rcp_division_check.py emulates it in IEEE float32: 46.7M
// cases, 0 wrong). Larger tiles (never in a Hopper grid's plans) divide as before. Experiment 72: with 71, 128
// random's two rounds -0.5 us of plan (s53a, H100).
constexpr int kRcpLimit = 1 << 22;
__device__ __forceinline__ int64_t AlignedCtasRcp(int tiles, int q, float rq) {
  if (tiles >= kRcpLimit) return attention::AlignedCtas(tiles, q);  // (tiles >= 0: a prefix difference; 0 gives 0)
  const int qi = q, n = tiles + qi - 1;
  int est = __float2int_rz(__int2float_rn(n) * rq);
  const int r = n - est * qi;
  est += (r >= qi) - (r < 0);
  return est;
}
__device__ __forceinline__ int64_t WarpMax(int64_t v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    const int64_t other = __shfl_xor_sync(0xffffffffu, v, o);
    v = other > v ? other : v;
  }
  return v;
}

constexpr int kPlanSmemPrefix = attention::kPlanChoiceMaxBatch;  // smaller batches search a shared-memory prefix
constexpr int kPlanThreads = 1024;  // the plan kernel's largest block

// The choosing plan's block: a thread per CTA start of each layout, the two layouts' searches in the block's halves
// (each half whole warps), where they fit; else the full block, each thread searching several starts. Not 1024
// threads for every grid (experiment 68d): warps without a start still ran every scan step and barrier, and the
// plan is instruction-bound (session 48, ncu; session 51's phase timing: ~4k cycles for the first scan alone).
int ChoosingPlanThreads(int max_ctas) {
  const int halves = (2 * (max_ctas + 1) + 63) / 64 * 64;  // (>= 64: max_ctas >= 1, validated)
  return std::min(halves, kPlanThreads);
}

// The plain plan's block: a thread per sequence of a chunk and per CTA start, in whole warps. Warps past both have
// nothing to do but still run every scan step and barrier, and the plan is instruction-bound (session 48, ncu).
int PlainPlanThreads(int batch, int max_ctas) {
  const int needed = std::max(std::max(batch, max_ctas + 1), 32);
  return std::min((needed + 31) / 32 * 32, kPlanThreads);
}

// alt_cost > 0 (and model_tenths > 0): lay the batch out with piece_cost and with alt_cost and keep the one whose
// modeled makespan is smaller (decode_plan.h, CostLayout), as BuildPlanHost does.
// aligned_mode (DecodeAlignedMode) > 0: the aligned layout is a third candidate (decode_plan.h).
// early_trigger (HPC_XLA_DECODE_PLAN_TRIGGER=1): the attention kernel is let in right after PdlWait (59b) rather
// than after the first scan (the default: session 48 measured it 1.4-4.6 us faster per step at q_len 2 on an H100).
//
// Why it is written this way (session 47: the plan measured 3.8-3.9 us at q_len 1 and 7.8-10.1 at q_len 2 on an H100,
// 2.7-2.9 before the choice; the attention grid waits for all of it): the sums are int32 (the cost prefix, the aligned
// CTAs; the tile and unit prefixes travel together as an int2), by shuffles in a block sized to the work (experiments
// 66p and 68d); each layout's total, capacity and CTA count are computed once (CostLayout) and its divisions are 32-bit
// (DivNonNeg); the two layouts' CTA starts and modeled times run side by side in the block's two halves. Session 48
// (H100): 3.0-3.3 us at q_len 1, 6.4-8.0 at q_len 2; session 50 (the plain path's BlockExclusiveSum in a block sized to
// its work): 2.3-2.6 at q_len 1; session 51 (68d: the choosing block sized too, cub's scans gone; 68p: two kernels):
// 2.1-2.5 at q_len 1, 5.0-7.4 at q_len 2 (s51a's phase timing had every choosing phase in 32 warps, ~9-17 of them with
// work); session 52 (69: the aligned candidates in rounds that stop at the first fit): q_len 2 plan -0.2..-0.6 on the
// six batches that fit in round 1. Two kernels, kChoose = PlanChooses (the launcher picks one and sizes its block to
// match): each holds only its own path's code (experiment 68p; ptxas needs the minimum of 1 block in
// __launch_bounds__, or it gives the choosing kernel 32 registers and spills).
template <bool kChoose>
__global__ void __launch_bounds__(kPlanThreads, 1) DecodePlanKernel(const int32_t* seq_lens, int batch, DecodeConfig cfg,
                                                          int max_ctas, int min_tiles, int piece_cost, int alt_cost,
                                                          int model_tenths, int aligned_mode, int early_trigger,
                                                          int32_t* plan) {
  using namespace attention;
  __shared__ int sum_totals[2][32];    // BlockExclusiveSum's warp sums: the cost prefix, the aligned CTAs
  __shared__ int2 sum_totals2[2][32];  // and the tile and unit prefixes together while choosing
  __shared__ unsigned long long makespan[2];
  __shared__ unsigned long long aligned_q;  // the aligned layout's chunk; ~0: none fits
  // The CTA starts below binary-search the prefix: from shared memory when it fits (a search through global
  // memory is a chain of dependent L2 round trips, and the attention kernel waits for this whole kernel). While
  // a piece cost is chosen, prefix_smem holds the tile prefix, units_smem the prefix of units with work (< 2^15:
  // batch < kPlanChoiceMaxBatch) and starts_smem both layouts' CTA starts (unit, tile).
  __shared__ int32_t prefix_smem[kPlanSmemPrefix];
  __shared__ int16_t units_smem[kPlanSmemPrefix];
  __shared__ int32_t starts_smem[2][kPlanChoiceMaxCtas + 1][2];
  PdlWait();
  // The attention kernel may be scheduled now (it waits for this whole kernel in its PdlWait)
  if (early_trigger) PdlLaunchDependents();
  int32_t* prefix = PlanPrefix(plan);
  const bool in_smem = batch < kPlanSmemPrefix;
  int32_t head_total;  // per head: tiles while choosing, else cost
  if constexpr (kChoose) {
    // the tile prefix (x) and the prefix of units with work (y) in one pass
    const int2 totals = BlockExclusiveSum(
        sum_totals2, batch,
        [&](int b) {
          const int n = TilesOf(max(seq_lens[b], 0));
          return make_int2(n, n > 0 ? 1 : 0);
        },
        [&](int b, int2 at) {
          prefix_smem[b] = at.x;
          units_smem[b] = static_cast<int16_t>(at.y);
        });
    head_total = totals.x;
    if (threadIdx.x == 0) {
      prefix_smem[batch] = totals.x;
      units_smem[batch] = static_cast<int16_t>(totals.y);
    }
  } else {
    head_total = BlockExclusiveSum(
        sum_totals, batch, [&](int b) { return UnitCost(max(seq_lens[b], 0), piece_cost); },
        [&](int b, int at) {
          prefix[b] = at;
          if (in_smem) prefix_smem[b] = at;
        });
    if (threadIdx.x == 0) {
      prefix[batch] = head_total;
      if (in_smem) prefix_smem[batch] = head_total;
    }
  }
  if (threadIdx.x == 0) {
    makespan[0] = makespan[1] = 0;
    aligned_q = ~0ull;
  }
  __syncthreads();
  if (!early_trigger) PdlLaunchDependents();
  int32_t* start = PlanStart(plan, batch);
  bool aligned = false;  // the layout chosen: the aligned one, or one of a piece cost
  int32_t head_cost = 0;
  int64_t capacity = 1;
  int num_ctas = 0;
  if constexpr (kChoose) {
    const auto tiles = [&](int b) -> int64_t { return prefix_smem[b]; };
    const auto units = [&](int b) -> int64_t { return units_smem[b]; };
    using Layout = CostLayout<decltype(tiles), decltype(units)>;
    const auto layout_of = [&](int k) {
      return Layout{tiles, units, batch, cfg.num_kv_heads, k == 0 ? piece_cost : alt_cost, max_ctas, min_tiles};
    };
    // Every CTA start of both layouts, one search each, then each CTA's modeled time (it reads starts i and i + 1).
    // Where both layouts' starts fit the block's halves (max_ctas < 512: every Hopper grid of the 16-row kernels),
    // half k takes layout k, so the two searches run side by side instead of one after the other.
    const int half = static_cast<int>(blockDim.x) / 2;
    if (max_ctas < half) {
      const int k = static_cast<int>(threadIdx.x) / half, i = static_cast<int>(threadIdx.x) % half;
      const Layout layout = layout_of(k);
      if (i <= max_ctas) layout.Start(i, &starts_smem[k][i][0], &starts_smem[k][i][1]);
      __syncthreads();
      const int64_t t = i < layout.NumCtas() ? layout.ModeledTenths(starts_smem[k][i][0], starts_smem[k][i][1],
                                                                     starts_smem[k][i + 1][0], starts_smem[k][i + 1][1],
                                                                     model_tenths)
                                             : 0;
      const int64_t most = WarpMax(t);  // (a warp lies in one half: half is a multiple of 32)
      if (threadIdx.x % 32 == 0) atomicMax(&makespan[k], static_cast<unsigned long long>(most));
    } else {
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const Layout layout = layout_of(k);
        for (int i = threadIdx.x; i <= max_ctas; i += blockDim.x) layout.Start(i, &starts_smem[k][i][0], &starts_smem[k][i][1]);
      }
      __syncthreads();
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const Layout layout = layout_of(k);
        int64_t most = 0;
        for (int i = threadIdx.x; i < layout.NumCtas(); i += blockDim.x) {
          const int64_t t = layout.ModeledTenths(starts_smem[k][i][0], starts_smem[k][i][1], starts_smem[k][i + 1][0],
                                                 starts_smem[k][i + 1][1], model_tenths);
          most = t > most ? t : most;
        }
        most = WarpMax(most);
        if (threadIdx.x % 32 == 0) atomicMax(&makespan[k], static_cast<unsigned long long>(most));
      }
    }
    if (aligned_mode > 0 && head_total > 0) {
      // the aligned layout's chunk: candidates low + c, c < kAlignedCandidates, in rounds of a candidate a warp; the
      // smallest that fits wins, so a round in which one fits is the last (experiment 69, s52a/b on an H100: q_len 2
      // plan -0.2..-0.6 us on the six bench batches that fit in the first round). Round 0 holds only the first
      // kAlignedFirstRound candidates (most batches' chunk is the first or second: 6 of the bench's 8; the plan is
      // issue-bound, so idle warps are cheaper than dividing ones, experiment 70) and, in the next warp, the last
      // candidate as a probe: ctas(q) does not grow with q, so if the last needs more than max_ctas CTAs none of the
      // 32 fits and round 0 is the only one (256 zipf; experiment 71, with 72's division below: s53a on an H100,
      // zipf's plan -2.1..-2.2 us, 128 random's -0.5, the other six within -0.1..+0.1). The candidates stay after the
      // CTA starts: warps done with their modeled times start on them while others finish (69a put them first, to
      // skip the starts where a bound shows the aligned layout chosen: plan -0.8..-1.1 us there, +0.5..+1.0 on
      // 2x32K+30x4K and 128 random, where the bound does not hold and the overlap is lost)
      const int64_t low = AlignedLowChunk(head_total, cfg.num_kv_heads, max_ctas, min_tiles);
      const int lane = static_cast<int>(threadIdx.x % 32), warps = static_cast<int>(blockDim.x / 32);
      constexpr int kAlignedFirstRound = 4;
      const int warp = static_cast<int>(threadIdx.x / 32);
      for (int first = 0, end = min(kAlignedFirstRound, warps); first < kAlignedCandidates;
           first = end, end = min(end + warps, kAlignedCandidates)) {
        const bool probe = first == 0 && warp == end;  // (a warp past round 0's, where the block has one)
        const int c = probe ? kAlignedCandidates - 1 : first + warp;
        bool fits = false, none = false;
        if (c < end || probe) {
          const int64_t q = low + c;
          int64_t ctas = 0;
          if (q < kRcpLimit) {
            const float rq = __frcp_rn(static_cast<float>(q));
            for (int b = lane; b < batch; b += 32) {
              ctas += AlignedCtasRcp(prefix_smem[b + 1] - prefix_smem[b], static_cast<int>(q), rq);
            }
          } else {
            for (int b = lane; b < batch; b += 32) ctas += AlignedCtas(prefix_smem[b + 1] - prefix_smem[b], q);
          }
#pragma unroll
          for (int o = 16; o > 0; o /= 2) ctas += __shfl_xor_sync(0xffffffffu, ctas, o);
          fits = AlignedFits(ctas, q, cfg.num_kv_heads, max_ctas);  // (the same in every lane: the sum is)
          if (lane == 0 && fits) atomicMin(&aligned_q, static_cast<unsigned long long>(q));
          none = probe && ctas * cfg.num_kv_heads > max_ctas;
          fits = fits && !probe;  // (a fit of the probe's is recorded, but smaller candidates remain)
        }
        if (__syncthreads_or(fits || none)) break;
      }
    }
    __syncthreads();
    const int k = makespan[1] < makespan[0] ? 1 : 0;  // (the base cost on a tie)
    piece_cost = k == 1 ? alt_cost : piece_cost;
    const int64_t q = static_cast<int64_t>(aligned_q);
    aligned = aligned_q != ~0ull &&
              (aligned_mode >= 2 || AlignedChosen(q, model_tenths, static_cast<int64_t>(makespan[k])));
    if (aligned) {
      // CTAs per head before each sequence (a scan as above: at most max_ctas in all, AlignedFits), kept where the
      // starts were: flat, >= batch + 1 ints
      static_assert(2 * (kPlanChoiceMaxCtas + 1) * 2 >= kPlanSmemPrefix, "ctas_before fits where the starts were");
      int32_t* ctas_before = &starts_smem[0][0][0];
      const int32_t per_head = BlockExclusiveSum(
          sum_totals, batch, [&](int b) { return static_cast<int>(AlignedCtas(prefix_smem[b + 1] - prefix_smem[b], q)); },
          [&](int b, int at) {
            ctas_before[b] = at;
            prefix[b] = static_cast<int32_t>(at * q);
          });
      if (threadIdx.x == 0) {
        ctas_before[batch] = per_head;
        prefix[batch] = static_cast<int32_t>(per_head * q);
      }
      __syncthreads();
      piece_cost = 0;
      head_cost = static_cast<int32_t>(per_head * q);
      capacity = q;
      num_ctas = per_head * cfg.num_kv_heads;
      const int64_t total = static_cast<int64_t>(head_cost) * cfg.num_kv_heads;
      for (int i = threadIdx.x; i <= max_ctas; i += blockDim.x) {
        LocateIn([&](int b) -> int64_t { return ctas_before[b] * q; }, batch, cfg.num_kv_heads, 0,
                 i <= num_ctas ? i * q : total, &start[2 * i], &start[2 * i + 1]);
      }
    } else {
      for (int b = threadIdx.x; b <= batch; b += blockDim.x) {  // the chosen layout's cost prefix and CTA starts
        prefix[b] = prefix_smem[b] + piece_cost * units_smem[b];
      }
      for (int i = threadIdx.x; i <= max_ctas; i += blockDim.x) {
        start[2 * i] = starts_smem[k][i][0];
        start[2 * i + 1] = starts_smem[k][i][1];
      }
    }
  }
  if (!aligned) {
    head_cost = kChoose ? head_total + piece_cost * units_smem[batch] : head_total;
    capacity = CapacityOf(static_cast<int64_t>(head_cost) * cfg.num_kv_heads, max_ctas, min_tiles + piece_cost);
    num_ctas = CtasAt(static_cast<int64_t>(head_cost) * cfg.num_kv_heads, capacity);
  }
  const int64_t total = static_cast<int64_t>(head_cost) * cfg.num_kv_heads;
  if constexpr (!kChoose) {
    const int32_t* search = in_smem ? prefix_smem : prefix;
    for (int i = threadIdx.x; i <= max_ctas; i += blockDim.x) {
      int unit, tile;
      LocatePosition(search, batch, cfg.num_kv_heads, piece_cost, i <= num_ctas ? i * capacity : total, &unit,
                     &tile);
      start[2 * i] = unit;
      start[2 * i + 1] = tile;
    }
  }
  if (threadIdx.x == 0) {
    const int32_t header[kPlanHeaderInts] = {kPlanMagic, kPlanVersion, batch, cfg.num_kv_heads, cfg.num_q_heads,
                                             cfg.head_dim, cfg.q_len, cfg.page_size, static_cast<int32_t>(cfg.kv_dtype),
                                             max_ctas, num_ctas, static_cast<int32_t>(capacity), piece_cost,
                                             head_cost, aligned ? 1 : 0, 0};
    for (int i = 0; i < kPlanHeaderInts; ++i) plan[i] = header[i];
  }
}

// HPC_XLA_CHECK=1: copy the plan header and the lengths/block ids the kernel will use, validate on the host.
Status CheckOnDevice(const DecodeAttentionArgs& a, const DecodeConfig& cfg, cudaStream_t stream) {
  const char* what = "decode_attention check";
  const int64_t batch = a.seq_lens.shape[0], max_blocks = a.block_table.shape[1];
  std::vector<int32_t> lens(batch), table(batch * max_blocks);
  bool skipped = false;
  HPC_RETURN_IF_ERROR(CopyForCheck(stream, what, a.seq_lens.data, lens.data(), batch * 4, &skipped));
  if (skipped) return Status::Ok();
  // (the stream is synced by now; block_table's rows may be strided)
  HPC_RETURN_IF_ERROR(CudaStatus(cudaMemcpy2D(table.data(), max_blocks * 4, a.block_table.data,
                                              a.block_table.strides[0] * 4, max_blocks * 4, batch,
                                              cudaMemcpyDeviceToHost),
                                 what));
  ArgCheck c("decode_attention");
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = lens[b];
    if (len != 0 && (len < a.q_len || len > max_blocks * cfg.page_size)) {
      return c.Fail("seq_lens[" + std::to_string(b) + "] = " + std::to_string(len) + " must be 0 or in [q_len, " +
                    std::to_string(max_blocks * cfg.page_size) + "] (HPC_XLA_CHECK)");
    }
    for (int64_t i = 0; i < (len + cfg.page_size - 1) / cfg.page_size; ++i) {
      const int64_t blk = table[b * max_blocks + i];
      if (blk < 0 || blk >= a.k_cache.shape[0]) {
        return c.Fail("block_table[" + std::to_string(b) + ", " + std::to_string(i) + "] = " + std::to_string(blk) +
                      " is outside [0, " + std::to_string(a.k_cache.shape[0]) + ") (HPC_XLA_CHECK)");
      }
    }
  }
  if (a.schedule == DecodeSchedule::kDynamic) {
    // the header and the per-sequence cost prefix (kPlanHeaderInts + batch + 1 ints: inside any plan of this batch)
    std::vector<int32_t> head(attention::kPlanHeaderInts + batch + 1);
    HPC_RETURN_IF_ERROR(CopyForCheck(stream, what, a.plan.data, head.data(), head.size() * 4, &skipped));
    HPC_RETURN_IF_ERROR(CheckPlanHeader(head.data(), cfg, batch, a.plan.shape[0]));
    HPC_RETURN_IF_ERROR(CheckPlanLengths(head.data(), lens.data(), batch));
  }
  return Status::Ok();
}

int Log2(int x) {
  int s = 0;
  while ((1 << s) < x) ++s;
  return s;
}

}  // namespace

Status DecodeMaxCtas(const DecodeConfig& cfg, int device, int* max_ctas) {
  HPC_RETURN_IF_ERROR(CheckHopper(device));
  int per_sm = 0;
  HPC_RETURN_IF_ERROR(PrepareKernel(ChooseKernel(cfg), &per_sm));
  *max_ctas = per_sm * MultiprocessorCount(device);
  return Status::Ok();
}

Status DecodePlanCuda(const DecodePlanArgs& a, cudaStream_t stream) {
  HPC_RETURN_IF_ERROR(ValidateDecodePlan(a));
  if (a.seq_lens.device != DeviceKind::kCuda) return Status::Internal("decode_plan: CUDA path called with CPU tensors");
  HPC_RETURN_IF_ERROR(CheckHopper(a.seq_lens.device_id));
  const int batch = static_cast<int>(a.seq_lens.shape[0]);
  const int alt_cost = DecodeAlternativePieceCostTiles(a.config), model_tenths = DecodeModelPieceTenths();
  const bool chooses = attention::PlanChooses(batch, a.max_ctas, alt_cost, model_tenths);
  return Launch("decode_plan kernel launch", chooses ? &DecodePlanKernel<true> : &DecodePlanKernel<false>, dim3(1),
                dim3(chooses ? ChoosingPlanThreads(a.max_ctas) : PlainPlanThreads(batch, a.max_ctas)), 0, stream,
                a.seq_lens.ptr<const int32_t>(), batch, a.config, a.max_ctas, DecodeMinCapacityTiles(),
                DecodePieceCostTiles(a.config), alt_cost, model_tenths, DecodeAlignedMode(), DecodePlanEarlyTrigger(),
                a.plan.ptr<int32_t>());
}

static_assert(attention::kMaxPieces == attention::kMaxCtas, "the combine kernel must hold a piece per CTA");

Status DecodeAttentionCuda(const DecodeAttentionArgs& a, cudaStream_t stream) {
  DecodeConfig cfg;
  HPC_RETURN_IF_ERROR(ValidateDecodeAttention(a, &cfg));
  if (a.q.device != DeviceKind::kCuda) return Status::Internal("decode_attention: CUDA path called with CPU tensors");
  HPC_RETURN_IF_ERROR(CheckHopper(a.q.device_id));
  if (DeviceChecksEnabled()) {
    HPC_RETURN_IF_ERROR(CheckOnDevice(a, cfg, stream));
    HPC_RETURN_IF_ERROR(CheckScalesOnDevice("decode_attention", "k_scale", a.k_scale, stream));
    HPC_RETURN_IF_ERROR(CheckScalesOnDevice("decode_attention", "v_scale", a.v_scale, stream));
    HPC_RETURN_IF_ERROR(CheckScalesOnDevice("decode_attention", "q_scale", a.q_scale, stream, /*zero_ok=*/true));
  }
  // Vector widths of the kernels' accesses: 16-byte cp.async of K/V rows, 8 q elements per load, 2 out elements
  // per store, float4 partials in the combine.
  const ArgCheck check("decode_attention");
  HPC_RETURN_IF_ERROR(check.VectorAligned("k_cache", a.k_cache, 16));
  HPC_RETURN_IF_ERROR(check.VectorAligned("v_cache", a.v_cache, 16));
  HPC_RETURN_IF_ERROR(check.VectorAligned("q", a.q, 8 * static_cast<int>(DTypeBytes(a.q.dtype))));
  HPC_RETURN_IF_ERROR(check.VectorAligned("out", a.out, 2 * static_cast<int>(DTypeBytes(a.out.dtype))));
  HPC_RETURN_IF_ERROR(check.VectorAligned("workspace", a.workspace, 16));
  const KernelChoice kernel = ChooseKernel(cfg);
  int per_sm = 0;
  HPC_RETURN_IF_ERROR(PrepareKernel(kernel, &per_sm));

  const int batch = static_cast<int>(a.seq_lens.shape[0]);
  DecodeParams p = {};
  p.q = a.q.data;
  p.q_scale = a.q_scale.present() ? a.q_scale.ptr<const float>() : nullptr;
  p.q_stride_row = a.q.strides[0], p.q_stride_head = a.q.strides[1];
  p.k_cache = a.k_cache.data, p.v_cache = a.v_cache.data;
  const int64_t kv_bytes = DTypeBytes(a.k_cache.dtype);
  p.k_block_bytes = a.k_cache.strides[0] * kv_bytes, p.k_head_bytes = a.k_cache.strides[2] * kv_bytes;
  p.v_block_bytes = a.v_cache.strides[0] * kv_bytes, p.v_head_bytes = a.v_cache.strides[2] * kv_bytes;
  // the kernel offsets rows inside a page in 32 bits
  for (const auto* c : {&a.k_cache, &a.v_cache}) {
    if (c->strides[1] * kv_bytes * cfg.page_size > INT32_MAX) {
      return ArgCheck("decode_attention").Fail(std::string(c == &a.k_cache ? "k_cache" : "v_cache") +
                                               ".stride(1) = " + std::to_string(c->strides[1]) +
                                               " elements: a page must span less than 2 GiB");
    }
  }
  p.k_row_bytes = static_cast<int32_t>(a.k_cache.strides[1] * kv_bytes);
  p.v_row_bytes = static_cast<int32_t>(a.v_cache.strides[1] * kv_bytes);
  p.block_table = a.block_table.ptr<const int32_t>();
  p.block_table_stride = a.block_table.strides[0];
  p.block_table_width = static_cast<int>(a.block_table.shape[1]);
  p.seq_lens = a.seq_lens.ptr<const int32_t>();
  p.plan = a.plan.present() ? a.plan.ptr<const int32_t>() : nullptr;
  p.workspace = a.workspace.ptr<float>();
  p.out = a.out.data;
  p.out_stride_row = a.out.strides[0], p.out_stride_head = a.out.strides[1];
  p.k_scale = a.k_scale.present() ? a.k_scale.ptr<const float>() : nullptr;
  p.v_scale = a.v_scale.present() ? a.v_scale.ptr<const float>() : nullptr;
  p.sm_scale = a.sm_scale;
  p.batch = batch;
  p.num_blocks = a.k_cache.shape[0];
  p.num_kv_heads = cfg.num_kv_heads, p.num_q_heads = cfg.num_q_heads;
  p.group = cfg.num_q_heads / cfg.num_kv_heads;
  p.q_len = a.q_len;
  p.rows = a.q_len * p.group;
  p.head_dim = cfg.head_dim;
  p.page_shift = Log2(cfg.page_size);
  p.q_dtype = a.q.dtype;
  p.out_fp16 = a.out.dtype == DType::kF16;
  p.dynamic = a.schedule == DecodeSchedule::kDynamic;
  int grid = 0, combine_grid = 0;
  if (p.dynamic) {
    const int max_ctas = static_cast<int>(attention::PlanMaxCtas(a.plan.shape[0], batch));
    if (max_ctas > attention::kMaxPieces) {
      return ArgCheck("decode_attention").Fail("plan was built for max_ctas=" + std::to_string(max_ctas) +
                                               "; at most " + std::to_string(attention::kMaxPieces) + " supported");
    }
    p.num_slots = 2 * static_cast<int64_t>(max_ctas);
    p.static_splits = 1;
    grid = max_ctas;
    combine_grid = max_ctas;
  } else {
    p.static_splits = StaticSplits(batch, cfg.num_kv_heads, a.max_ctas);
    p.num_slots = static_cast<int64_t>(batch) * cfg.num_kv_heads * p.static_splits;
    grid = batch * cfg.num_kv_heads * p.static_splits;
    combine_grid = batch * cfg.num_kv_heads;
  }
  using KernelFn = void (*)(DecodeParams);
  HPC_RETURN_IF_ERROR(Launch("decode_attention kernel launch", reinterpret_cast<KernelFn>(const_cast<void*>(kernel.fn)),
                             dim3(grid), dim3(attention::kDecodeThreads), kernel.smem, stream, p));
  // Dynamic with <= kWarpMergeMaxRows rows: one combine CTA per CTA boundary (the boundaries of a long unit share its
  // rows); more rows: a CTA per (boundary, row). Static: a CTA per (unit, row).
  const int combine_rows = p.dynamic && p.rows <= attention::kWarpMergeMaxRows ? 1 : p.rows;
  const bool wide = p.rows > attention::kCombineThreads / 32;
  auto* combine = wide ? &attention::DecodeCombineKernel<2> : &attention::DecodeCombineKernel<1>;
  return Launch("decode_attention combine launch", combine, dim3(combine_grid, combine_rows),
                dim3(attention::kCombineThreads), 0, stream, p);
}

}  // namespace hpc
