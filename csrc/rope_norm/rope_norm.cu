// rope_norm on sm_90a: one memory-bound pass, launched here. Two kernels: the paired kernel
// (rope_norm_paired.cuh) for head_dim 64/128/256 with f32 cos/sin and lane-aligned rotary dims -- the shapes
// models use -- and the general kernel (rope_norm_general.cuh) for everything else the API accepts.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>

#include "csrc/common/arch.h"
#include "csrc/common/check.h"
#include "csrc/common/device_check.h"
#include "csrc/common/launch.cuh"
#include "csrc/common/numeric.h"
#include "csrc/common/occupancy.h"
#include "csrc/common/vec.cuh"
#include "csrc/rope_norm/rope_norm.h"
#include "csrc/rope_norm/rope_norm_general.cuh"
#include "csrc/rope_norm/rope_norm_paired.cuh"

namespace hpc {
namespace {

using namespace rope_norm_detail;

// HPC_XLA_CHECK=1: find the first token whose position or slot is out of range.
__global__ void RopeNormIndexCheckKernel(RopeNormParams p, unsigned long long* first_bad) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= p.tokens) return;
  const int64_t pos = LoadIndex(p.positions, p.positions_i64, t);
  const int64_t slot = LoadIndex(p.slot_mapping, p.slots_i64, t);
  if (pos < 0 || pos >= p.max_pos || slot < -1 || slot >= p.num_slots) atomicMin(first_bad, t);
}

// Rows per lane group (paired kernel). Several rows per thread amortize the token's index, cos/sin and weight
// loads and keep more bytes in flight per thread, but serialize the rows' math: a small batch (too few threads
// to fill the GPU twice with 4-row blocks) takes 1 row per group, a large one 4. Measured on the H200 at
// T=16384 (bench/NOTES.md, session 7): 8/1/128 30.3 us at 4 rows against 35.9 at 1 -- its k and v groups hold
// 1 row of 4, and those idle slots cost less than the per-row cos/sin and index loads they save; 64/8 and 32/4
// were already best at 4. HPC_XLA_ROPE_ROWS=1|2|4 forces one for A/B runs.
int RowsPerGroup(int64_t tokens, int q_heads, int kv_heads, int group_lanes, int sms) {
  static const int forced = [] {
    const int r = EnvInt("HPC_XLA_ROPE_ROWS", 0);
    return r == 1 || r == 2 || r == 4 ? r : 0;
  }();
  if (forced != 0) return forced;
  // "fills": at least two waves of the 4-row kernel's resident blocks
  const int64_t groups = (q_heads + 3) / 4 + 2 * ((kv_heads + 3) / 4);
  const int64_t wave = static_cast<int64_t>(sms) * kPairedThreads * kPairedMinBlocks<4>;
  return tokens * groups * group_lanes >= 2 * wave ? 4 : 1;
}

// rows * 2 + kv_merged of the last launch (-1: none yet; 0: the general kernel), for RopeNormLastLaunch
std::atomic<int> g_last_launch{-1};

// Whether a token's k and v rows share one lane group (RopeNormParams::kv_merged): when all of them fit in its
// rows. HPC_XLA_ROPE_KV_MERGE=0 keeps separate k and v groups, for A/B runs.
bool KvMerged(int rows, int kv_heads) {
  static const bool enabled = EnvFlag("HPC_XLA_ROPE_KV_MERGE", true);
  return enabled && rows > 1 && 2 * kv_heads <= rows;
}

template <int G, int R, typename T, bool kFp8Cache, bool kFp8Q>
struct GeneralKernel {
  static void* Get() { return reinterpret_cast<void*>(&RopeNormGeneralKernel<G, R, T, kFp8Cache, kFp8Q>); }
};

template <int G, int R, typename T, bool kFp8Cache, bool kFp8Q>
struct PairedKernel {
  static void* Get() { return reinterpret_cast<void*>(&RopeNormPairedKernel<G, R, T, kFp8Cache, kFp8Q>); }
};

template <template <int, int, typename, bool, bool> class K, int G, int R, typename T>
void* PickKernel(bool fp8_cache, bool fp8_q) {
  if (fp8_cache) return fp8_q ? K<G, R, T, true, true>::Get() : K<G, R, T, true, false>::Get();
  return fp8_q ? K<G, R, T, false, true>::Get() : K<G, R, T, false, false>::Get();
}

template <template <int, int, typename, bool, bool> class K, int G, int R>
void* PickKernel(DType dtype, bool fp8_cache, bool fp8_q) {
  return dtype == DType::kBF16 ? PickKernel<K, G, R, __nv_bfloat16>(fp8_cache, fp8_q)
                               : PickKernel<K, G, R, __half>(fp8_cache, fp8_q);
}

