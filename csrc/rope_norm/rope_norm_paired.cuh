// rope_norm's paired kernel, taken for the common shapes (PairedKernelApplies): head_dim 64/128/256, f32 cos/sin
// rows, neox with rotary_dim % 16 == 0 or gptj with rotary_dim % 8 == 0.
//
// Why a second kernel: the general one (rope_norm_general.cuh) issued ~290 instructions per lane and row and was
// instruction-bound at 49% of the copy ceiling (ncu, bench/NOTES.md v4). Here a lane holds 16 elements of a row
// as two 8-element chunks chosen so that every rotation partner sits in the same lane (neox: chunks c and
// c + rotary_dim/16; gptj: neighbours in a chunk) -- the rotation needs no shuffles; the norm weights and the
// token's cos/sin are loaded once per thread for all its rows (and, with several rows, folded into per-thread
// coefficients); V rows of a 16-bit cache are copied without unpacking. A token's rows are split into q groups,
// k groups and v groups of up to R rows (heads h, h + step, ...), numbered kind-major within small token tiles
// so that a warp's groups run one branch; shuffles name the whole warp (the row loop says why that is safe).
#pragma once

#include <type_traits>

#include "csrc/common/fp8_scale.cuh"
#include "csrc/common/launch.cuh"
#include "csrc/rope_norm/rope_norm_params.cuh"

