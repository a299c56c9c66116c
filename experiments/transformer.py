"""A byte-level Transformer LM (lnorm/transformer.py): post-, pre-, peri-,
deep- or no norm, LayerNorm or RMSNorm, with or without qk-norm, with or
without a learning-rate warm-up, float32 or bfloat16 (issues 36 and 59;
configs/transformer.py).

Training windows are drawn at uniform random starts in the training bytes,
step ``s`` from ``fold_in(train key, s)``: the feed is a pure function of the
step, so a resumed run sees the very batches a straight one does. Validation
bpc is measured on a fixed set of windows spread evenly over the validation
split at every evaluation; test bpc on the same kind of set at the last step.

``grad_norms.json`` in the workdir holds the L2 norm of each layer's gradient
(Xiong et al. 2020, Figure 3) on one fixed training batch, at initialisation
(``init``) and after training (``final``). A run whose loss turns NaN or Inf
stops with the loop's NonFiniteLossError (exit status 3, the last good
checkpoint kept); it writes ``diverged.json`` (the steps in which the loss
went bad) and the initial gradient norms first, so that a study records the
divergence as a result.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax.training.train_state import TrainState

from experiments.runner import loop
from experiments.runner import parallel
from experiments.runner import train_state as ts
from experiments.runner.errors import ConfigError, NonFiniteLossError, at_least, check, off_or_more
from experiments.runner.workdir import write_atomic
from lnorm import transformer as tr
from lnorm.data import bytes_lm

SCHEDULES = ("constant", "cosine")
# Independent streams of the seed: init, the training windows, the batch the
# gradient norms are measured on.
KEYS = ("init", "train", "grad_norms")
GRAD_NORMS, DIVERGED = "grad_norms.json", "diverged.json"
# On a CPU host, one JAX device a core, the batch split over them (the runner's
# --cpu_devices): each core runs the whole step on its part, where one device
# leaves XLA to split each op and the small ones keep one core: 0.65-0.81x one
# device's time an update at the cpu preset, 12 or 2 layers, on 2 cores
# (BENCHMARKS.md, "The Transformer step against PyTorch"); measured on no
# larger host. The late digits differ from one device's.
CPU_DEVICES = -1


def validate(config: ml_collections.ConfigDict) -> None:
  """One ConfigError line for the first bad field, before anything runs."""
  try:  # the model's own checks (norm, norm_position, dtype on this platform, ...)
    tr.check_config(norm=config.norm, norm_position=config.norm_position,
                    positions=config.positions, dtype=config.dtype,
                    num_layers=config.num_layers, d_model=config.d_model,
                    num_heads=config.num_heads, d_ff=config.d_ff, max_len=config.max_len,
                    seq_len=config.seq_len, activation=config.activation, eps=config.eps,
                    qk_norm=config.qk_norm,
                    scaled_residual_init=config.scaled_residual_init)
  except ValueError as e:
    raise ConfigError(str(e)) from None
  check(isinstance(config.seed, int), f"seed={config.seed!r} must be an integer")
  check(config.data_source in bytes_lm.SOURCES,
        f"data_source={config.data_source!r} is not valid; choose one of: "
        f"{', '.join(bytes_lm.SOURCES)}")
  check(config.schedule in SCHEDULES,
        f"schedule={config.schedule!r} is not valid; choose one of: {', '.join(SCHEDULES)}")
  at_least(config, 1, "batch_size", "eval_batch_size")
  at_least(config, 0, "num_steps", "warmup_steps", "eval_every_steps", "steps_per_call",
           "num_eval_windows")
  check(config.learning_rate > 0,
        f"learning_rate={config.learning_rate} is not valid; it must be > 0")
  off_or_more(config, "grad_clip_norm")
  check(config.num_steps == 0 or config.warmup_steps <= config.num_steps,
        f"warmup_steps={config.warmup_steps} must be at most num_steps={config.num_steps}")


def create_model(config) -> tr.TransformerLM:
  return ts.model(tr.TransformerLM, num_layers=config.num_layers, d_model=config.d_model,
                  num_heads=config.num_heads, d_ff=config.d_ff, max_len=config.max_len,
                  positions=config.positions, norm=config.norm,
                  norm_position=config.norm_position, activation=config.activation,
                  dtype=config.dtype, eps=config.eps,
                  scaled_residual_init=config.scaled_residual_init, qk_norm=config.qk_norm)


@functools.lru_cache(maxsize=None)
def lr_schedule(peak: float, warmup_steps: int, num_steps: int, kind: str
                ) -> Callable[[jax.Array], jax.Array]:
  """The rate of update ``count`` (0-based): ``peak * (count + 1) / warmup``
  during the warm-up (so the first update is not wasted at 0), then constant
  or a cosine to 0 at ``num_steps``. Cached: one object per setting, so runs
  with equal settings share their compiled steps."""
  if kind == "cosine":
    after = optax.cosine_decay_schedule(peak, max(num_steps - warmup_steps, 1))
  else:
    after = optax.constant_schedule(peak)
  if not warmup_steps:
    return after

  def warm(count):
    return peak * jnp.minimum(count + 1, warmup_steps) / warmup_steps
  return optax.join_schedules([warm, after], [warmup_steps])


@functools.lru_cache(maxsize=None)
def optimizer(peak: float, warmup_steps: int, num_steps: int, kind: str, clip: float
              ) -> optax.GradientTransformation:
  """Adam (b1 0.9, b2 0.999, eps 1e-8, ts.adam's) on the schedule, after
  clipping the global gradient norm at ``clip`` unless it is 0."""
  tx = optax.adam(lr_schedule(peak, warmup_steps, num_steps, kind))
  return optax.chain(optax.clip_by_global_norm(clip), tx) if clip else tx


def create_train_state(config, rng: jax.Array) -> TrainState:
  model = create_model(config)
  params = ts.init_variables(model, rng, jnp.zeros((1, config.seq_len), jnp.int32),
                             fast_compile=True)["params"]
  tx = optimizer(float(config.learning_rate), int(config.warmup_steps), int(config.num_steps),
                 config.schedule, float(config.grad_clip_norm))
  return TrainState.create(apply_fn=model.apply, params=params, tx=tx)


def train_step(model: tr.TransformerLM, schedule: Callable, state: TrainState,
               windows_BxT1: jax.Array) -> tuple[TrainState, dict[str, jax.Array]]:
  """One Adam step on the mean next-byte NLL. Metrics: nll (nats), bpc, the
  global gradient norm before any clipping, and the step's learning rate."""
  (_, m), grads = jax.value_and_grad(
      lambda p: tr.loss(model, p, windows_BxT1), has_aux=True)(state.params)
  metrics = {"nll": m["nll"], "bpc": m["bpc"], "grad_norm": optax.tree.norm(grads),
             "lr": jnp.asarray(schedule(state.step), jnp.float32)}
  return state.apply_gradients(grads=grads), metrics


@dataclasses.dataclass(eq=False)  # hashed by identity, like loop.EpochShuffle
class RandomWindows:
  """The training feed: step s gets ``batch_size`` windows of ``seq_len + 1``
  bytes at uniform random starts drawn from ``fold_in(key, s)``. The bytes and
  the key are ``data`` (passed to the jitted call, not baked in)."""
  data: tuple[jax.Array, jax.Array]  # (training bytes uint8 [N], key)
  batch_size: int
  seq_len: int

  def plan(self, start: int, stop: int) -> dict[str, jax.Array]:
    return {"step": jnp.arange(start, stop, dtype=jnp.int32)}

  def batch(self, data, xs) -> jax.Array:
    bytes_N, key = data
    return bytes_lm.random_windows(jax.random.fold_in(key, xs["step"]), bytes_N,
                                   self.batch_size, self.seq_len)


def fixed_windows(split_N: np.ndarray, seq_len: int, count: int) -> np.ndarray:
  """``count`` (0 = all) non-overlapping windows spread evenly over the split
  (every book of it, not the first one's opening), (M, T + 1) uint8."""
  n = bytes_lm.num_windows(len(split_N), seq_len)
  idx = np.arange(n) if count <= 0 or count >= n else np.linspace(0, n - 1, count).astype(int)
  return bytes_lm.windows(np.asarray(split_N), idx, seq_len)


@functools.partial(jax.jit, static_argnums=(0, 3))
def evaluate_bpc(model: tr.TransformerLM, params: Any, windows_MxT1: jax.Array, chunk: int
                 ) -> jax.Array:
  """Bits per byte over all M * T targets of the windows, in chunks of
  ``chunk`` windows (the last one padded and weighted out)."""
  M = windows_MxT1.shape[0]
  w_CxB1, wt_CxB = ts.padded_chunks(windows_MxT1, M, chunk)

  def chunk_sum(args):
    x_BxT1, wt_B = args
    logits = model.apply({"params": params}, x_BxT1[:, :-1])
    return jnp.sum(tr.nll(logits, x_BxT1[:, 1:]).sum(-1) * wt_B)
  total = jnp.sum(jax.lax.map(chunk_sum, (w_CxB1, wt_CxB)))
  return total / (M * (windows_MxT1.shape[1] - 1)) / math.log(2)


@functools.partial(jax.jit, static_argnums=0)
def _grads(model: tr.TransformerLM, params: Any, windows_BxT1: jax.Array) -> Any:
  return tr.loss_grads(model, params, windows_BxT1)


def layer_grad_norms(model: tr.TransformerLM, params: Any, windows_BxT1: jax.Array
                     ) -> dict[str, Any]:
  """Each layer's gradient norm (``layers``: embed, pos, block_0.., final_norm,
  logits), and per block those of W^2 (``w2``, Xiong et al.'s
  ``mlp/proj/kernel``), of W^O (``wo``) and of the whole block (``blocks``)."""
  g = _grads(model, params, windows_BxT1)
  as_list = lambda a: [float(v) for v in np.asarray(a)]
  return {"layers": {k: float(v) for k, v in tr.grad_norms(g, 1).items()},
          "w2": as_list(tr.block_grad_norms(g, "mlp/proj/kernel")),
          "wo": as_list(tr.block_grad_norms(g, "attn/out/kernel")),
          "blocks": as_list(tr.block_grad_norms(g, ""))}


def write_json(path: Path, obj: Any) -> None:
  write_atomic(path, json.dumps(obj, indent=1) + "\n")


def diverged_record(message: str, num_steps: int) -> dict[str, Any]:
  """What diverged.json holds: the loop's message, and the steps in which a
  training metric went non-finite (the loop checks them at each evaluation,
  so it knows the interval, not the one step)."""
  m = re.search(r"in steps (\d+)-(\d+)", message)
  first, last = (int(m.group(1)), int(m.group(2))) if m else (None, None)
  return {"diverged": True, "first_step": first, "last_step": last, "num_steps": num_steps,
          "message": message}


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> TrainState:
  validate(config)
  norms: dict[str, Any] = {}  # the gradient norms, filled by setup and finish

  def setup() -> loop.Task:
    data = bytes_lm.load(config.data_source, config.data_dir or None)
    data.check(config.seq_len)
    keys = ts.named_keys(config.seed, *KEYS)
    model = create_model(config)
    state = create_train_state(config, keys["init"])
    # Xiong et al.'s Figure 3: the gradients at initialisation, on one fixed
    # training batch (the same one after training).
    probe = bytes_lm.random_windows(keys["grad_norms"], jnp.asarray(data.train),
                                    config.batch_size, config.seq_len)
    norms.update(source=data.source, data=data.description,
                 batch=f"{config.batch_size} training windows of {config.seq_len + 1} bytes "
                       "at random starts (the seed's grad_norms key)",
                 init={"step": 0, **layer_grad_norms(model, state.params, probe)})
    splits = {s: jnp.asarray(fixed_windows(getattr(data, s), config.seq_len,
                                           config.num_eval_windows)) for s in ("valid", "test")}
    chunk = lambda w: min(config.eval_batch_size, w.shape[0])

    def evaluate(state: TrainState) -> dict[str, float]:
      out = {"valid_bpc": float(evaluate_bpc(model, state.params, splits["valid"],
                                             chunk(splits["valid"])))}
      if int(state.step) >= config.num_steps:  # the test set once, at the end
        out["test_bpc"] = float(evaluate_bpc(model, state.params, splits["test"],
                                             chunk(splits["test"])))
      return out

    def finish(state: TrainState, wd: Path) -> None:
      norms["final"] = {"step": int(state.step),
                        **layer_grad_norms(model, state.params, probe)}
      write_json(wd / GRAD_NORMS, norms)
      (wd / DIVERGED).unlink(missing_ok=True)  # an earlier stop's, if a resume got past it

    schedule = lr_schedule(float(config.learning_rate), int(config.warmup_steps),
                           int(config.num_steps), config.schedule)
    feed = RandomWindows((jnp.asarray(data.train), keys["train"]), config.batch_size,
                         config.seq_len)
    return loop.Task(
        state=state, train_step=functools.partial(train_step, model, schedule), feed=feed,
        evaluate=evaluate, num_steps=config.num_steps, steps_per_epoch=None,
        examples_per_step=config.batch_size, show=("train_bpc", "valid_bpc"), finish=finish)

  try:
    return loop.run(config, workdir, setup)
  except NonFiniteLossError as e:
    # A divergence is a result: record it (and the step-0 gradient norms)
    # where the study reads its runs, then stop as the loop does.
    if parallel.is_primary() and Path(workdir, "config.json").exists():
      write_json(Path(workdir) / DIVERGED, diverged_record(str(e), config.num_steps))
      if norms:
        write_json(Path(workdir) / GRAD_NORMS, norms)
    raise
