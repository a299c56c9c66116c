"""Times lnorm's layer_norm against flax.linen.LayerNorm and torch's layer_norm.

Usage::

    python -m scripts.bench.norm [--repeats N] [--shapes 128x1000,8x400,8x1600,4096x1024]
        [--norm layer|rms] [--torch-threads N] [--baseline OLD/layer_norm_cpu.cc]
        [--keep-freed-memory]

For each shape (a batch of rows, normalized over the last axis, float32, with
a gain and a bias, eps=1e-5) it times, side by side in this one process:

* forward: ``y = LN(x)``;
* forward+backward: ``y`` and the gradients of ``sum(y * dy)`` (``dy`` a
  fixed random cotangent) with respect to x, gain and bias, all four
  returned, as in a training step, which needs the forward's output too.
  (Returning the gradients alone would let XLA drop a forward pass whose
  output the backward does not read: ``base``, whose backward kernel makes
  the statistics again from x, would then be timed without its forward.)

``ours`` is ``lnorm.normalization.layer_norm``, which on CPU runs the fused
native kernels of ``lnorm/native`` (where they built). ``xla`` is the same
function held to its XLA version (``fused_layer_norm.normalize(...,
native=False)``), what ``ours`` runs on other backends; ``ours/xla`` is the
kernels' speed-up, measured side by side.

Another JAX candidate, ``affine``, is a reference, not a layer norm: the
gain and bias alone, ``y = x * gain + bias``, through the same two passes.
Any layer norm with a gain and a bias does that work and more (the same
outputs and gradients, with the same column sums for the gain and bias,
plus the row statistics), so ``affine/flax`` is a rough floor for
``ours/flax`` on this backend. On XLA:CPU at small shapes that floor is set
by per-kernel overhead, not by arithmetic. ``floor`` computes nothing: a
jitted function that returns its inputs as the outputs of each pass (x; x
and (x, gain, bias)), which XLA copies into fresh buffers. It is the least a
jitted JAX call with those outputs costs here: per-call dispatch and the
output buffers, which no layer norm written for JAX can undercut.

JAX candidates are jitted as a whole and timed up to ``block_until_ready``;
torch (if installed) runs the forward under ``torch.no_grad`` and the
forward+backward with ``requires_grad`` on x, weight and bias and
``y.backward(dy)``. Candidates are interleaved: each repeat takes one sample
of every candidate, in a fresh random order, so a noisy neighbour slows them
all alike. A sample
is the mean of ``number`` back-to-back calls (``number`` calibrated so one
sample lasts about ``--sample-ms``); the table reports the median sample
(``--stat min``: the fastest), in microseconds per call, and the ratios
ours/flax and ours/torch (below 1: ours is faster). Before timing, the outputs
and gradients of ours and torch are checked against flax's.

On a GPU the JAX candidates run on the default JAX device and torch on the
CPU (a CPU build of torch, or tensors left on the CPU); the devices are
printed. ``--torch-threads N`` sets torch's intra-op threads (on a loaded
machine torch's default, one thread per core, can stall in its barriers).

``--baseline FILE`` compiles another version of ``layer_norm_cpu.cc`` (its
``vec.h`` from FILE's folder, else ``lnorm/native``'s) with the library's
flags and times its two kernels, called as ours calls them, as candidate
``base``, with the column ``ours/base``: a kernel change measured before and
after in one process, e.g. with FILE from ``git show
REV:lnorm/native/layer_norm_cpu.cc``.

``--norm rms`` times RMS norm instead, with a gain and no bias (as flax's
RMSNorm and torch's rms_norm have it): ``ours``
(``lnorm.normalization.rms_norm``, the native kernels on CPU), ``xla`` (its
primitives held to their XLA versions), ``before`` (the plain XLA rms_norm,
differentiated by autodiff, that the primitives replaced), ``ln`` (ours
``layer_norm`` with the same gain), flax, torch and the floor, with the
ratios ours/each.
"""

from __future__ import annotations

import argparse
import ctypes
from pathlib import Path
import statistics
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

import flax.linen as nn

try:  # torch is optional
  import torch
  import torch.nn.functional as F
except ImportError:  # pragma: no cover - depends on the environment
  torch = None

if __package__ in (None, ""):  # Run as a file: `python scripts/bench/norm.py`.
  sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from lnorm import fused_layer_norm  # pylint: disable=wrong-import-position
from lnorm import fused_rms_norm  # pylint: disable=wrong-import-position
from lnorm import native  # pylint: disable=wrong-import-position
from lnorm.normalization import layer_norm, rms_norm  # pylint: disable=wrong-import-position
from scripts.bench.timing import interleaved_samples, print_environment  # pylint: disable=wrong-import-position

