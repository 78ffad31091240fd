// The base of fused_moe's register-only grouped-GEMM epilogue (moe_act_epilogue_sm90.h: silu(gate) * up from the
// gate-up accumulators). It has DefaultEpilogueArray's interface (cutlass/epilogue/collective/
// default_epilogue_array.hpp) and runs inside CUTLASS's Sm90TmaWarpSpecializedAdapter, like the builder's
// PtrArrayNoSmemWarpSpecialized epilogue: no shared memory, no TMA descriptor (so nothing to rewrite and fence when a
// persistent CTA moves to another group), C never read.
#pragma once

#include <cstddef>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/detail/layout.hpp"
#include "cutlass/epilogue/collective/detail.hpp"
#include "cutlass/epilogue/dispatch_policy.hpp"

namespace hpc::moe {

// Args: the epilogue's own arguments, passed through unchanged as its Params.
template <class Args>
class MoeRegisterEpilogueBase {
 public:
  using EpilogueSchedule = cutlass::epilogue::PtrArrayNoSmemWarpSpecialized;
  using DispatchPolicy = EpilogueSchedule;
  // Only what the kernel names: C is never read; D is described by Args (StrideD unused, rank 3).
  using ElementC = void;
  using ElementD = cutlass::bfloat16_t;
  using StrideC = cutlass::detail::TagToStrideC_t<cutlass::layout::RowMajor*>;
  using StrideD = StrideC;
  using InternalStrideC = cute::remove_pointer_t<StrideC>;
  using InternalStrideD = cute::remove_pointer_t<StrideD>;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;

  struct SharedStorage {};
  using TensorMapStorage = SharedStorage;

  using Arguments = Args;
  using Params = Args;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return args;
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&, int) {
    return 0;
  }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }

  CUTLASS_HOST_DEVICE explicit MoeRegisterEpilogueBase(Params const& params) : params_(params) {}

  CUTLASS_DEVICE bool is_source_needed() { return false; }

 protected:
  // The thread's accumulators, one GMMA atom of 64 rows x kTileN columns per consumer warpgroup: the sm90 fragment
  // ((2, 2, N/8), 1, 1) (mma_traits_sm90_gmma.hpp, CLayout_64xN), value (v0, v1, v2) at row 8 v1 (+ the thread's
  // row) and column v0 + 8 v2 (+ 2 (t % 4)), flat index v0 + 2 v1 + 4 v2.
  template <int kTileN, class FrgLayout>
  CUTLASS_DEVICE static constexpr void CheckFragment() {
    using namespace cute;
    static_assert(rank(FrgLayout{}) == 3 && size<1>(FrgLayout{}) == 1 && size<2>(FrgLayout{}) == 1,
                  "one GMMA atom per warpgroup and tile");
    static_assert(std::is_same_v<decltype(shape<0>(FrgLayout{})), Shape<_2, _2, Int<kTileN / 8>>>,
                  "the sm90 GMMA accumulator fragment (v0, v1, v2): column v0 + 8 v2, row 8 v1");
  }

  // (m, n) of every accumulator of this thread, in the group's problem coordinates (as DefaultEpilogueArray).
  template <class BlockShapeMNK, class TiledMma>
  CUTLASS_DEVICE static auto ThreadCoords(int m_max, int n_max, BlockShapeMNK blk_shape_mnk, int m_coord, int n_coord,
                                          TiledMma tiled_mma, int thread_idx) {
    using namespace cute;
    Tensor coords = local_tile(make_identity_tensor(make_shape(m_max, n_max)), take<0, 2>(blk_shape_mnk),
                               make_coord(m_coord, n_coord));
    return tiled_mma.get_thread_slice(thread_idx).partition_C(coords);
  }

  Params params_;
};

}  // namespace hpc::moe
