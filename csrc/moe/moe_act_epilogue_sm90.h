// fused_moe grouped path with w13 interleaved (experiment 16; HPC_XLA_MOE_ACT=kernel turns it off for A/B runs):
// silu(gate) * up computed in the gate-up GEMM's epilogue, straight from the accumulators, so the gate_up [P, 2I]
// bf16 round trip and the act kernel go away. Measured (H100, session 27): Qwen3 fp8 T=4096 570 -> 532 us.
// Design, traffic arithmetic and what would refute it: bench/research/moe_act_epilogue.md.
//
// Precondition: w13 arrives interleaved in blocks of 64 rows (FusedMoeArgs::w13_interleaved, made by `interleave_w13`
// in hpc_xla/moe_layout.py):
// prepared row 128q + j is gate row 64q + j and prepared row 128q + 64 + j is up row 64q + j (j < 64). With CTA tiles
// of 128 or 256 columns starting at multiples of 128, output column n (n % 128 < 64) holds gate column
// c = 64 (n / 128) + n % 64 and column n + 64 holds up column c. In the sm90 GMMA accumulator fragment
// ((2, 2, N/8), 1, 1) of a 64xN atom (mma_traits_sm90_gmma.hpp, CLayout_64xN) value (v0, v1, v2) sits at row
// 8 v1 (+ the thread's row) and column v0 + 8 v2 (+ 2 (t % 4)), flat index v0 + 2 v1 + 4 v2: columns n and n + 64
// are flat indices i and i + 32 of the SAME thread, which is what makes this a register-only epilogue.
//
// Bits: the act kernel reads gate_up = bf16_rn(alpha_e * acc) (the LinearCombination epilogue: one fp32 multiply,
// round to nearest) and computes h = silu(g) * u in fp32, then e4m3(h * (1 / a2)) with satfinite (fp8_tensor) or
// bf16_rn(h) (bf16). This epilogue does exactly those operations in that order, so the result is bitwise equal to
// the kernel path run on the un-interleaved w13 (the GPU test checks it) -- provided a wgmma column's sum does not
// depend on which tile column it lands in.
//
// Conversions: gate and up are rounded to bf16 two columns at a time (cvt.rn.bf16x2.f32, the same rounding as two
// single conversions) -- the single F2F.BF16.F32 shares the 16-per-clock pipe with silu's two MUFU ops.
//
// Stores: a thread writes each of its (row, column pair) results directly: 2-byte (e4m3) or 4-byte (bf16) stores,
// rows past the group's M (the next expert's rows follow unpadded) and columns past N (Hy3's I = 192: half of the
// second 256-wide tile) masked. A quad transpose to 8-byte stores is a later step, if the stores show up.
//
// The class is a register-only epilogue (moe_register_epilogue_sm90.h: DefaultEpilogueArray's interface inside
// CUTLASS's Sm90TmaWarpSpecializedAdapter).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "csrc/common/numeric.h"
#include "csrc/moe/fused_moe.h"
#include "csrc/moe/moe_common.cuh"
#include "csrc/moe/moe_register_epilogue_sm90.h"

namespace hpc::moe {

// Column block of the interleaved w13 (gate rows then up rows, 64 each).
constexpr int kActEpilogueBlock = 64;

struct MoeActEpilogueArgs {
  const float* alpha = nullptr;      // [groups] fp8_tensor: a13 * w13_scale[e] (the setup kernel's); bf16: null (1)
  void** out = nullptr;              // [groups] the group's first row of the intermediate [P, I]
  const float* out_scale = nullptr;  // fp8_tensor: a2 (static activation scale of the down GEMM's input)
  int64_t ld = 0;                    // row pitch of the intermediate in elements (I)
};

template <MoeQuant kQuant>
class MoeActEpilogueArray : public MoeRegisterEpilogueBase<MoeActEpilogueArgs> {
  static_assert(kQuant == MoeQuant::kFp8Tensor || kQuant == MoeQuant::kNone,
                "fp8_block128 keeps the act kernel (its per-128 amax spans two 128x128 CTAs)");
  using Base = MoeRegisterEpilogueBase<MoeActEpilogueArgs>;

