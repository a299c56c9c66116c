"""The byte Transformer's training step against PyTorch, over rounds of processes.

Usage::

    python -m scripts.bench.transformer_peer [--rounds 4] [--shapes cpu,wide]
        [--variants post-layer,pre-layer,pre-rms,none]
        [--groups lnorm,lnorm_cores,torch,torch1,compile] [--repeats 5] [--sample_s 1]
        [--torch_attention sdpa|manual] [--lnorm_steps 10] [--no-check] [--json PATH]

One training step (forward, cross-entropy, backward, Adam) of the same
decoder-only byte model (lnorm/transformer.py: vocabulary 256, learned
positions, Xavier init, causal attention with separate W^Q, W^K, W^V, W^O,
a ReLU MLP, untied logits) in each library, at two shapes (L layers, width
D, H heads, F MLP units, T bytes, batch B):

* ``cpu``: configs/transformer.py's cpu preset, L 12, D 64, H 4, F 256, T 64,
  B 32 (637,056 parameters with pre-LN);
* ``wide``: L 6, D 256, H 4, F 1024, T 128, B 16.

Groups, each timed in a process of its own (``--groups``):

* ``lnorm``: experiments/transformer.py's ``train_step`` (Adam) as
  experiments/runner/loop.py runs it: ``--lnorm_steps`` updates a jitted
  call as one ``lax.scan`` (the loop scans the updates between two
  evaluations), the state donated, under the runner's allocator setting
  (``cli.keep_freed_memory``); a row's ms is a call's over its updates
  (``--lnorm_steps 1``: a call an update, the glibc setting still the
  runner's);
* ``lnorm_cores``: the same step with the batch split over one CPU device per
  core (``XLA_FLAGS=--xla_force_host_platform_device_count=<cores>``, the run
  loop's data parallelism, experiments/runner/parallel.py), as a user runs
  ``experiments.main`` with that flag: each core runs the whole step on its
  part of the batch, where one device leaves XLA to split each op;
* ``torch``: the same model in eager PyTorch at torch's default threads
  (one per core), ``torch.optim.Adam`` with its defaults; attention through
  ``F.scaled_dot_product_attention`` (``--torch_attention manual``: the
  matmuls, mask and softmax written out, as lnorm does);
* ``torch1``: the same at ``torch.set_num_threads(1)``;
* ``compile``: ``torch`` with the model and loss under ``torch.compile``.

A process times every variant of one shape, interleaved
(``timing.interleaved_samples``: a sample is the mean of enough calls to
last ``--sample_s``; each of ``--repeats`` repeats takes one sample of each
variant in a fresh order) and reports the median. Each round runs every
(shape, group) process, the groups' order reversed every other round. A
round's ratio is an lnorm group's median over a torch group's, both from that round;
the table gives, per shape and variant, each group's median ms over the
rounds and the median (range) of the per-round ratios. The host drifts
10-30% between processes: only the median over rounds is a verdict.

Before timing (``--no-check`` skips it), one process checks every (shape,
variant): the parameter counts of the two models are equal, and from lnorm's
initial parameters copied into torch, the first step's loss and gradient
norm, and the loss after one Adam update at the peak rate (no warm-up),
agree with torch's in float32 and with torch's in float64 (a reference
independent of both float32 paths) within a bound from the sizes
(``loss_tol``).

``--json PATH`` writes every round's medians, the check and the summary.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

if __package__ in (None, ""):  # run as a file
  sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

ROOT = Path(__file__).resolve().parents[2]
# (layers, d_model, heads, d_ff, T, batch)
SHAPES = {"cpu": (12, 64, 4, 256, 64, 32), "wide": (6, 256, 4, 1024, 128, 16)}
VARIANTS = ("post-layer", "pre-layer", "pre-rms", "none")
GROUPS = ("lnorm", "lnorm_cores", "torch", "torch1", "compile")
BASES = ("lnorm", "lnorm_cores")  # lnorm's groups; the others are torch's
# Per round: {shape: {variant: {group: ms}}}
Rounds = list[dict[str, dict[str, dict[str, float]]]]


def shape_name(shape: str) -> str:
  L, D, H, F, T, B = SHAPES[shape]
  return f"{L} layers, d {D}, {H} heads, ff {F}, T {T}, batch {B}"


def configure(shape: str | tuple, variant: str):
  """configs/transformer.py's cpu preset at the shape (a name of ``SHAPES``
  or its tuple) with the variant's norm (scripts.bench.transformer's
  ``<position>-<norm>`` or ``none``); the position table is T rows."""
  from scripts.bench import transformer as bench_tf  # pylint: disable=g-import-not-at-top
  L, D, H, F, T, B = SHAPES[shape] if isinstance(shape, str) else shape
  c = bench_tf.configure("cpu", L, variant)
  c.d_model, c.num_heads, c.d_ff, c.seq_len, c.max_len, c.batch_size = D, H, F, T, T, B
  return c


def batch(c) -> np.ndarray:
  """The timed batch: (B, T + 1) random bytes, the same in every process."""
  return np.random.default_rng(0).integers(0, 256, (c.batch_size, c.seq_len + 1),
                                           dtype=np.uint8)


# -- lnorm. ---------------------------------------------------------------------

def lnorm_state(c):
  """experiments/transformer.py's model, initial state (key 0), schedule and
  jitted step (state donated)."""
  import functools  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  from experiments import transformer as exp  # pylint: disable=g-import-not-at-top
  model = exp.create_model(c)
  state = exp.create_train_state(c, jax.random.key(0))
  schedule = exp.lr_schedule(float(c.learning_rate), int(c.warmup_steps), int(c.num_steps),
                             c.schedule)
  step = jax.jit(functools.partial(exp.train_step, model, schedule), donate_argnums=0)
  return model, state, schedule, step


def lnorm_runs(shape: str, variants: list[str], split: bool = False, steps: int = 1) -> dict:
  """``steps`` updates a call for each variant, as one ``lax.scan`` (the run
  loop scans the updates between two evaluations), the state donated;
  ``split``: the batch split over all devices (one a core, from XLA_FLAGS),
  the state replicated, as experiments/runner/loop.py runs with several
  devices."""
  import functools  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from experiments import transformer as exp  # pylint: disable=g-import-not-at-top
  from experiments.runner import parallel  # pylint: disable=g-import-not-at-top
  from scripts.bench import timing  # pylint: disable=g-import-not-at-top
  runs = {}
  for v in variants:
    c = configure(shape, v)
    model, state, schedule, _ = lnorm_state(c)
    one = functools.partial(exp.train_step, model, schedule)
    # The same batch at every update of a call (the step's work does not
    # depend on the bytes).
    x = jnp.broadcast_to(jnp.asarray(batch(c)), (steps, c.batch_size, c.seq_len + 1))
    if split:
      mesh = parallel.make_mesh(0)
      state = parallel.replicate(state, mesh)
      x = jax.device_put(x, jax.sharding.NamedSharding(
          mesh, jax.sharding.PartitionSpec(None, parallel.DATA)))
      one = parallel.data_parallel(one, mesh, c.batch_size)
    step = jax.jit(lambda s, xs, one=one: jax.lax.scan(one, s, xs), donate_argnums=0)
    runs[v] = timing.step_runner(step, state, x)
  return runs


def cores_env() -> dict[str, str]:
  """The environment of an ``lnorm_cores`` worker: one CPU device a core."""
  flags = os.environ.get("XLA_FLAGS", "")
  return {**os.environ, "XLA_FLAGS": f"{flags} --xla_force_host_platform_device_count="
                                     f"{os.cpu_count()}".strip()}


# -- PyTorch. -------------------------------------------------------------------

def torch_model(c, attention: str = "sdpa"):
  """lnorm/transformer.py's TransformerLM for config ``c`` (post, pre or no
  norm; layer or rms) in PyTorch, its parameters named as lnorm's paths with
  '.' for '/' (Dense ``kernel`` (in, out) is Linear ``weight`` (out, in);
  norms' ``gain`` is ``weight``; ``embed/embedding`` is ``embed.weight``),
  initialised as lnorm's (Xavier-uniform weights, zero biases, N(0, 1/D)
  embeddings and positions, W^O and W^2 times 1/sqrt(2 L) with
  ``scaled_residual_init``)."""
  import torch  # pylint: disable=g-import-not-at-top
  from torch import nn  # pylint: disable=g-import-not-at-top
  import torch.nn.functional as F  # pylint: disable=g-import-not-at-top

  D, H, L = c.d_model, c.num_heads, c.num_layers
  normed = c.norm != "none" and c.norm_position != "none"
  if c.positions != "learned" or c.activation != "relu" or c.qk_norm or c.dtype != "float32":
    raise ValueError("the torch peer has learned positions, ReLU, no qk_norm, float32")
  if normed and c.norm_position not in ("post", "pre"):
    raise ValueError(f"the torch peer has post, pre or no norm, not {c.norm_position!r}")

  def make_norm():
    if c.norm == "rms":
      return nn.RMSNorm(D, eps=c.eps)
    return nn.LayerNorm(D, eps=c.eps)

  class Attention(nn.Module):
    def __init__(self):
      super().__init__()
      self.query, self.key, self.value, self.out = (nn.Linear(D, D) for _ in range(4))

    def forward(self, x_BxTxD):
      B, T, _ = x_BxTxD.shape
      split = lambda y: y.view(B, T, H, D // H).transpose(1, 2)  # (B, H, T, K)
      q, k, v = (split(f(x_BxTxD)) for f in (self.query, self.key, self.value))
      if attention == "sdpa":
        o_BxHxTxK = F.scaled_dot_product_attention(q, k, v, is_causal=True)
      else:
        s_BxHxTxS = (q * (D // H) ** -0.5) @ k.transpose(-1, -2)
        causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        s_BxHxTxS = s_BxHxTxS.masked_fill(~causal, -1e30)
        o_BxHxTxK = torch.softmax(s_BxHxTxS, -1) @ v
      return self.out(o_BxHxTxK.transpose(1, 2).reshape(B, T, D))

  class MLP(nn.Module):
    def __init__(self):
      super().__init__()
      self.fc, self.proj = nn.Linear(D, c.d_ff or 4 * D), nn.Linear(c.d_ff or 4 * D, D)

    def forward(self, x):
      return self.proj(torch.relu(self.fc(x)))

  class Block(nn.Module):
    def __init__(self):
      super().__init__()
      self.attn, self.mlp = Attention(), MLP()
      if normed:
        self.norm_attn, self.norm_mlp = make_norm(), make_norm()

    def forward(self, x):
      if not normed:
        x = x + self.attn(x)
        return x + self.mlp(x)
      if c.norm_position == "pre":
        x = x + self.attn(self.norm_attn(x))
        return x + self.mlp(self.norm_mlp(x))
      x = self.norm_attn(x + self.attn(x))
      return self.norm_mlp(x + self.mlp(x))

  class LM(nn.Module):
    def __init__(self):
      super().__init__()
      self.embed = nn.Embedding(256, D)
      self.pos = nn.Parameter(torch.empty(c.max_len, D))
      for l in range(L):
        self.add_module(f"block_{l}", Block())
      if normed and c.norm_position == "pre":
        self.final_norm = make_norm()
      self.logits = nn.Linear(D, 256)
      self.blocks = [getattr(self, f"block_{l}") for l in range(L)]

    def forward(self, tokens_BxT):
      T = tokens_BxT.shape[1]
      x = (self.embed(tokens_BxT) + self.pos[:T]) * math.sqrt(D)
      for b in self.blocks:
        x = b(x)
      if hasattr(self, "final_norm"):
        x = self.final_norm(x)
      return self.logits(x)

  model = LM()
  with torch.no_grad():
    for name, p in model.named_parameters():
      if name in ("embed.weight", "pos"):
        nn.init.normal_(p, std=D ** -0.5)
      elif name.endswith("bias"):
        nn.init.zeros_(p)
      elif p.ndim == 2:
        nn.init.xavier_uniform_(p)
        if c.scaled_residual_init and name.endswith(("attn.out.weight", "mlp.proj.weight")):
          p.mul_((2 * L) ** -0.5)
      else:
        nn.init.ones_(p)  # norms' gains
  return model


def torch_name(path: str) -> tuple[str, bool]:
  """lnorm's parameter path ('block_0/attn/query/kernel') as the torch
  model's name, and whether the array is transposed ((in, out) -> (out, in))."""
  parts = path.split("/")
  leaf = parts[-1]
  if leaf == "embedding":
    return "embed.weight", False
  parts[-1] = {"kernel": "weight", "gain": "weight"}.get(leaf, leaf)
  return ".".join(parts), leaf == "kernel"


