"""Times LSTM training steps: lnorm's LSTM and cells against PyTorch.

Usage::

    python -m scripts.bench.rnn [--shapes short,handwriting,draw] [--repeats N]
        [--torch-threads N] [--candidates NAME,...] [--no-check] [--json PATH]

For each shape it times one training step, forward and backward, side by
side in this one process: the gradient of ``sum(y * dy)`` (``dy`` a fixed
random cotangent, y the top layer's outputs) with respect to every
parameter. Shapes (T steps, batch B, H units, I inputs, L stacked layers):

* ``short``: T=100, B=8, H=400, I=3, L=1 (the issue's measurement);
* ``handwriting``: T=500, B=8, H=400, I=3, L=3 (Graves' handwriting model,
  the paper's section 6.4);
* ``draw``: T=64, B=128, H=256, I=256, L=1 (DRAW's LSTM size; I is ours);
* ``short64``: ``short`` at B=64.

Candidates (``--candidates`` picks some by name):

* ``LSTM(none)``, ``LSTM(layer)``, ``LSTM(layer_c)``: ``lnorm.recurrent.LSTM``
  (the sequence module; 'layer_c' is the DRAW variant), L modules stacked.
  On CPU its time steps run native kernels; ``LSTM(none) xla`` and so on
  are the same modules with ``native=False``, all in XLA (as on a GPU);
* ``GRU(none)``, ``GRU(layer)``: ``lnorm.recurrent.GRU``, L modules stacked
  (on CPU, float32, its time steps run native kernels, as the LSTM's);
* ``RNN(LSTMCell(none))``, ``RNN(LSTMCell(layer))``,
  ``RNN(LSTMCell(layer_c))``, ``RNN(GRUCell(none))``, ``RNN(GRUCell(layer))``:
  the cells under ``flax.linen.RNN``;
* ``torch LSTM``: ``torch.nn.LSTM(num_layers=L)`` (fused; oneDNN on CPU,
  cuDNN on a GPU);
* ``torch GRU``: ``torch.nn.GRU(num_layers=L)`` holding GRU(none)'s
  parameters (its update gate negated: torch keeps z h, lnorm (1 - z) h);
* ``torch LN-LSTM``: eqs. 20-22 in eager PyTorch, one Python loop over time
  per layer, with W_x x and its layer norm computed for all steps first.

JAX candidates are jitted as a whole and timed up to ``block_until_ready``;
torch runs ``y.backward(dy)`` (and ``torch.cuda.synchronize()`` on a GPU).
Every repeat takes one sample of each candidate in a fresh random order; a
sample is the mean of enough back-to-back calls to last ``--sample-ms``
(one call for most). The tables give the median sample (``--stat min``: the
fastest) in ms, and ratios to ``LSTM(none)``, ``GRU(none)``, ``torch LSTM``
and ``torch LN-LSTM``. Before timing, ``--check`` (default) verifies that the
LSTM and GRU candidates compute the same outputs and gradients from the same
parameters.

``temp (MiB)`` is the compiled JAX step's temporary buffer. Under glibc's
malloc, one over 32 MiB is mapped afresh on every call, so every call
page-faults all of it (BENCHMARKS.md, "The allocator").

JAX runs on its default device and torch on CUDA when available, else the
CPU; both are printed. ``--torch-threads N`` sets torch's intra-op threads:
on a loaded CPU torch's default (one per core) can stall in its barriers.
``--json PATH`` also writes the timed statistic, ``{shape: {candidate:
ms}}`` (``scripts.bench.rnn_rounds`` reads it).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
import statistics
import sys
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

if __package__ in (None, ""):  # Run as a file: `python scripts/bench/rnn.py`.
  sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from lnorm import recurrent as R  # pylint: disable=wrong-import-position
from scripts.bench.timing import interleaved_samples, print_environment  # pylint: disable=wrong-import-position

EPS = 1e-5
SHAPES = {  # name: (T, B, H, I, L)
    "short": (100, 8, 400, 3, 1),
    "handwriting": (500, 8, 400, 3, 3),
    "draw": (64, 128, 256, 256, 1),
    "short64": (100, 64, 400, 3, 1),  # the second batch size
}
# name: (norm, native): "xla" keeps the scans' steps in XLA on CPU too.
SEQ = {"LSTM(none)": ("none", True), "LSTM(layer)": ("layer", True),
       "LSTM(layer_c)": ("layer_c", True),
       "LSTM(none) xla": ("none", False), "LSTM(layer) xla": ("layer", False),
       "LSTM(layer_c) xla": ("layer_c", False)}
GRU_SEQ = {"GRU(none)": "none", "GRU(layer)": "layer"}
# name: (cell class, norm).
CELLS = {f"RNN({c.__name__}({n}))": (c, n)
         for c, n in ((R.LSTMCell, "none"), (R.LSTMCell, "layer"),
                      (R.LSTMCell, "layer_c"), (R.GRUCell, "none"),
                      (R.GRUCell, "layer"))}
# The cell each sequence candidate must agree with.
SAME = {s: f"RNN(LSTMCell({n}))" for s, (n, _) in SEQ.items()}
SAME.update({s: f"RNN(GRUCell({n}))" for s, n in GRU_SEQ.items()})
TORCH = ("torch LSTM", "torch GRU", "torch LN-LSTM")
ALL = tuple(SEQ) + tuple(GRU_SEQ) + tuple(CELLS) + TORCH
BASES = ("LSTM(none)", "GRU(none)", "torch LSTM", "torch GRU", "torch LN-LSTM")
# (a, b, limit): the goal a / b <= limit (issue 37's; the last, the eager
# loop's, from the paper-reproduction issues).
GOALS = (("LSTM(layer)", "LSTM(none)", 1.15),
         ("LSTM(layer)", "torch LSTM", 1.0),
         ("GRU(layer)", "GRU(none)", 1.15),
         ("GRU(layer)", "torch GRU", 1.0),
         ("LSTM(layer)", "torch LN-LSTM", 0.5))
CHECK_STEPS = 50


# ----------------------------------------------------------------------------
# JAX candidates. Each returns a zero-argument callable running one training
# step to completion, and a callable returning (y, grads) for the check.


class Stack(nn.Module):
  """``layers`` copies of ``make()`` applied in turn, named layer0, ..."""

  make: object
  layers: int

  @nn.compact
  def __call__(self, x):
    for l in range(self.layers):
      x = self.make(name=f"layer{l}")(x)
    return x


def jax_step(model, params, x, dy):
  """One jitted training step returning (y, grads): y is needed for the check
  and costs one output buffer, so the timed call is the same function. Also
  returns the compiled step's temporary buffer size, in MiB."""

  def loss(p, x, dy):
    y = model.apply({"params": p}, x)
    return jnp.sum(y * dy), y

  grad = jax.jit(jax.grad(loss, has_aux=True))
  run = lambda: jax.block_until_ready(grad(params, x, dy))
  outputs = lambda dy_check: grad(params, x, jnp.asarray(dy_check))[::-1]
  memory = grad.lower(params, x, dy).compile().memory_analysis()
  temp_mib = memory.temp_size_in_bytes / 2**20 if memory else float("nan")
  return run, outputs, temp_mib


