// The one binary: nanobind module `hpc_xla._hpc_xla`. It carries the torch/DLPack entry points of every op and
// hands the XLA FFI handler capsules to hpc_xla.jax. It links no framework library.
#include <cuda_runtime.h>
#include <nanobind/nanobind.h>

#include <string>

#include "ffi/targets.h"
#include "torch_bridge/bindings.h"
#include "torch_bridge/tensor_args.h"
#include "xla/ffi/api/c_api.h"

namespace hpc::bridge {
namespace {

nb::capsule HandlerCapsule(XLA_FFI_Handler* handler) {
  return nb::capsule(reinterpret_cast<void*>(handler));  // unnamed, as jax.ffi.register_ffi_target expects
}

// {"hpc_xla_rope_norm": {"CUDA": capsule, "cpu": capsule}, ...}
nb::dict FfiTargets() {
  nb::dict out;
  for (const auto& t : ffi_glue::FfiTargets()) {
    nb::dict platforms;
    platforms["CUDA"] = HandlerCapsule(t.cuda);
    platforms["cpu"] = HandlerCapsule(t.cpu);
    out[(std::string("hpc_xla_") + t.name).c_str()] = platforms;
  }
  return out;
}

nb::dict BuildInfo() {
  nb::dict info;
  info["cuda_runtime_version"] = CUDART_VERSION;
  info["xla_ffi_api_version"] = nb::make_tuple(XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR);
  info["cuda_archs"] = nb::make_tuple("sm_90a");
  return info;
}

// Converts the given tensors and asks for the stream, launching nothing: measures the bridge's own per-call
// cost (bench reports it next to a real op's host time).
int BridgeProbe(nb::args tensors) {
  TensorArgs t;
  int device = -1;
  int n = 0;
  for (nb::handle h : tensors) {
    const TensorView v = t.Get("tensor", h);
    if (v.device == DeviceKind::kCuda) device = v.device_id;
    ++n;
  }
  if (device >= 0) (void)t.Stream(device, -1);
  return n;
}

}  // namespace
}  // namespace hpc::bridge

NB_MODULE(_hpc_xla, m) {
  namespace nb = nanobind;
  m.doc() = "hpc_xla: Hopper attention/MoE kernels for JAX (XLA FFI) and torch (DLPack). Use hpc_xla.jax / hpc_xla.torch.";
  m.def("ffi_targets", &hpc::bridge::FfiTargets, "XLA FFI handler capsules: {target: {platform: capsule}}.");
  m.def("build_info", &hpc::bridge::BuildInfo);
  m.def("handler_capture_counts", [] {
    const auto c = hpc::ffi_glue::HandlerCaptureCounts();
    return nb::make_tuple(c.calls, c.captured);
  }, "(calls, captured): XLA FFI CUDA handler calls and how many ran under stream capture (HPC_XLA_COUNT_CAPTURED=1).");
  m.def("bridge_probe", &hpc::bridge::BridgeProbe, "Convert the tensors and fetch the stream; launch nothing.");
  hpc::bridge::BindRopeNorm(m);
  hpc::bridge::BindAttention(m);
  hpc::bridge::BindMoe(m);
}
