// The grouped GEMMs of fused_moe (included by fused_moe.cu only). ONE templated CTA tile serves both GEMMs and
// all three quant schemes; what differs is the epilogue (gate-up: silu*up + rounding/quant of the
// intermediate; down: fp32 rows per pair) and the fragment path (bf16 | e4m3 converted to f16).
//
// CTA = 8 warps. It owns one M tile (BM sorted rows of one expert, see fused_moe_plan.h) and one N block:
//   gate-up: BN output columns of I, computed from 2*BN weight rows (gate n0.. and up I+n0..), interleaved in
//            shared memory in groups of 16 rows (8 gate, 8 up) so one ldmatrix.x4 yields a gate and an up n8
//            fragment at the same (row, column) of the same thread: the epilogue is register-local.
//   down:    BN = 128 columns of H.
// Both operands are K-major (x / intermediate rows and weight rows, [.., K]): the row.col mma layout. Each
// pipeline stage holds 128 bytes of K per row (64 bf16 or 128 e4m3 = one fp8_block128 K block), rows are
// 128-byte lines with the 16-byte chunk index XOR (row & 7) (conflict-free cp.async stores and ldmatrix
// reads). A k-step consumes 32 bytes (bf16 k16 | e4m3 k32): the ldmatrix addressing is the same for both,
// because an 8x8 b16 ldmatrix tile of e4m3 bytes hands each thread 4 consecutive K bytes, which is exactly
// the m16n8k32 e4m3 A/B register layout (PTX ISA: A reg i = row g (+8 for i odd), K 4q..4q+3 (+16 for i >= 2);
// B reg i = column g, K 4q..4q+3 (+16 for i = 1)).
// fp8 math: on sm_90 `mma.sync.m16n8k32.e4m3` is not native: ptxas lowers it to e4m3->f16 unpacks + two
// HMMA.16816 per instruction, re-converting the A fragment for every n8 block (seen in the SASS). We do that
// lowering ourselves with each fragment converted once per k-step: an e4m3 k32 fragment is two f16 k16
// fragments whose K order is permuted (thread q holds K {4q,4q+1} as f16 "2q,2q+1" and {4q+2,4q+3} as
// "2q+8,2q+9"); A and B get the same permutation, so the dot products are unchanged and exact (every e4m3
// value and product is exact in f16 x f16 -> f32). Native fp8 throughput is WGMMA's (the next version).
// A rows are gathered through the sorted pair list (gate-up: token = pair / k) with zero fill for padding.
// fp8_block128: per K block, partial sums accumulate in their own registers and are promoted into the fp32
// accumulator with x_scale[row, kb] * w_scale[nb, kb] (the reference's rounding points).
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
  int64_t k_bytes;           // K * element bytes: row pitch of A and B
  int64_t b_expert_bytes;    // one expert's weight matrix
  int k_blocks;              // block128: K / 128
  int n;                     // output columns: I | H
  int top_k;
};

template <GemmKind KIND, MoeQuant Q, int BM>
struct GemmShape {
  static constexpr bool kGateUp = KIND == GemmKind::kGateUp;
  static constexpr bool kFp8 = Q != MoeQuant::kNone;
  static constexpr bool kBlock = Q == MoeQuant::kFp8Block128;
  static constexpr int kBN = kGateUp ? (kBlock ? 128 : 64) : 128;  // output columns per CTA
  static constexpr int kNB = kGateUp ? 2 * kBN : kBN;               // weight rows per CTA
  static constexpr int kWarpsM = BM >= 64 ? 2 : 1;
  static constexpr int kWarpsN = 8 / kWarpsM;
  static constexpr int kWarpM = BM / kWarpsM;
  static constexpr int kWarpN = kNB / kWarpsN;
  static constexpr int kMI = kWarpM / 16;
  static constexpr int kNI = kWarpN / 8;
  static_assert(kWarpN % 16 == 0 && kWarpM % 16 == 0, "warp tile");
  static constexpr int kABytes = BM * kLineBytes;
  static constexpr int kStageBytes = (BM + kNB) * kLineBytes;
  // Two CTAs per SM (<= 128 registers, <= ~100 KB each) except block128, whose doubled accumulators (partial
  // sums per K block) need more registers: one CTA with a deeper ring.
  static constexpr int kMinBlocks = kBlock ? 1 : 2;
  static constexpr int kBudget = kMinBlocks == 1 ? 200 * 1024 : 100 * 1024;
  static constexpr int kStages = kBudget / kStageBytes > 8 ? 8 : (kBudget / kStageBytes < 2 ? 2 : kBudget / kStageBytes);
  static constexpr int kRedBytes = kBlock && kGateUp ? kWarpsN * BM * 4 : 0;  // row amax exchange
  static constexpr int kSmemBytes = kStages * kStageBytes + kRedBytes;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory");
};

__device__ __forceinline__ int Swz(int row, int chunk) { return row * kLineBytes + ((chunk ^ (row & 7)) << 4); }

