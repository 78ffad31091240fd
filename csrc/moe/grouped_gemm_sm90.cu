// fused_moe's large-T grouped GEMMs (see grouped_gemm_sm90.h) on CUTLASS sm90 ptr-array grouped kernels:
//   bf16          128x256x64 (128x128x64) cooperative, HGMMA
//   fp8_tensor    128x256x128 (128x128x128) cooperative, QGMMA, FP8 fast accumulation, per-group alpha =
//                 a_scale * w_scale[e]
//   fp8_block128  128x128x128 cooperative, QGMMA, CUTLASS's blockwise-scaled mainloop: per 128-deep K block the
//                 partial sums are promoted into fp32 with sfa[row, kb] * sfb[n/128, kb] (the reference's order
//                 of rounding points, DeepGEMM-style)
// and 64-row ping-pong variants of each (64x256 bf16 / fp8_tensor, 64x128 fp8_tensor / fp8_block128) for groups of
// a few dozen rows (GroupedGemmGroups::tile_m, from fused_moe_plan.h's GroupedCtaRows). GEMM1 (gate-up) and GEMM2
// (down) share the kernel type (shapes are runtime).
// The 128x256 tiles run in clusters of 2 along N by default (experiment 33, HPC_XLA_MOE_GEMM_CLUSTER): both CTAs of
// a pair work on one M tile, so no CTA idles however small a group is, and every benchmark shape has an even count of
// 256-wide N tiles. Pairs along M (=m2, experiment 18's form) idle their second CTA on an expert with an odd count of
// M tiles (Qwen3 fp8 T=4096 +35 us). fp8_block128's 128x128 tiles pair along N too (experiment 34), and so do the
// 64-row ping-pong tiles of every quant (experiment 37, HPC_XLA_MOE_NARROW_CLUSTER).
// w13 interleaved in blocks of 64 rows: GEMM1 (fp8_tensor | bf16, 128x256 / 128x128; fp8_tensor's 64-row ping-pong
// tiles too) writes silu(gate) * up itself from its accumulators (moe_act_epilogue_sm90.h) instead of gate_up for the
// act kernel (GroupedGemmActInEpilogue).
//
// Why our own entry kernel instead of GemmUniversalAdapter: (1) CUTLASS 4.2's ptr-array kernels never call
// griddepcontrol.wait, so launching them with PDL would let them read the setup kernel's arguments too early;
// GroupedGemmEntry waits first, then runs the CUTLASS kernel body. (2) The adapter calls cudaFuncSetAttribute
// on every initialize(); we set the shared-memory limit once per kernel.
//
// Scale factors (fp8_block128): both K-major. Activations [rows, K/128] f32 (what the gather and act kernels
// write), weights [E, N/128, K/128] f32 (the API's w13_scale / w2_scale as given). The mainloop derives each
// group's scale layout from its problem shape (ScaleConfig::tile_atom_to_shape_SF*), so ptr_SFA[e] points at
// the expert's first row and ptr_SFB[e] at the expert's weight scales.

// CUTLASS's device-side asserts are calls to __assertfail, and a call inside the kernel makes ptxas serialize
// the whole wgmma pipeline (warning C7510, a large slowdown). This file is compiled without them.
#ifndef NDEBUG
#define NDEBUG
#endif

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <string>

#include "csrc/common/arch.h"
#include "csrc/common/launch.cuh"
#include "csrc/moe/grouped_gemm_sm90.h"
#include "csrc/moe/moe_act_epilogue_sm90.h"
#include "csrc/moe/moe_common.cuh"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/detail/blockwise_scale_layout.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"

