"""Section 5.2 measured: the Fisher information of small normalized GLMs
(``lnorm.fisher``) against the paper's closed forms, the metric along the gains
as the input is re-scaled, and ds^2 = d^T F d for a fixed step at W and at 2W.

``write_results(out_dir, command)`` writes results.md and geometry.png."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from experiments.runner import workdir as wdir
from lnorm import fisher as fi

D, H, N = 4, 3, 16  # inputs, units (classes), data points
SEEDS = tuple(range(5))
PHI = 0.5  # the Gaussian outputs' variance
MC_SAMPLES = 20_000
INPUT_SCALES = (0.01, 0.1, 1.0, 10.0, 100.0)
APPENDIX_EQ = {"batch": "32", "layer": "33", "weight": "34", "none": "35"}  # by norm
WEIGHT_SCALES = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
NAMES = {"none": "none (GLM)", "batch": "batch norm", "weight": "weight norm",
         "layer": "layer norm"}


def glms(eps: float = 0.0) -> list[fi.GLM]:
  return [fi.GLM(n, o, PHI if o == "gaussian" else 1.0, eps)
          for o in fi.OUTPUTS for n in fi.NORMS]


def name(glm: fi.GLM) -> str:
  return f"{glm.output}, {NAMES[glm.norm]}"


def data(seed: int) -> jax.Array:
  """N inputs, not centred, of unequal spread: so centring and scaling matter."""
  rng = np.random.default_rng(seed)
  x = rng.normal(rng.normal(0, 1, D), rng.uniform(0.5, 2, D), (N, D))
  return jnp.asarray(x, jnp.float64)


def params(seed: int, glm: fi.GLM) -> jax.Array:
  return fi.init_params(jax.random.PRNGKey(seed), glm.norm, D, H)


@functools.cache
def _jit(f):
  return jax.jit(f, static_argnums=2)


def exact(theta, x, glm):
  return _jit(fi.fisher)(theta, x, glm)


def closed_forms(seeds=SEEDS) -> dict[str, dict[str, float]]:
  """Per GLM, the largest relative difference over ``seeds`` of each form
  from the exact (score) Fisher, and its extreme eigenvalues."""
  out = {}
  mc = jax.jit(fi.fisher_monte_carlo, static_argnums=(3, 4))
  for glm in glms():
    row = {k: 0.0 for k in ("paper", "analytic", "jfj", "mc", "min_eig")}
    for s in seeds:
      th, x = params(s, glm), data(s)
      f = exact(th, x, glm)
      row["paper"] = max(row["paper"], fi.max_rel_diff(_jit(fi.fisher_paper)(th, x, glm), f))
      row["analytic"] = max(row["analytic"],
                            fi.max_rel_diff(_jit(fi.fisher_analytic)(th, x, glm), f))
      row["jfj"] = max(row["jfj"], fi.max_rel_diff(_jit(fi.fisher_jfj)(th, x, glm), f))
      if s == seeds[0]:
        row["mc"] = fi.max_rel_diff(mc(jax.random.PRNGKey(100), th, x, glm, MC_SAMPLES), f)
      ev = np.linalg.eigvalsh(np.asarray(f))
      row["min_eig"] = min(row["min_eig"], ev[0] / ev[-1])
    out[name(glm)] = row
  return out


def layer_blocks(seed: int = 0) -> dict[str, float]:
  """Layer norm: where eq. 13 differs from the exact Fisher, block by block."""
  out = {}
  for glm in glms():
    if glm.norm != "layer":
      continue
    th, x = params(seed, glm), data(seed)
    f = np.asarray(exact(th, x, glm)).reshape(H, D + 2, H, D + 2)
    p = np.asarray(_jit(fi.fisher_paper)(th, x, glm)).reshape(H, D + 2, H, D + 2)
    top = np.max(np.abs(f))
    diag, off = np.eye(H, dtype=bool), ~np.eye(H, dtype=bool)
    blocks = {"w_i, w_i": (diag, slice(0, D), slice(0, D)),
              "w_i, w_j (i != j)": (off, slice(0, D), slice(0, D)),
              "w, b": (None, slice(0, D), slice(D, D + 1)),
              "w, g": (None, slice(0, D), slice(D + 1, D + 2)),
              "b and g, b and g": (None, slice(D, D + 2), slice(D, D + 2))}
    for k, (units, r, c) in blocks.items():
      e = np.abs(f - p)[:, r][:, :, :, c].max(axis=(1, 3))  # (H, H): per unit pair
      e = e if units is None else e[units]
      out[f"{glm.output}: {k}"] = float(np.max(e) / top)
  return out


def gain_metric_vs_scale(eps: float = 0.0, seed: int = 0) -> dict[str, dict]:
  """Per GLM: tr G(c), G the metric along the gains (V^T F V, F exact) with
  the inputs scaled by c; the largest change of G from c = 1; and the largest
  difference of the closed form (eq. 13's gain block) from V^T F V."""
  out = {}
  for glm in glms(eps):
    th, x = params(seed, glm), data(seed)
    v = fi.gain_directions(th, glm)
    g = {c: np.asarray(v.T @ exact(th, c * x, glm) @ v) for c in INPUT_SCALES}
    closed = {c: fi.max_rel_diff(_jit(fi.gain_metric)(th, c * x, glm), g[c])
              for c in INPUT_SCALES}
    out[name(glm)] = {"trace": {c: float(np.trace(m)) for c, m in g.items()},
                      "change": max(fi.max_rel_diff(m, g[1.0]) for m in g.values()),
                      "closed": closed}
  return out


def appendix_gain_forms(seeds=SEEDS) -> dict[str, dict[str, float]]:
  """Per GLM, the largest relative difference over ``seeds`` and input scales
  of the appendix's printed gain metric (eqs. 32-35) from V^T F V, F exact,
  and whether that printed form is invariant to the input's scale."""
  out = {}
  for glm in glms():
    err, change = 0.0, 0.0
    for s in seeds:
      th, x = params(s, glm), data(s)
      v = fi.gain_directions(th, glm)
      printed = {c: _jit(fi.gain_metric_appendix)(th, c * x, glm) for c in INPUT_SCALES}
      for c in INPUT_SCALES:
        g = v.T @ exact(th, c * x, glm) @ v
        err = max(err, fi.max_rel_diff(printed[c], g))
        change = max(change, fi.max_rel_diff(printed[c], printed[1.0]))
    out[name(glm)] = {"eq": APPENDIX_EQ[glm.norm], "err": err, "change": change}
  return out


def _nll_grad(theta, x, glm, y):
  """d/d theta of the mean negative log-likelihood of targets y."""
  def nll(th):
    abar = fi.summed_inputs(th, x, glm)
    if glm.output == "softmax":
      lp = jax.nn.log_softmax(abar, axis=-1)
      return -jnp.mean(jnp.take_along_axis(lp, y[:, None], axis=1))
    return jnp.mean(jnp.sum(jnp.square(y - abar), axis=-1)) / (2 * glm.phi)
  return jax.grad(nll)(theta)


def weight_step_ratios(seed: int = 0, unit: int | None = None) -> dict[str, dict]:
  """ds^2 of a fixed unit step d in W at W and at 2W (``unit``: only w_unit is
  doubled, and d and the gradient step move w_unit alone); the doubled weights'
  block F_WW(2W) against F_WW(W) / 4; the change of the (b, g) block; and the
  ratio for a gradient step of one learning rate."""
  out = {}
  for glm in glms():
    th, x = params(seed, glm), data(seed)
    w = fi.split(th, glm.norm)[0]
    d = np.random.default_rng(seed + 1).normal(size=w.shape)
    scale = np.full((H, 1), 2.0)
    if unit is not None:
      d[np.arange(H) != unit] = 0
      scale = np.where(np.arange(H)[:, None] == unit, 2.0, 1.0)
    d = jnp.asarray(d / np.linalg.norm(d))
    th2 = fi.with_weights(th, glm.norm, w * jnp.asarray(scale))
    f1, f2 = exact(th, x, glm), exact(th2, x, glm)
    delta = fi.weight_step(th, glm, d)
    ww = np.zeros((H, fi.unit_size(glm.norm, D)), bool)
    ww[:, :D] = True  # the W entries of vec([W, b, g]^T)
    bg = ~ww.reshape(-1)
    if unit is not None:
      ww[np.arange(H) != unit] = False
    ww = ww.reshape(-1)
    ds1, ds2 = fi.ds2(f1, delta), fi.ds2(f2, delta)
    # Targets drawn from the model at W (the same model as at 2W when normalized).
    abar = fi.summed_inputs(th, x, glm)
    key = jax.random.PRNGKey(seed + 2)
    y = (jax.random.categorical(key, abar, axis=-1) if glm.output == "softmax" else
         abar + np.sqrt(glm.phi) * jax.random.normal(key, abar.shape, abar.dtype))
    steps = []
    for t, f in ((th, f1), (th2, f2)):
      gw = fi.split(_nll_grad(t, x, glm, y), glm.norm)[0] * (d != 0)
      steps.append(fi.ds2(f, fi.weight_step(t, glm, -gw)))
    out[name(glm)] = {
        "ds2_W": ds1, "ds2_2W": ds2, "ratio": ds2 / ds1,
        "fww": fi.max_rel_diff(np.asarray(f2)[np.ix_(ww, ww)], np.asarray(f1)[np.ix_(ww, ww)] / 4),
        "bg": fi.max_rel_diff(np.asarray(f2)[np.ix_(bg, bg)], np.asarray(f1)[np.ix_(bg, bg)]),
        "cross": fi.max_rel_diff(np.asarray(f2)[np.ix_(ww, bg)], np.asarray(f1)[np.ix_(ww, bg)] / 2),
        "grad_ratio": steps[1] / steps[0]}
  return out


def ds2_vs_weight_scale(seed: int = 0) -> dict[str, list[float]]:
  """ds^2(sW) / ds^2(W) for the fixed unit step d, per weight scale s."""
  out = {}
  for glm in glms():
    th, x = params(seed, glm), data(seed)
    w = fi.split(th, glm.norm)[0]
    d = np.random.default_rng(seed + 1).normal(size=w.shape)
    delta = fi.weight_step(th, glm, jnp.asarray(d / np.linalg.norm(d)))
    ds = [fi.ds2(exact(fi.with_weights(th, glm.norm, s * w), x, glm), delta)
          for s in WEIGHT_SCALES]
    out[name(glm)] = [v / ds[WEIGHT_SCALES.index(1.0)] for v in ds]
  return out


def plot(gain: dict, scan: dict, path: Path) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  # Colour and marker by norm, line by output; markers shrink so overlaps show.
  look = {"none": ("C0", "o", 9), "batch": ("C1", "s", 7), "weight": ("C2", "^", 5),
          "layer": ("C3", "x", 6)}

  def style(k):
    color, marker, size = look[next(n for n in look if NAMES[n] in k)]
    return dict(color=color, marker=marker, markersize=size, mfc="none",
                linestyle="-" if k.startswith("softmax") else "--", label=k)
  fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
  for k, r in gain.items():
    axes[0].plot(INPUT_SCALES, list(r["trace"].values()), **style(k))
  axes[0].set(xscale="log", yscale="log", xlabel="input scale c (x -> c x)",
              ylabel="tr G: metric along the gains",
              title="(a) metric along the gains vs input scale\n"
                    "(none: along w_i / |w_i|)")
  for k, r in scan.items():
    axes[1].plot(WEIGHT_SCALES, r, **style(k))
  s = np.asarray(WEIGHT_SCALES)
  axes[1].plot(s, s ** -2.0, ":", color="k", label="s^-2")
  axes[1].set(xscale="log", yscale="log", xlabel="weight scale s (W -> s W)",
              ylabel="ds^2(sW) / ds^2(W)", title="(b) d^T F d for a fixed step d in W")
  axes[1].set_xticks(WEIGHT_SCALES, [f"{v:g}" for v in WEIGHT_SCALES])
  axes[1].xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
  for ax in axes:
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def _e(v: float) -> str:
  return f"{v:.1e}"


def write_results(out_dir: Path, command: str) -> str:
  """Measures everything in float64 and writes results.md and geometry.png."""
  out_dir = Path(out_dir)
  with jax.enable_x64(True):
    forms = closed_forms()
    blocks = layer_blocks()
    gain = gain_metric_vs_scale()
    gain_eps = gain_metric_vs_scale(eps=1e-5)
    appendix = appendix_gain_forms()
    steps = weight_step_ratios()
    steps_unit = weight_step_ratios(unit=0)
    scan = ds2_vs_weight_scale()
  md = ("# Section 5.2: the geometry of normalized GLMs\n\n"
        f"Command: `{command}`  \nCommit: {wdir.git_commit()}  \n"
        f"Versions: {json.dumps(wdir.versions())}\n\n")
  md += findings(forms, gain, steps, steps_unit, appendix)
  md += (f"GLMs with D = {D} inputs and H = {H} units, on N = {N} random inputs (not centred, "
         f"unequal spreads; batch norm's statistics are theirs). Softmax: H classes, logits "
         f"abar. Gaussian: H independent outputs N(abar_i, phi), phi = {PHI}. Float64, "
         f"eps = 0 unless stated. Parameters per unit [w_i, b_i, g_i], i.e. the paper's "
         "vec([W, b, g]^T).\n\n")
  md += ("## Closed forms against autodiff\n\n"
         "Exact Fisher: E_x E_y[s s^T], the scores s by autodiff through "
         "`lnorm.normalization`, the expectation over y exact (a sum over the classes; for "
         "the Gaussian, the 2^H points abar + sqrt(phi) z, z in {-1, 1}^H, which have its "
         "first two moments). Each column: max |F' - F| / max |F| over "
         f"{len(SEEDS)} random GLMs.\n\n"
         "- eqs. 12-14: the paper's closed form as printed (eq. 12 for none; eq. 13's blocks "
         "with eq. 14's chi_i for the normalized models).\n"
         "- full Jacobian: E_x[J^T Cov[y|x]/phi^2 J] with J = d abar / d theta in closed form, "
         "every d abar_k / d w_i (`fisher.fisher_analytic`).\n"
         "- J^T F J (autodiff): J by autodiff.\n"
         f"- Monte Carlo: {MC_SAMPLES:,} draws of y per input from the model (one GLM).\n"
         "- min eig / max eig: the Fisher is PSD (and singular: normalized models are "
         "invariant to some directions).\n\n"
         "| GLM | eqs. 12-14 | full Jacobian | J^T F J (autodiff) | Monte Carlo | "
         "min eig / max eig |\n|---|---|---|---|---|---|\n")
  md += "".join(f"| {k} | {_e(r['paper'])} | {_e(r['analytic'])} | {_e(r['jfj'])} | "
                f"{_e(r['mc'])} | {_e(r['min_eig'])} |\n" for k, r in forms.items())
  md += ("\nLayer norm's mu and sigma depend on every unit's weights, so d abar_k / d w_i = "
         "g_k / sigma (delta_ki - 1/H - n_k n_i / H) x (n = (a - mu) / sigma) is not zero for "
         "k != i. Eq. 13 builds block F_ij from chi_i and chi_j alone, i.e. it keeps the k = i "
         "terms; its chi_i (eq. 14, with d mu / d w_i = x / H and d sigma / d w_i = "
         "(a_i - mu) x / (H sigma)) is right. Where it differs (max |F_eq13 - F| / max |F|, "
         "one GLM):\n\n| block | difference |\n|---|---|\n")
  md += "".join(f"| {k} | {_e(v)} |\n" for k, v in blocks.items())
  md += ("\nThe gain and bias blocks are exact for layer norm too (a gain or bias moves its "
         "own unit only), so claim (a) below does not depend on this.\n\n")
  md += ("## (a) The metric along the gains against the input's scale\n\n"
         "G = V^T F V, V the unit vectors along the gains g_i (for none, along w_i / |w_i|, "
         "where a gain would sit: the metric along the magnitude of the incoming weights). "
         "Its closed form (eq. 13's g block, the appendix's ds^2 for a step in g): G_ij = "
         "E_x[Cov[y_i, y_j | x] / phi^2 n_i n_j], n_i = (a_i - mu_i) / sigma_i (none: "
         "n_i = w_i^T x / |w_i|). Inputs x -> c x; tr G at each c, the largest change of G "
         "from c = 1 (max |G(c) - G(1)| / max |G(1)|), and the closed form's largest "
         "difference from V^T F V.\n\n| GLM | " + " | ".join(f"c = {c:g}" for c in INPUT_SCALES)
         + " | max change from c = 1 | closed form |\n|---|" + "---|" * (len(INPUT_SCALES) + 2)
         + "\n")
  md += "".join(f"| {k} | " + " | ".join(f"{v:.4g}" for v in r["trace"].values())
                + f" | {_e(r['change'])} | {_e(max(r['closed'].values()))} |\n"
                for k, r in gain.items())
  k, r = max(gain.items(), key=lambda kr: max(kr[1]["closed"].values()))
  c = max(r["closed"], key=r["closed"].get)
  md += (f"\nThe closed form's largest difference, {r['closed'][c]:.0e} ({k}), is at c = "
         f"{c:g}, where tr G = {r['trace'][c]:.1e}: there the outputs are nearly certain and "
         "Cov[y|x] (p - p^2 for softmax) is a small difference of numbers near 1 in both "
         "forms.\n")
  md += ("\nWith eps = 1e-5 (the library's default) added to sigma^2, the largest change of G "
         "from c = 1:\n\n| GLM | max change from c = 1 | tr G at c = 0.01 |\n|---|---|---|\n")
  md += "".join(f"| {k} | {_e(r['change'])} | {r['trace'][0.01]:.4g} |\n"
                for k, r in gain_eps.items() if "batch" in k or "layer" in k)
  md += ("\nThe appendix's ds^2 along the gains as printed (eqs. 32-35, G in ds^2 = 1/2 dg^T "
         "G dg): eq. 32 (batch norm) E_x[Cov[y|x] / phi^2]; eq. 33 (layer norm) "
         "E_x[Cov_ij / phi^2 (a_i - mu)(a_j - mu) / sigma^2]; eq. 34 (weight norm) "
         "E_x[Cov_ij / phi^2 a_i a_j / (|w_i| |w_j|)]; eq. 35 (none, the step dg_i w_i / "
         "|w_i|) the same as eq. 34. Largest difference from V^T F V over "
         f"{len(SEEDS)} GLMs and the scales above, and the printed form's own largest "
         "change from c = 1:\n\n| GLM | eq. | difference | change with scale |\n"
         "|---|---|---|---|\n")
  md += "".join(f"| {k} | {r['eq']} | {_e(r['err'])} | "
                f"{_e(r['change'])} |\n" for k, r in appendix.items())
  md += ("\nEq. 32 leaves out the normalized inputs n_i n_j that eq. 13's gain block and "
         "eq. 33 carry. With Gaussian outputs Cov[y|x] = phi I is constant and batch norm "
         "makes E_x[n_i^2] = 1 over the batch, so the two agree; with softmax outputs they "
         "do not. Both are invariant to the input's scale, so claim (a) stands either way.\n")
  md += ("\n## (b) ds^2 for a fixed step at W and at 2W\n\n"
         "d: a fixed random unit step in W (b and g fixed); ds^2 = d^T F d (the KL divergence "
         "of the step is half of it, eq. 9). Also: F_WW(2W) against F_WW(W) / 4 (max |.| "
         "relative difference), the cross blocks F_W,bg(2W) against F_W,bg(W) / 2, the largest "
         "change of the (b, g) block, and, for a gradient "
         "step -lr dL/dW of the same learning rate (L: the NLL of targets drawn from the "
         "model at W), the ratio of its ds^2 at 2W to that at W.\n\n"
         "Whole W doubled:\n\n")
  md += _steps_table(steps)
  md += "\nOne weight vector doubled (w_1 -> 2 w_1, d moves w_1 alone):\n\n"
  md += _steps_table(steps_unit)
  md += ("\nds^2(sW) / ds^2(W) for the fixed step, by weight scale s:\n\n| GLM | "
         + " | ".join(f"s = {s:g}" for s in WEIGHT_SCALES) + " |\n|---|"
         + "---|" * len(WEIGHT_SCALES) + "\n")
  md += "".join(f"| {k} | " + " | ".join(f"{v:.4g}" for v in r) + " |\n"
                for k, r in scan.items())
  md += "\n![geometry](geometry.png)\n"
  out_dir.mkdir(parents=True, exist_ok=True)
  plot(gain, scan, out_dir / "geometry.png")
  wdir.write_atomic(out_dir / "results.md", md)
  return md


def findings(forms: dict, gain: dict, steps: dict, steps_unit: dict,
             appendix: dict) -> str:
  """The claims' verdicts, from the measurements."""
  per_unit = [r["paper"] for k, r in forms.items() if "layer" not in k]
  ln = [r["paper"] for k, r in forms.items() if "layer" in k]
  exact_all = max(max(r["analytic"], r["jfj"]) for r in forms.values())
  inv = max(r["change"] for k, r in gain.items() if "batch" in k or "layer" in k)
  grow = {k: r["trace"][INPUT_SCALES[-1]] / r["trace"][1.0] for k, r in gain.items()
          if "gaussian" in k and ("weight" in k or "none" in k)}

  def span(vals):  # "a" when they agree to 4 digits, else "a-b"
    lo, hi = f"{min(vals):.4g}", f"{max(vals):.4g}"
    return lo if lo == hi else f"{lo}-{hi}"
  normed = [r for k, r in steps.items() if "none" not in k]
  ratios = [r["ratio"] for r in normed]
  grads = [r["grad_ratio"] for r in normed]
  blocks = max(max(r["fww"], r["cross"], r["bg"]) for r in normed)
  quarter = max(abs(v - 0.25) for v in ratios) < 1e-8
  md = ("## Findings\n\n"
        f"- Closed forms: eq. 12 (no norm) and eqs. 13-14 (batch and weight norm) differ from "
        f"the exact Fisher by at most {max(per_unit):.0e}. For layer norm, eq. 13 as printed "
        f"differs by up to {max(ln):.2f} (relative to the largest entry) in the blocks that "
        "involve W (table below): it leaves out the cross-unit terms. The full-Jacobian form "
        f"and J^T F J differ by at most {exact_all:.0e} everywhere.\n")
  bn32 = {k: r["err"] for k, r in appendix.items() if "batch" in k}
  rest = max(r["err"] for k, r in appendix.items() if "batch" not in k)
  md += ("- The appendix's ds^2 along the gains: eqs. 33-35 (layer norm, weight norm, none) "
         f"match the exact Fisher to {rest:.0e} (at most: the largest is where the outputs "
         "are near certain, as for the closed form in (a)). Eq. 32 (batch norm) as printed leaves out "
         "the normalized inputs: it differs by " + ", ".join(
             f"{v:.0e} ({k})" for k, v in bn32.items()) + " (table in (a)).\n")
  md += (f"- (a) {'holds' if inv < 1e-10 else 'does not hold'}: with batch or layer norm, "
         f"the metric along the gains changes by at most {inv:.0e} as the input is scaled "
         f"from {INPUT_SCALES[0]:g} to {INPUT_SCALES[-1]:g} (eps = 0; with eps = 1e-5 the "
         "smallest scales move it, table below). With weight norm and the plain GLM (along "
         "w_i / |w_i|) it depends on the input's scale: with Gaussian outputs tr G(100) / "
         "tr G(1) = " + ", ".join(f"{v:,.6g} ({k})" for k, v in grow.items())
         + "; with softmax outputs the scale also moves Cov[y|x], so G is no clean c^2 "
         "(table below).\n")
  md += (f"- (b) the curvature along W shrinks as |W| grows: doubling W multiplies ds^2 = "
         f"d^T F d of a fixed step d by {span(ratios)} for every normalized GLM (the length "
         f"ds by {span(np.sqrt(ratios))}). ")
  if quarter:
    md += ("That is 1/4, not the 1/2 the paper's text says: F_WW falls to a quarter, the "
           "(W, b) and (W, g) blocks to a half and the (b, g) block is unchanged (largest "
           f"difference {blocks:.0e}: the doubling is exact in floating point). Eq. 13 itself gives the 1/4: its W block carries g_i g_j / "
           "(sigma_i sigma_j), both sigmas double, and chi_i does not change. The 1/2 holds "
           "for the length ds and for the cross blocks. ")
  per_unit = {k: r["ratio"] for k, r in steps_unit.items() if "batch" in k or "weight" in k}
  ln_unit = [r["ratio"] for k, r in steps_unit.items() if "layer" in k]
  md += (f"Doubling one weight vector alone (d moving it alone) multiplies ds^2 by "
         f"{span(list(per_unit.values()))} with batch and weight norm, whose statistics are "
         "per unit; with layer norm, whose statistics pool the units, it changes the model, "
         f"and ds^2 is multiplied by {span(ln_unit)}. ")
  md += (f"A gradient step of one learning rate shrinks as well (dL/dW scales as 1/|W|): "
         f"its ds^2 is multiplied by {span(grads)}.\n\n")
  return md


def _steps_table(steps: dict) -> str:
  return ("| GLM | ds^2 at W | ds^2 at 2W | ratio | sqrt(ratio) | F_WW(2W) vs F_WW(W)/4 | "
          "F_W,bg(2W) vs F_W,bg(W)/2 | (b, g) block change | gradient step ratio |\n"
          "|---|---|---|---|---|---|---|---|---|\n"
          + "".join(f"| {k} | {r['ds2_W']:.4g} | {r['ds2_2W']:.4g} | {r['ratio']:.4g} | "
                    f"{np.sqrt(r['ratio']):.4g} | {_e(r['fww'])} | {_e(r['cross'])} | "
                    f"{_e(r['bg'])} | "
                    f"{r['grad_ratio']:.4g} |\n" for k, r in steps.items()))
