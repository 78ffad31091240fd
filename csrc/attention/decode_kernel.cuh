// The decode attention kernel body (included by decode_attention.cu only).
//
// One CTA = 4 warps = 128 threads, working through a stream of 64-token tiles of (sequence, kv head) pieces:
// the persistent CTA's pieces from the plan (dynamic) or one (kv head, sequence, split) piece (static).
// K/V tiles are brought in by cp.async through a multi-stage shared-memory ring (zero-filled past the end of
// a sequence: unused cache slots are never read). All q heads of the kv head (GQA group) times q_len rows
// form M <= 64 rows, padded to MT m16 tiles (MT = 0: M <= 8, one tile with its lower half idle). Warps are
// laid out MT x WN: warp (wm, wn) owns rows
// [16 wm, 16 wm + 16) and tokens [wn TW, wn TW + TW) of every tile (TW = 64 / WN), keeps its own online softmax
// state (m, l, O) over those tokens, and the WN states are merged through shared memory at the end of a
// piece. S = Q K^T and O += P V run on mma.sync m16n8k16 (bf16 or fp16, fp32 accumulate); fp8 K/V are
// converted to fp16 pairs on the way from shared memory into fragments.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "csrc/attention/decode_plan.h"
#include "csrc/common/launch.cuh"
#include "csrc/common/mma.cuh"
#include "csrc/common/numeric.h"
#include "csrc/common/tensor_view.h"
#include "csrc/common/vec.cuh"

namespace hpc::attention {

constexpr int kDecodeThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;

struct Fp8E4M3 {};  // K/V element marker

struct DecodeParams {
  const void* q;
  const float* q_scale;
  int64_t q_stride_row, q_stride_head;
  const void* k_cache;
  const void* v_cache;
  int64_t k_block_bytes, k_head_bytes, v_block_bytes, v_head_bytes;  // cache strides in bytes
  int32_t k_row_bytes, v_row_bytes;  // token stride in bytes (a page's rows fit in int32: checked on the host)
  const int32_t* block_table;
  int64_t block_table_stride;
  int block_table_width;  // block_table.shape[1]
  const int32_t* seq_lens;
  const int32_t* plan;
  float* workspace;
  int64_t num_slots;
  void* out;
  int64_t out_stride_row, out_stride_head;
  const float* k_scale;
  const float* v_scale;
  float sm_scale;
  int64_t num_blocks;  // k_cache.shape[0]
  int batch, num_kv_heads, num_q_heads, group, q_len, rows, head_dim, page_shift, static_splits;
  DType q_dtype;
  bool dynamic, out_fp16;
};

template <int D, int MT, typename KV, typename CT>
struct DecodeShape {
  static constexpr bool kFp8 = std::is_same_v<KV, Fp8E4M3>;
  static constexpr int kKvBytes = kFp8 ? 1 : 2;
  // MT = 0: one m16 tile of which only the top 8 rows are live (GQA 8 or less at q_len 1, the common decode
  // case): the softmax, rescale and epilogue of rows 8-15 are skipped.
  static constexpr int kMTiles = MT == 0 ? 1 : MT;
  static constexpr int kHalves = MT == 0 ? 1 : 2;  // live 8-row halves of each m16 tile
  static constexpr int kWarpsM = kMTiles;
  static constexpr int kWarpsN = 4 / kMTiles;
  static constexpr int kTokensPerWarp = kTileTokens / kWarpsN;  // TW
  static constexpr int kRowBytes = D * kKvBytes;
  static constexpr int kChunksPerRow = kRowBytes / 16;
  static constexpr int kSwizzleMask = (kChunksPerRow < 8 ? kChunksPerRow : 8) - 1;
  static constexpr int kTileBytes = kTileTokens * kRowBytes;  // one of K or V
  static constexpr int kStageBytes = 2 * kTileBytes;
  // Ring of up to 96 KB (2..4 stages): bf16 D=128 gets 3 stages and still fits 2 CTAs per SM.
  static constexpr int kStages = (96 * 1024 / kStageBytes) < 2 ? 2 : ((96 * 1024 / kStageBytes) > 4 ? 4 : 96 * 1024 / kStageBytes);
  static constexpr int kQRows = 16 * kMTiles;
  static constexpr int kQBytes = kQRows * D * 2;
  static constexpr int kMlBytes = kWarpsN * kQRows * 2 * 4;
  // FinishPiece's merge buffer, rows padded by 8 floats: the warp's float2 accesses of rows g and columns 2qd put
  // the four rows of a half-warp in different banks for 16-bit K/V (2 passes a warp access, the minimum; a row
  // stride of D alone took 8). fp8's columns 4qd (+2) stay 2-way (4 passes, was 8): no even padding does better; one
  // float4 of a chunk's two pairs would (session 42's review, a CPU simulation of the mapping).
  static constexpr int kOBufStride = D + 8;
  // When the WN warps' whole O (fp32, the 8 live rows of MT 0's m16 tile) fits one ring stage, FinishPiece merges
  // through the stage the piece's last tile just left (free until the next copy fills it): every warp writes its
  // own slice at once and one pass sums them, instead of WN rounds through obuf. Only for the 8-row kernels (MT 0:
  // q_len 1 with GQA <= 8): there it gained 0.3-1.1 us on every q_len 1 row (s43c, H100), while the 16-row one
  // (MT 1, bf16) lost 0.3-1.6 us at q_len 2 with it. Not at head_dim 256 (whose kernels spill: with it ptxas
  // spilled 76 bytes in fp8 MT 0, none before).
  static constexpr int kLiveRows = 8;
  static constexpr bool kMergeInStage = MT == 0 && D <= 128 && kWarpsN * kLiveRows * D * 4 <= kStageBytes;
  static constexpr int kOBufBytes = kWarpsN > 1 && !kMergeInStage ? kQRows * kOBufStride * 4 : 0;
  static constexpr int kSmemBytes = kStages * kStageBytes + kQBytes + kMlBytes + kOBufBytes + kQRows * 4;
};

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled tile (rows of kRowBytes): XOR with the row
// keeps the 8 rows an ldmatrix phase reads in distinct bank groups.
template <class S>
__device__ __forceinline__ int SwizzledChunk(int row, int chunk) {
  return row * S::kRowBytes + ((chunk ^ (row & S::kSwizzleMask)) << 4);
}
// ldmatrix.x4 over 16 tokens x 2 chunks of a swizzled K/V tile, matrices in the order (tokens 0-7, chunk0),
// (8-15, chunk0), (0-7, chunk0 + 1), (8-15, chunk0 + 1): this lane's row address.
template <class S>
__device__ __forceinline__ uint32_t TokensByChunksX4(uint32_t tile, int tok0, int chunk0, int lane) {
  return tile + SwizzledChunk<S>(tok0 + (lane % 8) + ((lane / 8) % 2) * 8, chunk0 + lane / 16);
}
// Q tile: rows of D 16-bit elements
template <int D>
__device__ __forceinline__ int QChunk(int row, int chunk) {
  return row * D * 2 + ((chunk ^ (row & 7)) << 4);
}

// Tiles of the CTA's work, in order: the persistent CTA walks its plan pieces; a static CTA has one piece.
struct TileStream {
  PieceCursor cursor;
  Piece piece;
  int tile;
  bool valid;

