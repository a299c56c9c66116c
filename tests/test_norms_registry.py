"""The norm registry (lnorm/norms.py): lookups and their one-line errors, a
user's norm through ``module:Name`` in every host, the parameters each host
builds from a definition, and the whole-sequence layers' fallback to the
cell's scan for norms without a fast path (equal to ``Recurrent(cell)``,
masked and not, gradients too)."""

import json
import re
import os
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lnorm import layers, norms, recurrent as R
from lnorm.layers import NormConv, NormDense, Normalize
from tests.recurrent_refs import LENGTHS, f64, length_mask
from tests.run_records import REPO, metrics
from tests.tiny_data import write_dataset
from tests.user_norm import MyNorm

USER = "tests.user_norm:MyNorm"


# ------------------------------------------------------------------ lookups

def test_get_and_labels():
  assert norms.get("layer").label == "Layer norm"
  assert norms.label("layer", "LSTM") == "LN-LSTM" and norms.label("none", "GRU") == "GRU"
  assert norms.get(USER) is MyNorm and norms.label(USER, "LSTM") == "MY-LSTM"
  assert "my_norm" in norms.names()


@pytest.mark.parametrize("value,message", [
    ("lyer", "norm='lyer' is not valid; choose one of: none, layer, layer_c, batch, weight, rms"),
    (3, "norm=3 is not valid; choose one of: none, layer"),
    ("tests.no_such_module:X", "norm='tests.no_such_module:X': module 'tests.no_such_module' "
     "does not import (ModuleNotFoundError"),
    ("tests.user_norm:NotANorm", "norm='tests.user_norm:NotANorm': tests.user_norm is not an "
     "lnorm.norms.Norm: 'NotANorm' (int)"),
    ("tests.user_norm:Missing", "norm='tests.user_norm:Missing': tests.user_norm has no "
     "attribute 'Missing'"),
])
def test_bad_names_are_one_line(value, message):
  with pytest.raises(ValueError) as e:
    norms.get(value)
  assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_each_host_names_the_norms_of_its_sites():
  with pytest.raises(ValueError, match=r"^norm='batch' is not valid; choose one of: none, "
                     r"layer, rms(, \w+)*$"):
    R.GRUCell(4, norm="batch")
  with pytest.raises(ValueError, match="norm='weight' is not valid; choose one of: none, "
                     "layer, layer_c, batch, rms"):
    R.LSTMCell(4, norm="weight")
  assert "layer_c" not in norms.names(norms.FEATURES)
  assert {"weight", "batch"} <= set(layers.accepted())
  with pytest.raises(ValueError, match="norm='layer_c' is not valid"):
    NormDense(3, norm="layer_c").init(jax.random.key(0), jnp.ones((2, 3)))


def test_register_refuses_another_definition_under_a_taken_name():
  other = norms.Norm("layer", "x", "x-", frozenset({norms.FEATURES}))
  with pytest.raises(ValueError, match="a different norm named 'layer' is already registered"):
    norms.register(other)
  assert norms.register(norms.get("layer")) is norms.get("layer")


# ----------------------------------------------------- a user's norm in hosts

def np_mean_only(a, g, b, axes):
  a, g, b = (np.asarray(v, np.float64) for v in (a, g, b))
  return (a - a.mean(axes, keepdims=True)) * g + b


def test_user_norm_in_dense_and_conv_matches_numpy():
  x = jax.random.normal(jax.random.key(0), (4, 5)) + 3.0
  m = NormDense(6, norm=USER)
  v = m.init(jax.random.key(1), x)
  assert list(v["params"]) == ["kernel", "bias", "gain"]
  p = jax.tree.map(lambda a: a + 0.3 * jax.random.normal(jax.random.key(2), a.shape), v["params"])
  want = np_mean_only(np.asarray(x, np.float64) @ np.asarray(p["kernel"], np.float64),
                      p["gain"], p["bias"], (1,))
  np.testing.assert_allclose(m.apply({"params": p}, x), want, rtol=1e-5, atol=1e-5)
  x4 = jax.random.normal(jax.random.key(3), (2, 4, 4, 3))
  c = NormConv(5, norm=USER)
  vc = c.init(jax.random.key(4), x4)
  y = np.asarray(c.apply(vc, x4), np.float64)
  # Over all H x W x C units of an example: each example's output has mean 0.
  np.testing.assert_allclose(y.mean((1, 2, 3)), 0.0, atol=1e-5)


