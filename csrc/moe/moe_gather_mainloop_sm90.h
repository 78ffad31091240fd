// fused_moe grouped path, experiment 38 (HPC_XLA_MOE_GATHER=producer): the gate-up GEMM gathers its A rows itself,
// straight from x_q [T, H] through the sorted pairs, so the token gather kernel and its rows [P, H] round trip go away.
// Why: the gather sits at 84% of its bytes' floor (H100: Qwen3-30B fp8 T=4096 28 us, Hy3-TP8 66 us, session 31), so
// only removing it pays. Per-row TMA boxes cannot do it (~58 cycles per box; session 35's tools/gather_tma_probe.cu);
// 16-byte cp.async from one warp can (the probe's one-warp mode, measured before this was GPU-run: bench/NOTES.md).
//
// The form: CUTLASS's ptr-array kernels run a spare producer warp (ProducerWarpRole::MainloopAux) wherever the
// mainloop's dispatch policy has an auxiliary load; its blockwise-scaling collective feeds its scale factors that way.
// This collective derives from CUTLASS's fp8 ptr-array one (the consumers' mma() and the tensormap handling are its
// own) and changes the producers:
//   load            (Mainloop warp, one elected lane) B only, by TMA; the stage's transaction bytes are B's.
//   load_auxiliary  (MainloopAux warp, 32 lanes) A: lane l copies 16-byte chunk l % 8 of the tile's rows l / 8 + 4 j
//                   (j < BLK_M / 4; a warp instruction moves 4 whole 128-byte rows) with cp.async to where the 128B
//                   swizzle puts it -- a function of the shared-memory address (bits 7-9 into 4-6), checked byte for
//                   byte by the probe. Rows past the group's M are not copied: their stale bytes only reach output
//                   rows the epilogue clips. Then, one stage behind: cp.async.wait_group, fence.proxy.async (the
//                   copies are generic-proxy writes, wgmma reads through the async proxy) and an arrive of every
//                   lane on the stage's full barrier, whose count is 33 (the TMA leader + 32 lanes).
// A row's token is its sorted pair / top_k; the group's pairs start at expert_first[group]. Each lane holds the
// tokens of rows lane, lane + 32, ... and the copies take them by shuffle (32 tokens per lane would not fit the
// producer's 40 registers).
// Preconditions (the launcher's): a k-block of 128 bytes (e4m3 BLK_K 128 | bf16 BLK_K 64: one swizzle row), one-CTA
// clusters (no A multicast to keep: every CTA gathers its own rows), rows of whole k-blocks (H * element bytes a
// multiple of 128).
#pragma once

#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/gemm/dispatch_policy.hpp"

namespace hpc::moe {

// What the gathering producer reads, besides the per-group arguments.
struct GatherAArgs {
  const uint8_t* src = nullptr;          // [T, row_bytes]: x_q (e4m3) | x (bf16)
  const int32_t* pairs = nullptr;        // [P] sorted pair of each row (token = pair / top_k)
  const int32_t* group_first = nullptr;  // [groups] first sorted row of each group (align's expert_first)
  int64_t row_bytes = 0;                 // H x element bytes
  int top_k = 1;
};

// The base policy with an auxiliary load: CUTLASS's ptr-array kernels then run load_auxiliary on MainloopAux.
template <class BasePolicy>
struct GatherAPolicy : BasePolicy {};

// The gathering producer's view of the current group: its sorted pairs from its first row, and its row count.
struct GatherGroup {
  const int32_t* pairs = nullptr;
  int rows = 0;
};

template <class Base>
struct MoeGatherAMainloop : Base {
  using DispatchPolicy = GatherAPolicy<typename Base::DispatchPolicy>;
  using typename Base::MainloopPipeline;
  using typename Base::PipelineState;
  using typename Base::TensorStorage;
  using typename Base::TileShape;
  static constexpr int kBlockM = cute::size<0>(TileShape{});
  static constexpr int kBlockKBytes = cute::size<2>(TileShape{}) * static_cast<int>(sizeof(typename Base::ElementA));
  static_assert(kBlockKBytes == 128, "one 128-byte swizzle row per k-block");
  static_assert(kBlockM % 32 == 0, "rows in whole lane groups");
  static_assert(cute::size(typename Base::DispatchPolicy::ClusterShape{}) == 1, "one-CTA clusters only");
  static constexpr int kAStageBytes = kBlockM * kBlockKBytes;
  // the TMA leader's arrival + one per lane of the gathering warp
  static constexpr int NumProducerThreadEvents = 33;
  static constexpr uint32_t TmaTransactionBytes = Base::TmaTransactionBytes - kAStageBytes;

  struct Arguments : Base::Arguments {
    GatherAArgs gather;
  };
  struct Params : Base::Params {
    GatherAArgs gather;
  };

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape problem_shapes, const Arguments& args, void* workspace) {
    Params p;
    static_cast<typename Base::Params&>(p) =
        Base::to_underlying_arguments(problem_shapes, static_cast<const typename Base::Arguments&>(args), workspace);
    p.tma_transaction_bytes = TmaTransactionBytes;
    p.gather = args.gather;
    return p;
  }

  // Base's (gA, gB) -- gA still gives the kernel its tile counts -- plus the current group for the gathering warp.
  template <class ProblemShape_MNKL>
  CUTLASS_DEVICE auto load_init(const ProblemShape_MNKL& problem_shape_MNKL, const Params& params) const {
    auto base = Base::load_init(problem_shape_MNKL, params);
    return cute::make_tuple(cute::get<0>(base), cute::get<1>(base), GatherGroup{});
  }

