"""Repository rules that expose what is installed on the build machine, so the build needs no network.

local_cuda:        $CUDA_HOME (default /usr/local/cuda): headers, static cudart and the nvcc path.
local_python_deps: the Python chosen by $HPC_PYTHON (default python3 on PATH): its headers and EXT_SUFFIX,
                   jaxlib's XLA FFI headers, nanobind's sources and the CUTLASS/CuTe headers shipped in the
                   nvidia-cutlass wheel ($HPC_CUTLASS_INCLUDE overrides).
Environment variables are read through `environ` (not --repo_env, which crashes Bazel 4.2.3 when unset).
"""

def _env(rctx, name, default):
    value = rctx.os.environ.get(name, "")
    return value if value else default

def _local_cuda_impl(rctx):
    cuda = _env(rctx, "CUDA_HOME", "/usr/local/cuda")
    nvcc = cuda + "/bin/nvcc"
    if not rctx.path(nvcc).exists:
        fail("nvcc not found at %s: set CUDA_HOME to a CUDA 12.4+ toolkit" % nvcc)
    rctx.symlink(cuda + "/include", "include")
    rctx.symlink(cuda + "/lib64", "lib64")
    rctx.file("defs.bzl", 'NVCC = "%s"\nCUDA_HOME = "%s"\n' % (nvcc, cuda))
    rctx.file("BUILD.bazel", """
load("@rules_cc//cc:defs.bzl", "cc_import", "cc_library")

package(default_visibility = ["//visibility:public"])

cc_library(
    name = "cuda_headers",
    hdrs = glob(["include/**"]),
    includes = ["include"],
)

cc_import(
    name = "cudart_static_lib",
    static_library = "lib64/libcudart_static.a",
)

cc_library(
    name = "cudart_static",
    linkopts = ["-ldl", "-lpthread", "-lrt"],
    deps = [":cuda_headers", ":cudart_static_lib"],
)
""")

local_cuda = repository_rule(
    implementation = _local_cuda_impl,
    environ = ["CUDA_HOME"],
    local = True,
)

def _local_python_deps_impl(rctx):
    python = _env(rctx, "HPC_PYTHON", "")
    if not python:
        found = rctx.which("python3")
        if not found:
            fail("no python3 on PATH: set HPC_PYTHON")
        python = str(found)
    probe = rctx.path(Label("//third_party:python_probe.py"))
    res = rctx.execute([python, str(probe)])
    if res.return_code != 0:
        fail("probing %s failed:\n%s" % (python, res.stderr))
    info = json.decode(res.stdout)
    if info["missing"]:
        fail("%s lacks build dependencies:\n  %s" % (python, "\n  ".join(info["missing"])))
    rctx.symlink(info["include"], "python_include")
    rctx.symlink(info["xla_include"], "xla_include")
    rctx.symlink(info["nanobind"], "nb")
    rctx.symlink(info["cutlass_include"], "cutlass_include")
    rctx.file("defs.bzl", 'EXT_SUFFIX = "%s"\nPYTHON = "%s"\nPYTHON_VERSION = "%s"\n' % (
        info["ext_suffix"],
        info["python"],
        info["version"],
    ))
    rctx.file("BUILD.bazel", """
load("@rules_cc//cc:defs.bzl", "cc_library")

package(default_visibility = ["//visibility:public"])

cc_library(
    name = "python_headers",
    hdrs = glob(["python_include/**/*.h"]),
    includes = ["python_include"],
)

cc_library(
    name = "xla_ffi_headers",
    hdrs = glob(["xla_include/xla/ffi/api/*.h"]),
    includes = ["xla_include"],
)

cc_library(
    name = "cutlass",
    hdrs = glob(["cutlass_include/**/*.h", "cutlass_include/**/*.hpp", "cutlass_include/**/*.inl"]),
    includes = ["cutlass_include"],
)

# nanobind compiled into our one binary (nb_combined.cpp), as nanobind's own CMake does with NB_STATIC.
cc_library(
    name = "nanobind",
    srcs = ["nb/src/nb_combined.cpp"],
    hdrs = glob(["nb/include/**/*.h", "nb/ext/robin_map/include/**/*.h", "nb/src/*.h"]),
    textual_hdrs = glob(["nb/src/*.cpp"], exclude = ["nb/src/nb_combined.cpp"]),
    copts = ["-fvisibility=hidden", "-fno-strict-aliasing", "-O3", "-DNDEBUG", "-DNB_COMPACT_ASSERTIONS"],
    includes = ["nb/include", "nb/ext/robin_map/include"],
    deps = [":python_headers"],
)
""")

local_python_deps = repository_rule(
    implementation = _local_python_deps_impl,
    environ = ["HPC_PYTHON", "HPC_CUTLASS_INCLUDE", "PATH"],
    local = True,
)
