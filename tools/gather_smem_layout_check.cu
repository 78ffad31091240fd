// Does the gathering producer of experiment 38 (csrc/moe/moe_gather_mainloop_sm90.h) write A where CUTLASS's
// mainloop expects it? (dev tool, host only; session 35.) The producer puts byte c of row r of stage s at a = s *
// 128 * BLK_M + 128 r + c, swizzled a ^ (((a >> 7) & 7) << 4) (the 128B swizzle of a shared-memory address, what TMA
// does: tools/gather_tma_probe.cu). CUTLASS's SmemLayoutA for the gate-up kernels is a ComposedLayout of a Swizzle
// with a smem_ptr flag: the inner layout gives the element offset, the swizzle then acts on the byte address of the
// pointer (cute's swizzle_ptr). This compares the two for every (r, c, s) of the fp8 and bf16 128x256 tiles, with
// the stage base 1024-aligned (as the kernel's shared storage is).
//   nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -I$CUTLASS_INCLUDE \
//        -o gather_smem_layout_check tools/gather_smem_layout_check.cu && ./gather_smem_layout_check
#include <cstdio>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/gemm/collective/collective_builder.hpp"

using namespace cute;

template <class Element, class TileShape, class Schedule>
using MainloopOf = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, cutlass::layout::RowMajor*, 16 / sizeof(Element),
    Element, cutlass::layout::ColumnMajor*, 16 / sizeof(Element), float, TileShape, Shape<_1, _1, _1>,
    cutlass::gemm::collective::StageCountAuto, Schedule>::CollectiveOp;

template <class Mainloop>
int Mismatches(const char* name) {
  using Element = typename Mainloop::ElementA;
  constexpr int kBytes = sizeof(Element);
  typename Mainloop::SmemLayoutA layout{};
  auto inner = layout.layout_b();  // element offsets before the swizzle
  auto swizzle = layout.layout_a();
  using Inner = decltype(inner);
  constexpr int rows = size<0>(Inner{}), cols = size<1>(Inner{}), stages = size<2>(Inner{});
  int bad = 0;
  for (int s = 0; s < stages; ++s) {
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c) {
        const int cutlass_at = swizzle(static_cast<int>(inner(r, c, s)) * kBytes);
        const int at = s * rows * 128 + r * 128 + c * kBytes;
        bad += cutlass_at != (at ^ (((at >> 7) & 7) << 4));
      }
    }
  }
  std::printf("%s: A stages %dx%d x %d, %d mismatches\n", name, rows, cols, stages, bad);
  return bad;
}

int main() {
  using Fp8 = MainloopOf<cutlass::float_e4m3_t, Shape<_128, _256, _128>,
                         cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8FastAccum>;
  using Bf16 = MainloopOf<cutlass::bfloat16_t, Shape<_128, _256, _64>,
                          cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>;
  return Mismatches<Fp8>("fp8 128x256x128") + Mismatches<Bf16>("bf16 128x256x64") == 0 ? 0 : 1;
}
