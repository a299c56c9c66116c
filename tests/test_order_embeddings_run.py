"""The order-embedding experiment (experiments/order_embeddings.py): the
per-tensor gradient clip against NumPy, Vendrov's batches, the config's
checks, a whole run with its resume, and bad input through the command line.

Data are tiny Vendrov-layout folders written here; /work/shared and the
feature cache are never read.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from configs import order_embeddings as oe_config
from experiments import order_embeddings as oe_exp
from experiments.runner.errors import ConfigError
from lnorm.data import retrieval
from tests.run_records import metrics, run_cli, straight_and_resumed, without_timing

WORDS = ("a", "dog", "cat", "runs", "on", "the", "grass", "red", "ball", "man", "sits")


def write_tiny(root, num=None, dim: int = 16, seed: int = 0):
  """A Vendrov-layout folder: ``num`` {split: images} (40 / 8 / 8), 5 random
  captions an image of 2-9 words, random non-negative features."""
  num = num or {"train": 40, "dev": 8, "test": 8}
  rng = np.random.default_rng(seed)
  splits = {}
  for split, n in num.items():
    caps = [" ".join(rng.choice(WORDS, rng.integers(2, 10))) for _ in range(5 * n)]
    splits[split] = (np.abs(rng.normal(size=(n, dim))).astype(np.float32), caps)
  return retrieval.save_splits(root, splits)


def tiny_config(features_dir, **overrides):
  c = oe_config.get_config("smoke")
  c.features_dir, c.num_train_images = str(features_dir), 0
  c.features, c.embed_dim, c.batch_size, c.num_epochs = 8, 8, 16, 3  # 2 updates a pass
  c.eval_every_steps, c.eval_batch_size = 2, 7
  for k, v in overrides.items():
    c[k] = v
  return c


def test_clip_each_by_norm_against_numpy():
  rng = np.random.default_rng(0)
  grads = {"a": rng.normal(size=(3, 4)) * 5, "b": rng.normal(size=(7,)) * 0.1,
           "c": {"d": rng.normal(size=(2, 2, 2)), "zero": np.zeros(3)}}
  grads = jax.tree.map(lambda g: jnp.asarray(g, jnp.float32), grads)
  tx = oe_exp.clip_each_by_norm(2.0)
  out, _ = tx.update(grads, tx.init(grads))

  def ref(g):  # each tensor on its own: g * min(1, 2 / ||g||)
    g = np.asarray(g, np.float64)
    n = np.sqrt((g ** 2).sum())
    return g * min(1.0, 2.0 / n) if n > 0 else g

  for got, g in zip(jax.tree.leaves(out), jax.tree.leaves(grads)):
    np.testing.assert_allclose(np.asarray(got), ref(g), rtol=1e-6, atol=1e-7)
  norms = {k: float(jnp.linalg.norm(v)) for k, v in out.items() if k != "c"}
  assert norms["a"] == pytest.approx(2.0, rel=1e-6)  # clipped
  assert norms["b"] == pytest.approx(float(jnp.linalg.norm(grads["b"])))  # left alone
  # Not the global norm: optax's global clip scales "b" too.
  glob, _ = optax.clip_by_global_norm(2.0).update(grads, optax.EmptyState())
  assert float(jnp.linalg.norm(glob["b"])) < norms["b"]


@pytest.mark.slow
def test_image_passes_are_vendrovs_batches():
  n, B = 10, 4
  feed = oe_exp.ImagePasses(data=None, num_images=n, batch_size=B, key=jax.random.key(3))
  plan = jax.tree.map(np.asarray, feed.plan(0, 6))  # 3 passes of 2 batches
  for p in range(3):
    imgs = plan["image"][2 * p:2 * p + 2].ravel()
    assert len(set(imgs)) == 2 * B and set(imgs) <= set(range(n))  # distinct images a pass
  assert (plan["caption"] // 5 == plan["image"]).all()  # each with one of its own captions
  assert len(set(plan["caption"].ravel() % 5)) > 1
  # A pure function of the step: any split of the range gives the same batches.
  later = jax.tree.map(np.asarray, feed.plan(3, 6))
  np.testing.assert_array_equal(later["caption"], plan["caption"][3:])


@pytest.mark.parametrize("field,value,message", [
    ("norm", "batch", "norm='batch' is not valid; choose one of: none, layer"),
    ("margin", 0.0, "margin=0.0 must be > 0"),
    ("grad_clip", -1.0, "grad_clip=-1.0 must be 0 (off) or more"),
    ("max_vocab", 3, "max_vocab=3 must be 0 (all words) or more than 3"),
    ("max_len", 1, "max_len=1 must be 0 (no cut) or at least 2"),
    ("features", 0, "features=0 is not valid"),
])
def test_validate(field, value, message):
  with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
    oe_exp.validate(tiny_config("x", **{field: value}))


def test_presets():
  paper = oe_config.get_config()
  assert (paper.features, paper.embed_dim, paper.batch_size, paper.learning_rate,
          paper.grad_clip, paper.margin, paper.eval_every_steps) == (1024, 300, 128, 1e-3,
                                                                    2.0, 0.05, 300)
  for preset in ("paper", "cpu", "smoke"):
    oe_exp.validate(oe_config.get_config(preset))
  with pytest.raises(ValueError, match="unknown preset 'gpu'"):
    oe_config.get_config("gpu")
  from scripts import extract_flickr8k_features as extract
  assert oe_exp.FEATURES_NAME == extract.OUT_NAME  # features_dir '' is where it writes


def test_batch_larger_than_the_images(tmp_path):
  write_tiny(tmp_path / "f")
  with pytest.raises(ConfigError, match="batch_size=41 is larger than the 40 training images"):
    oe_exp.train_and_evaluate(tiny_config(tmp_path / "f", batch_size=41), str(tmp_path / "run"))
  assert not (tmp_path / "run").exists()


@pytest.mark.slow
@pytest.mark.parametrize("norm", ["none", "layer"])
def test_run_records_and_resumes_bit_for_bit(tmp_path, norm):
  config = tiny_config(write_tiny(tmp_path / "f"), norm=norm)
  straight, s_state, resumed, r_state = straight_and_resumed(
      oe_exp.train_and_evaluate, config, tmp_path, stop_after=2, epochs=3)
  records = metrics(straight)
  assert [r["step"] for r in records] == [2, 4, 6] and "epoch" not in records[0]
  for split in ("dev", "test"):
    for key in ("caption_r1", "caption_r10", "image_r5", "image_mean_rank",
                "caption_median_rank", "image_recall_sum"):
      assert f"{split}_{key}" in records[-1]
  assert np.isfinite(records[-1]["train_loss"]) and records[-1]["train_loss"] > 0
  assert without_timing(metrics(resumed)) == without_timing(records)
  jax.tree.map(lambda a, b: None if jnp.array_equal(a, b) else pytest.fail("params differ"),
               s_state.params, r_state.params)
  init = json.loads((straight / "init_metrics.json").read_text())
  assert init["num_images"] == {"train": 40, "dev": 8, "test": 8}
  assert set(init["metrics"]) == {k for k in records[-1] if k.startswith(("dev_", "test_"))}


@pytest.mark.parametrize("damage,message", [
    ("rows", "train_ims.npy: 39 rows of image features, but "),
    ("missing", "test_caps.txt not found; "),
    ("lines", "dev_caps.txt: 39 lines, not 5 captions an image"),
])
def test_bad_input_is_one_line_and_a_nonzero_exit(tmp_path, damage, message):
  root = write_tiny(tmp_path / "f")
  if damage == "rows":
    np.save(root / "train_ims.npy", np.load(root / "train_ims.npy")[:39])
  elif damage == "missing":
    (root / "test_caps.txt").unlink()
  else:
    lines = (root / "dev_caps.txt").read_text().splitlines()
    (root / "dev_caps.txt").write_text("\n".join(lines[:-1]) + "\n")
  wd = tmp_path / "run"
  r = run_cli("--config=configs/order_embeddings.py:smoke", f"--workdir={wd}",
              f"--config.features_dir={root}")
  assert r.returncode == 1, r.stderr
  lines = r.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], r.stderr
  assert not (wd / "metrics.jsonl").exists() and not (wd / "checkpoints").exists()


@pytest.mark.slow
def test_cli_rejects_unknown_norm(tmp_path):
  r = run_cli("--config=configs/order_embeddings.py:smoke", f"--workdir={tmp_path / 'run'}",
              "--config.norm=batch")
  assert r.returncode == 2
  assert r.stderr.strip().startswith(
      "error: norm='batch' is not valid; choose one of: none, layer, rms")
  assert len(r.stderr.strip().splitlines()) == 1
  assert not (tmp_path / "run").exists()
