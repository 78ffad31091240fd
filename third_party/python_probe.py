"""Prints, as JSON, where the build finds what it needs from a Python installation.

Run by the local_python_deps repository rule with $HPC_PYTHON. Nothing is imported that could pull in a
framework: jaxlib and cutlass_library are located with importlib, nanobind is imported (it is tiny).
"""
import importlib.util
import json
import os
import sys
import sysconfig


def package_dir(name):
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return ""
    return list(spec.submodule_search_locations)[0]


def main():
    info = {
        "python": sys.executable,
        "version": "%d.%d" % sys.version_info[:2],
        "include": sysconfig.get_paths()["include"],
        "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX"),
        "xla_include": "",
        "nanobind": "",
        "cutlass_include": os.environ.get("HPC_CUTLASS_INCLUDE", ""),
        "missing": [],
    }
    jaxlib = package_dir("jaxlib")
    if jaxlib and os.path.exists(os.path.join(jaxlib, "include", "xla", "ffi", "api", "ffi.h")):
        info["xla_include"] = os.path.join(jaxlib, "include")
    else:
        info["missing"].append("jaxlib (for the XLA FFI headers): pip install jaxlib")
    try:
        import nanobind

        info["nanobind"] = os.path.dirname(nanobind.include_dir())
    except ImportError:
        info["missing"].append("nanobind: pip install nanobind")
    if not info["cutlass_include"]:
        cutlass = package_dir("cutlass_library")
        inc = os.path.join(cutlass, "source", "include") if cutlass else ""
        if inc and os.path.exists(os.path.join(inc, "cute", "tensor.hpp")):
            info["cutlass_include"] = inc
        else:
            info["missing"].append("nvidia-cutlass (for CUTLASS/CuTe headers): pip install nvidia-cutlass")
    print(json.dumps(info))


if __name__ == "__main__":
    main()
