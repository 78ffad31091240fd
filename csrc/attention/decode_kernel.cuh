// The decode attention kernel body (included by decode_attention.cu only).
//
// One CTA = 4 warps = 128 threads, working through a stream of 64-token tiles of (sequence, kv head) pieces:
// the persistent CTA's pieces from the plan (dynamic) or one (kv head, sequence, split) piece (static).
// K/V tiles are brought in by cp.async through a multi-stage shared-memory ring (zero-filled past the end of
// a sequence: unused cache slots are never read). All q heads of the kv head (GQA group) times q_len rows
// form M <= 64 rows, padded to MT m16 tiles. Warps are laid out MT x WN: warp (wm, wn) owns rows
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
  int64_t k_stride_b, k_stride_p, k_stride_h;
  int64_t v_stride_b, v_stride_p, v_stride_h;
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
  bool prefetch_ids;  // fetch a tile's block ids one copy ahead (default; HPC_XLA_DECODE_PREFETCH=0 for A/B)
};

template <int D, int MT, typename KV, typename CT>
struct DecodeShape {
  static constexpr bool kFp8 = std::is_same_v<KV, Fp8E4M3>;
  static constexpr int kKvBytes = kFp8 ? 1 : 2;
  static constexpr int kWarpsM = MT;
  static constexpr int kWarpsN = 4 / MT;
  static constexpr int kTokensPerWarp = kTileTokens / kWarpsN;  // TW
  static constexpr int kRowBytes = D * kKvBytes;
  static constexpr int kChunksPerRow = kRowBytes / 16;
  static constexpr int kSwizzleMask = (kChunksPerRow < 8 ? kChunksPerRow : 8) - 1;
  static constexpr int kTileBytes = kTileTokens * kRowBytes;  // one of K or V
  static constexpr int kStageBytes = 2 * kTileBytes;
  // Ring of up to 96 KB (2..4 stages): bf16 D=128 gets 3 stages and still fits 2 CTAs per SM.
  static constexpr int kStages = (96 * 1024 / kStageBytes) < 2 ? 2 : ((96 * 1024 / kStageBytes) > 4 ? 4 : 96 * 1024 / kStageBytes);
  static constexpr int kQRows = 16 * MT;
  static constexpr int kQBytes = kQRows * D * 2;
  static constexpr int kMlBytes = kWarpsN * kQRows * 2 * 4;
  static constexpr int kOBufBytes = kWarpsN > 1 ? kQRows * D * 4 : 0;
  static constexpr int kSmemBytes = kStages * kStageBytes + kQBytes + kMlBytes + kOBufBytes + kQRows * 4;
};

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled tile (rows of kRowBytes): XOR with the row
// keeps the 8 rows an ldmatrix phase reads in distinct bank groups.
template <class S>
__device__ __forceinline__ int SwizzledChunk(int row, int chunk) {
  return row * S::kRowBytes + ((chunk ^ (row & S::kSwizzleMask)) << 4);
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
      cursor = CtaPieces(p.plan, blockIdx.x);
      valid = NextPiece(cursor, p.plan, p.seq_lens, &piece);
    } else {
      const int split = blockIdx.x % p.static_splits, unit = blockIdx.x / p.static_splits;
      const int n = TilesOf(p.seq_lens[unit % p.batch]);
      const int chunk = (n + p.static_splits - 1) / p.static_splits;
      piece.unit = unit;
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
    valid = p.dynamic ? NextPiece(cursor, p.plan, p.seq_lens, &piece) : false;
    tile = piece.tile_begin;
  }
};

// Block ids of the chunks this thread copies for one tile, fetched one tile before the copy: a cp.async whose
// address waits on its block-table load stalls the thread (and the tile it is computing) for a full memory
// round trip per tile. The index is clamped to the table row; tokens past the sequence are masked at copy time.
template <class S>
constexpr int kChunksPerThread = kTileTokens * S::kChunksPerRow / kDecodeThreads;

template <class S>
__device__ __forceinline__ void FetchTileIds(const DecodeParams& p, const Piece& piece, int tile,
                                             int32_t (&ids)[kChunksPerThread<S>]) {
  const int b = piece.unit % p.batch;
  const int32_t* table = p.block_table + b * p.block_table_stride;
#pragma unroll
  for (int i = 0; i < kChunksPerThread<S>; ++i) {
    const int row = (threadIdx.x + i * kDecodeThreads) / S::kChunksPerRow;
    const int page = (tile * kTileTokens + row) >> p.page_shift;
    ids[i] = p.block_table_width > 0 ? table[page < p.block_table_width ? page : p.block_table_width - 1] : -1;
  }
}