namespace hpc {
namespace rope_norm_detail {

enum class RowKind : int { kQ, kK, kV };

// The two chunks (element offset / 8) of a row this lane owns, and whether each is rotated.
struct LaneChunks {
  int a, b;
  bool rot_a, rot_b;
};

__device__ __forceinline__ LaneChunks PairedChunks(int lane, int lanes, int rotary_dim, bool neox) {
  if (neox) {
    const int rot_lanes = rotary_dim / 16;  // these lanes hold rotation partners: chunk l and chunk l + rot/16
    if (lane < rot_lanes) return {lane, lane + rot_lanes, true, true};
    return {2 * lane, 2 * lane + 1, false, false};  // the unrotated tail, two neighbouring chunks per lane
  }
  return {lane, lane + lanes, lane * kVec < rotary_dim, (lane + lanes) * kVec < rotary_dim};
}

__device__ __forceinline__ uint4 Load16(const void* p) { return *reinterpret_cast<const uint4*>(p); }

__device__ __forceinline__ void LoadF32x4(const float* p, float* out) {
  const float4 a = *reinterpret_cast<const float4*>(p);
  out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
}

// cos/sin of the lane's rotation pairs. neox: pair j is (chunk a elem j, chunk b elem j), angle index 8a + j.
// gptj: pairs are neighbours; c/s[0..3] serve chunk a (angle 4a + j), c/s[4..7] chunk b.
__device__ __forceinline__ void LoadPairedCosSin(const RopeNormParams& p, int64_t pos, const LaneChunks& ch,
                                                 float (&c)[8], float (&s)[8]) {
  const float* row = static_cast<const float*>(p.cos_sin) + pos * p.cos_sin_stride;
  const int half = p.rotary_dim / 2;
  if (p.neox) {
    LoadF32x8(row + ch.a * kVec, c);
    LoadF32x8(row + half + ch.a * kVec, s);
    return;
  }
  LoadF32x4(row + ch.a * 4, c);
  LoadF32x4(row + half + ch.a * 4, s);
  if (ch.rot_b) {
    LoadF32x4(row + ch.b * 4, c + 4);
    LoadF32x4(row + half + ch.b * 4, s + 4);
  }
}

// Per-thread coefficients of the whole transform, y_i = (x_i A_i + x_partner(i) B_i) / rms(x), computed once
// for all the thread's rows of one token. Rotation keeps a pair's norm, so rms(rope(x)) == rms(x) (up to fp32
// rounding) and both orders take the sum of squares from the raw row; they differ only in which weight meets
// the partner: norm then rope, y_i = w_i x_i c - w_p x_p s (B_i = -w_p s); rope then norm, y_i = w_i (x_i c -
// x_p s) (B_i = -w_i s). Unrotated elements: A = w, B = 0. No weights: w = 1. Elements 0..7 are chunk a, 8..15
// chunk b; a neox lane's partner of element j is element j +- 8, a gptj partner is the neighbour in the chunk.
struct PairedCoeffs {
  float A[16], B[16];
};

__device__ __forceinline__ void MakePairedCoeffs(bool neox, bool norm_before_rope, const LaneChunks& ch,
                                                 const float (&c)[8], const float (&s)[8], const float (&w)[16],
                                                 PairedCoeffs& k) {
#pragma unroll
  for (int i = 0; i < 16; ++i) k.A[i] = w[i], k.B[i] = 0.0f;
  if (neox) {
    if (!ch.rot_a) return;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      // pair (a_j, b_j): y_a = x_a c - x_b s, y_b = x_b c + x_a s
      k.A[j] = w[j] * c[j];
      k.A[8 + j] = w[8 + j] * c[j];
      k.B[j] = -(norm_before_rope ? w[8 + j] : w[j]) * s[j];
      k.B[8 + j] = (norm_before_rope ? w[j] : w[8 + j]) * s[j];
    }
    return;
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    if (half == 1 && !ch.rot_b) return;
    if (half == 0 && !ch.rot_a) return;
#pragma unroll
    for (int j = 0; j < kVec / 2; ++j) {
      // pair (2j, 2j + 1) of the chunk, angle 4 * chunk + j: y_e = x_e c - x_o s, y_o = x_o c + x_e s
      const int e = 8 * half + 2 * j, o = e + 1;
      const float cj = c[4 * half + j], sj = s[4 * half + j];
      k.A[e] = w[e] * cj;
      k.A[o] = w[o] * cj;
      k.B[e] = -(norm_before_rope ? w[o] : w[e]) * sj;
      k.B[o] = (norm_before_rope ? w[e] : w[o]) * sj;
    }
  }
}

// Several rows per thread: x (16 elements) -> y with the folded coefficients, then times inv once the group's
// sum of squares arrives (the products do not wait for it). With kAmax (fp8 q) it also returns the group's
// max |x| of the result, reduced in the same shuffles as the sum of squares: max_i RN(|y_i| * inv) ==
// RN(max_i |y_i| * inv) for inv > 0 (rounding is monotone), so it needs no second reduction after inv. Where the
// product is NaN (0 * inf: an all-zero row with eps = 0; inf * 0: a sum of squares that overflowed) every
// element's product was 0 or NaN, which the per-element max skips: 0.
// max(0, max_i |x_i|) as a tree (depth 5, not a chain of 16 dependent FMNMX): the same bits in every case, since
// fmaxf drops a NaN operand (a NaN pair gives NaN, which the next level or the final 0 drops) and +-0 leave fabsf
// as +0.
__device__ __forceinline__ float MaxAbs16(const float (&x)[16]) {
  float m[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) m[i] = fmaxf(fabsf(x[i]), fabsf(x[8 + i]));
#pragma unroll
  for (int i = 0; i < 4; ++i) m[i] = fmaxf(m[i], m[4 + i]);
  return fmaxf(fmaxf(fmaxf(m[0], m[2]), fmaxf(m[1], m[3])), 0.0f);
}

// A lane row's sum of squares: two chains of 8, then their sum.
__device__ __forceinline__ float SumSquares16(const float (&x)[16]) {
  float ss0 = 0.0f, ss1 = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) ss0 = fmaf(x[i], x[i], ss0), ss1 = fmaf(x[8 + i], x[8 + i], ss1);
  return ss0 + ss1;
}

// y = x A + x_partner B with the folded coefficients (the partner: element i +- 8 for neox, the neighbour for gptj).
template <bool kNeox>
__device__ __forceinline__ void FoldRow(const PairedCoeffs& k, const float (&x)[16], float (&y)[16]) {
#pragma unroll
  for (int i = 0; i < 16; ++i) y[i] = fmaf(x[i], k.A[i], x[kNeox ? (i + 8) % 16 : i ^ 1] * k.B[i]);
}

