// The grouped GEMMs' tile order (experiment 35): each persistent cluster takes one contiguous run of the grouped
// problem's tiles, so it stays on one expert for consecutive tiles, where CUTLASS's group scheduler hands cluster q
// the tiles q, q + G, q + 2G, ... (G resident clusters) -- a different expert on almost every tile when an expert
// has fewer tiles than the grid has clusters (Qwen3-30B: ~12 gate-up and ~16 down tiles per expert at T=4096, one
// M tile per expert at T <= 1024). Every expert change rewrites and fences the CTA's TMA descriptors (A and B in the
// producer, D in each consumer warpgroup before its epilogue) and re-reads the expert's problem shape.
//
// How it plugs in: CUTLASS's ptr-array kernels take only its GroupScheduler tag, and the tag's selector picks the
// scheduler by problem-shape type. MoeGroupProblemShape is CUTLASS's GroupProblemShape under our own name (plus the
// order, which reaches the scheduler inside its params' copy of the shape), so the selector specialization below
// gives our kernels (and no one else's) ExpertBlockedScheduler: CUTLASS's group scheduler with its start and its
// advance replaced; the group walk (get_current_work_for_linear_idx), the work hand-out to the producer and
// consumers, and every static stay CUTLASS's. HPC_XLA_MOE_TILE_ORDER=strided gives CUTLASS's order back (A/B).
#pragma once

#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/pipeline/pipeline.hpp"  // before the scheduler, which uses PipelineAsync without including it
#include "cutlass/gemm/kernel/sm90_tile_scheduler_group.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"

namespace hpc::moe {

struct MoeGroupProblemShape : cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>> {
  bool blocked = true;  // false: CUTLASS's strided order (cluster q: q, q + G, ...)
};

template <int Stages>
class ExpertBlockedScheduler
    : public cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90Group<MoeGroupProblemShape, Stages> {
  using Base = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90Group<MoeGroupProblemShape, Stages>;

 public:
  using Params = typename Base::Params;
  using WorkTileInfo = typename Base::WorkTileInfo;
  using SchedulerResponse = typename Base::SchedulerResponse;
  using RasterOrder = typename Base::RasterOrder;

  ExpertBlockedScheduler() = default;

  // Called by every thread of the CTA (all warps converged), after the kernel's PDL wait: the problem shapes come
  // from the setup kernel before it.
  CUTLASS_DEVICE ExpertBlockedScheduler(Params const& params, SchedulerResponse* response)
      : Base(params, response), response_(response) {
#if defined(__CUDA_ARCH__)
    // The CTA's linear index exactly as CUTLASS's scheduler starts it. Its grid keeps a cluster's CTAs at
    // consecutive linear indices, and its group walk takes a CTA's place in the cluster from the index's low part,
    // so tile t of the linearized problem is run by the CTAs t * cluster + rank.
    // 32-bit state: the producer warps run on few registers, and a problem has far fewer than 2^32 tiles.
    const uint32_t linear = params.raster_order_ == RasterOrder::AlongN ? blockIdx.x + blockIdx.y * gridDim.x
                                                                        : blockIdx.x * gridDim.y + blockIdx.y;
    const uint32_t grid = gridDim.x * gridDim.y * gridDim.z;
    cluster_ctas_ = uint32_t(params.cluster_shape_.m() * params.cluster_shape_.n());
    rank_ = linear % cluster_ctas_;
    const uint32_t clusters = grid / cluster_ctas_, cluster = linear / cluster_ctas_;
    if (!params.problem_shapes_.blocked) {  // CUTLASS's own order: the walk runs out past the last group
      next_ = cluster, stride_ = clusters, end_ = ~0u;
      return;
    }
    const uint64_t tiles = ClusterTiles(params);
    next_ = uint32_t(cluster * tiles / clusters);  // equal runs to within one tile, like the strided order's counts
    end_ = uint32_t((cluster + 1) * tiles / clusters);
#endif
  }

  template <class ClusterShape>
  CUTLASS_DEVICE WorkTileInfo initial_work_tile_info(ClusterShape) {
    return WorkAt(next_);
  }

  // The scheduler warp's step (CUTLASS's, with the next tile of the run instead of the next stride).
  template <class Pipeline, class PipelineState>
  CUTLASS_DEVICE auto advance_to_next_work(Pipeline& pipeline, PipelineState state, uint32_t advance_count = 1) {
    next_ += stride_ * advance_count;
    const WorkTileInfo work = WorkAt(next_);
    pipeline.producer_acquire(state);
    if (cute::elect_one_sync()) {
      response_[state.index()] = work;
      cutlass::arch::fence_view_async_shared();
      pipeline.producer_commit(state);
    }
    return cute::make_tuple(work, true);
  }

 private:
  // Warp-uniform (next_ and end_ are the CTA's): the group walk behind it needs the whole warp.
  CUTLASS_DEVICE WorkTileInfo WorkAt(uint32_t tile) {
    if (tile >= end_) return WorkTileInfo::invalid_work_tile();
    return Base::get_current_work_for_linear_idx(uint64_t(tile) * cluster_ctas_ + rank_);
  }

  // The problem's count of cluster tiles, each group's tiles counted as CUTLASS's walk counts them (CTA tiles
  // rounded up to the cluster and swizzle along M and N): the lanes of each warp sum a share of the groups.
  CUTLASS_DEVICE uint64_t ClusterTiles(Params const& p) const {
    const int lane = int(threadIdx.x % 32), groups = p.problem_shapes_.groups();
    const uint64_t round_m = uint64_t(p.cluster_shape_.m()) << p.log_swizzle_size_;
    const uint64_t round_n = uint64_t(p.cluster_shape_.n()) << p.log_swizzle_size_;
    uint64_t sum = 0;
    for (int g = lane; g < groups; g += 32) {
      const auto shape = p.problem_shapes_.get_problem_shape(g);
      const uint64_t m = p.divmod_cta_shape_m_.divide(cute::get<0>(shape) + p.divmod_cta_shape_m_.divisor - 1);
      const uint64_t n = p.divmod_cta_shape_n_.divide(cute::get<1>(shape) + p.divmod_cta_shape_n_.divisor - 1);
      sum += (m + round_m - 1) / round_m * round_m * ((n + round_n - 1) / round_n * round_n);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    return sum / cluster_ctas_;
  }

  SchedulerResponse* response_ = nullptr;
  uint32_t next_ = 0, end_ = 0, stride_ = 1, cluster_ctas_ = 1, rank_ = 0;
};

}  // namespace hpc::moe

namespace cutlass::gemm::kernel::detail {

// Our grouped GEMMs (problem shape MoeGroupProblemShape) on sm90 get the expert-blocked order.
template <class TileShape, class ClusterShape, uint32_t SchedulerPipelineStageCount>
struct TileSchedulerSelector<GroupScheduler, arch::Sm90, TileShape, ClusterShape, SchedulerPipelineStageCount,
                             hpc::moe::MoeGroupProblemShape> {
  using Scheduler = hpc::moe::ExpertBlockedScheduler<static_cast<int>(SchedulerPipelineStageCount)>;
};

}  // namespace cutlass::gemm::kernel::detail
