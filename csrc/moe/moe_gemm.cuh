// The tiled path's grouped GEMMs of fused_moe (included by fused_moe.cu only). ONE templated kernel serves both
// GEMMs and all three quant schemes; what differs is the math (fp8_tensor: wgmma; bf16 and fp8_block128:
// mma.sync) and the epilogue (gate-up: silu*up + rounding/quant of the intermediate; down: fp32 rows per pair).
//
// Work items are (N block, M tile, K split), N-block-major (so an expert's tiles read the same weight rows close
// together and share them through L2). CTA c takes the contiguous items [c*Q, (c+1)*Q), Q = ceil(items / grid),
// and streams their stages through ONE cp.async ring (the loader runs kStages - 1 stages ahead across items, so the
// next item's weights are in flight while an item's epilogue runs). The grid is persistent (one wave) for
// fp8_tensor and split gate-ups, one CTA per item otherwise (fused_moe.cu, LaunchGemm). K splits (gate-up only, `splits` > 1,
// a function of the shapes: MoeUpSplits) give shapes with few (tile, N block) units enough items to balance; each
// split writes its raw fp32 sums to `partial`, and the last of a unit's splits to arrive (a counter per unit, zeroed
// by the align kernel) adds them in split order -- the same order whoever arrives last, so results are bitwise
// reproducible and do not depend on the other tokens (the split points are fixed by the shapes, not the routing).
//
// CTA = 8 warps, one M tile (BM sorted rows of one expert, see fused_moe_plan.h) x one N block per item:
//   gate-up: BN output columns of I, computed from 2*BN weight rows (gate n0.. and up I+n0..), interleaved in
//            shared memory in groups of 16 rows (8 gate, 8 up), so that the gate and up value of one (row, column)
//            land in one thread (mma.sync: one ldmatrix.x4 yields a gate and an up n8 fragment; wgmma: rows R and
//            R + 8 of the m64 tile): the epilogue is register-local.
//   down:    BN = 128 columns of H.
// Both operands are K-major (x / intermediate rows and weight rows, [.., K]). Each pipeline stage holds 128 bytes
// of K per row (64 bf16 or 128 e4m3 = one fp8_block128 K block), rows are 128-byte lines with the 16-byte chunk
// index XOR (row & 7): conflict-free cp.async stores and ldmatrix reads, and exactly wgmma's 128-byte swizzle when
// the stages are 1024-byte aligned.
// fp8_tensor (wgmma): D[weight rows x tokens] = W * X^T per warpgroup (64 of the 128 weight rows = the wgmma M,
// the tile's BM tokens = the wgmma N), e4m3 read straight from the ring, each 128-deep K group promoted into fp32
// registers (the tensor core's fp8 accumulator is not a full fp32 one). On the H200 this replaced mma.sync with
// e4m3 -> f16 unpacks (sm_90 has no fp8 mma.sync; ptxas expands it into F2FP + two HMMA.16816).
// bf16 / fp8_block128 (mma.sync m16n8k16): a k-step consumes 32 bytes (bf16 k16 | e4m3 k32); the ldmatrix addressing
// is the same for both, because an 8x8 b16 ldmatrix tile of e4m3 bytes hands each thread 4 consecutive K bytes,
// which is exactly the m16n8k32 e4m3 A/B register layout. e4m3 fragments are converted to f16 once per k-step: an
// e4m3 k32 fragment is two f16 k16 fragments whose K order is permuted (thread q holds K {4q,4q+1} as f16
// "2q,2q+1" and {4q+2,4q+3} as "2q+8,2q+9"); A and B get the same permutation, so the dot products are unchanged
// and exact (every e4m3 value and product is exact in f16 x f16 -> f32). fp8_block128: per K block, partial sums
// accumulate in their own registers and are promoted into the fp32 accumulator with x_scale[row, kb] *
// w_scale[nb, kb] (the reference's rounding points).
// A rows are gathered through the sorted pair list (gate-up: token = pair / k) with zero fill for padding.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "csrc/common/launch.cuh"
#include "csrc/common/mma.cuh"
#include "csrc/common/numeric.h"
#include "csrc/moe/fused_moe.h"
#include "csrc/moe/moe_common.cuh"
#include "csrc/moe/wgmma_sm90.cuh"