// The result is y * inv * post, or NaN everywhere when !pos_ok (one factor a row, see the phased path's out_mul);
// the returned max |y| * inv is the fp8 q row's, before post.
template <int G, bool kAmax>
__device__ __forceinline__ float TransformRowFolded(bool neox, bool normalize, bool pos_ok, float post,
                                                    const PairedCoeffs& k, float (&x)[16], uint32_t mask,
                                                    float inv_head_dim, float eps) {
  const float ss = normalize ? SumSquares16(x) : 0.0f;
  float y[16];
  if (neox) {
    FoldRow<true>(k, x, y);
  } else {
    FoldRow<false>(k, x, y);
  }
  float amax = 0.0f, inv = 1.0f;
  if constexpr (kAmax) amax = MaxAbs16(y);
  if (normalize) {
    float sum = ss;
    if constexpr (kAmax) {
      GroupSumMax<G>(sum, amax, mask);
    } else {
      sum = GroupSum<G>(sum, mask);
    }
    inv = rsqrtf(sum * inv_head_dim + eps);
  } else if constexpr (kAmax) {
    amax = GroupMax<G>(amax, mask);
  }
  const float out = pos_ok ? inv * post : __builtin_nanf("");
#pragma unroll
  for (int i = 0; i < 16; ++i) x[i] = y[i] * out;
  if constexpr (!kAmax) return 0.0f;
  const float m = amax * inv;
  return m == m ? m : 0.0f;
}

// One row per thread: folding the weights would cost more than it saves, and 32 coefficient registers next to
// 16 weights spill; the rotation reads cos/sin directly (neox pair j = (x[j], x[8 + j]); gptj pairs are
// neighbours, c/s[0..3] for chunk a, [4..7] for chunk b).
template <int G>
__device__ __forceinline__ void TransformRowDirect(bool neox, bool normalize, bool norm_before_rope,
                                                   const LaneChunks& ch, const float (&c)[8], const float (&s)[8],
                                                   const float (&w)[16], float (&x)[16], uint32_t mask,
                                                   float inv_head_dim, float eps) {
  float ss0 = 0.0f, ss1 = 0.0f;
  if (normalize) {
#pragma unroll
    for (int i = 0; i < 8; ++i) ss0 = fmaf(x[i], x[i], ss0), ss1 = fmaf(x[8 + i], x[8 + i], ss1);
    if (norm_before_rope) {
#pragma unroll
      for (int i = 0; i < 16; ++i) x[i] *= w[i];
    }
  }
  if (ch.rot_a && neox) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const float a = x[j], b = x[8 + j];
      x[j] = a * c[j] - b * s[j];
      x[8 + j] = b * c[j] + a * s[j];
    }
  } else if (ch.rot_a) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      if (half == 1 && !ch.rot_b) break;
#pragma unroll
      for (int j = 0; j < kVec / 2; ++j) {
        const int e = 8 * half + 2 * j;
        const float ev = x[e], od = x[e + 1], cj = c[4 * half + j], sj = s[4 * half + j];
        x[e] = ev * cj - od * sj;
        x[e + 1] = od * cj + ev * sj;
      }
    }
  }
  if (normalize) {
    const float inv = rsqrtf(GroupSum<G>(ss0 + ss1, mask) * inv_head_dim + eps);
#pragma unroll
    for (int i = 0; i < 16; ++i) x[i] *= norm_before_rope ? inv : w[i] * inv;
  }
}

// The token's row in the paged cache (head 0), or -1 when the slot is -1 (skip) or out of range.
__device__ __forceinline__ int64_t CacheRow(const RopeNormParams& p, int64_t slot, int64_t stride_b,
                                            int64_t stride_p) {
  if (slot < 0 || slot >= p.num_slots) return -1;
  const int64_t block = p.num_slots <= INT32_MAX ? static_cast<uint32_t>(slot) / static_cast<uint32_t>(p.page_size)
                                                 : slot / p.page_size;
  return block * stride_b + (slot - block * p.page_size) * stride_p;
}

