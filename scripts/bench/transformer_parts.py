"""Where the byte Transformer's training step spends its time, part by part.

Usage::

    python -m scripts.bench.transformer_parts [--shape cpu|wide] [--variant pre-layer]
        [--repeats 20] [--parts NAME,...] [--cpus 0] [--json PATH]
    python -m scripts.bench.transformer_parts --rounds 3 [...]  # 1 CPU against all

At a shape of ``scripts.bench.transformer_peer`` (B batch, T bytes, D width,
H heads of K = D / H, F MLP units, L blocks), it times, interleaved in one
process (``timing.samples_and_cores``: one call of each part a repeat, in a
fresh order), each part's forward and backward as one jitted call (the
output and the gradients with respect to the inputs and parameters, a fixed
random cotangent), with lnorm's own modules and primitives where the part is
one:

* ``step``: the whole training step, experiments/transformer.py's
  ``train_step`` jitted with the state donated (as the run loop does);
* ``attention``: one block's ``CausalSelfAttention`` (lnorm/transformer.py),
  and its pieces as the module computes them: ``attn QKVO``, the four
  (B T, D) x (D, D) matmuls; ``attn scores``, the per-head
  ``einsum('bthk,bshk->bhts')``; ``attn softmax``, the causal mask and the
  float32 softmax over (B, H, T, T); ``attn PV``, ``einsum('bhts,bshk->bthk')``;
* ``mlp``: one block's ``MLP`` ((B T, D) x (D, F), ReLU, (B T, F) x (F, D));
* ``norm``: one ``Norm`` of the variant over (B, T, D);
* ``embed``: the token embedding times sqrt(D) plus the positions;
* ``logits+loss``: the output layer (D, 256) and the mean NLL (``tr.nll``);
* ``adam``: the optimizer's update of every parameter and the gradient's
  global norm (``TrainState.apply_gradients``, state donated).

The table gives each part's median ms a call, how many the step makes
(L attention blocks, 2 L + 1 norms for pre-LN, ...), its total ms in a step
and share of the step, GFLOP/s of the matmul parts (a multiply-add is 2
flops; backward is twice forward), and the cores it keeps busy (process CPU
time over wall time, medians). ``sum of parts`` against ``step`` says what
fusing across parts saves (or costs).

``--cpus 0`` pins this process to CPU 0 before JAX starts (XLA sizes its
thread pool by the CPUs it may use). ``--rounds N`` runs N rounds of two
such processes, one on CPU 0 and one on all CPUs, in alternating order, and
gives each part's median ms on both and the speed-up the second CPU brings
(1-CPU ms over all-CPU ms; 2 would be perfect on two cores).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
import statistics
import subprocess
import sys
import tempfile

if __package__ in (None, ""):  # run as a file
  sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

ROOT = Path(__file__).resolve().parents[2]
PARTS = ("step", "attention", "attn QKVO", "attn scores", "attn softmax", "attn PV", "mlp",
         "norm", "embed", "logits+loss", "adam")
# The parts that together make the step (attention's pieces stand for it).
SUM = ("attn QKVO", "attn scores", "attn softmax", "attn PV", "mlp", "norm", "embed",
       "logits+loss", "adam")


def counts(c) -> dict[str, int]:
  """How many calls of each part one step makes."""
  L = c.num_layers
  normed = c.norm != "none" and c.norm_position != "none"
  norms = (2 * L + (c.norm_position in ("pre", "peri"))) if normed else 0
  per_block = ("attention", "attn QKVO", "attn scores", "attn softmax", "attn PV", "mlp")
  return {p: (L if p in per_block else norms if p == "norm" else 1) for p in PARTS}


def flops(c) -> dict[str, float]:
  """Forward and backward flops of the matmul parts (3 matmuls' worth each)."""
  B, T, D, F = c.batch_size, c.seq_len, c.d_model, c.d_ff or 4 * c.d_model
  fb = lambda mac: 3 * 2 * mac
  f = {"attn QKVO": fb(4 * B * T * D * D), "attn scores": fb(B * T * T * D),
       "attn PV": fb(B * T * T * D), "mlp": fb(2 * B * T * D * F),
       "logits+loss": fb(B * T * D * 256)}
  f["attention"] = f["attn QKVO"] + f["attn scores"] + f["attn PV"]
  return f


def part_runs(c, wanted) -> dict:
  """{part: a call that runs it once and waits}, for the parts in ``wanted``."""
  import math  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  from experiments import transformer as exp  # pylint: disable=g-import-not-at-top
  from lnorm import transformer as tr  # pylint: disable=g-import-not-at-top
  from scripts.bench import timing  # pylint: disable=g-import-not-at-top
  from scripts.bench import transformer_peer as peer  # pylint: disable=g-import-not-at-top

  B, T, D, H, F = c.batch_size, c.seq_len, c.d_model, c.num_heads, c.d_ff or 4 * c.d_model
  K = D // H
  key = [jax.random.key(1)]

  def next_key():
    key[0], k = jax.random.split(key[0])
    return k
  rand = lambda *shape: jax.random.normal(next_key(), shape, jnp.float32)
  x_BxTxD = rand(B, T, D)

  def fwd_bwd(f, *args):
    """A call of f's output and its VJP at args, on a random cotangent (the
    output is returned too: else XLA drops the forward matmuls the backward
    does not need)."""
    ct = jax.tree.map(lambda a: jax.random.normal(next_key(), a.shape, a.dtype),
                      jax.eval_shape(f, *args))

    @jax.jit
    def g(ct, *args):
      y, vjp = jax.vjp(f, *args)
      return y, vjp(ct)
    return lambda: jax.block_until_ready(g(ct, *args))

  def module(m):
    p = m.init(jax.random.key(0), x_BxTxD)["params"]
    return fwd_bwd(lambda p, x: m.apply({"params": p}, x), p, x_BxTxD)

  runs = {}
  if "step" in wanted:
    _, state, _, step = peer.lnorm_state(c)
    runs["step"] = timing.step_runner(step, state, jnp.asarray(peer.batch(c)))
  if "attention" in wanted:
    runs["attention"] = module(tr.CausalSelfAttention(H, name="attn"))
  if "attn QKVO" in wanted:
    ws = [rand(D, D) * D ** -0.5 for _ in range(4)]
    bs = [jnp.zeros(D) for _ in range(4)]
    runs["attn QKVO"] = fwd_bwd(
        lambda w, b, x, o: ([x @ wi + bi for wi, bi in zip(w[:3], b[:3])], o @ w[3] + b[3]),
        ws, bs, x_BxTxD, rand(B, T, D))
  if "attn scores" in wanted:
    runs["attn scores"] = fwd_bwd(lambda q, k: jnp.einsum("bthk,bshk->bhts", q, k),
                                  rand(B, T, H, K), rand(B, T, H, K))

  def softmax(s_BxHxTxS):  # as CausalSelfAttention does it
    causal_TxS = jnp.tril(jnp.ones((T, T), bool))
    s_BxHxTxS = jnp.where(causal_TxS[None, None], s_BxHxTxS, -1e30)
    return jax.nn.softmax(s_BxHxTxS, axis=-1)
  if "attn softmax" in wanted:
    runs["attn softmax"] = fwd_bwd(softmax, rand(B, H, T, T))
  if "attn PV" in wanted:
    runs["attn PV"] = fwd_bwd(lambda p, v: jnp.einsum("bhts,bshk->bthk", p, v),
                              jax.nn.softmax(rand(B, H, T, T)), rand(B, T, H, K))
  if "mlp" in wanted:
    runs["mlp"] = module(tr.MLP(F, name="mlp"))
  if "norm" in wanted and c.norm != "none":
    runs["norm"] = module(tr.Norm(c.norm, c.eps))
  if "embed" in wanted:
    e, pos = rand(256, D) * D ** -0.5, rand(c.max_len, D) * D ** -0.5
    tok = jnp.asarray(peer.batch(c)[:, :-1], jnp.int32)
    runs["embed"] = fwd_bwd(lambda e, pos: e[tok] * math.sqrt(D) + pos[None, :T] * math.sqrt(D),
                            e, pos)
  if "logits+loss" in wanted:
    w, b = rand(D, 256) * D ** -0.5, jnp.zeros(256)
    y = jnp.asarray(peer.batch(c)[:, 1:], jnp.int32)
    runs["logits+loss"] = fwd_bwd(lambda w, b, x: tr.nll(x @ w + b, y).mean(), w, b, x_BxTxD)
  if "adam" in wanted:
    state = exp.create_train_state(c, jax.random.key(0))
    grads = jax.tree.map(lambda p: jax.random.normal(next_key(), p.shape) * 1e-2, state.params)
    update = jax.jit(lambda s, g: (s.apply_gradients(grads=g), optax.tree.norm(g)),
                     donate_argnums=0)
    box = [state]

    def adam():
      box[0], n = update(box[0], grads)
      jax.block_until_ready(n)
    runs["adam"] = adam
  return runs


def measure(c, wanted, repeats) -> dict:
  """Each part's median ms and cores busy: {part: {"ms": .., "cores": ..}}."""
  from scripts.bench import timing  # pylint: disable=g-import-not-at-top
  samples, busy = timing.samples_and_cores(part_runs(c, wanted), repeats)
  return {p: {"ms": 1e3 * statistics.median(s), "cores": statistics.median(busy[p])}
          for p, s in samples.items()}


def print_table(c, got: dict, one_cpu: dict | None = None) -> None:
  n, fl = counts(c), flops(c)
  step = got.get("step", {}).get("ms")
  head = "| part | ms a call | calls a step | ms a step | share of step | GFLOP/s | cores busy |"
  rule = "|---|---:|---:|---:|---:|---:|---:|"
  if one_cpu is not None:
    head += " 1-CPU ms a call | speed-up from the 2nd CPU |"
    rule += "---:|---:|"
  print(head)
  print(rule)
  total = 0.0
  for p in PARTS:
    if p not in got:
      continue
    ms, k = got[p]["ms"], n[p]
    if p in SUM:
      total += ms * k
    share = f"{100 * ms * k / step:.0f}%" if step and p != "step" else ""
    rate = f"{fl[p] / ms / 1e6:.0f}" if p in fl else ""
    line = (f"| {p} | {ms:.3f} | {k} | {ms * k:.2f} | {share} | {rate} "
            f"| {got[p]['cores']:.2f} |")
    if one_cpu is not None and p in one_cpu:
      line += f" {one_cpu[p]['ms']:.3f} | {one_cpu[p]['ms'] / ms:.2f} |"
    print(line)
  if all(p in got for p in SUM if not (p == "norm" and n["norm"] == 0)):
    share = f"{100 * total / step:.0f}%" if step else ""
    print(f"| sum of parts | | | {total:.2f} | {share} | | |")


def run_child(args, cpus: str) -> dict:
  with tempfile.TemporaryDirectory() as tmp:
    out = Path(tmp) / "parts.json"
    cmd = [sys.executable, "-m", "scripts.bench.transformer_parts", "--shape", args.shape,
           "--variant", args.variant, "--repeats", str(args.repeats), "--cpus", cpus,
           "--json", str(out)] + (["--parts", args.parts] if args.parts else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0 or not out.exists():
      tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
      raise RuntimeError(f"--cpus {cpus} failed: {tail}")
    return json.loads(out.read_text())["parts"]


def main(argv=None) -> int:
  from scripts.bench import transformer_peer as peer  # pylint: disable=g-import-not-at-top
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--shape", choices=tuple(peer.SHAPES), default="cpu")
  ap.add_argument("--variant", choices=peer.VARIANTS, default="pre-layer")
  ap.add_argument("--repeats", type=int, default=20)
  ap.add_argument("--parts", default="", help="comma-separated parts (default: all)")
  ap.add_argument("--cpus", default="", help="pin to these CPUs, e.g. 0 or 0,1")
  ap.add_argument("--rounds", type=int, default=0,
                  help="rounds of a 1-CPU and an all-CPU process (0: time here)")
  ap.add_argument("--json", type=Path, default=None)
  args = ap.parse_args(argv)
  wanted = [p for p in args.parts.split(",") if p] or list(PARTS)
  for p in wanted:
    if p not in PARTS:
      ap.error(f"--parts: unknown {p!r}; choose from {', '.join(PARTS)}")
  if args.repeats < 1 or args.rounds < 0:
    ap.error("--repeats: at least 1; --rounds: 0 or more")
  if args.json is not None and not args.json.parent.is_dir():
    ap.error(f"--json: no folder {args.json.parent}")
  cpus = set()
  if args.cpus:
    try:
      cpus = {int(x) for x in args.cpus.split(",")}
    except ValueError:
      ap.error(f"--cpus: CPU numbers joined by ',', not {args.cpus!r}")
    if not cpus <= os.sched_getaffinity(0):
      ap.error(f"--cpus: this process may use CPUs {sorted(os.sched_getaffinity(0))}")
    os.sched_setaffinity(0, cpus)  # before JAX makes its thread pool
  c = peer.configure(args.shape, args.variant)
  print(f"{args.shape}: {peer.shape_name(args.shape)}, {args.variant}; "
        f"CPUs {sorted(os.sched_getaffinity(0))}")

  if args.rounds:
    everyone = ",".join(str(i) for i in sorted(os.sched_getaffinity(0)))
    first = str(min(os.sched_getaffinity(0)))
    rounds = []
    for i in range(args.rounds):
      order = [everyone, first] if i % 2 == 0 else [first, everyone]
      got = {}
      for cp in order:
        try:
          got[cp] = run_child(args, cp)
        except RuntimeError as e:
          print(f"transformer_parts: round {i + 1}: {e}", file=sys.stderr)
          return 1
      rounds.append({"all": got[everyone], "one": got[first]})
      print(f"round {i + 1}: step {got[everyone].get('step', {}).get('ms', 0):.1f} ms on all "
            f"CPUs, {got[first].get('step', {}).get('ms', 0):.1f} on one", flush=True)
    med = lambda which: {p: {k: statistics.median(r[which][p][k] for r in rounds)
                             for k in ("ms", "cores")} for p in rounds[0][which]}
    all_cpus, one_cpu = med("all"), med("one")
    print(f"\nmedians over {args.rounds} rounds; ms on all CPUs, cores busy there, "
          "and on CPU 0 alone")
    print_table(c, all_cpus, one_cpu)
    result = {"rounds": rounds, "all": all_cpus, "one": one_cpu}
  else:
    result = {"parts": measure(c, wanted, args.repeats)}
    print_table(c, result["parts"])
  if args.json is not None:
    tmp = args.json.with_name(args.json.name + ".tmp")
    tmp.write_text(json.dumps({"shape": args.shape, "variant": args.variant, **result},
                              indent=1) + "\n")
    tmp.replace(args.json)
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