def test_user_norm_in_cells_and_normalize():
  x = jax.random.normal(jax.random.key(0), (3, 4))
  cell = R.LSTMCell(5, norm=USER)
  carry = cell.initialize_carry(jax.random.key(1), x.shape)
  v = cell.init(jax.random.key(2), carry, x)
  assert list(v["params"]) == ["kernel_x", "kernel_h", "gain_h", "gain_x", "bias", "gain_c",
                               "bias_c"]
  gru = R.GRUCell(5, norm=USER).init(jax.random.key(3), jnp.zeros((3, 5)), x)
  assert list(gru["params"]) == ["kernel_x", "kernel_h", "kernel_xc", "kernel_hc", "gain_h",
                                 "gain_x", "bias", "gain_xc", "bias_xc", "gain_hc", "bias_hc"]
  n = Normalize(USER)
  xs = jax.random.normal(jax.random.key(4), (2, 3, 6)) + 2.0
  vn = n.init(jax.random.key(5), xs)
  assert list(vn["params"]) == ["gain", "bias"]
  np.testing.assert_allclose(np.asarray(n.apply(vn, xs)).mean(-1), 0.0, atol=1e-5)


def test_normalize_refuses_norms_their_hosts_implement():
  with pytest.raises(ValueError, match="norm='batch' needs a host that implements it"):
    Normalize("batch").init(jax.random.key(0), jnp.ones((2, 3)))


# ----------------------------------------- what the 2016 norms' hosts create

@pytest.mark.parametrize("norm,names", [
    ("none", ["kernel_x", "kernel_h", "bias"]),
    ("layer", ["kernel_x", "kernel_h", "gain_h", "gain_x", "bias", "gain_c", "bias_c"]),
    ("layer_c", ["kernel_x", "kernel_h", "bias", "gain_c", "bias_c"]),
    ("batch", ["kernel_x", "kernel_h", "gain_h", "gain_x", "bias", "gain_c", "bias_c"]),
])
def test_lstm_cell_parameters_and_gain_inits(norm, names):
  x = jnp.ones((2, 3))
  cell = R.LSTMCell(4, norm=norm, max_steps=2)
  v = cell.init(jax.random.key(0), cell.initialize_carry(jax.random.key(0), x.shape), x)
  assert list(v["params"]) == names
  g0 = 0.1 if norm == "batch" else 1.0  # Cooijmans et al.'s 0.1 for recurrent BN
  for k in names:
    if k.startswith("gain"):
      np.testing.assert_array_equal(v["params"][k], np.float32(g0))


# ------------------------------------------------ fallback of the fast paths

def _seq_inputs(I=3):
  x = jax.random.normal(jax.random.key(7), (len(LENGTHS), 6, I))
  return x, length_mask(LENGTHS, 6)


