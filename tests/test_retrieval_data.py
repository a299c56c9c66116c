"""Vendrov's retrieval layout (lnorm/data/retrieval.py), the Flickr8k reader
(lnorm/data/flickr8k.py) and scripts/extract_flickr8k_features.py, on tiny
files written here: what loads, and the one-line errors of bad input."""

import numpy as np
import pytest
from flax import traverse_util

from lnorm import efficientnet_lite as enl
from lnorm.data import DataError
from lnorm.data import flickr8k, retrieval

CAPS = {
    "train": ["A dog runs .", "The dog 's ball", "a DOG, jumping!", "dog", "two dogs",
              "A cat sleeps .", "cat on a mat", "the cat", "a cat", "cats"],
    "dev": ["A bird flies", "bird", "a bird .", "birds", "the bird sings"],
    "test": ["A fish swims", "fish", "a dog fish", "fish !", "the fish"],
}


def _write(root, splits=("train", "dev", "test"), dim=3):
  rng = np.random.default_rng(0)
  for s in splits:
    n = len(CAPS[s]) // 5
    np.save(root / f"{s}_ims.npy", rng.standard_normal((n, dim)).astype(np.float32))
    (root / f"{s}_caps.txt").write_text("\n".join(CAPS[s]) + "\n")


def test_tokenize_and_vocab():
  assert retrieval.tokenize("A DOG's ball, jumping!") == ["a", "dog's", "ball", "jumping"]
  assert retrieval.tokenize("The dog 's ball .") == ["the", "dog", "'s", "ball"]
  v = retrieval.Vocab.build(CAPS["train"])
  assert v.words[:3] == retrieval.SPECIALS
  # a 5 times, cat 4, dog 4 (ties alphabetical), the 2, the rest once.
  assert v.words[3:7] == ("a", "cat", "dog", "the")
  v2 = retrieval.Vocab.build(CAPS["train"], min_count=2)
  assert set(v2.words[3:]) == {"a", "dog", "cat", "the"}
  v3 = retrieval.Vocab.build(CAPS["train"], max_size=5)
  assert len(v3) == 5 and v3.words[3:] == ("a", "cat")
  tokens, lengths = v2.encode(["a dog", "the zebra and the cat"])
  np.testing.assert_array_equal(lengths, [3, 6])
  assert tokens.dtype == np.int32 and tokens.shape == (2, 6)
  idx = v2.index
  np.testing.assert_array_equal(tokens[0], [idx["a"], idx["dog"], retrieval.EOS, 0, 0, 0])
  np.testing.assert_array_equal(tokens[1], [idx["the"], retrieval.UNK, retrieval.UNK,
                                            idx["the"], idx["cat"], retrieval.EOS])
  t2, l2 = v2.encode(["the zebra and the cat"], max_len=3)  # cut, still ends with EOS
  np.testing.assert_array_equal(t2[0], [idx["the"], retrieval.UNK, retrieval.EOS])
  assert l2[0] == 3 and v2.decode(t2[0]) == "the <unk>"
  with pytest.raises(ValueError, match="max_size"):
    retrieval.Vocab.build([], max_size=3)


def test_load_layout(tmp_path):
  _write(tmp_path)
  data = retrieval.load(tmp_path, max_len=6)
  assert set(data.splits) == set(retrieval.SPLITS)
  tr = data["train"]
  assert tr.images.shape == (2, 3) and tr.tokens.shape == (10, 6) and tr.num_images == 2
  np.testing.assert_array_equal(tr.image_of, [0] * 5 + [1] * 5)
  tok, lens, ims = tr.batch(np.array([7, 1]))
  np.testing.assert_array_equal(ims, tr.images[[1, 0]])
  assert data.vocab.decode(tok[0]) == "the cat" and lens[0] == 3
  # Words only in dev or test are unknown: the vocabulary is the training set's.
  assert "bird" not in data.vocab.words
  assert (data["dev"].tokens == retrieval.UNK).any()
  # Kiros's and Vendrov's own file names: a prefix.
  for s in retrieval.SPLITS:
    for suffix in ("_ims.npy", "_caps.txt"):
      (tmp_path / f"{s}{suffix}").rename(tmp_path / f"coco_{s}{suffix}")
  assert retrieval.load(tmp_path, prefix="coco_")["test"].images.shape == (1, 3)


def _error(tmp_path, match, **kw):
  with pytest.raises(DataError, match=match) as e:
    retrieval.load(tmp_path, **kw)
  assert isinstance(e.value, ValueError)  # the run machinery's one-line errors
  assert "\n" not in str(e.value)
  return str(e.value)


