// fused_moe grouped path, down GEMM (experiment 26; HPC_XLA_MOE_DOWN_STORE=scatter, the TMA-store epilogue by
// default until measured): a register-only epilogue that stores each down row at its PAIR's index instead of its
// sorted row's, so the top-k reduce reads a token's k rows as one contiguous [k, H] block.
//
// Why: the reduce runs at ~2x its bytes' floor (Qwen3 fp8 T=4096 ~65 us for 151 MB; Hy3-TP8 ~110 us for 301 MB;
// experiments 9, 11, 24 ruled out latency and bytes in flight). Its reads are a token's k rows at sorted positions,
// i.e. k scattered 2 KB column slices per CTA step; here they are one 8 x 2 KB stretch at a 4 KB pitch inside the
// token's 32 KB, and consecutive tokens follow each other: a sequential stream. Each tile row still covers one
// 512-byte stretch of its output row (256 columns), now filled by 4-byte stores (a warp instruction: 8 rows x 16
// bytes) instead of the TMA's, and the rows land in pair order. A register epilogue also has no
// TMA store descriptor, which the ptr-array kernel rewrites and fences in the consumer warps on every group change
// (sm90_gemm_array_tma_warpspecialized_cooperative.hpp: almost every tile at Qwen3's ~16 tiles per expert).
//
// Bits: D = bf16_rn(alpha * acc), alpha = a2 * w2_scale[e] (fp8_tensor) or none (bf16, fp8_block128: the blockwise
// mainloop scales inside), which is what the LinearCombination TMA epilogue computes with no source
// (sm90_visitor_compute_tma_warpspecialized.hpp: alpha * acc, converted round-to-nearest). The reduce sums the same
// values in the same slot order, so the layer's output is bitwise the TMA epilogue's (the GPU test checks it).
//
// Stores: a thread's (row, column pair) results as 4-byte bf16x2 stores (a quad of threads covers 16 contiguous
// bytes of a row); rows past the group's M and columns past N masked. Rows of pairs with -1 in sorted_pairs do not
// occur on the grouped path (align writes a pair for every local row).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "csrc/moe/moe_register_epilogue_sm90.h"

namespace hpc::moe {

struct MoeDownScatterArgs {
  const float* alpha = nullptr;           // [groups] fp8_tensor: a2 * w2_scale[e] (the setup kernel's); else null (1)
  const int32_t* expert_first = nullptr;  // [groups] first sorted row of each group (align's)
  const int32_t* sorted_pairs = nullptr;  // [rows] pair t * k + j of each sorted row (align's)
  __nv_bfloat16* down = nullptr;          // [T * k, N]: row p = the down projection of pair p
  int64_t ld = 0;                         // row pitch of down in elements (N = H)
};

class MoeDownScatterEpilogueArray : public MoeRegisterEpilogueBase<MoeDownScatterArgs> {
  using Base = MoeRegisterEpilogueBase<MoeDownScatterArgs>;

 public:
  using Base::Base;

  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const& args) {
    return args.expert_first != nullptr && args.sorted_pairs != nullptr && args.down != nullptr && args.ld > 0;
  }

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine, class FrgLayout,
            class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK blk_shape_mnk,
                                 BlockCoordMNKL blk_coord_mnkl, cute::Tensor<FrgEngine, FrgLayout> const& acc,
                                 TiledMma tiled_mma, ResidueMNK, int thread_idx, char*) {
    using namespace cute;
    constexpr int kTileN = size<1>(BlockShapeMNK{});
    CheckFragment<kTileN, FrgLayout>();

    const int m_max = get<0>(problem_shape_mnkl), n_max = get<1>(problem_shape_mnkl);
    const auto [m_coord, n_coord, k_coord, l_coord] = blk_coord_mnkl;
    const float alpha = params_.alpha != nullptr ? params_.alpha[l_coord] : 1.f;
    const int first = params_.expert_first[l_coord];

    Tensor thr_coords = ThreadCoords(m_max, n_max, blk_shape_mnk, m_coord, n_coord, tiled_mma, thread_idx);
    static_assert(decltype(size(thr_coords))::value == decltype(size(acc))::value, "one coordinate per accumulator");

    CUTLASS_PRAGMA_UNROLL
    for (int v1 = 0; v1 < 2; ++v1) {  // the thread's two rows (8 apart); every v2 of a v1 lies on the same row
      const int m = get<0>(thr_coords(2 * v1));
      if (m >= m_max) continue;
      __nv_bfloat16* row = params_.down + static_cast<int64_t>(params_.sorted_pairs[first + m]) * params_.ld;
      CUTLASS_PRAGMA_UNROLL
      for (int v2 = 0; v2 < kTileN / 8; ++v2) {
        const int i = 4 * v2 + 2 * v1;  // v0 = 0; v0 = 1 is the next column (i + 1)
        const int n = get<1>(thr_coords(i));
        if (n >= n_max) continue;
        // multiplied even by 1 (bf16, block128), as LinearCombination does: a NaN comes out the same
        *reinterpret_cast<__nv_bfloat162*>(row + n) =
            __floats2bfloat162_rn(__fmul_rn(alpha, acc(i)), __fmul_rn(alpha, acc(i + 1)));
      }
    }
  }
};

using MoeDownScatterEpilogue =
    cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<MoeDownScatterEpilogueArray>;

}  // namespace hpc::moe
