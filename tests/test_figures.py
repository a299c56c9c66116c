"""Every kind of figure, drawn from tiny metrics written here: readable on a
laptop at 100% (its pixel size, no strip), every panel titled, both axes
labelled, and the legend outside the panels."""

import json

import numpy as np
import pytest
from PIL import Image

from experiments.runner import figures
from experiments.handwriting import plot_attention
from scripts import compare

MAX_W, MAX_H = 2000, 2000  # pixels; a laptop screen shows about 1900 x 1000 at 100%


def curves(n_runs: int = 2, n: int = 6, seeds: int = 1, metrics=("m",)):
  rng = np.random.default_rng(0)
  return {f"run {i}": [[{"step": 10 * (e + 1), "epoch": e + 1,
                         **{k: float(rng.uniform(0.1, 1.0)) for k in metrics}}
                        for e in range(n)] for _ in range(seeds)] for i in range(n_runs)}


def check(path, monkeypatch_axes):
  w, h = Image.open(path).size
  assert w <= MAX_W and h <= MAX_H, (w, h)
  assert max(w, h) / min(w, h) < 3.5, f"a strip: {w} x {h}"
  axes = [a for a in monkeypatch_axes if a.get_visible()]
  assert axes
  for ax in axes:
    assert ax.get_title().strip(), "a panel without a title"
    assert ax.get_xlabel().strip() and ax.get_ylabel().strip()
  return axes


@pytest.fixture
def drawn(monkeypatch):
  """The axes of the figures saved, kept for inspection."""
  kept = []
  real = figures.save

  def save(fig, path, **kw):
    kept.append(list(fig.axes))
    kept[-1].extend([fig])
    return real(fig, path, **kw)
  monkeypatch.setattr(figures, "save", save)
  return kept


def _axes(drawn):
  *axes, fig = drawn[-1]
  return [a for a in axes if a.get_label() != "<colorbar>"], fig


def test_one_metric(tmp_path, drawn):
  p = figures.plot(curves(), tmp_path / "one.png", figures.Axis("m", "test error (fraction)"),
                   title="A stand-in run")
  axes, fig = _axes(drawn)
  (ax,) = check(p, axes)
  assert ax.get_title() == "test error" and ax.get_ylabel() == "fraction"
  assert fig.legends and not ax.get_legend()  # below the panel, not over the curves


@pytest.mark.parametrize("n_metrics,groups", [(8, 1), (2, 1), (2, 2)])
def test_panels(tmp_path, drawn, n_metrics, groups):
  names = [f"m{i}" for i in range(n_metrics)]
  runs = curves(seeds=3, metrics=names)
  panels = {f"batch {g}": runs for g in range(groups)} if groups > 1 else {"": runs}
  p = figures.plot_panels(panels, tmp_path / "grid.png",
                          [figures.Axis(m, f"metric {m} (nats)") for m in names], x="step",
                          title="Skip-thoughts on a stand-in")
  axes, _ = _axes(drawn)
  axes = check(p, axes)
  assert len(axes) == n_metrics * groups
  titles = [a.get_title() for a in axes]
  assert len(set(titles)) == len(titles)  # each panel says which one it is
  w, _ = Image.open(p).size
  assert w <= figures.MAX_COLS * figures.PANEL_IN[0] * figures.DPI + 1


def test_attention(tmp_path, drawn):
  text = "a line of text that the network wrote, 50 chars!!"
  phi = np.random.default_rng(0).dirichlet(np.ones(len(text)), size=300)
  p = plot_attention(phi, text, "Soft window", tmp_path / "attention.png")
  axes, fig = _axes(drawn)
  (ax,) = check(p, axes)
  # Every character labelled, at a size that reads (>= 9 pt: 14 px at 110 dpi).
  labels = ax.get_yticklabels()
  assert len(labels) == len(text) and min(l.get_fontsize() for l in labels) >= 9
  # Rows at least a label high: the labels cannot overlap.
  assert Image.open(p).size[1] / len(text) >= 9 / 72 * figures.DPI


def test_compare_figure(tmp_path, drawn):
  for name, sign in (("a", 1), ("b", -1)):
    wd = tmp_path / name
    wd.mkdir()
    (wd / "config.json").write_text(json.dumps({"config": {"experiment": "x", "norm": name}}))
    (wd / "metrics.jsonl").write_text("".join(json.dumps(
        {"step": s, "valid_nll": sign * 500.0 - s, "test_error": 0.5 / s**2}) + "\n"
        for s in range(1, 6)))
  out = tmp_path / "cmp.png"
  compare.compare([str(tmp_path / "a"), str(tmp_path / "b")], ["valid_nll", "test_error"],
                  out=out)
  axes, _ = _axes(drawn)
  check(out, axes)
  # Negative NLLs: a linear axis, whose curves show.
  assert [a.get_yscale() for a in axes] == ["linear", "log"]
