// The single-token fp8_tensor MoE layer (one_token_moe.h).
//
// Why: the stream path runs the gate-up and then the down kernel; at T = 1 the down's CTAs (144 KB of ring each)
// become resident only as gate-up CTAs leave, and only then start reading w2 (12.6 MB at Qwen3-30B): s44c's
// timeline put 7.5 us between the last gate-up exit and the layer's end, DRAM idle at the start of it. Here the CTAs
// of a unit (hit expert e, W columns of I) also take the down of those W columns -- partial[pair, unit, h] = sum over
// them of w2[e, h, c] x inter[c] for their share of H -- reading w2's W-byte row pieces into registers right after
// their w13 copies are issued, so the whole layer's weights are in flight at once; a small kernel then sums the
// partials. W = 128 (64 where I % 128 != 0): experiment 63 took W = 32 and its 32-byte pieces streamed at 1.4 TB/s,
// where 128-byte ones run at the copy ceiling (tools/strided_read_probe.cu, bench/NOTES.md session 46).
//
// Gate-up: a cluster of C CTAs (ranks) per unit, rank r taking K groups [r G / C, (r + 1) G / C) of the G = H / 128,
// at most 256 / W each (<= 64 KB of A: 2W rows x 128 bytes a group, 2W / 64 wgmma m64 tiles -- the gate rows of
// the unit's 64-column blocks, then their up rows, each 64 consecutive rows of w13 in either layout). B is x as an
// n8 tile (token 0, rows 1-7 zero). Each group's 4 wgmmas per tile are promoted into f32 registers. Then every rank
// adds every rank's column 0 in rank order through distributed shared memory (the same sum in each, bitwise), so
// each has the unit's W intermediate values (the reference's rounding) without a round trip through one rank.
// Down: rank r's rows of H are those of its K groups (n x 128); per 16-row block one m16n8k16 f16 mma.sync per 16
// columns (e4m3 -> f16 is exact, the accumulator f32). mma.sync only needs A and B to agree on which column a
// register slot holds: thread (g, q) loaded bytes [q W / 4, (q + 1) W / 4) of rows g and g + 8, and step s's slots
// 2q, 2q + 1 / 2q + 8, 2q + 9 hold its bytes 4s + {0, 1} / {2, 3}, in A and B alike.
// Sum: a CTA per 32 columns of H adds the unit blocks in order, scales by a2_scale x w2_scale[e], weights by the
// top-k weight and adds the slots in order (+ shared) -- the down kernel's reduce, blocks of I for its K splits.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <tuple>

#include "csrc/common/arch.h"
#include "csrc/common/launch.cuh"
#include "csrc/common/mma.cuh"
#include "csrc/common/numeric.h"
#include "csrc/moe/fused_moe.h"
#include "csrc/moe/fused_moe_plan.h"
#include "csrc/moe/moe_common.cuh"
#include "csrc/moe/one_token_moe.h"
#include "csrc/moe/wgmma_sm90.cuh"