template <int G>
void* PickPaired(int rows, DType dtype, bool fp8_cache, bool fp8_q) {
  switch (rows) {
    case 1: return PickKernel<PairedKernel, G, 1>(dtype, fp8_cache, fp8_q);
    case 2: return PickKernel<PairedKernel, G, 2>(dtype, fp8_cache, fp8_q);
    default: return PickKernel<PairedKernel, G, 4>(dtype, fp8_cache, fp8_q);
  }
}

// The paired kernel's layout needs whole 16-element lanes (head_dim 64, 128 or 256), rotation partners that
// land in one lane, and f32 cos/sin rows it can read 16 bytes at a time.
bool PairedKernelApplies(const RopeNormParams& p) {
  const bool dims = p.head_dim == 64 || p.head_dim == 128 || p.head_dim == 256;
  return dims && p.fast_rope && p.rotary_dim % (p.neox ? 16 : 8) == 0;
}

int GroupLanes(int head_dim) {
  int g = 2;
  while (g * kVec < head_dim) g *= 2;
  return g;
}

// The paired kernel's cos/sin prefetch distance, in lane groups (RopeNormParams::prefetch_groups): 3/4 of a
// wave of resident blocks. Measured on the H200 at T=16384 (bench/NOTES.md session 8), 1/4 to a whole wave:
// 3/4 was best or near it on every shape. HPC_XLA_ROPE_PREFETCH_PCT sets it in percent of a wave for A/B runs
// (0 = no prefetch).
Status SetPrefetch(const void* kernel, int lanes, int device, RopeNormParams& p) {
  static const int pct = EnvInt("HPC_XLA_ROPE_PREFETCH_PCT", 75);
  p.prefetch_groups = 0;
  if (pct <= 0) return Status::Ok();
  int per_sm = 0;
  HPC_RETURN_IF_ERROR(ResidentCtasPerSm(kernel, kPairedThreads, 0, "rope_norm: occupancy", &per_sm));
  const int64_t wave = static_cast<int64_t>(per_sm) * MultiprocessorCount(device) * (kPairedThreads / lanes);
  p.prefetch_groups = static_cast<int>(std::min<int64_t>(wave * pct / 100, INT32_MAX / 2));
  return Status::Ok();
}

bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

RopeNormParams MakeParams(const RopeNormArgs& a) {
  RopeNormParams p = {};
  p.q = a.q.data, p.k = a.k.data, p.v = a.v.data;
  p.q_stride_t = a.q.strides[0], p.q_stride_h = a.q.strides[1];
  p.k_stride_t = a.k.strides[0], p.k_stride_h = a.k.strides[1];
  p.v_stride_t = a.v.strides[0], p.v_stride_h = a.v.strides[1];
  p.q_out = a.q_out.data;
  p.q_out_stride_t = a.q_out.strides[0], p.q_out_stride_h = a.q_out.strides[1];
  p.q_scale = a.q_scale.present() ? a.q_scale.ptr<float>() : nullptr;
  p.positions = a.positions.data;
  p.slot_mapping = a.slot_mapping.data;
  p.cos_sin = a.cos_sin_cache.data;
  p.cos_sin_stride = a.cos_sin_cache.strides[0];
  p.max_pos = a.cos_sin_cache.shape[0];
  p.k_cache = a.k_cache.data, p.v_cache = a.v_cache.data;
  p.k_cache_stride_b = a.k_cache.strides[0], p.k_cache_stride_p = a.k_cache.strides[1];
  p.k_cache_stride_h = a.k_cache.strides[2];
  p.v_cache_stride_b = a.v_cache.strides[0], p.v_cache_stride_p = a.v_cache.strides[1];
  p.v_cache_stride_h = a.v_cache.strides[2];
  p.page_size = a.k_cache.shape[1];
  p.num_slots = a.k_cache.shape[0] * a.k_cache.shape[1];
  p.q_norm_weight = a.q_norm_weight.present() ? a.q_norm_weight.data : nullptr;
  p.k_norm_weight = a.k_norm_weight.present() ? a.k_norm_weight.data : nullptr;
  p.q_norm_dtype = a.q_norm_weight.dtype, p.k_norm_dtype = a.k_norm_weight.dtype;
  p.k_scale = a.k_scale.present() ? a.k_scale.ptr<const float>() : nullptr;
  p.v_scale = a.v_scale.present() ? a.v_scale.ptr<const float>() : nullptr;
  p.eps = a.eps;
  p.inv_head_dim = 1.0f / static_cast<float>(a.q.shape[2]);
  p.tokens = static_cast<int>(a.q.shape[0]);
  p.num_q_heads = static_cast<int>(a.q.shape[1]);
  p.num_kv_heads = static_cast<int>(a.k.shape[1]);
  p.head_dim = static_cast<int>(a.q.shape[2]);
  p.rotary_dim = static_cast<int>(a.rotary_dim);
  p.positions_i64 = a.positions.dtype == DType::kI64;
  p.slots_i64 = a.slot_mapping.dtype == DType::kI64;
  p.cos_sin_dtype = a.cos_sin_cache.dtype;
  p.neox = a.rope_style == RopeStyle::kNeox;
  p.norm_before_rope = a.norm_before_rope;
  const int half = p.rotary_dim / 2;
  p.fast_rope = a.cos_sin_cache.dtype == DType::kF32 && Aligned16(a.cos_sin_cache.data) &&
                a.cos_sin_cache.strides[0] % 4 == 0 && (p.neox ? half % kVec == 0 : half % 4 == 0);
  return p;
}