  __device__ __forceinline__ void Init(const DecodeParams& p) {
    if (p.dynamic) {
      cursor = CtaPieces(p.plan, p.batch, blockIdx.x);
      valid = NextPiece(cursor, p.seq_lens, &piece);
    } else {
      const int split = blockIdx.x % p.static_splits, unit = blockIdx.x / p.static_splits;
      piece.unit = unit;
      piece.b = unit % p.batch;
      piece.h = unit / p.batch;
      piece.len = p.seq_lens[piece.b];
      const int n = TilesOf(piece.len);
      const int chunk = (n + p.static_splits - 1) / p.static_splits;
      piece.tile_begin = min(n, split * chunk);
      piece.tile_end = min(n, (split + 1) * chunk);
      piece.whole = chunk >= n;
      piece.slot = blockIdx.x;
      // a split piece with no tiles still owes the merge an (empty) partial: valid, with zero tiles
      valid = piece.whole ? n > 0 && split == 0 : true;
      cursor.end_unit = -1;
    }
    tile = piece.tile_begin;
  }
  __device__ __forceinline__ bool Empty() const { return piece.tile_end <= piece.tile_begin; }
  __device__ __forceinline__ void Advance(const DecodeParams& p) {
    if (++tile < piece.tile_end) return;
    valid = p.dynamic ? NextPiece(cursor, p.seq_lens, &piece) : false;
    tile = piece.tile_begin;
  }
};

// Who copies what: thread t copies the 16-byte chunk t % C (C chunks per row) of the tile rows t / C + i * kStep,
// i < kCopies. C divides the 128 threads for every (head_dim, K/V type), so the chunk is fixed per thread and
// everything but the block id is the same for every tile: the per-tile work is a few adds per copy. (The
// first version recomputed rows, pages, 64-bit products and divisions per chunk and tile: 1200 instructions
// per warp and tile, a third of them in the copy; ncu, bench/NOTES.md.)
template <class S>
struct CopyLayout {
  static constexpr int kStep = kDecodeThreads / S::kChunksPerRow;
  static constexpr int kCopies = kTileTokens / kStep;
};

// Block ids of the pages this thread copies from for one tile, fetched one tile before the copy (a cp.async
// whose address waits on its block-table load stalls the thread for a full memory round trip per tile; so
// does any use of the id right after the fetch: it is range-checked at copy time, a tile later).
// kOnePage (page_size 64 = the tile): one id serves every copy.
template <class S, bool kOnePage>
struct TileIds {
  int32_t id[kOnePage ? 1 : CopyLayout<S>::kCopies];

