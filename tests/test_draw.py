"""DRAW (section 6.4): filterbanks, KL, the bound, training and the runner.

Data are tiny random binary images written here; nothing is downloaded and
/work/shared is never read.
"""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import draw as draw_config
from experiments import draw as draw_exp
from experiments.runner import loop
from experiments.runner import workdir as wdir
from experiments.runner import figures
from experiments.runner.errors import ConfigError, NonFiniteLossError
from lnorm import draw
from lnorm.data import binarized_mnist as bm
from tests.run_records import metrics, resume_ends_as_fresh, run_cli, without_timing
from tests.test_binarized_mnist import write_amat

LN2_784 = 784 * math.log(2)  # 543.43 nats: every pixel p = 1/2


def tiny_config(**overrides):
  c = draw_config.get_config("smoke")
  c.num_glimpses, c.features, c.latent, c.num_train, c.num_eval = 3, 16, 4, 0, 0
  c.batch_size, c.num_epochs, c.eval_batch_size = 16, 2, 7
  for k, v in overrides.items():
    c[k] = v
  return c


def random_images(n: int, seed: int = 0, p: float = 0.5) -> jnp.ndarray:
  return jnp.asarray((np.random.default_rng(seed).random((n, 784)) < p).astype(np.uint8))


# The filterbank and attention functions.

def test_filterbank_shapes_and_normalisation():
  B, n = 5, 3
  rng = np.random.default_rng(0)
  att = draw.attention_params(jnp.asarray(rng.normal(size=(B, 5)), jnp.float32), 20, 28, n)
  assert all(v.shape == (B,) for v in att)
  fx, fy = draw.filterbanks(att, 20, 28, n)
  assert fx.shape == (B, n, 28) and fy.shape == (B, n, 20)
  np.testing.assert_allclose(jnp.sum(fx, -1), 1.0, atol=1e-6)
  np.testing.assert_allclose(jnp.sum(fy, -1), 1.0, atol=1e-6)
  assert bool(jnp.all(fx >= 0))
  # A filter far off the image with a tiny width still sums to 1, with no NaN.
  f = draw.filterbank(jnp.array([-500.0]), jnp.array([1.0]), jnp.array([1e-4]), 2, 28)
  assert not bool(jnp.any(jnp.isnan(f)))
  np.testing.assert_allclose(jnp.sum(f, -1), 1.0, atol=1e-6)


def test_attention_params_match_draw_equations():
  a = np.array([[0.0, 0.0, 0.0, 0.0, 0.0], [0.5, -0.25, np.log(2.0), np.log(0.5), 1.0]],
               np.float32)
  att = draw.attention_params(jnp.asarray(a), 20, 28, 5)
  # DRAW (22)-(24), with H = 20 rows (B) and W = 28 columns (A).
  np.testing.assert_allclose(att.g_x, [14.5, 29 / 2 * 1.5], rtol=1e-6)
  np.testing.assert_allclose(att.g_y, [10.5, 21 / 2 * 0.75], rtol=1e-6)
  np.testing.assert_allclose(att.delta, [27 / 4, 27 / 4 * 0.5], rtol=1e-6)
  np.testing.assert_allclose(att.sigma2, [1.0, 2.0], rtol=1e-6)
  np.testing.assert_allclose(att.gamma, [1.0, np.e], rtol=1e-6)
  # The untrained grid spans the image: its outer filters sit on pixels 1 and 28.
  np.testing.assert_allclose(draw.filter_centres(att.g_x, att.delta, 5)[0],
                             [1.0, 7.75, 14.5, 21.25, 28.0], rtol=1e-6)


def test_filter_centres_are_where_the_parameters_say():
  g = jnp.array([10.0, 14.5, 9.0])
  delta = jnp.array([2.0, 3.0, 1.0])
  mu = draw.filter_centres(g, delta, 4)
  offsets = np.arange(1, 5) - 4 / 2 - 0.5  # DRAW (19): i - N/2 - 1/2, i = 1..N
  np.testing.assert_allclose(mu, np.asarray(g)[:, None] + np.asarray(delta)[:, None] * offsets)
  a = np.arange(1, 29)
  # Wide filters: the mean of each (over pixels 1..28) is its centre.
  f = draw.filterbank(g, delta, jnp.full((3,), 2.0), 4, 28)
  np.testing.assert_allclose(np.asarray(f) @ a, mu, atol=1e-4)
  # Sharp filters on whole pixels: the argmax is the centre.
  g_int, d_int = jnp.array([8.0, 20.0]), jnp.array([2.0, 4.0])  # mu: 7, 9; 18, 22
  f = draw.filterbank(g_int, d_int, jnp.full((2,), 0.05), 2, 28)
  np.testing.assert_array_equal(a[np.argmax(np.asarray(f), -1)],
                                draw.filter_centres(g_int, d_int, 2))


