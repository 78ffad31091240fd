// Where a moe_route call's latency goes, phase by phase (dev tool, GPU only; session 58, issue #4 item 1).
// s58a measured a routing call in a CUDA-graph chain (bench/calls/route_chain.py, H100): ungrouped E = 256 k = 8
// 4.2 us, DeepSeek-V3's grouped routing (E = 256, 8 groups, 4 kept, sigmoid, correction bias) 7.5 -- and a count of
// its extra work (sigmoid, bias loads, the group top-two, 4 group rounds) explains about a third of the +3.3 us.
// Experiment 88 put the sigmoid / select passes' loads in flight together and gained ~0.1. Before another guess,
// this compiles route.cu's kernel with its phase hooks on (HPC_ROUTE_STAMP: thread 0 of block 0, i.e. token 0's
// warp, adds %clock64 at each phase boundary to a per-phase sum) and replays a graph of its launches (route.cu's
// LaunchFor: PDL on unless HPC_XLA_PDL=0, as in route_chain.py):
//   wait    kernel entry -> past griddepcontrol.wait and the token check (the PDL link's wait)
//   logits  the logits' global loads and the warp max
//   score   the softmax (exp, sum) or sigmoid pass
//   select  the select pass (score / sum, + correction bias, order keys)
//   groups  grouped only: group ranks, the kept groups, the lanes' masks
//   topk    the top-k rounds
//   store   weights / ids out
// Cases: T = 1, f32 logits; ungrouped softmax E = 32 k = 1 / 128 / 256 / 512 k = 8, ungrouped sigmoid + bias
// E = 256 (sigmoid and bias without the grouping), and the grouped DeepSeek-V3 case. Cycles are the SM's clock
// (convert at the card's clock; the table prints us at the reported max clock too). Also per call: the graph's
// time (compare route_chain.py's rows; HPC_XLA_PDL=0 for its PDL-off ones).
//   nvcc -std=c++17 -I. -gencode arch=compute_90a,code=sm_90a -O3 -o route_phase_probe tools/route_phase_probe.cu \
//     csrc/moe/route_validate.cc csrc/common/arch.cc csrc/common/check.cc csrc/common/tensor_view.cc
//   ./route_phase_probe
// Built again with -DROUTE_PROBE_NO_STAMPS (phases all 0), its graph column is the hooks' overhead.
#include <cuda_runtime.h>

#include <cstdio>
#include <random>
#include <vector>

namespace route_probe {
constexpr int kPhases = 8;  // stamps 0..7
__device__ unsigned long long g_sum[kPhases];

__device__ __forceinline__ void Stamp(int phase) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    unsigned long long c;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(c)::"memory");
    atomicAdd(&g_sum[phase], c);  // absolute clocks summed: a phase is the difference of two sums (one SM a call)
  }
}
}  // namespace route_probe

#ifndef ROUTE_PROBE_NO_STAMPS  // -DROUTE_PROBE_NO_STAMPS: the same graphs without the hooks (their overhead)
#define HPC_ROUTE_STAMP(phase) ::route_probe::Stamp(phase)
#endif
#include "csrc/moe/route.cu"