EPS = 1e-5
DEFAULT_SHAPES = "128x1000,8x400,8x1600,4096x1024"


def parse_shapes(text: str) -> list[tuple[int, ...]]:
  shapes = []
  for item in text.split(","):
    item = item.strip()
    if item:
      shapes.append(tuple(int(n) for n in item.lower().split("x")))
  if not shapes:
    raise argparse.ArgumentTypeError("no shapes given")
  return shapes


# ----------------------------------------------------------------------------
# Candidates. Each builder returns a zero-argument callable that runs one call
# to completion (results ready), plus the device it runs on.


def _block(tree):
  return jax.block_until_ready(tree)


BASE_FWD, BASE_BWD = "lnorm_bench_base_fwd", "lnorm_bench_base_bwd"


def build_baseline(src: Path) -> None:
  """Compiles ``src`` (a layer_norm_cpu.cc) and registers its kernels as
  BASE_FWD and BASE_BWD."""
  out = Path(tempfile.mkdtemp(prefix="lnorm_bench_")) / "base.so"
  proc = subprocess.run(
      [native._compiler(), *native.FLAGS, "-I", str(src.resolve().parent),  # pylint: disable=protected-access
       "-I", str(native.HERE), "-I", jax.ffi.include_dir(), str(src), "-o",
       str(out)], capture_output=True, text=True)
  if proc.returncode != 0:
    lines = proc.stderr.strip().splitlines() or ["(no message)"]
    first = next((l for l in lines if "error" in l), lines[-1])
    sys.exit(f"error: --baseline {src} does not build: {first.strip()}")
  lib = ctypes.cdll.LoadLibrary(str(out))  # RTLD_LOCAL: its own symbols
  for target, symbol in ((BASE_FWD, "LnormLayerNormFwd"),
                         (BASE_BWD, "LnormLayerNormBwd")):
    jax.ffi.register_ffi_target(
        target, jax.ffi.pycapsule(getattr(lib, symbol)), platform="cpu")


def base_layer_norm(x, g, b):
  return jax.ffi.ffi_call(BASE_FWD, jax.ShapeDtypeStruct(x.shape, x.dtype))(
      x, g, b, eps=np.float32(EPS))


def base_fwd_bwd(x, g, b, dy):
  """The forward kernel, then the backward kernel that makes the statistics
  again from x: the pair every version of the file has (ours now runs the
  pair that passes the statistics from one to the other)."""
  out = (jax.ShapeDtypeStruct(x.shape, x.dtype),
         jax.ShapeDtypeStruct(g.shape, g.dtype),
         jax.ShapeDtypeStruct(g.shape, g.dtype))
  grads = jax.ffi.ffi_call(BASE_BWD, out)(x, g, dy, eps=np.float32(EPS))
  return base_layer_norm(x, g, b), tuple(grads)


def jax_candidates(x, g, b, dy, baseline: bool = False):
  """ours, its XLA version, flax and the affine reference (and base, with
  ``baseline``), forward and forward+backward, all jitted."""
  dev = jax.devices()[0]
  x, g, b, dy = (jax.device_put(a, dev) for a in (x, g, b, dy))

  def ours(x, g, b):
    return layer_norm(x, g, b, axis=-1, eps=EPS)

  def xla(x, g, b):
    return fused_layer_norm.normalize(x, g, b, axes=(x.ndim - 1,), eps=EPS,
                                       native=False)

  model = nn.LayerNorm(epsilon=EPS)  # default settings otherwise

  def flax_ln(x, g, b):
    return model.apply({"params": {"scale": g, "bias": b}}, x)

  def affine(x, g, b):
    return x * g + b

  floor = {"fwd": jax.jit(lambda x, g, b: x),
           "fwd+bwd": jax.jit(lambda x, g, b, dy: (x, (x, g, b)))}

  def fwd_bwd(f):
    def step(x, g, b, dy):
      y, vjp = jax.vjp(f, x, g, b)
      return y, vjp(dy)
    return jax.jit(step)

  out = {}
  for name, f in (("ours", ours), ("xla", xla), ("flax", flax_ln),
                  ("affine", affine)):
    fj = jax.jit(f)
    gj = fwd_bwd(f)
    out[(name, "fwd")] = lambda fj=fj: _block(fj(x, g, b))
    out[(name, "fwd+bwd")] = lambda gj=gj: _block(gj(x, g, b, dy))
  if baseline:
    bf, bfb = jax.jit(base_layer_norm), jax.jit(base_fwd_bwd)
    out[("base", "fwd")] = lambda: _block(bf(x, g, b))
    out[("base", "fwd+bwd")] = lambda: _block(bfb(x, g, b, dy))
  out[("floor", "fwd")] = lambda: _block(floor["fwd"](x, g, b))
  out[("floor", "fwd+bwd")] = lambda: _block(floor["fwd+bwd"](x, g, b, dy))
  return out, str(dev)


