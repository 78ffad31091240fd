#include "torch_bridge/tensor_args.h"

#include <cuda_runtime.h>

#include <string>
#include <unordered_map>

#include "torch_bridge/dlpack_abi.h"

namespace hpc::bridge {
namespace {

DType FromDlpack(uint8_t code, uint8_t bits, uint16_t lanes) {
  if (lanes != 1) return DType::kInvalid;
  switch (code) {
    case dlpack::kFloat: return bits == 32 ? DType::kF32 : bits == 16 ? DType::kF16 : DType::kInvalid;
    case dlpack::kBfloat: return bits == 16 ? DType::kBF16 : DType::kInvalid;
    case dlpack::kFloat8_e4m3fn: return bits == 8 ? DType::kF8E4M3 : DType::kInvalid;
    case dlpack::kInt: return bits == 32 ? DType::kI32 : bits == 64 ? DType::kI64 : DType::kInvalid;
    case dlpack::kUInt: return bits == 8 ? DType::kU8 : DType::kInvalid;
    default: return DType::kInvalid;
  }
}

// Not a tensor at all: a wrong Python type (TypeError, as the README promises).
[[noreturn]] void ThrowType(const char* name, const std::string& what) {
  throw nb::type_error((std::string("hpc_xla: argument '") + name + "' " + what).c_str());
}

// A tensor whose dtype, rank or device no op takes: a wrong value, ValueError like every dtype / shape error the
// ops' validation (csrc) and the JAX face raise.
[[noreturn]] void ThrowValue(const char* name, const std::string& what) {
  throw nb::value_error((std::string("hpc_xla: argument '") + name + "' " + what).c_str());
}

// A DLPack dtype the ops do not take, by the name torch gives it (float64, int16, bool, complex64,
// float8_e5m2, ...). DLPack 1.1 numbers the narrow float kinds 7-17 (one code per format, bits implied).
std::string DlpackDtypeName(uint8_t code, uint8_t bits, uint16_t lanes) {
  static const char* const kinds[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  static const char* const narrow[] = {"float8_e3m4",  "float8_e4m3",   "float8_e4m3b11fnuz", "float8_e4m3fn",
                                       "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",    "float8_e8m0fnu",
                                       "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"};
  constexpr uint8_t kFirstNarrow = 7, kNarrowKinds = sizeof(narrow) / sizeof(narrow[0]);
  std::string n;
  if (code < sizeof(kinds) / sizeof(kinds[0])) {
    n = std::string(kinds[code]) + (code == dlpack::kBool ? "" : std::to_string(bits));
  } else if (code >= kFirstNarrow && code < kFirstNarrow + kNarrowKinds) {
    n = narrow[code - kFirstNarrow];
  } else {
    n = "DLPack code " + std::to_string(code) + " (" + std::to_string(bits) + " bits)";
  }
  return lanes == 1 ? n : n + "x" + std::to_string(lanes);
}

TensorView FromFields(const char* name, void* data, int32_t device_type, int32_t device_id, int ndim,
                      const int64_t* shape, const int64_t* strides, uint8_t code, uint8_t bits, uint16_t lanes) {
  TensorView t;
  t.dtype = FromDlpack(code, bits, lanes);
  if (t.dtype == DType::kInvalid) {
    ThrowValue(name, "has dtype " + DlpackDtypeName(code, bits, lanes) +
                        ", which hpc_xla does not take; the ops take bfloat16, float16, float32, float8_e4m3fn, "
                        "int32, int64 or uint8 where each argument's documentation says so");
  }
  if (ndim > kMaxRank) ThrowValue(name, "has rank " + std::to_string(ndim) + " (at most 6 supported)");
  if (device_type == dlpack::kCUDA) {
    t.device = DeviceKind::kCuda;
  } else if (device_type == dlpack::kCPU || device_type == dlpack::kCUDAHost) {
    t.device = DeviceKind::kCpu;
  } else {
    ThrowValue(name, "is on an unsupported device (DLPack device type " + std::to_string(device_type) + ")");
  }
  t.device_id = device_id;
  t.data = data;
  t.rank = ndim;
  int64_t compact = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.strides[i] = strides ? strides[i] : compact;
    compact *= shape[i];
  }
  return t;
}

// Exchange API of a Python type, or null. Cached per type: the lookup is an attribute fetch we do not want to
// repeat for every tensor of every call.
const dlpack::ExchangeApi* ExchangeApiOf(PyTypeObject* type) {
  static std::unordered_map<PyTypeObject*, const dlpack::ExchangeApi*> cache;
  auto it = cache.find(type);
  if (it != cache.end()) return it->second;
  const dlpack::ExchangeApi* api = nullptr;
  PyObject* cap = PyObject_GetAttrString(reinterpret_cast<PyObject*>(type), "__dlpack_c_exchange_api__");
  if (cap == nullptr) {
    PyErr_Clear();
  } else {
    if (PyCapsule_CheckExact(cap)) {
      auto* candidate = static_cast<const dlpack::ExchangeApi*>(PyCapsule_GetPointer(cap, "dlpack_exchange_api"));
      if (candidate && candidate->header.version.major == dlpack::kExchangeApiMajor &&
          candidate->header.version.minor >= dlpack::kExchangeApiMinMinor) {
        api = candidate;
      }
    }
    PyErr_Clear();
    Py_DECREF(cap);  // the API struct is static in the producer library
  }
  cache.emplace(type, api);
  return api;
}

}  // namespace

TensorView TensorArgs::Get(const char* name, nb::handle obj) {
  if (obj.is_none()) return TensorView{};
  if (const dlpack::ExchangeApi* api = ExchangeApiOf(Py_TYPE(obj.ptr()))) {
    dlpack::Tensor dl;
    if (api->dltensor_from_py_object_no_sync(obj.ptr(), &dl) != 0) throw nb::python_error();
    exchange_api_ = api;
    return FromFields(name, static_cast<char*>(dl.data) + dl.byte_offset, dl.device.device_type,
                      dl.device.device_id, dl.ndim, dl.shape, dl.strides, dl.dtype.code, dl.dtype.bits,
                      dl.dtype.lanes);
  }
  nb::ndarray<> array;
  if (!nb::try_cast(obj, array, /*convert=*/false)) {
    ThrowType(name, std::string("must be a tensor supporting DLPack; got ") +
                        nb::type_name(obj.type()).c_str());
  }
  keep_alive_.push_back(array);
  const auto dt = array.dtype();
  std::vector<int64_t> shape(array.ndim()), strides(array.ndim());
  for (size_t i = 0; i < array.ndim(); ++i) shape[i] = array.shape(i), strides[i] = array.stride(i);
  return FromFields(name, array.data(), array.device_type(), array.device_id(), static_cast<int>(array.ndim()),
                    shape.data(), strides.data(), dt.code, dt.bits, dt.lanes);
}

cudaStream_t TensorArgs::Stream(int device, int64_t explicit_stream) const {
  if (explicit_stream >= 0) return reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(explicit_stream));
  if (exchange_api_ != nullptr) {
    auto* api = static_cast<const dlpack::ExchangeApi*>(exchange_api_);
    void* stream = nullptr;
    if (api->current_work_stream(dlpack::kCUDA, device, &stream) != 0) throw nb::python_error();
    return static_cast<cudaStream_t>(stream);
  }
  return nullptr;
}

DeviceGuard::DeviceGuard(int device) {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current != device) {
    if (cudaSetDevice(device) == cudaSuccess) previous_ = current;
  }
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

void ThrowIfError(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk: return;
    case StatusCode::kInvalidArgument: throw nb::value_error(status.message().c_str());
    case StatusCode::kUnsupported: throw nb::builtin_exception(nb::exception_type::runtime_error, status.message().c_str());
    default: throw std::runtime_error(status.message());
  }
}

}  // namespace hpc::bridge
