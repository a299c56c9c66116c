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


def test_long_labels_keep_the_legend_inside_the_figure(tmp_path, drawn):
  """Figure 4's three runs of 3 seeds ("LN(c)-LSTM (mean of 3 seeds)") on one
  panel: the legend's row is not cut at the figure's edges."""
  runs = {name: c for name, c in zip(("LSTM", "LN(c)-LSTM", "LN-LSTM"),
                                     curves(n_runs=3, seeds=3).values())}
  p = figures.plot(runs, tmp_path / "long.png", figures.Axis("m", "test bound (nats)"))
  _, fig = _axes(drawn)
  check(p, _axes(drawn)[0])
  from matplotlib.backends.backend_agg import FigureCanvasAgg  # pylint: disable=g-import-not-at-top
  box = fig.legends[0].get_window_extent(FigureCanvasAgg(fig).get_renderer())
  assert box.x0 >= 0 and box.x1 <= fig.bbox.width and box.y0 >= 0, (box, fig.bbox)


def test_one_legend_below_takes_every_panels_labels_once(tmp_path, drawn):
  """Panels of different runs (a norm missing from one, a baseline in
  another): with one_legend, one legend below holds each label once, in the
  order first drawn, and no panel carries its own."""
  fig, axes = figures.grid(3, "panels of different runs")
  for ax, labels in zip(axes, (["LN", "RMS"], ["RMS", "none"], ["LN"])):
    for l in labels:
      ax.plot([1, 2], [1, 2], label=l)
    ax.set(title="t", xlabel="x", ylabel="y")
  figures.finish(fig, axes, tmp_path / "union.png", one_legend=True)
  _, fig = _axes(drawn)
  assert [t.get_text() for t in fig.legends[0].get_texts()] == ["LN", "RMS", "none"]
  assert len(fig.legends) == 1 and not any(ax.get_legend() for ax in axes)


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


def _tick_texts(ax) -> list[str]:
  ax.figure.canvas.draw()
  return [t.get_text() for t in ax.get_yticklabels() + ax.get_yticklabels(minor=True)
          if t.get_text()]


def test_runs_ending_on_one_another_stay_apart_and_log_ticks_read_plainly(tmp_path, drawn):
  """Four runs with the same values (pre-LN under pre-RMSNorm): each its own
  colour, dash and marker, the markers at different points; a log axis over
  1.5-3.5 labels its ticks 2, 3 (not 2 x 10^0), one over decades 0.001."""
  same = [{"epoch": e + 1, "m": 3.5 - 0.1 * e, "w": 10.0 ** -e} for e in range(20)]
  runs = {f"run {i}": same for i in range(4)}
  figures.plot_panels({"": runs}, tmp_path / "f.png",
                      [figures.Axis("m", "m (nats)", yscale="log"),
                       figures.Axis("w", "w (nats)", yscale="log")])
  axes, _ = _axes(drawn)
  for ax in axes:
    lines = ax.get_lines()
    assert len({(l.get_color(), l.get_linestyle(), l.get_marker()) for l in lines}) == 4
    for attr in ("get_color", "get_linestyle", "get_marker"):
      assert len({getattr(l, attr)() for l in lines}) == 4, attr
    marked = [tuple(np.asarray(l.get_xdata())[l.get_markevery()[0]::l.get_markevery()[1]])
              for l in lines]
    assert len(set(m[0] for m in marked)) == 4  # the first markers fall on different epochs
  narrow, wide = (_tick_texts(ax) for ax in axes)
  assert "2" in narrow and "3" in narrow
  assert "0.001" in wide and "1" in wide
  for t in narrow + wide:
    assert "times" not in t and "^" not in t and "$" not in t, t
    float(t)  # a plain number


def test_transformer_gradient_norms_say_the_no_norm_init_in_math(tmp_path, drawn):
  """grad_norms.png: W^2 in mathtext (no literal caret), and the legend says
  that the no-norm model starts from another init."""
  from scripts.paper import transformer as tf
  c = type("C", (), {"num_layers": 3})()

  def record(scaled: bool, k: float) -> dict:
    g = {"w2": [k, 2 * k, 4 * k], "blocks": [k, k, k]}
    return {"config": {"scaled_residual_init": scaled},
            "seeds": [{"grad_norms": {"init": g, "final": g}}],
            "grad_norms": {"init": g, "final": g}}
  records = {tf.Setting(n): record(n == "none", 1.0 + i) for i, n in enumerate(tf.NORMS)}
  tf.plot_grad_norms(records, c, tmp_path / "g.png")
  axes, fig = _axes(drawn)
  check(tmp_path / "g.png", axes)
  texts = [ax.get_title() for ax in axes] + [t.get_text() for l in fig.legends
                                            for t in l.get_texts()]
  assert all("$W^2$" in t or "^" not in t for t in texts), texts
  labels = [t.get_text() for l in fig.legends for t in l.get_texts()]
  none = [l for l in labels if l.startswith(tf.LABELS["none"])]
  assert none and "init" in none[0] and "sqrt" in none[0]
  assert not any("init" in l for l in labels if l not in none)