namespace hpc::moe {
namespace {

namespace cg = cooperative_groups;

// Launches (FusedMoeFusedDownLaunches: the tests' proof of which kernels ran).
std::atomic<int64_t> g_launches{0};

constexpr int kThreads = 128;                     // one warpgroup
constexpr int kGroupK = 128;                      // K per group: one 128-byte swizzle atom row of e4m3
constexpr int kTileRows = 64;                     // the wgmma M
constexpr int kTileBytes = kTileRows * kGroupK;   // 8 KB
constexpr int kBGroupBytes = 8 * kGroupK;         // x as an n8 tile
constexpr int kMaxCluster = 8;                    // portable cluster size
constexpr int kRankABytes = 64 * 1024;            // A per rank: 3 CTAs per SM
constexpr int kW2Chunks = 16;                     // 16-byte w2 pieces a thread holds (64 registers)
constexpr int kMaxPairs = 64;                     // top_k (ids held by two loads per lane)

template <int W>
struct Unit {
  static constexpr int kTiles = 2 * W / kTileRows;                      // gate tiles, then up tiles
  static constexpr int kGroupBytes = 2 * W * kGroupK;                   // A of one K group
  static constexpr int kMaxGroups = kRankABytes / kGroupBytes;          // per rank: 2 (W = 128) | 4 (W = 64)
  static constexpr int kRowChunks = W / 64;                             // 16-byte chunks of a thread's row piece
  static constexpr int kBlocksPerWarp = kMaxGroups * kGroupK / 16 / 4;  // 16-row w2 blocks per warp
  static constexpr int kSteps = W / 16;                                 // m16n8k16 steps over the W columns
  static_assert(kBlocksPerWarp * 2 * kRowChunks == kW2Chunks, "a thread's w2 pieces fill its 64 registers");
};

struct Params {
  OneTokenMoeArgs a;
  int cluster;      // ranks per unit
  int col_blocks;   // I / W
};

int ClusterFor(int groups, int max_groups) { return (groups + max_groups - 1) / max_groups; }

__device__ __forceinline__ uint4 LoadStreamingU4(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ uint32_t Word(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

template <int W, bool kXFp8>
__global__ void __launch_bounds__(kThreads, kOneTokenMoeCtasPerSm) OneTokenUnitKernel(const __grid_constant__ Params p) {
  using U = Unit<W>;
  extern __shared__ uint8_t dyn[];
  __shared__ int ids_s[kMaxPairs];
  __shared__ float col0_s[2 * W], sum_s[2 * W];
  __shared__ __align__(16) uint8_t inter_s[W];
  const OneTokenMoeArgs& a = p.a;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, q = lane % 4;
  const int rank = static_cast<int>(blockIdx.x) % p.cluster, unit = static_cast<int>(blockIdx.x) / p.cluster;
  const int slot = unit / p.col_blocks, cb = unit % p.col_blocks;
  const int P = a.top_k;
  PdlWait();  // topk_ids and x may come from the previous kernel (routing)
  // The slot's expert; every warp of every rank decides alike, so the cluster runs or exits as one.
  const int id_lo = lane < P ? a.ids[lane] : -1, id_hi = lane + 32 < P ? a.ids[lane + 32] : -1;
  const int mine = __shfl_sync(0xffffffffu, slot < 32 ? id_lo : id_hi, slot % 32);
  const bool repeat = __any_sync(0xffffffffu, (lane < slot && id_lo == mine) || (lane + 32 < slot && id_hi == mine));
  const int e = mine - a.expert_offset;
  if (repeat || mine < 0 || e < 0 || e >= a.experts) return;
  PdlLaunchDependents();  // the sum kernel may start its prologue
  if (tid < 32) ids_s[tid] = id_lo, ids_s[tid + 32] = id_hi;

  const uint32_t raw = SmemAddr(dyn);
  const uint32_t a_base = (raw + 1023u) & ~1023u;  // the swizzle is a function of the address bits
  uint8_t* a_ptr = dyn + (a_base - raw);
  const int64_t H = a.hidden, I = a.inter_size;
  const int groups = static_cast<int>(H / kGroupK);
  const int g0 = rank * groups / p.cluster, n = (rank + 1) * groups / p.cluster - g0;
  const uint32_t b_base = a_base + n * U::kGroupBytes;
  uint8_t* b_ptr = a_ptr + n * U::kGroupBytes;

  // A: tile m is 64 consecutive rows of w13 -- the gate (m < W / 64) or up rows of columns cb W + 64 (m % (W / 64)).
  // 512 chunks of 16 bytes per tile and group, 4 per thread; a thread's rows share r % 8 (one swizzle).
  const uint8_t* w13 = a.w13 + static_cast<int64_t>(e) * 2 * I * H + static_cast<int64_t>(g0) * kGroupK;
  const int64_t up_delta = W13UpDelta(I, a.w13_interleaved);
  const int r0 = tid / 8, c = tid % 8;
#pragma unroll
  for (int s = 0; s < U::kMaxGroups; ++s) {
    if (s < n) {
#pragma unroll
      for (int m = 0; m < U::kTiles; ++m) {
        const int half = U::kTiles / 2;
        const int64_t row0 = W13GateRow(cb * W + kTileRows * (m % half), a.w13_interleaved) + (m < half ? 0 : up_delta);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int r = r0 + 16 * i;
          CpAsync16(a_base + s * U::kGroupBytes + m * kTileBytes + Sw128(r, c),
                    w13 + (row0 + r) * H + s * kGroupK + c * 16, true);
        }
      }
    }
    CpAsyncCommit();
  }
  // w2's pieces, in flight with w13: block i of this warp is rows 16 (warp + 4 i) + {g, g + 8} of the rank's share
  // (rows g0 x 128 ...), bytes [q W / 4, (q + 1) W / 4) of the unit's W columns.
  uint4 w2r[kW2Chunks];
  {
    const uint8_t* w2 = a.w2 + (static_cast<int64_t>(e) * H + static_cast<int64_t>(g0) * kGroupK + g) * I + cb * W +
                        q * (W / 4);
#pragma unroll
    for (int i = 0; i < U::kBlocksPerWarp; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int k = 0; k < U::kRowChunks; ++k) {
          w2r[(2 * i + h) * U::kRowChunks + k] =
              i < 2 * n ? LoadStreamingU4(w2 + (16 * (warp + 4 * i) + 8 * h) * I + 16 * k) : make_uint4(0u, 0u, 0u, 0u);
        }
      }
    }
  }
  StoreXTilesE4M3<kXFp8, kThreads>(b_ptr, kBGroupBytes, a.x, 1, H, g0, n, kXFp8 ? 1.f : QuantMultiplier(*a.a13_scale));