  __device__ __forceinline__ void Fetch(const DecodeParams& p, const Piece& piece, int tile) {
    using L = CopyLayout<S>;
    const int32_t* table = p.block_table + piece.b * p.block_table_stride;
    const int r0 = threadIdx.x / S::kChunksPerRow;
    const int first_page = tile << (6 - p.page_shift);  // pages are 16, 32 or 64 tokens
#pragma unroll
    for (int i = 0; i < (kOnePage ? 1 : L::kCopies); ++i) {
      const int page = first_page + ((r0 + i * L::kStep) >> p.page_shift);
      id[i] = p.block_table_width > 0 ? table[min(page, p.block_table_width - 1)] : -1;
    }
  }
};

// One tile of K and V -> a ring stage (shared address `stage`). Rows past the sequence, and pages whose block id
// lies outside the cache (possible only without HPC_XLA_CHECK), are zero-filled; their source address is kept
// inside the cache (block 0 for a bad id), so no pointer select is needed per copy.
template <class S, bool kOnePage>
__device__ __forceinline__ void LoadKvTile(const DecodeParams& p, const Piece& piece, int tile,
                                           const TileIds<S, kOnePage>& ids, uint32_t stage) {
  using L = CopyLayout<S>;
  const int chunk = threadIdx.x % S::kChunksPerRow, r0 = threadIdx.x / S::kChunksPerRow;
  const int page_mask = (1 << p.page_shift) - 1;
  const int rem = piece.len - tile * kTileTokens;  // rows of this tile inside the sequence
  const char* k_head = static_cast<const char*>(p.k_cache) + piece.h * p.k_head_bytes + chunk * 16;
  const char* v_head = static_cast<const char*>(p.v_cache) + piece.h * p.v_head_bytes + chunk * 16;
#pragma unroll
  for (int i = 0; i < L::kCopies; ++i) {
    const int row = r0 + i * L::kStep;
    const int32_t raw = ids.id[kOnePage ? 0 : i];
    const bool id_ok = raw >= 0 && raw < p.num_blocks;
    const int64_t id = id_ok ? raw : 0;
    const bool valid = row < rem && id_ok;
    const int in_page = kOnePage ? row : row & page_mask;
    const uint32_t dst = stage + SwizzledChunk<S>(row, chunk);
    CpAsync16(dst, k_head + id * p.k_block_bytes + in_page * p.k_row_bytes, valid);
    CpAsync16(dst + S::kTileBytes, v_head + id * p.v_block_bytes + in_page * p.v_row_bytes, valid);
  }
}

// q rows of the piece -> shared memory in the compute type (fp8 q dequantized with its scale). Row r of the
// tile is query j = r / group of head h * group + r % group; rows past M are zero. kPermuteD (fp8 K/V): inside
// every 16-wide d block, position 2m + i holds d = 4m + i and position 8 + 2m + i holds d = 4m + 2 + i (the
// order the fp8 K fragments come in, see ComputeTile).
template <int D, typename CT, bool kPermuteD>
__device__ __forceinline__ void LoadQ(const DecodeParams& p, const Piece& piece, char* qsmem, int q_rows) {
  for (int id = threadIdx.x; id < q_rows * (D / 8); id += kDecodeThreads) {
    const int r = id / (D / 8), chunk = id % (D / 8);
    float x[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (r < p.rows) {
      const int row = piece.b * p.q_len + r / p.group, head = piece.h * p.group + r % p.group;
      const int64_t off = row * p.q_stride_row + head * p.q_stride_head + chunk * 8;
      if (p.q_dtype == DType::kF8E4M3) {
        const float scale = p.q_scale[static_cast<int64_t>(row) * p.num_q_heads + head];
        const uint2 raw = *reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(p.q) + off);
        const uint8_t* bytes = reinterpret_cast<const uint8_t*>(&raw);
#pragma unroll
        for (int i = 0; i < 8; ++i) x[i] = E4M3ToFloat(bytes[i]) * scale;
      } else if (p.q_dtype == DType::kF16) {
        LoadVec8(static_cast<const __half*>(p.q) + off, x);
      } else {
        LoadVec8(static_cast<const __nv_bfloat16*>(p.q) + off, x);
      }
    }
    uint4 packed;
    packed.x = PackPair<CT>(x[0], x[1]);
    packed.y = PackPair<CT>(x[2], x[3]);
    packed.z = PackPair<CT>(x[4], x[5]);
    packed.w = PackPair<CT>(x[6], x[7]);
    if constexpr (kPermuteD) {
      // pairs (d 0-1, 2-3, 4-5, 6-7) of this 8-wide chunk: d 4m + (0, 1) go to the block's first 16-byte chunk,
      // 4m + (2, 3) to its second, each at word 2 (chunk % 2) + m
      const int block = chunk / 2, word = 8 * (chunk % 2);
      *reinterpret_cast<uint2*>(qsmem + QChunk<D>(r, 2 * block) + word) = make_uint2(packed.x, packed.z);
      *reinterpret_cast<uint2*>(qsmem + QChunk<D>(r, 2 * block + 1) + word) = make_uint2(packed.y, packed.w);
    } else {
      *reinterpret_cast<uint4*>(qsmem + QChunk<D>(r, chunk)) = packed;
    }
  }
}

__device__ __forceinline__ float Exp2Approx(float x) {  // ex2.approx.ftz: exp2(-inf) = 0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Per-warp online-softmax state for its 16 rows (this thread: rows g and g + 8), and the warp's Q fragments:
// kept in registers across the piece's tiles for head_dim <= 128 (256 would not fit next to O), else reloaded
// from shared memory per tile.
template <int D>
struct WarpState {
  static constexpr bool kQInRegs = D <= 128;
  float o[D / 8][4];
  float m[2], l[2];
  uint32_t q[kQInRegs ? D / 16 : 1][4];
  __device__ __forceinline__ void Reset() {
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.f;
  }
};

template <int D>
__device__ __forceinline__ uint32_t QFragAddr(uint32_t qsmem, int wm, int ks) {
  const int lane = threadIdx.x % 32;
  return qsmem + QChunk<D>(16 * wm + (lane % 16), 2 * ks + lane / 16);
}

// Token positions (thread constants) for causal masking: this thread's two rows r see the tokens
// [0, len - q_len + r / group]; q_pos holds r / group (clamped to the last row).
struct RowPos {
  int q_pos[2];
};

template <int D, int MT, typename KV, typename CT>
__device__ __forceinline__ void ComputeTile(const DecodeParams& p, const Piece& piece, int tile, uint32_t stage,
                                            uint32_t qsmem, WarpState<D>& st, const RowPos& pos, float s_scale) {
  using S = DecodeShape<D, MT, KV, CT>;
  constexpr int TW = S::kTokensPerWarp;
  constexpr int NB = TW / 8;           // n8 blocks of S per warp
  constexpr bool kSplitK = NB < 4;     // two accumulator sets: shorter dependent MMA chains
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / S::kWarpsN, wn = warp % S::kWarpsN;
  const int qd = lane % 4;  // (g = lane / 4 in the comments below)
  const uint32_t ktile = stage;
  const uint32_t vtile = stage + S::kTileBytes;

  float s[kSplitK ? 2 : 1][NB][4];
#pragma unroll
  for (int k = 0; k < (kSplitK ? 2 : 1); ++k)
#pragma unroll
    for (int i = 0; i < NB; ++i) s[k][i][0] = s[k][i][1] = s[k][i][2] = s[k][i][3] = 0.f;
  uint32_t kf[S::kFp8 ? NB / 2 : 1][4];  // fp8 K fragments of two ks steps
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    float(&acc)[NB][4] = s[kSplitK ? ks % 2 : 0];
    uint32_t qreg[4];
    if constexpr (!WarpState<D>::kQInRegs) LdMatrixX4(qreg, QFragAddr<D>(qsmem, wm, ks));
    const uint32_t(&a)[4] = WarpState<D>::kQInRegs ? st.q[WarpState<D>::kQInRegs ? ks : 0] : qreg;
    if constexpr (!S::kFp8) {
#pragma unroll
      for (int np = 0; np < NB / 2; ++np) {
        uint32_t bf[4];
        const int tok = wn * TW + np * 16 + (lane % 8) + (lane / 16) * 8;
        LdMatrixX4(bf, ktile + SwizzledChunk<S>(tok, 2 * ks + (lane / 8) % 2));
        Mma16816<CT>(acc[2 * np], a, bf[0], bf[1]);
        Mma16816<CT>(acc[2 * np + 1], a, bf[2], bf[3]);
      }
    } else {
      // fp8 K: ldmatrix of 8 tokens x one 16-byte chunk hands thread (g, qd) K[g][16 ks + 4qd .. 4qd + 3]. Its
      // low and high byte pairs are the B fragments for a d order permuted inside the chunk (position 2qd + i
      // holds d = 4qd + i, position 8 + 2qd + i holds d = 4qd + 2 + i); LoadQ stores q in the same order, so S
      // is unchanged. One x4 load covers 16 tokens x 2 chunks (two ks steps). (Was two ld.shared.u16 per MMA.)
#pragma unroll
      for (int np = 0; np < NB / 2; ++np) {
        if (ks % 2 == 0) {
          LdMatrixX4(kf[np], TokensByChunksX4<S>(ktile, wn * TW + np * 16, ks, lane));
        }
#pragma unroll
        for (int part = 0; part < 2; ++part) {  // tokens 0-7 / 8-15 of the 16
          const uint32_t w = kf[np][2 * (ks % 2) + part];
          Mma16816<CT>(acc[2 * np + part], a, E4M3x2ToHalf2(static_cast<uint16_t>(w)),
                       E4M3x2ToHalf2(static_cast<uint16_t>(w >> 16)));
        }
      }
    }
  }
  if constexpr (kSplitK) {
#pragma unroll
    for (int i = 0; i < NB; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[0][i][e] += s[1][i][e];
  }
  float(&sc)[NB][4] = s[0];

  // scale into the log2 domain; mask (tokens past the sequence, causal among the q_len new tokens) only in a
  // tile that reaches past the first row's last visible token
  const int tok_base = tile * kTileTokens + wn * TW + 2 * qd;  // token of sc[nb][e] = tok_base + 8 nb + (e & 1)
  const bool need_mask = tile * kTileTokens + kTileTokens - 1 > piece.len - p.q_len;
  int lim[2];  // sc[nb][e] is visible iff 8 nb + (e & 1) <= lim[half]
#pragma unroll
  for (int half = 0; half < 2; ++half) lim[half] = piece.len - p.q_len + pos.q_pos[half] - tok_base;
  constexpr int H = S::kHalves;
  float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) {
#pragma unroll
    for (int e = 0; e < 2 * H; ++e) {
      const int half = e / 2;
      float v = sc[nb][e] * s_scale;
      if (need_mask && 8 * nb + (e & 1) > lim[half]) v = -INFINITY;
      sc[nb][e] = v;
      tile_max[half] = fmaxf(tile_max[half], v);
    }
  }
  // Lazy rescaling: the running maximum m only moves when a row's tile maximum exceeds it by more than
  // kRescaleSlack (log2 units), so P <= 2^kRescaleSlack (exact in fp32, same relative precision in the 16-bit
  // P fragments) and O, l are rescaled a few times per piece instead of on every tile that raises a maximum.
  constexpr float kRescaleSlack = 8.f;
  bool grow = false;
#pragma unroll
  for (int half = 0; half < H; ++half) {
    tile_max[half] = fmaxf(tile_max[half], __shfl_xor_sync(0xffffffffu, tile_max[half], 1));
    tile_max[half] = fmaxf(tile_max[half], __shfl_xor_sync(0xffffffffu, tile_max[half], 2));
    grow |= tile_max[half] > st.m[half] + kRescaleSlack;  // m = -inf: any finite maximum
  }
  if (__any_sync(0xffffffffu, grow)) {
    float alpha[2];
#pragma unroll
    for (int half = 0; half < H; ++half) {
      const float m_new = fmaxf(st.m[half], tile_max[half]);
      alpha[half] = m_new == -INFINITY ? 1.f : Exp2Approx(st.m[half] - m_new);
      st.m[half] = m_new;
      st.l[half] *= alpha[half];
    }
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      st.o[i][0] *= alpha[0], st.o[i][1] *= alpha[0];
      if constexpr (H == 2) st.o[i][2] *= alpha[1], st.o[i][3] *= alpha[1];
    }
  }
  float m_use[2];
#pragma unroll
  for (int half = 0; half < H; ++half) m_use[half] = st.m[half] == -INFINITY ? 0.f : st.m[half];  // no -inf - -inf
  float row_sum[2] = {0.f, 0.f};
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) {
#pragma unroll
    for (int e = 0; e < 2 * H; ++e) {
      const float pr = Exp2Approx(sc[nb][e] - m_use[e / 2]);
      sc[nb][e] = pr;
      row_sum[e / 2] += pr;
    }
  }