template <class S, int D>
__device__ __forceinline__ void LoadKvTile(const DecodeParams& p, const Piece& piece, int tile,
                                           const int32_t (&ids)[kChunksPerThread<S>], char* stage) {
  const int b = piece.unit % p.batch, h = piece.unit / p.batch;
  const int len = p.seq_lens[b];
  const int page_mask = (1 << p.page_shift) - 1;
  const char* kbase = static_cast<const char*>(p.k_cache);
  const char* vbase = static_cast<const char*>(p.v_cache);
#pragma unroll
  for (int i = 0; i < kChunksPerThread<S>; ++i) {
    const int id = threadIdx.x + i * kDecodeThreads;
    const int row = id / S::kChunksPerRow, chunk = id % S::kChunksPerRow;
    const int tok = tile * kTileTokens + row;
    // Past the sequence, or an invalid block id (only possible without HPC_XLA_CHECK): zero-fill, never read
    // outside the cache.
    const bool valid = tok < len && ids[i] >= 0 && ids[i] < p.num_blocks;
    const int64_t blk = valid ? ids[i] : 0;
    const int64_t in_page = tok & page_mask;
    const char* ksrc = kbase + ((blk * p.k_stride_b + in_page * p.k_stride_p + h * p.k_stride_h) * S::kKvBytes + chunk * 16);
    const char* vsrc = vbase + ((blk * p.v_stride_b + in_page * p.v_stride_p + h * p.v_stride_h) * S::kKvBytes + chunk * 16);
    const int dst = SwizzledChunk<S>(row, chunk);
    CpAsync16(stage + dst, valid ? ksrc : kbase, valid);
    CpAsync16(stage + S::kTileBytes + dst, valid ? vsrc : vbase, valid);
  }
}

// q rows of the piece -> shared memory in the compute type (fp8 q dequantized with its scale). Row r of the
// tile is query j = r / group of head h * group + r % group; rows past M are zero.
template <int D, typename CT>
__device__ __forceinline__ void LoadQ(const DecodeParams& p, const Piece& piece, char* qsmem, int q_rows) {
  const int b = piece.unit % p.batch, h = piece.unit / p.batch;
  for (int id = threadIdx.x; id < q_rows * (D / 8); id += kDecodeThreads) {
    const int r = id / (D / 8), chunk = id % (D / 8);
    float x[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (r < p.rows) {
      const int row = b * p.q_len + r / p.group, head = h * p.group + r % p.group;
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
    *reinterpret_cast<uint4*>(qsmem + QChunk<D>(r, chunk)) = packed;
  }
}

// Per-warp online-softmax state for its 16 rows (this thread: rows g and g + 8).
template <int D>
struct WarpState {
  float o[D / 8][4];
  float m[2], l[2];
  __device__ __forceinline__ void Reset() {
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.f;
  }
};

template <int D, int MT, typename KV, typename CT>
__device__ __forceinline__ void ComputeTile(const DecodeParams& p, const Piece& piece, int tile, const char* stage,
                                            const char* qsmem, WarpState<D>& st, float s_scale) {
  using S = DecodeShape<D, MT, KV, CT>;
  constexpr int TW = S::kTokensPerWarp;
  constexpr int NB = TW / 8;  // n8 blocks of S per warp
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / S::kWarpsN, wn = warp % S::kWarpsN;
  const int g = lane / 4, qd = lane % 4;
  const char* ktile = stage;
  const char* vtile = stage + S::kTileBytes;

  float s[NB][4];
#pragma unroll
  for (int i = 0; i < NB; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    uint32_t a[4];
    LdMatrixX4(a, qsmem + QChunk<D>(16 * wm + (lane % 16), 2 * ks + lane / 16));
    if constexpr (!S::kFp8) {
#pragma unroll
      for (int np = 0; np < NB / 2; ++np) {
        uint32_t bf[4];
        const int tok = wn * TW + np * 16 + (lane % 8) + (lane / 16) * 8;
        LdMatrixX4(bf, ktile + SwizzledChunk<S>(tok, 2 * ks + (lane / 8) % 2));
        Mma16816<CT>(s[2 * np], a, bf[0], bf[1]);
        Mma16816<CT>(s[2 * np + 1], a, bf[2], bf[3]);
      }
    } else {
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) {
        const int tok = wn * TW + nb * 8 + g;
        const int byte0 = ks * 16 + 2 * qd;  // d = 16 ks + 2 qd (+8)
        const char* row = ktile + tok * S::kRowBytes;
        const int c0 = (byte0 >> 4) ^ (tok & S::kSwizzleMask);
        const uint16_t lo = *reinterpret_cast<const uint16_t*>(row + (c0 << 4) + (byte0 & 15));
        const uint16_t hi = *reinterpret_cast<const uint16_t*>(row + (c0 << 4) + ((byte0 + 8) & 15));
        Mma16816<CT>(s[nb], a, E4M3x2ToHalf2(lo), E4M3x2ToHalf2(hi));
      }
    }
  }

  // scale into the log2 domain and mask: tokens past the sequence, and causal among the q_len new tokens
  const int b = piece.unit % p.batch;
  const int len = p.seq_lens[b];
  const int row0 = 16 * wm + g;
  int last_visible[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = min(row0 + 8 * half, p.rows - 1);
    last_visible[half] = len - p.q_len + r / p.group;
  }
  float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int tok = tile * kTileTokens + wn * TW + nb * 8 + 2 * qd + (e & 1);
      const int half = e / 2;
      const float v = tok <= last_visible[half] ? s[nb][e] * s_scale : -INFINITY;
      s[nb][e] = v;
      tile_max[half] = fmaxf(tile_max[half], v);
    }
  }
  float alpha[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    tile_max[half] = fmaxf(tile_max[half], __shfl_xor_sync(0xffffffffu, tile_max[half], 1));
    tile_max[half] = fmaxf(tile_max[half], __shfl_xor_sync(0xffffffffu, tile_max[half], 2));
    const float m_new = fmaxf(st.m[half], tile_max[half]);
    alpha[half] = m_new == -INFINITY ? 1.f : exp2f(st.m[half] - m_new);
    st.m[half] = m_new;
  }
  float row_sum[2] = {0.f, 0.f};
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int half = e / 2;
      const float pr = s[nb][e] == -INFINITY ? 0.f : exp2f(s[nb][e] - st.m[half]);
      s[nb][e] = pr;
      row_sum[half] += pr;
    }
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) st.l[half] = st.l[half] * alpha[half] + row_sum[half];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) {
    st.o[i][0] *= alpha[0], st.o[i][1] *= alpha[0];
    st.o[i][2] *= alpha[1], st.o[i][3] *= alpha[1];
  }

  // O += P V over the warp's tokens