  // Gate-up: per K group, wait for its copies (kMaxGroups commit groups, empty ones past n), then every tile's
  // 4 wgmmas, waited for together and promoted into acc.
  float acc[U::kTiles][4] = {};
#pragma unroll
  for (int s = 0; s < U::kMaxGroups; ++s) {
    if (s < n) {
      CpAsyncWaitAtMost(U::kMaxGroups - 1 - s);
      FenceProxyAsync();
      __syncthreads();
      float d[U::kTiles][4];
#pragma unroll
      for (int m = 0; m < U::kTiles; ++m) {
        WgmmaIssueGroupE4M3(d[m], a_base + s * U::kGroupBytes + m * kTileBytes, b_base + s * kBGroupBytes);
      }
      WgmmaWaitAll();
#pragma unroll
      for (int m = 0; m < U::kTiles; ++m) {
        FenceRegs(d[m]);
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[m][j] = __fadd_rn(acc[m][j], d[m][j]);
      }
    }
  }
  // Column 0 (token 0) of every tile: lanes q == 0 hold rows 16 warp + g (acc[m][0]) and + 8 (acc[m][2]).
  if (q == 0) {
#pragma unroll
    for (int m = 0; m < U::kTiles; ++m) {
      col0_s[m * kTileRows + 16 * warp + g] = acc[m][0];
      col0_s[m * kTileRows + 16 * warp + g + 8] = acc[m][2];
    }
  }
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  for (int t = tid; t < 2 * W; t += kThreads) {  // every rank's column 0 in rank order
    float sum = 0.f;
    for (int r = 0; r < p.cluster; ++r) {
      const float v = r == rank ? col0_s[t] : *cluster.map_shared_rank(col0_s + t, r);
      sum = r == 0 ? v : __fadd_rn(sum, v);
    }
    sum_s[t] = sum;
  }
  cluster.sync();  // no rank leaves while another reads its col0_s; sum_s complete
  const float ts = __fmul_rn(*a.a13_scale, a.w13_scale[e]);
  if (tid < W) inter_s[tid] = ActE4M3(sum_s[tid], sum_s[W + tid], ts, QuantMultiplier(*a.a2_scale));
  __syncthreads();

