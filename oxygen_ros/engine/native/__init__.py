"""Native (C++) units of the engine, built on first use with torch.utils.cpp_extension.

Two fused passes, each the same ATen/oneDNN/native kernels as its eager path in the same
order, so their outputs are bitwise the eager ones: `expert.cpp` (the action expert's
whole sampling, every denoise step and layer) and `decode.cpp` (the batched decode
step's layers). Three kernels of their own, which those passes call and the eager paths
use wherever the library is loaded (CPU, float32, no autograd), so both compute alike:
`attention.cpp` (the decode step's queries over each row's visible keys), `norms.cpp`
(RMSNorm in one pass) and `activations.cpp` (act(gate) * up). The library is built once
per torch version and source into `$OXYGEN_CACHE_DIR/native/` (`make setup` does it) and
loaded from there.

`available()` is False, and the eager path runs, when OXYGEN_FUSED=0, when no C++
compiler is found (`$CXX`, else `c++`) or when the build fails; the reason is logged once.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import sys
from pathlib import Path

import torch

log = logging.getLogger(__name__)

SOURCES = [Path(__file__).with_name(name) for name in (
    "expert.cpp", "decode.cpp", "layer_ops.h", "attention.cpp", "attention.h", "norms.cpp", "norms.h",
    "activations.cpp", "activations.h", "rope.cpp", "rope.h", "fast_math.h")]
_state: dict = {}


def cache_dir() -> Path:
    base = os.environ.get("OXYGEN_CACHE_DIR") or Path.home() / ".cache" / "oxygen_ros"
    key = hashlib.sha256(torch.__version__.encode() + b"".join(p.read_bytes() for p in SOURCES)).hexdigest()[:12]
    return Path(base).expanduser() / "native" / f"torch{torch.__version__.replace('+', '-')}-{key}"


def _compiler() -> str | None:
    return shutil.which(os.environ.get("CXX") or "c++")


def _build() -> str | None:
    """Load the library, building it if needed; None on success, else why not."""
    if os.environ.get("OXYGEN_FUSED", "1") == "0":
        return "OXYGEN_FUSED=0"
    if _compiler() is None:
        return f"no C++ compiler found ({os.environ.get('CXX') or 'c++'} not on PATH)"
    from torch.utils import cpp_extension
    # ninja may live next to the interpreter (the venv) without being on PATH
    bindir = str(Path(sys.executable).parent)
    if not cpp_extension.is_ninja_available() and (Path(bindir) / "ninja").exists():
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    if not cpp_extension.is_ninja_available():
        return "ninja not found"
    build = cache_dir()
    build.mkdir(parents=True, exist_ok=True)
    try:
        with _builder(build):
            # -fopenmp: at::parallel_for runs on the intra-op threads only when compiled with it
            cpp_extension.load("oxygen_native", [str(p) for p in SOURCES if p.suffix == ".cpp"],
                               extra_cflags=["-O2", "-fopenmp"], extra_ldflags=["-fopenmp"],
                               build_directory=str(build), is_python_module=False, verbose=False)
    except Exception as exc:   # a broken toolchain: keep the eager path
        return f"build failed ({type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''})"
    return None


@contextlib.contextmanager
def _builder(build: Path):
    """Be the one process building or loading in `build`. torch marks a build with a `lock`
    file and waits, without end, for it to go: a builder killed mid-way (a node stopped during
    its first start) hung every later start. The kernel drops an flock with its holder, so
    while this one is held any `lock` file is a dead builder's, and goes."""
    with open(build / "builder.flock", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.warning("oxygen_ros: another process is building the native library in %s; waiting", build)
            fcntl.flock(f, fcntl.LOCK_EX)
        (build / "lock").unlink(missing_ok=True)
        yield


def available() -> bool:
    """Whether the native fused units are loaded (built on the first call per process)."""
    if "ok" not in _state:
        why = _build()
        _state["ok"] = why is None
        _state["why"] = why
        if why is not None:
            log.warning("oxygen_ros: fused native path unavailable, running eager: %s", why)
    return _state["ok"]


def status() -> str:
    return "on" if available() else f"off ({_state['why']})"


def main() -> int:
    """`python -m oxygen_ros.engine.native` (make setup): build or load now, say which."""
    logging.basicConfig(format="%(message)s")
    print(f"[native] fused action path: {status()} ({cache_dir()})")
    return 0