@pytest.mark.parametrize("norm", ["rms", "dyt", "scale", USER])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("layer,cell", [(R.LSTM, R.LSTMCell), (R.GRU, R.GRUCell)])
def test_sequence_layer_falls_back_to_the_cells_scan(layer, cell, norm, masked):
  """For a norm without a fast path the layer is Recurrent(cell) on the same
  parameters: outputs, final carry and every gradient, in float64."""
  x, mask = _seq_inputs()
  mask = mask if masked else None
  H = 5
  seq = layer(H, norm=norm, return_carry=True)
  with jax.enable_x64(True):
    params = f64(seq.init(jax.random.key(1), x, mask)["params"])
    params = jax.tree.map(
        lambda a: a + 0.2 * jax.random.normal(jax.random.key(2), a.shape, jnp.float64), params)
    x64 = f64(x)
    rec = R.Recurrent(cell(H, norm=norm, dtype=jnp.float64, param_dtype=jnp.float64))

    def f_seq(p, x):
      carry, y = layer(H, norm=norm, return_carry=True, dtype=jnp.float64,
                       param_dtype=jnp.float64).apply({"params": p}, x, mask)
      return carry, y

    def f_rec(p, x):
      return rec.apply({"params": {"cell": p}}, x, mask)

    got, want = f_seq(params, x64), f_rec(params, x64)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
      np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    loss = lambda f: lambda p, x: sum(jnp.sum(jnp.sin(l)) for l in jax.tree.leaves(f(p, x)))
    g_seq = jax.grad(loss(f_seq), argnums=(0, 1))(params, x64)
    g_rec = jax.grad(loss(f_rec), argnums=(0, 1))(params, x64)
    assert jax.tree.structure(g_seq) == jax.tree.structure(g_rec)
    for a, b in zip(jax.tree.leaves(g_seq), jax.tree.leaves(g_rec)):
      assert np.any(a != 0)
      np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_gru_fallback_with_context_is_the_cells_scan_over_x_and_context():
  x, mask = _seq_inputs()
  ctx = jax.random.normal(jax.random.key(3), (x.shape[0], 2))
  gru = R.GRU(4, norm="rms")
  v = gru.init(jax.random.key(0), x, mask, context=ctx)
  y = gru.apply(v, x, mask, context=ctx)
  xc = jnp.concatenate([x, jnp.broadcast_to(ctx[:, None], x.shape[:2] + (2,))], -1)
  _, want = R.Recurrent(R.GRUCell(4, norm="rms")).apply({"params": {"cell": v["params"]}},
                                                         xc, mask)
  np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("masked", [False, True])
def test_lstm_batch_norm_is_the_cells_scan_with_its_statistics(masked):
  """norm='batch' (per-step statistics) scans LSTMCell: outputs, carry, the
  updated running averages and the gradients equal Recurrent(LSTMCell)'s;
  the averages start at 0 and 1 and the gains at Cooijmans et al.'s 0.1."""
  x, mask = _seq_inputs()
  mask = mask if masked else None
  T = x.shape[1]
  lstm = R.LSTM(5, norm="batch", max_steps=T, return_carry=True)
  v = lstm.init(jax.random.key(1), x, mask)
  assert sorted(v["batch_stats"]) == ["mean_c", "mean_h", "mean_x", "var_c", "var_h", "var_x"]
  np.testing.assert_array_equal(v["batch_stats"]["var_h"], 1.0)
  np.testing.assert_array_equal(v["params"]["gain_h"], np.float32(0.1))
  p = _perturbed(dict(v["params"]))
  rec = R.Recurrent(R.LSTMCell(5, norm="batch", max_steps=T))

  def run_seq(p):
    return lstm.apply({"params": p, "batch_stats": v["batch_stats"]}, x, mask,
                      mutable=["batch_stats"])

  def run_rec(p):
    (carry, y), new = rec.apply({"params": {"cell": p},
                                 "batch_stats": {"cell": v["batch_stats"]}}, x, mask,
                                mutable=["batch_stats"])
    return (carry[:2], y), {"batch_stats": new["batch_stats"]["cell"]}

  got, want = run_seq(p), run_rec(p)
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_array_equal(a, b)
  assert not np.array_equal(got[1]["batch_stats"]["mean_x"], 0.0)
  loss = lambda f: lambda p: jnp.sum(jnp.sin(f(p)[0][1]))
  g_seq, g_rec = jax.grad(loss(run_seq))(p), jax.grad(loss(run_rec))(p)
  for k in p:
    np.testing.assert_array_equal(g_seq[k], g_rec[k])
  ev = R.LSTM(5, norm="batch", max_steps=T, use_running_average=True)
  _, want_ev = R.Recurrent(R.LSTMCell(5, norm="batch", max_steps=T, use_running_average=True)
                           ).apply({"params": {"cell": p},
                                    "batch_stats": {"cell": got[1]["batch_stats"]}}, x, mask)
  np.testing.assert_array_equal(
      ev.apply({"params": p, "batch_stats": got[1]["batch_stats"]}, x, mask), want_ev)


# ---------------------------------------------------- the command line