namespace hpc::moe {
namespace {

// Gate-up launches whose epilogue computed the activation (FusedMoeActEpilogueLaunches: the tests' proof it ran).
std::atomic<int64_t> g_act_epilogue_launches{0};
// Grouped GEMM launches in 2-CTA clusters (FusedMoeGemmClusterLaunches: the tests' proof that the pairs ran).
std::atomic<int64_t> g_cluster_launches{0};

using namespace cute;

using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;  // (M, N, K) per group
using ElementD = cutlass::bfloat16_t;
using LayoutA = cutlass::layout::RowMajor;     // A [rows, K]: K contiguous
using LayoutB = cutlass::layout::ColumnMajor;  // B [N, K] per expert: K contiguous ("column-major K x N")
using LayoutD = cutlass::layout::RowMajor;     // D [rows, N]
using Cluster1 = Shape<_1, _1, _1>;
// Clusters of 2 CTAs along N: the two N tiles of one M tile share each A (activation) k-block by TMA multicast (the
// builder picks SM90_TMA_LOAD_MULTICAST for A when the cluster spans N): 8 of the 48 KB a 128x256x128 fp8 k-block
// loads per CTA. Built to take L2 -> SM traffic off; ncu did not show that (L2 throughput rose, Qwen3's GEMMs no
// faster), but the layer gained 1-6% wherever an expert has many long-K tiles (Mixtral, Hy3 T >= 4096; session 33).
using ClusterN2 = Shape<_1, _2, _1>;
// Clusters of 2 along M (HPC_XLA_MOE_GEMM_CLUSTER=m2): B (weight) k-blocks shared, 32 of 48 KB; experiment 18's form,
// whose pair idles its second CTA on an expert with an odd count of M tiles -- measured beside n2 in one run.
using ClusterM2 = Shape<_2, _1, _1>;
constexpr int kAlignD = 16 / sizeof(ElementD);
using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<1, kMoeBlock, kMoeBlock, cute::GMMA::Major::K,
                                                              cute::GMMA::Major::K>;
using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());

// One CUTLASS grouped GEMM kernel type: element type, CTA tile, mainloop schedule, block-scaled or not. Tiles of
// 128 rows run cooperative (two consumer warpgroups split one tile), tiles of 64 rows ping-pong (each consumer
// warpgroup owns a tile; one's MMAs overlap the other's epilogue).
template <class Element, class TileShape, class MainloopSchedule, bool kBlockScaled, class ClusterShape = Cluster1>
struct GroupedKernel {
  static constexpr int kAlignAB = 16 / sizeof(Element);
  static constexpr bool kPingpong = size<0>(TileShape{}) == 64;
  using EpilogueSchedule = std::conditional_t<kPingpong, cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong,
                                              cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD*, kAlignD, ElementD, LayoutD*,
      kAlignD, EpilogueSchedule,
      cutlass::epilogue::fusion::LinearCombination<ElementD, float, void, float>>::CollectiveOp;
  using ALayoutArg = std::conditional_t<kBlockScaled, cute::tuple<LayoutA*, LayoutSFA*>, LayoutA*>;
  using BLayoutArg = std::conditional_t<kBlockScaled, cute::tuple<LayoutB*, LayoutSFB*>, LayoutB*>;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, ALayoutArg, kAlignAB, Element, BLayoutArg,
      kAlignAB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      MainloopSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
};

using Bf16Grouped = GroupedKernel<cutlass::bfloat16_t, Shape<_128, _128, _64>,
                                  cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative, false>;
using Fp8TensorGrouped = GroupedKernel<cutlass::float_e4m3_t, Shape<_128, _128, _128>,
                                       cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8FastAccum, false>;
// 128x256 CTA tiles (the default for bf16 / fp8_tensor): twice the B reuse per A tile. Measured on the H200 against
// 128x128 at every grouped-path shape of the benchmark (T >= 4096 for Qwen3 / Hy3, >= 1024 for Mixtral): 1.03-1.25x,
// Mixtral bf16 1.34-1.53x (bench/NOTES.md, fused_moe v5). HPC_XLA_MOE_GEMM_TILE=128x128 brings the old tile back.
// The 128x256 kernels in a given cluster shape (Cluster1, or the pairs ClusterN2 / ClusterM2).
template <class Cluster>
using Bf16WideGroupedIn = GroupedKernel<cutlass::bfloat16_t, Shape<_128, _256, _64>,
                                        cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative, false, Cluster>;
template <class Cluster>
using Fp8TensorWideGroupedIn =
    GroupedKernel<cutlass::float_e4m3_t, Shape<_128, _256, _128>,
                  cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8FastAccum, false, Cluster>;
using Bf16WideGrouped = Bf16WideGroupedIn<Cluster1>;
using Fp8TensorWideGrouped = Fp8TensorWideGroupedIn<Cluster1>;
using Bf16Kernel = Bf16Grouped::Kernel;
using Fp8TensorKernel = Fp8TensorGrouped::Kernel;
using Bf16WideKernel = Bf16WideGrouped::Kernel;
using Fp8TensorWideKernel = Fp8TensorWideGrouped::Kernel;
using Bf16WideN2Grouped = Bf16WideGroupedIn<ClusterN2>;
using Fp8TensorWideN2Grouped = Fp8TensorWideGroupedIn<ClusterN2>;
using Bf16WideM2Grouped = Bf16WideGroupedIn<ClusterM2>;
using Fp8TensorWideM2Grouped = Fp8TensorWideGroupedIn<ClusterM2>;
template <class Cluster>
using Fp8BlockGroupedIn =
    GroupedKernel<cutlass::float_e4m3_t, Shape<_128, _128, _128>,
                  cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8BlockScaledAccum, true, Cluster>;
using Fp8BlockKernel = Fp8BlockGroupedIn<Cluster1>::Kernel;
// fp8_block128's 128x128 tiles in pairs along N (experiment 34, the default since session 34): A multicast saves 8 of
// the 32 KB a CTA loads per k-block (25%, against 17% for the 128x256 tiles); the blockwise scales still load per
// CTA. Measured (H100, 2 rounds): DeepSeek-V3 EP8 T=4096 819-830 -> 757-763 us, T=16384 2446-2455 -> 2149-2185.
using Fp8BlockN2Kernel = Fp8BlockGroupedIn<ClusterN2>::Kernel;
// 64-row tiles (ping-pong) for groups of a few dozen rows: a 128-row tile would run mostly past the expert's rows.
// In a given cluster shape: ClusterN2 (the default, experiment 37: pairs along N sharing A by TMA multicast), or
// Cluster1 (HPC_XLA_MOE_NARROW_CLUSTER=1). Measured (H100, 2 rounds, session 35): DeepSeek-V3 EP8 T=2048 708-709 ->
// 653-654 us, Qwen3 fp8 T=1024 301-302 -> 291-292, the other 64-row rows -0.3..1%, none slower.
template <class Cluster>
using Bf16NarrowIn = GroupedKernel<cutlass::bfloat16_t, Shape<_64, _256, _64>,
                                   cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong, false, Cluster>;
template <class Cluster>
using Fp8TensorNarrowIn = GroupedKernel<cutlass::float_e4m3_t, Shape<_64, _256, _128>,
                                        cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpongFP8FastAccum, false,
                                        Cluster>;
template <class Cluster>
using Fp8TensorNarrow128In = GroupedKernel<cutlass::float_e4m3_t, Shape<_64, _128, _128>,
                                           cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpongFP8FastAccum, false,
                                           Cluster>;
template <class Cluster>
using Fp8BlockNarrowIn = GroupedKernel<cutlass::float_e4m3_t, Shape<_64, _128, _128>,
                                       cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpongFP8BlockScaledAccum,
                                       true, Cluster>;
using Fp8TensorNarrowGrouped = Fp8TensorNarrowIn<Cluster1>;
using Fp8TensorNarrow128Grouped = Fp8TensorNarrow128In<Cluster1>;
using Bf16NarrowKernel = Bf16NarrowIn<Cluster1>::Kernel;
using Fp8TensorNarrowKernel = Fp8TensorNarrowGrouped::Kernel;
using Fp8TensorNarrow128Kernel = Fp8TensorNarrow128Grouped::Kernel;
using Fp8BlockNarrowKernel = Fp8BlockNarrowIn<Cluster1>::Kernel;
using Fp8BlockNarrowN2Kernel = Fp8BlockNarrowIn<ClusterN2>::Kernel;

// The same kernels with the activation in the epilogue (moe_act_epilogue_sm90.h; w13 interleaved, gate-up only): the builder's mainloop unchanged (same stages: the carve-out for the TMA epilogue's smem stays unused), only
// the epilogue differs.
template <class G, MoeQuant Q>
using ActEpilogueKernelOf = cutlass::gemm::kernel::GemmUniversal<ProblemShape, typename G::Mainloop, MoeActEpilogue<Q>>;
using Fp8TensorWideActKernel = ActEpilogueKernelOf<Fp8TensorWideGrouped, MoeQuant::kFp8Tensor>;
using Fp8TensorActKernel = ActEpilogueKernelOf<Fp8TensorGrouped, MoeQuant::kFp8Tensor>;
using Bf16WideActKernel = ActEpilogueKernelOf<Bf16WideGrouped, MoeQuant::kNone>;
using Bf16ActKernel = ActEpilogueKernelOf<Bf16Grouped, MoeQuant::kNone>;
using Fp8TensorWideN2ActKernel = ActEpilogueKernelOf<Fp8TensorWideN2Grouped, MoeQuant::kFp8Tensor>;
using Bf16WideN2ActKernel = ActEpilogueKernelOf<Bf16WideN2Grouped, MoeQuant::kNone>;
using Fp8TensorWideM2ActKernel = ActEpilogueKernelOf<Fp8TensorWideM2Grouped, MoeQuant::kFp8Tensor>;
using Bf16WideM2ActKernel = ActEpilogueKernelOf<Bf16WideM2Grouped, MoeQuant::kNone>;
// fp8_tensor's 64-row ping-pong tiles (groups of <= 64 rows, e.g. Qwen3-30B at T = 129-1024): each consumer
// warpgroup owns its tile, whose accumulators are the same one 64xN GMMA atom per warpgroup the epilogue reads.
using Fp8TensorNarrowActKernel = ActEpilogueKernelOf<Fp8TensorNarrowGrouped, MoeQuant::kFp8Tensor>;
using Fp8TensorNarrow128ActKernel = ActEpilogueKernelOf<Fp8TensorNarrow128Grouped, MoeQuant::kFp8Tensor>;
using Fp8TensorNarrowN2ActKernel = ActEpilogueKernelOf<Fp8TensorNarrowIn<ClusterN2>, MoeQuant::kFp8Tensor>;
using Fp8TensorNarrow128N2ActKernel = ActEpilogueKernelOf<Fp8TensorNarrow128In<ClusterN2>, MoeQuant::kFp8Tensor>;
template <class Kernel>
constexpr bool kActEpilogue = std::is_same_v<typename Kernel::CollectiveEpilogue, MoeActEpilogue<MoeQuant::kFp8Tensor>> ||
                              std::is_same_v<typename Kernel::CollectiveEpilogue, MoeActEpilogue<MoeQuant::kNone>>;

// Kernels on CUTLASS's blockwise-scaled mainloop (its arguments carry the scale factors).
template <class Kernel>
constexpr bool kBlockScaled = std::is_same_v<Kernel, Fp8BlockKernel> || std::is_same_v<Kernel, Fp8BlockN2Kernel> ||
                              std::is_same_v<Kernel, Fp8BlockNarrowKernel> ||
                              std::is_same_v<Kernel, Fp8BlockNarrowN2Kernel>;

// The CUTLASS kernel body behind a PDL wait (see the top of the file). No static shared memory here: the
// kernel's SharedStorage must start at the dynamic shared-memory base (TMA swizzle alignment).
template <class Kernel>
__global__ void __launch_bounds__(Kernel::MaxThreadsPerBlock, Kernel::MinBlocksPerMultiprocessor)
    GroupedGemmEntry(const __grid_constant__ typename Kernel::Params params) {
  extern __shared__ char smem[];
  PdlWait();
  PdlLaunchDependents();
  Kernel op;
  op(params, smem);
}

// ------------------------------------------------------------------------------- per-group argument arrays
// Structure of arrays, [E] entries each, every array 16-byte aligned, inside GroupedGemmProblem::args. The
// same layout for every kernel type (the stride types are the same cute types; asserted below).
using StrideA = typename Bf16Kernel::InternalStrideA;
using StrideB = typename Bf16Kernel::InternalStrideB;
using StrideD = typename Bf16Kernel::InternalStrideD;
static_assert(std::is_same_v<StrideA, typename Fp8BlockKernel::InternalStrideA> &&
                  std::is_same_v<StrideB, typename Fp8BlockKernel::InternalStrideB> &&
                  std::is_same_v<StrideD, typename Fp8BlockKernel::InternalStrideD> &&
                  std::is_same_v<StrideA, typename Fp8TensorKernel::InternalStrideA> &&
                  std::is_same_v<StrideB, typename Fp8TensorWideKernel::InternalStrideB> &&
                  std::is_same_v<StrideD, typename Bf16WideKernel::InternalStrideD>,
              "one argument layout for all kernel types");
// Row pitch in mode 0, unit stride in mode 1 (K for A/B, N for D): what the setup kernel fills in.
static_assert(cute::is_static_v<decltype(get<1>(StrideA{}))> && cute::is_static_v<decltype(get<1>(StrideB{}))> &&
                  cute::is_static_v<decltype(get<1>(StrideD{}))>,
              "unit stride along K (A, B) and N (D)");
using Shape3 = ProblemShape::UnderlyingProblemShape;

struct ArgArrays {
  Shape3* shape;
  const void** a;
  const void** b;
  void** d;
  StrideA* stride_a;
  StrideB* stride_b;
  StrideD* stride_d;
  float* alpha;
  const float** sfa;
  const float** sfb;
  LayoutSFA* layout_sfa;
  LayoutSFB* layout_sfb;
};

constexpr int kArgArrays = 12;
constexpr int64_t kArgBytesPerExpert = sizeof(Shape3) + 3 * sizeof(void*) + sizeof(StrideA) + sizeof(StrideB) +
                                       sizeof(StrideD) + sizeof(float) + 2 * sizeof(float*) + sizeof(LayoutSFA) +
                                       sizeof(LayoutSFB);
// Each array rounds up by < 16 bytes and E >= 1, so E * (bytes + 16 * arrays) bounds the total.
static_assert(kArgBytesPerExpert + 16 * kArgArrays <= kGroupedGemmArgsBytesPerExpert,
              "kGroupedGemmArgsBytesPerExpert too small for the grouped GEMM arguments");

__host__ __device__ inline ArgArrays CarveArgs(void* base, int experts) {
  char* at = static_cast<char*>(base);
  auto take = [&at, experts](size_t elem) {
    char* p = at;
    at += (elem * experts + 15) / 16 * 16;
    return static_cast<void*>(p);
  };
  ArgArrays r;
  r.shape = static_cast<Shape3*>(take(sizeof(Shape3)));
  r.a = static_cast<const void**>(take(sizeof(void*)));
  r.b = static_cast<const void**>(take(sizeof(void*)));
  r.d = static_cast<void**>(take(sizeof(void*)));
  r.stride_a = static_cast<StrideA*>(take(sizeof(StrideA)));
  r.stride_b = static_cast<StrideB*>(take(sizeof(StrideB)));
  r.stride_d = static_cast<StrideD*>(take(sizeof(StrideD)));
  r.alpha = static_cast<float*>(take(sizeof(float)));
  r.sfa = static_cast<const float**>(take(sizeof(float*)));
  r.sfb = static_cast<const float**>(take(sizeof(float*)));
  r.layout_sfa = static_cast<LayoutSFA*>(take(sizeof(LayoutSFA)));
  r.layout_sfb = static_cast<LayoutSFB*>(take(sizeof(LayoutSFB)));
  return r;
}

// ------------------------------------------------------------------------------------------ setup kernel
struct SetupParams {
  GroupedGemmProblem gemm[2];  // gate-up, down
  const int32_t* expert_count;
  const int32_t* expert_first;
  int experts;
  int elem_bytes;  // A/B element size: 1 (e4m3) | 2 (bf16)
  MoeQuant quant;
};

constexpr int kSetupThreads = 1024;  // >= kMaxMoeCudaExperts: one thread per expert

__device__ void WriteGroupArgs(const GroupedGemmProblem& p, int e, int rows, int first, int elem_bytes,
                               MoeQuant quant, int experts) {
  const ArgArrays w = CarveArgs(p.args, experts);
  const int n = static_cast<int>(p.n), k = static_cast<int>(p.k);
  w.shape[e] = Shape3{rows, n, k};
  w.a[e] = static_cast<const char*>(p.a) + static_cast<int64_t>(first) * k * elem_bytes;
  w.b[e] = static_cast<const char*>(p.b) + static_cast<int64_t>(e) * n * k * elem_bytes;
  // act epilogue: d is the intermediate [rows, n / 2] in A's element type (e4m3 | bf16); else gate_up / down bf16
  w.d[e] = p.act_epilogue ? static_cast<void*>(static_cast<char*>(p.d) + static_cast<int64_t>(first) * (n / 2) * elem_bytes)
                          : static_cast<void*>(static_cast<ElementD*>(p.d) + static_cast<int64_t>(first) * n);
  StrideA sa{};
  get<0>(sa) = k;
  w.stride_a[e] = sa;
  StrideB sb{};
  get<0>(sb) = k;
  w.stride_b[e] = sb;
  StrideD sd{};
  get<0>(sd) = n;
  w.stride_d[e] = sd;
  // fp8_tensor: D = (a_scale * w_scale[e]) * acc, the reference's acc *= a_scale * w_scale (product first)
  w.alpha[e] = quant == MoeQuant::kFp8Tensor ? __fmul_rn(*p.a_tensor_scale, p.b_scale[e]) : 1.f;
  if (quant == MoeQuant::kFp8Block128) {
    const int64_t kb = k / kMoeBlock, nb = n / kMoeBlock;
    w.sfa[e] = p.a_scale + static_cast<int64_t>(first) * kb;
    w.sfb[e] = p.b_scale + static_cast<int64_t>(e) * nb * kb;
    w.layout_sfa[e] = ScaleConfig::tile_atom_to_shape_SFA(make_shape(rows, n, k, 1));
    w.layout_sfb[e] = ScaleConfig::tile_atom_to_shape_SFB(make_shape(rows, n, k, 1));
  }
}

__global__ void __launch_bounds__(kSetupThreads) GroupedGemmSetupKernel(const __grid_constant__ SetupParams p) {
  PdlWait();
  PdlLaunchDependents();
  const int e = threadIdx.x;
  if (e >= p.experts) return;
  const int rows = p.expert_count[e], first = p.expert_first[e];
  WriteGroupArgs(p.gemm[0], e, rows, first, p.elem_bytes, p.quant, p.experts);
  WriteGroupArgs(p.gemm[1], e, rows, first, p.elem_bytes, p.quant, p.experts);
}

// ------------------------------------------------------------------------------------------- launchers
template <class Kernel>
typename Kernel::Arguments MakeArguments(const GroupedGemmGroups& g, const GroupedGemmProblem& p, int sms,
                                         int max_active_clusters) {
  using ElementAB = typename Kernel::ElementA;
  const ArgArrays w = CarveArgs(p.args, g.experts);
  typename Kernel::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  args.problem_shape = ProblemShape{g.experts, w.shape, nullptr};  // sizes only on the device
  if constexpr (kBlockScaled<Kernel>) {
    args.mainloop = {reinterpret_cast<const ElementAB**>(w.a), w.stride_a, reinterpret_cast<const ElementAB**>(w.b),
                     w.stride_b, w.sfa, w.layout_sfa, w.sfb, w.layout_sfb};
  } else {
    args.mainloop = {reinterpret_cast<const ElementAB**>(w.a), w.stride_a, reinterpret_cast<const ElementAB**>(w.b),
                     w.stride_b};
  }
  if constexpr (kActEpilogue<Kernel>) {
    args.epilogue.alpha = g.quant == MoeQuant::kFp8Tensor ? w.alpha : nullptr;
    args.epilogue.out = w.d;  // the setup kernel's per-group rows of the intermediate
    args.epilogue.out_scale = p.act_scale;
    args.epilogue.ld = p.n / 2;
  } else {
    auto& fusion = args.epilogue.thread;
    fusion.beta = 0.f;
    if (g.quant == MoeQuant::kFp8Tensor) {
      fusion.alpha_ptr = w.alpha;                // alpha[group]: batch stride 1
      fusion.dAlpha = {cute::_0{}, cute::_0{}, 1};
    } else {
      fusion.alpha = 1.f;
    }
    args.epilogue.ptr_C = nullptr;
    args.epilogue.ptr_D = reinterpret_cast<ElementD**>(w.d);
    args.epilogue.dD = w.stride_d;
  }
  args.hw_info.device_id = g.device;
  args.hw_info.sm_count = sms;
  args.hw_info.max_active_clusters = max_active_clusters;  // 0: one-CTA clusters (the scheduler uses sm_count)
  return args;
}

template <class Kernel>
using ClusterOf = typename Kernel::DispatchPolicy::ClusterShape;

template <class Kernel>
dim3 ClusterDim() {
  return dim3(size<0>(ClusterOf<Kernel>{}), size<1>(ClusterOf<Kernel>{}), size<2>(ClusterOf<Kernel>{}));
}

// Clusters of `Kernel` that fit on the device at once, for the persistent scheduler's grid: CUTLASS's own guess from
// sm_count assumes every SM can seat a cluster member, but a GPC with an odd number of free SMs cannot seat a pair,
// and a grid sized from sm_count would run its last clusters as a second wave. Asked once per kernel type and device
// (host threads may launch on several devices at once: the cache is atomic; a race asks twice for the same answer).
template <class Kernel>
Status MaxActiveClusters(int device, int smem, int* clusters) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cache[kMaxDevices];
  if (device < 0 || device >= kMaxDevices) {
    return Status::Internal("fused_moe grouped GEMM: device " + std::to_string(device) + " out of range");
  }
  int cached = cache[device].load(std::memory_order_relaxed);
  if (cached == 0) {
    const dim3 cluster = ClusterDim<Kernel>();
    cudaLaunchConfig_t config = {};
    config.gridDim = cluster;
    config.blockDim = Kernel::get_block_shape();
    config.dynamicSmemBytes = smem;
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = cluster.x;
    attr.val.clusterDim.y = cluster.y;
    attr.val.clusterDim.z = cluster.z;
    config.attrs = &attr;
    config.numAttrs = 1;
    HPC_RETURN_IF_ERROR(CudaStatus(cudaOccupancyMaxActiveClusters(&cached, &GroupedGemmEntry<Kernel>, &config),
                                   "fused_moe grouped GEMM: cluster occupancy"));
    if (cached < 1) return Status::Internal("fused_moe grouped GEMM: no cluster of this kernel fits on the device");
    cache[device].store(cached, std::memory_order_relaxed);
  }
  *clusters = cached;
  return Status::Ok();
}

