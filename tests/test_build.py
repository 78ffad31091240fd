"""The binary is what the design promises: sm_90a SASS (no PTX), no framework/libcudart/libpython link,
XLA FFI targets for both platforms."""

import glob
import os
import shutil
import subprocess

import pytest

import hpc_xla
from hpc_xla._ext import ext


def _binary():
    return ext().__file__


def _cuobjdump():
    found = shutil.which("cuobjdump") or next(iter(glob.glob("/usr/local/cuda/bin/cuobjdump")), None)
    if found:
        return found
    try:
        import nvidia

        for base in nvidia.__path__:
            hits = glob.glob(os.path.join(base, "*", "bin", "cuobjdump"))
            if hits:
                return hits[0]
    except ImportError:
        pass
    pytest.fail("cuobjdump not found: install nvidia-cuda-cuobjdump (pip) or a CUDA toolkit")


def test_binary_holds_sm90a_sass_and_no_ptx():
    out = subprocess.run([_cuobjdump(), "--list-elf", _binary()], capture_output=True, text=True, check=True).stdout
    cubins = [line for line in out.splitlines() if ".cubin" in line]
    assert cubins and all("sm_90a" in line for line in cubins), out
    for unit in ("rope_norm", "decode_attention", "route"):
        assert any(unit in line for line in cubins), out
    ptx = subprocess.run([_cuobjdump(), "--list-ptx", _binary()], capture_output=True, text=True).stdout
    assert ".ptx" not in ptx


def test_binary_links_no_framework_or_shared_cudart():
    out = subprocess.run(["readelf", "-d", _binary()], capture_output=True, text=True, check=True).stdout
    needed = [line.split("[")[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]
    for lib in needed:
        assert not any(bad in lib for bad in ("torch", "c10", "cudart", "python", "jax", "xla")), needed


def test_ffi_targets_cover_cuda_and_cpu():
    targets = ext().ffi_targets()
    for name in ("rope_norm", "decode_plan", "decode_attention", "moe_route"):
        assert "hpc_xla_" + name in targets
    for platforms in targets.values():
        assert set(platforms) == {"CUDA", "cpu"}


def test_build_info():
    info = hpc_xla.build_info()
    assert info["cuda_archs"] == ("sm_90a",)
    assert info["xla_ffi_api_version"][0] == 0


def test_pip_packages_every_python_package():
    """pyproject lists its packages by hand: a new subpackage (hpc_xla.vllm) missing from it would be absent from a
    `pip install .` while every test run from the source tree still passes."""
    import tomllib

    root = os.path.dirname(os.path.dirname(os.path.abspath(hpc_xla.__file__)))
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
    found = {os.path.relpath(os.path.dirname(p), root).replace(os.sep, ".")
             for p in glob.glob(os.path.join(root, "hpc_xla", "**", "__init__.py"), recursive=True)}
    assert found == listed


def test_install_refuses_a_system_managed_python_with_advice():
    """tools/install.sh on a distribution's own Python (PEP 668) stops before pip with what to do instead."""
    system = "/usr/bin/python3"
    probe = ("import os, sys, sysconfig; print(sys.prefix == sys.base_prefix and "
             "os.path.exists(os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')))")
    if not os.path.exists(system) or subprocess.run([system, "-c", probe], capture_output=True,
                                                    text=True).stdout.strip() != "True":
        pytest.skip("no PEP 668-managed /usr/bin/python3 here")
    if subprocess.run([system, "-c", "import jax"], capture_output=True).returncode == 0:
        pytest.skip("the system Python already has jax: install.sh would not pip-install into it")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    run = subprocess.run(["bash", os.path.join(root, "tools", "install.sh")], capture_output=True, text=True,
                         env=dict(os.environ, HPC_PYTHON=system), timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "PEP 668" in run.stderr and "python3 -m venv" in run.stderr, run.stderr
