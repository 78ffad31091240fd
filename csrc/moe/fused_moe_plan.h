// Host-side plan of the CUDA fused_moe pipeline: the M tile, the gate-up split-K and the workspace layout, pure
// functions of the shapes (one source of truth: FusedMoeWorkspaceBytes, the launcher, the GEMM tile shapes and
// the bindings all come from here).
//
// Sorted space: the T*k (token, slot) pairs whose expert is local are grouped by expert; each expert's group
// is padded to a multiple of the M tile, so tile i always covers sorted rows [i*BM, (i+1)*BM) and the tile
// list only has to name its expert. Padding slots hold pair -1.
//   tiles(counts) = sum_e ceil(c_e / BM) <= min(P, floor((P + E*(BM-1)) / BM)) =: max_tiles,  P = T*k
// (sum c_e <= P, and every non-empty expert has >= 1 pair). The GEMM grids are sized by max_tiles; CTAs past
// the real count (written by the align kernel) exit at once.
//
// Workspace (bytes, every section 256-aligned from the workspace base):
//   header        int32[64]             [0] = number of tiles
//   tile_expert   int32[max_tiles]      local expert of each tile
//   sorted_pairs  int32[max_rows]       pair index t*k+j of each sorted row, -1 for padding
//   token_local   int32[T]              local pairs of each token (the down GEMM's fused reduce waits for them)
//   sync          int32[T*down_blocks   arrival counters, zeroed by the prep kernel on every call:
//                   + split_slots]        [t, down N block]: down rows of token t written in that block;
//                                         [tile, gate-up N block] (split-K only): K pieces done
//   x_q           e4m3[T, H]            fp8 quant with bf16 x only: x quantized (static a13 | per token per 128)
//   x_q_scale     f32[T, H/128]         fp8_block128 with bf16 x only
//   inter         bf16|e4m3[max_rows, I] silu(gate)*up, rounded/quantized like the reference
//   inter_scale   f32[max_rows, I/128]  fp8_block128 only
//   partials      f32[split_slots * splits * 256 * acc]  split-K only: each K piece's fp32 gate/up tile, stored
//                                         in register order (thread t of every piece owns the same elements)
//   down          f32[T*k, H]           expert output of each local pair (rows of other ranks' pairs unused)
#pragma once

#include <algorithm>
#include <cstdint>

#include "csrc/moe/fused_moe.h"

