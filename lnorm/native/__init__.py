"""lnorm's native CPU kernels: built with the host's C++ compiler on first use.

``load()`` compiles the kernels (``layer_norm_cpu.cc``: ``layer_norm`` and
``rms_norm``; ``lstm_cpu.cc``: the LSTM's scans, each one kernel for the
whole sequence; ``gru_cpu.cc``: the GRU's time steps) against the XLA FFI
headers that jaxlib ships, caches the shared library, and registers its
handlers as XLA:CPU custom-call targets.
``LNORM_NATIVE`` chooses what happens:

* ``auto`` (default): build and use the kernels; if that fails (no compiler,
  say), warn once and let the norms take their XLA paths on CPU;
* ``off``: never build them; the norms take their XLA paths;
* ``require``: as ``auto``, but a failed build is an error (CI sets this).

``LNORM_NATIVE_PHASES=1`` builds a separate library whose team kernels
time their phases and print them at exit (``phase_times.h``).

The library is cached in ``$LNORM_CACHE_DIR`` (default
``$XDG_CACHE_HOME/lnorm`` or ``~/.cache/lnorm``) under a name hashed from the
source, the flags, the compiler, jaxlib and the host CPU, so a change to any
of them rebuilds it. Concurrent first uses (pytest workers, ``reproduce.py
--jobs``) take a lock on the cache folder: one builds, its sources compiled at
once, one compiler a source, the others wait and load its library; it is
linked in a temporary folder and renamed into place, so nothing loads a
half-written file.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
from pathlib import Path
import platform
import shutil
import subprocess
import sys
import tempfile
import warnings

import jax
import jaxlib

HERE = Path(__file__).parent
SOURCES = (HERE / "layer_norm_cpu.cc", HERE / "lstm_cpu.cc", HERE / "gru_cpu.cc")
HEADERS = (HERE / "vec.h", HERE / "rows.h", HERE / "gemm.h", HERE / "team.h",
           HERE / "phase_times.h", HERE / "pages.h")
# XLA custom-call target -> exported handler symbol.
TARGETS = {"lnorm_layer_norm_fwd": "LnormLayerNormFwd",
           "lnorm_layer_norm_bwd": "LnormLayerNormBwd",
           "lnorm_rms_norm_fwd": "LnormRmsNormFwd",
           "lnorm_rms_norm_bwd": "LnormRmsNormBwd",
           "lnorm_layer_norm_fwd_saving": "LnormLayerNormFwdSaving",
           "lnorm_layer_norm_bwd_saved": "LnormLayerNormBwdSaved",
           "lnorm_rms_norm_fwd_saving": "LnormRmsNormFwdSaving",
           "lnorm_rms_norm_bwd_saved": "LnormRmsNormBwdSaved",
           "lnorm_lstm_fwd": "LnormLstmFwd",
           "lnorm_lstm_bwd": "LnormLstmBwd",
           "lnorm_gru_fwd": "LnormGruFwd",
           "lnorm_gru_bwd": "LnormGruBwd",
           "lnorm_uninitialized": "LnormUninitialized"}
# No -ffast-math: the kernels' accuracy rests on the order of their float
# operations (see layer_norm_cpu.cc).
FLAGS = ("-O3", "-march=native", "-std=c++17", "-shared", "-fPIC", "-w")


def flags() -> tuple[str, ...]:
  """FLAGS, and with ``LNORM_NATIVE_PHASES=1`` the team kernels' phase
  timers (``phase_times.h``: printed to stderr at exit; for developers)."""
  if os.environ.get("LNORM_NATIVE_PHASES") == "1":
    return FLAGS + ("-DLNORM_PHASE_TIMES",)
  return FLAGS
MODES = ("auto", "off", "require")


def mode() -> str:
  value = os.environ.get("LNORM_NATIVE", "auto")
  if value not in MODES:
    raise ValueError(
        f"LNORM_NATIVE={value!r}: expected one of {', '.join(MODES)}")
  return value


def cache_dir() -> Path:
  if "LNORM_CACHE_DIR" in os.environ:
    return Path(os.environ["LNORM_CACHE_DIR"])
  base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
  return Path(base) / "lnorm"


def _cpu_flags() -> str:
  # -march=native builds for this CPU: a cache shared with another CPU model
  # must not hand it a library with instructions it lacks.
  try:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
      if line.startswith(("flags", "Features")):
        return line
  except OSError:
    pass
  return platform.processor()


def _compiler() -> str:
  for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
    if name and shutil.which(name):
      return name
  raise OSError("no C++ compiler found (set CXX)")


def build() -> Path:
  """Compiles the kernels (or finds them in the cache) and returns the path."""
  cxx = _compiler()
  version = subprocess.run([cxx, "--version"], capture_output=True, text=True,
                           check=True).stdout
  key = hashlib.sha256("\0".join([
      *(f.read_text() for f in SOURCES + HEADERS), " ".join(flags()), version,
      jaxlib.__version__, platform.machine(), _cpu_flags()]).encode())
  key = key.hexdigest()[:16]
  out = cache_dir() / f"lnorm_cpu-{key}.so"
  if out.exists():
    return out
  import fcntl  # pylint: disable=g-import-not-at-top  # POSIX: where the kernels build
  out.parent.mkdir(parents=True, exist_ok=True)
  folder = os.open(out.parent, os.O_RDONLY)
  try:
    fcntl.flock(folder, fcntl.LOCK_EX)  # released when the descriptor closes
    if out.exists():  # another process built it while this one waited
      return out
    # Once per machine and source version: say so, as it takes a while.
    print(f"lnorm: building the native CPU kernels into {out} (first use; cached "
          "afterwards)", file=sys.stderr, flush=True)
    _compile_and_link(cxx, out)
  finally:
    os.close(folder)
  return out


def _compile_and_link(cxx: str, out: Path) -> None:
  """Every source to an object file at once (one compiler a source: the
  build's time is its largest source's), then the objects into ``out``."""
  with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
    objects = [Path(tmp) / f"{i}_{src.stem}.o" for i, src in enumerate(SOURCES)]
    compile_flags = [f for f in flags() if f != "-shared"]
    procs = [subprocess.Popen(
        [cxx, *compile_flags, "-I", jax.ffi.include_dir(), "-c", str(src), "-o", str(obj)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for src, obj in zip(SOURCES, objects)]
    errors = [p.communicate()[1] for p in procs]
    failed = [e for p, e in zip(procs, errors) if p.returncode != 0]
    if failed:
      raise OSError(f"{cxx} failed: {failed[0].strip()[-2000:]}")
    lib = Path(tmp) / out.name
    proc = subprocess.run([cxx, "-shared", "-fPIC", *map(str, objects), "-o", str(lib)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
      raise OSError(f"{cxx} failed: {proc.stderr.strip()[-2000:]}")
    os.replace(lib, out)


@functools.cache
def load() -> bool:
  """Builds and registers the kernels once per process; False if unavailable."""
  if mode() == "off":
    return False
  try:
    lib = ctypes.cdll.LoadLibrary(str(build()))
    for target, symbol in TARGETS.items():
      jax.ffi.register_ffi_target(
          target, jax.ffi.pycapsule(getattr(lib, symbol)), platform="cpu")
  except (OSError, subprocess.SubprocessError, AttributeError, ImportError) as e:
    if mode() == "require":
      raise RuntimeError(f"lnorm: LNORM_NATIVE=require, but the native CPU "
                         f"kernels could not be built: {e}") from e
    warnings.warn(f"lnorm: native CPU kernels unavailable ({e}); layer_norm "
                  "and rms_norm run their XLA versions on CPU", RuntimeWarning,
                  stacklevel=2)
    return False
  return True