namespace hpc::moe {

constexpr int kGemmThreads = 256;
constexpr int kLineBytes = 128;  // K bytes per row per stage

enum class GemmKind : int { kGateUp = 0, kDown = 1 };

struct GemmParams {
  const uint8_t* a;          // gate-up: x or x_q [T, K]; down: intermediate [max_rows, K]
  const float* a_scale;      // block128: gate-up [T, K/128]; down [max_rows, K/128]
  const uint8_t* b;          // w13 [E, 2I, K] | w2 [E, H, K]
  const float* b_scale;      // fp8_tensor [E]; block128 [E, Nw/128, K/128] (Nw = 2I | H)
  const float* a_tensor_scale;  // fp8_tensor: the A operand's static scale (a13 | a2)
  const float* out_tensor_scale;  // gate-up fp8_tensor: a2, quantizes the intermediate
  const int32_t* sorted_pairs;
  const int32_t* tile_expert;
  const int32_t* tile_count;
  void* out;                 // gate-up: intermediate [max_rows, I] bf16 | e4m3; down: f32 [T*k, H]
  float* out_scale;          // gate-up block128: [max_rows, I/128]
  float* partial;            // splits > 1: [splits, pairs, 2n] f32 raw sums per pair (gate columns, then up)
  int32_t* arrivals;         // splits > 1: [max_tiles * n_blocks] splits arrived per unit, zeroed by align
  int64_t k_bytes;           // K * element bytes: row pitch of A and B
  int64_t b_expert_bytes;    // one expert's weight matrix
  int k_blocks;              // block128: K / 128
  int n;                     // output columns: I | H
  int top_k;
  int splits;                // K splits per (tile, N block): 1, or the gate-up's MoeUpSplits
  int split_k_tiles;         // 128-byte K tiles per split (the last split may have fewer)
  int pairs;                 // T*k: the partial's rows
  // gate-up: w13's layout (W13GateRow / W13UpDelta) as the loader uses it: gate row = col + (n0 & w13_n0_mask), up row
  // = gate row + w13_up_delta. vLLM's: mask 0, delta I; interleaved: mask ~0, delta 64. Down: 0, 0 (unused).
  int w13_n0_mask, w13_up_delta;
};

// One work item: M tile, its first output column, its K range in 128-byte tiles, its split.
struct GemmItem {
  int tile, n0, kt0, kt1, split;
};

template <GemmKind KIND, MoeQuant Q, int BM>
struct GemmShape {
  static constexpr bool kGateUp = KIND == GemmKind::kGateUp;
  static constexpr bool kFp8 = Q != MoeQuant::kNone;
  static constexpr bool kBlock = Q == MoeQuant::kFp8Block128;
  // fp8_tensor multiplies on wgmma: D[weight rows x tokens] = W * X^T, each warpgroup 64 of the kNB = 128 weight
  // rows (the wgmma M) against the tile's BM tokens (the wgmma N), both read as e4m3 straight from the ring.
  static constexpr bool kWgmma = Q == MoeQuant::kFp8Tensor;
  static constexpr int kBN = kGateUp ? (kBlock ? 128 : 64) : 128;  // output columns per CTA
  static_assert(!kGateUp || kBlock || kBN == kW13InterleaveRows, "an interleaved w13's gate-up N block is one 64-block");
  static constexpr int kNB = kGateUp ? 2 * kBN : kBN;               // weight rows per CTA
  static constexpr int kWarpsM = BM >= 64 ? 2 : 1;
  static constexpr int kWarpsN = 8 / kWarpsM;
  static constexpr int kWarpM = BM / kWarpsM;
  static constexpr int kWarpN = kNB / kWarpsN;
  static constexpr int kMI = kWarpM / 16;
  static constexpr int kNI = kWarpN / 8;
  static_assert(kWarpN % 16 == 0 && kWarpM % 16 == 0, "warp tile");
  static constexpr int kABytes = BM * kLineBytes;
  // Loader geometry. The wgmma kernels run two independent pipelines, one per warpgroup: each copies its own 64
  // weight rows and its own copy of the tile's A rows into its region of the stage and syncs on a named barrier of
  // its 128 threads (ncu: the CTA-wide barrier per stage was the top stall, 24%). mma.sync: one region, 256 threads.
  static constexpr int kLoaders = kWgmma ? 128 : kGemmThreads;  // threads filling one region
  static constexpr int kRegionRows = kWgmma ? 64 : kNB;         // weight rows per region
  static constexpr int kRegionBytes = (BM + kRegionRows) * kLineBytes;
  static constexpr int kStageBytes = (kWgmma ? 2 : 1) * kRegionBytes;
  // Two CTAs per SM (<= 128 registers, <= ~100 KB each) except block128, whose doubled accumulators (partial
  // sums per K block) need more registers: one CTA with a deeper ring.
  static constexpr int kMinBlocks = kBlock ? 1 : 2;
  static constexpr int kBudget = kMinBlocks == 1 ? 200 * 1024 : 100 * 1024;
  static constexpr int kStages = kBudget / kStageBytes > 8 ? 8 : (kBudget / kStageBytes < 2 ? 2 : kBudget / kStageBytes);
  static constexpr int kRedBytes = kBlock && kGateUp ? kWarpsN * BM * 4 : 0;  // row amax exchange
  static constexpr int kAlignPad = kWgmma ? 1024 : 0;  // the 128-byte swizzle wants 1024-byte aligned stages
  static constexpr int kSmemBytes = kStages * kStageBytes + kRedBytes + kAlignPad;
  static_assert(!kWgmma || (kNB == 128 && kABytes % 1024 == 0 && kRegionBytes % 1024 == 0), "wgmma tiles");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory");
};

__device__ __forceinline__ int Swz(int row, int chunk) { return row * kLineBytes + ((chunk ^ (row & 7)) << 4); }

template <GemmKind KIND, MoeQuant Q, int BM>
__global__ void __launch_bounds__(kGemmThreads, (GemmShape<KIND, Q, BM>::kMinBlocks))
    MoeGemmKernel(const __grid_constant__ GemmParams p) {
  using S = GemmShape<KIND, Q, BM>;
  extern __shared__ __align__(128) char smem[];
  __shared__ int last_split;  // split path: this CTA's split of the unit arrived last
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm = warp / S::kWarpsN, wn = warp % S::kWarpsN;
  const int g = lane / 4, q = lane % 4;
  const int n_blocks = (p.n + S::kBN - 1) / S::kBN;
  const int k_tiles = static_cast<int>((p.k_bytes + kLineBytes - 1) / kLineBytes);
  // The down GEMM issues its first item's weight copies BEFORE its PDL wait: the weights are op inputs, and the
  // tile list is the align kernel's, complete before the gate-up GEMM (which starts us after its own wait) began.
  // Its CTAs become resident as gate-up CTAs retire, so the weights stream during the gate-up's tail; the A rows
  // (the intermediate) are copied after the wait. The align data is read through L2 (ld.cg) for that reason.
  // Every down kernel (wgmma fp8_tensor and the mma.sync bf16 / block128 ones): measured on the H200 (bench/NOTES.md,
  // session 20) at -1.5 us on Qwen3 bf16 T=16-64 and DeepSeek-V3 EP8 block128 T=8, Mixtral within noise.
  constexpr bool kEarlyWeights = !S::kGateUp;
  if constexpr (!kEarlyWeights) PdlWait();
  const int tiles = __ldcg(p.tile_count);
  const int items = tiles * n_blocks * p.splits;
  const int per_cta = (items + gridDim.x - 1) / gridDim.x;
  const int item_begin = blockIdx.x * per_cta;
  const int item_end = min(items, item_begin + per_cta);
  if (item_begin >= item_end) {
    // One CTA waits even without work, so this grid never completes before its predecessor (a grid none of whose
    // CTAs waits could, and the next kernel waits for this grid only).
    if (kEarlyWeights && blockIdx.x == 0) PdlWait();
    if constexpr (!kEarlyWeights) PdlLaunchDependents();
    return;
  }
  // Every CTA of this grid is resident by now (the grid is at most one wave); the next kernel's CTAs can only take
  // what our CTAs leave free and wait for our whole grid anyway.
  if constexpr (!kEarlyWeights) PdlLaunchDependents();

  // Items are N-block-major: consecutive items are the tiles of one N block (then its K splits), so an expert's
  // tiles (adjacent in sorted order) read the same weight rows close together in time and share them through L2
  // (tile-major order read them twice from DRAM: Mixtral T=64, 2 tiles per expert, ran 831 -> 1028 us).
  auto decode = [&](int item) {
    GemmItem it;
    const int u = item / p.splits;
    it.split = item - u * p.splits;
    const int nb = u / tiles;
    it.tile = u - nb * tiles;
    it.n0 = nb * S::kBN;
    it.kt0 = it.split * p.split_k_tiles;
    it.kt1 = min(k_tiles, it.kt0 + p.split_k_tiles);
    return it;
  };

  char* ring = smem;
  if constexpr (S::kWgmma) {
    const uint32_t raw = SmemAddr(smem);
    ring = smem + (((raw + 1023u) & ~1023u) - raw);
  }
  const uint32_t ring_s = SmemAddr(ring);

  // ---- loader: per-thread load assignments (rows tid/8 + 32 i, 16-byte chunk tid % 8 of each 128-byte line),
  // re-derived when the loader enters a new item (the A rows and the expert only when the tile changes): per
  // stage a copy is then one 64-bit add and a predicate (the addresses were ~95 of 232 instructions per stage).
  constexpr int kALoads = (BM * 8 + S::kLoaders - 1) / S::kLoaders;
  constexpr int kBLoads = S::kRegionRows * 8 / S::kLoaders;
  constexpr int kRowStep = S::kLoaders / 8;  // rows between one thread's loads
  const int lt = tid % S::kLoaders, region = tid / S::kLoaders;
  const int lchunk = lt % 8, lrow = lt / 8;
  const uint32_t region_off = region * S::kRegionBytes;
  const int k_bytes = static_cast<int>(p.k_bytes);
  const uint8_t* a_src[kALoads];
  const uint8_t* b_src[kBLoads];  // this thread's chunk of each B row at K 0, null past N
  const uint8_t* b_expert = p.b;
  uint32_t a_off[kALoads], b_off[kBLoads];  // swizzled stage offsets
#pragma unroll
  for (int i = 0; i < kALoads; ++i) a_off[i] = region_off + Swz(lrow + kRowStep * i, lchunk);
#pragma unroll
  for (int i = 0; i < kBLoads; ++i) b_off[i] = region_off + S::kABytes + Swz(lrow + kRowStep * i, lchunk);
  // A tile's rows and expert are loaded one unit ahead of the loader's entry into it (ncu: the load at entry, on
  // every item of the N-block-major order, was 4% of the stall samples plus the barrier time it cost the others).
  int ld_tile = -1, nx_tile = -1, nx_expert = 0;
  bool pre_wait = kEarlyWeights;  // align's data read before the PDL wait goes through L2 (ld.cg)
  int nx_pair[kALoads];
  auto fetch_tile = [&](int item) {
    if (item >= item_end) return;
    const int u = item / p.splits, nb = u / tiles, t = u - nb * tiles;
    if (t == nx_tile) return;
    nx_tile = t;
#pragma unroll
    for (int i = 0; i < kALoads; ++i) {
      const int32_t* src = p.sorted_pairs + t * BM + lrow + kRowStep * i;
      nx_pair[i] = lrow + kRowStep * i < BM ? (pre_wait ? __ldcg(src) : *src) : -1;
    }
    nx_expert = pre_wait ? __ldcg(p.tile_expert + t) : p.tile_expert[t];
  };
  auto enter = [&](const GemmItem& it, int item) {
    if (it.tile != ld_tile) {
      ld_tile = it.tile;
      fetch_tile(item);  // a no-op when the previous entry prefetched it
      const int row0 = it.tile * BM;
#pragma unroll
      for (int i = 0; i < kALoads; ++i) {
        const int r = lrow + kRowStep * i;
        a_src[i] = nullptr;
        if (r < BM && nx_pair[i] >= 0) {
          const int64_t arow = S::kGateUp ? nx_pair[i] / p.top_k : row0 + r;
          a_src[i] = p.a + arow * p.k_bytes + lchunk * 16;
        }
      }
      b_expert = p.b + static_cast<int64_t>(nx_expert) * p.b_expert_bytes + lchunk * 16;
      fetch_tile((item / p.splits + 1) * p.splits);  // the next unit's tile
    }
#pragma unroll
    for (int i = 0; i < kBLoads; ++i) {
      const int r = region * S::kRegionRows + lrow + kRowStep * i;  // weight row among the CTA's kNB
      int col, wrow;
      if constexpr (S::kGateUp) {
        col = it.n0 + (r / 16) * 8 + r % 8;
        // 8 gate rows, then the 8 matching up rows. Interleaved w13 (never block128, so kBN = 64 and n0 starts a
        // 64-block): W13GateRow(col) = col + n0, and the up row is 64 further (W13UpDelta)
        // (from the parameters' constant bank: the fp8_tensor BM = 64 kernel sits at its 128-register bound)
        wrow = col + (it.n0 & p.w13_n0_mask) + ((r / 8) % 2 ? p.w13_up_delta : 0);
      } else {
        col = it.n0 + r;
        wrow = col;
      }
      b_src[i] = col < p.n ? b_expert + static_cast<int64_t>(wrow) * p.k_bytes : nullptr;
    }
  };

  auto load_b = [&](uint32_t st, int kt) {
    const int kb = kt * kLineBytes;
    const bool k_ok = kb + lchunk * 16 < k_bytes;
#pragma unroll
    for (int i = 0; i < kBLoads; ++i) {
      const bool ok = b_src[i] != nullptr && k_ok;
      CpAsync16(st + b_off[i], ok ? b_src[i] + kb : p.b, ok);
    }
  };
  int early_b = 0;  // leading stages whose weight copies were issued before the PDL wait
  auto load_stage = [&](uint32_t st, int kt) {
    const int kb = kt * kLineBytes;
    const bool k_ok = kb + lchunk * 16 < k_bytes;
#pragma unroll
    for (int i = 0; i < kALoads; ++i) {
      if (lrow + kRowStep * i < BM) {
        const bool ok = a_src[i] != nullptr && k_ok;
        CpAsync16(st + a_off[i], ok ? a_src[i] + kb : p.a, ok);
      }
    }
    if (early_b > 0) {
      --early_b;
    } else {
      load_b(st, kt);
    }
  };

  // The loader runs kStages - 1 stages ahead of the math across item boundaries; one commit group per stage
  // (empty past the CTA's last stage, so the wait counts stay uniform).
  const uint32_t ring_end = ring_s + S::kStages * S::kStageBytes;
  int ld_item = item_begin;
  GemmItem ld = decode(ld_item);
  enter(ld, ld_item);
  int ld_kt = ld.kt0;
  uint32_t ld_slot = ring_s;
  auto load_next = [&]() {
    if (ld_item < item_end) {
      load_stage(ld_slot, ld_kt);
      if (++ld_kt == ld.kt1 && ++ld_item < item_end) {
        ld = decode(ld_item);
        enter(ld, ld_item);
        ld_kt = ld.kt0;
      }
    }
    CpAsyncCommit();
    ld_slot += S::kStageBytes;
    if (ld_slot == ring_end) ld_slot = ring_s;
  };
  if constexpr (kEarlyWeights) {
    // The first item's weight stages, uncommitted: they join the first stage's commit group below, so every stage
    // wait covers them.
    // Only first items of >= 4 stages (K >= 512 bytes), as measured: the first version took every item AND read the
    // gate-up's tile data through L2 too, and cost Hy3-TP8 (2-stage down items, I = 192) 1-2.6 us; which of the two
    // cost it was not separated (bench/NOTES.md, fused_moe session 19).
    const int first_stages = ld.kt1 - ld.kt0;
    early_b = first_stages >= 4 ? min(S::kStages - 1, first_stages) : 0;
    for (int s = 0; s < early_b; ++s) load_b(ring_s + s * S::kStageBytes, ld.kt0 + s);
    PdlWait();  // the intermediate (A) comes from the gate-up GEMM
    PdlLaunchDependents();
    pre_wait = false;
  }
#pragma unroll 1  // one copy of load_next's code (it holds the item decode and tile entry): SASS size matters here
  for (int s = 0; s < S::kStages - 1; ++s) load_next();

  uint32_t cs_slot = ring_s;
  for (int item = item_begin; item < item_end; ++item) {
    const GemmItem it = decode(item);
    const int row0 = it.tile * BM;  // first sorted row of the tile
    const int n0 = it.n0;
    const int e = p.tile_expert[it.tile];

    if constexpr (S::kWgmma) {
      // D = W * X^T: thread (warpgroup wg, warp w4, lane 4g + q) holds weight rows R = 64 wg + 16 w4 + g and R + 8
      // against tokens 8j + 2q + b in acc[4j + b] / acc[4j + 2 + b]. Gate-up rows are stored 8 gate, 8 up (enter):
      // R is the gate row and R + 8 the up row of one output column, so silu(gate) * up stays in the thread.
      const int wg = warp / 4, w4 = warp % 4;
      // The epilogue's inputs are loaded before the K loop, so they land while it runs.
      int pairs[BM / 8][2];
#pragma unroll
      for (int j = 0; j < BM / 8; ++j)
#pragma unroll
        for (int b = 0; b < 2; ++b) pairs[j][b] = p.sorted_pairs[row0 + 8 * j + 2 * q + b];
      const float w_scale = p.b_scale[e];
      float acc[BM / 2];
#pragma unroll
      for (int i = 0; i < BM / 2; ++i) acc[i] = 0.f;
      for (int kt = it.kt0; kt < it.kt1; ++kt) {
        CpAsyncWait<S::kStages - 2>();
        FenceProxyAsync();  // our cp.async writes -> visible to wgmma's async proxy
        // ... and the whole warpgroup's (its region only; named barrier 1 + wg); the previous stage's wgmmas are
        // complete (waited), so the warpgroup may refill its region of that slot
        asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
        load_next();
        const uint32_t mine = cs_slot + wg * S::kRegionBytes;
        WgmmaGroupE4M3N<BM>(acc, mine + S::kABytes, mine);
        cs_slot += S::kStageBytes;
        if (cs_slot == ring_end) cs_slot = ring_s;
      }
      const int rw = 64 * wg + 16 * w4 + g;  // this thread's first weight row of the CTA's kNB
      if constexpr (S::kGateUp) {
        const int col = n0 + rw / 16 * 8 + g;  // (64 wg + 16 w4) / 16 * 8 + g: the column of rows rw, rw + 8
        if (p.splits > 1) {  // as on the mma.sync path below: raw sums per split, the last arrival adds them in order
          auto at = [&](int split, int pair, int c) {
            return p.partial + (static_cast<int64_t>(split) * p.pairs + pair) * (2 * p.n) + c;
          };
#pragma unroll
          for (int j = 0; j < BM / 8; ++j)
#pragma unroll
            for (int b = 0; b < 2; ++b) {
              if (pairs[j][b] < 0) continue;
              *at(it.split, pairs[j][b], col) = acc[4 * j + b];
              *at(it.split, pairs[j][b], p.n + col) = acc[4 * j + 2 + b];
            }
          __threadfence();
          __syncthreads();
          if (tid == 0) last_split = atomicAdd(&p.arrivals[it.tile * n_blocks + n0 / S::kBN], 1) == p.splits - 1;
          __syncthreads();
          if (!last_split) continue;
          __threadfence();
#pragma unroll
          for (int j = 0; j < BM / 8; ++j)
#pragma unroll
            for (int b = 0; b < 2; ++b) {
              if (pairs[j][b] < 0) continue;  // padding: its own (zero) sums are the total
              float gate = 0.f, up = 0.f;
              for (int sp = 0; sp < p.splits; ++sp) {
                const float gs = sp == it.split ? acc[4 * j + b] : __ldcg(at(sp, pairs[j][b], col));
                const float us = sp == it.split ? acc[4 * j + 2 + b] : __ldcg(at(sp, pairs[j][b], p.n + col));
                gate = sp == 0 ? gs : __fadd_rn(gate, gs);
                up = sp == 0 ? us : __fadd_rn(up, us);
              }
              acc[4 * j + b] = gate, acc[4 * j + 2 + b] = up;
            }
        }
        const float ts = __fmul_rn(*p.a_tensor_scale, w_scale);
        const float mul = QuantMultiplier(*p.out_tensor_scale);
        uint8_t* out = static_cast<uint8_t*>(p.out);
#pragma unroll
        for (int j = 0; j < BM / 8; ++j)
#pragma unroll
          for (int b = 0; b < 2; ++b) {
            const float h = __fmul_rn(Silu(__fmul_rn(acc[4 * j + b], ts)), __fmul_rn(acc[4 * j + 2 + b], ts));
            out[static_cast<int64_t>(row0 + 8 * j + 2 * q + b) * p.n + col] =
                __nv_cvt_float_to_fp8(h * mul, __NV_SATFINITE, __NV_E4M3);
          }
      } else {
        const float ts = __fmul_rn(*p.a_tensor_scale, w_scale);
#pragma unroll
        for (int j = 0; j < BM / 8; ++j)
#pragma unroll
          for (int b = 0; b < 2; ++b) {
            if (pairs[j][b] < 0) continue;
            float* dst = static_cast<float*>(p.out) + static_cast<int64_t>(pairs[j][b]) * p.n + n0 + rw;
            if (n0 + rw < p.n) dst[0] = __fmul_rn(acc[4 * j + b], ts);
            if (n0 + rw + 8 < p.n) dst[8] = __fmul_rn(acc[4 * j + 2 + b], ts);
          }
      }
    } else {
      float acc[S::kMI][S::kNI][4];
#pragma unroll
      for (int mi = 0; mi < S::kMI; ++mi)
#pragma unroll
        for (int ni = 0; ni < S::kNI; ++ni) acc[mi][ni][0] = acc[mi][ni][1] = acc[mi][ni][2] = acc[mi][ni][3] = 0.f;

      // Block128 scales: rows this thread accumulates (mi, half) -> the A scale row (token | sorted row), -1 = pad.
      int scale_row[S::kMI][2];
      if constexpr (S::kBlock) {
#pragma unroll
        for (int mi = 0; mi < S::kMI; ++mi)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = wm * S::kWarpM + mi * 16 + g + 8 * h;
            const int pair = p.sorted_pairs[row0 + r];
            scale_row[mi][h] = pair < 0 ? -1 : (S::kGateUp ? pair / p.top_k : row0 + r);
          }
      }

      for (int kt = it.kt0; kt < it.kt1; ++kt) {
        CpAsyncWait<S::kStages - 2>();
        __syncthreads();  // this stage landed for everyone; the previous one is free to refill
        load_next();

        // block128: this K block's scales (loaded before the math so their latency hides under it)
        float xs[S::kMI][2], ws[2];
        if constexpr (S::kBlock) {
#pragma unroll
          for (int mi = 0; mi < S::kMI; ++mi)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int r = scale_row[mi][h];
              xs[mi][h] = r >= 0 ? p.a_scale[static_cast<int64_t>(r) * p.k_blocks + kt] : 0.f;
            }
          if constexpr (S::kGateUp) {
            const int64_t nblocks = 2 * p.n / kMoeBlock;
            ws[0] = p.b_scale[(e * nblocks + n0 / kMoeBlock) * p.k_blocks + kt];
            ws[1] = p.b_scale[(e * nblocks + (p.n + n0) / kMoeBlock) * p.k_blocks + kt];
          } else {
            const int64_t nblocks = p.n / kMoeBlock;
            ws[0] = ws[1] = p.b_scale[(e * nblocks + n0 / kMoeBlock) * p.k_blocks + kt];
          }
        }

        float part[S::kBlock ? S::kMI : 1][S::kBlock ? S::kNI : 1][4];
        if constexpr (S::kBlock) {
#pragma unroll
          for (int mi = 0; mi < S::kMI; ++mi)
#pragma unroll
            for (int ni = 0; ni < S::kNI; ++ni) part[mi][ni][0] = part[mi][ni][1] = part[mi][ni][2] = part[mi][ni][3] = 0.f;
        }
        const uint32_t ast = cs_slot;
        const uint32_t bst = ast + S::kABytes;
#pragma unroll
        for (int ks = 0; ks < kLineBytes / 32; ++ks) {
          uint32_t af[S::kMI][4];
#pragma unroll
          for (int mi = 0; mi < S::kMI; ++mi) {
            LdMatrixX4(af[mi], ast + Swz(wm * S::kWarpM + mi * 16 + lane % 16, 2 * ks + lane / 16));
          }
          // fp8: the e4m3 k32 fragments -> two f16 k16 fragments each, converted once per k-step (see top)
          uint32_t ah[S::kFp8 ? S::kMI : 1][2][4];
          if constexpr (S::kFp8) {
#pragma unroll
            for (int mi = 0; mi < S::kMI; ++mi)
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                ah[mi][h][0] = E4M3x2ToHalf2(static_cast<uint16_t>(af[mi][2 * h]));
                ah[mi][h][1] = E4M3x2ToHalf2(static_cast<uint16_t>(af[mi][2 * h + 1]));
                ah[mi][h][2] = E4M3x2ToHalf2(static_cast<uint16_t>(af[mi][2 * h] >> 16));
                ah[mi][h][3] = E4M3x2ToHalf2(static_cast<uint16_t>(af[mi][2 * h + 1] >> 16));
              }
          }
#pragma unroll
          for (int n2 = 0; n2 < S::kNI / 2; ++n2) {
            uint32_t bf[4];
            LdMatrixX4(bf, bst + Swz(wn * S::kWarpN + n2 * 16 + lane % 8 + (lane / 16) * 8, 2 * ks + (lane / 8) % 2));
#pragma unroll
            for (int nb = 0; nb < 2; ++nb) {
              const int ni = 2 * n2 + nb;
              if constexpr (S::kFp8) {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                  const uint32_t b = bf[2 * nb + h];
                  const uint32_t b0 = E4M3x2ToHalf2(static_cast<uint16_t>(b));
                  const uint32_t b1 = E4M3x2ToHalf2(static_cast<uint16_t>(b >> 16));
#pragma unroll
                  for (int mi = 0; mi < S::kMI; ++mi) {
                    if constexpr (S::kBlock) {
                      Mma16816<__half>(part[mi][ni], ah[mi][h], b0, b1);
                    } else {
                      Mma16816<__half>(acc[mi][ni], ah[mi][h], b0, b1);
                    }
                  }
                }
              } else {
#pragma unroll
                for (int mi = 0; mi < S::kMI; ++mi) Mma16816<__nv_bfloat16>(acc[mi][ni], af[mi], bf[2 * nb], bf[2 * nb + 1]);
              }
            }
          }
        }
        if constexpr (S::kBlock) {  // promote: acc += part * x_scale * w_scale (the reference's order)
#pragma unroll
          for (int mi = 0; mi < S::kMI; ++mi)
#pragma unroll
            for (int ni = 0; ni < S::kNI; ++ni)
#pragma unroll
              for (int c = 0; c < 4; ++c) {
                const float w = S::kGateUp ? ws[ni % 2] : ws[0];
                acc[mi][ni][c] = __fadd_rn(acc[mi][ni][c], __fmul_rn(__fmul_rn(part[mi][ni][c], xs[mi][c / 2]), w));
              }
        }
        cs_slot += S::kStageBytes;
        if (cs_slot == ring_end) cs_slot = ring_s;
      }

      if constexpr (S::kGateUp) {
        if (p.splits > 1) {
          // This split's raw sums -> partial[split][pair][gate cols | I + up cols]; the unit's last split to arrive
          // adds all of them in split order (its own from registers: the same values it stored).
          const int unit = it.tile * n_blocks + n0 / S::kBN;
          auto at = [&](int split, int pair, int col) {
            return p.partial + (static_cast<int64_t>(split) * p.pairs + pair) * (2 * p.n) + col;
          };
          int pairs[S::kMI][2];
#pragma unroll
          for (int mi = 0; mi < S::kMI; ++mi)
#pragma unroll
            for (int h = 0; h < 2; ++h) pairs[mi][h] = p.sorted_pairs[row0 + wm * S::kWarpM + mi * 16 + g + 8 * h];
#pragma unroll
          for (int mi = 0; mi < S::kMI; ++mi)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              if (pairs[mi][h] < 0) continue;
#pragma unroll
              for (int n2 = 0; n2 < S::kNI / 2; ++n2) {
                const int col = n0 + (wn * S::kWarpN / 16 + n2) * 8 + 2 * q;
                if (col >= p.n) continue;
                *reinterpret_cast<float2*>(at(it.split, pairs[mi][h], col)) =
                    make_float2(acc[mi][2 * n2][2 * h], acc[mi][2 * n2][2 * h + 1]);
                *reinterpret_cast<float2*>(at(it.split, pairs[mi][h], p.n + col)) =
                    make_float2(acc[mi][2 * n2 + 1][2 * h], acc[mi][2 * n2 + 1][2 * h + 1]);
              }
            }
          __threadfence();
          __syncthreads();
          if (tid == 0) last_split = atomicAdd(&p.arrivals[unit], 1) == p.splits - 1;
          __syncthreads();
          if (!last_split) continue;
          __threadfence();
#pragma unroll
          for (int mi = 0; mi < S::kMI; ++mi)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              if (pairs[mi][h] < 0) continue;  // padding: its own (zero) sums are the total
#pragma unroll
              for (int n2 = 0; n2 < S::kNI / 2; ++n2) {
                const int col = n0 + (wn * S::kWarpN / 16 + n2) * 8 + 2 * q;
                if (col >= p.n) continue;
                float2 gate = make_float2(0.f, 0.f), up = gate;
                for (int s = 0; s < p.splits; ++s) {
                  float2 gs, us;
                  if (s == it.split) {
                    gs = make_float2(acc[mi][2 * n2][2 * h], acc[mi][2 * n2][2 * h + 1]);
                    us = make_float2(acc[mi][2 * n2 + 1][2 * h], acc[mi][2 * n2 + 1][2 * h + 1]);
                  } else {
                    gs = __ldcg(reinterpret_cast<const float2*>(at(s, pairs[mi][h], col)));
                    us = __ldcg(reinterpret_cast<const float2*>(at(s, pairs[mi][h], p.n + col)));
                  }
                  gate = s == 0 ? gs : make_float2(__fadd_rn(gate.x, gs.x), __fadd_rn(gate.y, gs.y));
                  up = s == 0 ? us : make_float2(__fadd_rn(up.x, us.x), __fadd_rn(up.y, us.y));
                }
                acc[mi][2 * n2][2 * h] = gate.x, acc[mi][2 * n2][2 * h + 1] = gate.y;
                acc[mi][2 * n2 + 1][2 * h] = up.x, acc[mi][2 * n2 + 1][2 * h + 1] = up.y;
              }
            }
        }
      }

      if constexpr (S::kGateUp) {
        // h = silu(gate) * up in fp32, kept in acc[..][even] (gate slots)
        float row_amax[S::kMI][2] = {};
#pragma unroll
        for (int mi = 0; mi < S::kMI; ++mi)
#pragma unroll
          for (int n2 = 0; n2 < S::kNI / 2; ++n2)
#pragma unroll
            for (int c = 0; c < 4; ++c) {
              float gate = acc[mi][2 * n2][c], up = acc[mi][2 * n2 + 1][c];
              const float h = __fmul_rn(Silu(gate), up);
              acc[mi][2 * n2][c] = h;
              row_amax[mi][c / 2] = fmaxf(row_amax[mi][c / 2], fabsf(h));
            }
        float out_scale[S::kMI][2];
        if constexpr (S::kBlock) {  // amax over the CTA's 128 columns of each row: quad, then across warps_n
          float* red = reinterpret_cast<float*>(ring + S::kStages * S::kStageBytes);
#pragma unroll
          for (int mi = 0; mi < S::kMI; ++mi)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              float v = row_amax[mi][h];
              v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
              v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
              if (q == 0) red[wn * BM + wm * S::kWarpM + mi * 16 + g + 8 * h] = v;
            }
          __syncthreads();
#pragma unroll
          for (int mi = 0; mi < S::kMI; ++mi)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int r = wm * S::kWarpM + mi * 16 + g + 8 * h;
              float v = 0.f;
#pragma unroll
              for (int w = 0; w < S::kWarpsN; ++w) v = fmaxf(v, red[w * BM + r]);
              out_scale[mi][h] = v / kFp8E4M3Max;
              if (wn == 0 && q == 0) p.out_scale[static_cast<int64_t>(row0 + r) * (p.n / kMoeBlock) + n0 / kMoeBlock] = out_scale[mi][h];
            }
        }
