/***************************************************************************************************
 * Copyright (c) 2023 - 2025 NVIDIA CORPORATION & AFFILIATES. All rights reserved.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Redistribution and use in source and binary forms, with or without
 * modification, are permitted provided that the following conditions are met:
 *
 * 1. Redistributions of source code must retain the above copyright notice, this
 * list of conditions and the following disclaimer.
 *
 * 2. Redistributions in binary form must reproduce the above copyright notice,
 * this list of conditions and the following disclaimer in the documentation
 * and/or other materials provided with the distribution.
 *
 * 3. Neither the name of the copyright holder nor the names of its
 * contributors may be used to endorse or promote products derived from
 * this software without specific prior written permission.
 *
 * THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS"
 * AND ANY EXPRESS OR IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE
 * IMPLIED WARRANTIES OF MERCHANTABILITY AND FITNESS FOR A PARTICULAR PURPOSE ARE
 * DISCLAIMED. IN NO EVENT SHALL THE COPYRIGHT HOLDER OR CONTRIBUTORS BE LIABLE
 * FOR ANY DIRECT, INDIRECT, INCIDENTAL, SPECIAL, EXEMPLARY, OR CONSEQUENTIAL
 * DAMAGES (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF SUBSTITUTE GOODS OR
 * SERVICES; LOSS OF USE, DATA, OR PROFITS; OR BUSINESS INTERRUPTION) HOWEVER
 * CAUSED AND ON ANY THEORY OF LIABILITY, WHETHER IN CONTRACT, STRICT LIABILITY,
 * OR TORT (INCLUDING NEGLIGENCE OR OTHERWISE) ARISING IN ANY WAY OUT OF THE USE
 * OF THIS SOFTWARE, EVEN IF ADVISED OF THE POSSIBILITY OF SUCH DAMAGE.
 *
 **************************************************************************************************/
// Forked from CUTLASS 4.2's cutlass/gemm/collective/sm90_mma_array_tma_gmma_ss_warpspecialized.hpp (the ptr-array
// TMA + GMMA mainloop the grouped fp8_tensor / bf16 GEMMs use) for fused_moe's gate-up GEMM: A's rows are GATHERED
// from the token matrix x [T, K] (row pitch row_bytes) through the align kernel's sorted pair list instead of being
// read by TMA from a gathered copy. Sorted row r of group (local expert) g is token sorted_pairs[expert_first[g] + r]
// / top_k -- exactly what MoeGatherKernel (fused_moe_grouped.cu) copies into `rows`, so the bytes that reach shared
// memory are the same.
//
// Who loads what (design note bench/research/moe_gather_fusion.md, option d1):
//   Mainloop warp (TMA)      B (the weights) per k-block, per-group tensormaps as in CUTLASS; the transaction
//                            bytes of the full barrier are B's only.
//   MainloopAux warp (SIMT)  A: 16-byte cp.async.cg per (row, 16-byte chunk), zero-filled past the group's rows and
//                            past K, then cp.async.mbarrier.arrive.noinc on the stage's full barrier (one arrival per
//                            lane). The kernel runs this warp because HasAuxiliaryLoad is true for the policy below
//                            (the same hook CUTLASS's blockwise-scaled mainloop uses for its scale factors).
// mma() is CUTLASS's, plus a proxy fence after each full-barrier wait (see kConsumerProxyFence); the epilogue is
// untouched. The smem layout of A is the builder's SW128 K-major layout, written here at the addresses that layout
// gives, which is where TMA's SWIZZLE_128B box lands the same bytes: D comes out bit-identical to the copy path.
#pragma once

#include <cstdint>

#include "cute/algorithm/functional.hpp"
#include "cute/algorithm/gemm.hpp"
#include "cute/arch/cluster_sm90.hpp"
#include "cute/arch/copy_sm90.hpp"
#include "cute/atom/mma_atom.hpp"
#include "cute/numeric/arithmetic_tuple.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/cuda_host_adapter.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/gemm/collective/collective_mma_decl.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/numeric_types.h"
#include "cutlass/pipeline/pipeline.hpp"
#include "cutlass/trace.h"

namespace hpc::moe {

// Derives from the plain ptr-array policy so that the ptr-array kernels (dispatched on Schedule) take it unchanged;
// only the CollectiveMma specialization below and HasAuxiliaryLoad look at the derived type.
template <int Stages_, class ClusterShape_, class KernelSchedule>
struct MainloopSm90ArrayTmaGmmaGatherA
    : cutlass::gemm::MainloopSm90ArrayTmaGmmaWarpSpecialized<Stages_, ClusterShape_, KernelSchedule> {};

// Where A's rows come from (device pointers; all produced before the GEMM starts, which waits for them with PDL).
struct GatherAArguments {
  const void* x = nullptr;               // [T, K] A elements, rows row_bytes apart
  int64_t row_bytes = 0;                 // multiple of 16
  const int32_t* sorted_pairs = nullptr; // [rows] pair index (t * top_k + j) of every sorted row
  const int32_t* expert_first = nullptr; // [groups] first sorted row of each group
  int32_t top_k = 1;
};

// The current group as the aux warp needs it (third element of load_init's tuple, refreshed by
// tensors_perform_update whenever the scheduler moves to another group).
struct GatherAGroup {
  const int32_t* pairs = nullptr;  // sorted_pairs + expert_first[group]
  int32_t rows = 0;                // the group's M
  int32_t k_bytes = 0;             // the group's K in bytes
};

}  // namespace hpc::moe

