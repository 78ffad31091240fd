// rope_norm's streaming kernel for large batches: the paired kernel's math (PairedGroupRows) fed from a ring of
// shared-memory stages that one producer warp per CTA fills with bulk copies (cp.async.bulk + mbarrier).
//
// Why: the paired kernel's groups load their rows, wait for them, compute and store, then leave; the bytes in flight
// per SM are what its resident warps hold in registers while they wait. On the H100 that reached 89% of the copy
// ceiling for 8/1 heads at T=16384, on the H200 (its memory ~1.4x faster, same SMs and clocks) only 77-78%: the
// kernel is bound by its concurrency, not by DRAM (bench/NOTES.md, rope_norm sessions 8-11 and 59). Here the loads
// hold no registers: the producer keeps up to `stream_stages` tiles of tokens in flight per CTA while the consumer
// warps compute the tile that has landed, and the CTAs stay resident (no ramp and drain per block).
//
// A tile is stream_tile_tokens consecutive tokens, a whole number of the paired kernel's token tiles (kind-major
// groups: every consumer warp slot holds one kind and one row count, which the full-warp shuffles need). A stage
// holds the tile's q, k and v rows ([token][Hq + 2 Hkv][D], 16-bit), its cos/sin rows ([token][rotary_dim] f32) and
// its positions and slots (int64). Copies need each token's heads contiguous (stride_h == D) and 16-byte aligned
// rows: StreamGeometry in rope_norm.cu checks that and otherwise the paired kernel runs.
#pragma once

#include <cute/arch/copy_sm90_tma.hpp>
#include <cutlass/arch/barrier.h>

#include "csrc/rope_norm/rope_norm_paired.cuh"

namespace hpc {
namespace rope_norm_detail {

constexpr int kStreamMaxConsumerWarps = 6;
constexpr int kStreamThreadsMax = 32 * (kStreamMaxConsumerWarps + 1);
// Two CTAs of 7 warps per SM: 65536 / (2 * 224) registers, rounded down to the allocation unit of 8. (At 128, what
// __launch_bounds__(224, 2) gives, the 4-row consumers spilled 180-690 bytes; at 144 they still spill 92-320 bytes,
// mostly the tile loop's state: the A/B says what that costs.)
constexpr int kStreamMaxRegisters = 144;
constexpr int kStreamMaxStages = 4;
constexpr int kStreamMaxTileTokens = 32;  // one producer lane per token
// Shared memory per CTA for the stages: two CTAs per SM (2 x 110 KB of the H100/H200's 228 KB).
constexpr int kStreamSmemBudget = 110 * 1024;
constexpr int kStreamBarrierBytes = 2 * kStreamMaxStages * 8;

// A stage as a source of PairedGroupRows' inputs. Tokens past the batch read whatever the stage holds (their
// groups run the shuffles, write nothing).
struct StageRows {
  static constexpr bool kStaged = true;
  const char* rows;
  const float* cos_sin;
  const int64_t* pos;
  const int64_t* slot;
  int first_token;

  template <typename T>
  __device__ __forceinline__ void Row(const RopeNormParams& p, RowKind kind, int token, int head,
                                      const LaneChunks& ch, uint4& a, uint4& b) const {
    const int index = kind == RowKind::kQ ? head : (kind == RowKind::kK ? p.num_q_heads : p.num_q_heads + p.num_kv_heads) + head;
    const char* row = rows + (token - first_token) * p.stream_token_bytes + index * p.head_dim * int{sizeof(T)};
    a = *reinterpret_cast<const uint4*>(row + ch.a * kVec * int{sizeof(T)});
    b = *reinterpret_cast<const uint4*>(row + ch.b * kVec * int{sizeof(T)});
  }
  __device__ __forceinline__ int64_t Pos(const RopeNormParams&, int token) const { return pos[token - first_token]; }
  __device__ __forceinline__ int64_t Slot(const RopeNormParams&, int token) const {
    return slot[token - first_token];
  }
  __device__ __forceinline__ const float* CosSin(const RopeNormParams& p, int token, int64_t) const {
    return cos_sin + (token - first_token) * p.rotary_dim;
  }
};

template <int G, int R, typename T, bool kFp8Cache, bool kFp8Q>
__global__ void __maxnreg__(kStreamMaxRegisters) RopeNormStreamKernel(const __grid_constant__ RopeNormParams p) {
  using FullBarrier = cutlass::arch::ClusterTransactionBarrier;
  using EmptyBarrier = cutlass::arch::ClusterBarrier;
  extern __shared__ __align__(128) char smem[];
  const int stages = p.stream_stages, tile_tokens = p.stream_tile_tokens;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + stages * p.stream_stage_bytes);
  uint64_t* empty = full + kStreamMaxStages;
  const int warp = static_cast<int>(threadIdx.x / 32), lane32 = static_cast<int>(threadIdx.x % 32);
  const int consumers = p.stream_consumer_warps;
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) FullBarrier::init(&full[s], 1), EmptyBarrier::init(&empty[s], consumers);
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  PdlWait();  // inputs may come from the previous kernel in the stream
  // The CTAs hold their SMs to the end: the next kernel's CTAs may as well be placed as ours leave.
  PdlLaunchDependents();