def jax_candidates(names, shape, x, dy, seed):
  T, B, H, I, L = shape
  dev = jax.devices()[0]
  x, dy = jax.device_put(x, dev), jax.device_put(dy, dev)
  out, params = {}, {}
  for name in (n for n in ALL if n in names):
    if name in SEQ:
      model = Stack(lambda name, n=SEQ[name]: R.LSTM(
          H, norm=n[0], native=n[1], name=name), L)
      p = model.init(jax.random.key(seed), x)["params"]
      params[name] = p
    elif name in GRU_SEQ:
      model = Stack(
          lambda name, n=GRU_SEQ[name]: R.GRU(H, norm=n, name=name), L)
      p = model.init(jax.random.key(seed), x)["params"]
      params[name] = p
    elif name in CELLS:
      # parent=None: nn.RNN, not Stack, adopts the cell (as 'cell').
      model = Stack(
          lambda name, c=CELLS[name]: nn.RNN(c[0](H, norm=c[1], parent=None),
                                             name=name), L)
      seq = next((s for s, c in SAME.items() if c == name and s in params),
                 None)
      if seq in params:  # the same numbers as the sequence module
        p = {k: {"cell": v} for k, v in params[seq].items()}
      else:
        p = model.init(jax.random.key(seed), x)["params"]
    else:
      continue
    out[name] = jax_step(model, p, x, dy)
  return out, params, str(dev)


