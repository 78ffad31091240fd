// Python tensors -> csrc TensorViews for one call. Fast path: the producer's DLPack C exchange API (torch
// >= 2.11), which fills a DLTensor with no Python-level __dlpack__ call and also yields the current CUDA stream.
// Fallback: any object with __dlpack__ (numpy, jax, cupy) through nb::ndarray, kept alive for the call.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <vector>

#include "csrc/common/status.h"
#include "csrc/common/tensor_view.h"

typedef struct CUstream_st* cudaStream_t;

namespace hpc::bridge {

namespace nb = nanobind;

class TensorArgs {
 public:
  // None -> an absent view (rank -1). Raises TypeError naming `name` for objects that are not tensors, ValueError
  // for tensors of a dtype, rank or device we do not take.
  TensorView Get(const char* name, nb::handle obj);
  // Stream to launch on for CUDA `device`: `explicit_stream` if >= 0, else the producer's current stream (via
  // the exchange API), else the legacy default stream.
  cudaStream_t Stream(int device, int64_t explicit_stream) const;

 private:
  const void* exchange_api_ = nullptr;
  std::vector<nb::ndarray<>> keep_alive_;
};

// Makes `device` current for the scope (restoring the previous one) so launches land on the tensors' GPU
// when torch's current device differs.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();

 private:
  int previous_ = -1;
};

// Raises the Python exception matching a failed csrc Status: ValueError (invalid argument),
// NotImplementedError (unsupported GPU), RuntimeError (internal/CUDA error).
void ThrowIfError(const Status& status);

// Runs an op on the device of `anchor` (one of its operands): the CUDA launcher on the framework's current
// stream with that GPU current, or the CPU reference with the GIL released. Raises on a failed Status.
template <typename Args>
void RunOp(const TensorView& anchor, const TensorArgs& tensors, int64_t stream,
           Status (*cuda)(const Args&, cudaStream_t), Status (*cpu)(const Args&), const Args& args) {
  if (anchor.present() && anchor.device == DeviceKind::kCuda) {
    DeviceGuard guard(anchor.device_id);
    ThrowIfError(cuda(args, tensors.Stream(anchor.device_id, stream)));
  } else {
    nb::gil_scoped_release release;
    ThrowIfError(cpu(args));
  }
}

}  // namespace hpc::bridge
