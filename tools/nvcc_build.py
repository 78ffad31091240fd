"""Builds hpc_xla/_hpc_xla<EXT_SUFFIX> with nvcc + g++ directly: the fallback for machines without Bazel
(the H200 test machine). Same sources (the globs of BUILD.bazel), same flags, sm_90a SASS, static cudart.

    python tools/nvcc_build.py [--out PATH] [--jobs N]
"""

import argparse
import concurrent.futures as futures
import glob
import importlib.util
import os
import shlex
import subprocess
import sys
import sysconfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _package_dir(name):
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("hpc_xla build: the Python running the build needs `%s` (pip install %s)" % (name, name))
    return list(spec.submodule_search_locations)[0]


def _sources(pattern):
    return sorted(glob.glob(os.path.join(ROOT, pattern), recursive=True))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=os.path.join(ROOT, "hpc_xla", "_hpc_xla" + sysconfig.get_config_var("EXT_SUFFIX")))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build", "nvcc"))
    args = ap.parse_args(argv)

    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    nvcc = os.path.join(cuda, "bin", "nvcc")
    nb = os.path.dirname(__import__("nanobind").include_dir())
    xla_inc = os.path.join(_package_dir("jaxlib"), "include")
    cutlass_inc = os.environ.get("HPC_CUTLASS_INCLUDE") or os.path.join(_package_dir("cutlass_library"), "source", "include")
    py_inc = sysconfig.get_paths()["include"]
    includes = ["-I" + ROOT, "-I" + os.path.join(cuda, "include"), "-I" + xla_inc, "-I" + py_inc,
                "-I" + os.path.join(nb, "include"), "-I" + os.path.join(nb, "ext", "robin_map", "include")]
    host = ["g++", "-std=c++17", "-O3", "-fPIC", "-fvisibility=hidden", "-DNDEBUG"]
    os.makedirs(args.build_dir, exist_ok=True)

    jobs = []  # (command, object)

    def obj_for(src):
        rel = os.path.relpath(src, ROOT) if src.startswith(ROOT) else os.path.basename(src)
        return os.path.join(args.build_dir, rel.replace("/", "_") + ".o")

    for src in _sources("csrc/**/*.cu"):
        o = obj_for(src)
        jobs.append(([nvcc, "-c", src, "-o", o, "-std=c++17", "-O3", "-Xcompiler", "-fPIC", "-Xcompiler",
                      "-fvisibility=hidden", "--expt-relaxed-constexpr", "-lineinfo",
                      "-gencode=arch=compute_90a,code=sm_90a", "-I" + ROOT, "-I" + cutlass_inc], o))
    for src in _sources("csrc/**/*.cc") + _sources("ffi/*.cc"):
        o = obj_for(src)
        jobs.append((host + includes + ["-c", src, "-o", o], o))
    for src in _sources("torch_bridge/*.cc"):
        o = obj_for(src)
        jobs.append((host + includes + ["-DNB_DOMAIN=hpc_xla", "-c", src, "-o", o], o))
    nb_src = os.path.join(nb, "src", "nb_combined.cpp")
    nb_obj = os.path.join(args.build_dir, "nb_combined.o")
    jobs.append((host + includes + ["-fno-strict-aliasing", "-DNB_COMPACT_ASSERTIONS", "-ffunction-sections",
                                    "-fdata-sections", "-c", nb_src, "-o", nb_obj], nb_obj))

    def run(job):
        cmd, _ = job
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError("%s\n%s%s" % (" ".join(shlex.quote(c) for c in cmd), res.stdout, res.stderr))
        return job[1]

    with futures.ThreadPoolExecutor(args.jobs) as pool:
        objects = list(pool.map(run, jobs))
    link = ["g++", "-shared", "-o", args.out] + objects + [
        os.path.join(cuda, "lib64", "libcudart_static.a"), "-ldl", "-lpthread", "-lrt",
        "-Wl,--gc-sections", "-Wl,--exclude-libs,ALL"]
    subprocess.run(link, check=True)
    print("hpc_xla: built", args.out)


if __name__ == "__main__":
    sys.exit(main())