namespace cutlass::gemm::kernel::detail {
template <int Stages, class ClusterShape, class KernelSchedule>
struct HasAuxiliaryLoad<hpc::moe::MainloopSm90ArrayTmaGmmaGatherA<Stages, ClusterShape, KernelSchedule>>
    : cute::true_type {};
}  // namespace cutlass::gemm::kernel::detail

namespace cutlass::gemm::collective {
using namespace cute;

template <int Stages, class ClusterShape, class KernelSchedule, class TileShape_, class ElementA_, class StrideA_,
          class ElementB_, class StrideB_, class TiledMma_, class GmemTiledCopyA_, class SmemLayoutAtomA_,
          class SmemCopyAtomA_, class TransformA_, class GmemTiledCopyB_, class SmemLayoutAtomB_, class SmemCopyAtomB_,
          class TransformB_>
struct CollectiveMma<hpc::moe::MainloopSm90ArrayTmaGmmaGatherA<Stages, ClusterShape, KernelSchedule>, TileShape_,
                     ElementA_, StrideA_, ElementB_, StrideB_, TiledMma_, GmemTiledCopyA_, SmemLayoutAtomA_,
                     SmemCopyAtomA_, TransformA_, GmemTiledCopyB_, SmemLayoutAtomB_, SmemCopyAtomB_, TransformB_> {
  //
  // Type Aliases
  //
  using DispatchPolicy = hpc::moe::MainloopSm90ArrayTmaGmmaGatherA<Stages, ClusterShape, KernelSchedule>;
  using TileShape = TileShape_;
  using ElementA = ElementA_;
  using StrideA = StrideA_;
  using InternalStrideA = cute::remove_pointer_t<StrideA>;
  using ElementB = ElementB_;
  using StrideB = StrideB_;
  using InternalStrideB = cute::remove_pointer_t<StrideB>;
  using TiledMma = TiledMma_;
  using ElementAccumulator = typename TiledMma::ValTypeC;
  using GmemTiledCopyA = GmemTiledCopyA_;
  using GmemTiledCopyB = GmemTiledCopyB_;
  using SmemLayoutAtomA = SmemLayoutAtomA_;
  using SmemLayoutAtomB = SmemLayoutAtomB_;
  using SmemCopyAtomA = SmemCopyAtomA_;
  using SmemCopyAtomB = SmemCopyAtomB_;
  using TransformA = TransformA_;
  using TransformB = TransformB_;
  using ArchTag = typename DispatchPolicy::ArchTag;

  using MainloopPipeline = cutlass::PipelineTmaAsync<DispatchPolicy::Stages>;
  using PipelineState = cutlass::PipelineState<DispatchPolicy::Stages>;

  using PipelineParams = typename MainloopPipeline::Params;
  using CtaShape_MNK = decltype(shape_div(TileShape{}, ClusterShape{}));

  // Arrivals per stage on the full barrier: the TMA leader's arrive_and_expect_tx (B's bytes) + one
  // cp.async.mbarrier.arrive.noinc per aux-warp lane, each firing when that lane's copies into the stage landed.
  static constexpr int NumProducerThreadEvents = 1 + NumThreadsPerWarp;

  // Consumer-side fence.proxy.async after each full-barrier wait: cp.async writes shared memory through the generic
  // proxy while WGMMA reads it through the async proxy, and the writer cannot fence after its own asynchronous writes
  // complete. CUTLASS's cp.async + GMMA mainloop (sm90_mma_multistage_gmma_ss_warpspecialized.hpp) has no fence;
  // this one is kept until an A/B on the GPU shows it costs anything measurable.
  static constexpr bool kConsumerProxyFence = true;

  static_assert(rank(SmemLayoutAtomA{}) == 2, "SmemLayoutAtom must be rank 2 (M/N, K)");
  static_assert((size<0>(TileShape{}) % size<0>(SmemLayoutAtomA{})) == 0, "SmemLayoutAtom must evenly divide tile shape.");
  static_assert((size<2>(TileShape{}) % size<1>(SmemLayoutAtomA{})) == 0, "SmemLayoutAtom must evenly divide tile shape.");

  static_assert(rank(SmemLayoutAtomB{}) == 2, "SmemLayoutAtom must be rank 2 (M/N, K)");
  static_assert((size<1>(TileShape{}) % size<0>(SmemLayoutAtomB{})) == 0, "SmemLayoutAtom must evenly divide tile shape.");
  static_assert((size<2>(TileShape{}) % size<1>(SmemLayoutAtomB{})) == 0, "SmemLayoutAtom must evenly divide tile shape.");

  // Same tiling as the TMA mainloop: the builder's layouts, so mma() reads A exactly as before.
  using SmemLayoutA = decltype(tile_to_shape(
      SmemLayoutAtomA{},
      make_shape(shape<0>(TileShape{}), shape<2>(TileShape{}), Int<DispatchPolicy::Stages>{}),
      cute::conditional_t< ::cutlass::gemm::detail::is_major<0,StrideA>(), Step<_2,_1,_3>, Step<_1,_2,_3>>{}));
  using SmemLayoutB = decltype(tile_to_shape(
      SmemLayoutAtomB{},
      make_shape(shape<1>(TileShape{}), shape<2>(TileShape{}), Int<DispatchPolicy::Stages>{}),
      cute::conditional_t< ::cutlass::gemm::detail::is_major<0,StrideB>(), Step<_2,_1,_3>, Step<_1,_2,_3>>{}));

  static_assert(DispatchPolicy::Stages >= 2, "Specialization requires Stages set to value 2 or more.");
  static_assert(cute::is_base_of<cute::GMMA::DescriptorIterator, typename TiledMma::FrgTypeA>::value &&
                cute::is_base_of<cute::GMMA::DescriptorIterator, typename TiledMma::FrgTypeB>::value,
                "MMA atom must source both A and B operand from smem_desc for this mainloop.");
  static_assert(cute::is_same_v<GmemTiledCopyB, SM90_TMA_LOAD>,
                "the gather mainloop runs without clusters (no multicast): B by plain TMA");
  static_assert(size(ClusterShape{}) == 1, "the gather mainloop runs without clusters");

  // ---- A gather geometry. The aux warp writes A rows with the hand-derived SW128 K-major addressing below; these
  // checks tie it to SmemLayoutA (the layout mma() builds its GMMA descriptors from, and TMA's SWIZZLE_128B box
  // fills): K-major, one 8-row x 128-byte swizzle atom across the whole k-block, atoms stacked along M.
  static constexpr int kTileM = size<0>(TileShape{});
  static constexpr int kRowBytes = size<2>(TileShape{}) * sizeof_bits_v<ElementA> / 8;  // one k-block of one row
  static constexpr int kChunks = kRowBytes / 16;                                       // 16-byte cp.async per row
  static constexpr int kRowsPerCopy = NumThreadsPerWarp / kChunks;                      // rows per warp-wide cp.async
  static constexpr int kCopies = kTileM / kRowsPerCopy;                                 // cp.async per lane per k-block
  static constexpr int kTokenRegs = kTileM / NumThreadsPerWarp;                         // row tokens held per lane
  static constexpr int kStageBytesA = kTileM * kRowBytes;
  static_assert(!::cutlass::gemm::detail::is_major<0, StrideA>(), "gathered A must be K-major");
  static_assert(cute::is_same_v<SmemLayoutAtomA, GMMA::Layout_K_SW128_Atom<ElementA>>,
                "the gather writes the SW128 K-major A layout only");
  static_assert(kRowBytes == 128 && kChunks == 8 && kRowsPerCopy == 4, "one 128-byte swizzle span per row and k-block");
  static_assert(kTileM % NumThreadsPerWarp == 0 && kCopies % 8 == 0, "rows 4i..4i+3 of copy i sit in token register i/8");
  static_assert(cosize(SmemLayoutA{}) == kStageBytesA * DispatchPolicy::Stages * 8 / sizeof_bits_v<ElementA>,
                "A stages are dense");

  // The layout checks, in elements of A (8-bit for fp8): a row's 16-byte chunk is contiguous, rows 8a + j sit at
  // a * 1024 bytes + (the offset of row j), stages kStageBytesA apart. Evaluated on the real SmemLayoutA.
  static constexpr bool gather_layout_ok() {
    constexpr int kElemPerChunk = 16 * 8 / sizeof_bits_v<ElementA>;
    for (int a : {0, 1, kTileM / 8 - 1}) {
      for (int j = 0; j < 8; ++j) {
        for (int c = 0; c < kChunks; ++c) {
          const int base = SmemLayoutA{}(j, c * kElemPerChunk, 0);
          for (int e = 0; e < kElemPerChunk; ++e) {
            if (SmemLayoutA{}(8 * a + j, c * kElemPerChunk + e, 0) != a * 1024 + base + e) return false;
          }
          if (SmemLayoutA{}(8 * a + j, c * kElemPerChunk, 1) != a * 1024 + base + kStageBytesA) return false;
        }
      }
    }
    return true;
  }
  static_assert(sizeof_bits_v<ElementA> == 8, "fp8 A only (bf16 would need the element-to-byte scaling above)");
  static_assert(gather_layout_ok(), "SmemLayoutA is not the SW128 K-major layout the gather writes");

  // For all other types, cast to size equivalent uint type to avoid any rounding by TMA.
  static constexpr bool ConvertF32toTF32B = cute::is_same_v<float, ElementB>;
  using InternalElementA = uint_bit_t<sizeof_bits_v<ElementA>>;
  using InternalElementB = cute::conditional_t<ConvertF32toTF32B, tfloat32_t, uint_bit_t<sizeof_bits_v<ElementB>>>;

  // Assumption: StrideB is congruent with Problem_NK
  using TMA_B = decltype(make_tma_copy(
      GmemTiledCopyB{},
      make_tensor(static_cast<InternalElementB const*>(nullptr), repeat_like(InternalStrideB{}, int32_t(0)), InternalStrideB{}),
      SmemLayoutB{}(_,_,cute::Int<0>{}),
      make_shape(shape<1>(TileShape{}), shape<2>(TileShape{})),
      size<0>(ClusterShape{})));

  struct SharedStorage {
    struct TensorStorage : cute::aligned_struct<128, _0> {
      cute::array_aligned<typename TiledMma::ValTypeA, cute::cosize_v<SmemLayoutA>> smem_A;
      cute::array_aligned<typename TiledMma::ValTypeB, cute::cosize_v<SmemLayoutB>> smem_B;
    } tensors;

    struct TensorMapStorage : cute::aligned_struct<128, _0> {
      cute::TmaDescriptor smem_tensormap_B;
    } tensormaps;

    using PipelineStorage = typename MainloopPipeline::SharedStorage;
    PipelineStorage pipeline;
  };
  using TensorStorage = typename SharedStorage::TensorStorage;
  using TensorMapStorage = typename SharedStorage::TensorMapStorage;
  using PipelineStorage = typename SharedStorage::PipelineStorage;

  static constexpr bool IsGroupedGemmKernel = !cute::is_same_v<InternalStrideA, StrideA>;
  static_assert(IsGroupedGemmKernel, "the gather needs the group's rows: grouped GEMM only");

  // Host side kernel arguments. ptr_A / dA stay for the common argument plumbing; A is not read through them.
  struct Arguments {
    ElementA const** ptr_A;
    StrideA dA;
    ElementB const** ptr_B;
    StrideB dB;
    hpc::moe::GatherAArguments gather;
  };

  // Device side kernel params
  struct Params {
    TMA_B tma_load_b;
    uint32_t tma_transaction_bytes = TmaTransactionBytes;
    void* tensormaps;
    InternalElementB const** ptr_B;
    StrideB dB;
    hpc::moe::GatherAArguments gather;
  };

  //
  // Methods
  //

  template <class ProblemShape>
  static constexpr Params
  to_underlying_arguments(
      ProblemShape problem_shapes,
      Arguments const& args,
      void* workspace) {
    // The tensor shape and pointer only create the descriptor; the per-group values replace them before the first
    // TMA load (tensormaps_perform_update).
    auto init_shape = repeat_like(typename ProblemShape::UnderlyingProblemShape{}, int32_t(1));
    auto init_N = get<1>(init_shape);
    auto init_K = get<2>(init_shape);
    const uint32_t init_L = 1;
    InternalElementB const* ptr_B_first_batch = reinterpret_cast<InternalElementB const*>(reinterpret_cast<uint64_t>(args.ptr_B) & 0xFFFFFFFFFFFFFFF0);  // Address must be 16B-aligned
    InternalStrideB stride_b{};
    Tensor tensor_b = make_tensor(ptr_B_first_batch, make_layout(make_shape(init_N,init_K,init_L), stride_b));
    TMA_B tma_load_b = make_tma_copy(
        GmemTiledCopyB{},
        tensor_b,
        SmemLayoutB{}(_,_,cute::Int<0>{}),
        make_shape(shape<1>(TileShape{}), shape<2>(TileShape{})),
        size<0>(ClusterShape{}));

    return {
      tma_load_b,
      TmaTransactionBytes,
      workspace,
      reinterpret_cast<InternalElementB const**>(args.ptr_B),
      args.dB,
      args.gather
    };
  }

  template <class ProblemShape>
  static size_t
  get_workspace_size(ProblemShape const& problem_shape, Arguments const& args, int sm_count) {
    // One B tensormap per SM (A needs none)
    return sizeof(cute::TmaDescriptor) * sm_count;
  }

  template <class ProblemShape>
  static cutlass::Status
  initialize_workspace(ProblemShape const& problem_shape, Arguments const& args, void* workspace, cudaStream_t stream, CudaHostAdapter* cuda_adapter = nullptr) {
    return cutlass::Status::kSuccess;
  }

  template<class ProblemShape>
  static bool
  can_implement(
      ProblemShape problem_shapes,
      Arguments const& args) {
    constexpr int tma_alignment_bits = 128;
    constexpr int min_tma_aligned_elements_B = tma_alignment_bits / cutlass::sizeof_bits<ElementB>::value;

    // 16-byte cp.async: 16-byte aligned rows and base
    bool implementable = args.gather.x != nullptr && args.gather.sorted_pairs != nullptr &&
                         args.gather.expert_first != nullptr && args.gather.top_k >= 1 &&
                         args.gather.row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(args.gather.x) % 16 == 0;
    if (problem_shapes.is_host_problem_shape_available()) {
      for (int i = 0; i < problem_shapes.groups(); i++) {
        auto problem_shape_MNKL = append<4>(problem_shapes.get_host_problem_shape(i), 1);
        auto [M,N,K,L] = problem_shape_MNKL;
        implementable = implementable && cutlass::detail::check_alignment<min_tma_aligned_elements_B>(cute::make_shape(N,K,L), InternalStrideB{});
      }
    }

    if (!implementable) {
      CUTLASS_TRACE_HOST("  CAN IMPLEMENT: gather arguments or B alignment do not meet the requirements.\n");
    }
    return implementable;
  }

  static constexpr int K_PIPE_MAX = DispatchPolicy::Stages;
  static constexpr int K_PIPE_MMAS = 1;
  // B's bytes only: A arrives by cp.async, counted as arrivals (NumProducerThreadEvents), not transaction bytes.
  static constexpr uint32_t TmaTransactionBytes =
        cutlass::bits_to_bytes(size<0>(SmemLayoutB{}) * size<1>(SmemLayoutB{}) * static_cast<uint32_t>(sizeof_bits<ElementB>::value));

  // gA_mkl only provides the tile counts (M tiles, K tiles) the kernel's loops read, so it is a coordinate tensor,
  // not a TMA tensor. The third element is the current group for the gather (set by tensors_perform_update).
  template <class ProblemShape_MNKL>
  CUTLASS_DEVICE auto
  load_init(ProblemShape_MNKL const& problem_shape_MNKL, Params const& mainloop_params) const {
    using X = Underscore;
    auto [M,N,K,L] = problem_shape_MNKL;
    const int32_t init_L = 1;

    Tensor mA_mkl = make_identity_tensor(make_shape(M,K,init_L));                                       // (m,k,l)
    Tensor mB_nkl = mainloop_params.tma_load_b.get_tma_tensor(make_shape(N,K,init_L));                  // (n,k,l)

    Tensor gA_mkl = local_tile(mA_mkl, TileShape{}, make_coord(_,_,_), Step<_1, X,_1>{});  // (BLK_M,BLK_K,m,k,l)
    Tensor gB_nkl = local_tile(mB_nkl, TileShape{}, make_coord(_,_,_), Step< X,_1,_1>{});  // (BLK_N,BLK_K,n,k,l)

    return cute::make_tuple(gA_mkl, gB_nkl, hpc::moe::GatherAGroup{});
  }

  // Mainloop (TMA) warp: B only.
  template <
    class TensorA, class TensorB, class GatherGroup,
    class TensorMapB,
    class KTileIterator, class BlockCoord
  >
  CUTLASS_DEVICE void
  load(
      Params const& mainloop_params,
      MainloopPipeline pipeline,
      PipelineState smem_pipe_write,
      cute::tuple<TensorA, TensorB, GatherGroup> const& load_inputs,
      cute::tuple<TensorMapB> const& input_tensormaps,
      BlockCoord const& blk_coord,
      KTileIterator k_tile_iter, int k_tile_count,
      int thread_idx,
      uint32_t block_rank_in_cluster,
      TensorStorage& shared_tensors) {
    int lane_predicate = cute::elect_one_sync();

    if (lane_predicate) {
      Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});        // (BLK_N,BLK_K,PIPE)
      Tensor gB_nkl = get<1>(load_inputs);
      auto block_tma_b = mainloop_params.tma_load_b.get_slice(0);

      auto [m_coord, n_coord, k_coord, l_coord] = blk_coord;
      Tensor gB = gB_nkl(_,_,n_coord,_,l_coord);                                                     // (BLK_N,BLK_K,k)

      Tensor tBgB = block_tma_b.partition_S(gB);                                                 // (TMA,TMA_N,TMA_K,k)
      Tensor tBsB = block_tma_b.partition_D(sB);                                              // (TMA,TMA_N,TMA_K,PIPE)

      CUTLASS_PRAGMA_NO_UNROLL
      for ( ; k_tile_count > 0; --k_tile_count)
      {
        // LOCK smem_pipe_write for _writing_ (the leader also posts B's transaction bytes here)
        pipeline.producer_acquire(smem_pipe_write);

        using BarrierType = typename MainloopPipeline::ProducerBarrierType;
        BarrierType* tma_barrier = pipeline.producer_get_barrier(smem_pipe_write);

        int write_stage = smem_pipe_write.index();
        copy(mainloop_params.tma_load_b.with(get<0>(input_tensormaps), *tma_barrier, uint16_t(0)), tBgB(_,_,_,*k_tile_iter), tBsB(_,_,_,write_stage));
        ++k_tile_iter;
        ++smem_pipe_write;
      }
    }
  }

  // 16 bytes global -> shared, L2 only (x rows are re-read by other CTAs and other N blocks, not by this SM's L1);
  // src_bytes 0 writes 16 zero bytes and reads nothing (rows past the group, K past the end: what TMA's
  // out-of-bounds fill gives the copy path).
  CUTLASS_DEVICE static void
  cp_async_cg_16(uint32_t smem_dst, void const* gmem_src, uint32_t src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(smem_dst), "l"(gmem_src), "r"(src_bytes));
  }

  // MainloopAux warp: the A rows of one work tile, all its k-blocks. Lane L moves 16-byte chunk L % 8 of rows
  // 4i + L / 8 (i < 32): each warp-wide cp.async reads four whole 128-byte row segments (full L2 sectors) and writes
  // 512 bytes in which every group of 8 lanes hits 8 different 16-byte bank groups (chunk ^ (row & 7) differs).
  // Lane L holds the tokens of rows L + 32 j; the token of row 4i + L / 8 sits in lane (4i + L / 8) % 32, register
  // i / 8 (the same register for every lane), so one shuffle per copy gets it: 4 registers instead of 32 per lane,
  // within the producer warpgroup's 40-register budget.
  template <
    class TensorA, class TensorB, class GatherGroup,
    class KTileIterator, class BlockCoord
  >
  CUTLASS_DEVICE void
  load_auxiliary(
      Params const& mainloop_params,
      MainloopPipeline pipeline,
      PipelineState smem_pipe_write,
      cute::tuple<TensorA, TensorB, GatherGroup> const& load_inputs,
      BlockCoord const& blk_coord,
      KTileIterator k_tile_iter, int k_tile_count,
      int thread_idx,
      uint32_t block_rank_in_cluster,
      TensorStorage& shared_tensors) {
    hpc::moe::GatherAGroup const& group = get<2>(load_inputs);
    hpc::moe::GatherAArguments const& g = mainloop_params.gather;
    const int lane = thread_idx % NumThreadsPerWarp;
    const int chunk = lane % kChunks, sub_row = lane / kChunks;
    const int m0 = static_cast<int>(get<0>(blk_coord)) * kTileM;

    int32_t token[kTokenRegs];  // -1: past the group's rows (zero fill)
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < kTokenRegs; ++j) {
      const int r = m0 + lane + NumThreadsPerWarp * j;
      token[j] = r < group.rows ? __ldg(group.pairs + r) / g.top_k : -1;
    }

    // Shared-memory byte offsets of this lane's chunk in rows sub_row (even copies) and 4 + sub_row (odd copies) of
    // stage 0, through the real layout (gather_layout_ok: the rest is + 1024 per 8 rows, + kStageBytesA per stage).
    constexpr int kElemPerChunk = 16 * 8 / sizeof_bits_v<ElementA>;
    const uint32_t smem_a = cute::cast_smem_ptr_to_uint(shared_tensors.smem_A.data());
    // The SW128 pattern above is relative to a 1024-byte atom, as the GMMA descriptors' zero base offset also
    // assumes; SharedStorage is only 512-aligned by type, so a misplaced stage would be silent garbage: stop instead.
    if ((smem_a & 1023u) != 0) __trap();
    const uint32_t dst_even = smem_a + SmemLayoutA{}(sub_row, chunk * kElemPerChunk, 0);
    const uint32_t dst_odd = smem_a + SmemLayoutA{}(kRowsPerCopy + sub_row, chunk * kElemPerChunk, 0);
    char const* const x = static_cast<char const*>(g.x);
    // H bytes (< 2^31) and tokens >= 0 where used: unsigned 32 x 32 -> 64-bit, one IMAD.WIDE.U32 per copy
    const uint32_t row_bytes = static_cast<uint32_t>(g.row_bytes);

    CUTLASS_PRAGMA_NO_UNROLL
    for ( ; k_tile_count > 0; --k_tile_count) {
      // LOCK smem_pipe_write for _writing_ (not the leader: no transaction bytes from this warp)
      pipeline.producer_acquire(smem_pipe_write);

      const int col = static_cast<int>(*k_tile_iter) * kRowBytes + chunk * 16;
      const bool col_ok = col < group.k_bytes;
      char const* x_col = x + col;
      const uint32_t stage = static_cast<uint32_t>(smem_pipe_write.index()) * kStageBytesA;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kCopies; ++i) {
        const int t = __shfl_sync(0xffffffffu, token[i / 8], (kRowsPerCopy * i + sub_row) % NumThreadsPerWarp);
        const bool ok = t >= 0 && col_ok;
        // A zero-filled copy reads nothing; its address only has to be formed, so row 0 stands in for it (a 32-bit
        // select instead of a 64-bit one).
        const uint32_t row = ok ? static_cast<uint32_t>(t) : 0u;
        cp_async_cg_16(((i % 2) ? dst_odd : dst_even) + stage + (i / 2) * 1024,
                       x_col + static_cast<uint64_t>(row) * row_bytes, ok ? 16u : 0u);
      }
      // One arrival per lane once all its copies so far have landed (noinc: counted in NumProducerThreadEvents).
      pipeline.producer_commit(smem_pipe_write, cutlass::arch::cpasync_barrier_arrive_noinc);

      ++k_tile_iter;
      ++smem_pipe_write;
    }
  }

  // Perform a Producer Epilogue to prevent early exit of blocks in a Cluster
  CUTLASS_DEVICE void
  load_tail(MainloopPipeline pipeline, PipelineState smem_pipe_write) {
    int lane_predicate = cute::elect_one_sync();
    if (lane_predicate) {
      pipeline.producer_tail(smem_pipe_write);
    }
  }

  CUTLASS_DEVICE static void
  wait_full(MainloopPipeline& pipeline, PipelineState const& smem_pipe_read) {
    auto barrier_token = pipeline.consumer_try_wait(smem_pipe_read);
    pipeline.consumer_wait(smem_pipe_read, barrier_token);
    if constexpr (kConsumerProxyFence) {
      cutlass::arch::fence_view_async_shared();
    }
  }

  /// Perform a collective-scoped matrix multiply-accumulate (CUTLASS's, with wait_full)
  /// Consumer Perspective
  template <
    class FrgTensorC
  >
  CUTLASS_DEVICE void
  mma(MainloopPipeline pipeline,
      PipelineState smem_pipe_read,
      FrgTensorC& accum,
      int k_tile_count,
      int thread_idx,
      TensorStorage& shared_tensors,
      Params const& mainloop_params) {
    static_assert(is_rmem<FrgTensorC>::value, "C tensor must be rmem resident.");
    static_assert(rank(SmemLayoutA{}) == 3, "Smem layout must be rank 3.");
    static_assert(rank(SmemLayoutB{}) == 3, "Smem layout must be rank 3.");
    static_assert(cute::is_void_v<SmemCopyAtomA>,
      "SM90 GMMA mainloops cannot have a non-void copy atom for smem sourced instructions.");
    static_assert(cute::is_void_v<SmemCopyAtomB>,
      "SM90 GMMA mainloops cannot have a non-void copy atom for smem sourced instructions.");

    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});          // (BLK_M,BLK_K,PIPE)
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});          // (BLK_N,BLK_K,PIPE)

    static_assert(stride<0>(typename TiledMma::ALayout{}) == 0 and
                  stride<0>(typename TiledMma::BLayout{}) == 0 and
                  size<0>(typename TiledMma::ALayout{}) == NumThreadsPerWarpGroup and
                  size<0>(typename TiledMma::BLayout{}) == NumThreadsPerWarpGroup,
                  "Stride of the first mode must be 0 and the size of the mode must be NumThreadsPerWarpGroup");

    constexpr int MmaWarpGroups = size(TiledMma{}) / NumThreadsPerWarpGroup;
    Layout warp_group_thread_layout = make_layout(Int<MmaWarpGroups>{},
                                                  Int<NumThreadsPerWarpGroup>{});

    int warp_group_idx = __shfl_sync(0xFFFFFFFF, thread_idx / NumThreadsPerWarpGroup, 0);

    TiledMma tiled_mma;
    auto thread_mma = tiled_mma.get_slice(warp_group_thread_layout(warp_group_idx));

    Tensor tCsA = thread_mma.partition_A(sA);                                                 // (MMA,MMA_M,MMA_K,PIPE)
    Tensor tCsB = thread_mma.partition_B(sB);                                                 // (MMA,MMA_N,MMA_K,PIPE)

    Tensor tCrA = thread_mma.make_fragment_A(tCsA);                                           // (MMA,MMA_M,MMA_K,PIPE)
    Tensor tCrB = thread_mma.make_fragment_B(tCsB);                                           // (MMA,MMA_N,MMA_K,PIPE)

    CUTE_STATIC_ASSERT_V(size<1>(tCsA) == size<1>(accum));                                                         // M
    CUTE_STATIC_ASSERT_V(size<1>(tCsB) == size<2>(accum));                                                         // N
    CUTE_STATIC_ASSERT_V(size<2>(tCsA) == size<2>(tCsB));                                                          // K
    CUTE_STATIC_ASSERT_V(size<3>(tCsA) == size<3>(tCsB));                                                       // PIPE
    CUTE_STATIC_ASSERT_V(Int<DispatchPolicy::Stages>{} == size<2>(sA));                                         // PIPE
    CUTE_STATIC_ASSERT_V(Int<DispatchPolicy::Stages>{} == size<2>(sB));                                         // PIPE

    static_assert((0 <= K_PIPE_MMAS) && (K_PIPE_MMAS <  K_PIPE_MAX),
        "ERROR : Incorrect number of MMAs in flight");

    PipelineState smem_pipe_release = smem_pipe_read;

    int prologue_mma_count = min(K_PIPE_MMAS, k_tile_count);
    tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
    warpgroup_fence_operand(accum);
    if (k_tile_count > 0) {
      wait_full(pipeline, smem_pipe_read);

      int read_stage = smem_pipe_read.index();
      warpgroup_arrive();
      CUTLASS_PRAGMA_UNROLL
      for (int k_block = 0; k_block < size<2>(tCrA); ++k_block) {
        cute::gemm(tiled_mma, tCrA(_,_,k_block,read_stage), tCrB(_,_,k_block,read_stage), accum);
        tiled_mma.accumulate_ = GMMA::ScaleOut::One;
      }

      warpgroup_commit_batch();

      ++smem_pipe_read;
    }

    warpgroup_fence_operand(accum);
    CUTLASS_PRAGMA_UNROLL
    for (int k_tile_prologue = prologue_mma_count - 1; k_tile_prologue > 0; --k_tile_prologue)
    {
      wait_full(pipeline, smem_pipe_read);

      int read_stage = smem_pipe_read.index();
      warpgroup_arrive();
      cute::gemm(tiled_mma, tCrA(_,_,_,read_stage), tCrB(_,_,_,read_stage), accum);
      warpgroup_commit_batch();

      ++smem_pipe_read;
    }

    warpgroup_fence_operand(accum);
    k_tile_count -= prologue_mma_count;

    CUTLASS_PRAGMA_NO_UNROLL
    for ( ; k_tile_count > 0; --k_tile_count)
    {
      wait_full(pipeline, smem_pipe_read);

      int read_stage = smem_pipe_read.index();
      warpgroup_fence_operand(accum);
      warpgroup_arrive();
      cute::gemm(tiled_mma, tCrA(_,_,_,read_stage), tCrB(_,_,_,read_stage), accum);
      warpgroup_commit_batch();

      warpgroup_wait<K_PIPE_MMAS>();
      warpgroup_fence_operand(accum);

      pipeline.consumer_release(smem_pipe_release);

      ++smem_pipe_read;
      ++smem_pipe_release;
    }

    warpgroup_fence_operand(accum);
  }

  /// Perform a Consumer Epilogue to release all buffers
  CUTLASS_DEVICE void
  mma_tail(MainloopPipeline pipeline, PipelineState smem_pipe_release, int k_tile_count) {
    int prologue_mma_count = min(K_PIPE_MMAS, k_tile_count);
    k_tile_count -= prologue_mma_count;

    smem_pipe_release.advance(k_tile_count);

    warpgroup_wait<0>();

    for (int count = 0; count < prologue_mma_count; ++count) {
      pipeline.consumer_release(smem_pipe_release);
      ++smem_pipe_release;
    }
  }

  //
  // Tensormaps: B's only (CUTLASS keeps A's too; the gather has no A descriptor).
  //

  CUTLASS_DEVICE auto
  tensormaps_init(
      Params const& mainloop_params,
      TensorMapStorage& shared_tensormaps,
      int32_t sm_count,
      int32_t sm_idx) {
    cute::TmaDescriptor* gmem_tensormap = reinterpret_cast<cute::TmaDescriptor*>(mainloop_params.tensormaps);
    cute::TmaDescriptor* tma_desc_b = &gmem_tensormap[sm_idx];

    if (cute::elect_one_sync()) {
      Tensor pB_tensormap = make_tensor(mainloop_params.tma_load_b.get_tma_descriptor(), Int<1>{}, Int<1>{});
      Tensor sB_tensormap = make_tensor(make_smem_ptr(&shared_tensormaps.smem_tensormap_B), Int<1>{}, Int<1>{});
      copy(recast<uint128_t>(pB_tensormap), recast<uint128_t>(sB_tensormap));
    }
    __syncwarp();

    return cute::make_tuple(tma_desc_b);
  }

  CUTLASS_DEVICE
  void
  tensormaps_replace_global_address(
      TensorMapStorage& shared_tensormaps,
      Params const& mainloop_params,
      int32_t next_batch) {
    cute::tma_descriptor_replace_addr_in_shared_mem(shared_tensormaps.smem_tensormap_B,
                                                    mainloop_params.ptr_B[next_batch]);
  }

  template <class ProblemShape_MNKL>
  CUTLASS_DEVICE
  void
  tensormaps_replace_global_tensor_properties(
      TensorMapStorage& shared_tensormaps,
      Params const& mainloop_params,
      int32_t next_group,
      ProblemShape_MNKL problem_shape_mnkl) {
    const uint32_t N = get<1>(problem_shape_mnkl);
    const uint32_t K = get<2>(problem_shape_mnkl);
    constexpr int MaxTensorRank = 5;
    cute::array<uint32_t, MaxTensorRank> prob_shape_B  = {1,1,1,1,1};
    cute::array<uint64_t, MaxTensorRank> prob_stride_B = {0,0,0,0,0};

    InternalElementB const* ptr_B = nullptr;
    Tensor tensor_b = make_tensor(ptr_B, make_shape(N,K,Int<1>{}), mainloop_params.dB[next_group]);

    cute::detail::fill_tma_gmem_shape_stride(mainloop_params.tma_load_b, tensor_b,
                                             prob_shape_B, prob_stride_B);
    for (uint64_t& stride : prob_stride_B) {
      stride = (stride * sizeof_bits_v<InternalElementB>) / 8;
    }
    cute::tma_descriptor_replace_dims_strides_in_shared_mem(shared_tensormaps.smem_tensormap_B,
                                                            prob_shape_B,
                                                            prob_stride_B);
  }

  template <class TensorMapB, class ProblemShape_MNKL>
  CUTLASS_DEVICE
  void
  tensormaps_perform_update(
      TensorMapStorage& shared_tensormaps,
      Params const& mainloop_params,
      cute::tuple<TensorMapB> const& input_tensormaps,
      ProblemShape_MNKL problem_shape_mnkl,
      int32_t next_batch) {
    if (cute::elect_one_sync()) {
      tensormaps_replace_global_address(shared_tensormaps, mainloop_params, next_batch);
      tensormaps_replace_global_tensor_properties(shared_tensormaps, mainloop_params, next_batch, problem_shape_mnkl);
    }
  }

  template <class TensorMapB>
  CUTLASS_DEVICE
  void
  tensormaps_cp_fence_release (
      TensorMapStorage& shared_tensormaps,
      cute::tuple<TensorMapB> const& input_tensormaps) {
    if (cute::elect_one_sync()) {
      cute::tma_desc_commit_group();
      cute::tma_desc_wait_group();
    }
    // Entire warp must do this (i.e. it's aligned)
    tma_descriptor_cp_fence_release(get<0>(input_tensormaps), shared_tensormaps.smem_tensormap_B);
  }

  template <class TensorMapB>
  CUTLASS_DEVICE
  void
  tensormaps_fence_acquire(cute::tuple<TensorMapB> const& input_tensormaps) {
    cute::tma_descriptor_fence_acquire(get<0>(input_tensormaps));
  }

  // Both producer warps call this when the scheduler moves to another group; the aux warp's copy is the one that
  // matters (the TMA warp ignores the third element).
  template <class InputTensors, class ProblemShape_MNKL>
  CUTLASS_DEVICE
  InputTensors
  tensors_perform_update(
      InputTensors const& input_tensors,
      Params const& mainloop_params,
      ProblemShape_MNKL problem_shape_mnkl,
      int32_t next_batch) {
    hpc::moe::GatherAGroup group;
    group.pairs = mainloop_params.gather.sorted_pairs + __ldg(mainloop_params.gather.expert_first + next_batch);
    group.rows = static_cast<int32_t>(get<0>(problem_shape_mnkl));
    group.k_bytes = static_cast<int32_t>(get<2>(problem_shape_mnkl)) * sizeof_bits_v<ElementA> / 8;
    return InputTensors{get<0>(input_tensors), get<1>(input_tensors), group};
  }
};

}  // namespace cutlass::gemm::collective