  // Down: B (column g = token g; only token 0 exists) from the thread's W / 4 intermediate bytes.
  uint32_t b[U::kSteps][2];
#pragma unroll
  for (int st = 0; st < U::kSteps; ++st) {
    const uint32_t v = g == 0 ? *reinterpret_cast<const uint32_t*>(inter_s + q * (W / 4) + 4 * st) : 0u;
    b[st][0] = g == 0 ? E4M3x2ToHalf2(v & 0xffffu) : 0u;
    b[st][1] = g == 0 ? E4M3x2ToHalf2(v >> 16) : 0u;
  }
  uint64_t pairs = 0;  // the pairs routed to this expert
  for (int pair = 0; pair < P; ++pair) pairs |= static_cast<uint64_t>(ids_s[pair] == mine) << pair;
  const int64_t h0 = static_cast<int64_t>(g0) * kGroupK;
#pragma unroll
  for (int i = 0; i < U::kBlocksPerWarp; ++i) {
    if (i >= 2 * n) continue;
    float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int st = 0; st < U::kSteps; ++st) {
      const uint32_t lo = Word(w2r[(2 * i) * U::kRowChunks + st / 4], st % 4);
      const uint32_t hi = Word(w2r[(2 * i + 1) * U::kRowChunks + st / 4], st % 4);
      const uint32_t af[4] = {E4M3x2ToHalf2(lo & 0xffffu), E4M3x2ToHalf2(hi & 0xffffu), E4M3x2ToHalf2(lo >> 16),
                              E4M3x2ToHalf2(hi >> 16)};
      Mma16816<__half>(d, af, b[st][0], b[st][1]);
    }
    if (q != 0) continue;  // column 0: d[0] row g, d[2] row g + 8
    const int64_t h = h0 + 16 * (warp + 4 * i) + g;
    for (uint64_t m = pairs; m != 0; m &= m - 1) {
      float* dst = a.partials + (static_cast<int64_t>(__ffsll(static_cast<long long>(m)) - 1) * p.col_blocks + cb) * H + h;
      dst[0] = d[0];
      dst[8] = d[2];
    }
  }
}

// The sum: a CTA per kSumCols columns of H. Each (pair, chunk of kSumChunk blocks, 4 columns) adds its blocks in
// order (its loads issued together), each (pair, column) its chunks in order, scaled and weighted, then each column
// the slots in order (+ shared). Pairs of other ranks' experts contribute 0.
constexpr int kSumCols = 32;
constexpr int kSumThreads = 256;
constexpr int kSumChunk = 8;

__host__ __device__ int SumChunks(int col_blocks) { return (col_blocks + kSumChunk - 1) / kSumChunk; }

