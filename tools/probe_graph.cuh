// Shared by the dev probes (tools/stream_probe.cu, tools/ring_probe.cu, tools/launch_probe.cu,
// tools/decode_ring_probe.cu): error checks, an mbarrier wait,
// the time of one repetition of some launches inside a CUDA graph (the way the benchmarks time our ops), and the
// streaming probes' setup.
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