#pragma unroll
  for (int half = 0; half < H; ++half) st.l[half] += row_sum[half];

  // O += P V over the warp's tokens
#pragma unroll
  for (int kk = 0; kk < TW / 16; ++kk) {
    uint32_t a[4];
    a[0] = PackPair<CT>(sc[2 * kk][0], sc[2 * kk][1]);
    a[1] = H == 2 ? PackPair<CT>(sc[2 * kk][2], sc[2 * kk][3]) : 0u;  // rows 8-15: zero when not live
    a[2] = PackPair<CT>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
    a[3] = H == 2 ? PackPair<CT>(sc[2 * kk + 1][2], sc[2 * kk + 1][3]) : 0u;
    const int tok0 = wn * TW + kk * 16;
    if constexpr (!S::kFp8) {
#pragma unroll
      for (int np = 0; np < D / 16; ++np) {
        uint32_t vf[4];
        LdMatrixX4Trans(vf, TokensByChunksX4<S>(vtile, tok0, 2 * np, lane));
        Mma16816<CT>(st.o[2 * np], a, vf[0], vf[1]);
        Mma16816<CT>(st.o[2 * np + 1], a, vf[2], vf[3]);
      }
    } else {
      // fp8 V: ldmatrix.trans over byte pairs. For 8 tokens x one 16-byte chunk c it hands thread (g, qd) the
      // bytes V[t][16c + 2g], V[t][16c + 2g + 1], V[t + 1][16c + 2g], V[t + 1][16c + 2g + 1] (t = 2qd, or
      // 2qd + 8 from the second matrix); bytes 0/2 and 1/3 are the B fragments of d column 16c + 2g and
      // 16c + 2g + 1. So o[2c] accumulates the even columns of the chunk and o[2c + 1] the odd ones: this
      // thread's o[2c] holds d = 16c + 4qd (+2), o[2c + 1] holds d = 16c + 4qd + 1 (+3) (ForEachColumnPair).
      // (Was four ld.shared.u8 per MMA: ~350 instructions per warp and tile for the V side alone.)
#pragma unroll
      for (int jj = 0; jj < D / 32; ++jj) {
        uint32_t vf[4];
        LdMatrixX4Trans(vf, TokensByChunksX4<S>(vtile, tok0, 2 * jj, lane));
#pragma unroll
        for (int part = 0; part < 2; ++part) {  // chunk 2 jj + part: vf[2 part] tokens 0-7, vf[2 part + 1] 8-15
          const uint32_t lo = vf[2 * part], hi = vf[2 * part + 1];
          const int c = 2 * jj + part;
          Mma16816<CT>(st.o[2 * c], a, E4M3x2ToHalf2(static_cast<uint16_t>(__byte_perm(lo, 0, 0x0020))),
                       E4M3x2ToHalf2(static_cast<uint16_t>(__byte_perm(hi, 0, 0x0020))));
          Mma16816<CT>(st.o[2 * c + 1], a, E4M3x2ToHalf2(static_cast<uint16_t>(__byte_perm(lo, 0, 0x0031))),
                       E4M3x2ToHalf2(static_cast<uint16_t>(__byte_perm(hi, 0, 0x0031))));
        }
      }
    }
  }
}

// The output columns this thread holds for one row half, as pairs: f(d, x[d], x[d + 1]). 16-bit K/V: o[2c]
// holds d = 16c + 2qd (+1) and o[2c + 1] holds d = 16c + 8 + 2qd (+1); fp8 K/V: see the fp8 branch of ComputeTile.
// Only the 16-column chunks c in [c_begin, c_end) when given (compile-time constants after inlining).
template <bool kFp8, int D, class F>
__device__ __forceinline__ void ForEachColumnPair(const WarpState<D>& st, int half, int qd, F&& f, int c_begin = 0,
                                                  int c_end = D / 16) {
#pragma unroll
  for (int c = 0; c < D / 16; ++c) {
    if (c < c_begin || c >= c_end) continue;
    const float* even = st.o[2 * c] + 2 * half;
    const float* odd = st.o[2 * c + 1] + 2 * half;
    if constexpr (kFp8) {
      f(16 * c + 4 * qd, even[0], odd[0]);
      f(16 * c + 4 * qd + 2, even[1], odd[1]);
    } else {
      f(16 * c + 2 * qd, even[0], even[1]);
      f(16 * c + 8 + 2 * qd, odd[0], odd[1]);
    }
  }
}

// Output element store (bf16 or fp16 out).
__device__ __forceinline__ void StoreOut2(const DecodeParams& p, int64_t off, float x0, float x1) {
  if (p.out_fp16) {
    *reinterpret_cast<__half2*>(static_cast<__half*>(p.out) + off) = __floats2half2_rn(x0, x1);
  } else {
    *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(p.out) + off) = __floats2bfloat162_rn(x0, x1);
  }
}

