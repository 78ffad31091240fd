"""The binary's XLA FFI handlers against the running jaxlib: handlers built against a newer jaxlib's FFI API than the
running one accepts make the JAX backend fail to start for the whole process, so hpc_xla.jax refuses them first with
an ImportError that says what to do; and the packaged build uses the oldest supported jaxlib's headers so the wheel
serves the whole declared jax range."""

import os
import re

import pytest

from hpc_xla.jax import _ffi


@pytest.mark.parametrize("version, minor", [
    ("0.6.2", 1), ("0.7.0", 1), ("0.8.0", 1), ("0.8.1", 2), ("0.9.0", 2), ("0.9.1", 3), ("0.10.2", 3),
    ("0.11.1", 3), ("0.11.2", 4), ("0.13.0", 4), ("0.10.2.dev20260101", 3), ("0.9.1rc1", 2),
])
def test_runtime_ffi_minor(version, minor):
    # (0.9.1rc1 reads as 0.9: before 0.9.1, the conservative side)
    assert _ffi.runtime_ffi_minor(version) == minor


def test_newer_handlers_than_the_runtime_are_refused_with_a_clear_error():
    with pytest.raises(ImportError, match=r"built against XLA FFI API 0\.3 headers .* running 0\.8\.0, which accepts "
                                          r"up to 0\.1\): rebuild it against this jaxlib"):
        _ffi.check_ffi_compatible((0, 3), "0.8.0")
    _ffi.check_ffi_compatible((0, 1), "0.10.2")  # older handlers: accepted (the ABI is backward compatible)
    _ffi.check_ffi_compatible((0, 3), "0.10.2")


def test_an_explicit_runtime_minor_overrides_the_table():
    _ffi.check_ffi_compatible((0, 4), "0.11.1", accepted=4)
    with pytest.raises(ImportError, match=r"0\.5 headers .* accepts up to 0\.4\)"):
        _ffi.check_ffi_compatible((0, 5), "0.13.0", accepted=4)


def _fake_jaxlib(tmp_path, version, header_text):
    """A module-like object laid out as a jaxlib wheel: __file__ in its folder, include/xla/ffi/api/c_api.h beside."""
    api = tmp_path / "jaxlib" / "include" / "xla" / "ffi" / "api"
    api.mkdir(parents=True)
    if header_text is not None:
        (api / "c_api.h").write_text(header_text)
    return type("FakeJaxlib", (), {"__file__": str(tmp_path / "jaxlib" / "__init__.py"), "__version__": version})


def test_the_running_jaxlibs_header_decides(tmp_path):
    # jaxlib 0.11.2 ships API 0.4 headers; the release table once said 0.3 and refused its own handlers
    fake = _fake_jaxlib(tmp_path, "0.10.2", "#define XLA_FFI_API_MAJOR 0\n#define XLA_FFI_API_MINOR 7\n")
    assert _ffi.installed_ffi_minor(fake) == 7


@pytest.mark.parametrize("header_text", [None, "/* no version here */\n"])
def test_without_a_readable_header_the_table_decides(tmp_path, header_text):
    assert _ffi.installed_ffi_minor(_fake_jaxlib(tmp_path, "0.9.0", header_text)) == 2


def test_this_binary_registers_with_this_jaxlib():
    import jaxlib

    from hpc_xla._ext import ext

    _ffi.check_ffi_compatible(tuple(ext().build_info()["xla_ffi_api_version"]), jaxlib.__version__,
                              _ffi.installed_ffi_minor(jaxlib))


def test_the_installed_header_agrees_with_the_table_where_both_know_the_release():
    """The table is the fallback; where it names this jaxlib's release line exactly, it must match the header."""
    import jaxlib

    from_header = _ffi.header_ffi_minor(os.path.join(os.path.dirname(jaxlib.__file__), "include", "xla", "ffi",
                                                     "api", "c_api.h"))
    if from_header is None:
        pytest.skip("this jaxlib ships no c_api.h")
    if _ffi.release_tuple(jaxlib.__version__) > _ffi._FFI_MINOR_SINCE[0][0]:
        pytest.skip("jaxlib %s is newer than the table's last entry (it extrapolates there)" % jaxlib.__version__)
    assert from_header == _ffi.runtime_ffi_minor(jaxlib.__version__), jaxlib.__version__


def test_packaged_build_uses_the_oldest_supported_jaxlib():
    """pyproject's isolated build pins jaxlib to the floor of the runtime range (for the Pythons that jaxlib has
    wheels for), so a plain `pip install .` never produces handlers an older supported jax refuses."""
    import tomllib

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        cfg = tomllib.load(f)
    pins = [r for r in cfg["build-system"]["requires"] if re.match(r"jaxlib==", r)]
    assert len(pins) == 1, cfg["build-system"]["requires"]
    pinned = re.match(r"jaxlib==([\d.]+)", pins[0]).group(1)
    floors = [re.search(r">=([\d.]+)", d).group(1) for d in cfg["project"]["dependencies"] if re.match(r"jax(lib)?>=", d)]
    assert floors and all(_ffi.runtime_ffi_minor(f) == _ffi.runtime_ffi_minor(pinned) for f in floors), (pinned, floors)
    assert tuple(int(p) for p in pinned.split(".")) >= tuple(int(p) for p in floors[0].split("."))
