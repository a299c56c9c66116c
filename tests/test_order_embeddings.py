"""Order embeddings (lnorm/order_embeddings.py) against float64 NumPy
references written out here: the violation penalty, Vendrov's contrastive
loss, the retrieval ranks and metrics on hand-built cases, the chance row by
enumeration, the model's invariants and one gradient step."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lnorm import order_embeddings as oe


def _ref_violations(c, i):
  c, i = np.asarray(c, np.float64), np.asarray(i, np.float64)
  E = np.zeros((len(c), len(i)))
  for a in range(len(c)):
    for b in range(len(i)):
      E[a, b] = sum(max(0.0, c[a, d] - i[b, d]) ** 2 for d in range(c.shape[1]))
  return E


def _ref_loss(c, i, margin, same=None):
  E = _ref_violations(c, i)
  total = 0.0
  for b in range(len(c)):
    for j in range(len(c)):
      if j == b or (same is not None and same[j] == same[b]):
        continue
      total += max(0.0, margin - E[b, j] + E[b, b])  # caption b, wrong image j
      total += max(0.0, margin - E[j, b] + E[b, b])  # image b, wrong caption j
  return total


def _ref_ranks(E, k=5):
  """Vendrov's i2t / t2i written out: sort, find the first true match; ties
  resolved against the truth by sorting (violation, is_true)."""
  E = np.asarray(E, np.float64)
  C, I = E.shape
  cap = []
  for im in range(I):
    order = sorted(range(C), key=lambda c: (E[c, im], c // k == im))
    cap.append(1 + next(n for n, c in enumerate(order) if c // k == im))
  img = []
  for c in range(C):
    order = sorted(range(I), key=lambda j: (E[c, j], j == c // k))
    img.append(1 + order.index(c // k))
  return np.array(cap), np.array(img)


def test_violation_penalty_direction_and_values():
  # A caption below its image in every coordinate is no violation; each
  # coordinate where the caption is above the image adds its squared excess.
  image = np.array([[0.5, 0.4, 0.3]])
  captions = np.array([[0.2, 0.1, 0.3], [0.6, 0.4, 0.0], [0.9, 0.9, 0.9]])
  E = np.asarray(oe.order_violations(jnp.asarray(captions, jnp.float32),
                                     jnp.asarray(image, jnp.float32)))
  np.testing.assert_allclose(E[:, 0], [0.0, 0.01, 0.16 + 0.25 + 0.36], atol=1e-7)
  # The order is not symmetric: the image is not below the caption.
  flipped = float(oe.order_violations(jnp.asarray(image, jnp.float32),
                                      jnp.asarray(captions[:1], jnp.float32))[0, 0])
  np.testing.assert_allclose(flipped, 0.09 + 0.09, rtol=1e-6)
  rng = np.random.default_rng(0)
  c, i = rng.random((7, 5)), rng.random((4, 5))
  np.testing.assert_allclose(oe.order_violations(c.astype(np.float32), i.astype(np.float32)),
                             _ref_violations(c, i), rtol=1e-5, atol=1e-6)
  # The chunked form, with a caption count that is not a multiple of the chunk.
  np.testing.assert_allclose(oe.violation_matrix(c.astype(np.float32), i.astype(np.float32),
                                                 chunk=3),
                             _ref_violations(c, i), rtol=1e-5, atol=1e-6)


def test_contrastive_loss_two_pairs_by_hand():
  c = np.array([[0.0, 0.0], [1.0, 0.0]], np.float32)
  i = np.array([[0.0, 0.0], [1.0, 0.02]], np.float32)
  # E = [[0, 0], [1, 0]]: caption 0 (at the origin) is below both images.
  # Caption 0 vs image 1: max(0, .05 - 0 + 0) = .05; caption 1 vs image 0:
  # max(0, .05 - 1 + 0) = 0; image 0 vs caption 1: 0; image 1 vs caption 0: .05.
  np.testing.assert_allclose(float(oe.contrastive_loss(c, i)), 0.1, rtol=1e-6)
  np.testing.assert_allclose(float(oe.contrastive_loss(c, i, margin=0.0)), 0.0, atol=1e-7)


def test_contrastive_loss_against_reference():
  rng = np.random.default_rng(1)
  B, D = 6, 4
  c = np.abs(rng.standard_normal((B, D))) * 0.3
  i = np.abs(rng.standard_normal((B, D))) * 0.3
  E = _ref_violations(c, i)
  hinge = 0.05 - E + np.diag(E)[:, None]
  off = ~np.eye(B, dtype=bool)
  assert (hinge[off] > 0).any() and (hinge[off] <= 0).any()  # both kinds of term
  for margin in (0.05, 0.2):
    np.testing.assert_allclose(float(oe.contrastive_loss(c.astype(np.float32),
                                                         i.astype(np.float32), margin)),
                               _ref_loss(c, i, margin), rtol=1e-5)
  same = np.array([0, 0, 1, 2, 2, 3])
  np.testing.assert_allclose(
      float(oe.contrastive_loss(c.astype(np.float32), i.astype(np.float32), 0.05,
                                jnp.asarray(same))),
      _ref_loss(c, i, 0.05, same), rtol=1e-5)


def test_ranks_on_a_hand_built_matrix():
  # 2 images, 5 captions each (captions 0-4 of image 0, 5-9 of image 1).
  E = np.array([
      # image 0, image 1
      [0.1, 0.5],   # c0: own image first (rank 1)
      [0.6, 0.2],   # c1: image 1 better: own image rank 2
      [0.3, 0.3],   # c2: a tie, counted against the truth: rank 2
      [0.9, 0.8],   # c3: rank 2
      [0.05, 0.7],  # c4: rank 1
      [0.4, 0.45],  # c5 (image 1): image 0 better: rank 2
      [0.9, 0.01],  # c6: rank 1
      [0.5, 0.6],   # c7: rank 2
      [0.7, 0.3],   # c8: rank 1
      [0.2, 0.3],   # c9: rank 2
  ])
  r_cap, r_img = oe.ranks(jnp.asarray(E))
  np.testing.assert_array_equal(r_img, [1, 2, 2, 2, 1, 2, 1, 2, 1, 2])
  # Image 0's best own caption is c4 (0.05): nothing is lower: rank 1.
  # Image 1's best own caption is c6 (0.01): rank 1. Make image 1's best 0.2
  # to see other captions ahead: c1 (0.2, a tie: against the truth) -> rank 2.
  np.testing.assert_array_equal(r_cap, [1, 1])
  E2 = E.copy()
  E2[5:, 1] = [0.45, 0.2, 0.6, 0.3, 0.3]
  r_cap2, _ = oe.ranks(jnp.asarray(E2))
  np.testing.assert_array_equal(r_cap2, [1, 2])
  m = oe.retrieval_metrics(E2)
  assert m["image_r1"] == pytest.approx(40.0) and m["image_r5"] == 100.0
  assert m["image_mean_rank"] == pytest.approx(1.6) and m["image_median_rank"] == 2.0
  assert m["caption_r1"] == pytest.approx(50.0) and m["caption_mean_rank"] == pytest.approx(1.5)


def test_metrics_against_the_sorting_reference():
  rng = np.random.default_rng(2)
  for I in (3, 12):
    E = rng.random((5 * I, I)).astype(np.float32).astype(np.float64)  # exact in float32
    E[rng.random(E.shape) < 0.2] = 0.0  # exact zeros: ties, as order violations make
    r_cap, r_img = oe.ranks(E)
    ref_cap, ref_img = _ref_ranks(E)
    np.testing.assert_array_equal(r_cap, ref_cap)
    np.testing.assert_array_equal(r_img, ref_img)
    m = oe.retrieval_metrics(E)
    for name, r in (("caption", ref_cap), ("image", ref_img)):
      for K in (1, 5, 10):
        assert m[f"{name}_r{K}"] == pytest.approx(100.0 * np.mean(r <= K))
      assert m[f"{name}_mean_rank"] == pytest.approx(r.mean())
      assert m[f"{name}_median_rank"] == pytest.approx(np.median(r))
  # A collapsed model (every violation 0) ranks every true match last.
  r_cap, r_img = oe.ranks(np.zeros((10, 2)))
  np.testing.assert_array_equal(r_cap, [6, 6])
  np.testing.assert_array_equal(r_img, [2] * 10)
  with pytest.raises(ValueError, match="5 captions an image"):
    oe.ranks(np.zeros((9, 2)))


def test_chance_metrics_by_enumeration():
  # I = 3 images, k = 2 captions each: every ordering of the C = 6 captions
  # for caption retrieval, of the 3 images for image retrieval.
  I, k = 3, 2
  C = I * k
  cap_ranks = []
  for perm in itertools.permutations(range(C)):  # perm[p] = caption at place p
    first = next(p for p, c in enumerate(perm) if c // k == 0)
    cap_ranks.append(first + 1)
  img_ranks = np.arange(1, I + 1)  # the own image's place, uniform
  got = oe.chance_metrics(I, k)
  cap_ranks = np.array(cap_ranks)
  for K in (1, 5, 10):
    assert got[f"caption_r{K}"] == pytest.approx(100.0 * np.mean(cap_ranks <= K))
    assert got[f"image_r{K}"] == pytest.approx(100.0 * np.mean(img_ranks <= K))
  assert got["caption_mean_rank"] == pytest.approx(cap_ranks.mean())
  assert got["image_mean_rank"] == pytest.approx(img_ranks.mean())
  # The distribution's median: the first rank whose probability reaches 1/2.
  ranks_sorted = np.sort(cap_ranks)
  assert got["caption_median_rank"] == ranks_sorted[(len(ranks_sorted) - 1) // 2]
  # A 1,000-image test set (COCO's 1k folds): R@10 of image retrieval is 1%.
  assert oe.chance_metrics(1000)["image_r10"] == pytest.approx(1.0)
  assert oe.chance_metrics(1000)["caption_r1"] == pytest.approx(0.1)  # 5 of 5,000 captions


def _tiny_model(norm="none"):
  model = oe.OrderEmbedding(vocab_size=11, embed_dim=6, features=8, norm=norm)
  rng = np.random.default_rng(3)
  tokens = np.zeros((4, 7), np.int32)
  for b, n in enumerate((3, 6, 1, 4)):
    tokens[b, :n] = rng.integers(3, 11, n)
    tokens[b, n] = 1  # EOS
  images = rng.standard_normal((4, 5)).astype(np.float32)
  params = model.init(jax.random.key(0), tokens, images)["params"]
  return model, params, tokens, images


@pytest.mark.parametrize("norm", ["none", "layer"])
def test_model_invariants(norm):
  model, params, tokens, images = _tiny_model(norm)
  c, i = model.apply({"params": params}, tokens, images)
  assert c.shape == (4, 8) and i.shape == (4, 8)
  for x in (c, i):  # unit norm, in the non-negative orthant
    assert float(x.min()) >= 0
    np.testing.assert_allclose(np.linalg.norm(np.asarray(x), axis=1), 1.0, rtol=1e-5)
  # More padding does not change a caption's embedding (the carry is frozen).
  padded = np.concatenate([tokens, np.zeros((4, 5), np.int32)], 1)
  np.testing.assert_allclose(model.apply({"params": params}, padded,
                                         method=oe.OrderEmbedding.encode_captions), c,
                             rtol=1e-5, atol=1e-6)
  if norm == "layer":
    assert "gain_h" in params["encoder"]
  # Embeddings' initial scale as in Vendrov's code: U[-0.1, 0.1].
  e = np.asarray(params["embed"]["embedding"])
  assert e.min() < -0.05 and e.max() > 0.05 and np.abs(e).max() <= 0.1


def test_norm_validated():
  with pytest.raises(ValueError, match="norm='batch' is not valid; choose one of: none, layer"):
    oe.OrderEmbedding(vocab_size=5, norm="batch").init(
        jax.random.key(0), np.ones((1, 2), np.int32), np.ones((1, 3), np.float32))


@pytest.mark.slow
@pytest.mark.parametrize("norm", ["none", "layer"])
def test_one_gradient_step(norm):
  model, params, tokens, images = _tiny_model(norm)
  f = lambda p: oe.loss(model, p, tokens, images, margin=0.5)[0]
  value, grads = jax.value_and_grad(f)(params)
  assert float(value) > 0
  for path, g in jax.tree_util.tree_leaves_with_path(grads):
    assert np.isfinite(np.asarray(g)).all(), path
  norms_ = {jax.tree_util.keystr(p): float(jnp.linalg.norm(g))
            for p, g in jax.tree_util.tree_leaves_with_path(grads)}
  assert all(v > 0 for v in norms_.values()), norms_
  # The gradient agrees with a central difference along a random direction.
  rng = np.random.default_rng(4)
  d = jax.tree.map(lambda g: jnp.asarray(rng.standard_normal(g.shape), g.dtype), grads)
  h = 1e-3
  shift = lambda s: jax.tree.map(lambda p, v: p + s * v, params, d)
  fd = (float(f(shift(h))) - float(f(shift(-h)))) / (2 * h)
  an = sum(float((g * v).sum()) for g, v in zip(jax.tree.leaves(grads), jax.tree.leaves(d)))
  assert fd == pytest.approx(an, rel=2e-2, abs=1e-3)
  # One small step down the gradient (of length 1e-3) lowers the loss.
  gnorm = math.sqrt(sum(v ** 2 for v in norms_.values()))
  stepped = jax.tree.map(lambda p, g: p - 1e-3 / gnorm * g, params, grads)
  assert float(f(stepped)) < float(value)


def _random_captions(rng, num: int, width: int) -> np.ndarray:
  """``num`` captions of 1-4 word ids (3-10), then EOS (1), padded to ``width``."""
  tokens = np.zeros((num, width), np.int32)
  for c in range(num):
    n = rng.integers(1, 5)
    tokens[c, :n] = rng.integers(3, 11, n)
    tokens[c, n] = 1
  return tokens


def _evaluation_case(seed: int, num_images: int, width: int):
  """A tiny model, its parameters, ``num_images`` images with 5 random
  captions each padded to ``width``, and the metrics computed directly."""
  model, params, _, _ = _tiny_model()
  rng = np.random.default_rng(seed)
  tokens = _random_captions(rng, 5 * num_images, width)
  images = rng.standard_normal((num_images, 5)).astype(np.float32)
  c, i = model.apply({"params": params}, tokens, images)
  return model, params, tokens, images, oe.retrieval_metrics(_ref_violations(c, i))


def test_evaluate_matches_direct_computation():
  model, params, tokens, images, want = _evaluation_case(5, 3, 6)
  got = oe.evaluate(model, params, tokens, images, batch_size=4)  # batches padded
  assert got.keys() == want.keys()
  for key in want:
    assert got[key] == pytest.approx(want[key]), key


@pytest.mark.slow
def test_evaluate_cuts_padding_exactly():
  # Captions padded far past their longest (20 columns, at most 5 tokens): the
  # length-sorted batches cut to 8 columns give the metrics of the full width,
  # at any batch size.
  model, params, tokens, images, want = _evaluation_case(6, 4, 20)
  for batch_size in (3, 7, 64):
    assert oe.evaluate(model, params, tokens, images, batch_size=batch_size) == pytest.approx(want)
