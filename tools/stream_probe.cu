// How fast can a one-wave grid pull a few tens of MB of weights into shared memory on the H200, and does the copy
// mechanism matter? (dev tool, GPU only; session 14). The decode-regime MoE kernels stream ~25 MB per stage in one
// wave of CTAs that each copy 64 KB and then compute; ncu put both the mma.sync and the wgmma gate-up at ~2.1 TB/s.
// This times the copy alone, three ways, over weight-like layouts, on cold L2 (every launch reads a fresh slice of
// a 4 GB buffer):
//   cp.async   LDGSTS 16 B per thread, every copy of the CTA in flight, one wait
//   bulk       cp.async.bulk (the copy engine, 1-D, one per row) completing on an mbarrier, issued by one thread
//   ldg        16-byte loads into registers, 8 in flight per thread (no shared memory)
//   nvcc -gencode arch=compute_90a,code=sm_90a -O3 -o stream_probe tools/stream_probe.cu && ./stream_probe
#include <cstdint>

#include "probe_graph.cuh"

struct Layout {  // per CTA: `rows` rows of `row_bytes`, `stride` apart; CTAs `cta_span` bytes apart
  int rows, row_bytes;
  int64_t stride, cta_span;
};

__device__ __forceinline__ uint32_t Smem(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

__global__ void CpAsyncKernel(const uint8_t* src, Layout l, uint32_t* out) {
  extern __shared__ __align__(128) uint8_t smem[];
  const uint8_t* base = src + blockIdx.x * l.cta_span;
  const int chunks_per_row = l.row_bytes / 16, total = l.rows * chunks_per_row;
  for (int i = threadIdx.x; i < total; i += blockDim.x) {
    const int r = i / chunks_per_row, c = i % chunks_per_row;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(Smem(smem + i * 16)),
                 "l"(base + r * l.stride + c * 16));
  }
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) out[blockIdx.x] = reinterpret_cast<const uint32_t*>(smem)[blockIdx.x % 64];
}

__global__ void BulkKernel(const uint8_t* src, Layout l, uint32_t* out) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t bar;
  const uint8_t* base = src + blockIdx.x * l.cta_span;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(Smem(&bar)));
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(Smem(&bar)),
                 "r"(l.rows * l.row_bytes));
    for (int r = 0; r < l.rows; ++r) {
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
              Smem(smem + r * l.row_bytes)),
          "l"(base + r * l.stride), "r"(l.row_bytes), "r"(Smem(&bar))
          : "memory");
    }
  }
  __syncthreads();
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(Smem(&bar))
        : "memory");
  }
  if (threadIdx.x == 0) out[blockIdx.x] = reinterpret_cast<const uint32_t*>(smem)[blockIdx.x % 64];
}

__global__ void LdgKernel(const uint8_t* src, Layout l, uint32_t* out) {
  const uint8_t* base = src + blockIdx.x * l.cta_span;
  const int chunks_per_row = l.row_bytes / 16, total = l.rows * chunks_per_row;
  uint32_t acc = 0;
  for (int i0 = threadIdx.x; i0 < total; i0 += 8 * blockDim.x) {
    uint4 v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int i = i0 + u * blockDim.x;
      if (i < total) {
        const int r = i / chunks_per_row, c = i % chunks_per_row;
        v[u] = __ldcs(reinterpret_cast<const uint4*>(base + r * l.stride + c * 16));
      } else {
        v[u] = make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < 8; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x12345678u) out[blockIdx.x] = acc;  // keeps the loads; practically never stores
}

int main() {
  const ProbeSetup ps = SetUpStreamProbe();
  for (auto k : {(const void*)CpAsyncKernel, (const void*)BulkKernel}) {
    CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  }
  struct Case {
    const char* name;
    Layout l;
    int ctas_per_sm;
  };
  const std::vector<Case> cases = {
      {"64 KB contiguous/CTA", {8, 8192, 8192, 65536}, 3},
      {"gate-up: 64 rows x 1 KB, stride 2 KB", {64, 1024, 2048, 64 * 2048}, 3},
      {"gate-up: 64 rows x 1 KB, stride 2 KB, 2/SM", {64, 1024, 2048, 64 * 2048}, 2},
      {"gate-up: 64 rows x 2 KB (whole rows)", {64, 2048, 2048, 64 * 2048}, 1},
      {"down: 64 rows x 768 B contiguous", {64, 768, 768, 64 * 768}, 4},
      {"32 KB contiguous/CTA, 6/SM", {4, 8192, 8192, 32768}, 6},
      {"16 KB contiguous/CTA, 12/SM", {2, 8192, 8192, 16384}, 12},
  };
  std::printf("%-44s %-9s %6s %8s %9s %9s\n", "layout", "copy", "CTAs", "MB", "us/launch", "TB/s");
  for (const Case& c : cases) {
    for (int waves : {1, 4}) {
      const int ctas = c.ctas_per_sm * ps.sms * waves;
      const int64_t bytes = static_cast<int64_t>(ctas) * c.l.rows * c.l.row_bytes;
      const int64_t span = static_cast<int64_t>(ctas) * c.l.cta_span;
      const int slices = static_cast<int>(ps.buf_bytes / span);
      const int smem = c.l.rows * c.l.row_bytes;
      for (int kind = 0; kind < 3; ++kind) {
        auto launch = [&](int it, cudaStream_t s) {
          const uint8_t* src = ps.buf + (it % slices) * span;
          if (kind == 0) CpAsyncKernel<<<ctas, 128, smem, s>>>(src, c.l, ps.out);
          if (kind == 1) BulkKernel<<<ctas, 128, smem, s>>>(src, c.l, ps.out);
          if (kind == 2) LdgKernel<<<ctas, 128, 0, s>>>(src, c.l, ps.out);
        };
        // 20 launches in one graph, each on its own cold slice
        const double us = GraphMicrosPerCall(launch, 20, 7);
        std::printf("%-44s %-9s %6d %8.1f %9.2f %9.2f\n", c.name, kind == 0 ? "cp.async" : kind == 1 ? "bulk" : "ldg",
                    ctas, bytes / 1e6, us, bytes / us / 1e6);
      }
    }
  }
  return 0;
}