  template <class InputTensors, class ProblemShape_MNKL>
  CUTLASS_DEVICE InputTensors tensors_perform_update(const InputTensors& inputs, const Params& params,
                                                     ProblemShape_MNKL problem_shape_mnkl, int32_t next_batch) {
    InputTensors updated = inputs;
    cute::get<2>(updated) = GatherGroup{params.gather.pairs + params.gather.group_first[next_batch],
                                        static_cast<int>(cute::get<0>(problem_shape_mnkl))};
    return updated;
  }

  // The Mainloop warp: B by TMA (A comes from load_auxiliary).
  template <class TensorA, class TensorB, class TensorMapA, class TensorMapB, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load(const Params& params, MainloopPipeline pipeline, PipelineState smem_pipe_write,
                           const cute::tuple<TensorA, TensorB, GatherGroup>& load_inputs,
                           const cute::tuple<TensorMapA, TensorMapB>& input_tensormaps, const BlockCoord& blk_coord,
                           KTileIterator k_tile_iter, int k_tile_count, int, uint32_t, TensorStorage& shared_tensors) {
    using namespace cute;
    if (!elect_one_sync()) return;
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), typename Base::SmemLayoutB{});
    auto block_tma_b = params.tma_load_b.get_slice(0);
    Tensor gB = get<1>(load_inputs)(_, _, get<1>(blk_coord), _, get<3>(blk_coord));  // (BLK_N, BLK_K, k)
    Tensor tBgB = block_tma_b.partition_S(gB);
    Tensor tBsB = block_tma_b.partition_D(sB);
    for (; k_tile_count > 0; --k_tile_count) {
      pipeline.producer_acquire(smem_pipe_write);  // the leader also arms the stage with B's bytes
      auto* barrier = pipeline.producer_get_barrier(smem_pipe_write);
      copy(params.tma_load_b.with(get<1>(input_tensormaps), *barrier, uint16_t{0}), tBgB(_, _, _, *k_tile_iter),
           tBsB(_, _, _, smem_pipe_write.index()));
      ++k_tile_iter;
      ++smem_pipe_write;
    }
  }

  // The MainloopAux warp: A's rows by cp.async (see the top of the file).
  template <class TensorA, class TensorB, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load_auxiliary(const Params& params, MainloopPipeline pipeline, PipelineState smem_pipe_write,
                                     const cute::tuple<TensorA, TensorB, GatherGroup>& load_inputs,
                                     const BlockCoord& blk_coord, KTileIterator k_tile_iter, int k_tile_count, int lane,
                                     uint32_t, TensorStorage& shared_tensors) {
    const GatherGroup group = cute::get<2>(load_inputs);
    const int row0 = static_cast<int>(cute::get<0>(blk_coord)) * kBlockM;
    const int rows = group.rows - row0;  // valid rows of this tile (> 0: the scheduler hands out real tiles only)
    const GatherAArgs& g = params.gather;
    // tokens of rows lane + 32 s (s < kBlockM / 32)
    int token[kBlockM / 32];
#pragma unroll
    for (int s = 0; s < kBlockM / 32; ++s) {
      const int r = lane + 32 * s;
      token[s] = r < rows ? group.pairs[row0 + r] / g.top_k : 0;
    }
    const int chunk = lane % 8;
    const uint32_t smem_a = cute::cast_smem_ptr_to_uint(shared_tensors.smem_A.data());
    uint64_t* pending = nullptr;  // the full barrier of the stage whose copies are in flight, published one stage late
    for (; k_tile_count > 0; --k_tile_count) {
      pipeline.producer_acquire(smem_pipe_write);  // waits for the stage to be free (the leader is the TMA lane)
      const uint32_t stage = smem_a + smem_pipe_write.index() * kAStageBytes;
      const uint8_t* src_k = g.src + static_cast<int64_t>(*k_tile_iter) * kBlockKBytes + 16 * chunk;
#pragma unroll
      for (int s = 0; s < kBlockM / 32; ++s) {
        const int held = token[s];
        // rows lane / 8 + 32 s + 4 q: row r's token sits in lane r % 32 = lane / 8 + 4 q, slot s. Not unrolled: a
        // producer warp has 40 registers (32 addresses in flight spilled).
#pragma unroll 1
        for (int q = 0; q < 8; ++q) {
          const int r = lane / 8 + 32 * s + 4 * q;
          const int t = __shfl_sync(0xffffffffu, held, lane / 8 + 4 * q);
          const uint32_t at = stage + r * kBlockKBytes + 16 * chunk;
          const uint32_t dst = at ^ (((at >> 7) & 7u) << 4);  // the 128B swizzle of a shared-memory address
          if (r < rows) {
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src_k + t * g.row_bytes)
                         : "memory");
          }
        }
      }
      asm volatile("cp.async.commit_group;" ::: "memory");
      if (pending != nullptr) Publish<1>(pending);
      pending = pipeline.producer_get_barrier(smem_pipe_write);
      ++k_tile_iter;
      ++smem_pipe_write;
    }
    if (pending != nullptr) Publish<0>(pending);
  }

 private:
  // The stage of full barrier `bar` (all but the newest kNewer copy groups) has landed: make it visible to the async
  // proxy and arrive on the barrier from every lane.
  template <int kNewer>
  CUTLASS_DEVICE static void Publish(uint64_t* bar) {
    asm volatile("cp.async.wait_group %0;" ::"n"(kNewer) : "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    cutlass::arch::ClusterBarrier::arrive(bar);
  }
};

}  // namespace hpc::moe

namespace cutlass::gemm::kernel::detail {
template <class BasePolicy>
struct HasAuxiliaryLoad<hpc::moe::GatherAPolicy<BasePolicy>> : cute::true_type {};
}  // namespace cutlass::gemm::kernel::detail