template <class Kernel>
Status RunKernel(const GroupedGemmGroups& g, const GroupedGemmProblem& p, cudaStream_t stream) {
  const int sms = MultiprocessorCount(g.device);
  if (sms <= 0 || sms > kGroupedGemmMaxSms) {
    return Status::Internal("fused_moe grouped GEMM: the workspace is sized for at most " +
                            std::to_string(kGroupedGemmMaxSms) + " SMs; this device has " + std::to_string(sms));
  }
  auto* fn = &GroupedGemmEntry<Kernel>;
  const int smem = static_cast<int>(Kernel::SharedStorageSize);
  HPC_RETURN_IF_ERROR(AllowSmem(reinterpret_cast<const void*>(fn), smem));
  const dim3 cluster = ClusterDim<Kernel>();
  const bool clustered = cluster.x * cluster.y * cluster.z > 1;
  int clusters = 0;
  if (clustered) HPC_RETURN_IF_ERROR(MaxActiveClusters<Kernel>(g.device, smem, &clusters));
  typename Kernel::Arguments args = MakeArguments<Kernel>(g, p, sms, clusters);
  const size_t need = Kernel::get_workspace_size(args);
  if (need > static_cast<size_t>(kGroupedGemmWorkspaceBytes)) {
    return Status::Internal("fused_moe grouped GEMM: CUTLASS needs " + std::to_string(need) +
                            " workspace bytes, more than the planned " + std::to_string(kGroupedGemmWorkspaceBytes));
  }
  if (!Kernel::can_implement(args)) return Status::Internal("fused_moe grouped GEMM: CUTLASS can_implement failed");
  const typename Kernel::Params params = Kernel::to_underlying_arguments(args, g.workspace);
  const dim3 grid = Kernel::get_grid_shape(params);
  const dim3 block = Kernel::get_block_shape();
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attr[2];
  int n_attr = 0;
  if (PdlEnabled()) {
    attr[n_attr].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n_attr].val.programmaticStreamSerializationAllowed = 1;
    ++n_attr;
  }
  if (clustered) {
    if (grid.x % cluster.x != 0 || grid.y % cluster.y != 0) {
      return Status::Internal("fused_moe grouped GEMM: grid " + std::to_string(grid.x) + "x" + std::to_string(grid.y) +
                              " is not a whole number of clusters");
    }
    attr[n_attr].id = cudaLaunchAttributeClusterDimension;
    attr[n_attr].val.clusterDim.x = cluster.x;
    attr[n_attr].val.clusterDim.y = cluster.y;
    attr[n_attr].val.clusterDim.z = cluster.z;
    ++n_attr;
  }
  config.attrs = attr;
  config.numAttrs = n_attr;
  return CudaStatus(cudaLaunchKernelEx(&config, fn, params), "fused_moe grouped GEMM launch");
}

}  // namespace