  if (warp == consumers) {
    // The producer: for each of this CTA's tiles, wait for its stage to be free, then copy the tile's rows (they do
    // not depend on the indices), store its positions and slots in the stage (one lane per token), copy the cos/sin
    // rows they name, and arrive. A tile's indices are loaded one tile ahead, right after the previous tile's
    // arrival, so their DRAM latency passes while this warp waits for a free stage rather than on the way to the
    // arrival (loaded in line, each tile's hand-over would wait for one round trip). The expected bytes are posted
    // before any copy so that the stage's phase cannot complete early; the arrival comes after the index stores
    // (__syncwarp orders the lanes' stores before lane 0's release).
    const int q_bytes = p.num_q_heads * p.head_dim * int{sizeof(T)};
    const int kv_bytes = p.num_kv_heads * p.head_dim * int{sizeof(T)};
    const int cs_bytes = p.rotary_dim * 4;
    // lane l's token of `tile` (-1 past the batch or the tile) and its indices
    int64_t pos = 0, slot = -1;
    auto load_indices = [&](int tile) {
      const int token = tile * tile_tokens + lane32;
      pos = 0, slot = -1;
      if (tile < p.stream_tiles && lane32 < tile_tokens && token < p.tokens) {
        pos = LoadIndex(p.positions, p.positions_i64, token);
        slot = LoadIndex(p.slot_mapping, p.slots_i64, token);
      }
    };
    load_indices(blockIdx.x);
    int it = 0;
    for (int tile = blockIdx.x; tile < p.stream_tiles; tile += gridDim.x, ++it) {
      const int s = it % stages;
      if (it >= stages) EmptyBarrier::wait(&empty[s], ((it / stages) - 1) & 1);
      char* stage = smem + s * p.stream_stage_bytes;
      const int first = tile * tile_tokens;
      const int n = min(tile_tokens, p.tokens - first);
      if (lane32 == 0) FullBarrier::expect_transaction(&full[s], n * (p.stream_token_bytes + cs_bytes));
      __syncwarp();
      const int token = first + lane32;
      if (lane32 < n) {
        char* rows = stage + lane32 * p.stream_token_bytes;
        cute::SM90_BULK_COPY_G2S::copy(SourceRow<T>(p, RowKind::kQ, token, 0), &full[s], rows, q_bytes);
        cute::SM90_BULK_COPY_G2S::copy(SourceRow<T>(p, RowKind::kK, token, 0), &full[s], rows + q_bytes, kv_bytes);
        cute::SM90_BULK_COPY_G2S::copy(SourceRow<T>(p, RowKind::kV, token, 0), &full[s], rows + q_bytes + kv_bytes,
                                       kv_bytes);
      }
      if (lane32 < tile_tokens) {
        reinterpret_cast<int64_t*>(stage + p.stream_index_offset)[lane32] = pos;
        reinterpret_cast<int64_t*>(stage + p.stream_index_offset)[tile_tokens + lane32] = slot;
        if (lane32 < n) {
          // an out-of-range position's row is never read (its rows become NaN); copy row 0 to keep the byte count
          const int64_t row = pos >= 0 && pos < p.max_pos ? pos : 0;
          cute::SM90_BULK_COPY_G2S::copy(static_cast<const float*>(p.cos_sin) + row * p.cos_sin_stride, &full[s],
                                         stage + p.stream_cos_sin_offset + lane32 * cs_bytes, cs_bytes);
        }
      }
      __syncwarp();
      if (lane32 == 0) FullBarrier::arrive(&full[s]);
      load_indices(tile + gridDim.x);
    }
    return;
  }

  // The consumers: warp w takes the tile's warp slots w, w + consumers, ... (a slot: 32 / G consecutive groups of
  // the tile, numbered as the paired kernel numbers them), then frees the stage.
  const int lane = lane32 % G;
  const int groups_per_tile = tile_tokens * p.groups_per_token;
  const int slots = groups_per_tile / (32 / G);
  int it = 0;
  for (int tile = blockIdx.x; tile < p.stream_tiles; tile += gridDim.x, ++it) {
    const int s = it % stages;
    FullBarrier::wait(&full[s], (it / stages) & 1);
    const char* stage = smem + s * p.stream_stage_bytes;
    const int64_t* index = reinterpret_cast<const int64_t*>(stage + p.stream_index_offset);
    const StageRows src{stage, reinterpret_cast<const float*>(stage + p.stream_cos_sin_offset), index,
                        index + tile_tokens, tile * tile_tokens};
    for (int slot = warp; slot < slots; slot += consumers) {
      const GroupUnit unit = UnitOfGroup(p, tile * groups_per_tile + slot * (32 / G) + lane32 / G);
      PairedGroupRows<G, R, T, kFp8Cache, kFp8Q>(p, unit, lane, src, unit.token < p.tokens, -1);
    }
    __syncwarp();
    if (lane32 == 0) EmptyBarrier::arrive(&empty[s]);
  }
}

}  // namespace rope_norm_detail
}  // namespace hpc