# ----------------------------------------------------------------------------
# torch candidates.

# lnorm's gates are (f, i, o, g); torch's are (i, f, g, o).
_TORCH_ORDER = (1, 0, 3, 2)


def _to_torch_gates(a, H):
  """Reorders the last axis (4H) from lnorm's gate order to torch's."""
  a = np.asarray(a)
  return np.concatenate([a[..., k * H:(k + 1) * H] for k in _TORCH_ORDER], -1)


def _from_torch_gates(a, H):
  a = np.asarray(a)
  out = [None] * 4
  for j, k in enumerate(_TORCH_ORDER):
    out[k] = a[..., j * H:(j + 1) * H]
  return np.concatenate(out, -1)


def _sync(device):
  if device.type == "cuda":
    torch.cuda.synchronize()


def _torch_rnn(module, L, params, x, dy, device, to_torch, from_torch):
  """A step and its outputs for ``module`` (torch.nn.LSTM or GRU), holding
  lnorm's parameters if given: ``to_torch(p)`` gives a layer's (weight_ih,
  weight_hh, bias_ih) from lnorm's, ``from_torch(g)`` lnorm's gradient tree of
  a layer from ``g(name)``, torch's gradient of that layer's ``name``."""
  if params is not None:
    with torch.no_grad():
      for l in range(L):
        t = lambda a: torch.from_numpy(np.ascontiguousarray(a, np.float32)).to(device)
        for name, a in zip(("weight_ih", "weight_hh", "bias_ih"), to_torch(params[f"layer{l}"])):
          getattr(module, f"{name}_l{l}").copy_(t(a))
        getattr(module, f"bias_hh_l{l}").zero_()
  xt = torch.from_numpy(np.array(x)).to(device)
  dyt = torch.from_numpy(np.array(dy)).to(device)

  def step(dyt=dyt):
    for q in module.parameters():
      q.grad = None
    y, _ = module(xt)
    y.backward(dyt)
    _sync(device)
    return y

  def outputs(dy_check):
    y = step(torch.from_numpy(dy_check).to(device)).detach().cpu().numpy()
    return y, {f"layer{l}": from_torch(lambda n, l=l: getattr(module, f"{n}_l{l}").grad.cpu().numpy())
               for l in range(L)}

  return step, outputs


def torch_lstm(shape, params, x, dy, device):
  """``torch.nn.LSTM`` holding lnorm's LSTM(none) parameters (if given)."""
  T, B, H, I, L = shape
  lstm = torch.nn.LSTM(I, H, num_layers=L, batch_first=True).to(device)
  to_torch = lambda p: (_to_torch_gates(p["kernel_x"], H).T, _to_torch_gates(p["kernel_h"], H).T,
                        _to_torch_gates(p["bias"], H))
  from_torch = lambda g: {"kernel_x": _from_torch_gates(g("weight_ih").T, H),
                          "kernel_h": _from_torch_gates(g("weight_hh").T, H),
                          "bias": _from_torch_gates(g("bias_ih"), H)}
  return _torch_rnn(lstm, L, params, x, dy, device, to_torch, from_torch)


def _torch_gru_weights(p, H):
  """lnorm's GRU(none) parameters as torch.nn.GRU's (gates r, z, n).

  lnorm updates h' = (1 - z) h + z n, torch h' = (1 - z') n + z' h, so
  z' = 1 - z = sigmoid(-a_z): torch's update-gate rows are lnorm's negated.
  The candidate's bias sits outside r in lnorm (bias_c), so torch's b_hn is 0.
  """
  kx, kh, b = (np.asarray(p[k]) for k in ("kernel_x", "kernel_h", "bias"))
  z, r = slice(0, H), slice(H, 2 * H)
  w_ih = np.concatenate([kx[:, r], -kx[:, z], np.asarray(p["kernel_xc"])], -1).T
  w_hh = np.concatenate([kh[:, r], -kh[:, z], np.asarray(p["kernel_hc"])], -1).T
  b_ih = np.concatenate([b[r], -b[z], np.asarray(p["bias_c"])])
  return w_ih, w_hh, b_ih