 public:
  using Base::Base;

  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const& args) {
    return args.out != nullptr && args.ld > 0 && (kQuant != MoeQuant::kFp8Tensor || (args.alpha && args.out_scale));
  }

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine, class FrgLayout,
            class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK blk_shape_mnk,
                                 BlockCoordMNKL blk_coord_mnkl, cute::Tensor<FrgEngine, FrgLayout> const& acc,
                                 TiledMma tiled_mma, ResidueMNK, int thread_idx, char*) {
    using namespace cute;
    constexpr int kTileN = size<1>(BlockShapeMNK{});
    static_assert(kTileN == 128 || kTileN == 256, "tiles of whole 128-column blocks (64 gate + 64 up)");
    CheckFragment<kTileN, FrgLayout>();
    constexpr int kPartner = 4 * kActEpilogueBlock / 8;  // flat index of column n + 64: v2 + 8

    const int m_max = get<0>(problem_shape_mnkl), n_max = get<1>(problem_shape_mnkl);
    const auto [m_coord, n_coord, k_coord, l_coord] = blk_coord_mnkl;
    const float alpha = kQuant == MoeQuant::kFp8Tensor ? params_.alpha[l_coord] : 1.f;
    const float mul = kQuant == MoeQuant::kFp8Tensor ? QuantMultiplier(*params_.out_scale) : 1.f;
    char* out = static_cast<char*>(params_.out[l_coord]);

    Tensor thr_coords = ThreadCoords(m_max, n_max, blk_shape_mnk, m_coord, n_coord, tiled_mma, thread_idx);
    static_assert(decltype(size(thr_coords))::value == decltype(size(acc))::value, "one coordinate per accumulator");

    CUTLASS_PRAGMA_UNROLL
    for (int v2 = 0; v2 < kTileN / 8; ++v2) {
      if ((v2 % (2 * kActEpilogueBlock / 8)) >= kActEpilogueBlock / 8) continue;  // an up column: its gate's partner
      CUTLASS_PRAGMA_UNROLL
      for (int v1 = 0; v1 < 2; ++v1) {
        const int i = 4 * v2 + 2 * v1;  // v0 = 0; v0 = 1 is the next column (i + 1)
        const int m = get<0>(thr_coords(i)), n = get<1>(thr_coords(i));
        if (m >= m_max || n >= n_max) continue;
        // the act kernel's operands: gate_up rounded to bf16 after the alpha multiply, two columns per packed
        // conversion (one F2FP instead of two F2F.BF16.F32, which share the 16-per-clock pipe with silu's MUFU ops)
        const float2 g = __bfloat1622float2(
            __floats2bfloat162_rn(__fmul_rn(alpha, acc(i)), __fmul_rn(alpha, acc(i + 1))));
        const float2 u = __bfloat1622float2(
            __floats2bfloat162_rn(__fmul_rn(alpha, acc(i + kPartner)), __fmul_rn(alpha, acc(i + 1 + kPartner))));
        const float h[2] = {__fmul_rn(Silu(g.x), u.x), __fmul_rn(Silu(g.y), u.y)};
        const int64_t col = (n / (2 * kActEpilogueBlock)) * kActEpilogueBlock + n % (2 * kActEpilogueBlock);
        if constexpr (kQuant == MoeQuant::kFp8Tensor) {
          const __nv_fp8x2_storage_t two =
              __nv_cvt_float2_to_fp8x2(make_float2(h[0] * mul, h[1] * mul), __NV_SATFINITE, __NV_E4M3);
          *reinterpret_cast<__nv_fp8x2_storage_t*>(out + static_cast<int64_t>(m) * params_.ld + col) = two;
        } else {
          *reinterpret_cast<__nv_bfloat162*>(out + (static_cast<int64_t>(m) * params_.ld + col) * 2) =
              __floats2bfloat162_rn(h[0], h[1]);
        }
      }
    }
  }
};

template <MoeQuant kQuant>
using MoeActEpilogue = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<MoeActEpilogueArray<kQuant>>;

}  // namespace hpc::moe