Status LaunchGroupedGemmSetup(const GroupedGemmGroups& g, const GroupedGemmProblem& gate_up,
                              const GroupedGemmProblem& down, cudaStream_t stream) {
  if (g.experts < 1 || g.experts > kSetupThreads) {
    return Status::Internal("fused_moe grouped GEMM setup: " + std::to_string(g.experts) + " experts");
  }
  SetupParams sp = {};
  sp.gemm[0] = gate_up;
  sp.gemm[1] = down;
  sp.expert_count = g.expert_count;
  sp.expert_first = g.expert_first;
  sp.experts = g.experts;
  sp.elem_bytes = g.quant == MoeQuant::kNone ? 2 : 1;
  sp.quant = g.quant;
  const int threads = (g.experts + 31) / 32 * 32;
  return Launch("fused_moe grouped GEMM setup launch", GroupedGemmSetupKernel, dim3(1), dim3(threads), 0, stream, sp);
}

// A clustered kernel, its launch counted for the tests.
template <class Kernel>
Status RunClusteredKernel(const GroupedGemmGroups& g, const GroupedGemmProblem& p, cudaStream_t stream) {
  const Status launched = RunKernel<Kernel>(g, p, stream);
  if (launched.ok()) g_cluster_launches.fetch_add(1, std::memory_order_relaxed);
  return launched;
}

