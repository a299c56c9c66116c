"""The README's "Python API" example runs as written and computes what it says."""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest

from lnorm import recurrent
from tests.run_records import REPO


def python_api_code() -> str:
  text = (REPO / "README.md").read_text()
  section = text.split("\n## Python API\n", 1)
  assert len(section) == 2, 'README.md has no "## Python API" section'
  section = section[1].split("\n## ", 1)[0]
  blocks = re.findall(r"^```python\n(.*?)^```", section, re.S | re.M)
  assert len(blocks) == 1, f"expected one python block, found {len(blocks)}"
  return blocks[0]


@pytest.mark.slow
def test_python_api_example_runs():
  ns: dict = {}
  exec(compile(python_api_code(), "README.md (Python API)", "exec"), ns)
  x = np.asarray(ns["x"], np.float64)
  ref = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
  np.testing.assert_allclose(ns["y"], ref, rtol=1e-5, atol=1e-5)
  assert ns["h"].shape == (4, 32)
  # The cell under nn.RNN and the sequence layer share their parameters.
  cell_params = ns["rnn_vars"]["params"]["cell"]
  y_lstm = recurrent.LSTM(32, norm="layer").apply({"params": cell_params}, ns["seq"])
  assert ns["out"].shape == (4, 10, 32)
  # Two float32 implementations (XLA's cell step, the native sequence kernels) sum in
  # different orders: over 10 steps they part by ~1e-6 of outputs of order 0.3 (seen
  # 1.5e-6 on one machine); a wrong gate or weight parts them by ~1e-1.
  np.testing.assert_allclose(ns["out"], y_lstm, rtol=1e-5, atol=1e-5)
  # Past each sequence's end both LSTM outputs are 0, so the logits are the readout's bias.
  logits, mask = np.asarray(ns["logits"]), np.asarray(ns["mask"])
  assert logits.shape == (4, 10, 5) and mask.sum() == 21
  bias = np.asarray(ns["params"]["params"]["Dense_0"]["bias"])
  np.testing.assert_array_equal(logits[~mask], np.broadcast_to(bias, (int((~mask).sum()), 5)))
  assert np.all(np.std(logits[mask], 0) > 0)
  for leaf in jax.tree.leaves(ns["grads"]):
    assert np.all(np.isfinite(leaf)) and np.any(leaf != 0)