def torch_candidates(x, g, b, dy):
  """torch.nn.functional.layer_norm on the CPU (the default device)."""
  xt = torch.from_numpy(np.array(x))
  gt = torch.from_numpy(np.array(g))
  bt = torch.from_numpy(np.array(b))
  dyt = torch.from_numpy(np.array(dy))
  shape = (x.shape[-1],)

  def fwd():
    with torch.no_grad():
      return F.layer_norm(xt, shape, gt, bt, EPS)

  xr = xt.clone().requires_grad_(True)
  gr = gt.clone().requires_grad_(True)
  br = bt.clone().requires_grad_(True)

  def fwd_bwd():
    for t in (xr, gr, br):
      t.grad = None
    y = F.layer_norm(xr, shape, gr, br, EPS)
    y.backward(dyt)
    return y, (xr.grad, gr.grad, br.grad)

  return {("torch", "fwd"): fwd, ("torch", "fwd+bwd"): fwd_bwd}, str(xt.device)


def _rms_norm_before(x, g):
  """rms_norm as it was written before its primitives: plain XLA, autodiff."""
  xf = x.astype(jnp.promote_types(x.dtype, jnp.float32))
  ms = jnp.mean(jnp.square(xf), -1, keepdims=True)
  return (xf * jax.lax.rsqrt(ms + EPS) * g[None]).astype(x.dtype)


RMS_JAX = ("ours", "xla", "before", "ln", "flax")


def rms_candidates(x, g, dy):
  """``--norm rms``: RMS norm with a gain (no bias, as flax's RMSNorm and
  torch's rms_norm have it), forward and forward+backward: ours
  (``lnorm.normalization.rms_norm``: the native kernels on CPU), ``xla``
  (the same primitives held to their XLA versions), ``before`` (the plain
  XLA rms_norm the primitives replaced), ``ln`` (ours ``layer_norm`` with
  the same gain), flax, torch and the floor."""
  dev = jax.devices()[0]
  x, g, dy = (jax.device_put(a, dev) for a in (x, g, dy))
  model = nn.RMSNorm(epsilon=EPS)
  zero = jnp.zeros_like(g)
  fns = {"ours": lambda x, g: rms_norm(x, g, axis=-1, eps=EPS),
         "xla": lambda x, g: fused_rms_norm.normalize(x, g, zero, axes=(x.ndim - 1,),
                                                      eps=EPS, native=False),
         "before": _rms_norm_before,
         "ln": lambda x, g: layer_norm(x, g, axis=-1, eps=EPS),
         "flax": lambda x, g: model.apply({"params": {"scale": g}}, x)}
  out = {}
  for name, f in fns.items():
    fj = jax.jit(f)
    gj = jax.jit(lambda x, g, dy, f=f: (lambda y, vjp: (y, vjp(dy)))(*jax.vjp(f, x, g)))
    out[(name, "fwd")] = lambda fj=fj: _block(fj(x, g))
    out[(name, "fwd+bwd")] = lambda gj=gj: _block(gj(x, g, dy))
  fl = {"fwd": jax.jit(lambda x, g: x), "fwd+bwd": jax.jit(lambda x, g, dy: (x, (x, g)))}
  out[("floor", "fwd")] = lambda: _block(fl["fwd"](x, g))
  out[("floor", "fwd+bwd")] = lambda: _block(fl["fwd+bwd"](x, g, dy))
  if torch is not None:
    xt, gt, dyt = (torch.from_numpy(np.array(a)) for a in (x, g, dy))
    shape = (x.shape[-1],)

    def tfwd():
      with torch.no_grad():
        return F.rms_norm(xt, shape, gt, EPS)

    xr, gr = xt.clone().requires_grad_(True), gt.clone().requires_grad_(True)

    def tfwd_bwd():
      xr.grad = gr.grad = None
      y = F.rms_norm(xr, shape, gr, EPS)
      y.backward(dyt)
      return y, (xr.grad, gr.grad)

    out[("torch", "fwd")], out[("torch", "fwd+bwd")] = tfwd, tfwd_bwd
  # The candidates compute the same thing (guards against a wrong benchmark).
  ref_y, (ref_dx, ref_dg) = (np.asarray(a) if not isinstance(a, tuple) else a
                             for a in out[("flax", "fwd+bwd")]())
  for name in ("ours", "xla", "before", "torch"):
    if (name, "fwd") not in out:
      continue
    y, grads = out[(name, "fwd+bwd")]()
    as_np = lambda a: a.detach().numpy() if torch is not None and isinstance(a, torch.Tensor) \
        else np.asarray(a)
    np.testing.assert_allclose(as_np(y), ref_y, rtol=1e-3, atol=1e-3)
    for a, r in zip(grads, (ref_dx, ref_dg)):
      r = np.asarray(r)
      np.testing.assert_allclose(as_np(a), r, rtol=1e-3, atol=2e-3 * (np.abs(r).max() + 1e-6))
  return out