def copy_params(params, model) -> None:
  """lnorm's parameter tree into the torch model, every parameter of both."""
  import jax  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  named = dict(model.named_parameters())
  seen = set()
  for path, a in jax.tree_util.tree_leaves_with_path(params):
    name, transpose = torch_name("/".join(str(k.key) for k in path))
    a = np.array(a)  # a writable copy for torch
    t = named[name]
    with torch.no_grad():
      t.copy_(torch.from_numpy(np.ascontiguousarray(a.T if transpose else a)).to(t.dtype))
    seen.add(name)
  if seen != set(named):
    raise ValueError(f"torch parameters without an lnorm one: {sorted(set(named) - seen)}")


def torch_loss(model, x_BxT1):
  import torch.nn.functional as F  # pylint: disable=g-import-not-at-top
  logits = model(x_BxT1[:, :-1])
  return F.cross_entropy(logits.reshape(-1, 256), x_BxT1[:, 1:].reshape(-1))


def torch_runs(shape: str, variants: list[str], group: str, attention: str) -> dict:
  import torch  # pylint: disable=g-import-not-at-top
  if group == "torch1":
    torch.set_num_threads(1)
  torch.manual_seed(0)
  runs = {}
  for v in variants:
    c = configure(shape, v)
    model = torch_model(c, attention)
    opt = torch.optim.Adam(model.parameters(), lr=float(c.learning_rate))
    x = torch.from_numpy(batch(c).astype(np.int64))
    loss = torch_loss
    if group == "compile":
      loss = torch.compile(torch_loss)

    def step(model=model, opt=opt, x=x, loss=loss):
      opt.zero_grad(set_to_none=True)
      loss(model, x).backward()
      opt.step()
    runs[v] = step
  return runs