// 128 threads per block: at ~90 registers a 256-thread block fit 2 per SM (16 warps); 128-thread blocks fit 5.
// 4-row kernels: 4 blocks (128 registers), which their full-group phases need to hold 4 rows' chains at once
// without spilling (at 5 blocks they spilled 140-480 bytes; experiment 21 had found 4 blocks 3-6% slower for the
// row-by-row code, which has no such overlap to pay for the lost warps).
constexpr int kPairedThreads = 128;
template <int R>
constexpr int kPairedMinBlocks = R == 4 ? 4 : (R == 2 ? 6 : 8);

__device__ __forceinline__ void Unpack16(const uint4& a, const uint4& b, bool bf16, float (&x)[16]) {
  float lo[8], hi[8];
  if (bf16) {
    UnpackVec8<__nv_bfloat16>(a, lo), UnpackVec8<__nv_bfloat16>(b, hi);
  } else {
    UnpackVec8<__half>(a, lo), UnpackVec8<__half>(b, hi);
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) x[i] = lo[i], x[8 + i] = hi[i];
}

// One 16-element lane row: chunk a (x[0..7]) and chunk b (x[8..15]) to their 16-bit or fp8 destinations.
template <typename T, bool kFp8>
__device__ __forceinline__ void StoreRow16(void* base, int64_t off, const LaneChunks& ch, const float (&x)[16],
                                           float mul) {
  float lo[8], hi[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) lo[i] = x[i], hi[i] = x[8 + i];
  if constexpr (kFp8) {
    StoreE4M3x8Scaled(static_cast<uint8_t*>(base) + off + ch.a * kVec, lo, mul);
    StoreE4M3x8Scaled(static_cast<uint8_t*>(base) + off + ch.b * kVec, hi, mul);
  } else {
    StoreVec8(static_cast<T*>(base) + off + ch.a * kVec, lo);
    StoreVec8(static_cast<T*>(base) + off + ch.b * kVec, hi);
  }
}

// What one lane group works on: a kind, a token and its first head (rows first_head + i * head_step, i < R).
struct GroupUnit {
  RowKind kind;
  int token, first_head;
};

__device__ __forceinline__ GroupUnit UnitOfGroup(const RopeNormParams& p, int group) {
  int tile = 0, r = 0;
  p.tile_div(tile, r, group);
  const int q_span = p.q_groups << p.tile_shift, kv_span = p.kv_groups << p.tile_shift;
  const RowKind kind = r < q_span ? RowKind::kQ : (r < q_span + kv_span ? RowKind::kK : RowKind::kV);
  r -= kind == RowKind::kQ ? 0 : (kind == RowKind::kK ? q_span : q_span + kv_span);
  // the token's index within the tile is the low bits, the group's index within its kind the high ones
  return {kind, (tile << p.tile_shift) + (r & ((1 << p.tile_shift) - 1)), r >> p.tile_shift};
}

template <typename T>
__device__ __forceinline__ const T* SourceRow(const RopeNormParams& p, RowKind kind, int token, int head) {
  const T* src = static_cast<const T*>(kind == RowKind::kQ ? p.q : (kind == RowKind::kK ? p.k : p.v));
  const int64_t src_t = kind == RowKind::kQ ? p.q_stride_t : (kind == RowKind::kK ? p.k_stride_t : p.v_stride_t);
  const int64_t src_h = kind == RowKind::kQ ? p.q_stride_h : (kind == RowKind::kK ? p.k_stride_h : p.v_stride_h);
  return src + token * src_t + head * src_h;
}

// cos/sin rows go into L2 ahead of use. A group's cos/sin load waits on its position, and in a stream of
// 16384 tokens the row is rarely still in L2, so every group paid a DRAM latency twice in a row (rows, then
// cos/sin) before its math: cos/sin was ~20% of the time at ~9% of the bytes (bench/NOTES.md session 7). Now
// the group p.prefetch_groups ahead -- most of a wave of resident blocks, i.e. a group that starts about when
// this one's block ends -- is looked up, and when it is a token's first q group, lane 0 loads that token's
// position here and prefetches its cos/sin row as soon as it has issued its own (PrefetchCosSin), fire-and-forget.
// Measured: prefetching the q/k/v rows the same way was slower, and a distance of a whole wave was too far.
// Returns the position to prefetch, or -1.
template <int G>
__device__ __forceinline__ int CosSinAheadPosition(const RopeNormParams& p, int group, int lane) {
  if (p.prefetch_groups == 0 || lane != 0) return -1;
  const int64_t ahead = static_cast<int64_t>(group) + p.prefetch_groups;
  if (ahead >= static_cast<int64_t>(gridDim.x) * (kPairedThreads / G)) return -1;
  const GroupUnit u = UnitOfGroup(p, static_cast<int>(ahead));
  if (u.token >= p.tokens || u.kind != RowKind::kQ || u.first_head != 0) return -1;
  // int: a position below max_pos (checked before use) is far below 2^31; one register, not two
  return static_cast<int>(LoadIndex(p.positions, p.positions_i64, u.token));
}

