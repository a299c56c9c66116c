"""Handwriting synthesis on IAM-OnDB (section 6.5, Figure 5): Graves' network
(lnorm/handwriting.py) with and without layer norm, its NLL in nats per line.

Training: each step takes ``batch_size`` training lines, each cut to its first
``max_len`` rows (its whole text kept), and one Adam update on the NLL per
point of the batch. Clipping: the derivatives with respect to the network's
outputs are clipped to [-output_grad_clip, output_grad_clip] as Graves does
(section 5; his bound 100 is for the NLL summed over the line, so the bound
here is scaled by the batch's points), and instead of his [-10, 10] on the
LSTM derivatives, which the fused sequence LSTM does not expose, the
parameter gradients are clipped to a global norm of ``grad_clip_norm``.

Evaluation: the NLL of whole lines (``eval_max_len`` 0) or of their first
``eval_max_len`` rows, summed over each line's rows and averaged over
``num_eval`` lines of the valid and test splits (``valid_nll``, nats per
line) and per row (``valid_nll_point``). At the end, ``samples.png`` (test
lines beside the network writing their texts, with and without Graves' bias)
and ``attention.png`` (the window phi(t, u), characters against time) go into
the workdir.
"""

from __future__ import annotations

import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax.training.train_state import TrainState

from experiments.runner import figures
from experiments.runner import loop
from experiments.runner import train_state as ts
from experiments.runner.errors import at_least, check, check_common, off_or_more, positive
from lnorm import handwriting as hw
from lnorm.data import iam_ondb

EVAL_SPLITS = ("valid", "test")
_BUCKET = 250  # eval batches are padded to a multiple of this: a few shapes to compile


def validate(config: ml_collections.ConfigDict) -> None:
  check_common(config, hw.accept)
  at_least(config, 1, "hidden", "num_layers", "num_window", "num_mixtures", "max_len",
           "eval_batch_size")
  at_least(config, 0, "num_train", "num_eval", "eval_max_len", "num_samples", "num_steps")
  positive(config, "eps")
  off_or_more(config, "grad_clip_norm", "output_grad_clip")
  check(config.sample_bias >= 0, f"sample_bias={config.sample_bias} must be 0 or more")


def load_data(config) -> iam_ondb.IamOnDB:
  ds = iam_ondb.load(config.data_dir or None)
  print(ds.counts(), flush=True)
  n = min(config.num_train or len(ds.train), len(ds.train))
  check(n >= config.batch_size,
        f"batch_size={config.batch_size} is larger than the {n} training lines")
  return ds


def create_model(config) -> hw.Synthesis:
  return ts.model(hw.Synthesis, **_fields(config))


def create_step_model(config) -> hw.SynthesisStep:
  return ts.model(hw.SynthesisStep, **_fields(config))


def _fields(config) -> dict:
  return dict(hidden=config.hidden, num_layers=config.num_layers, num_window=config.num_window,
              num_mixtures=config.num_mixtures, num_chars=iam_ondb.NUM_CHARS, norm=config.norm,
              eps=config.eps)





def create_train_state(config, rng: jax.Array) -> TrainState:
  model = create_model(config)
  params = ts.init_variables(model, rng, jnp.zeros((1, 2, 3)),
                             jnp.zeros((1, 2), jnp.int32))["params"]
  return TrainState.create(apply_fn=model.apply, params=params,
                           tx=ts.adam(config.learning_rate, config.grad_clip_norm))


def line_nll(model: hw.Synthesis, params, batch: dict, clip: jax.Array | None = None
             ) -> jax.Array:
  """NLL of each line's rows, summed (B,), nats. ``clip`` bounds the
  derivatives w.r.t. the network's outputs."""
  out = model.apply({"params": params}, batch["inputs"], batch["chars"], batch["char_mask"],
                    batch["mask"])["out"]
  if clip is not None:
    out = hw.clip_gradient(out, clip)
  per_point = hw.nll(out, batch["targets"], model.num_mixtures)
  return jnp.sum(jnp.where(batch["mask"], per_point, 0.0), -1)