def sharp_attention(g_x, g_y, delta, gamma=1.0):
  """Attention whose filters pick single pixels: sigma^2 ~ 0."""
  one = jnp.ones((1,))
  return draw.Attention(g_x=g_x * one, g_y=g_y * one, delta=delta * one,
                        sigma2=1e-3 * one, gamma=gamma * one)


def test_read_and_write_address_rows_and_columns():
  H, W, n = 20, 28, 2
  x = jnp.arange(H * W, dtype=jnp.float32).reshape(1, H, W)
  # Centres x: 9 and 13 (columns), y: 4 and 8 (rows), 1-based.
  att = sharp_attention(g_x=11.0, g_y=6.0, delta=4.0, gamma=2.0)
  r = draw.read(x, 2 * x, att, n)
  rows, cols = np.array([4, 8]) - 1, np.array([9, 13]) - 1
  patch = np.asarray(x[0])[np.ix_(rows, cols)]
  np.testing.assert_allclose(r[0], 2.0 * np.concatenate([patch.ravel(), 2 * patch.ravel()]),
                             rtol=1e-5)
  w = jnp.array([[[1.0, 2.0], [3.0, 4.0]]])
  canvas = np.asarray(draw.write(w, att, H, W))[0]
  expected = np.zeros((H, W))
  expected[np.ix_(rows, cols)] = np.array([[1.0, 2.0], [3.0, 4.0]]) / 2.0
  np.testing.assert_allclose(canvas, expected, atol=1e-5)


# The bound.

def test_gaussian_kl_against_numpy():
  rng = np.random.default_rng(0)
  mu, log_sigma = rng.normal(size=(6, 10)), rng.normal(scale=0.5, size=(6, 10))
  sigma = np.exp(log_sigma)
  want = np.sum(-np.log(sigma) + (sigma ** 2 + mu ** 2) / 2 - 0.5, -1)
  got = draw.gaussian_kl(jnp.asarray(mu, jnp.float32), jnp.asarray(log_sigma, jnp.float32))
  np.testing.assert_allclose(got, want, rtol=1e-5)
  assert float(jnp.max(jnp.abs(draw.gaussian_kl(jnp.zeros((2, 4)), jnp.zeros((2, 4)))))) == 0


def test_bernoulli_nll_against_numpy():
  rng = np.random.default_rng(1)
  logits, x = rng.normal(scale=3, size=(4, 784)), (rng.random((4, 784)) < 0.3)
  p = 1 / (1 + np.exp(-logits))
  want = -np.sum(x * np.log(p) + (1 - x) * np.log(1 - p), -1)
  got = draw.bernoulli_nll(jnp.asarray(logits, jnp.float32), jnp.asarray(x, jnp.float32))
  np.testing.assert_allclose(got, want, rtol=1e-5)


# Shapes shared by the tests below and the ``tiny`` runs, so that they share
# compiled steps: 64 training images in batches of 16, 12 to evaluate in 7s.
NUM_TINY = {"train": 64, "valid": 12, "test": 12}
# XLA's backend optimisations off: these tiny graphs then compile several
# times faster. Only for steps that no ``train_and_evaluate`` here reuses.
FAST = {"xla_backend_optimization_level": 0}


def compiled_epoch(config, state, x, fast: bool):
  """``(state, epoch) -> (state, mean [bound, KL])``: an epoch of the loop's
  scanned steps over ``x``, compiled for ``state``."""
  feed = draw_exp.feed(draw_exp.create_model(config), x, jax.random.key(0), 16)
  spe = feed.steps_per_epoch
  chunk = jax.jit(loop.scan_steps(lambda s, b: draw_exp.train_step(s, *b), feed),
                  donate_argnums=(0,))
  compiled = chunk.lower(state, feed.data, feed.plan(0, spe)).compile(FAST if fast else None)

  def run(state, epoch):
    state, stats_Sx2 = compiled(state, feed.data, feed.plan(epoch * spe, (epoch + 1) * spe))
    return state, jnp.mean(stats_Sx2, 0)
  return run