__device__ __forceinline__ void PrefetchCosSin(const RopeNormParams& p, int pos) {
  if (pos < 0 || pos >= p.max_pos) return;
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(__cvta_generic_to_global(
                   static_cast<const float*>(p.cos_sin) + pos * p.cos_sin_stride)),
               "r"(p.rotary_dim * 4)
               : "memory");
}

template <int G, int R, typename T, bool kFp8Cache, bool kFp8Q>
__global__ void __launch_bounds__(kPairedThreads, kPairedMinBlocks<R>)
    RopeNormPairedKernel(const __grid_constant__ RopeNormParams p) {
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  const int lane = threadIdx.x % G;
  const int group = static_cast<int>(blockIdx.x * (kPairedThreads / G) + threadIdx.x / G);
  const GroupUnit unit = UnitOfGroup(p, group);
  const RowKind kind = unit.kind;
  const int token = unit.token, first_head = unit.first_head;
  PdlWait();  // inputs may come from the previous kernel in the stream
  if (token >= p.tokens) return;  // whole groups leave together (one token per group)
  const int heads = kind == RowKind::kQ ? p.num_q_heads : p.num_kv_heads;
  const int head_step = kind == RowKind::kQ ? p.q_groups : p.kv_groups;
  const LaneChunks ch = PairedChunks(lane, G, p.rotary_dim, p.neox);
  // A merged k/v group (p.kv_merged) holds the token's k rows and then its v rows.
  const bool with_v = p.kv_merged && kind == RowKind::kK;
  // Row i of the group: its kind (v for a merged group's rows past the k heads) and head, or -1 past the end.
  auto row_head = [&](int i, RowKind& row_kind) {
    int head = first_head + i * head_step;
    row_kind = kind;
    if (with_v && head >= heads) row_kind = RowKind::kV, head -= heads;
    return head < heads ? head : -1;
  };

  // Every load first: the row chunks, the indices, then cos/sin and weights. Row i's address steps from row 0's
  // by head_step heads (a merged k/v group: its k rows, then its v rows from the v tensor), and each row's two
  // loads sit under their own predicate (row_head's rule without its break). Why: row by row through row_head and
  // SourceRow, each row's kind, base and strides were re-selected behind a branch and its 64-bit offsets
  // multiplied afresh, so a 4-row group's 8 loads issued ~330 instructions into the thread (SASS, session 62) --
  // and their DRAM round trip is the kernel's largest stall. Measured with the late coefficients below (experiments
  // 92 + 93, bench/NOTES.md session 63, H100, T=16384): fp8 rows -2.8..-3.6%, bf16 8/1 -2%, no row slower.
  uint4 ra[R], rb[R];
  {
    auto load_row = [&](int i, const T* row) {
      ra[i] = Load16(row + ch.a * kVec);
      rb[i] = Load16(row + ch.b * kVec);
    };
    const int64_t stride_h = kind == RowKind::kQ ? p.q_stride_h : (kind == RowKind::kK ? p.k_stride_h : p.v_stride_h);
    const T* row = SourceRow<T>(p, kind, token, first_head);
    if (R == 1 || !with_v) {  // one row: never merged (KvMerged)
      const int64_t step = head_step * stride_h;
#pragma unroll
      for (int i = 0; i < R; ++i, row += step) {
        if (first_head + i * head_step < heads) load_row(i, row);
      }
    } else {
      // first_head 0 and head_step 1 here: the k and v heads fit one group (KvMerged), so a token has one k/v group
      const T* v_row = SourceRow<T>(p, RowKind::kV, token, 0);
#pragma unroll
      for (int i = 0; i < R; ++i, row += stride_h) {
        if (i < heads) {
          load_row(i, row);
        } else if (i < 2 * heads) {
          load_row(i, v_row + (i - heads) * p.v_stride_h);
        }
      }
    }
  }
  const int64_t pos = kind == RowKind::kV ? 0 : LoadIndex(p.positions, p.positions_i64, token);
  const int64_t slot = kind == RowKind::kQ ? -1 : LoadIndex(p.slot_mapping, p.slots_i64, token);
  const int ahead_pos = CosSinAheadPosition<G>(p, group, lane);  // after ours: only a prefetch waits on it

  // The group's v rows into the cache (a 16-bit row is copied as it is); false when the slot is skipped.
  auto store_v_rows = [&]() {
    const int64_t dst = CacheRow(p, slot, p.v_cache_stride_b, p.v_cache_stride_p);
    if (dst < 0) return false;
    const float mul = kFp8Cache ? QuantMultiplier(*p.v_scale) : 1.0f;
#pragma unroll
    for (int i = 0; i < R; ++i) {
      RowKind row_kind;
      const int head = row_head(i, row_kind);
      if (head < 0) break;
      if (row_kind != RowKind::kV) continue;
      const int64_t off = dst + head * p.v_cache_stride_h;
      if constexpr (kFp8Cache) {
        float x[16];
        Unpack16(ra[i], rb[i], kBf16, x);
        StoreRow16<T, true>(p.v_cache, off, ch, x, mul);
      } else {
        StoreGlobal16(static_cast<T*>(p.v_cache) + off + ch.a * kVec, ra[i]);
        StoreGlobal16(static_cast<T*>(p.v_cache) + off + ch.b * kVec, rb[i]);
      }
    }
    return true;
  };
  if (kind == RowKind::kV) {
    PdlLaunchDependents();
    if (store_v_rows()) PrefetchCosSin(p, ahead_pos);
    return;
  }

  // Out-of-range positions (only possible without HPC_XLA_CHECK) make the rows NaN rather than read outside
  // cos_sin_cache; out-of-range slots are not written.
  const bool pos_ok = pos >= 0 && pos < p.max_pos;
  const int64_t k_dst = kind == RowKind::kK ? CacheRow(p, slot, p.k_cache_stride_b, p.k_cache_stride_p) : -1;
  if (kind == RowKind::kK && k_dst < 0) return;
  if (with_v) store_v_rows();  // same slot as k: in range here
  // Several rows per thread: the weights are folded into per-thread coefficients (PairedCoeffs).
  constexpr bool kFolded = R > 1;
  PairedCoeffs coeffs;
  float c[8] = {}, s[8] = {}, w[16];
  if (pos_ok && ch.rot_a) LoadPairedCosSin(p, pos, ch, c, s);
  PrefetchCosSin(p, ahead_pos);  // its position came with ours; issued here it holds no register for long
  {
    const void* w_ptr = kind == RowKind::kQ ? p.q_norm_weight : p.k_norm_weight;
    const DType w_dtype = kind == RowKind::kQ ? p.q_norm_dtype : p.k_norm_dtype;
    float wa[8], wb[8];
    if (w_ptr != nullptr) {
      LoadWeight8(w_ptr, w_dtype, ch.a * kVec, wa), LoadWeight8(w_ptr, w_dtype, ch.b * kVec, wb);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) wa[i] = wb[i] = 1.0f;
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i] = wa[i], w[8 + i] = wb[i];
  }
  // The coefficients wait on cos/sin, whose load waits on the position: an L2 round trip after the rows' DRAM one.
  // Where the rows' sums of squares do not need them (16-bit q, k rows) the 4-row kernels' full groups fold them
  // in after their reductions, which fill that wait (experiment 93); the fp8 q sums need max |y| of the folded
  // rows first, and the 2-row kernels (80 registers) spill holding cos/sin and weights across the reductions.
  auto make_coeffs = [&]() {
    if constexpr (kFolded) MakePairedCoeffs(p.neox, p.norm_before_rope, ch, c, s, w, coeffs);
  };
  constexpr bool kLateCoeffs = R == 4 && !kFp8Q;
  if constexpr (!kLateCoeffs) make_coeffs();
  const bool normalize = (kind == RowKind::kQ ? p.q_norm_weight : p.k_norm_weight) != nullptr;
  const float k_mul = kFp8Cache && kind == RowKind::kK ? QuantMultiplier(*p.k_scale) : 1.0f;
  PdlLaunchDependents();

  // Full-warp shuffles. Why: with a partial mask (the group's lanes) ptxas checks convergence before every row's
  // reduction -- S2R of the lane id, then MATCH.ANY and REDUX.OR, a dependent chain on each row's critical path --
  // where the full mask costs one BRA.DIV. Safe because every lane of the warp that has not exited runs the same
  // rows' shuffles: a warp holds one kind, and its groups the same number of rows (the token tiles: rope_norm.cu,
  // uneven_rows); lanes that left above have exited, and exited lanes may be named in a mask.
  constexpr uint32_t mask = 0xffffffffu;

  // A full group (R rows: the q groups of every benchmark shape, the k groups of 64/8 and 32/4) runs its rows in
  // phases, each over all R rows: sums of squares (and, fp8 q, max |y|), one shuffle reduction for them all, the
  // scales, then the outputs. Why: row by row, each row's chain -- fold, reduce, rsqrt, scale, convert, store -- sat
  // between branches ptxas does not schedule across (the BRA.DIV before the shuffles, the fp8 scale's range test,
  // head < heads), so a thread's R rows ran one after the other at ~20 warps per SM; in phases their chains overlap.
  // Under fp8 q, y is folded twice (for max |y|, then for the output): 32 FP ops per row rather than 16 registers
  // per row held across the reduction. Same operations in the same order per row as the loop below: the same bits.
  if constexpr (kFolded) {
    auto full_group = [&](auto neox) {
      constexpr bool kNeox = decltype(neox)::value;
      float ss[R], amax[R], inv[R];
#pragma unroll
      for (int i = 0; i < R; ++i) {
        float x[16];
        Unpack16(ra[i], rb[i], kBf16, x);
        ss[i] = SumSquares16(x);
        amax[i] = 0.0f;
        if constexpr (kFp8Q) {
          float y[16];
          FoldRow<kNeox>(coeffs, x, y);
          amax[i] = MaxAbs16(y);
        }
      }
      if (normalize) {
        if constexpr (kFp8Q) {
          GroupSumMaxRows<G>(ss, amax, mask);
        } else {
          GroupSumRows<G>(ss, mask);
        }
#pragma unroll
        for (int i = 0; i < R; ++i) inv[i] = rsqrtf(ss[i] * p.inv_head_dim + p.eps);
      } else {
        if constexpr (kFp8Q) GroupMaxRows<G>(amax, mask);
#pragma unroll
        for (int i = 0; i < R; ++i) inv[i] = 1.0f;  // y * 1 == y (a NaN is the canonical one either way)
      }
      if constexpr (kLateCoeffs) make_coeffs();
      // row i's output: y times out_mul[i] -- 1 / rms, times the fp8 multiplier where the row is stored as fp8, or
      // NaN where the position was out of range (every product NaN). Why one factor: a NaN select per element
      // and a second multiply per element (the fp8 store's) were 32 of a row's ~110 output instructions, and the
      // kernels are latency-bound (experiment 91, bench/NOTES.md session 62: H100 T=16384 fp8 rows -2..-3%, bf16
      // 8/1 -2%; no row slower). 16-bit rows keep their bits; fp8 rows round y * RN(inv * mul) once where they
      // rounded RN(y * inv) * mul: at most one e4m3 step apart on a value within an f32 ulp of a rounding midpoint
      // (the tests' tolerances are the reference's).
      float out_mul[R];
      auto output_row = [&](int i, float (&y)[16]) {
        float x[16];
        Unpack16(ra[i], rb[i], kBf16, x);
        FoldRow<kNeox>(coeffs, x, y);
#pragma unroll
        for (int j = 0; j < 16; ++j) y[j] *= out_mul[i];
      };
      constexpr float kNaN = __builtin_nanf("");
      if (kind == RowKind::kK) {
#pragma unroll
        for (int i = 0; i < R; ++i) out_mul[i] = pos_ok ? inv[i] * k_mul : kNaN;
#pragma unroll
        for (int i = 0; i < R; ++i) {
          float y[16];
          output_row(i, y);
          StoreRow16<T, kFp8Cache>(p.k_cache, k_dst + (first_head + i * head_step) * p.k_cache_stride_h, ch, y, 1.0f);
        }
        return;
      }
#pragma unroll
      for (int i = 0; i < R; ++i) out_mul[i] = pos_ok ? inv[i] : kNaN;
      if constexpr (kFp8Q) {
#pragma unroll
        for (int i = 0; i < R; ++i) {
          const float m = amax[i] * inv[i];  // NaN: every product was 0 or NaN (TransformRowFolded)
          amax[i] = pos_ok && m == m ? m : 0.0f;
        }
        Fp8RowScale rs[R];
        Fp8RowScalesOfAmax(amax, rs);
#pragma unroll
        for (int i = 0; i < R; ++i) {
          const int head = first_head + i * head_step;
          if (lane == 0) p.q_scale[static_cast<int64_t>(token) * p.num_q_heads + head] = rs[i].scale;
          out_mul[i] *= rs[i].mul;  // NaN stays NaN
        }
      }
#pragma unroll
      for (int i = 0; i < R; ++i) {
        float y[16];
        output_row(i, y);
        StoreRow16<T, kFp8Q>(p.q_out, token * p.q_out_stride_t + (first_head + i * head_step) * p.q_out_stride_h, ch,
                             y, 1.0f);
      }
    };
    if (first_head + (R - 1) * head_step < heads) {  // warp-uniform, like every group's row count
      if (p.neox) {
        full_group(std::true_type{});
      } else {
        full_group(std::false_type{});
      }
      return;
    }
  }
  if constexpr (kLateCoeffs) make_coeffs();
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const int head = first_head + i * head_step;
    if (head >= heads) break;
    float x[16];
    Unpack16(ra[i], rb[i], kBf16, x);
    float folded_amax = 0.0f;  // folded fp8-q kernels: the group's max |x| (q rows use it, k rows ignore it)
    float store_mul = kind == RowKind::kK ? k_mul : 1.0f;
    if constexpr (kFolded) {
      // k rows: the fp8 cache's multiplier rides in the row's one factor
      folded_amax = TransformRowFolded<G, kFp8Q>(p.neox, normalize, pos_ok, store_mul, coeffs, x, mask,
                                                 p.inv_head_dim, p.eps);
      store_mul = 1.0f;
    } else {
      TransformRowDirect<G>(p.neox, normalize, p.norm_before_rope, ch, c, s, w, x, mask, p.inv_head_dim, p.eps);
      if (!pos_ok) {
#pragma unroll
        for (int j = 0; j < 16; ++j) x[j] = __int_as_float(0x7fc00000);
      }
    }
    if (kind == RowKind::kK) {
      StoreRow16<T, kFp8Cache>(p.k_cache, k_dst + head * p.k_cache_stride_h, ch, x, store_mul);
      continue;
    }
    const int64_t off = token * p.q_out_stride_t + head * p.q_out_stride_h;
    float mul = 1.0f;
    if constexpr (kFp8Q) {
      float amax = folded_amax;
      if constexpr (!kFolded) amax = GroupMax<G>(MaxAbs16(x), mask);
      if (!pos_ok) amax = 0.0f;  // the rows are NaN: the per-element max skips NaN
      // amax / 448 and 1 / scale bit for bit, without the division's slow-path calls (fp8_scale.cuh)
      const Fp8RowScale rs = Fp8RowScaleOfAmax(amax);
      if (lane == 0) p.q_scale[static_cast<int64_t>(token) * p.num_q_heads + head] = rs.scale;
      mul = rs.mul;
    }
    StoreRow16<T, kFp8Q>(p.q_out, off, ch, x, mul);
  }
}

}  // namespace rope_norm_detail
}  // namespace hpc
