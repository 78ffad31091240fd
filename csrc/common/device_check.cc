#include "csrc/common/device_check.h"

#include <string>
#include <vector>

#include "csrc/common/check.h"

namespace hpc {

Status StreamCapturing(cudaStream_t stream, const char* what, bool* capturing) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  const cudaError_t err = cudaStreamIsCapturing(stream, &capture);
  if (err != cudaSuccess) {
    return Status::Internal(std::string(what) + ": stream query failed: " + cudaGetErrorString(err));
  }
  *capturing = capture != cudaStreamCaptureStatusNone;
  return Status::Ok();
}

Status CopyForCheck(cudaStream_t stream, const char* what, const void* src, void* dst, size_t bytes, bool* skipped) {
  HPC_RETURN_IF_ERROR(StreamCapturing(stream, what, skipped));
  if (*skipped) return Status::Ok();
  cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) return Status::Internal(std::string(what) + ": " + cudaGetErrorString(err));
  return Status::Ok();
}

Status CheckScalesOnDevice(const char* op, const char* name, const TensorView& scale, cudaStream_t stream,
                           bool zero_ok) {
  if (!scale.present() || scale.numel() == 0) return Status::Ok();
  const std::string what = std::string(op) + " check";
  std::vector<float> host(static_cast<size_t>(scale.numel()));
  bool skipped = false;
  HPC_RETURN_IF_ERROR(CopyForCheck(stream, what.c_str(), scale.data, host.data(), host.size() * sizeof(float),
                                   &skipped));
  if (skipped) return Status::Ok();
  TensorView view = scale;
  view.data = host.data();
  view.device = DeviceKind::kCpu;
  Status s = ArgCheck(op).PositiveFiniteScales(name, view, zero_ok);
  if (s.ok()) return s;
  return Status::InvalidArgument(s.message() + " (HPC_XLA_CHECK)");
}

}  // namespace hpc
