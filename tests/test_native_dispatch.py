"""The native CPU kernels are used on one device and inside shard_map, and
left out where a jit splits the batch over devices (lnorm/native/dispatch.py):
there the step stays data parallel (no all-gather) and computes the same.

XLA's device count is fixed when jax is imported, so the checks run in a
subprocess with 8 forced host devices.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

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
                 "gathers_8": hlo8.count("all-gather"), "rel_diff": diff}
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
@pytest.mark.parametrize("name", ["layer_norm", "lstm", "gru"])
def test_a_split_batch_stays_split_and_computes_the_same(report, name):
  r = report[name]
  assert r["gathers_8"] == 0 and r["custom_8"] == 0
  assert r["rel_diff"] < 1e-5
  if report["native"]:
    assert r["custom_1"] > 0  # and on one device the kernels do run


@pytest.mark.slow  # the module's 8-device worker (a minute): with the test above
def test_shard_map_keeps_the_kernels(report):
  r = report["shard_map"]
  assert r["rel_diff"] < 1e-6 and r["gathers_8"] == 0
  if report["native"]:
    assert r["custom_8"] > 0


if __name__ == "__main__":
  print(json.dumps(_worker()))