// Debug mode: validate indices on the GPU and report the first bad token like the CPU path does.
Status CheckIndicesOnDevice(const RopeNormParams& p, cudaStream_t stream, int device) {
  bool capturing = false;
  HPC_RETURN_IF_ERROR(StreamCapturing(stream, "rope_norm check", &capturing));
  if (capturing) return Status::Ok();
  static unsigned long long* flags[64] = {};
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (flags[device] == nullptr) {
    HPC_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&flags[device], sizeof(unsigned long long)), "rope_norm check"));
  }
  const unsigned long long none = ~0ull;
  HPC_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(flags[device], &none, sizeof(none), cudaMemcpyHostToDevice, stream),
                                 "rope_norm check"));
  RopeNormIndexCheckKernel<<<(p.tokens + 255) / 256, 256, 0, stream>>>(p, flags[device]);
  unsigned long long bad = none;
  HPC_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(&bad, flags[device], sizeof(bad), cudaMemcpyDeviceToHost, stream),
                                 "rope_norm check"));
  HPC_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream), "rope_norm check"));
  if (bad == none) return Status::Ok();
  int64_t pos = 0, slot = 0;
  const int pbytes = p.positions_i64 ? 8 : 4, sbytes = p.slots_i64 ? 8 : 4;
  int32_t tmp32 = 0;
  HPC_RETURN_IF_ERROR(CudaStatus(cudaMemcpy(p.positions_i64 ? static_cast<void*>(&pos) : &tmp32,
                                            static_cast<const char*>(p.positions) + bad * pbytes, pbytes,
                                            cudaMemcpyDeviceToHost), "rope_norm check"));
  if (!p.positions_i64) pos = tmp32;
  HPC_RETURN_IF_ERROR(CudaStatus(cudaMemcpy(p.slots_i64 ? static_cast<void*>(&slot) : &tmp32,
                                            static_cast<const char*>(p.slot_mapping) + bad * sbytes, sbytes,
                                            cudaMemcpyDeviceToHost), "rope_norm check"));
  if (!p.slots_i64) slot = tmp32;
  return RopeNormIndexError(static_cast<int64_t>(bad), pos, p.max_pos, slot, p.num_slots);
}

}  // namespace

RopeNormLaunchInfo RopeNormLastLaunch() {
  const int v = g_last_launch.load(std::memory_order_relaxed);
  RopeNormLaunchInfo info;
  if (v >= 0) info.rows_per_group = v / 2, info.kv_merged = (v % 2) != 0;
  return info;
}

