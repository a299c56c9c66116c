"""Table 1 (section 5.1), measured: which transformations leave the normalized
summed inputs ``h = gain * norm(x W) + bias`` unchanged.

A one-shot run: it trains nothing, and goes through the run's shared output
(``loop.run_once``: the workdir's checks and lock, config.json, and every
cell as the one record of metrics.jsonl), with the tables in table1.md."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from experiments.runner import loop
from experiments.runner import workdir as wdir
from experiments.runner.errors import check, check_common
from lnorm import recurrent
from lnorm import layers, norms
from lnorm.layers import NormDense

Params = dict
# Each transformation maps (kernel W [D, H], data x [B, D], rng) to new ones.
Transform = Callable[[jax.Array, jax.Array, np.random.Generator],
                     tuple[jax.Array, jax.Array]]


def _scale(rng: np.random.Generator, size=None) -> np.ndarray:
  # Log-uniform in [1/5, 5], away from 1 so a non-invariant change shows.
  return np.exp(rng.choice([-1, 1], size) * rng.uniform(0.5, np.log(5), size))


def _weight_matrix_rescale(w, x, rng):
  return w * _scale(rng), x


def _weight_matrix_recenter(w, x, rng):
  # The same vector added to every unit's incoming weights: W + gamma 1^T.
  return w + rng.normal(0, 0.3, (w.shape[0], 1)), x


def _weight_vector_rescale(w, x, rng):
  return w * _scale(rng, (1, w.shape[1])), x


def _dataset_rescale(w, x, rng):
  return w, x * _scale(rng)


def _dataset_recenter(w, x, rng):
  return w, x + rng.normal(0, 1, (1, x.shape[1]))


def _single_case_rescale(w, x, rng):
  n = rng.integers(x.shape[0])
  return w, x.at[n].multiply(_scale(rng))


COLUMNS: list[tuple[str, Transform]] = [
    ("Weight matrix re-scaling", _weight_matrix_rescale),
    ("Weight matrix re-centering", _weight_matrix_recenter),
    ("Weight vector re-scaling", _weight_vector_rescale),
    ("Dataset re-scaling", _dataset_rescale),
    ("Dataset re-centering", _dataset_recenter),
    ("Single training case re-scaling", _single_case_rescale),
]
# The table's rows with norm=all (any other norm of a dense layer is one
# row of its own, ``--config.norm=NAME``), labelled as lnorm/norms.py says.
ROWS = [(norms.label(n), n) for n in ("batch", "weight", "layer", "rms")]
# The paper's Table 1, to compare against (RMS norm is not in the paper).
PAPER = {
    "batch": ("Invariant", "No", "Invariant", "Invariant", "Invariant", "No"),
    "weight": ("Invariant", "No", "Invariant", "No", "No", "No"),
    "layer": ("Invariant", "Invariant", "No", "Invariant", "No", "Invariant"),
}


def relative_change(h: jax.Array, h2: jax.Array) -> float:
  return float(jnp.max(jnp.abs(h2 - h)) / jnp.max(jnp.abs(h)))


# The statistic each norm adds eps to, over the axis it reduces: a's variance
# per example (layer), its mean square per example (RMS), its variance per
# unit (batch). Weight norm adds its eps to the weights' squared norm.
_EPS_STATISTIC = {"layer": lambda a: a.var(1), "rms": lambda a: (a ** 2).mean(1),
                  "batch": lambda a: a.var(0)}


def feedforward_change(norm: str, transform: Transform, config, rng,
                       data_scale: float, eps: float) -> tuple[float, float]:
  """Relative change of one random layer's normalized summed inputs, and the
  smallest statistic that eps is added to, before or after the transformation
  (NaN for weight norm). The inputs are ``data_scale * N(mu, sigma^2)``, mu
  and sigma drawn per layer."""
  layer, init, h = _layer(norm, config.features, eps)
  x = jnp.asarray(data_scale * rng.normal(rng.normal(0, 2), rng.uniform(0.5, 2),
                                          (config.batch_size, config.input_dim)),
                  jnp.float32)
  v = init(jax.random.key(int(rng.integers(2**31))), x)
  # Random gains and biases: the invariances must not rely on gain 1, bias 0.
  params = {k: (a if k == "kernel" else
                jnp.asarray(rng.uniform(0.5, 2.0, a.shape) if k == "gain"
                            else rng.normal(0, 1, a.shape), jnp.float32))
            for k, a in v["params"].items()}
  w2, x2 = transform(params["kernel"], x, rng)
  change = relative_change(
      h({**v, "params": params}, x),
      h({**v, "params": {**params, "kernel": jnp.asarray(w2, jnp.float32)}},
        jnp.asarray(x2, jnp.float32)))
  stat = _EPS_STATISTIC.get(norm)
  if stat is None:
    return change, float("nan")
  f64 = lambda a: np.asarray(a, np.float64)
  return change, float(min(stat(f64(x) @ f64(params["kernel"])).min(),
                           stat(f64(x2) @ f64(w2)).min()))


@functools.cache
def _layer(norm: str, features: int, eps: float):
  """The layer and its jitted init and apply (training mode: batch norm uses
  the statistics of the dataset it is given)."""
  layer = NormDense(features, norm=norm, eps=eps)
  apply = lambda v, x: layer.apply(v, x, train=True, mutable=["batch_stats"])[0]
  return layer, jax.jit(layer.init), jax.jit(apply)


def measure(config, data_scale: float | None = None, eps: float | None = None
            ) -> tuple[dict[str, list[float]], dict[str, float]]:
  """Per norm: the largest relative change over ``num_trials`` random layers,
  per cell, and the smallest statistic eps is added to, over all of them.
  ``data_scale`` and ``eps`` default to the config's; the random layers,
  data and transformations are the same whatever they are."""
  data_scale = config.data_scale if data_scale is None else data_scale
  eps = config.eps if eps is None else eps
  rng = np.random.default_rng(config.seed)
  rows = [n for _, n in ROWS] if config.norm == "all" else [config.norm]
  changes, smallest = {}, {}
  for n in rows:
    cells = [[feedforward_change(n, t, config, rng, data_scale, eps)
              for _ in range(config.num_trials)] for _, t in COLUMNS]
    changes[n] = [max(c for c, _ in cell) for cell in cells]
    smallest[n] = min(v for cell in cells for _, v in cell)
  return changes, smallest


def table(config, data_scale: float | None = None,
          eps: float | None = None) -> dict[str, list[float]]:
  """Largest relative change over ``num_trials`` random layers, per cell."""
  return measure(config, data_scale, eps)[0]


def verdict(change: float, tolerance: float) -> str:
  return "Invariant" if change < tolerance else "No"


def paper_agreement(changes: dict[str, list[float]], tolerance: float) -> str:
  """'Batch norm yes, ...': whether each paper row's verdicts are the paper's."""
  return ", ".join(
      f"{norms.label(n)} {'yes' if tuple(verdict(c, tolerance) for c in row) == PAPER[n] else 'NO'}"
      for n, row in changes.items() if n in PAPER)


def smallest_markdown(smallest: dict[str, float], eps: float) -> str:
  return ", ".join(f"{norms.label(n)} {v / eps:.1e}" for n, v in smallest.items()
                   if not np.isnan(v))


def differences(changes: dict[str, list[float]], reference: dict[str, list[float]],
                tolerance: float) -> str:
  """Per norm, the cells whose verdict differs from ``reference``'s, or 'none'."""
  out = []
  for n, row in changes.items():
    cells = [f"{c} ({verdict(v, tolerance)})"
             for (c, _), v, r in zip(COLUMNS, row, reference[n])
             if verdict(v, tolerance) != verdict(r, tolerance)]
    if cells:
      out.append(f"{norms.label(n)}: " + ", ".join(cells))
  return "; ".join(out) or "none"