__device__ __forceinline__ int64_t OutOffset(const DecodeParams& p, int b, int h, int r) {
  const int row = b * p.q_len + r / p.group, head = h * p.group + r % p.group;
  return row * p.out_stride_row + head * p.out_stride_head;
}

// End of a piece: merge the WN warps' states of each row (fixed order), normalize, and write either the
// output (whole unit) or the fp32 partial + log2-sum-exp (split piece).
template <int D, int MT, typename KV, typename CT>
__device__ __forceinline__ void FinishPiece(const DecodeParams& p, const Piece& piece, WarpState<D>& st,
                                            char* ml_smem, float* obuf, float* lse_smem, float* free_stage) {
  using S = DecodeShape<D, MT, KV, CT>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / S::kWarpsN, wn = warp % S::kWarpsN;
  const int g = lane / 4, qd = lane % 4;
  const int b = piece.b, h = piece.h;
  const float v_scale = p.v_scale ? *p.v_scale : 1.f;
#pragma unroll
  for (int half = 0; half < S::kHalves; ++half) {
    st.l[half] += __shfl_xor_sync(0xffffffffu, st.l[half], 1);
    st.l[half] += __shfl_xor_sync(0xffffffffu, st.l[half], 2);
  }
  float* partial_o = p.workspace;
  float* partial_lse = p.workspace + p.num_slots * p.rows * D;
  if constexpr (S::kWarpsN == 1) {
#pragma unroll
    for (int half = 0; half < S::kHalves; ++half) {
      const int r = 16 * wm + g + 8 * half;
      if (r >= p.rows) continue;
      const float inv = st.l[half] > 0.f ? v_scale / st.l[half] : 0.f;
      if (piece.whole) {
        const int64_t base = OutOffset(p, b, h, r);
        ForEachColumnPair<S::kFp8>(st, half, qd, [&](int d, float x0, float x1) {
          StoreOut2(p, base + d, x0 * inv, x1 * inv);
        });
      } else {
        float* dst = partial_o + (static_cast<int64_t>(piece.slot) * p.rows + r) * D;
        ForEachColumnPair<S::kFp8>(st, half, qd, [&](int d, float x0, float x1) {
          *reinterpret_cast<float2*>(dst + d) = make_float2(x0 * inv, x1 * inv);
        });
        if (qd == 0) {
          partial_lse[static_cast<int64_t>(piece.slot) * p.rows + r] =
              st.l[half] > 0.f ? st.m[half] + __log2f(st.l[half]) : -INFINITY;
        }
      }
    }
    return;
  } else {
    constexpr int R = S::kQRows;
    float* ml = reinterpret_cast<float*>(ml_smem);  // [WN][R][2]
    if (qd == 0) {
#pragma unroll
      for (int half = 0; half < S::kHalves; ++half) {
        const int r = 16 * wm + g + 8 * half;
        ml[(wn * R + r) * 2] = st.m[half];
        ml[(wn * R + r) * 2 + 1] = st.l[half];
      }
    }
    __syncthreads();
    float factor[2];
#pragma unroll
    for (int half = 0; half < S::kHalves; ++half) {
      const int r = 16 * wm + g + 8 * half;
      float mx = -INFINITY;
#pragma unroll
      for (int w = 0; w < S::kWarpsN; ++w) mx = fmaxf(mx, ml[(w * R + r) * 2]);
      float denom = 0.f;
#pragma unroll
      for (int w = 0; w < S::kWarpsN; ++w) {
        const float mw = ml[(w * R + r) * 2];
        denom += mw == -INFINITY ? 0.f : ml[(w * R + r) * 2 + 1] * exp2f(mw - mx);
      }
      factor[half] = denom > 0.f && st.m[half] != -INFINITY ? exp2f(st.m[half] - mx) / denom * v_scale : 0.f;
      if (wn == 0 && qd == 0) lse_smem[r] = denom > 0.f ? mx + __log2f(denom) : -INFINITY;
    }
    // a merged row pair -> the output (whole unit) or the piece's fp32 partial and log-sum-exp
    auto emit = [&](int r, int d, float2 v) {
      if (piece.whole) {
        StoreOut2(p, OutOffset(p, b, h, r) + d, v.x, v.y);
      } else {
        *reinterpret_cast<float2*>(partial_o + (static_cast<int64_t>(piece.slot) * p.rows + r) * D + d) = v;
        if (d == 0) partial_lse[static_cast<int64_t>(piece.slot) * p.rows + r] = lse_smem[r];
      }
    };
    if constexpr (S::kMergeInStage) {
      // Slice wn of the free stage holds warp column wn's scaled O for every live row; columns XOR-swizzled by
      // the row so a half-warp's rows g = 0..3 land in different banks (16-bit columns 2qd (+8): bits 3-4; fp8
      // columns 4qd (+2): bits 1 and 4), pairs stay aligned. Then every thread sums the WN slices of its elements
      // in slice order (bitwise reproducible) and writes them out.
      auto at = [](int r, int d) {
        return r * D + (d ^ (S::kFp8 ? ((r & 1) << 1) | ((r & 2) << 3) : (r & 3) << 3));
      };
      float* mine = free_stage + wn * S::kLiveRows * D;
#pragma unroll
      for (int half = 0; half < S::kHalves; ++half) {
        const int r = 16 * wm + g + 8 * half;
        ForEachColumnPair<S::kFp8>(st, half, qd, [&](int d, float x0, float x1) {
          *reinterpret_cast<float2*>(mine + at(r, d)) = make_float2(x0 * factor[half], x1 * factor[half]);
        });
      }
      __syncthreads();
      for (int id = threadIdx.x; id < p.rows * (D / 2); id += kDecodeThreads) {
        const int r = id / (D / 2), d = (id % (D / 2)) * 2;
        float2 v = *reinterpret_cast<const float2*>(free_stage + at(r, d));
#pragma unroll
        for (int w = 1; w < S::kWarpsN; ++w) {
          const float2 x = *reinterpret_cast<const float2*>(free_stage + w * S::kLiveRows * D + at(r, d));
          v.x += x.x;
          v.y += x.y;
        }
        emit(r, d, v);
      }
      __syncthreads();  // the stage is refilled by the next copy; ml / lse_smem are reused by the next piece
      return;
    }
    // WN rounds, every warp busy in each: in round j warp wn adds its share of column group (wn + j) % WN (D / 16 / WN
    // chunks of 16 columns), so group q is summed in the fixed order q, q - 1, ... (bitwise reproducible) and no
    // warp waits for another's whole O. (Was WN rounds of one warp each writing all D columns: 4x the serial
    // shared-memory traffic, and at 16 rows it cost ~4500 cycles a piece more than at 8.)
    constexpr int WN = S::kWarpsN, kGroupChunks = D / 16 / WN;
    // fp8 head_dim 256 spills: there, unrolled rounds let ptxas keep more in registers (MT 2: 542 -> 4 bytes of
    // spill stores, MT 1: 360 -> 0); elsewhere one copy of the round is smaller code for the same registers
    // (unrolled, bf16 256 spilled more: 4 -> 64..108 bytes).
    constexpr int kUnrollRounds = S::kFp8 && D > 128 ? WN : 1;
#pragma unroll(kUnrollRounds)
    for (int j = 0; j < WN; ++j) {
      const int group = (wn + j) % WN;
#pragma unroll
      for (int gq = 0; gq < WN; ++gq) {  // compile-time chunk bounds keep st.o in registers
        if (gq != group) continue;
#pragma unroll
        for (int half = 0; half < S::kHalves; ++half) {
          const int r = 16 * wm + g + 8 * half;
          ForEachColumnPair<S::kFp8>(
              st, half, qd,
              [&](int d, float x0, float x1) {
                float2* dst = reinterpret_cast<float2*>(obuf + r * S::kOBufStride + d);
                const float2 add = make_float2(x0 * factor[half], x1 * factor[half]);
                if (j == 0) {
                  *dst = add;
                } else {
                  const float2 cur = *dst;
                  *dst = make_float2(cur.x + add.x, cur.y + add.y);
                }
              },
              gq * kGroupChunks, (gq + 1) * kGroupChunks);
        }
      }
      __syncthreads();
    }
    // all threads: rows -> global, 2 elements at a time
    for (int id = threadIdx.x; id < p.rows * (D / 2); id += kDecodeThreads) {
      const int r = id / (D / 2), d = (id % (D / 2)) * 2;
      emit(r, d, *reinterpret_cast<const float2*>(obuf + r * S::kOBufStride + d));
    }
    __syncthreads();  // obuf / ml are reused by the next piece
  }
}