def evaluate(config, state, x, key, chunk: int, fast: bool):
  model = draw_exp.create_model(config)
  if not fast:  # The jitted call, as train_and_evaluate makes it.
    return draw_exp.evaluate(model, state, x, key, chunk)
  return draw_exp.evaluate.lower(model, state, x, key, chunk).compile(FAST)(state, x, key)


@pytest.mark.slow
@pytest.mark.parametrize("norm", ("none", "layer_c", "layer"))
def test_bound_at_initialisation_then_training(norm):
  fast = norm != tiny_config().norm
  config = tiny_config(norm=norm)
  state = draw_exp.create_train_state(config, jax.random.key(0))
  m = evaluate(config, state, random_images(12, p=0.13), jax.random.key(1), 7, fast)
  # Almost nothing written and q ~ prior: every pixel p ~ 1/2.
  assert abs(float(m["bound"]) - LN2_784) < 0.1 * LN2_784
  assert abs(float(m["recon"]) - LN2_784) < 0.01 * LN2_784
  assert 0 < float(m["kl"]) < 0.01 * LN2_784

  x = random_images(NUM_TINY["train"], p=0.13)
  run_epoch = compiled_epoch(config, state, x, fast)
  bounds = []
  for epoch in range(3):
    state, stats = run_epoch(state, epoch)
    assert np.all(np.isfinite(np.asarray(stats))), (epoch, stats)
    bounds.append(float(stats[0]))
  assert all(np.all(np.isfinite(np.asarray(p))) for p in jax.tree.leaves(state.params))
  assert bounds[-1] < bounds[0] < LN2_784 + 1


@pytest.mark.slow
def test_evaluation_does_not_depend_on_the_chunk():
  config = tiny_config()
  state = draw_exp.create_train_state(config, jax.random.key(0))
  x = random_images(NUM_TINY["train"], p=0.13)
  state, _ = compiled_epoch(config, state, x, fast=False)(state, 0)
  x = random_images(12, seed=1, p=0.13)
  a = evaluate(config, state, x, jax.random.key(5), 12, fast=True)
  b = evaluate(config, state, x, jax.random.key(5), 7, fast=False)  # 7 + 5 padded to 7
  assert float(a["kl"]) > 0
  for k in ("bound", "recon", "kl"):
    np.testing.assert_allclose(float(a[k]), float(b[k]), rtol=1e-5)
  np.testing.assert_allclose(float(a["bound"]), float(a["recon"] + a["kl"]), rtol=1e-6)


@pytest.mark.slow
def test_samples_and_canvases():
  state = draw_exp.create_train_state(tiny_config(), jax.random.key(0))
  samples, canvases = draw_exp.sample_arrays(draw_exp.create_model(tiny_config()), state,
                                             jax.random.key(0))
  assert samples.shape == (100, 28, 28) and canvases.shape == (8, 3, 28, 28)
  assert np.all((samples >= 0) & (samples <= 1))
  np.testing.assert_array_equal(canvases[:, -1], samples[:8])
  # Untrained: almost nothing is written, every canvas is near sigmoid(0).
  np.testing.assert_allclose(canvases, 0.5, atol=0.05)
  assert np.std(samples) > 0


def test_model_rejects_wrong_noise_shape():
  model = draw.DRAW(num_glimpses=3, features=8, latent=4)
  with pytest.raises(ValueError, match=r"noise has shape \(2, 4, 4\); expected"):
    model.init(jax.random.key(0), jnp.zeros((2, 784)), jnp.zeros((2, 4, 4)))


# The experiment loop and the CLI.

@pytest.fixture
def tiny(tmp_path, monkeypatch):
  """A data_dir with 64 / 12 / 12 binarized images, and a matching config."""
  _, checksums = write_amat(tmp_path / "data", num=NUM_TINY)
  monkeypatch.setattr(bm, "SHA256", checksums)
  return tiny_config(data_dir=str(tmp_path / "data"))