def torch_gru(shape, params, x, dy, device):
  """``torch.nn.GRU`` holding lnorm's GRU(none) parameters (if given)."""
  T, B, H, I, L = shape
  gru = torch.nn.GRU(I, H, num_layers=L, batch_first=True).to(device)
  r, z, n = slice(0, H), slice(H, 2 * H), slice(2 * H, 3 * H)

  def from_torch(g):
    gi, gh, gb = g("weight_ih").T, g("weight_hh").T, g("bias_ih")
    return {"kernel_x": np.concatenate([-gi[:, z], gi[:, r]], -1),
            "kernel_h": np.concatenate([-gh[:, z], gh[:, r]], -1),
            "kernel_xc": gi[:, n], "kernel_hc": gh[:, n],
            "bias": np.concatenate([-gb[z], gb[r]]), "bias_c": gb[n]}

  return _torch_rnn(gru, L, params, x, dy, device, lambda p: _torch_gru_weights(p, H), from_torch)


def torch_ln_lstm(shape, params, x, dy, device, seed):
  """Eqs. 20-22 in eager PyTorch, lnorm's parameter layout and gate order."""
  T, B, H, I, L = shape
  rng = np.random.default_rng(seed)
  ps = []
  for l in range(L):
    n_in = I if l == 0 else H
    if params is not None:
      p = {k: np.asarray(v) for k, v in params[f"layer{l}"].items()}
    else:
      p = {"kernel_x": rng.standard_normal((n_in, 4 * H)) / np.sqrt(n_in),
           "kernel_h": rng.standard_normal((H, 4 * H)) / np.sqrt(H),
           "bias": np.zeros(4 * H), "gain_x": np.ones(4 * H),
           "gain_h": np.ones(4 * H), "gain_c": np.ones(H),
           "bias_c": np.zeros(H)}
    ps.append({k: torch.tensor(np.asarray(v, np.float32), device=device,
                               requires_grad=True) for k, v in p.items()})
  xt = torch.from_numpy(np.array(x)).to(device)
  dyt = torch.from_numpy(np.array(dy)).to(device)

  def forward():
    h_in = xt
    for p in ps:
      # W_x x and its LN for every step at once: they do not depend on h.
      xz = F.layer_norm(h_in @ p["kernel_x"], (4 * H,), p["gain_x"], None,
                        EPS) + p["bias"]
      h = torch.zeros(B, H, device=device)
      c = torch.zeros(B, H, device=device)
      ys = []
      for t in range(T):
        z = F.layer_norm(h @ p["kernel_h"], (4 * H,), p["gain_h"], None,
                         EPS) + xz[:, t]
        f, i, o, g = z.chunk(4, 1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(
            F.layer_norm(c, (H,), p["gain_c"], p["bias_c"], EPS))
        ys.append(h)
      h_in = torch.stack(ys, 1)
    return h_in

  def step(dyt=dyt):
    for p in ps:
      for q in p.values():
        q.grad = None
    y = forward()
    y.backward(dyt)
    _sync(device)
    return y

  def outputs(dy_check):
    y = step(torch.from_numpy(dy_check).to(device)).detach().cpu().numpy()
    return y, {f"layer{l}": {k: v.grad.cpu().numpy() for k, v in p.items()}
               for l, p in enumerate(ps)}

  return step, outputs


# ----------------------------------------------------------------------------


def _assert_close(name, ref_name, got, ref, tol=2e-3):
  """Agreement to ``tol`` of each array's largest entry.

  Loose on purpose: float32 rounding differences grow over hundreds of LN-LSTM
  steps (both our paths stay within ~1e-4 of float64 at the short shape).
  """
  (y, g), (y_ref, g_ref) = got, ref
  y, y_ref = np.asarray(y), np.asarray(y_ref)
  np.testing.assert_allclose(y, y_ref, rtol=tol,
                             atol=tol * float(np.max(np.abs(y_ref))),
                             err_msg=f"{name} vs {ref_name}: y")
  flat = jax.tree_util.tree_flatten_with_path(g)[0]
  ref_flat = dict(jax.tree_util.tree_flatten_with_path(g_ref)[0])
  for path, a in flat:
    r = np.asarray(ref_flat[path])
    scale = float(np.max(np.abs(r))) + 1e-12
    np.testing.assert_allclose(
        np.asarray(a), r, rtol=tol, atol=tol * scale,
        err_msg=f"{name} vs {ref_name}: gradient {jax.tree_util.keystr(path)}")


def _strip_cell(tree):
  """{'layer0': {'cell': p}} -> {'layer0': p}."""
  return {k: v["cell"] for k, v in tree.items()}


def check_agreement(outputs, dy, steps=CHECK_STEPS):
  """The LSTM candidates compute the same thing from the same parameters.

  Only the first ``steps`` outputs, and gradients from a cotangent that is
  zero after them: over hundreds of steps the randomly initialised LN-LSTM is
  chaotic, and float32 rounding alone (of either implementation, measured
  against float64) changes later outputs by O(1).
  """
  dy = np.array(dy)
  dy[:, steps:] = 0.0
  checked = []
  got = {}
  for k, f in outputs.items():
    y, g = f(dy)
    got[k] = (np.asarray(y)[:, :steps], g)
  for seq, cell in SAME.items():
    if seq in got and cell in got:
      y, g = got[cell]
      _assert_close(seq, cell, got[seq], (y, _strip_cell(g)))
      checked.append(f"{seq} = {cell}")
  if "torch LSTM" in got and "LSTM(none)" in got:
    _assert_close("torch LSTM", "LSTM(none)", got["torch LSTM"],
                  got["LSTM(none)"])
    checked.append("torch LSTM = LSTM(none)")
  if "torch GRU" in got and "GRU(none)" in got:
    _assert_close("torch GRU", "GRU(none)", got["torch GRU"], got["GRU(none)"])
    checked.append("torch GRU = GRU(none)")
  if "torch LN-LSTM" in got and "LSTM(layer)" in got:
    _assert_close("torch LN-LSTM", "LSTM(layer)", got["torch LN-LSTM"],
                  got["LSTM(layer)"])
    checked.append("torch LN-LSTM = LSTM(layer)")
  return checked


def batch_inputs(shape, seed=0):
  """x (B, T, I) and dy (B, T, H), batch first as the modules and the torch
  candidates (``batch_first=True``) take them."""
  T, B, H, I, L = shape
  rng = np.random.default_rng(seed)
  return (rng.standard_normal((B, T, I), dtype=np.float32),
          rng.standard_normal((B, T, H), dtype=np.float32))


def bench_shape(shape, names, repeats, sample_s, stat, check, seed=0):
  x, dy = batch_inputs(shape, seed)
  jc, params, jax_dev = jax_candidates(names, shape, x, dy, seed)
  cands = {k: v[0] for k, v in jc.items()}
  outputs = {k: v[1] for k, v in jc.items()}
  temp_mib = {k: v[2] for k, v in jc.items()}
  devices = {k: jax_dev for k in jc}
  if torch is not None:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if "torch LSTM" in names:
      cands["torch LSTM"], outputs["torch LSTM"] = torch_lstm(
          shape, params.get("LSTM(none)"), x, dy, device)
      devices["torch LSTM"] = str(device)
    if "torch GRU" in names:
      cands["torch GRU"], outputs["torch GRU"] = torch_gru(
          shape, params.get("GRU(none)"), x, dy, device)
      devices["torch GRU"] = str(device)
    if "torch LN-LSTM" in names:
      cands["torch LN-LSTM"], outputs["torch LN-LSTM"] = torch_ln_lstm(
          shape, params.get("LSTM(layer)"), x, dy, device, seed)
      devices["torch LN-LSTM"] = str(device)

  for fn in cands.values():  # compile and warm up
    fn()
  checked = check_agreement(outputs, dy) if check else []
  samples = interleaved_samples(cands, repeats, sample_s, seed)
  ms = {k: stat(v) * 1e3 for k, v in samples.items()}
  return ms, temp_mib, devices, checked


def print_table(shape_name, shape, ms, temp_mib, unit):
  T, B, H, I, L = shape
  print(f"### {shape_name}: T={T}, B={B}, H={H}, I={I}, layers={L}")
  print()
  bases = [b for b in BASES if b in ms]
  head = (["candidate", f"fwd+bwd ({unit})"] + [f"/ {b}" for b in bases]
          + ["temp (MiB)"])
  print("| " + " | ".join(head) + " |")
  print("|---|" + "---:|" * (len(head) - 1))
  for name in ALL:
    if name in ms:
      cells = [name, f"{ms[name]:.1f}"]
      cells += [f"{ms[name] / ms[b]:.2f}" for b in bases]
      cells.append(f"{temp_mib[name]:.1f}" if name in temp_mib else "-")
      print("| " + " | ".join(cells) + " |")
  print()
  for a, b, limit in GOALS:
    if a in ms and b in ms:
      r = ms[a] / ms[b]
      verdict = "met" if r <= limit else "NOT met"
      print(f"goal {a} / {b} <= {limit}: {r:.2f} ({verdict})")
  print()


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--shapes", default="short,handwriting,draw",
                 help="comma-separated names from: " + ", ".join(SHAPES))
  p.add_argument("--repeats", type=int, default=10,
                 help="samples per candidate (round-robin)")
  p.add_argument("--candidates", default=",".join(ALL),
                 help="comma-separated candidate names (default: all)")
  p.add_argument("--sample-ms", type=float, default=20.0,
                 help="target duration of one sample, in ms (default 20)")
  p.add_argument("--stat", choices=("median", "min"), default="median")
  p.add_argument("--torch-threads", type=int, default=None,
                 help="torch.set_num_threads(N) (default: torch's own choice)")
  p.add_argument("--check", action=argparse.BooleanOptionalAction,
                 default=True, help="check agreement before timing")
  p.add_argument("--json", type=Path, default=None,
                 help="also write {shape: {candidate: ms}} to this file")
  args = p.parse_args(argv)
  shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
  names = [c.strip() for c in args.candidates.split(",") if c.strip()]
  for s in shapes:
    if s not in SHAPES:
      p.error(f"unknown shape {s!r}; choose from {', '.join(SHAPES)}")
  for c in names:
    if c not in ALL:
      p.error(f"unknown candidate {c!r}; choose from {', '.join(ALL)}")
  if args.json is not None and not args.json.parent.is_dir():
    p.error(f"--json: no folder {args.json.parent}")
  if torch is None:
    names = [c for c in names if c not in TORCH]
  elif args.torch_threads:
    torch.set_num_threads(args.torch_threads)

  print_environment(torch)
  if torch is not None:
    print(f"torch threads: {torch.get_num_threads()}, "
          f"cuda: {torch.cuda.is_available()}")
  print(f"repeats: {args.repeats}, sample ~{args.sample_ms} ms, statistic: "
        f"{args.stat}, float32")
  print()

  t_start = time.perf_counter()
  timed = {}
  stat = statistics.median if args.stat == "median" else min
  unit = "ms" if args.stat == "median" else "ms, min"
  for s in shapes:
    ms, temp_mib, devices, checked = bench_shape(
        SHAPES[s], names, args.repeats, args.sample_ms * 1e-3, stat,
        args.check)
    print("devices: " + ", ".join(
        sorted({f"{'torch' if k.startswith('torch') else 'jax'} on {v}"
                for k, v in devices.items()})))
    if checked:
      print(f"checked (first {CHECK_STEPS} steps): " + "; ".join(checked))
    print()
    print_table(s, SHAPES[s], ms, temp_mib, unit)
    timed[s] = ms
  print(f"(timed in {time.perf_counter() - t_start:.0f} s)")
  if args.json is not None:  # whole or not at all
    tmp = args.json.with_name(args.json.name + ".tmp")
    tmp.write_text(json.dumps(timed, indent=1) + "\n")
    tmp.replace(args.json)
  return 0


if __name__ == "__main__":
  sys.exit(main())