__global__ void __launch_bounds__(kSumThreads) OneTokenSumKernel(const __grid_constant__ Params p) {
  extern __shared__ float4 part_s[];  // [pair][chunk][kSumCols / 4]
  __shared__ float pair_ts[kMaxPairs], pair_w[kMaxPairs];
  __shared__ bool local[kMaxPairs];
  const OneTokenMoeArgs& a = p.a;
  const int tid = threadIdx.x, P = a.top_k, cbs = p.col_blocks, chunks = SumChunks(cbs);
  const int64_t H = a.hidden;
  const int h0 = blockIdx.x * kSumCols;
  // inputs of the op, complete once the unit kernel (which waited for its predecessors) has started us
  for (int i = tid; i < P; i += kSumThreads) {
    const int id = a.ids[i], e = id - a.expert_offset;
    local[i] = id >= 0 && e >= 0 && e < a.experts;
    pair_ts[i] = local[i] ? __fmul_rn(*a.a2_scale, a.w2_scale[e]) : 0.f;
    pair_w[i] = a.weights[i];
  }
  __syncthreads();
  PdlWait();  // the partials come from the unit kernel
  PdlLaunchDependents();
  constexpr int kQuads = kSumCols / 4;
  for (int it = tid; it < P * chunks * kQuads; it += kSumThreads) {
    const int pc = it / kQuads, pair = pc / chunks, ch = pc % chunks;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (local[pair]) {
      const int b0 = ch * kSumChunk, nb = min(kSumChunk, cbs - b0);
      const float4* src =
          reinterpret_cast<const float4*>(a.partials + (static_cast<int64_t>(pair) * cbs + b0) * H + h0) + it % kQuads;
      float4 x[kSumChunk];
#pragma unroll
      for (int k = 0; k < kSumChunk; ++k) x[k] = k < nb ? __ldcg(src + k * H / 4) : make_float4(0.f, 0.f, 0.f, 0.f);
      v = x[0];
#pragma unroll
      for (int k = 1; k < kSumChunk; ++k) {
        if (k < nb) {
          v.x = __fadd_rn(v.x, x[k].x), v.y = __fadd_rn(v.y, x[k].y);
          v.z = __fadd_rn(v.z, x[k].z), v.w = __fadd_rn(v.w, x[k].w);
        }
      }
    }
    part_s[it] = v;
  }
  __syncthreads();
  float* part = reinterpret_cast<float*>(part_s);
  for (int it = tid; it < P * kSumCols; it += kSumThreads) {
    const int pair = it / kSumCols, col = it % kSumCols;
    if (!local[pair]) continue;
    float* row = part + static_cast<int64_t>(pair) * chunks * kSumCols + col;
    float v = row[0];
    for (int ch = 1; ch < chunks; ++ch) v = __fadd_rn(v, row[ch * kSumCols]);
    row[0] = __fmul_rn(pair_w[pair], __fmul_rn(v, pair_ts[pair]));
  }
  __syncthreads();
  if (tid < kSumCols) {
    float y = 0.f;
    for (int pair = 0; pair < P; ++pair) {
      if (local[pair]) y = __fadd_rn(y, part[static_cast<int64_t>(pair) * chunks * kSumCols + tid]);
    }
    if (a.shared != nullptr) y = __fadd_rn(y, __bfloat162float(a.shared[h0 + tid]));
    a.out[h0 + tid] = __float2bfloat16_rn(y);
  }
}

int SumSmemBytes(int top_k, int col_blocks) { return top_k * SumChunks(col_blocks) * kSumCols * 4; }

int MaxGroupsFor(int w) { return w == 128 ? Unit<128>::kMaxGroups : Unit<64>::kMaxGroups; }

// Launches the unit kernel, or with `resident` only says how many of its CTAs the device holds at once.
template <int W>
Status LaunchUnits(const Params& p, cudaStream_t stream, int64_t* resident = nullptr) {
  using U = Unit<W>;
  const OneTokenMoeArgs& a = p.a;
  const int groups = a.hidden / kGroupK;
  const int per_rank = (groups + p.cluster - 1) / p.cluster;
  const int smem = per_rank * (U::kGroupBytes + kBGroupBytes) + 1024;  // + the 1024-byte alignment
  constexpr int kMaxSmem = U::kMaxGroups * (U::kGroupBytes + kBGroupBytes) + 1024;
  // + its static shared memory (<= 2.5 KB) and the 1 KB the SM reserves per CTA
  static_assert(kOneTokenMoeCtasPerSm * (kMaxSmem + 3584) <= 228 * 1024, "CTAs per SM");
  auto* kernel = a.x_fp8 ? &OneTokenUnitKernel<W, true> : &OneTokenUnitKernel<W, false>;
  HPC_RETURN_IF_ERROR(AllowSmem(reinterpret_cast<const void*>(kernel), kMaxSmem));
  const int64_t ctas = OneTokenMoeCtas(a.top_k, a.hidden, a.inter_size);
  if (resident != nullptr) {  // the one-wave question: clusters as they pack into the GPCs, not CTAs per SM
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(static_cast<unsigned>(ctas));
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = smem;
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = static_cast<unsigned>(p.cluster), attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
    config.attrs = &attr;
    config.numAttrs = 1;
    int clusters = 0;
    HPC_RETURN_IF_ERROR(CudaStatus(cudaOccupancyMaxActiveClusters(&clusters, kernel, &config),
                                   "fused_moe: one-token cluster occupancy"));
    *resident = static_cast<int64_t>(clusters) * p.cluster;
    return Status::Ok();
  }
  return LaunchCluster("fused_moe one-token unit launch", kernel, dim3(static_cast<unsigned>(ctas)), dim3(kThreads),
                       smem, static_cast<unsigned>(p.cluster), stream, p);
}

}  // namespace