# -- The check: parameter counts and losses equal. ----------------------------

def loss_tol(c, loss: float) -> float:
  """How far a float32 loss may be from the float64 one: the rounding of a
  dot product of K terms grows as sqrt(K) eps (a random walk), through 2 L + 1
  matmul layers (each block's attention and MLP, the logits) of at most
  K = max(D, F, T) terms, relative to the loss's size; times 8 for the
  softmaxes, norms and the backward pass's sums that the update adds."""
  K = max(c.d_model, c.d_ff or 4 * c.d_model, c.seq_len)
  return 8 * float(np.finfo(np.float32).eps) * math.sqrt(K) * (2 * c.num_layers + 1) * max(
      abs(loss), 1.0)


def check_variant(c, attention: str = "sdpa") -> dict:
  """Counts, losses and gradient norms of the two models from lnorm's
  initial parameters: lnorm (float32), torch in float32 and float64. Loss
  ``loss0`` at the initial parameters, ``grad_norm0`` the global norm of its
  gradient, ``loss1`` after one Adam update at the peak rate (the warm-up off)."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  from lnorm import transformer as tr  # pylint: disable=g-import-not-at-top
  c = c.copy_and_resolve_references()
  c.warmup_steps = 0  # the first update at the peak rate: one that moves the loss
  _, state, schedule, step = lnorm_state(c)
  lr0 = float(schedule(0))
  n_lnorm = tr.num_params(state.params)
  params0 = jax.tree.map(np.asarray, state.params)
  x = batch(c)
  state1, m0 = step(state, jnp.asarray(x))
  _, m1 = step(state1, jnp.asarray(x))
  out = {"params_lnorm": n_lnorm,
         "lnorm": {"loss0": float(m0["nll"]), "grad_norm0": float(m0["grad_norm"]),
                   "loss1": float(m1["nll"])}}
  for name, dt in (("torch", torch.float32), ("torch float64", torch.float64)):
    model = torch_model(c, attention).to(dt)
    out["params_torch"] = sum(p.numel() for p in model.parameters())
    copy_params(params0, model)
    opt = torch.optim.Adam(model.parameters(), lr=lr0)
    xt = torch.from_numpy(x.astype(np.int64))
    loss0 = torch_loss(model, xt)
    loss0.backward()
    g = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in model.parameters()))
    opt.step()
    with torch.no_grad():
      loss1 = torch_loss(model, xt)
    out[name] = {"loss0": loss0.item(), "grad_norm0": g, "loss1": loss1.item()}
  return out


def check_errors(c, got: dict) -> list[str]:
  """What disagrees in ``check_variant``'s result: the counts, and each
  float32 path against float64 torch beyond ``loss_tol``."""
  errs = []
  if got["params_lnorm"] != got["params_torch"]:
    errs.append(f"parameters: lnorm {got['params_lnorm']:,}, torch {got['params_torch']:,}")
  ref = got["torch float64"]
  for path in ("lnorm", "torch"):
    for k in ("loss0", "grad_norm0", "loss1"):
      d, tol = abs(got[path][k] - ref[k]), loss_tol(c, ref[k])
      if not d <= tol:
        errs.append(f"{path} {k} {got[path][k]:.7g} vs float64 {ref[k]:.7g} (|d| {d:.2g} > {tol:.2g})")
  return errs


def run_check(shapes: list[str], variants: list[str], attention: str) -> dict:
  out = {}
  for s in shapes:
    for v in variants:
      c = configure(s, v)
      got = check_variant(c, attention)
      errs = check_errors(c, got)
      got["errors"] = errs
      out[f"{s} {v}"] = got
      d = abs(got["lnorm"]["loss0"] - got["torch"]["loss0"])
      print(f"check {s} {v}: {got['params_lnorm']:,} parameters each; loss lnorm "
            f"{got['lnorm']['loss0']:.7f}, torch {got['torch']['loss0']:.7f} (|d| {d:.1e}), "
            f"float64 {got['torch float64']['loss0']:.7f}; after one update |d| "
            f"{abs(got['lnorm']['loss1'] - got['torch']['loss1']):.1e}"
            + ("" if not errs else "; DISAGREE: " + "; ".join(errs)), flush=True)
  return out


# -- Rounds. ------------------------------------------------------------------

def summarize(rounds: Rounds) -> list[dict]:
  """Per (shape, variant, lnorm group, torch group) timed in every round:
  each group's median ms over the rounds, and the per-round ratios lnorm
  group / torch group, their median and range."""
  rows = []
  for shape in rounds[0] if rounds else []:
    for variant in rounds[0][shape]:
      per = [r.get(shape, {}).get(variant, {}) for r in rounds]
      timed = [g for g in rounds[0][shape][variant] if all(g in p for p in per)]
      for base in (b for b in BASES if b in timed):
        for g in (g for g in timed if g not in BASES):
          ratios = [p[base] / p[g] for p in per]
          rows.append({"shape": shape, "variant": variant, "base": base, "group": g,
                       "base_ms": statistics.median(p[base] for p in per),
                       "ms": statistics.median(p[g] for p in per),
                       "ratios": ratios, "median": statistics.median(ratios),
                       "at_or_under_1": sum(x <= 1.0 for x in ratios)})
  return rows


def table(rows: list[dict], groups: list[str]) -> str:
  """One line per (shape, variant, lnorm group): its ms, each torch group's,
  and the ratios lnorm group / torch group as median [range]."""
  tg = [g for g in groups if g not in BASES]
  head = ("| shape | variant | lnorm group | its ms | " + " | ".join(f"{g} ms" for g in tg)
          + " | " + " | ".join(f"/ {g}" for g in tg) + " |")
  lines = [head, "|---|---|---|" + "---:|" * (1 + 2 * len(tg))]
  by = {}
  for r in rows:
    by.setdefault((r["shape"], r["variant"], r["base"]), {})[r["group"]] = r
  for (shape, variant, base), rs in by.items():
    any_r = next(iter(rs.values()))
    ms = [f"{rs[g]['ms']:.1f}" if g in rs else "" for g in tg]
    rat = [f"{rs[g]['median']:.2f} [{min(rs[g]['ratios']):.2f}-{max(rs[g]['ratios']):.2f}]"
           if g in rs else "" for g in tg]
    lines.append(f"| {shape} | {variant} | {base} | {any_r['base_ms']:.1f} | "
                 + " | ".join(ms) + " | " + " | ".join(rat) + " |")
  return "\n".join(lines)


def run_worker(group: str, shape: str, variants: str, repeats: int, sample_s: float,
               attention: str, lnorm_steps: int = 1) -> dict[str, float]:
  """``group``'s median ms of each variant at ``shape``, in a fresh process."""
  with tempfile.TemporaryDirectory() as tmp:
    out = Path(tmp) / "ms.json"
    cmd = [sys.executable, "-m", "scripts.bench.transformer_peer", "--worker", group,
           "--shapes", shape, "--variants", variants, "--repeats", str(repeats),
           "--sample_s", str(sample_s), "--torch_attention", attention,
           "--lnorm_steps", str(lnorm_steps), "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                          env=cores_env() if group == "lnorm_cores" else None)
    if proc.returncode != 0 or not out.exists():
      tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
      raise RuntimeError(f"{group} at {shape} failed: {tail}")
    return json.loads(out.read_text())


def worker(args) -> int:
  from scripts.bench import timing  # pylint: disable=g-import-not-at-top
  variants = args.variants.split(",")
  shape = args.shapes
  per_call = 1
  if args.worker in BASES:
    from experiments.runner import cli  # pylint: disable=g-import-not-at-top
    cli.keep_freed_memory()  # the runner's allocator setting (BENCHMARKS.md, "The allocator")
    per_call = args.lnorm_steps
    runs = lnorm_runs(shape, variants, split=args.worker == "lnorm_cores", steps=per_call)
  else:
    runs = torch_runs(shape, variants, args.worker, args.torch_attention)
  samples = timing.interleaved_samples(runs, args.repeats, args.sample_s)
  ms = {v: 1e3 * statistics.median(s) / per_call for v, s in samples.items()}
  args.json.write_text(json.dumps(ms) + "\n")
  return 0


def write_json(path: Path, obj) -> None:
  tmp = path.with_name(path.name + ".tmp")
  tmp.write_text(json.dumps(obj, indent=1) + "\n")
  tmp.replace(path)


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--rounds", type=int, default=4)
  ap.add_argument("--shapes", default="cpu,wide")
  ap.add_argument("--variants", default=",".join(VARIANTS))
  ap.add_argument("--groups", default=",".join(GROUPS))
  ap.add_argument("--repeats", type=int, default=5)
  ap.add_argument("--sample_s", type=float, default=1.0)
  ap.add_argument("--torch_attention", choices=("sdpa", "manual"), default="sdpa")
  ap.add_argument("--lnorm_steps", type=int, default=10,
                  help="lnorm's updates a jitted call, one lax.scan (the run loop scans "
                       "the updates between evaluations: 100 at the cpu preset); 1: a call "
                       "an update")
  ap.add_argument("--no-check", dest="check", action="store_false")
  ap.add_argument("--json", type=Path, default=None)
  ap.add_argument("--worker", choices=GROUPS, default=None, help=argparse.SUPPRESS)
  args = ap.parse_args(argv)
  shapes = args.shapes.split(",")
  variants = args.variants.split(",")
  groups = args.groups.split(",")
  if args.rounds < 1:
    ap.error("--rounds: at least 1")
  if args.repeats < 1 or not args.sample_s > 0 or args.lnorm_steps < 1:
    ap.error("--repeats, --lnorm_steps: at least 1; --sample_s: more than 0")
  for flag, got, known in (("--shapes", shapes, SHAPES), ("--variants", variants, VARIANTS),
                           ("--groups", groups, GROUPS)):
    for x in got:
      if x not in known:
        ap.error(f"{flag}: unknown {x!r}; choose from {', '.join(known)}")
  if args.json is not None and not args.json.parent.is_dir():
    ap.error(f"--json: no folder {args.json.parent}")
  if args.worker is not None:
    return worker(args)
  if not set(groups) & set(BASES) or not set(groups) - set(BASES):
    ap.error("--groups: an lnorm group (lnorm, lnorm_cores) and at least one torch group")
  try:
    import torch  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    print("transformer_peer: torch is not installed (pip install torch==2.13.0, "
          "requirements-extras.txt)", file=sys.stderr)
    return 1

  import platform  # pylint: disable=g-import-not-at-top
  from scripts.bench import timing  # pylint: disable=g-import-not-at-top
  print(f"python {platform.python_version()}, torch {torch.__version__}, default threads "
        f"{torch.get_num_threads()}, attention {args.torch_attention}")
  print(timing.host_line())
  check = {}
  if args.check:
    check = run_check(shapes, variants, args.torch_attention)
    if any(v["errors"] for v in check.values()):
      print("transformer_peer: the two models disagree (above); nothing timed",
            file=sys.stderr)
      return 1

  rounds: Rounds = []
  t0 = time.time()
  for i in range(args.rounds):
    merged: dict = {}
    for shape in shapes:
      for g in groups if i % 2 == 0 else groups[::-1]:
        try:
          ms = run_worker(g, shape, ",".join(variants), args.repeats, args.sample_s,
                          args.torch_attention, args.lnorm_steps)
        except RuntimeError as e:
          print(f"transformer_peer: round {i + 1}: {e}", file=sys.stderr)
          return 1
        for v, t in ms.items():
          merged.setdefault(shape, {}).setdefault(v, {})[g] = t
    rounds.append(merged)
    print(f"round {i + 1} ({time.time() - t0:.0f} s): " + "; ".join(
        f"{s} {v} " + ", ".join(f"{g} {t:.1f}" for g, t in gs.items())
        for s, vs in merged.items() for v, gs in vs.items()), flush=True)

  rows = summarize(rounds)
  print(f"\n{args.rounds} rounds, each group in a process of its own; ms per step "
        "(medians over rounds), lnorm / group: median [range] of per-round ratios")
  for s in shapes:
    print(f"{s}: {shape_name(s)}")
  print(table(rows, groups))
  if args.json is not None:
    write_json(args.json, {"shapes": {s: SHAPES[s] for s in shapes}, "groups": groups,
                           "attention": args.torch_attention, "check": check,
                           "rounds": rounds, "summary": rows})
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