def _cli(tmp_path, *flags):
  _, checksums = write_dataset(tmp_path / "data", num={"train": 300, "test": 40})
  (tmp_path / "md5.json").write_text(json.dumps(checksums))
  cmd = [sys.executable, str(REPO / "tests" / "run_with_tiny_checksums.py"),
         str(tmp_path / "md5.json"), "--config=configs/pi_mnist.py:smoke",
         f"--config.data_dir={tmp_path / 'data'}", "--config.num_valid=40",
         "--config.num_epochs=1", f"--workdir={tmp_path / 'run'}", *flags]
  return subprocess.run(cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                        capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_pi_mnist_runs_a_norm_defined_in_a_test_file(tmp_path):
  r = _cli(tmp_path, f"--config.norm={USER}")
  assert r.returncode == 0, r.stderr
  (m,) = metrics(tmp_path / "run")
  assert np.isfinite(m["valid_nll"]) and np.isfinite(m["train_nll"])


@pytest.mark.parametrize("flag,message", [
    ("--config.norm=tests.user_norm:NotANorm", "error: norm='tests.user_norm:NotANorm': "
     "tests.user_norm is not an lnorm.norms.Norm: 'NotANorm' (int)"),
    ("--config.norm=layer_c", "error: norm='layer_c' is not valid; choose one of: none, layer, "
     "batch, weight, rms"),
])
def test_pi_mnist_bad_norm_is_one_line(tmp_path, flag, message):
  r = _cli(tmp_path, flag)
  assert r.returncode != 0
  assert r.stderr.strip().startswith(message) and len(r.stderr.strip().splitlines()) == 1
  assert not (tmp_path / "run").exists()


def test_readme_own_norm_example_runs():
  text = (REPO / "README.md").read_text()
  section = text.split("\n## Your own norm\n", 1)[1].split("\n## ", 1)[0]
  (code,) = re.findall(r"^```python\n(.*?)^```", section, re.S | re.M)
  assert len(code.splitlines()) < 25
  ns: dict = {}
  exec(compile(code, "README.md (Your own norm)", "exec"), ns)
  assert ns["h"].shape == (4, 32)
  np.testing.assert_allclose(np.asarray(ns["h"], np.float64).mean(-1), 0.0, atol=1e-5)
  assert norms.label("mean_only", "LSTM") == "MO-LSTM"


# ------------------------------------------------- the norms of 2018-2025 in hosts

def np_group(a, g, b, G, eps=1e-5):
  """Wu & He's eqs. 1-2 in float64: per example and group over (..., C/G)."""
  a = np.asarray(a, np.float64)
  ag = a.reshape(a.shape[:-1] + (G, a.shape[-1] // G))
  axes = tuple(range(1, a.ndim - 1)) + (a.ndim,)
  mu, var = ag.mean(axes, keepdims=True), ag.var(axes, keepdims=True)
  return ((ag - mu) / np.sqrt(var + eps)).reshape(a.shape) * g + b


def np_pointwise(norm, a, p):
  from scipy.special import erf  # pylint: disable=g-import-not-at-top
  a = np.asarray(a, np.float64)
  q = {k: np.asarray(v, np.float64) for k, v in p.items()}
  if norm == "dyt":
    return q["gain"] * np.tanh(q["alpha"] * a) + q["bias"]
  return q["gain"] * erf(q["alpha"] * a + q["shift"]) + q["bias"]


def _perturbed(params, scale=0.3, seed=2):
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  return jax.tree.unflatten(tree, [l + scale * jax.random.normal(k, l.shape, l.dtype)
                                   for l, k in zip(leaves, keys)])


@pytest.mark.parametrize("norm,names,inits", [
    ("dyt", ["kernel", "bias", "alpha", "gain"], {"alpha": 0.5, "gain": 1.0}),
    ("derf", ["kernel", "bias", "alpha", "shift", "gain"],
     {"alpha": 0.5, "shift": 0.0, "gain": 1.0}),
])
def test_pointwise_norms_in_a_dense_layer_match_numpy(norm, names, inits):
  x = jax.random.normal(jax.random.key(0), (4, 5)) * 2
  m = NormDense(6, norm=norm)
  v = m.init(jax.random.key(1), x)["params"]
  assert list(v) == names
  for k, want in inits.items():  # the papers' initialisation
    np.testing.assert_array_equal(v[k], np.float32(want))
  assert v["alpha"].shape == ()
  p = _perturbed(v)
  a = np.asarray(x, np.float64) @ np.asarray(p["kernel"], np.float64)
  np.testing.assert_allclose(m.apply({"params": p}, x), np_pointwise(norm, a, p),
                             rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("groups,G", [(4, 4), (0, 8)])  # 0: the largest divisor up to 32
def test_group_norm_in_a_conv_layer_matches_numpy(groups, G):
  x = jax.random.normal(jax.random.key(0), (2, 5, 5, 3)) + 4.0
  m = NormConv(8, norm="group", norm_groups=groups)
  v = m.init(jax.random.key(1), x)["params"]
  assert list(v) == ["kernel", "bias", "gain"]
  p = _perturbed(v)
  a = jax.lax.conv_general_dilated(f64_np(x), f64_np(p["kernel"]), (1, 1), "SAME",
                                   dimension_numbers=("NHWC", "HWIO", "NHWC"))
  want = np_group(a, np.asarray(p["gain"]), np.asarray(p["bias"]), G)
  np.testing.assert_allclose(m.apply({"params": p}, x), want, rtol=1e-4, atol=1e-4)


def f64_np(a):
  with jax.enable_x64(True):
    return np.asarray(a, np.float64)


def test_group_norm_in_a_sublayer_is_per_position():
  """(B, T, D): each position's D features alone, as a Transformer needs (a
  later position must not move an earlier one's output)."""
  x = jax.random.normal(jax.random.key(0), (2, 3, 8))
  n = Normalize("group", groups=2)
  v = n.init(jax.random.key(1), x)
  assert list(v["params"]) == ["gain", "bias"]
  y = n.apply(v, x)
  np.testing.assert_allclose(y, np_group(x.reshape(6, 8), 1.0, 0.0, 2).reshape(x.shape),
                             rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(n.apply(v, x.at[:, 2].set(7.0))[:, :2], y[:, :2])


def test_groups_that_do_not_divide_the_features_are_one_line():
  with pytest.raises(ValueError, match="^norm='group': groups=4 does not divide a layer's 10 "
                     "features$"):
    norms.check_fit("group", [64, 10], groups=4)
  norms.check_fit("group", [64, 10], groups=0)
  norms.check_fit("layer", [64, 10], groups=4)  # other norms read no groups


def np_lstm_step(norm, p, x, c, h):
  """Eqs. 20-22 with ``norm`` for LN: the paper's LN-LSTM of any pointwise norm."""
  f64 = lambda k: np.asarray(p[k], np.float64)
  sub = lambda s: {k: p[k + s] for k in ("alpha", "shift", "gain") if k + s in p}
  z = (np_pointwise(norm, h @ f64("kernel_h"), {**sub("_h"), "bias": 0.0})
       + np_pointwise(norm, x @ f64("kernel_x"), {**sub("_x"), "bias": 0.0}) + f64("bias"))
  sig = lambda v: 1 / (1 + np.exp(-v))
  f, i, o, g = np.split(z, 4, -1)
  c = sig(f) * c + sig(i) * np.tanh(g)
  return c, sig(o) * np.tanh(np_pointwise(norm, c, {**sub("_c"), "bias": p["bias_c"]}))


@pytest.mark.parametrize("norm", ["dyt", "derf"])
def test_pointwise_norms_in_the_lstm_cell_match_numpy(norm):
  x = np.asarray(jax.random.normal(jax.random.key(0), (3, 4)), np.float64)
  c0, h0 = (np.asarray(jax.random.normal(jax.random.key(k), (3, 5)), np.float64) for k in (1, 2))
  cell = R.LSTMCell(5, norm=norm)
  v = cell.init(jax.random.key(3), (c0, h0), x)["params"]
  extra = ["alpha", "shift"] if norm == "derf" else ["alpha"]
  want_names = (["kernel_x", "kernel_h"] + [f"{k}_{s}" for s in "hx" for k in extra + ["gain"]]
                + ["bias"] + [f"{k}_c" for k in extra + ["gain"]] + ["bias_c"])
  assert list(v) == want_names
  p = _perturbed(v)
  (c, h), y = cell.apply({"params": p}, (jnp.asarray(c0, jnp.float32),
                                         jnp.asarray(h0, jnp.float32)), jnp.asarray(x, jnp.float32))
  c_want, h_want = np_lstm_step(norm, p, x, c0, h0)
  np.testing.assert_allclose(c, c_want, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(h, h_want, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_pi_mnist_group_norm_groups_not_dividing_the_features_is_one_line(tmp_path):
  r = _cli(tmp_path, "--config.norm=group", "--config.norm_groups=7")
  assert r.returncode != 0
  assert r.stderr.strip() == ("error: norm='group': groups=7 does not divide a layer's 64 "
                              "features")
  assert not (tmp_path / "run").exists()


def test_scale_norm_in_dense_conv_and_sublayer_matches_numpy():
  """g x / ||x|| over an example's units (the dense layer's bias after it),
  g starting at sqrt(d) for the d elements normalized together."""
  x = jax.random.normal(jax.random.key(0), (4, 5)) + 2.0
  m = NormDense(6, norm="scale")
  v = m.init(jax.random.key(1), x)["params"]
  assert list(v) == ["kernel", "bias", "g"] and v["g"].shape == ()
  np.testing.assert_allclose(v["g"], np.sqrt(6), rtol=1e-7)
  p = _perturbed(v)
  a = np.asarray(x, np.float64) @ np.asarray(p["kernel"], np.float64)
  want = float(p["g"]) * a / np.linalg.norm(a, axis=1, keepdims=True) + np.asarray(p["bias"])
  np.testing.assert_allclose(m.apply({"params": p}, x), want, rtol=1e-5, atol=1e-5)
  x4 = jax.random.normal(jax.random.key(3), (2, 4, 4, 3))
  vc = NormConv(5, norm="scale").init(jax.random.key(4), x4)
  np.testing.assert_allclose(vc["params"]["g"], np.sqrt(4 * 4 * 5), rtol=1e-7)
  y = np.asarray(NormConv(5, norm="scale").apply(vc, x4), np.float64)
  yb = y - np.asarray(vc["params"]["bias"])  # ||y - b|| = g over H x W x C
  np.testing.assert_allclose(np.linalg.norm(yb.reshape(2, -1), axis=1), np.sqrt(80), rtol=1e-5)
  xs = jax.random.normal(jax.random.key(5), (2, 3, 8))
  n = Normalize("scale")
  vn = n.init(jax.random.key(6), xs)
  assert list(vn["params"]) == ["g"]  # no bias of its own
  np.testing.assert_allclose(np.linalg.norm(np.asarray(n.apply(vn, xs), np.float64), axis=-1),
                             np.sqrt(8), rtol=1e-5)


@pytest.mark.slow
def test_transformer_runs_a_norm_defined_in_a_test_file(tmp_path):
  from lnorm.data import bytes_lm, files  # pylint: disable=g-import-not-at-top
  from tests.test_transformer_run import _tiny_novels  # pylint: disable=g-import-not-at-top
  pins = tmp_path / "pins.json"
  pins.write_text(json.dumps({bytes_lm.NOVELS: files.sha256_file(_tiny_novels(tmp_path))}))
  wd = tmp_path / "wd"
  r = subprocess.run([sys.executable, "tests/run_with_pins.py", str(pins),
                      "--config=configs/transformer.py:smoke", f"--workdir={wd}",
                      f"--config.norm={USER}", "--config.qk_norm=True",
                      "--config.num_steps=4", "--config.eval_every_steps=2", "--config.warmup_steps=1",
                      f"--config.data_dir={tmp_path}"],
                     cwd=REPO, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr
  ms = metrics(wd)
  assert [m["step"] for m in ms] == [2, 4] and all(np.isfinite(m["valid_bpc"]) for m in ms)
  assert "final_norm" in json.loads((wd / "grad_norms.json").read_text())["init"]["layers"]
