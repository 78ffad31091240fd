// What does a layer of two kernels that do (almost) nothing cost in a CUDA graph on the H200? (dev tool, GPU only;
// session 14). A fused_moe call at T=1 whose token hits no local expert (Hy3-EP8) measured 13.7 us per call in the
// benchmark graph; ncu put its two kernels at 4.5 (gate-up) and 4.4 us (down) alone. This separates the floor of
// the launch configuration (grid, block, dynamic shared memory, programmatic dependent launch) from the kernels'
// own prologues: each row is a graph of 20 (first, second) pairs, the second launched with PDL or not, and both
// kernels either exit at once or run a prologue like the stream kernels' (one global load of 8 ids, a shared-memory
// flag clear and a block-wide sum).
//   nvcc -gencode arch=compute_90a,code=sm_90a -O3 -o launch_probe tools/launch_probe.cu && ./launch_probe
#include "probe_graph.cuh"

// mode 0: exit at once; 1: PDL wait, read ids, clear 1024 shared flags, block sum, one store per CTA
__global__ void Probe(const int* ids, int* out, int mode) {
  extern __shared__ int dyn[];
  if (mode == 0) return;
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
  __shared__ int flags[1024];
  for (int i = threadIdx.x; i < 1024; i += blockDim.x) flags[i] = 0;
  __syncthreads();
  if (threadIdx.x < 8) flags[ids[threadIdx.x] & 1023] = 1;
  __syncthreads();
  int s = 0;
  for (int i = threadIdx.x; i < 1024; i += blockDim.x) s += flags[i];
  s = __syncthreads_count(s > 0);
  if (threadIdx.x == 0 && s < 0) out[blockIdx.x] = s + dyn[0];  // never true: keeps the work
}

struct Kern {
  int ctas, threads, smem;
};

cudaError_t LaunchOne(const Kern& k, bool pdl, int mode, const int* ids, int* out, cudaStream_t s) {
  cudaLaunchConfig_t c = {};
  c.gridDim = dim3(k.ctas);
  c.blockDim = dim3(k.threads);
  c.dynamicSmemBytes = k.smem;
  c.stream = s;
  cudaLaunchAttribute a[1];
  a[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  a[0].val.programmaticStreamSerializationAllowed = 1;
  c.attrs = a;
  c.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&c, Probe, ids, out, mode);
}

int main() {
  CHECK(cudaFuncSetAttribute(Probe, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  int *ids, *out;
  CHECK(cudaMalloc(&ids, 64 * sizeof(int)));
  CHECK(cudaMemset(ids, 0, 64 * sizeof(int)));
  CHECK(cudaMalloc(&out, 1 << 20));
  const Kern tiny = {1, 32, 0}, up = {396, 128, 49152}, down = {256, 256, 77600}, down16 = {128, 512, 153088};
  struct Row {
    const char* name;
    Kern a, b;
  };
  const std::vector<Row> rows = {
      {"1 CTA + 1 CTA", tiny, tiny},
      {"gate-up grid (396x128, 48 KB) + 1 CTA", up, tiny},
      {"1 CTA + down grid (256x256, 76 KB)", tiny, down},
      {"gate-up grid + down grid (256x256, 76 KB)", up, down},
      {"gate-up grid + down grid (128x512, 150 KB)", up, down16},
      {"gate-up grid, no shared memory + down, none", {396, 128, 0}, {256, 256, 0}},
  };
  std::printf("%-48s %-8s %-5s %9s\n", "pair (first + second)", "kernels", "PDL", "us/pair");
  for (const Row& r : rows) {
    for (int mode = 0; mode < 2; ++mode) {
      for (int pdl = 0; pdl < 2; ++pdl) {
        const double us = GraphMicrosPerCall([&](int, cudaStream_t st) {
          CHECK(LaunchOne(r.a, pdl, mode, ids, out, st));
          CHECK(LaunchOne(r.b, pdl, mode, ids, out, st));
        });
        std::printf("%-48s %-8s %-5s %9.2f\n", r.name, mode ? "prologue" : "empty", pdl ? "yes" : "no", us);
      }
    }
  }
  return 0;
}