#pragma unroll
        for (int mi = 0; mi < S::kMI; ++mi)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int64_t row = row0 + wm * S::kWarpM + mi * 16 + g + 8 * h;
            const float mul = S::kFp8 ? QuantMultiplier(out_scale[mi][h]) : 1.f;
#pragma unroll
            for (int n2 = 0; n2 < S::kNI / 2; ++n2) {
              const int col = n0 + (wn * S::kWarpN / 16 + n2) * 8 + 2 * q;
              const float h0 = acc[mi][2 * n2][2 * h], h1 = acc[mi][2 * n2][2 * h + 1];
              const int64_t off = row * p.n + col;
              if constexpr (S::kFp8) {
                const __nv_fp8x2_storage_t two = __nv_cvt_float2_to_fp8x2(make_float2(h0 * mul, h1 * mul), __NV_SATFINITE, __NV_E4M3);
                *reinterpret_cast<__nv_fp8x2_storage_t*>(static_cast<uint8_t*>(p.out) + off) = two;
              } else {
                *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(p.out) + off) = __floats2bfloat162_rn(h0, h1);
              }
            }
          }
      } else {
        // down rows: fp32 per pair (padding rows dropped)
#pragma unroll
        for (int mi = 0; mi < S::kMI; ++mi)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int pair = p.sorted_pairs[row0 + wm * S::kWarpM + mi * 16 + g + 8 * h];
            if (pair < 0) continue;
            float* dst = static_cast<float*>(p.out) + static_cast<int64_t>(pair) * p.n;
#pragma unroll
            for (int ni = 0; ni < S::kNI; ++ni) {
              const int col = n0 + wn * S::kWarpN + ni * 8 + 2 * q;
              if (col >= p.n) continue;
              *reinterpret_cast<float2*>(dst + col) = make_float2(acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
            }
          }
      }
    }
  }
  CpAsyncWait<0>();
}

}  // namespace hpc::moe
