// How fast does DRAM deliver a weight matrix read in column blocks? (dev tool, GPU only; session 46, issue #4.)
// Experiment 63 fused the single-token MoE down into the gate-up CTAs: the CTA of a unit (32 columns of I) read
// w2[e][:, 32 columns] -- 32 bytes of every 768-byte row (w2 is [E, H, I] e4m3, vLLM's layout) -- and its gate-up
// kernel ran at 1.42 TB/s (ncu, H100, DRAM 42%) against 2.2+ for the same kernel without those reads. Before a
// design with wider units, this measures the pattern alone: a [rows, 768] byte matrix (256 MB, past L2) read by CTAs
// that each take one column block of `piece` bytes (32 / 64 / 128 / 256 / 768 = whole rows) over a run of rows,
// 16-byte loads (ld.global.nc.L1::no_allocate) issued 8 deep per thread, in a CUDA graph of 20 launches that
// alternate between two 256 MB sets (no L2 reuse across launches). The copy ceiling (read + write bytes,
// an SM copy kernel: probe_graph.cuh) is printed as the reference.
//   nvcc -std=c++17 -Itools -gencode arch=compute_90a,code=sm_90a -O3 -o strided_read_probe tools/strided_read_probe.cu
//   ./strided_read_probe
#include "probe_graph.cuh"

constexpr int kRowBytes = 768;  // Qwen3-30B's I in e4m3
constexpr int kThreads = 256;
constexpr int kDepth = 8;       // 16-byte loads a thread keeps in flight

__device__ __forceinline__ uint4 LoadNa(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// A CTA: one column block (piece bytes wide) over rows [r0, r0 + rows_per_cta). Thread t reads 16-byte chunk t % chunks of rows t / chunks, t / chunks + kThreads / chunks, ...
// order 0: the column blocks of a row run are neighbouring CTAs (launched together, as experiment 63's units of one
// expert were); order 1: a block's row runs are the neighbours (the other blocks of a row come a grid later).
__global__ void __launch_bounds__(kThreads) StridedRead(const uint8_t* base, int piece, int rows_per_cta, int order,
                                                      unsigned* sink) {
  const int blocks = kRowBytes / piece, chunks = piece / 16;
  const int runs = static_cast<int>(gridDim.x) / blocks;
  const int cb = order == 0 ? blockIdx.x % blocks : blockIdx.x / runs;
  const int64_t r0 = static_cast<int64_t>(order == 0 ? blockIdx.x / blocks : blockIdx.x % runs) * rows_per_cta;
  const int row_step = kThreads / chunks;
  const uint8_t* p = base + r0 * kRowBytes + cb * piece + (threadIdx.x % chunks) * 16;
  unsigned acc = 0;
  for (int r = threadIdx.x / chunks; r < rows_per_cta; r += kDepth * row_step) {
    uint4 v[kDepth];
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      const int rr = r + d * row_step;
      v[d] = rr < rows_per_cta ? LoadNa(p + static_cast<int64_t>(rr) * kRowBytes) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int d = 0; d < kDepth; ++d) acc ^= v[d].x ^ v[d].y ^ v[d].z ^ v[d].w;
  }
  if (acc == 0x12345678u) *sink = acc;  // keeps the loads
}

int main() {
  const int sms = PrintDeviceAndCopyCeiling();  // the ceiling is printed for the reader, not used below
  constexpr int64_t kSetBytes = 256ll << 20;
  constexpr int kSets = 2;
  uint8_t* buf;
  unsigned* sink;
  CHECK(cudaMalloc(&buf, kSets * kSetBytes));
  CHECK(cudaMalloc(&sink, 4));
  CHECK(cudaMemset(buf, 1, kSets * kSetBytes));
  const int64_t rows = kSetBytes / kRowBytes;
  std::printf("piece  order  CTAs/SM  rows/CTA     us     TB/s\n");
  for (int piece : {32, 64, 128, 256, 768}) {
    for (int order : {0, 1}) {
      for (int rows_per_cta : {1024, 4096}) {
        const int blocks = kRowBytes / piece;
        const int64_t ctas = rows / rows_per_cta * blocks;
        const int64_t bytes = rows / rows_per_cta * rows_per_cta * kRowBytes;
        const double us = GraphMicrosPerCall([&](int i, cudaStream_t s) {
          StridedRead<<<static_cast<unsigned>(ctas), kThreads, 0, s>>>(buf + (i % kSets) * kSetBytes, piece,
                                                                        rows_per_cta, order, sink);
        });
        std::printf("%5d  %5d  %7lld  %8d  %7.1f  %6.2f\n", piece, order, static_cast<long long>(ctas / sms),
                    rows_per_cta, us, bytes / us / 1e6);
      }
    }
  }
  CHECK(cudaGetLastError());
  return 0;
}