# ----------------------------------------------------------------------------


def check_agreement(cands):
  """The candidates compute the same thing (guards against a wrong benchmark)."""
  ref_y = np.asarray(cands[("flax", "fwd")]())
  ref_y2, ref_g = cands[("flax", "fwd+bwd")]()
  np.testing.assert_allclose(np.asarray(ref_y2), ref_y, rtol=1e-6, atol=1e-6)
  for name in ("ours", "xla", "base", "torch"):
    if (name, "fwd") not in cands:
      continue
    y = cands[(name, "fwd")]()
    y2, grads = cands[(name, "fwd+bwd")]()
    if name == "torch":
      y, y2 = y.numpy(), y2.detach().numpy()
      grads = [t.detach().numpy() for t in grads]
    for out in (y, y2):
      np.testing.assert_allclose(np.asarray(out), ref_y, rtol=1e-3, atol=1e-3)
    for a, r in zip(grads, map(np.asarray, ref_g)):
      scale = float(np.max(np.abs(r))) + 1e-6
      np.testing.assert_allclose(np.asarray(a), r, rtol=1e-3, atol=2e-3 * scale)


def bench_shape(shape, repeats: int, sample_s: float, stat=statistics.median,
                seed: int = 0, baseline: bool = False):
  rng = np.random.default_rng(seed)
  h = shape[-1]
  x = rng.standard_normal(shape, dtype=np.float32)
  g = (1.0 + 0.1 * rng.standard_normal(h)).astype(np.float32)
  b = (0.1 * rng.standard_normal(h)).astype(np.float32)
  dy = rng.standard_normal(shape, dtype=np.float32)

  cands, jax_dev = jax_candidates(x, g, b, dy, baseline)
  devices = {"ours": jax_dev, "xla": jax_dev, "flax": jax_dev, "affine": jax_dev}
  if baseline:
    devices["base"] = jax_dev
  if torch is not None:
    tc, tdev = torch_candidates(x, g, b, dy)
    cands.update(tc)
    devices["torch"] = tdev

  for fn in cands.values():  # compile and warm up
    fn()
    fn()
  check_agreement(cands)
  samples = interleaved_samples(cands, repeats, sample_s, seed)
  med = {k: stat(v) * 1e6 for k, v in samples.items()}
  return med, devices


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--repeats", type=int, default=60,
                 help="samples per candidate (round-robin); the median is reported")
  p.add_argument("--shapes", type=parse_shapes, default=parse_shapes(DEFAULT_SHAPES),
                 help=f"comma-separated BxH shapes (default {DEFAULT_SHAPES})")
  p.add_argument("--sample-ms", type=float, default=2.0,
                 help="target duration of one sample, in ms (default 2)")
  p.add_argument("--stat", choices=("median", "min"), default="median",
                 help="statistic of the samples to report (default median; "
                      "min is less sensitive to a loaded machine)")
  p.add_argument("--torch-threads", type=int, default=None,
                 help="torch.set_num_threads(N) (default: torch's own choice)")
  p.add_argument("--norm", choices=("layer", "rms"), default="layer",
                 help="layer norm (default) or RMS norm (gain only, as flax and torch)")
  p.add_argument("--baseline", type=Path, default=None,
                 help="another layer_norm_cpu.cc, timed as candidate base")
  p.add_argument("--keep-freed-memory", action="store_true",
                 help="the run loop's allocator setting (experiments/runner/cli.py's "
                      "keep_freed_memory: glibc keeps freed blocks for reuse), for every "
                      "candidate, torch's included; default: glibc's own")
  args = p.parse_args(argv)
  if args.keep_freed_memory:
    from experiments.runner import cli  # pylint: disable=g-import-not-at-top
    if not cli.keep_freed_memory():
      sys.exit("error: --keep-freed-memory: glibc's mallopt is unavailable here, or "
               "MALLOC_MMAP_MAX_ / MALLOC_TRIM_THRESHOLD_ are set")
  if args.baseline is not None:
    if not args.baseline.is_file():
      sys.exit(f"error: --baseline {args.baseline}: no such file")
    if not native.load():
      sys.exit("error: --baseline needs lnorm's native kernels, which are "
               "unavailable here")
    build_baseline(args.baseline)
  if torch is not None and args.torch_threads:
    torch.set_num_threads(args.torch_threads)

  print_environment(torch)
  if torch is not None:
    print(f"torch threads: {torch.get_num_threads()}")
  print(f"repeats: {args.repeats}, sample ~{args.sample_ms} ms, statistic: "
        f"{args.stat}, float32, eps={EPS}")
  print()

  if args.norm == "rms":
    return bench_rms(args)
  rows = []
  t_start = time.perf_counter()
  devices = {}
  for shape in args.shapes:
    med, devices = bench_shape(shape, args.repeats, args.sample_ms * 1e-3,
                               stat=statistics.median if args.stat == "median" else min,
                               baseline=args.baseline is not None)
    rows.append((shape, med))
  elapsed = time.perf_counter() - t_start

  have_torch = torch is not None
  print("devices: " + ", ".join(f"{k} on {v}" for k, v in devices.items()))
  print()
  unit = "µs" if args.stat == "median" else "µs, min"
  have_base = args.baseline is not None
  head = ["shape", "pass", f"ours ({unit})", f"xla ({unit})", f"flax ({unit})"]
  if have_base:
    head.append(f"base ({unit})")
  if have_torch:
    head.append(f"torch ({unit})")
  head += [f"affine ({unit})", f"floor ({unit})", "ours/xla", "ours/flax"]
  if have_base:
    head.append("ours/base")
  if have_torch:
    head.append("ours/torch")
  head.append("affine/flax")
  print("| " + " | ".join(head) + " |")
  print("|" + "|".join("---" if i < 2 else "---:" for i in range(len(head))) + "|")
  for shape, med in rows:
    for kind in ("fwd", "fwd+bwd"):
      o, f = med[("ours", kind)], med[("flax", kind)]
      xl = med[("xla", kind)]
      cells = ["x".join(map(str, shape)), kind, f"{o:.1f}", f"{xl:.1f}", f"{f:.1f}"]
      if have_base:
        cells.append(f"{med[('base', kind)]:.1f}")
      if have_torch:
        t = med[("torch", kind)]
        cells.append(f"{t:.1f}")
      a = med[("affine", kind)]
      cells += [f"{a:.1f}", f"{med[('floor', kind)]:.1f}", f"{o / xl:.2f}",
                f"{o / f:.2f}"]
      if have_base:
        cells.append(f"{o / med[('base', kind)]:.2f}")
      if have_torch:
        cells.append(f"{o / t:.2f}")
      cells.append(f"{a / f:.2f}")
      print("| " + " | ".join(cells) + " |")
  print()
  print(f"(timed in {elapsed:.0f} s)")
  return 0