template <int D, int MT, typename KV, typename CT>
__global__ void __launch_bounds__(kDecodeThreads) DecodeAttentionKernel(const __grid_constant__ DecodeParams p) {
  using S = DecodeShape<D, MT, KV, CT>;
  extern __shared__ __align__(128) char smem[];
  char* stages = smem;
  char* qsmem = smem + S::kStages * S::kStageBytes;
  char* ml_smem = qsmem + S::kQBytes;
  float* obuf = reinterpret_cast<float*>(ml_smem + S::kMlBytes);
  float* lse_smem = reinterpret_cast<float*>(ml_smem + S::kMlBytes + S::kOBufBytes);

  PdlWait();  // the plan (and q / the cache) come from earlier kernels in the stream
  // The persistent grid is fully resident, so the combine kernel may be scheduled now (it waits for us in
  // PdlWait). A static grid can have several waves: let it finish first.
  if (p.dynamic) PdlLaunchDependents();
  // (CTAs past the plan's num_ctas find an empty range in start[] and return below: no header read needed.)
  const float k_scale = p.k_scale ? *p.k_scale : 1.f;
  const float s_scale = p.sm_scale * kLog2e * k_scale;

  const int lane = threadIdx.x % 32, wm = (threadIdx.x / 32) / S::kWarpsN;
  RowPos pos;
#pragma unroll
  for (int half = 0; half < 2; ++half) pos.q_pos[half] = min(16 * wm + lane / 4 + 8 * half, p.rows - 1) / p.group;
  const uint32_t stages_addr = SmemAddr(stages), qsmem_addr = SmemAddr(qsmem);

  TileStream load, comp;
  load.Init(p);
  comp = load;
  if (!comp.valid) return;
  // Copies run kStages - 1 tiles ahead of the compute; the block ids of the next `load` tile are fetched one
  // copy ahead of that. Page size 64 (one page per tile) takes the single-id path.
  auto run = [&](auto one_page) {
    constexpr bool kOnePage = decltype(one_page)::value;
    TileIds<S, kOnePage> ids;
    if (load.valid && !load.Empty()) ids.Fetch(p, load.piece, load.tile);
    auto copy_next = [&](int to_stage) {
      if (!load.valid || load.Empty()) return;
      LoadKvTile<S, kOnePage>(p, load.piece, load.tile, ids, stages_addr + to_stage * S::kStageBytes);
      load.Advance(p);
      if (load.valid && !load.Empty()) ids.Fetch(p, load.piece, load.tile);
    };
#pragma unroll 1
    for (int s = 0; s < S::kStages - 1; ++s) {  // not unrolled: one copy of the copy code keeps the loop in cache
      copy_next(s);
      CpAsyncCommit();
    }
    WarpState<D> st;
    bool new_piece = true;
    int stage = 0;
    while (comp.valid) {
      if (new_piece) {
        st.Reset();
        LoadQ<D, CT, S::kFp8>(p, comp.piece, qsmem, S::kQRows);
        __syncthreads();
        if constexpr (WarpState<D>::kQInRegs) {
#pragma unroll
          for (int ks = 0; ks < D / 16; ++ks) LdMatrixX4(st.q[ks], QFragAddr<D>(qsmem_addr, wm, ks));
          __syncthreads();  // the next piece's LoadQ may follow without a tile barrier in between
        }
        new_piece = false;
      }
      if (!comp.Empty()) {
        copy_next((stage + S::kStages - 1) % S::kStages);
        CpAsyncCommit();
        CpAsyncWait<S::kStages - 1>();
        __syncthreads();
        ComputeTile<D, MT, KV, CT>(p, comp.piece, comp.tile, stages_addr + stage * S::kStageBytes, qsmem_addr, st,
                                   pos, s_scale);
        __syncthreads();  // the stage is refilled by a later load
        stage = (stage + 1) % S::kStages;
      }
      if (comp.Empty() || comp.tile + 1 >= comp.piece.tile_end) {
        const Piece done = comp.piece;
        // the stage the next copy fills is free now: the piece's last tile left it (or nothing entered it since)
        float* free_stage = reinterpret_cast<float*>(stages + (stage + S::kStages - 1) % S::kStages * S::kStageBytes);
        FinishPiece<D, MT, KV, CT>(p, done, st, ml_smem, obuf, lse_smem, free_stage);
        new_piece = true;
      }
      comp.Advance(p);
    }
  };
  if (p.page_shift >= 6) {
    run(std::true_type{});
  } else {
    run(std::false_type{});
  }
  CpAsyncWait<0>();
}

// Merges split pieces and zero-fills the rows of empty sequences. Dynamic: a CTA per CTA boundary i (per (i, row)
// beyond kWarpMergeMaxRows rows); task i is the unit cut at the start of CTA i (MergeTaskAt). Static: grid (task,
// row), task u owns unit u's splits. A long sequence can be cut into hundreds of pieces, so the pieces of a row
// are spread over the block's threads: weights from a block-wide
// max / sum of the pieces' log-sum-exps, then `groups` thread groups each accumulate (4 columns per thread) an
// interleaved subset of the pieces and the group sums are added in a fixed order (bitwise reproducible). Tasks of
// few pieces and rows (most of them) take WarpMergeRows instead: one CTA per task, a warp per row.
constexpr int kCombineThreads = 256;
constexpr int kMaxPieces = 2048;