namespace hpc::moe {

// ---- tile shapes shared by the planner and the GEMM kernels (moe_gemm.cuh)
constexpr int kMoeGemmThreads = 256;  // 8 warps per GEMM CTA
constexpr int kMoeLineBytes = 128;    // K bytes of one k-tile (one pipeline stage holds one k-tile of every row)
// Gate-up: output columns of I per CTA (the CTA reads 2*BN weight rows, gate and up); block128 needs a whole
// 128-column scale block per CTA. Down: 128 columns of H.
constexpr int GateUpBlockN(MoeQuant q) { return q == MoeQuant::kFp8Block128 ? 128 : 64; }
constexpr int kDownBlockN = 128;

// The M tile: ONE function of the mean rows per local expert, avg = ceil(T*k / E):
//   avg <= 16 -> 16,  <= 32 -> 32,  else 64.
// (64 is the largest tile whose gate-up CTA tile [64 x 2*128] with fp8_block128's per-block promotion keeps
// its accumulators in registers with mma.sync; the WGMMA version will add 128.)
inline int TileM(int64_t tokens, int64_t top_k, int64_t experts) {
  const int64_t e = std::max<int64_t>(experts, 1);
  const int64_t avg = (tokens * top_k + e - 1) / e;
  return avg <= 16 ? 16 : (avg <= 32 ? 32 : 64);
}

// fp32 accumulators per thread of the gate-up CTA tile [BM x 2*BN] (8 warps): the split-K partial's unit.
inline int GateUpAccPerThread(int tile_m, MoeQuant q) { return tile_m * 2 * GateUpBlockN(q) / kMoeGemmThreads; }

// Split-K of the gate-up GEMM: ONE function of the grid the GEMM would have without it. Small batches give few
// (tile, N block) CTAs, each streaming a long weight panel alone (Hy3-like TP8, T=1: 8 tiles x 3 blocks = 24
// CTAs of 512 KB each; Qwen3-30B T=1: 96 CTAs of 256 KB), so most SMs have no load in flight. K is split in
// S pieces (S a power of two <= 8) while
//   * the gate-up grid stays <= kMoeSplitSms CTAs, one per SM: every SM keeps its second CTA slot for the
//     PDL-launched down GEMM, which issues its weight loads before waiting for gate-up (moe_gemm.cuh), and
//   * every piece keeps >= 2 k-tiles (K pieces are [z*kt/S, (z+1)*kt/S), never empty when kt >= S).
// The pieces' fp32 partials are summed in piece order by the last piece to arrive: deterministic for a shape,
// but rows are no longer bitwise independent of T when two batch sizes get different piece counts (the K
// summation order differs; S = 1 is v1's order exactly). The M tile and the N blocking never change a row.
// Examples: Hy3 TP8 fp8 T=1 -> 4 (96 CTAs of 8 k-tiles); Qwen3 fp8 T=1 -> 1 (96 CTAs: a second piece would
// push the grid past one CTA per SM); Qwen3 block128 T=1 -> 2; any T with >= 66 (tile, block) CTAs -> 1.
constexpr int64_t kMoeSplitSms = 132;  // H100 / H200 SXM
constexpr int kMoeMaxSplits = 8;
inline int GateUpSplits(int64_t max_tiles, int64_t n_blocks, int64_t k_tiles) {
  int s = 1;
  while (s < kMoeMaxSplits && max_tiles * n_blocks * s * 2 <= kMoeSplitSms && k_tiles >= 4 * s) s *= 2;
  return s;
}

// L2 prefetch of the gate-up weights by the prep kernel (small batches). While the align CTA builds the tile list
// and the gate-up CTAs wait for it (~3 us in which DRAM would idle), kMoePrefetchCtas prep CTAs issue bulk L2
// prefetches of every local pair's w13 panel: equal prefixes of its gate and up halves (the rows the first gate-up
// N blocks read), in 4 KB chunks spread over the CTAs (each SM's TMA unit issues a share), kMoePrefetchBudget bytes
// in all (under half of the 50 MB L2). Returns the prefix per half (a multiple of the chunk; half_bytes = I*H*elem
// is one, as I and H are multiples of 64), or 0 when it would be < 32 KB per half (T*k > 384: DRAM is busy anyway).
// Qwen3-30B fp8 T=1: 1.5 MB (the whole 3 MB panel of each of the 8 experts); T=16: 96 KB; Hy3 TP8 T=1: 768 KB (all).
constexpr int64_t kMoePrefetchBudget = int64_t{24} << 20;
constexpr int64_t kMoePrefetchChunk = 4096;
constexpr int kMoePrefetchCtas = 128;
inline int64_t GateUpPrefetchPerHalf(int64_t pairs, int64_t half_bytes) {
  if (pairs <= 0 || half_bytes % kMoePrefetchChunk != 0) return 0;
  const int64_t h = std::min(half_bytes, kMoePrefetchBudget / (2 * pairs) / kMoePrefetchChunk * kMoePrefetchChunk);
  return h >= 32 * 1024 ? h : 0;
}

struct MoePlan {
  int tile_m = 16;
  int splits = 1;                 // gate-up K pieces
  int64_t pairs = 0, max_tiles = 0, max_rows = 0;
  int64_t up_blocks = 0, down_blocks = 0, up_k_tiles = 0;  // gate-up / down N blocks, gate-up k-tiles
  int64_t split_slots = 0;        // max_tiles * up_blocks when split, else 0
  int64_t header = 0, tile_expert = 0, sorted_pairs = 0, token_local = 0, sync = 0, sync_bytes = 0, x_q = 0,
          x_q_scale = 0, inter = 0, inter_scale = 0, partials = 0, down = 0, total = 0;
  int64_t reduce_count() const { return sync; }                                   // int32[T, down_blocks]
  int64_t split_count(int64_t tokens) const { return sync + tokens * down_blocks * 4; }  // int32[split_slots]
};

constexpr int kMoeHeaderInts = 64;

inline int64_t AlignUp256(int64_t b) { return (b + 255) / 256 * 256; }

inline MoePlan MakeMoePlan(int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden, int64_t inter,
                           MoeQuant quant) {
  MoePlan p;
  p.tile_m = TileM(tokens, top_k, experts);
  p.pairs = tokens * top_k;
  const int64_t bm = p.tile_m;
  p.max_tiles = std::min(p.pairs, (p.pairs + experts * (bm - 1)) / bm);
  p.max_rows = p.max_tiles * bm;
  const bool fp8 = quant != MoeQuant::kNone, block = quant == MoeQuant::kFp8Block128;
  const int64_t elem = fp8 ? 1 : 2;
  p.up_blocks = (inter + GateUpBlockN(quant) - 1) / GateUpBlockN(quant);
  p.down_blocks = (hidden + kDownBlockN - 1) / kDownBlockN;
  p.up_k_tiles = (hidden * elem + kMoeLineBytes - 1) / kMoeLineBytes;
  p.splits = GateUpSplits(p.max_tiles, p.up_blocks, p.up_k_tiles);
  p.split_slots = p.splits > 1 ? p.max_tiles * p.up_blocks : 0;
  int64_t at = 0;
  auto take = [&at](int64_t bytes) {
    const int64_t off = at;
    at += AlignUp256(bytes);
    return off;
  };
  p.header = take(kMoeHeaderInts * 4);
  p.tile_expert = take(p.max_tiles * 4);
  p.sorted_pairs = take(p.max_rows * 4);
  p.token_local = take(tokens * 4);
  p.sync_bytes = AlignUp256((tokens * p.down_blocks + p.split_slots) * 4);
  p.sync = take(p.sync_bytes);
  p.x_q = take(fp8 ? tokens * hidden : 0);
  p.x_q_scale = take(block ? tokens * (hidden / kMoeBlock) * 4 : 0);
  p.inter = take(p.max_rows * inter * elem);
  p.inter_scale = take(block ? p.max_rows * (inter / kMoeBlock) * 4 : 0);
  p.partials = take(p.split_slots * p.splits * kMoeGemmThreads * GateUpAccPerThread(p.tile_m, quant) * 4);
  p.down = take(p.pairs * hidden * 4);
  p.total = at;
  return p;
}

}  // namespace hpc::moe
