// Host-side plan of the CUDA fused_moe pipeline: the M tile (which also picks the path) and the workspace
// layout, pure functions of the shapes (one source of truth: FusedMoeWorkspaceBytes, the launcher and the
// bindings all call MakeMoePlan).
//
// Three paths, chosen by the M tile (TileM below):
//   stream (M tile 8, T*k <= 32 at <= 2 rows per expert): two kernels that stream each hit expert's weights
//                                once against its few tokens, routing/quant/reduce folded in (fused_moe_stream.cu).
//   tiled (v1, M tile 16/32/64): hand-written mma.sync GEMMs over padded per-expert tiles (fused_moe.cu).
//   grouped (M tile 128):        CUTLASS sm90 grouped GEMMs over unpadded per-expert row ranges
//                                (fused_moe_grouped.cu, grouped_gemm_sm90.cu).
//
// Tiled path. Sorted space: the T*k (token, slot) pairs whose expert is local are grouped by expert; each
// expert's group is padded to a multiple of the M tile, so tile i always covers sorted rows [i*BM, (i+1)*BM)
// and the tile list only has to name its expert. Padding slots hold pair -1.
//   tiles(counts) = sum_e ceil(c_e / BM) <= min(P, floor((P + E*(BM-1)) / BM)) =: max_tiles,  P = T*k
// (sum c_e <= P, and every non-empty expert has >= 1 pair). The GEMM grids are sized by max_tiles; CTAs past
// the real count (written by the align kernel) exit at once.
// Workspace (bytes, every section 256-aligned from the workspace base):
//   header        int32[64]             [0] = number of tiles
//   tile_expert   int32[max_tiles]      local expert of each tile
//   sorted_pairs  int32[max_rows]       pair index t*k+j of each sorted row, -1 for padding
//   x_q           e4m3[T, H]            fp8 quant with bf16 x only: x quantized (static a13 | per token per 128)
//   x_q_scale     f32[T, H/128]         fp8_block128 with bf16 x only
//   inter         bf16|e4m3[max_rows, I] silu(gate)*up, rounded/quantized like the reference
//   inter_scale   f32[max_rows, I/128]  fp8_block128 only
//   down          f32[T*k, H]           expert output of each local pair (rows of other ranks' pairs unused)
//   up_partial    f32[S, T*k, 2I]       gate-up K splits (S = MoeUpSplits > 1 only): raw sums per split and pair
//   up_arrivals   int32[max_tiles * I/BN]  splits arrived per gate-up unit, zeroed by the align kernel
//
// Grouped path. Sorted rows are the local pairs grouped by expert (stable by pair index), NOT padded: expert e
// owns rows [expert_first[e], expert_first[e] + expert_count[e]), at most P rows in all.
//   header        int32[64]             [0] = number of local rows
//   expert_count  int32[E]
//   expert_first  int32[E]
//   sorted_pairs  int32[P]              pair of each sorted row
//   pair_row      int32[P]              sorted row of each pair, -1 for another rank's expert (the reduce)
//   align_counts  int32[kAlignMaxCtas, E]  local pairs per expert in each chunk of the multi-CTA align (AlignCtas)
//   gemm_args     2 x E x kGroupedGemmArgsBytesPerExpert   per-group arguments of GEMM1 and GEMM2
//   gemm_ws       kGroupedGemmWorkspaceBytes               CUTLASS's TMA descriptors (the GEMMs run in turn)
//   rows          e4m3|bf16[P, H] then bf16[P, H]   A of GEMM1 (x's rows gathered), then D of GEMM2
//                                       (down rows): A is dead once GEMM1 is done
//   rows_scale    f32[P, H/128]         fp8_block128 only: A's scales (per row per 128 columns, K-major)
//   x_q           e4m3[T, H]            fp8 quant with bf16 x, and the row gather only (HPC_XLA_MOE_GATHER=rows):
//                                       x quantized once per token (then gathered); the token gather needs none
//   x_q_scale     f32[T, H/128]         fp8_block128 with bf16 x and the row gather only
//   gate_up       bf16[P, 2I]           D of GEMM1 (none where the gate-up epilogue computes the activation)
//   inter         bf16|e4m3[P, I]       silu(gate)*up, rounded/quantized like the reference (A of GEMM2)
//   inter_scale   f32[P, I/128]         fp8_block128 only
//
// Stream path. No align, no sorted rows: each kernel finds the hit experts and their pairs from topk_ids itself.
//   header        int32[64]             (unused)
//   inter         [P, I] per pair:      e4m3 (fp8_tensor, quantized with a2) | bf16 (none) | f32 (fp8_block128:
//                                       the down kernel quantizes it per 128 columns, as the reference does)
#pragma once