def to_markdown(changes: dict[str, list[float]], tolerance: float,
                first_column: str = "") -> str:
  lines = ["| " + first_column + " | " + " | ".join(c for c, _ in COLUMNS) + " |",
           "|---" * (len(COLUMNS) + 1) + "|"]
  for n, row in changes.items():
    cells = [f"{verdict(c, tolerance)} ({c:.1e})" for c in row]
    lines.append(f"| {norms.label(n)} | " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def validate(config: ml_collections.ConfigDict) -> None:
  check_common(config, lambda norm: norm == "all" or layers.accept(norm))
  check(config.num_trials >= 1, f"num_trials={config.num_trials} must be at least 1")
  check(config.batch_size >= 2, "batch_size must be at least 2: batch norm needs a batch")
  check(config.data_scale > 0, f"data_scale={config.data_scale} must be positive")
  check(config.small_data_scale >= 0,
        f"small_data_scale={config.small_data_scale} must be 0 (none) or positive")


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Measures once, trains nothing: a one-shot run (loop.run_once), whose
  record in metrics.jsonl holds every cell; the tables go to table1.md."""
  validate(config)
  return loop.run_once(config, workdir, functools.partial(write_tables, config))


def write_tables(config: ml_collections.ConfigDict, wd: Path) -> dict[str, float]:
  """Measures the feed-forward and recurrent tables, writes them to
  ``wd/table1.md`` and prints them; returns every cell, ``norm/column``."""
  changes, smallest = measure(config)
  tol, eps, s = config.tolerance, config.eps, config.data_scale
  md = ("# Table 1: invariance of the normalized summed inputs\n\n"
        f"Largest relative change max|h' - h| / max|h| over {config.num_trials} random "
        f"layers ({config.input_dim} inputs, {config.features} units, batch "
        f"{config.batch_size}, eps={eps}, data scale {s:g}: inputs {s:g} * N(mu, sigma^2), "
        f"mu ~ N(0, 2) and sigma ~ U(0.5, 2) per layer); `Invariant` below {tol}.\n\n"
        + to_markdown(changes, tol))
  md += "\nSame as the paper's Table 1: " + paper_agreement(changes, tol) + "\n"
  md += ("\nThe invariances hold up to terms of order eps / v, v the statistic a norm "
         "adds eps to (the summed inputs' variance per example for layer norm, per unit "
         "for batch norm; their mean square for RMS norm; weight norm adds its own eps "
         "to the weights). Smallest v / eps over every layer, before and after each "
         f"transformation: {smallest_markdown(smallest, eps)}.\n")
  if config.small_data_scale:
    md += _small_scale_markdown(config, changes)
  rnn = recurrent_changes(config)
  md += ("\n## Recurrent cells: change of the hidden-state sequence\n\n"
         f"Largest relative change of h_1..h_{config.rnn_steps} ({config.rnn_features} "
         f"units, zero initial state) when every input kernel (W_x) or recurrent kernel "
         "(W_h) is re-scaled or re-centred as a whole. With h_0 = 0 the summed inputs "
         "W_h h of the first steps have a tiny variance, so eps is not negligible there.\n\n"
         + rnn_markdown(rnn, config.tolerance))
  wdir.write_atomic(wd / "table1.md", md)
  print(md)
  return ({f"{n}/{c}": v for n, row in changes.items() for (c, _), v in zip(COLUMNS, row)}
          | {f"{n}/{c}": v for n, row in rnn.items() for c, v in row.items()})


def _small_scale_markdown(config, changes: dict[str, list[float]]) -> str:
  """The table again at ``small_data_scale``, where eps is not negligible,
  and at eps scaled down with the data's variance."""
  tol, eps, s = config.tolerance, config.eps, config.small_data_scale
  small, smallest = measure(config, data_scale=s)
  eps_s = eps * (s / config.data_scale) ** 2
  rescaled = table(config, data_scale=s, eps=eps_s)
  return (f"\n## The same layers at data scale {s:g}\n\n"
          f"Inputs {s:g} * N(mu, sigma^2): the summed inputs' variance is "
          f"{(s / config.data_scale) ** 2:g} times that above, while eps stays {eps}. "
          f"Smallest v / eps: {smallest_markdown(smallest, eps)}.\n\n"
          + to_markdown(small, tol)
          + f"\nVerdicts that differ from the table at data scale {config.data_scale:g}: "
          + differences(small, changes, tol) + ". Same as the paper's Table 1: "
          + paper_agreement(small, tol) + f". With eps scaled by the same factor "
          f"(eps={eps_s:g}), the same as the paper's: {paper_agreement(rescaled, tol)}.\n")


# Recurrent cells: re-scale or re-centre W_x or W_h as a whole.
RNN_COLUMNS = ("W_x re-scaling", "W_x re-centering", "W_h re-scaling", "W_h re-centering")


RNN_CELLS = {"LSTM": (recurrent.LSTMCell, "none"), "LN-LSTM": (recurrent.LSTMCell, "layer"),
             "GRU": (recurrent.GRUCell, "none"), "LN-GRU": (recurrent.GRUCell, "layer"),
             "LN-LSTM, LN on c only (DRAW)": (recurrent.LSTMCell, "layer_c")}


def recurrent_changes(config) -> dict[str, dict[str, float]]:
  """Rows per cell, and per eps in ``config.rnn_eps`` for the normalized ones."""
  rng = np.random.default_rng(config.seed + 1)
  out = {}
  for name, (cell_cls, norm) in RNN_CELLS.items():
    normalized = norm != "none"
    for eps in (config.rnn_eps if normalized else (None,)):
      cell = cell_cls(config.rnn_features, norm=norm, eps=eps) if normalized else \
          cell_cls(config.rnn_features)
      init, apply = _rnn(cell)
      row = f"{name} (eps={eps:g})" if normalized else name
      out[row] = {c: max(_rnn_change(init, apply, c, config, rng)
                         for _ in range(config.num_trials)) for c in RNN_COLUMNS}
  return out


def _rnn(cell: nn.Module):
  rnn = nn.RNN(cell)
  return jax.jit(rnn.init), jax.jit(rnn.apply)


def _rnn_change(init, apply, column: str, config, rng) -> float:
  """Transforms every input (``kernel_x*``) or recurrent (``kernel_h*``) kernel."""
  x = jnp.asarray(rng.normal(0, 1, (config.batch_size, config.rnn_steps, config.input_dim)),
                  jnp.float32)
  params = init(jax.random.key(int(rng.integers(2**31))), x)["params"]["cell"]
  prefix = "kernel_x" if column.startswith("W_x") else "kernel_h"
  transform = _weight_matrix_rescale if "scaling" in column else _weight_matrix_recenter
  new = {k: (jnp.asarray(transform(v, x, rng)[0], jnp.float32) if k.startswith(prefix)
             else v) for k, v in params.items()}
  assert any(k.startswith(prefix) for k in new), f"no {prefix} parameter"
  return relative_change(apply({"params": {"cell": params}}, x),
                         apply({"params": {"cell": new}}, x))


def rnn_markdown(changes: dict[str, dict[str, float]], tolerance: float) -> str:
  lines = ["| cell | " + " | ".join(RNN_COLUMNS) + " |", "|---" * (len(RNN_COLUMNS) + 1) + "|"]
  for name, row in changes.items():
    lines.append(f"| {name} | " + " | ".join(
        f"{verdict(row[c], tolerance)} ({row[c]:.1e})" for c in RNN_COLUMNS) + " |")
  return "\n".join(lines) + "\n"