def test_bad_layouts(tmp_path):
  _write(tmp_path)
  (tmp_path / "dev_ims.npy").unlink()
  _error(tmp_path, r"dev_ims\.npy not found; .* Vendrov's layout")

  _write(tmp_path)
  (tmp_path / "test_caps.txt").write_text("\n".join(CAPS["test"][:4]) + "\n")
  _error(tmp_path, r"test_caps\.txt: 4 lines, not 5 captions an image")

  _write(tmp_path)
  (tmp_path / "train_caps.txt").write_text("\n".join(CAPS["train"][:5]) + "\n")
  msg = _error(tmp_path, r"train_ims\.npy: 2 rows of image features, but")
  assert "train_caps.txt has 5 captions, 1 images" in msg

  _write(tmp_path)
  (tmp_path / "dev_caps.txt").write_text("A bird\n\nbird\nbirds\nthe bird\n")
  _error(tmp_path, r"dev_caps\.txt, line 2: empty caption")

  _write(tmp_path)
  np.save(tmp_path / "dev_ims.npy", np.zeros((1, 4), np.float32))
  _error(tmp_path, r"dev_ims\.npy: 4 features an image, but train_ims\.npy has 3")

  _write(tmp_path)
  np.save(tmp_path / "test_ims.npy", np.array([[0.0, np.nan, 1.0]], np.float32))
  _error(tmp_path, r"test_ims\.npy: 1 NaN or Inf values")

  _write(tmp_path)
  (tmp_path / "train_ims.npy").write_bytes(b"\x93NUMPY garbage")
  _error(tmp_path, r"train_ims\.npy: cannot read it as \.npy")

  _write(tmp_path)
  np.save(tmp_path / "train_ims.npy", np.zeros((2,), np.float32))
  _error(tmp_path, r"train_ims\.npy: a float32 array of shape \(2,\); expected float")