#include <algorithm>
#include <cstdint>

#include "csrc/moe/fused_moe.h"
#include "csrc/moe/grouped_gemm_sm90.h"

namespace hpc::moe {

// HPC_XLA_MOE_PATH=v1|grouped|stream forces a path for A/B runs (read once; unset: by tile). Anything else is an
// error reported by ValidateFusedMoeCuda.
enum class MoePathChoice : int32_t { kAuto = 0, kV1 = 1, kGrouped = 2, kStream = 3, kInvalid = 4 };
MoePathChoice MoePathFromEnv();  // fused_moe_validate.cc

constexpr int kGroupedTileM = 128;
constexpr int kStreamTileM = 8;        // the stream path's marker: token columns per MMA (n8)
constexpr int kStreamMaxPairs = 512;   // T*k it can take: each CTA holds the ids and its per-pair partials on chip
// The stream path by default: P <= 32 pairs with at most 2 rows per local expert (T <= 4 at top-8 over >= 16
// experts). Measured on the H200 against the tiled path (bench/NOTES.md, session 12): Qwen3 fp8 T=2 / 4 33.6 / 57.2
// against 36.7 / 60.7 us, bf16 45.6 / 71.5 against 49.0 / 82.0, Hy3-TP8 23.8 / 37.1 against 35.4 / 42.7, Hy3-EP8
// (24 local experts, avg 2 at T=4) 34.0 / 35.4 against 49.5 / 51.0; Mixtral T=4 (avg 1) equal; it lost at avg 4
// (Mixtral T=16: 839 against 654 us) and at Qwen3 fp8 T=16 (P = 128: 121.8 against 119.1).
constexpr int kStreamAutoPairs = 32;
constexpr int kStreamAutoAvg = 2;

// The M tile: ONE function of the pairs P = T*k, the mean rows per local expert avg = ceil(P / E) and the quant:
//   P <= 32 and avg <= 2, not fp8_block128 -> 8 (stream path: the decode regime, two kernels instead of five),
//   avg > GroupedFromAvg(quant) -> 128 (grouped path),
//   else avg <= 8 -> 16, else 32 (tiled path; avg > 8 there is bf16 only).
// The grouped path starts at avg > 32 for bf16, > 8 for fp8_tensor, > 3 for fp8_block128: where its WGMMA GEMMs
// measured ahead of the tiled path's mma.sync ones on the H200 (bench/NOTES.md, fused_moe v5 and v6): Qwen3 fp8
// T=256 (avg 16) 223 -> 195 us, Hy3-EP8 T=64 (avg 22) 166 -> 146, DeepSeek-V3 EP8 block128 T=16 / 64 (avg 4 / 16)
// 203 -> 172 / 401 -> 344; at fp8 avg <= 4 (Qwen3, Hy3-TP8 T=16 / 64) and bf16 avg 16 (Qwen3 T=256) the tiled
// path stays ahead. (fp8 operands cost the tiled path an e4m3 -> f16 conversion per element: Hopper has no fp8
// mma.sync, ptxas expands it into F2FP + HMMA.) M tile 64 of the tiled path is still built, for
// HPC_XLA_MOE_PATH=v1. The grouped GEMMs' own CTA tile is GroupedCtaRows below.
// The stream path measured slower than the tiled one from P = 64 (Qwen3 fp8 T=8-16), at 4 rows per expert (Mixtral
// T=16) and on fp8_block128 (DeepSeek-V3 EP8), so the default keeps it to P <= 32 at <= 2 rows per expert.
// HPC_XLA_MOE_PATH overrides the path: v1 takes the tiled path at any size (16 / 32 / 64 by avg, never stream),
// grouped always takes 128, stream takes 8 whenever P <= 512 (else the default choice).
inline int64_t GroupedFromAvg(MoeQuant quant) {
  return quant == MoeQuant::kNone ? 32 : (quant == MoeQuant::kFp8Tensor ? 8 : 3);
}

// The tiled path's 32-row tile from avg > 8 (was > 16): at avg 16 the 16-row tile gave ~45% of the experts a second,
// mostly empty tile that read their weights again. Measured on the H200 (bench/NOTES.md session 25, 2 rounds, bf16):
// avg 16 -- Mixtral T=64 766 -> 697 us, Qwen3 T=256 339 -> 328; avg 8 -- Mixtral T=32 665 -> 691, Qwen3 T=128 304
// -> 319 (so 16 rows stay up to avg 8). HPC_XLA_MOE_TILED_M=16|32 forces the tiled path's M tile wherever the
// tiled path runs -- picked by default or forced by HPC_XLA_MOE_PATH=v1 (A/B runs, and tests of a given tile).
int MoeTiledMFromEnv();  // fused_moe_validate.cc: 0 unset, 16 or 32, -1 anything else (validated there)

inline int TileM(int64_t tokens, int64_t top_k, int64_t experts, MoeQuant quant) {
  const int64_t e = std::max<int64_t>(experts, 1);
  const int64_t pairs = tokens * top_k;
  const int64_t avg = (pairs + e - 1) / e;
  const int v1 = avg <= 16 ? 16 : (avg <= 32 ? 32 : 64);
  const int forced_m = MoeTiledMFromEnv();
  const int tiled = avg > GroupedFromAvg(quant) ? kGroupedTileM : forced_m > 0 ? forced_m : (avg <= 8 ? 16 : 32);
  switch (MoePathFromEnv()) {
    case MoePathChoice::kV1: return forced_m > 0 ? forced_m : v1;
    case MoePathChoice::kGrouped: return kGroupedTileM;
    case MoePathChoice::kStream: return pairs <= kStreamMaxPairs ? kStreamTileM : tiled;
    default:
      return pairs <= kStreamAutoPairs && avg <= kStreamAutoAvg && quant != MoeQuant::kFp8Block128 ? kStreamTileM
                                                                                                  : tiled;
  }
}

// Rows of the grouped GEMMs' CTA tile: 64 (ping-pong) for fp8 when the expected rows per expert
// ceil(P / experts_global) are <= 64, else 128 (cooperative). experts_global (the routing's expert count, 0:
// unknown -> the local count) matters under expert parallelism, where only P * E / E_global pairs are local: the
// path (TileM) cannot use it, the workspace size being a function of the local shapes, but this tile does not
// change the workspace. Measured (H200, bench/NOTES.md fused_moe v6), 64 against 128 rows: fp8_tensor Hy3-TP8 T=1024
// (43 rows) 251 vs 282 us, Hy3-EP8 T=1024 (43) 164 vs 182, Qwen3 T=1024 (64) 253 vs 253; block128 DeepSeek-V3 EP8
// T=1024 (32) 410 vs 510; bf16 lost at every size (Qwen3 T=1024 429 vs 396, Mixtral T=256 968 vs 745), so bf16
// keeps 128.
constexpr int kGroupedNarrowMaxRows = 64;

// Grouped path, fp8 with bf16 x: quantize x once per token (the quant kernel, then the gather copies fp8 rows) or per
// row inside the gather. Once per token moves 3H bytes per token and then 2H per local row; per row 3H per local
// row: per row wins while the local rows R < 3T. R is estimated as P * E_local / E_global (the routing is unknown on
// the host): without expert parallelism R = P = k*T (quantize once), at EP8 with top-8 R ~ T (per row). Measured on
// the H200 (bench/NOTES.md, session 20), once per token against the old per-row gather: Hy3-TP8 T=4096 605 -> 557 us,
// Qwen3 fp8 556 -> 543; Hy3-EP8 T=256 / 1024 / 4096 +6.6 / +4.5 / +9.7 us. This rule (per row where R < 3T) then gave
// the EP rows back (session 21, with the new reduce and fast silu in the same binary: Hy3-EP8 T=256 / 1024 / 4096
// 151.2 / 170.8 / 324.2 -> 146.3 / 166.4 / 295.8 us; DeepSeek-V3 EP8 T=4096: the 30 us quant kernel gone, the gather
// 17 -> 26.5 us).
// experts_global: the routing's expert count (num_experts_global, or E + expert_offset when not given).
inline bool GroupedQuantizeInGather(int64_t tokens, int64_t pairs, int64_t experts, int64_t experts_global) {
  return pairs * experts < 3 * tokens * std::max<int64_t>(experts_global, experts);
}

// HPC_XLA_MOE_GATHER (read once; experiment 28): how the grouped path fills its sorted rows. Unset or "tokens": a
// warp per (token, segment) reads the token's row once, quantizes it once (fp8 with bf16 x) and stores it into each
// of its local rows (align's pair_row), so neither the quant kernel nor the x_q round trip runs; "rows" (the form
// before session 31): a warp per (sorted row, segment) copies (or quantizes) its token's row, after the quant kernel
// where GroupedQuantizeInGather says once per token. Anything else -> kInvalid (fused_moe_validate.cc). Measured on
// the H100 (session 31, us, rows -> tokens): Qwen3-30B fp8 T=4096 537.8 -> 527.9, bf16 879.0 -> 847.8, Hy3-TP8 fp8
// T=4096 616.2 -> 591.5, T=1024 291.1 -> 286.0; within ~1% either way elsewhere (Qwen3 fp8 T=1024 +2.6, Hy3-EP8
// T=4096 +3.6, one round each).
enum class GroupedGather { kRows, kTokens, kInvalid };
GroupedGather GroupedGatherFromEnv();
// The token form where asked for and a token's slots fit one warp's lanes (top_k <= 32).
inline bool GroupedGatherByTokens(int64_t top_k) {
  return GroupedGatherFromEnv() == GroupedGather::kTokens && top_k <= 32;
}

inline int GroupedCtaRows(int64_t pairs, int64_t experts, int64_t experts_global, MoeQuant quant) {
  const int64_t e = std::max<int64_t>(experts_global > 0 ? experts_global : experts, 1);
  const int64_t rows = (pairs + e - 1) / e;
  return quant != MoeQuant::kNone && rows <= kGroupedNarrowMaxRows ? 64 : kGroupedTileM;
}

// Stream path, down kernel: K splits per (expert, 16 output rows) task, a pure function of the shapes (so a
// token's result never depends on the other tokens). Splits while the per-pair partials [splits, P, 16] f32 fit in
// 32 KB and, with `by_hits`, while the tasks (at most min(P, E) hit experts x splits) would leave the CTA's `warps`
// idle and every split keeps a 128-column group of I; without it (the 8-warp CTAs of H > 16 x SMs), while every split
// keeps >= 2 groups and one expert's splits do not outnumber the warps, whatever the hit count: a warp then runs
// several tasks back to back when many experts are hit, and the splits keep the warps busy when few are (expert
// parallelism: ~1 of 24 local experts at T=1 top-8 of 192). Measured on the H200 (bench/NOTES.md, session 12):
// the by-hits rule is the better one for Qwen3 (T=4 fp8 52.5 against 55.1 us, bf16 76.2 against 78.6), the other for
// the Hy3 EP8 shape on the 8-warp CTAs (T=1 13.2 us against 17.5 with the 16-warp CTAs and by-hits splits).
inline int StreamDownSplits(int64_t pairs, int64_t experts, int64_t inter, int warps, bool by_hits) {
  const int64_t hits = std::max<int64_t>(1, std::min(pairs, experts));
  const int64_t groups = (inter + 127) / 128;
  int kp = 1;
  if (by_hits) {
    while (kp < 16 && 2 * kp * hits <= warps && 2 * kp * pairs <= kStreamMaxPairs && 2 * kp <= groups) kp *= 2;
  } else {
    while (kp < warps && 2 * kp * pairs <= kStreamMaxPairs && 4 * kp <= groups) kp *= 2;
  }
  return kp;
}

// Tiled path, gate-up GEMM: K splits per (M tile, N block) unit, a function of the shapes only (never of T or the
// routing, so a row's sums never depend on the other tokens). The persistent GEMM grid balances work items of equal
// size, at best to within one item per CTA; a shape whose units are few (N = 2I small, E small) against the grid
// (~2 CTAs x 132 SMs on an H200: kNominalGemmCtas) has too few items to balance (Hy3-TP8: 3 N blocks x 192 experts,
// 93 hit at T=16: 279 units of 512 KB for 264 CTAs). Such shapes split K into up to 8 parts of >= 4 K tiles until
// the units at full expert coverage reach 8 x the grid; fp8_block128 (one CTA per SM, 256-row N blocks) at most 2:
// DeepSeek-V3 EP8 T=1 / 2 / 4 / 8 ran 58.6 / 84.9 / 85.5 / 109.1 us unsplit, 41.3 / 65.6 / 66.5 / 117.3 with 2
// splits, 39.2 / 71.1 / 71.7 / 127.5 with 8 (H200, session 17). fp8_tensor never splits: 4 splits had helped its
// mma.sync gate-up (Hy3-TP8 T=16 111 -> 99 us, session 17), but against the wgmma gate-up that replaced it they cost
// Hy3-TP8 T=8 / 16 / 32 / 64 53.3 / 89.4 / 118.3 / 149.3 us vs 48.7 / 80.1 / 113.4 / 147.6 unsplit, Hy3-EP8 T=8 / 16
// 49.1 / 49.8 vs 44.8 / 45.9 (2 splits in between; H200, session 21). bf16 keeps the rule (no benchmark shape has
// few enough units to measure it again). HPC_XLA_MOE_UP_SPLITS=N (1-8) forces N (A/B runs).
constexpr int kNominalGemmCtas = 264;
constexpr int kMaxUpSplits = 8;
constexpr int kMaxUpSplitsBlock128 = 2;
inline int MaxUpSplits(MoeQuant quant) {
  return quant == MoeQuant::kFp8Block128 ? kMaxUpSplitsBlock128 : quant == MoeQuant::kFp8Tensor ? 1 : kMaxUpSplits;
}
int MoeUpSplitsFromEnv();  // fused_moe_validate.cc: 0 unset, else the forced count (validated there)

inline int TiledKTiles(int64_t hidden, MoeQuant quant) {
  return static_cast<int>((hidden * (quant == MoeQuant::kNone ? 2 : 1) + 127) / 128);
}
inline int TiledUpNBlocks(int64_t inter, MoeQuant quant) {
  const int64_t bn = quant == MoeQuant::kFp8Block128 ? 128 : 64;  // GemmShape<kGateUp>::kBN
  return static_cast<int>((inter + bn - 1) / bn);
}

// K tiles per split: the splits cover K with equal parts except possibly a shorter last one.
inline int SplitKTiles(int k_tiles, int splits) { return (k_tiles + splits - 1) / splits; }

inline int MoeUpSplits(int64_t experts, int64_t hidden, int64_t inter, MoeQuant quant) {
  const int k_tiles = std::max(1, TiledKTiles(hidden, quant));
  const int most = MaxUpSplits(quant);
  const int cap = std::max(1, std::min(most, k_tiles / 4));
  const int forced = MoeUpSplitsFromEnv();
  const int64_t units = static_cast<int64_t>(TiledUpNBlocks(inter, quant)) * experts;
  int s = 1;
  if (forced > 0) {
    s = std::min(forced, k_tiles);
  } else if (units < 4 * kNominalGemmCtas) {
    while (s < cap && s * units < 8 * kNominalGemmCtas) s *= 2;
  }
  // As many splits as parts of SplitKTiles(k_tiles, s) cover K: no split is ever empty (the GEMM's loader and math
  // walk every item's K range in lockstep and need at least one stage per item).
  return (k_tiles + SplitKTiles(k_tiles, s) - 1) / SplitKTiles(k_tiles, s);
}

// The grouped path's align runs on several CTAs, each a contiguous chunk of >= kAlignChunkMin pairs, at most
// kAlignMaxCtas: one CTA sorted T*k = 32768 pairs in ~43 us on the H200 (session 18), bound by its 2 scattered
// 4-byte stores per pair from one SM. A count kernel first writes each chunk's per-expert counts; every CTA then
// places its pairs after those of the earlier chunks: the same order (by expert, stable by pair index) as one CTA.
// HPC_XLA_MOE_ALIGN_CTAS=1 forces one CTA (A/B runs and the bitwise test).
constexpr int kAlignChunkMin = 1024;
constexpr int kAlignMaxCtas = 128;
int MoeAlignCtasFromEnv();  // fused_moe_validate.cc: 0 unset, else the forced count (1)
inline int AlignCtas(int64_t pairs) {
  // <= 2 chunks (T*k <= 2048, e.g. Qwen3 T=256 at top-8): one CTA -- there the count kernel's launch cost about what
  // the second CTA saved (H200, session 18: +1..3 us at T=256, -15..79 us at T = 4096-16384)
  if (MoeAlignCtasFromEnv() == 1 || pairs <= 2 * kAlignChunkMin) return 1;
  return static_cast<int>(std::min<int64_t>((pairs + kAlignChunkMin - 1) / kAlignChunkMin, kAlignMaxCtas));
}

struct MoePlan {
  int tile_m = 16;
  int up_splits = 1;  // tiled path: gate-up K splits (MoeUpSplits)
  bool grouped = false;
  bool stream = false;
  bool act_in_epilogue = false;  // grouped: no gate_up room (the launcher checks it agrees)
  int64_t pairs = 0, max_tiles = 0, max_rows = 0;
  // both paths
  int64_t header = 0, sorted_pairs = 0, inter = 0, inter_scale = 0, total = 0;
  int64_t x_q = 0, x_q_scale = 0;  // fp8 with bf16 x
  // tiled path
  int64_t tile_expert = 0, down = 0, up_partial = 0, up_arrivals = 0, up_units = 0;
  // grouped path
  int64_t expert_count = 0, expert_first = 0, pair_row = 0, align_counts = 0, gemm_args = 0, gemm_ws = 0, rows = 0, rows_scale = 0,
          gate_up = 0;
};

constexpr int kMoeHeaderInts = 64;

inline int64_t AlignUp256(int64_t b) { return (b + 255) / 256 * 256; }

// act_in_epilogue (grouped path only; FusedMoeActInEpilogue): the gate-up GEMM writes the intermediate itself, so
// the bf16 gate_up rows (T*k x 2I: the largest region after the rows, ~40% of the total at Qwen3 shapes) get no room.
inline MoePlan MakeMoePlan(int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden, int64_t inter,
                           MoeQuant quant, bool act_in_epilogue = false) {
  MoePlan p;
  p.tile_m = TileM(tokens, top_k, experts, quant);
  p.grouped = p.tile_m == kGroupedTileM;
  p.stream = p.tile_m == kStreamTileM;
  p.pairs = tokens * top_k;
  const bool fp8 = quant != MoeQuant::kNone, block = quant == MoeQuant::kFp8Block128;
  int64_t at = 0;
  auto take = [&at](int64_t bytes) {
    const int64_t off = at;
    at += AlignUp256(bytes);
    return off;
  };
  p.header = take(kMoeHeaderInts * 4);
  if (p.stream) {
    p.inter = take(p.pairs * inter * (block ? 4 : (fp8 ? 1 : 2)));
  } else if (p.grouped) {
    p.max_rows = p.pairs;
    p.expert_count = take(experts * 4);
    p.expert_first = take(experts * 4);
    p.sorted_pairs = take(p.pairs * 4);
    p.pair_row = take(p.pairs * 4);
    p.align_counts = take(kAlignMaxCtas * experts * 4);
    p.gemm_args = take(2 * experts * kGroupedGemmArgsBytesPerExpert);
    p.gemm_ws = take(kGroupedGemmWorkspaceBytes);
    p.rows = take(p.pairs * hidden * 2);  // bf16 down rows >= A rows (1 or 2 bytes)
    p.rows_scale = take(block ? p.pairs * (hidden / kMoeBlock) * 4 : 0);
    // the token gather quantizes x itself (fused_moe.cu runs no quant kernel then): no x_q
    const bool x_q = !GroupedGatherByTokens(top_k);
    p.x_q = take(fp8 && x_q ? tokens * hidden : 0);
    p.x_q_scale = take(block && x_q ? tokens * (hidden / kMoeBlock) * 4 : 0);
    p.act_in_epilogue = act_in_epilogue;
    p.gate_up = take(act_in_epilogue ? 0 : p.pairs * 2 * inter * 2);
    p.inter = take(p.pairs * inter * (fp8 ? 1 : 2));
    p.inter_scale = take(block ? p.pairs * (inter / kMoeBlock) * 4 : 0);
    p.down = p.rows;
  } else {
    const int64_t bm = p.tile_m;
    p.max_tiles = std::min(p.pairs, (p.pairs + experts * (bm - 1)) / bm);
    p.max_rows = p.max_tiles * bm;
    p.tile_expert = take(p.max_tiles * 4);
    p.sorted_pairs = take(p.max_rows * 4);
    p.x_q = take(fp8 ? tokens * hidden : 0);
    p.x_q_scale = take(block ? tokens * (hidden / kMoeBlock) * 4 : 0);
    p.inter = take(p.max_rows * inter * (fp8 ? 1 : 2));
    p.inter_scale = take(block ? p.max_rows * (inter / kMoeBlock) * 4 : 0);
    p.down = take(p.pairs * hidden * 4);
    p.up_splits = MoeUpSplits(experts, hidden, inter, quant);
    if (p.up_splits > 1) {
      p.up_units = p.max_tiles * TiledUpNBlocks(inter, quant);
      p.up_partial = take(static_cast<int64_t>(p.up_splits) * p.pairs * 2 * inter * 4);
      p.up_arrivals = take(p.up_units * 4);
    }
  }
  p.total = at;
  return p;
}

// The workspace that serves every T' <= tokens: what a caller preallocating for its largest batch must allocate
// (fused_moe_workspace_size; the per-call check asks only for MakeMoePlan(T).total). The per-call size is not
// monotone in T: it drops where the path changes (Qwen3-30B fp8: T = 128 on the tiled path, f32 down rows per pair,
// 10.9 MB; T = 129 on the grouped path, bf16 rows, 8.9 MB) and where the activation moves into the gate-up epilogue
// (`act(T)`: the grouped CTA tile grows from 64 to 128 rows with T, the gate_up rows drop out). Within one class
// (M tile, act) it grows with T, and the class only grows with T, so the maximum over T' <= tokens is the larger of
// the size at `tokens` and the size at the last T' of each smaller class, found by bisection (a few dozen plans:
// allocation time, not the per-call path).
template <class ActFn>
int64_t MaxMoeWorkspaceBytes(int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden, int64_t inter,
                             MoeQuant quant, ActFn&& act) {
  auto plan_total = [&](int64_t t) { return MakeMoePlan(t, top_k, experts, hidden, inter, quant, act(t)).total; };
  auto key = [&](int64_t t) { return 2 * TileM(t, top_k, experts, quant) + (act(t) ? 1 : 0); };
  int64_t best = plan_total(tokens);
  const int top = key(tokens);
  for (const int v : {kStreamTileM, 16, 32, 64, kGroupedTileM}) {
    for (const int k : {2 * v, 2 * v + 1}) {
      if (k >= top) break;
      int64_t lo = 0, hi = tokens;  // the last T' with key(T') <= k lies in [lo, hi): key(hi) > k
      while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        (key(mid) <= k ? lo : hi) = mid;
      }
      if (lo >= 1 && key(lo) == k) best = std::max(best, plan_total(lo));
    }
  }
  return best;
}

}  // namespace hpc::moe

namespace hpc {
// The plan of one call (fused_moe_validate.cc): MakeMoePlan with the activation's place as the grouped launcher
// will pick it (FusedMoeActInEpilogue from num_experts_global as given and w13_interleaved). The validator sizes
// the workspace check with it and FusedMoeCuda runs it.
moe::MoePlan FusedMoePlanOf(const FusedMoeArgs& a);
}  // namespace hpc