template <GemmKind KIND, MoeQuant Q, int BM>
__global__ void __launch_bounds__(kGemmThreads, (GemmShape<KIND, Q, BM>::kMinBlocks))
    MoeGemmKernel(const __grid_constant__ GemmParams p) {
  using S = GemmShape<KIND, Q, BM>;
  extern __shared__ __align__(128) char smem[];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm = warp / S::kWarpsN, wn = warp % S::kWarpsN;
  const int g = lane / 4, q = lane % 4;
  const int tile = blockIdx.x;
  const int n0 = blockIdx.y * S::kBN;
  PdlWait();
  if (tile >= *p.tile_count) return;
  const int e = p.tile_expert[tile];
  const int row0 = tile * BM;  // first sorted row of the tile

  // ---- per-thread load assignments: rows tid/8 + 32 i, 16-byte chunk tid % 8 of each 128-byte line
  constexpr int kALoads = (BM * 8 + kGemmThreads - 1) / kGemmThreads;
  constexpr int kBLoads = S::kNB * 8 / kGemmThreads;
  const int lchunk = tid % 8, lrow = tid / 8;
  const uint8_t* a_src[kALoads];
#pragma unroll
  for (int i = 0; i < kALoads; ++i) {
    const int r = lrow + 32 * i;
    a_src[i] = nullptr;
    if (r < BM) {
      const int pair = p.sorted_pairs[row0 + r];
      if (pair >= 0) {
        const int64_t arow = S::kGateUp ? pair / p.top_k : row0 + r;
        a_src[i] = p.a + arow * p.k_bytes + lchunk * 16;
      }
    }
  }
  const uint8_t* b_expert = p.b + static_cast<int64_t>(e) * p.b_expert_bytes + lchunk * 16;
  int b_row[kBLoads];  // weight row of each B load, -1 past N
#pragma unroll
  for (int i = 0; i < kBLoads; ++i) {
    const int r = lrow + 32 * i;
    int col, wrow;
    if constexpr (S::kGateUp) {
      col = n0 + (r / 16) * 8 + r % 8;
      wrow = ((r / 8) % 2 ? p.n : 0) + col;  // 8 gate rows, then the 8 matching up rows
    } else {
      col = n0 + r;
      wrow = col;
    }
    b_row[i] = col < p.n ? wrow : -1;
  }
  const int k_tiles = static_cast<int>((p.k_bytes + kLineBytes - 1) / kLineBytes);

  auto load_stage = [&](int kt) {
    char* st = smem + (kt % S::kStages) * S::kStageBytes;
    const int64_t kb = static_cast<int64_t>(kt) * kLineBytes;
    const bool k_ok = kb + lchunk * 16 < p.k_bytes;
#pragma unroll
    for (int i = 0; i < kALoads; ++i) {
      const int r = lrow + 32 * i;
      if (r < BM) {
        const bool ok = a_src[i] != nullptr && k_ok;
        CpAsync16(st + Swz(r, lchunk), ok ? a_src[i] + kb : p.a, ok);
      }
    }
    char* bst = st + S::kABytes;
#pragma unroll
    for (int i = 0; i < kBLoads; ++i) {
      const int r = lrow + 32 * i;
      const bool ok = b_row[i] >= 0 && k_ok;
      CpAsync16(bst + Swz(r, lchunk), ok ? b_expert + static_cast<int64_t>(b_row[i]) * p.k_bytes + kb : p.b, ok);
    }
  };

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

#pragma unroll
  for (int s = 0; s < S::kStages - 1; ++s) {
    if (s < k_tiles) load_stage(s);
    CpAsyncCommit();
  }

  for (int kt = 0; kt < k_tiles; ++kt) {
    CpAsyncWait<S::kStages - 2>();
    __syncthreads();  // stage kt landed for everyone; stage kt-1 is free to refill
    if (kt + S::kStages - 1 < k_tiles) load_stage(kt + S::kStages - 1);
    CpAsyncCommit();

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
    const char* ast = smem + (kt % S::kStages) * S::kStageBytes;
    const char* bst = ast + S::kABytes;
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
  }
  CpAsyncWait<0>();
  PdlLaunchDependents();

  // fp8_tensor: one scale for the whole tile (activation scale x expert weight scale)
  float tensor_scale = 1.f;
  if constexpr (Q == MoeQuant::kFp8Tensor) tensor_scale = __fmul_rn(*p.a_tensor_scale, p.b_scale[e]);

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
          if constexpr (Q == MoeQuant::kFp8Tensor) gate = __fmul_rn(gate, tensor_scale), up = __fmul_rn(up, tensor_scale);
          const float h = __fmul_rn(Silu(gate), up);
          acc[mi][2 * n2][c] = h;
          row_amax[mi][c / 2] = fmaxf(row_amax[mi][c / 2], fabsf(h));
        }
    float out_scale[S::kMI][2];
    if constexpr (S::kBlock) {  // amax over the CTA's 128 columns of each row: quad, then across warps_n
      float* red = reinterpret_cast<float*>(smem + S::kStages * S::kStageBytes);
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
    } else if constexpr (Q == MoeQuant::kFp8Tensor) {
#pragma unroll
      for (int mi = 0; mi < S::kMI; ++mi) out_scale[mi][0] = out_scale[mi][1] = *p.out_tensor_scale;
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
          float2 v = make_float2(acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
          if constexpr (Q == MoeQuant::kFp8Tensor) v.x = __fmul_rn(v.x, tensor_scale), v.y = __fmul_rn(v.y, tensor_scale);
          *reinterpret_cast<float2*>(dst + col) = v;
        }
      }
  }
}

}  // namespace hpc::moe
