"""The native CPU kernels are used on one device, inside shard_map, and for
layer norm where a jit splits the batch over devices (each device's rows,
through custom_partitioning: lnorm/fused_layer_norm.py); the recurrent
kernels are left out there (lnorm/native/dispatch.py). Either way the step
stays data parallel (no all-gather) and computes the same.

XLA's device count is fixed when jax is imported, so the checks run in a
subprocess with 8 forced host devices.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from tests.run_records import REPO


def _worker() -> dict:
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from jax.sharding import NamedSharding, PartitionSpec as P  # pylint: disable=g-import-not-at-top
  from lnorm import native, recurrent  # pylint: disable=g-import-not-at-top
  from lnorm.normalization import layer_norm  # pylint: disable=g-import-not-at-top

  mesh = jax.sharding.Mesh(jax.devices(), ("data",))  # as experiments/runner/parallel.py makes it
  split, whole = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
  x = jax.random.normal(jax.random.key(0), (64, 48)) * 2 + 1
  g = jnp.linspace(0.5, 1.5, 48)
  ln = jax.grad(lambda x, g: jnp.sum(jnp.sin(layer_norm(x, g))), argnums=(0, 1))
  lstm = recurrent.LSTM(16, norm="layer")
  xs = jax.random.normal(jax.random.key(1), (16, 7, 5))
  p = lstm.init(jax.random.key(2), xs)
  lstm_grad = jax.grad(lambda p, xs: jnp.sum(jnp.sin(lstm.apply(p, xs))))
  gru = recurrent.GRU(16, norm="layer")
  p_gru = gru.init(jax.random.key(3), xs)
  gru_grad = jax.grad(lambda p, xs: jnp.sum(jnp.sin(gru.apply(p, xs))))

  def per_device(x, g):  # every mesh axis manual: each call sees one device's rows
    return jax.shard_map(lambda x: layer_norm(x, g), mesh=mesh, in_specs=P("data"),
                         out_specs=P("data"))(x)

  out = {"native": native.load()}
  for name, fn, ref, args, shardings in [
      ("layer_norm", ln, ln, (x, g), (split, whole)),
      ("lstm", lstm_grad, lstm_grad, (p, xs), (whole, split)),
      ("gru", gru_grad, gru_grad, (p_gru, xs), (whole, split)),
      ("shard_map", per_device, layer_norm, (x, g), (split, whole))]:
    one, eight = jax.jit(ref), jax.jit(fn, in_shardings=shardings)
    hlo1 = one.lower(*args).compile().as_text()
    hlo8 = eight.lower(*args).compile().as_text()
    diff = max(float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(a)))
               for a, b in zip(jax.tree.leaves(one(*args)), jax.tree.leaves(eight(*args))))
    out[name] = {"custom_1": hlo1.count('custom_call_target="lnorm_'),
                 "custom_8": hlo8.count('custom_call_target="lnorm_'),
                 "recurrent_8": len(re.findall(r'custom_call_target="lnorm_(lstm|gru)', hlo8)),
                 "gathers_8": hlo8.count("all-gather"), "rel_diff": diff}
  # The split layer norm's gradients against float64 NumPy, by hand:
  # L = sum(sin(g x_hat)), dL/dy = cos(y), dg = sum_rows(cos(y) x_hat),
  # dx = rstd (u - mean(u) - x_hat mean(x_hat u)), u = g cos(y).
  dx, dg = jax.jit(ln, in_shardings=(split, whole))(x, g)
  x64, g64 = np.asarray(x, np.float64), np.asarray(g, np.float64)
  rstd = 1 / np.sqrt(x64.var(1, keepdims=True) + 1e-5)
  xh = (x64 - x64.mean(1, keepdims=True)) * rstd
  u = g64 * np.cos(g64 * xh)
  want_dx = rstd * (u - u.mean(1, keepdims=True) - xh * (xh * u).mean(1, keepdims=True))
  want_dg = (np.cos(g64 * xh) * xh).sum(0)
  out["layer_norm"]["f64_err"] = [float(np.abs(np.asarray(dx) - want_dx).max() / np.abs(want_dx).max()),
                                  float(np.abs(np.asarray(dg) - want_dg).max() / np.abs(want_dg).max())]
  return out


@pytest.fixture(scope="module")
def report() -> dict:
  env = {**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu",
         "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
  r = subprocess.run([sys.executable, "-m", "tests.test_native_dispatch"], cwd=REPO, env=env,
                     capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["lstm", "gru"])
def test_a_split_batch_stays_split_and_computes_the_same(report, name):
  # The recurrent kernels stay out of a split step (their layer norms, outside the
  # whole-sequence kernels, may run split as layer norm does).
  r = report[name]
  assert r["gathers_8"] == 0 and r["recurrent_8"] == 0
  assert r["rel_diff"] < 1e-5
  if report["native"]:
    assert r["custom_1"] > 0  # and on one device the kernels do run


@pytest.mark.slow  # the module's 8-device worker: with the test above
def test_a_split_layer_norm_runs_the_kernels_on_each_devices_rows(report):
  r = report["layer_norm"]
  assert r["gathers_8"] == 0 and r["rel_diff"] < 1e-5
  # float32 sums of 48 (a row) and 64 (a column) terms: a few eps a term.
  bound = 8 * np.finfo(np.float32).eps * (48 + 64)
  assert max(r["f64_err"]) < bound, r["f64_err"]
  if report["native"]:
    assert r["custom_1"] > 0 and r["custom_8"] > 0


@pytest.mark.slow  # the module's 8-device worker (a minute): with the test above
def test_shard_map_keeps_the_kernels(report):
  r = report["shard_map"]
  assert r["rel_diff"] < 1e-6 and r["gathers_8"] == 0
  if report["native"]:
    assert r["custom_8"] > 0


if __name__ == "__main__":
  print(json.dumps(_worker()))