// A clustered kernel pair: the activation epilogue's or the plain one.
template <class Plain, class Act>
Status RunClustered(const GroupedGemmGroups& g, const GroupedGemmProblem& p, cudaStream_t stream) {
  if (!p.act_epilogue) return RunClusteredKernel<Plain>(g, p, stream);
  const Status launched = RunClusteredKernel<Act>(g, p, stream);
  if (launched.ok()) g_act_epilogue_launches.fetch_add(1, std::memory_order_relaxed);
  return launched;
}

// The 64-row ping-pong tiles in pairs along N (experiment 37): both CTAs of a pair on one expert's 64 rows, A by TMA
// multicast -- 8 of the 40 KB a 64x256 fp8 CTA loads per k-block, 8 of 24 KB for 64x128. These tiles run where an
// expert has a few dozen rows and many N tiles of a long K (Qwen3 fp8 T=1024: 6 gate-up N tiles, K = 2048; Hy3-EP8
// T=1024: 12, K = 4096; DeepSeek-V3 EP8 T=1024: 32, K = 7168), the shape of tile experiments 33 / 34 gained on.
Status LaunchNarrowN2(const GroupedGemmGroups& g, const GroupedGemmProblem& p, bool wide, cudaStream_t stream) {
  switch (g.quant) {
    case MoeQuant::kNone:
      return RunClusteredKernel<Bf16NarrowIn<ClusterN2>::Kernel>(g, p, stream);
    case MoeQuant::kFp8Tensor:
      return wide ? RunClustered<Fp8TensorNarrowIn<ClusterN2>::Kernel, Fp8TensorNarrowN2ActKernel>(g, p, stream)
                  : RunClustered<Fp8TensorNarrow128In<ClusterN2>::Kernel, Fp8TensorNarrow128N2ActKernel>(g, p, stream);
    case MoeQuant::kFp8Block128:
      return RunClusteredKernel<Fp8BlockNarrowN2Kernel>(g, p, stream);
  }
  return Status::Internal("fused_moe grouped GEMM: unknown quant");
}