def test_save_splits_is_whole_or_absent(tmp_path, monkeypatch):
  out = tmp_path / "feats"
  rng = np.random.default_rng(1)
  data = {s: (rng.standard_normal((len(CAPS[s]) // 5, 3)), CAPS[s]) for s in retrieval.SPLITS}
  retrieval.save_splits(out, data, {"README.md": "hi\n"})
  assert sorted(p.name for p in tmp_path.iterdir()) == ["feats"]
  loaded = retrieval.load_splits(out)
  np.testing.assert_allclose(loaded["train"].images, data["train"][0].astype(np.float32))
  assert loaded["dev"].captions == tuple(CAPS["dev"])
  # A write that fails half-way leaves the old set as it was.
  calls = []

  def failing_save(directory, split, images, captions, prefix=""):
    calls.append(split)
    if len(calls) == 2:
      raise OSError("No space left on device")
    return real_save(directory, split, images, captions, prefix)

  real_save = retrieval.save_split
  monkeypatch.setattr(retrieval, "save_split", failing_save)
  changed = {s: (np.zeros_like(x), c) for s, (x, c) in data.items()}
  with pytest.raises(OSError):
    retrieval.save_splits(out, changed)
  np.testing.assert_allclose(retrieval.load_splits(out)["train"].images,
                             data["train"][0].astype(np.float32))
  with pytest.raises(ValueError, match="5 an image"):
    real_save(tmp_path / "x", "train", np.zeros((2, 3)), CAPS["train"][:9])


# ------------------------------------------------------------------ Flickr8k


def _flickr(root, corrupt=None, sizes=((40, 30), (30, 50), (64, 64), (20, 20))):
  from PIL import Image
  names = [f"{1000 + i}_abc.jpg" for i in range(len(sizes))]
  (root / "images").mkdir(parents=True)
  rng = np.random.default_rng(2)
  for n, (w, h) in zip(names, sizes):
    Image.fromarray(rng.integers(0, 256, (h, w, 3)).astype(np.uint8)).save(root / "images" / n)
  if corrupt is not None:
    p = root / "images" / names[corrupt]
    p.write_bytes(p.read_bytes()[:60])
  lines = []
  for n in names:
    for k in range(5):
      sep = " " if k == 0 else "\t"  # one copy of the file has a space, not the tab
      lines.append(f"{n}#{k}{sep}Caption {k} of {n} .")
  lines.append("9999_zzz.jpg#0\tnot an image here")  # the full token file has more names
  for k in range(1, 5):
    lines.append(f"9999_zzz.jpg#{k}\tstill not")
  (root / flickr8k.TOKEN_FILE).write_text("\n".join(lines))  # no final newline
  (root / flickr8k.SPLIT_FILES["train"]).write_text(f"{names[0]}\n9999_zzz.jpg")
  (root / flickr8k.SPLIT_FILES["dev"]).write_text(names[1])
  (root / flickr8k.SPLIT_FILES["test"]).write_text(names[2])  # names[3]: in no list
  return names


def test_flickr8k_reader(tmp_path):
  names = _flickr(tmp_path)
  files, caps = flickr8k.load(tmp_path)
  assert [f.name for f in files["train"]] == [names[0], names[3]]  # unlisted -> train
  assert [f.name for f in files["dev"]] == [names[1]]
  assert [f.name for f in files["test"]] == [names[2]]
  assert caps[names[0]] == tuple(f"Caption {k} of {names[0]} ." for k in range(5))
  assert set(caps) == set(names)

  tok = tmp_path / flickr8k.TOKEN_FILE
  text = tok.read_text()
  tok.write_text(text.replace(f"{names[2]}#3\t", f"{names[2]}#1\t"))
  with pytest.raises(DataError, match=r"line \d+: a second caption #1 of 1002_abc\.jpg"):
    flickr8k.load(tmp_path)
  tok.write_text("\n".join(l for l in text.splitlines() if not l.startswith(names[1])))
  with pytest.raises(DataError, match=r"no captions for 1001_abc\.jpg"):
    flickr8k.load(tmp_path)
  tok.write_text(text)
  (tmp_path / flickr8k.SPLIT_FILES["test"]).write_text(names[1])
  with pytest.raises(DataError, match=r"1001_abc\.jpg is also in Flickr_8k\.devImages\.txt"):
    flickr8k.load(tmp_path)


def _weights(tmp_path):
  rng = np.random.default_rng(3)
  flat = {}
  for k, s in traverse_util.flatten_dict(enl.variable_shapes(include_top=False)).items():
    flat[k] = (rng.uniform(0.5, 1.5, s) if k[-1] == "var" else
               0.1 * rng.standard_normal(s)).astype(np.float32)
  return enl.save_variables(traverse_util.unflatten_dict(flat), tmp_path / "w.npz")


@pytest.mark.slow
def test_extract_script(tmp_path, capsys):
  from scripts import extract_flickr8k_features as ex
  src = tmp_path / "flickr"
  names = _flickr(src)
  w = _weights(tmp_path)
  out = tmp_path / "out"
  assert ex.main(["--flickr_dir", str(src), "--out", str(out), "--weights", str(w),
                  "--crops", "1", "--batch_images", "3"]) == 0
  data = retrieval.load(out)
  assert [data[s].num_images for s in retrieval.SPLITS] == [2, 1, 1]
  assert data["train"].images.shape == (2, enl.FEATURES)
  assert (out / "train_images.txt").read_text() == f"{names[0]}\n{names[3]}\n"
  assert "EfficientNet-Lite0" in (out / "README.md").read_text()
  assert data["dev"].captions[0] == f"Caption 0 of {names[1]} ."
  # The features are the CNN's on the centre crop of each image.
  from PIL import Image
  img = np.asarray(Image.open(src / "images" / names[2]).convert("RGB"))
  variables = enl.load_variables(w)
  want = enl.EfficientNetLite0().apply(variables, enl.preprocess(enl.ten_crops(img)[:1]))
  np.testing.assert_allclose(data["test"].images, want, rtol=1e-4, atol=1e-5)
  capsys.readouterr()

  # A corrupt image: one line, exit 1, and the set already there untouched.
  bad = tmp_path / "bad"
  _flickr(bad, corrupt=1)
  before = (out / "train_ims.npy").read_bytes()
  assert ex.main(["--flickr_dir", str(bad), "--out", str(out), "--weights", str(w),
                  "--crops", "1"]) == 1
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "1001_abc.jpg: cannot decode the image" in err
  assert (out / "train_ims.npy").read_bytes() == before
  assert not (tmp_path / "out.tmp").exists()
  # No converted weights: one line saying how to make them.
  assert ex.main(["--flickr_dir", str(src), "--out", str(tmp_path / "o2"),
                  "--weights", str(tmp_path / "none.npz")]) == 1
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "none.npz not found; convert the weights" in err
  assert not (tmp_path / "o2").exists()