__device__ __forceinline__ float BlockReduce(float v, float* scratch, bool is_max) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, other) : v + other;
  }
  __syncthreads();  // scratch may still be read from a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = scratch[0];
  for (int w = 1; w < kCombineThreads / 32; ++w) r = is_max ? fmaxf(r, scratch[w]) : r + scratch[w];
  return r;
}

// Pieces per row that WarpMergeRows keeps in registers (D / 64 float2 per lane and piece).
template <int D>
constexpr int kWarpMergePieces = D > 128 ? 4 : 8;
constexpr int kWarpMergeMaxRows = 2 * (kCombineThreads / 32);

// A task with few pieces, all its rows in one CTA: warp w merges rows w, w + 8. Every load is issued before any
// math -- the lse of piece `lane` and this lane's columns of every piece -- so a row costs one memory round trip
// after the wait (the per-row CTA path costs three: lse -> block reductions -> partials), and the grid has one CTA
// per task instead of one per (task, row), all resident at once. Weights and sum by warp shuffles, pieces added in
// ascending order: bitwise reproducible.
template <int D, int R>
__device__ __forceinline__ void WarpMergeRows(const DecodeParams& p, int unit, int count, int64_t first_slot,
                                              int64_t second_slot, int64_t stride_slot) {
  constexpr int kVecs = D / 64, kPieces = kWarpMergePieces<D>, kWarps = kCombineThreads / 32;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const float* po = p.workspace;
  const float* plse = p.workspace + p.num_slots * p.rows * D;
  auto slot_of = [&](int k) { return k == 0 ? first_slot : second_slot + (k - 1) * stride_slot; };
  const int b = unit % p.batch, h = unit / p.batch;
  // R rows per pass (rows warp, warp + 8, ...): all R rows' loads are issued before any of their math.
  for (int r0 = warp; r0 < p.rows; r0 += R * kWarps) {
    float2 o[R][kPieces][kVecs];
    float lse[R];
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const int r = r0 + i * kWarps;
      const bool row_ok = r < p.rows;
#pragma unroll
      for (int k = 0; k < kPieces; ++k) {
        const float* src = po + (slot_of(k) * p.rows + r) * D + 2 * lane;
#pragma unroll
        for (int j = 0; j < kVecs; ++j) {
          o[i][k][j] = row_ok && k < count ? *reinterpret_cast<const float2*>(src + 64 * j) : make_float2(0.f, 0.f);
        }
      }
      lse[i] = row_ok && lane < count ? plse[slot_of(lane) * p.rows + r] : -INFINITY;
    }
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const int r = r0 + i * kWarps;
      float mx = lse[i];
#pragma unroll
      for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      const float w = mx == -INFINITY || lse[i] == -INFINITY ? 0.f : exp2f(lse[i] - mx);
      float denom = w;
#pragma unroll
      for (int off = 16; off > 0; off /= 2) denom += __shfl_xor_sync(0xffffffffu, denom, off);
      float2 acc[kVecs];
#pragma unroll
      for (int j = 0; j < kVecs; ++j) acc[j] = make_float2(0.f, 0.f);
#pragma unroll
      for (int k = 0; k < kPieces; ++k) {
        const float wk = __shfl_sync(0xffffffffu, w, k);
        if (k >= count) break;
#pragma unroll
        for (int j = 0; j < kVecs; ++j) {
          acc[j].x += wk * o[i][k][j].x;
          acc[j].y += wk * o[i][k][j].y;
        }
      }
      if (r >= p.rows) continue;
      const float inv = denom > 0.f ? 1.f / denom : 0.f;
      const int64_t out = OutOffset(p, b, h, r) + 2 * lane;
#pragma unroll
      for (int j = 0; j < kVecs; ++j) StoreOut2(p, out + 64 * j, acc[j].x * inv, acc[j].y * inv);
    }
  }
}

// Partials a thread of the block merge keeps in flight: its float4 of pieces group, group + groups, ... (20 x 8
// groups = 160 pieces at D = 128 -- a 1x128K sequence is cut into ~134 on 264 CTAs -- in one round trip; 20 is
// the most that fits the 128 registers of two 256-thread CTAs per SM without spilling, ptxas).
constexpr int kBlockMergeBatch = 20;