Status LaunchGroupedGemm(const GroupedGemmGroups& g, const GroupedGemmProblem& p, cudaStream_t stream) {
  if (p.act_epilogue && (g.quant == MoeQuant::kFp8Block128 || (g.quant == MoeQuant::kFp8Tensor && !p.act_scale))) {
    return Status::Internal("fused_moe grouped GEMM: activation epilogue requested for fp8_block128 or without a2");
  }
  const GroupedGemmTile env = GroupedGemmTileFromEnv();  // invalid never gets here: ValidateFusedMoeCuda
  const bool narrow = env.m != 0 ? env.m == 64 : g.tile_m == 64;
  const bool wide = env.n != 128;  // N 256 unless the knob says 128
  const GroupedCluster cluster = GroupedClusterFromEnv();
  if (!narrow && g.quant == MoeQuant::kFp8Block128 && cluster == GroupedCluster::kN2) {
    return RunClusteredKernel<Fp8BlockN2Kernel>(g, p, stream);  // experiment 34 (=m2 keeps one-CTA clusters here)
  }
  if (wide && !narrow && g.quant != MoeQuant::kFp8Block128 && cluster != GroupedCluster::kOne) {
    const bool bf16 = g.quant == MoeQuant::kNone;
    if (cluster == GroupedCluster::kM2) {
      return bf16 ? RunClustered<Bf16WideM2Grouped::Kernel, Bf16WideM2ActKernel>(g, p, stream)
                  : RunClustered<Fp8TensorWideM2Grouped::Kernel, Fp8TensorWideM2ActKernel>(g, p, stream);
    }
    return bf16 ? RunClustered<Bf16WideN2Grouped::Kernel, Bf16WideN2ActKernel>(g, p, stream)
                : RunClustered<Fp8TensorWideN2Grouped::Kernel, Fp8TensorWideN2ActKernel>(g, p, stream);
  }
  if (p.act_epilogue && narrow && g.quant != MoeQuant::kFp8Tensor) {
    return Status::Internal("fused_moe grouped GEMM: no bf16 activation epilogue for 64-row tiles");
  }
  if (narrow && NarrowClusterFromEnv() == GroupedCluster::kN2) return LaunchNarrowN2(g, p, wide, stream);
  if (p.act_epilogue) {  // the caller checked GroupedGemmActInEpilogue: 128-row tiles, or fp8_tensor's 64-row ones
    Status launched;
    if (narrow) {
      launched = wide ? RunKernel<Fp8TensorNarrowActKernel>(g, p, stream)
                      : RunKernel<Fp8TensorNarrow128ActKernel>(g, p, stream);
    } else if (g.quant == MoeQuant::kNone) {
      launched = wide ? RunKernel<Bf16WideActKernel>(g, p, stream) : RunKernel<Bf16ActKernel>(g, p, stream);
    } else {
      launched = wide ? RunKernel<Fp8TensorWideActKernel>(g, p, stream) : RunKernel<Fp8TensorActKernel>(g, p, stream);
    }
    if (launched.ok()) g_act_epilogue_launches.fetch_add(1, std::memory_order_relaxed);
    return launched;
  }
  switch (g.quant) {
    case MoeQuant::kNone:
      if (narrow) return RunKernel<Bf16NarrowKernel>(g, p, stream);
      return wide ? RunKernel<Bf16WideKernel>(g, p, stream) : RunKernel<Bf16Kernel>(g, p, stream);
    case MoeQuant::kFp8Tensor:
      if (narrow) {
        return wide ? RunKernel<Fp8TensorNarrowKernel>(g, p, stream)
                    : RunKernel<Fp8TensorNarrow128Kernel>(g, p, stream);
      }
      return wide ? RunKernel<Fp8TensorWideKernel>(g, p, stream) : RunKernel<Fp8TensorKernel>(g, p, stream);
    case MoeQuant::kFp8Block128:
      return narrow ? RunKernel<Fp8BlockNarrowKernel>(g, p, stream) : RunKernel<Fp8BlockKernel>(g, p, stream);
  }
  return Status::Internal("fused_moe grouped GEMM: unknown quant");
}

}  // namespace hpc::moe

namespace hpc {
int64_t FusedMoeActEpilogueLaunches() { return moe::g_act_epilogue_launches.load(std::memory_order_relaxed); }
int64_t FusedMoeGemmClusterLaunches() { return moe::g_cluster_launches.load(std::memory_order_relaxed); }
}  // namespace hpc