def bench_rms(args) -> int:
  """The ``--norm rms`` table: µs per call, and ours against the others."""
  stat = statistics.median if args.stat == "median" else min
  names = list(RMS_JAX) + (["torch"] if torch is not None else []) + ["floor"]
  versus = [n for n in names if n not in ("ours", "floor")]
  print("| shape | pass | " + " | ".join(f"{n} (µs)" for n in names) + " | "
        + " | ".join(f"ours/{n}" for n in versus) + " |")
  print("|---|---|" + "---:|" * (len(names) + len(versus)))
  t_start = time.perf_counter()
  for shape in args.shapes:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape, dtype=np.float32)
    g = (1.0 + 0.1 * rng.standard_normal(shape[-1])).astype(np.float32)
    dy = rng.standard_normal(shape, dtype=np.float32)
    cands = rms_candidates(x, g, dy)
    for fn in cands.values():
      fn()
      fn()
    med = {k: stat(v) * 1e6 for k, v in
           interleaved_samples(cands, args.repeats, args.sample_ms * 1e-3, 0).items()}
    for kind in ("fwd", "fwd+bwd"):
      o = med[("ours", kind)]
      cells = ["x".join(map(str, shape)), kind] + [f"{med[(n, kind)]:.1f}" for n in names]
      cells += [f"{o / med[(n, kind)]:.2f}" for n in versus]
      print("| " + " | ".join(cells) + " |")
  print(f"\n(timed in {time.perf_counter() - t_start:.0f} s)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
