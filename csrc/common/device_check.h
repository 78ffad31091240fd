// HPC_XLA_CHECK=1 helpers shared by the CUDA launchers: copy small device inputs to the host (syncing the stream)
// and run the same checks the CPU path runs on them.
#pragma once

#include <cuda_runtime.h>

#include "csrc/common/status.h"
#include "csrc/common/tensor_view.h"

namespace hpc {

// Whether `stream` is being captured into a CUDA graph (vLLM, torch and XLA capture their steps): the checks copy to
// the host and sync, which a capture forbids, so they are skipped (Ok) while one is in progress.
Status StreamCapturing(cudaStream_t stream, const char* what, bool* capturing);

// `bytes` of device memory at `src` copied to the host buffer `dst` after the work queued on `stream` (synced), for
// a check: *skipped (and nothing copied) while the stream is being captured. `what` prefixes CUDA errors.
Status CopyForCheck(cudaStream_t stream, const char* what, const void* src, void* dst, size_t bytes, bool* skipped);

// The float32 scale tensor `scale` (on the GPU, contiguous; absent is fine) checked like
// ArgCheck::PositiveFiniteScales: every element finite and > 0 (>= 0 with zero_ok). Syncs `stream`; skipped (Ok)
// while the stream is being captured.
Status CheckScalesOnDevice(const char* op, const char* name, const TensorView& scale, cudaStream_t stream,
                           bool zero_ok = false);

}  // namespace hpc