namespace {

#define CHECK_CUDA(x)                                                                    \
  do {                                                                                   \
    cudaError_t err_ = (x);                                                              \
    if (err_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(err_)); \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

struct Case {
  const char* name;
  int experts, top_k, groups, kept;
  bool sigmoid, bias;
};

constexpr int kCallsPerGraph = 100;
constexpr int kReplays = 20;

void Run(const Case& c, double clock_mhz) {
  const int tokens = 1;
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> logits(static_cast<size_t>(tokens) * c.experts), bias(c.experts);
  for (float& v : logits) v = normal(rng);
  for (float& v : bias) v = 0.1f * normal(rng);
  float *d_logits, *d_bias, *d_weights;
  int32_t* d_ids;
  CHECK_CUDA(cudaMalloc(&d_logits, logits.size() * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&d_bias, bias.size() * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&d_weights, tokens * c.top_k * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&d_ids, tokens * c.top_k * sizeof(int32_t)));
  CHECK_CUDA(cudaMemcpy(d_logits, logits.data(), logits.size() * sizeof(float), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_bias, bias.data(), bias.size() * sizeof(float), cudaMemcpyHostToDevice));

  hpc::RouteParams p = {};
  p.logits = d_logits;
  p.logits_stride = c.experts;
  p.logits_dtype = hpc::DType::kF32;
  p.bias = c.bias ? d_bias : nullptr;
  p.bias_dtype = hpc::DType::kF32;
  p.weights = d_weights;
  p.ids = d_ids;
  p.tokens = tokens;
  p.experts = c.experts;
  p.top_k = c.top_k;
  p.num_groups = c.groups;
  p.topk_groups = c.kept;
  p.sigmoid = c.sigmoid;
  p.renormalize = true;
  p.routed_scaling = c.groups > 1 ? 2.5f : 1.f;
  const dim3 grid((tokens + hpc::kWarpsPerBlock - 1) / hpc::kWarpsPerBlock);
  const size_t smem = static_cast<size_t>(hpc::kWarpsPerBlock) * hpc::WarpScratchBytes(c.experts);

  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < kCallsPerGraph; ++i) {  // route.cu's own launch (instance choice, PDL as HPC_XLA_PDL says)
    const hpc::Status st = hpc::LaunchFor<float>(p, grid, smem, stream);
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      std::exit(1);
    }
  }
  CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 3; ++i) CHECK_CUDA(cudaGraphLaunch(exec, stream));  // warm
  CHECK_CUDA(cudaStreamSynchronize(stream));

  unsigned long long zero[route_probe::kPhases] = {};
  CHECK_CUDA(cudaMemcpyToSymbol(route_probe::g_sum, zero, sizeof(zero)));
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  CHECK_CUDA(cudaEventRecord(start, stream));
  for (int i = 0; i < kReplays; ++i) CHECK_CUDA(cudaGraphLaunch(exec, stream));
  CHECK_CUDA(cudaEventRecord(stop, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  float ms = 0.f;
  CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
  unsigned long long sum[route_probe::kPhases];
  CHECK_CUDA(cudaMemcpyFromSymbol(sum, route_probe::g_sum, sizeof(sum)));

  std::vector<int32_t> ids(c.top_k);
  CHECK_CUDA(cudaMemcpy(ids.data(), d_ids, ids.size() * sizeof(int32_t), cudaMemcpyDeviceToHost));
  const double calls = static_cast<double>(kCallsPerGraph) * kReplays;
  std::printf("%-40s %6.2f us/call |", c.name, ms * 1e3 / calls);
  for (int k = 1; k < route_probe::kPhases; ++k) std::printf(" %6.0f", (sum[k] - sum[k - 1]) / calls);
  const double total = (sum[route_probe::kPhases - 1] - sum[0]) / calls;
  std::printf(" | %6.0f cyc = %5.2f us | ids", total, total / clock_mhz);
  for (int j = 0; j < c.top_k && j < 8; ++j) std::printf(" %d", ids[j]);
  std::printf("\n");

  CHECK_CUDA(cudaGraphExecDestroy(exec));
  CHECK_CUDA(cudaGraphDestroy(graph));
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  CHECK_CUDA(cudaStreamDestroy(stream));
  CHECK_CUDA(cudaFree(d_logits));
  CHECK_CUDA(cudaFree(d_bias));
  CHECK_CUDA(cudaFree(d_weights));
  CHECK_CUDA(cudaFree(d_ids));
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  int clock_khz = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  const double clock_mhz = clock_khz / 1000.0;
  std::printf("%s, sm_%d%d, max SM clock %.0f MHz; T = 1, f32 logits, %d launches a graph x %d replays\n",
              prop.name, prop.major, prop.minor, clock_mhz, kCallsPerGraph, kReplays);
  std::printf("%-40s %15s | %6s %6s %6s %6s %6s %6s %6s | cycles a call, token 0's warp\n", "case", "graph",
              "wait", "logits", "score", "select", "groups", "topk", "store");
  const Case cases[] = {
      {"E=32 k=1 softmax", 32, 1, 0, 0, false, false},
      {"E=128 k=8 softmax (Qwen3)", 128, 8, 0, 0, false, false},
      {"E=256 k=8 softmax", 256, 8, 0, 0, false, false},
      {"E=512 k=8 softmax", 512, 8, 0, 0, false, false},
      {"E=256 k=8 sigmoid+bias ungrouped", 256, 8, 0, 0, true, true},
      {"E=256 k=8 grouped 8/4 sigmoid+bias (DSv3)", 256, 8, 8, 4, true, true},
  };
  for (const Case& c : cases) Run(c, clock_mhz);
  return 0;
}