@pytest.mark.slow
def test_workdir_contents_and_resume(tiny, tmp_path):
  wd = tmp_path / "run"
  draw_exp.train_and_evaluate(tiny, str(wd))
  first = metrics(wd)
  assert [r["epoch"] for r in first] == [1, 2] and [r["step"] for r in first] == [4, 8]
  for key in ("train_bound", "valid_bound", "test_bound", "test_kl", "examples_per_sec"):
    assert all(key in r for r in first)
  assert sorted(p.name for p in (wd / "checkpoints").iterdir()) == ["4", "8"]
  assert (wd / "samples.png").stat().st_size and (wd / "canvas.png").stat().st_size
  assert json.loads((wd / "config.json").read_text())["config"]["experiment"] == "draw"

  # Resuming to 3 epochs runs epoch 3 only and ends where a fresh 3-epoch run ends.
  tiny.num_epochs = 3
  resume_ends_as_fresh(draw_exp.train_and_evaluate, tiny, wd, tmp_path / "fresh", first, 12)
  figure = figures.plot({"resumed": wd, "fresh": tmp_path / "fresh"}, tmp_path / "fig4.png",
                        "test_bound")
  assert figure.stat().st_size


@pytest.mark.slow
def test_nan_stops_and_keeps_last_good_checkpoint(tiny, tmp_path, monkeypatch):
  wd = tmp_path / "run"
  tiny.num_epochs = 1
  draw_exp.train_and_evaluate(tiny, str(wd))
  # NaN parameters on resume make epoch 2 NaN, with no step to recompile.
  restore = wdir.restore_latest

  def poisoned(mngr, state):
    state, step = restore(mngr, state)
    return state.replace(params=jax.tree.map(lambda p: p * jnp.nan, state.params)), step

  monkeypatch.setattr(wdir, "restore_latest", poisoned)
  tiny.num_epochs = 3
  with pytest.raises(NonFiniteLossError, match="nan in epoch 2.*step 4"):
    draw_exp.train_and_evaluate(tiny, str(wd))
  assert sorted(p.name for p in (wd / "checkpoints").iterdir()) == ["4"]
  assert [r["epoch"] for r in metrics(wd)] == [1]


@pytest.mark.parametrize("field,value,message", [
    ("norm", "batch", "norm='batch' is not valid; choose one of: none, layer, layer_c, rms"),
    ("data_source", "idx", "data_source='idx' is not valid; choose one of: amat, tfds"),
    ("num_glimpses", 0, "num_glimpses=0 is not valid"),
])
def test_validate(field, value, message):
  with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
    draw_exp.validate(tiny_config(**{field: value}))


def test_batch_larger_than_the_data(tiny, tmp_path):
  tiny.batch_size = 65
  with pytest.raises(ConfigError, match="batch_size=65 is larger than the 64 training"):
    draw_exp.train_and_evaluate(tiny, str(tmp_path / "run"))
  assert not (tmp_path / "run").exists()


def test_presets():
  paper = draw_config.get_config()
  assert (paper.num_glimpses, paper.features, paper.latent, paper.batch_size,
          paper.num_epochs, paper.read_n, paper.write_n) == (64, 256, 100, 128, 200, 2, 5)
  assert paper.norm == "layer_c" and paper.learning_rate == 1e-3
  for preset in ("paper", "cpu", "smoke"):
    draw_exp.validate(draw_config.get_config(preset))
  with pytest.raises(ValueError, match="unknown preset 'gpu'"):
    draw_config.get_config("gpu")


@pytest.mark.slow
def test_cli_rejects_unknown_norm(tmp_path):
  wd = tmp_path / "run"
  r = run_cli("--config=configs/draw.py:smoke", f"--workdir={wd}", "--config.norm=batch",
              env={"LNORM_DATA_DIR": str(tmp_path / "none")})
  assert r.returncode == 2
  # Every norm of an LSTM's gates or cell but batch norm's running statistics.
  assert r.stderr.strip().startswith("error: norm='batch' is not valid; choose one of: none, "
                                     "layer, layer_c, rms")
  assert len(r.stderr.strip().splitlines()) == 1
  assert not wd.exists()