#pragma unroll
  for (int kk = 0; kk < TW / 16; ++kk) {
    uint32_t a[4];
    a[0] = PackPair<CT>(s[2 * kk][0], s[2 * kk][1]);
    a[1] = PackPair<CT>(s[2 * kk][2], s[2 * kk][3]);
    a[2] = PackPair<CT>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[3] = PackPair<CT>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    const int tok0 = wn * TW + kk * 16;
    if constexpr (!S::kFp8) {
#pragma unroll
      for (int np = 0; np < D / 16; ++np) {
        uint32_t vf[4];
        const int tok = tok0 + (lane % 8) + ((lane / 8) % 2) * 8;
        LdMatrixX4Trans(vf, vtile + SwizzledChunk<S>(tok, 2 * np + lane / 16));
        Mma16816<CT>(st.o[2 * np], a, vf[0], vf[1]);
        Mma16816<CT>(st.o[2 * np + 1], a, vf[2], vf[3]);
      }
    } else {
      const int t0 = tok0 + 2 * qd;
#pragma unroll
      for (int nb = 0; nb < D / 8; ++nb) {
        const int d = nb * 8 + g;
        uint8_t v[4];
        const int toks[4] = {t0, t0 + 1, t0 + 8, t0 + 9};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int t = toks[i];
          v[i] = *reinterpret_cast<const uint8_t*>(vtile + t * S::kRowBytes +
                                                   (((d >> 4) ^ (t & S::kSwizzleMask)) << 4) + (d & 15));
        }
        const uint32_t b0 = E4M3x2ToHalf2(static_cast<uint16_t>(v[0] | (v[1] << 8)));
        const uint32_t b1 = E4M3x2ToHalf2(static_cast<uint16_t>(v[2] | (v[3] << 8)));
        Mma16816<CT>(st.o[nb], a, b0, b1);
      }
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
                                            char* ml_smem, float* obuf, float* lse_smem) {
  using S = DecodeShape<D, MT, KV, CT>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / S::kWarpsN, wn = warp % S::kWarpsN;
  const int g = lane / 4, qd = lane % 4;
  const int b = piece.unit % p.batch, h = piece.unit / p.batch;
  const float v_scale = p.v_scale ? *p.v_scale : 1.f;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    st.l[half] += __shfl_xor_sync(0xffffffffu, st.l[half], 1);
    st.l[half] += __shfl_xor_sync(0xffffffffu, st.l[half], 2);
  }
  float* partial_o = p.workspace;
  float* partial_lse = p.workspace + p.num_slots * p.rows * D;
  if constexpr (S::kWarpsN == 1) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = 16 * wm + g + 8 * half;
      if (r >= p.rows) continue;
      const float inv = st.l[half] > 0.f ? v_scale / st.l[half] : 0.f;
      if (piece.whole) {
        const int64_t base = OutOffset(p, b, h, r);
#pragma unroll
        for (int nb = 0; nb < D / 8; ++nb) {
          StoreOut2(p, base + nb * 8 + 2 * qd, st.o[nb][2 * half] * inv, st.o[nb][2 * half + 1] * inv);
        }
      } else {
        float* dst = partial_o + (static_cast<int64_t>(piece.slot) * p.rows + r) * D;
#pragma unroll
        for (int nb = 0; nb < D / 8; ++nb) {
          *reinterpret_cast<float2*>(dst + nb * 8 + 2 * qd) =
              make_float2(st.o[nb][2 * half] * inv, st.o[nb][2 * half + 1] * inv);
        }
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
      for (int half = 0; half < 2; ++half) {
        const int r = 16 * wm + g + 8 * half;
        ml[(wn * R + r) * 2] = st.m[half];
        ml[(wn * R + r) * 2 + 1] = st.l[half];
      }
    }
    __syncthreads();
    float factor[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
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
    for (int w = 0; w < S::kWarpsN; ++w) {  // fixed order: bitwise reproducible
      if (wn == w) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = 16 * wm + g + 8 * half;
#pragma unroll
          for (int nb = 0; nb < D / 8; ++nb) {
            float2* dst = reinterpret_cast<float2*>(obuf + r * D + nb * 8 + 2 * qd);
            const float2 add = make_float2(st.o[nb][2 * half] * factor[half], st.o[nb][2 * half + 1] * factor[half]);
            if (w == 0) {
              *dst = add;
            } else {
              const float2 cur = *dst;
              *dst = make_float2(cur.x + add.x, cur.y + add.y);
            }
          }
        }
      }
      __syncthreads();
    }
    // all threads: rows -> global, 2 elements at a time
    for (int id = threadIdx.x; id < p.rows * (D / 2); id += kDecodeThreads) {
      const int r = id / (D / 2), d = (id % (D / 2)) * 2;
      const float2 v = *reinterpret_cast<const float2*>(obuf + r * D + d);
      if (piece.whole) {
        StoreOut2(p, OutOffset(p, b, h, r) + d, v.x, v.y);
      } else {
        *reinterpret_cast<float2*>(partial_o + (static_cast<int64_t>(piece.slot) * p.rows + r) * D + d) = v;
        if (d == 0) partial_lse[static_cast<int64_t>(piece.slot) * p.rows + r] = lse_smem[r];
      }
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
  if (p.dynamic && static_cast<int>(blockIdx.x) >= p.plan[kFieldNumCtas]) return;
  const float k_scale = p.k_scale ? *p.k_scale : 1.f;
  const float s_scale = p.sm_scale * kLog2e * k_scale;

  TileStream load, comp;
  load.Init(p);
  comp = load;
  if (!comp.valid) return;
  // ids: block ids of the `load` tile, fetched one copy ahead
  int32_t ids[kChunksPerThread<S>];
  if (p.prefetch_ids && load.valid && !load.Empty()) FetchTileIds<S>(p, load.piece, load.tile, ids);
  auto copy_next = [&](int to_stage) {
    if (!load.valid || load.Empty()) return;
    if (!p.prefetch_ids) FetchTileIds<S>(p, load.piece, load.tile, ids);  // A/B: HPC_XLA_DECODE_PREFETCH=0
    LoadKvTile<S, D>(p, load.piece, load.tile, ids, stages + to_stage * S::kStageBytes);
    load.Advance(p);
    if (p.prefetch_ids && load.valid && !load.Empty()) FetchTileIds<S>(p, load.piece, load.tile, ids);
  };
#pragma unroll
  for (int s = 0; s < S::kStages - 1; ++s) {
    copy_next(s);
    CpAsyncCommit();
  }
  WarpState<D> st;
  bool new_piece = true;
  int stage = 0;
  while (comp.valid) {
    if (new_piece) {
      st.Reset();
      LoadQ<D, CT>(p, comp.piece, qsmem, S::kQRows);
      __syncthreads();
      new_piece = false;
    }
    if (!comp.Empty()) {
      copy_next((stage + S::kStages - 1) % S::kStages);
      CpAsyncCommit();
      CpAsyncWait<S::kStages - 1>();
      __syncthreads();
      ComputeTile<D, MT, KV, CT>(p, comp.piece, comp.tile, stages + stage * S::kStageBytes, qsmem, st, s_scale);
      __syncthreads();  // the stage is refilled by a later load
      stage = (stage + 1) % S::kStages;
    }
    if (comp.Empty() || comp.tile + 1 >= comp.piece.tile_end) {
      const Piece done = comp.piece;
      FinishPiece<D, MT, KV, CT>(p, done, st, ml_smem, obuf, lse_smem);
      new_piece = true;
    }
    comp.Advance(p);
  }
  CpAsyncWait<0>();
}

