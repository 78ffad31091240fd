// Shared by the dev probes (tools/stream_probe.cu, tools/ring_probe.cu, tools/launch_probe.cu,
// tools/decode_ring_probe.cu, tools/strided_read_probe.cu): error checks, an mbarrier wait,
// the time of one repetition of some launches inside a CUDA graph (the way the benchmarks time our ops), the
// copy ceiling as the benchmarks measure it, and the streaming probes' setup.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                     \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

// Spins until the shared-memory mbarrier at `bar` completes the phase of `parity` (the bulk-copy rings' full barriers).
__device__ __forceinline__ void MbarWaitParity(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile("{\n.reg .pred q;\nmbarrier.try_wait.parity.shared::cta.b64 q, [%1], %2;\nselp.u32 %0, 1, 0, q;\n}\n"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
  }
}

// Captures `reps` calls of launch(i, stream) into one graph, replays it `replays` times after one warm-up, and
// returns the median microseconds per call.
template <typename F>
double GraphMicrosPerCall(F&& launch, int reps = 20, int replays = 9) {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < reps; ++i) launch(i, s);
  CHECK(cudaStreamEndCapture(s, &g));
  CHECK(cudaGraphInstantiate(&ge, g, 0));
  CHECK(cudaGraphLaunch(ge, s));
  CHECK(cudaStreamSynchronize(s));
  std::vector<float> t;
  for (int r = 0; r < replays; ++r) {
    CHECK(cudaEventRecord(e0, s));
    CHECK(cudaGraphLaunch(ge, s));
    CHECK(cudaEventRecord(e1, s));
    CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(ms * 1e3f / reps);
  }
  CHECK(cudaGetLastError());
  CHECK(cudaGraphExecDestroy(ge));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  CHECK(cudaStreamDestroy(s));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// The copy ceiling's kernel: a grid-stride loop of 16-byte loads and stores.
__global__ void CopyKernel(const uint4* src, uint4* dst, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = src[i];
  }
}

// The copy ceiling in TB/s (read + write bytes / time): `bytes` device to device by an SM copy kernel, as torch's
// copy_ in the benchmarks' ceiling (hpc_xla/bench/timing.py). Not a cudaMemcpy node: captured in a graph it may run
// on the copy engines (2.44 TB/s on an H100 where the benchmark reads 3.01, s45c).
inline double SmCopyCeilingTBs(int sms, int64_t bytes = int64_t{2} << 30) {
  uint8_t *src = nullptr, *dst = nullptr;
  CHECK(cudaMalloc(&src, bytes));
  CHECK(cudaMalloc(&dst, bytes));
  CHECK(cudaMemset(src, 3, bytes));
  const double us = GraphMicrosPerCall(
      [&](int, cudaStream_t s) {
        CopyKernel<<<8 * sms, 256, 0, s>>>(reinterpret_cast<const uint4*>(src), reinterpret_cast<uint4*>(dst),
                                           bytes / 16);
      },
      4, 5);
  CHECK(cudaFree(src));
  CHECK(cudaFree(dst));
  return 2.0 * bytes / us * 1e-6;
}

// The device's name and SM count, and its SM copy ceiling (the memory probes' denominator), printed as the
// first lines of their output; returns the SM count and sets *ceiling_tbs (when given).
inline int PrintDeviceAndCopyCeiling(double* ceiling_tbs = nullptr) {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs\n", prop.name, sms);
  const double ceiling = SmCopyCeilingTBs(sms);  // 2 GB device to device on the SMs
  std::printf("copy ceiling %.2f TB/s (read + write)\n", ceiling);
  if (ceiling_tbs != nullptr) *ceiling_tbs = ceiling;
  return sms;
}

// The streaming probes' setup: the SM count, and `bytes` of weights-like source (filled, so no page is lazily
// zero) that each launch reads a fresh slice of (cold L2), plus a small sink for results the compiler must keep.
struct ProbeSetup {
  int sms;
  int64_t buf_bytes;
  uint8_t* buf;
  uint32_t* out;
};
inline ProbeSetup SetUpStreamProbe(int64_t bytes = int64_t{4} << 30) {
  ProbeSetup p = {0, bytes, nullptr, nullptr};
  CHECK(cudaDeviceGetAttribute(&p.sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaMalloc(&p.buf, bytes));
  CHECK(cudaMemset(p.buf, 1, bytes));
  CHECK(cudaMalloc(&p.out, 1 << 20));
  return p;
}