Status RopeNormCuda(const RopeNormArgs& a, cudaStream_t stream) {
  HPC_RETURN_IF_ERROR(ValidateRopeNorm(a));
  if (a.q.device != DeviceKind::kCuda) return Status::Internal("rope_norm: CUDA launcher called with CPU tensors");
  HPC_RETURN_IF_ERROR(CheckHopper(a.q.device_id));
  for (const auto& [name, t] : {std::pair<const char*, const TensorView*>{"q", &a.q}, {"k", &a.k}, {"v", &a.v},
                                {"q_out", &a.q_out}, {"k_cache", &a.k_cache}, {"v_cache", &a.v_cache},
                                {"q_norm_weight", &a.q_norm_weight}, {"k_norm_weight", &a.k_norm_weight}}) {
    if (t->present()) HPC_RETURN_IF_ERROR(ArgCheck("rope_norm").VectorAligned(name, *t, 16));
  }
  RopeNormParams p = MakeParams(a);
  if (p.tokens == 0) return Status::Ok();
  if (DeviceChecksEnabled()) {
    HPC_RETURN_IF_ERROR(CheckIndicesOnDevice(p, stream, a.q.device_id));
    HPC_RETURN_IF_ERROR(CheckScalesOnDevice("rope_norm", "k_scale", a.k_scale, stream));
    HPC_RETURN_IF_ERROR(CheckScalesOnDevice("rope_norm", "v_scale", a.v_scale, stream));
  }

  const bool fp8_cache = a.k_cache.dtype == DType::kF8E4M3, fp8_q = a.q_out.dtype == DType::kF8E4M3;
  void* kernel = nullptr;
  int lanes = 0, groups_per_token = 0;
  const bool paired = PairedKernelApplies(p);
  if (paired) {
    lanes = p.head_dim / 16;
    const int rows = RowsPerGroup(p.tokens, p.num_q_heads, p.num_kv_heads, lanes, MultiprocessorCount(a.q.device_id));
    p.q_groups = (p.num_q_heads + rows - 1) / rows;
    p.kv_groups = (p.num_kv_heads + rows - 1) / rows;
    p.kv_merged = KvMerged(rows, p.num_kv_heads);
    groups_per_token = p.q_groups + (p.kv_merged ? 1 : 2 * p.kv_groups);
    // Tokens per tile: the fewest (a power of two) for which each kind's groups fill whole warps, so no warp
    // mixes q, k and v groups (8/1 heads: 4 tokens = 32 q groups + 4 k + 4 v at 4 groups per warp; mixed warps
    // ran their q and k branches one after the other). Where a kind's heads are not a multiple of its groups
    // (some groups a row short: 5 q heads in 2 groups), a whole warp of tokens, so that a warp's groups share
    // their first head and run the same rows: the paired kernel's shuffles name the whole warp (its row loop).
    const int groups_per_warp = 32 / lanes;
    const bool uneven_rows =
        p.num_q_heads % p.q_groups != 0 || (!p.kv_merged && p.num_kv_heads % p.kv_groups != 0);
    auto whole_warps = [&](int shift) {
      if (uneven_rows) return (1 << shift) >= groups_per_warp;
      return ((p.q_groups << shift) % groups_per_warp) == 0 && ((p.kv_groups << shift) % groups_per_warp) == 0;
    };
    p.tile_shift = 0;
    while (!whole_warps(p.tile_shift) && (1 << p.tile_shift) < groups_per_warp) ++p.tile_shift;
    p.tile_div = cutlass::FastDivmod(groups_per_token << p.tile_shift);
    switch (lanes) {
      case 4: kernel = PickPaired<4>(rows, a.q.dtype, fp8_cache, fp8_q); break;
      case 8: kernel = PickPaired<8>(rows, a.q.dtype, fp8_cache, fp8_q); break;
      default: kernel = PickPaired<16>(rows, a.q.dtype, fp8_cache, fp8_q); break;
    }
    HPC_RETURN_IF_ERROR(SetPrefetch(kernel, lanes, a.q.device_id, p));
    g_last_launch.store(rows * 2 + (p.kv_merged ? 1 : 0), std::memory_order_relaxed);
  } else {
    g_last_launch.store(0, std::memory_order_relaxed);
    lanes = GroupLanes(p.head_dim);
    groups_per_token = p.groups_per_token = p.num_q_heads + 2 * p.num_kv_heads;  // one row per group
    switch (lanes) {
      case 2: kernel = PickKernel<GeneralKernel, 2, 1>(a.q.dtype, fp8_cache, fp8_q); break;
      case 4: kernel = PickKernel<GeneralKernel, 4, 1>(a.q.dtype, fp8_cache, fp8_q); break;
      case 8: kernel = PickKernel<GeneralKernel, 8, 1>(a.q.dtype, fp8_cache, fp8_q); break;
      case 16: kernel = PickKernel<GeneralKernel, 16, 1>(a.q.dtype, fp8_cache, fp8_q); break;
      default: kernel = PickKernel<GeneralKernel, 32, 1>(a.q.dtype, fp8_cache, fp8_q); break;
    }
  }
  const int threads = paired ? kPairedThreads : kThreads;
  const int64_t tile_tokens = paired ? int64_t{1} << p.tile_shift : 1;  // the grid covers whole tiles
  const int64_t groups = (p.tokens + tile_tokens - 1) / tile_tokens * tile_tokens * groups_per_token;
  if (groups >= (int64_t{1} << 31)) {
    return ArgCheck("rope_norm").Fail(
        "too many rows for one launch: tokens * (Hq + 2 Hkv) must stay below 2^31 - 8 (Hq + 2 Hkv)");
  }
  const int groups_per_block = threads / lanes;
  const dim3 grid(static_cast<unsigned>((groups + groups_per_block - 1) / groups_per_block));
  using KernelFn = void (*)(RopeNormParams);
  return Launch("rope_norm kernel launch", reinterpret_cast<KernelFn>(kernel), grid, dim3(threads), 0, stream, p);
}

}  // namespace hpc
