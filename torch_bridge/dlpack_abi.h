// The slice of the DLPack 1.3 C ABI that the bridge consumes: DLTensor and the DLPackExchangeAPI struct that
// torch >= 2.11 publishes as the capsule `type(t).__dlpack_c_exchange_api__` ("dlpack_exchange_api"). The
// layouts are fixed by the DLPack spec (dmlc/dlpack, include/dlpack/dlpack.h); declared here so the binary
// needs no framework headers at build time.
#pragma once

#include <cstdint>

namespace hpc::dlpack {

enum DeviceType : int32_t { kCPU = 1, kCUDA = 2, kCUDAHost = 3, kCUDAManaged = 13 };
enum TypeCode : uint8_t { kInt = 0, kUInt = 1, kFloat = 2, kBfloat = 4, kBool = 6, kFloat8_e4m3fn = 10 };

struct Version {
  uint32_t major;
  uint32_t minor;
};
struct Device {
  int32_t device_type;
  int32_t device_id;
};
struct DataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct Tensor {
  void* data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; NULL means compact row-major
  uint64_t byte_offset;
};

struct ExchangeApiHeader {
  Version version;
  ExchangeApiHeader* prev_api;
};

// Function table, in the spec's order. Only the last two are used.
struct ExchangeApi {
  ExchangeApiHeader header;
  void* managed_tensor_allocator;
  void* managed_tensor_from_py_object_no_sync;
  void* managed_tensor_to_py_object_no_sync;
  // Fills `out` (shape/strides owned by the producer, valid until we return to Python). 0 ok, -1 error set.
  int (*dltensor_from_py_object_no_sync)(void* py_object, Tensor* out);
  // The framework's current stream for a device (torch.cuda.current_stream), including under graph capture.
  int (*current_work_stream)(int32_t device_type, int32_t device_id, void** out_stream);
};

constexpr uint32_t kExchangeApiMajor = 1;
constexpr uint32_t kExchangeApiMinMinor = 3;  // dltensor_from_py_object_no_sync arrived in 1.3

}  // namespace hpc::dlpack