// This thread's float4 columns of batch `batch` of its pieces (k = group + (batch * kBlockMergeBatch + i) * groups).
__device__ __forceinline__ void LoadMergeBatch(const float* row0, int64_t row_stride, int count, int group, int groups,
                                               int batch, int64_t first_slot, int64_t second_slot, int64_t stride_slot,
                                               float4 (&o)[kBlockMergeBatch]) {
#pragma unroll
  for (int i = 0; i < kBlockMergeBatch; ++i) {
    const int k = group + (batch * kBlockMergeBatch + i) * groups;
    const int64_t slot = k == 0 ? first_slot : second_slot + (k - 1) * stride_slot;
    o[i] = k < count ? *reinterpret_cast<const float4*>(row0 + slot * row_stride) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

// One row at a time (rows r, r + row_step, ...) of a long task. Every load of a row is issued before any of its
// math -- this thread's columns of its first kBlockMergeBatch pieces, then the pieces' lse -- so a row costs one
// memory round trip after the wait (it cost three or more: lse, then the partials 8 at a time, ~5 us after the last
// attention CTA on 8/1 1x128K). The lse go to shared memory, their max and weight sum by block reductions, then
// `groups` thread groups each accumulate an interleaved subset of the pieces (4 columns per thread) in ascending
// order, added in group order (bitwise reproducible, and the same sums as before the batching).
__device__ __forceinline__ void BlockMergeRows(const DecodeParams& p, int unit, int r, int row_step, int count,
                                               int64_t first_slot, int64_t second_slot, int64_t stride_slot,
                                               float* weights, float* scratch, float4* group_sums) {
  const int D = p.head_dim;
  const float* po = p.workspace;
  const float* plse = p.workspace + p.num_slots * p.rows * D;
  auto slot_of = [&](int k) { return k == 0 ? first_slot : second_slot + (k - 1) * stride_slot; };
  const int cols = D / 4;                        // float4 columns of a row
  const int groups = kCombineThreads / cols;     // 4 (D=256), 8 (D=128) or 16 (D=64)
  const int col = threadIdx.x % cols, group = threadIdx.x / cols;
  for (; r < p.rows; r += row_step) {
    const float* row0 = po + static_cast<int64_t>(r) * D + 4 * col;  // + slot * rows * D: piece k's columns
    const int64_t row_stride = static_cast<int64_t>(p.rows) * D;
    float4 o[kBlockMergeBatch];
    LoadMergeBatch(row0, row_stride, count, group, groups, 0, first_slot, second_slot, stride_slot, o);
    float mx = -INFINITY;
    for (int k = threadIdx.x; k < count; k += kCombineThreads) {
      const float lse = plse[slot_of(k) * p.rows + r];
      weights[k] = lse;
      mx = fmaxf(mx, lse);
    }
    mx = BlockReduce(mx, scratch, true);
    float local = 0.f;
    for (int k = threadIdx.x; k < count; k += kCombineThreads) {
      const float w = mx == -INFINITY || weights[k] == -INFINITY ? 0.f : exp2f(weights[k] - mx);
      weights[k] = w;
      local += w;
    }
    const float denom = BlockReduce(local, scratch, false);  // also orders the weights[] writes before reads
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int batch = 0;; ++batch) {
#pragma unroll
      for (int i = 0; i < kBlockMergeBatch; ++i) {
        const int k = group + (batch * kBlockMergeBatch + i) * groups;
        if (k < count) {
          const float w = weights[k];
          acc.x += w * o[i].x;
          acc.y += w * o[i].y;
          acc.z += w * o[i].z;
          acc.w += w * o[i].w;
        }
      }
      if (group + (batch + 1) * kBlockMergeBatch * groups >= count) break;
      LoadMergeBatch(row0, row_stride, count, group, groups, batch + 1, first_slot, second_slot, stride_slot, o);
    }
    group_sums[threadIdx.x] = acc;
    __syncthreads();
    if (group == 0) {
      for (int g = 1; g < groups; ++g) {
        const float4 other = group_sums[g * cols + col];
        acc.x += other.x;
        acc.y += other.y;
        acc.z += other.z;
        acc.w += other.w;
      }
      const float inv = denom > 0.f ? 1.f / denom : 0.f;
      const int b = unit % p.batch, h = unit / p.batch;
      const int64_t out = OutOffset(p, b, h, r) + 4 * col;
      StoreOut2(p, out, acc.x * inv, acc.y * inv);
      StoreOut2(p, out + 2, acc.z * inv, acc.w * inv);
    }
    __syncthreads();  // weights[] and group_sums are refilled for the next row
  }
}

// kRowsPerWarp: rows each warp of the small-task merge handles per pass (2 where 8 < rows <= 16, e.g. GQA 8 at q_len 2).
// Two CTAs per SM: the block merge's batch of loads (kBlockMergeBatch) is sized to that register budget.
template <int kRowsPerWarp>
__global__ void __launch_bounds__(kCombineThreads, 2) DecodeCombineKernel(const __grid_constant__ DecodeParams p) {
  __shared__ float weights[kMaxPieces];
  __shared__ float scratch[kCombineThreads / 32];
  __shared__ float4 group_sums[kCombineThreads];
  // The zero fill and the task lookup read only what was ready before the attention kernel started (seq_lens,
  // the plan): the CTAs without a merge task, most of the grid, leave before PdlWait and the ones with work run
  // in one wave (waiting first kept all 264 x rows CTAs resident for ~2 us each: 8-20 us per combine, ncu).
  // Block (0, 0) waits even without a task: a grid none of whose CTAs waits could complete before the attention
  // grid does, and the next PDL-launched kernel, which waits for this grid only, would read `out` too early.
  const bool anchor = blockIdx.x == 0 && blockIdx.y == 0;
  auto leave = [&]() {
    if (anchor) PdlWait();
  };
  const int D = p.head_dim;
  if (blockIdx.y == 0) {
    for (int b = blockIdx.x; b < p.batch; b += gridDim.x) {
      if (p.seq_lens[b] != 0) continue;
      for (int id = threadIdx.x; id < p.q_len * p.num_q_heads * (D / 2); id += kCombineThreads) {
        const int row = b * p.q_len + id / (p.num_q_heads * (D / 2));
        const int head = (id / (D / 2)) % p.num_q_heads, d = (id % (D / 2)) * 2;
        StoreOut2(p, row * p.out_stride_row + head * p.out_stride_head + d, 0.f, 0.f);
      }
    }
  }
  // Dynamic: a 1-D grid, CTA i for boundary i. Its task is the unit boundary i cuts; rank j = i's place among that
  // unit's boundaries. Small tasks: the j = 0 CTA merges every row with warps. Larger ones: rows j, j + (count - 1),
  // ... per CTA (a unit of count pieces has count - 1 boundaries, so rows > 8 share them). Static: grid (task, row).
  int unit, count, r, row_step;
  int64_t first_slot, second_slot, stride_slot;  // slot k (k >= 1) = second_slot + (k - 1) * stride_slot
  if (p.dynamic) {
    MergeTask task;
    int rank;
    if (!MergeTaskCovering(p.plan, blockIdx.x, &task, &rank)) return leave();
    unit = task.unit;
    first_slot = task.first_slot;
    count = task.last_cta - task.first_cta + 1;
    second_slot = PartialSlot(task.first_cta + 1, true);
    stride_slot = 2;
    if (gridDim.y > 1) {  // rows > kWarpMergeMaxRows: grid (boundary, row), the task's own boundary does the rows
      if (rank != 0) return leave();
      r = blockIdx.y;
      row_step = p.rows;
    } else {
      r = rank;
      row_step = count - 1;
    }
  } else {
    r = blockIdx.y;
    row_step = p.rows;
    if (r >= p.rows) return leave();
    unit = blockIdx.x;
    if (unit >= p.batch * p.num_kv_heads) return leave();
    const int n = TilesOf(p.seq_lens[unit % p.batch]);
    const int chunk = (n + p.static_splits - 1) / p.static_splits;
    if (n == 0 || chunk >= n) return leave();  // written directly by the attention kernel
    first_slot = static_cast<int64_t>(unit) * p.static_splits;
    count = p.static_splits;
    second_slot = first_slot + 1;
    stride_slot = 1;
  }
  // Few pieces and rows (a unit cut by one or a few CTA boundaries, the common case): one CTA merges every row of
  // the task with warps; the task's other CTAs leave.
  const int warp_pieces = D == 256 ? kWarpMergePieces<256> : kWarpMergePieces<128>;
  if (count <= warp_pieces && p.rows <= kWarpMergeMaxRows) {
    if (r != 0) return leave();
    PdlWait();  // the partials come from the attention kernel
    if (D == 64) {
      WarpMergeRows<64, kRowsPerWarp>(p, unit, count, first_slot, second_slot, stride_slot);
    } else if (D == 128) {
      WarpMergeRows<128, kRowsPerWarp>(p, unit, count, first_slot, second_slot, stride_slot);
    } else {
      WarpMergeRows<256, kRowsPerWarp>(p, unit, count, first_slot, second_slot, stride_slot);
    }
    return;
  }
  if (r >= p.rows) return leave();
  PdlWait();  // the partials come from the attention kernel
  BlockMergeRows(p, unit, r, row_step, count, first_slot, second_slot, stride_slot, weights, scratch, group_sums);
}
}  // namespace hpc::attention