bool OneTokenMoeFits(int tokens, int top_k, int hidden, int inter_size) {
  const int w = OneTokenUnitCols(hidden, inter_size);
  return tokens == 1 && top_k >= 1 && top_k <= kMaxPairs && w > 0 &&
         ClusterFor(hidden / kGroupK, MaxGroupsFor(w)) <= kMaxCluster && hidden % kSumCols == 0 &&
         SumSmemBytes(top_k, inter_size / w) <= 32 * 1024;
}

int64_t OneTokenMoeCtas(int top_k, int hidden, int inter_size) {
  const int w = OneTokenUnitCols(hidden, inter_size);
  if (w == 0) return 0;
  return static_cast<int64_t>(top_k) * (inter_size / w) * ClusterFor(hidden / kGroupK, MaxGroupsFor(w));
}

bool OneTokenMoeOneWave(int top_k, int hidden, int inter_size, bool x_fp8, int device) {
  // per (device, shape): the occupancy query is host work the per-call path should not repeat
  static std::mutex mu;
  static std::map<std::tuple<int, int, int, int, bool>, bool> known;
  const auto key = std::make_tuple(device, top_k, hidden, inter_size, x_fp8);
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = known.find(key); it != known.end()) return it->second;
  bool fits = false;
  if (OneTokenMoeFits(1, top_k, hidden, inter_size)) {
    OneTokenMoeArgs a = {};
    a.x_fp8 = x_fp8, a.top_k = top_k, a.hidden = hidden, a.inter_size = inter_size;
    const int w = OneTokenUnitCols(hidden, inter_size);
    const Params p = {a, ClusterFor(hidden / kGroupK, MaxGroupsFor(w)), inter_size / w};
    int64_t resident = 0;
    const Status st = w == 128 ? LaunchUnits<128>(p, nullptr, &resident) : LaunchUnits<64>(p, nullptr, &resident);
    fits = st.ok() && OneTokenMoeCtas(top_k, hidden, inter_size) <= resident;
  }
  known.emplace(key, fits);
  return fits;
}

Status LaunchOneTokenMoe(const OneTokenMoeArgs& a, cudaStream_t stream) {
  if (!OneTokenMoeFits(1, a.top_k, a.hidden, a.inter_size) || a.partials == nullptr) {
    return Status::Internal("hpc_xla: fused_moe: the one-token layer was asked for shapes it does not take");
  }
  const int w = OneTokenUnitCols(a.hidden, a.inter_size);
  const Params p = {a, ClusterFor(a.hidden / kGroupK, MaxGroupsFor(w)), a.inter_size / w};
  HPC_RETURN_IF_ERROR(w == 128 ? LaunchUnits<128>(p, stream) : LaunchUnits<64>(p, stream));
  HPC_RETURN_IF_ERROR(Launch("fused_moe one-token sum launch", &OneTokenSumKernel,
                             dim3(static_cast<unsigned>(a.hidden / kSumCols)), dim3(kSumThreads),
                             SumSmemBytes(a.top_k, p.col_blocks), stream, p));
  g_launches.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

}  // namespace hpc::moe

namespace hpc {
int64_t FusedMoeFusedDownLaunches() { return moe::g_launches.load(std::memory_order_relaxed); }
}  // namespace hpc
