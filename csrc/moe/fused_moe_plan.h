// Host-side plan of the CUDA fused_moe pipeline: the M tile and the workspace layout, pure functions of the
// shapes (one source of truth: FusedMoeWorkspaceBytes, the launcher and the bindings all call MakeMoePlan).
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
//   x_q           e4m3[T, H]            fp8 quant with bf16 x only: x quantized (static a13 | per token per 128)
//   x_q_scale     f32[T, H/128]         fp8_block128 with bf16 x only
//   inter         bf16|e4m3[max_rows, I] silu(gate)*up, rounded/quantized like the reference
//   inter_scale   f32[max_rows, I/128]  fp8_block128 only
//   down          f32[T*k, H]           expert output of each local pair (rows of other ranks' pairs unused)
#pragma once

#include <algorithm>
#include <cstdint>

#include "csrc/moe/fused_moe.h"

namespace hpc::moe {

// The M tile: ONE function of the mean rows per local expert, avg = ceil(T*k / E):
//   avg <= 16 -> 16,  <= 32 -> 32,  else 64.
// (64 is the largest tile whose gate-up CTA tile [64 x 2*128] with fp8_block128's per-block promotion keeps
// its accumulators in registers with mma.sync; the WGMMA version will add 128.)
inline int TileM(int64_t tokens, int64_t top_k, int64_t experts) {
  const int64_t e = std::max<int64_t>(experts, 1);
  const int64_t avg = (tokens * top_k + e - 1) / e;
  return avg <= 16 ? 16 : (avg <= 32 ? 32 : 64);
}

struct MoePlan {
  int tile_m = 16;
  int64_t pairs = 0, max_tiles = 0, max_rows = 0;
  int64_t header = 0, tile_expert = 0, sorted_pairs = 0, x_q = 0, x_q_scale = 0, inter = 0, inter_scale = 0,
          down = 0, total = 0;
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
  int64_t at = 0;
  auto take = [&at](int64_t bytes) {
    const int64_t off = at;
    at += AlignUp256(bytes);
    return off;
  };
  p.header = take(kMoeHeaderInts * 4);
  p.tile_expert = take(p.max_tiles * 4);
  p.sorted_pairs = take(p.max_rows * 4);
  p.x_q = take(fp8 ? tokens * hidden : 0);
  p.x_q_scale = take(block ? tokens * (hidden / kMoeBlock) * 4 : 0);
  p.inter = take(p.max_rows * inter * (fp8 ? 1 : 2));
  p.inter_scale = take(block ? p.max_rows * (inter / kMoeBlock) * 4 : 0);
  p.down = take(p.pairs * hidden * 4);
  p.total = at;
  return p;
}

}  // namespace hpc::moe
