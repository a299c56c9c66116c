"""The one vocabulary of normalizations: every layer, cell, model and config
validates its ``norm`` against these names.

- ``none``: no normalization.
- ``layer``: layer norm of the summed inputs (paper eqs. 3-5). In a recurrent
  cell, of W_x x and W_h h separately and of the cell state: the LN-LSTM of
  eqs. 20-22, the LN-GRU of eqs. 26-28, the LN-RNN of eq. 4.
- ``layer_c``: an LSTM with layer norm on the cell state c_t only (eqs.
  29-31), the variant the paper uses for DRAW.
- ``batch``: batch norm (Ioffe & Szegedy 2015); in a recurrent cell, the
  recurrent batch norm of Cooijmans et al. (2016), statistics per time step.
- ``weight``: weight norm (Salimans & Kingma 2016).
- ``rms``: RMS norm (Zhang & Sennrich 2019), layer norm without centring.
"""

from __future__ import annotations

from typing import Sequence

NONE, LAYER, LAYER_C, BATCH, WEIGHT, RMS = "none", "layer", "layer_c", "batch", "weight", "rms"
NORMS = (NONE, LAYER, LAYER_C, BATCH, WEIGHT, RMS)


# What figures and tables call each norm: alone ("Layer norm"), and as the
# prefix of a network ("LN-LSTM"; the baseline is the bare network).
LABELS = {NONE: "Baseline", LAYER: "Layer norm", LAYER_C: "LN on c_t", BATCH: "Batch norm",
          WEIGHT: "Weight norm", RMS: "RMS norm"}
PREFIXES = {NONE: "", LAYER: "LN-", LAYER_C: "LN(c)-", BATCH: "BN-", WEIGHT: "WN-", RMS: "RMS-"}


def label(norm: str, network: str | None = None) -> str:
  """``label("layer")`` is "Layer norm"; ``label("layer", "LSTM")`` is "LN-LSTM"."""
  return LABELS[norm] if network is None else PREFIXES[norm] + network


def supported(*names: str) -> tuple[str, ...]:
  """A model's subset of ``NORMS``, checked when the module is imported."""
  unknown = [n for n in names if n not in NORMS]
  if unknown:
    raise ValueError(f"{unknown} are not norms; the norms are: {', '.join(NORMS)}")
  return tuple(names)


def message(norm: object, valid: Sequence[str]) -> str:
  """The one-line error for a norm that ``valid`` does not hold."""
  return f"norm={norm!r} is not valid; choose one of: {', '.join(valid)}"


def check(norm: object, valid: Sequence[str]) -> None:
  """Raises ``ValueError`` naming the valid norms unless ``norm`` is one of them."""
  if norm not in valid:
    raise ValueError(message(norm, valid))