// Merges split pieces and zero-fills the rows of empty sequences. Grid (task, row): dynamic, task i owns the
// unit cut at the start of CTA i (MergeTaskAt); static, task u owns unit u's splits. A long sequence can be
// cut into hundreds of pieces, so the pieces are spread over the block's threads: weights from a block-wide
// max / sum of the pieces' log-sum-exps, then `groups` thread groups each accumulate an interleaved subset of
// the pieces and the group sums are added in a fixed order (bitwise reproducible).
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

__global__ void __launch_bounds__(kCombineThreads) DecodeCombineKernel(const __grid_constant__ DecodeParams p) {
  __shared__ float weights[kMaxPieces];
  __shared__ float scratch[kCombineThreads / 32];
  __shared__ float2 group_sums[kCombineThreads];
  PdlWait();
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
  const int r = blockIdx.y;
  if (r >= p.rows) return;
  int unit, count;
  int64_t first_slot, second_slot, stride_slot;  // slot k (k >= 1) = second_slot + (k - 1) * stride_slot
  if (p.dynamic) {
    MergeTask task;
    if (!MergeTaskAt(p.plan, blockIdx.x, &task)) return;
    unit = task.unit;
    first_slot = task.first_slot;
    count = task.last_cta - task.first_cta + 1;
    second_slot = PartialSlot(task.first_cta + 1, true);
    stride_slot = 2;
  } else {
    unit = blockIdx.x;
    if (unit >= p.batch * p.num_kv_heads) return;
    const int n = TilesOf(p.seq_lens[unit % p.batch]);
    const int chunk = (n + p.static_splits - 1) / p.static_splits;
    if (n == 0 || chunk >= n) return;  // written directly by the attention kernel
    first_slot = static_cast<int64_t>(unit) * p.static_splits;
    count = p.static_splits;
    second_slot = first_slot + 1;
    stride_slot = 1;
  }
  const float* po = p.workspace;
  const float* plse = p.workspace + p.num_slots * p.rows * D;
  auto slot_of = [&](int k) { return k == 0 ? first_slot : second_slot + (k - 1) * stride_slot; };
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
  const int cols = D / 2;                        // float2 columns of a row
  const int groups = kCombineThreads / cols;     // 2 (D=256), 4 (D=128) or 8 (D=64)
  const int col = threadIdx.x % cols, group = threadIdx.x / cols;
  float2 acc = make_float2(0.f, 0.f);
#pragma unroll 8
  for (int k = group; k < count; k += groups) {
    const float w = weights[k];
    const float2 o = *reinterpret_cast<const float2*>(po + (slot_of(k) * p.rows + r) * D + 2 * col);
    acc.x += w * o.x;
    acc.y += w * o.y;
  }
  group_sums[threadIdx.x] = acc;
  __syncthreads();
  if (group != 0) return;
  for (int g = 1; g < groups; ++g) {
    const float2 other = group_sums[g * cols + col];
    acc.x += other.x;
    acc.y += other.y;
  }
  const float inv = denom > 0.f ? 1.f / denom : 0.f;
  const int b = unit % p.batch, h = unit / p.batch;
  StoreOut2(p, OutOffset(p, b, h, r) + 2 * col, acc.x * inv, acc.y * inv);
}
}  // namespace hpc::attention