def train_step(model: hw.Synthesis, output_grad_clip: float, state: TrainState, batch: dict
               ) -> tuple[TrainState, dict[str, jax.Array]]:
  points = jnp.maximum(jnp.sum(batch["mask"]), 1).astype(jnp.float32)
  clip = jnp.float32(output_grad_clip) / points if output_grad_clip else None

  def loss_fn(params):
    nll_B = line_nll(model, params, batch, clip)
    return jnp.sum(nll_B) / points, jnp.mean(nll_B)

  (loss, per_line), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
  return state.apply_gradients(grads=grads), {
      "nll_point": loss, "nll": per_line, "grad_norm": optax.global_norm(grads)}


@functools.partial(jax.jit, static_argnums=0)
def eval_step(model: hw.Synthesis, params, batch: dict) -> jax.Array:
  """[sum of line NLLs, rows] of a padded batch (lines with no rows add 0)."""
  return jnp.stack([jnp.sum(line_nll(model, params, batch)),
                    jnp.sum(batch["mask"]).astype(jnp.float32)])


def eval_batches(split: iam_ondb.Split, num: int, max_len: int, batch_size: int) -> list[dict]:
  """The first ``num`` lines (0 = all), sorted by length, in padded batches."""
  n = min(num or len(split), len(split))
  lengths = split.lengths()[:n]
  if max_len:
    lengths = np.minimum(lengths, max_len)
  order = np.argsort(lengths, kind="stable")
  out = []
  for a in range(0, n, batch_size):
    idx = order[a:a + batch_size]
    T = int(-(-lengths[idx].max() // _BUCKET) * _BUCKET)
    b = iam_ondb.batch(split, idx, T)
    if max_len:
      b["mask"][:, max_len:] = False
    if len(idx) < batch_size:  # a fixed batch size: fewer shapes to compile
      b = {k: np.concatenate([v, np.zeros((batch_size - len(idx),) + v.shape[1:], v.dtype)])
           for k, v in b.items()}
    out.append(b)
  return out


def evaluate(model: hw.Synthesis, params, batches: list[dict], num_lines: int) -> dict:
  total = sum(np.asarray(eval_step(model, params, b), np.float64) for b in batches)
  return {"nll": total[0] / max(num_lines, 1), "nll_point": total[0] / max(total[1], 1)}


def train_arrays(split: iam_ondb.Split, num: int, max_len: int) -> dict[str, np.ndarray]:
  n = min(num or len(split), len(split))
  return iam_ondb.batch(split, np.arange(n), max_len,
                        max([len(t) for t in split.texts[:n]] + [1]))


def feed(data: dict, train_key: jax.Array, batch_size: int) -> loop.EpochShuffle:
  return loop.EpochShuffle(
      data=data, num_examples=int(data["mask"].shape[0]), batch_size=batch_size,
      shuffle_key=lambda epoch: jax.random.fold_in(train_key, epoch),
      batch=lambda d, xs: jax.tree.map(lambda a: a[xs["idx"]], d))


# ------------------------------------------------------------------ samples


def write_texts(config, params, texts: list[str], bias: float, key: jax.Array
                ) -> dict[str, np.ndarray]:
  ids = [iam_ondb.encode(t) for t in texts]
  U = max(len(i) for i in ids)
  chars = np.zeros((len(ids), U), np.int32)
  cmask = np.zeros((len(ids), U), bool)
  for k, i in enumerate(ids):
    chars[k, :len(i)], cmask[k, :len(i)] = i, True
  steps = int(config.sample_points_per_char * U + 50)
  r = hw.sample(create_step_model(config), {"params": params}, key, jnp.asarray(chars),
                jnp.asarray(cmask), steps, jnp.float32(bias))
  return {k: np.asarray(v) for k, v in r.items()}


def _draw_line(ax, rows: np.ndarray, scale: np.ndarray, title: str) -> None:
  for s in iam_ondb.to_points(rows, scale):
    ax.plot(s[:, 0], -s[:, 1], "k-", linewidth=1)  # y grows downwards on the board
  ax.set_aspect("equal")
  ax.set_axis_off()
  ax.set_title(title, fontsize=8, loc="left")


def save_samples(state: TrainState, config, ds: iam_ondb.IamOnDB, directory: str | Path
                 ) -> tuple[Path, Path]:
  """samples.png: per test line, the real line, then the network writing its
  text unbiased and with bias ``sample_bias``; attention.png: phi(t, u) of the
  first text's biased sample."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  directory = Path(directory)
  n = min(config.num_samples, len(ds.test))
  texts = [ds.test.texts[i] for i in range(n)]
  key = jax.random.fold_in(jax.random.key(config.seed), 7)
  drawn = {b: write_texts(config, state.params, texts, b, jax.random.fold_in(key, k))
           for k, b in enumerate((0.0, float(config.sample_bias)))}
  fig, axes = plt.subplots(3 * n, 1, figsize=(10, 1.6 * 3 * n), squeeze=False)
  for i, text in enumerate(texts):
    _draw_line(axes[3 * i, 0], ds.test.line(i), ds.scale, f"test line {ds.test.ids[i]}: {text}")
    for j, (b, r) in enumerate(drawn.items(), 1):
      end = max(int(r["end"][i]), 1)
      _draw_line(axes[3 * i + j, 0], r["rows"][i, :end], ds.scale,
                 f"norm={config.norm}, bias {b:g}: {text}")
  fig.tight_layout()
  samples = directory / "samples.png"
  fig.savefig(samples, dpi=80)
  plt.close(fig)

  r = drawn[float(config.sample_bias)]
  attention = plot_attention(r["phi"][0, :max(int(r["end"][0]), 1), :len(texts[0])], texts[0],
                             f"Soft window phi(t, u) while writing a test line's text, "
                             f"norm={config.norm}, bias {config.sample_bias:g}",
                             directory / "attention.png")
  return samples, attention


def plot_attention(phi_TxU: np.ndarray, text: str, title: str, path: Path) -> Path:
  """The window's weight on each character (a row, labelled with it) at each
  pen point, at a size where every label reads: 0.22 in (24 px) a character."""
  plt = figures.pyplot()
  U = len(text)
  fig, ax = plt.subplots(figsize=(10, max(3.0, 0.22 * U + 1.2)))
  im = ax.imshow(phi_TxU.T, aspect="auto", origin="lower", cmap="Greys",
                 interpolation="nearest", vmin=0.0)
  ax.set_yticks(range(U), [repr(c)[1:-1] if c != " " else "␣" for c in text], fontsize=9)
  ax.set(xlabel="pen point t (row of the written line)", ylabel="character u of the text",
         title=title)
  fig.colorbar(im, ax=ax, label="window weight phi(t, u)")
  fig.tight_layout()
  return figures.save(fig, path, dpi=figures.DPI)


# ------------------------------------------------------------------ the run


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> TrainState:
  validate(config)

  def setup() -> loop.Task:
    ds = load_data(config)
    data = {k: jnp.asarray(v) for k, v in train_arrays(ds.train, config.num_train,
                                                       config.max_len).items()}
    keys = ts.named_keys(config.seed, "init", "train")
    model = create_model(config)
    train = feed(data, keys["train"], config.batch_size)
    spe = train.steps_per_epoch
    splits = {}
    for s in EVAL_SPLITS:
      split = getattr(ds, s)
      splits[s] = (eval_batches(split, config.num_eval, config.eval_max_len,
                                config.eval_batch_size),
                   min(config.num_eval or len(split), len(split)))

    def evaluate_splits(state: TrainState) -> dict[str, float]:
      out = {}
      for s, (batches, n) in splits.items():
        out |= {f"{s}_{k}": float(v) for k, v in evaluate(model, state.params, batches, n).items()}
      return out

    return loop.Task(
        state=create_train_state(config, keys["init"]),
        train_step=functools.partial(train_step, model, float(config.output_grad_clip)),
        feed=train, evaluate=evaluate_splits,
        num_steps=config.num_steps or config.num_epochs * spe, steps_per_epoch=spe,
        examples_per_step=config.batch_size, scan_epoch=False,
        show=("train_nll", "valid_nll", "valid_nll_point"),
        finish=lambda state, wd: save_samples(state, config, ds, wd) if config.num_samples else None)

  return loop.run(config, workdir, setup)
