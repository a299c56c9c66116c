"""The byte Transformer LM (lnorm/transformer.py) against a float64 NumPy
forward pass written from the equations, and its causality, structure,
precision and errors."""

import functools
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lnorm import transformer as tr

RNG = np.random.default_rng(0)
SMALL = dict(num_layers=2, d_model=16, num_heads=2, d_ff=24, max_len=12)


def _tokens(B=2, T=12, seed=0):
  return jnp.asarray(np.random.default_rng(seed).integers(0, 256, (B, T)), jnp.int32)


def _init(model, T=12, seed=0):
  return model.init(jax.random.key(seed), _tokens(1, T))["params"]


# -- An independent float64 reference. -------------------------------------------

def _np(p):
  return {k: _np(v) for k, v in p.items()} if isinstance(p, dict) else np.asarray(p, np.float64)


def _ref_norm(x, p, norm, eps=1e-5):
  if norm == "rms":
    return x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps) * p["gain"]
  m = x.mean(-1, keepdims=True)
  v = ((x - m) ** 2).mean(-1, keepdims=True)
  return (x - m) / np.sqrt(v + eps) * p["gain"] + p["bias"]


def _ref_attention(x_TxD, p, H, qk_norm=None):
  T, D = x_TxD.shape
  K = D // H
  lin = lambda n: x_TxD @ p[n]["kernel"] + p[n]["bias"]
  q, k, v = (lin(n).reshape(T, H, K) for n in ("query", "key", "value"))
  if qk_norm:  # each head's K features, with gains shared by the heads
    q, k = _ref_norm(q, p["query_norm"], qk_norm), _ref_norm(k, p["key_norm"], qk_norm)
  out = np.zeros((T, H, K))
  for h in range(H):
    for t in range(T):  # position t attends to positions 0..t
      s = q[t, h] @ k[:t + 1, h].T / math.sqrt(K)
      w = np.exp(s - s.max())
      out[t, h] = (w / w.sum()) @ v[:t + 1, h]
  return out.reshape(T, D) @ p["out"]["kernel"] + p["out"]["bias"]


def _ref_mlp(x, p):
  h = np.maximum(x @ p["fc"]["kernel"] + p["fc"]["bias"], 0)
  return h @ p["proj"]["kernel"] + p["proj"]["bias"]


def _ref_sinusoids(T, D):
  pe = np.zeros((T, D))
  for pos in range(T):
    for i in range(D // 2):
      pe[pos, 2 * i] = math.sin(pos / 10000 ** (2 * i / D))
      pe[pos, 2 * i + 1] = math.cos(pos / 10000 ** (2 * i / D))
  return pe


def ref_block(x, b, *, num_layers, num_heads, norm, norm_position, qk_norm=False):
  """One block, from the placements' equations (lnorm/transformer.py's diagram;
  deepnorm's alpha from Wang et al.'s Figure 2 table, decoder-only)."""
  attn = lambda x: _ref_attention(x, b["attn"], num_heads, norm if qk_norm else None)
  mlp = lambda x: _ref_mlp(x, b["mlp"])
  N = lambda x, name: _ref_norm(x, b[name], norm)
  if norm_position == "pre":
    x = x + attn(N(x, "norm_attn"))
    return x + mlp(N(x, "norm_mlp"))
  if norm_position == "post":
    x = N(x + attn(x), "norm_attn")
    return N(x + mlp(x), "norm_mlp")
  if norm_position == "peri":  # Kim et al.: x + N_out(F(N_in(x)))
    x = x + N(attn(N(x, "norm_attn")), "norm_attn_out")
    return x + N(mlp(N(x, "norm_mlp")), "norm_mlp_out")
  if norm_position == "deepnorm":  # Wang et al.: N(alpha x + F(x)), alpha = (2 L)^(1/4)
    alpha = (2 * num_layers) ** 0.25
    x = N(alpha * x + attn(x), "norm_attn")
    return N(alpha * x + mlp(x), "norm_mlp")
  x = x + attn(x)
  return x + mlp(x)


def ref_logits(params, tokens_BxT, *, num_layers, d_model, num_heads, norm, norm_position,
               positions="learned", qk_norm=False, **_):
  p = _np(params)
  D = d_model
  out = []
  for toks in np.asarray(tokens_BxT):
    T = len(toks)
    pos = p["pos"][:T] if positions == "learned" else _ref_sinusoids(T, D) / math.sqrt(D)
    x = (p["embed"]["embedding"][toks] + pos) * math.sqrt(D)
    if norm_position == "peri":  # Kim et al. normalize the input too
      x = _ref_norm(x, p["embed_norm"], norm)
    for l in range(num_layers):
      x = ref_block(x, p[f"block_{l}"], num_layers=num_layers, num_heads=num_heads,
                    norm=norm, norm_position=norm_position, qk_norm=qk_norm)
    if norm_position in ("pre", "peri"):
      x = _ref_norm(x, p["final_norm"], norm)
    out.append(x @ p["logits"]["kernel"] + p["logits"]["bias"])
  return np.stack(out)


def _perturb(params, scale=0.3, seed=1):
  """Random gains and biases too (at init they are 1 and 0, which would hide
  a norm's gain or bias used in the wrong place)."""
  rng = np.random.default_rng(seed)
  return jax.tree_util.tree_map(
      lambda a: a + scale * jnp.asarray(rng.normal(size=a.shape), a.dtype), params)


CASES = [("layer", "post", "learned"), ("layer", "pre", "learned"), ("rms", "pre", "sinusoidal"),
         ("rms", "post", "learned"), ("none", "none", "sinusoidal")]


@pytest.mark.parametrize("norm,norm_position,positions", CASES)
def test_matches_float64_reference(norm, norm_position, positions):
  _assert_matches_float64_reference(dict(SMALL, norm=norm, norm_position=norm_position,
                                         positions=positions))


def _assert_matches_float64_reference(cfg: dict) -> None:
  """The model's float32 logits against ``ref_logits``' float64 ones."""
  model = tr.TransformerLM(**cfg)
  params = _perturb(_init(model))
  toks = _tokens()
  y = model.apply({"params": params}, toks)
  assert y.shape == (2, 12, 256) and y.dtype == jnp.float32
  ref = ref_logits(params, toks, **cfg)
  err = np.abs(np.asarray(y, np.float64) - ref).max() / np.abs(ref).max()
  assert err < 2e-5, err


NEW_CASES = [("layer", "peri", "learned", False), ("rms", "peri", "sinusoidal", False),
             ("layer", "deepnorm", "learned", False), ("rms", "deepnorm", "learned", False),
             ("layer", "pre", "learned", True), ("rms", "post", "sinusoidal", True),
             ("layer", "peri", "learned", True), ("rms", "deepnorm", "learned", True),
             ("layer", "none", "learned", True)]


@pytest.mark.parametrize("norm,norm_position,positions,qk_norm", NEW_CASES)
def test_new_placements_and_qk_norm_match_float64_reference(norm, norm_position, positions,
                                                            qk_norm):
  _assert_matches_float64_reference(dict(SMALL, norm=norm, norm_position=norm_position,
                                         positions=positions, qk_norm=qk_norm))


@pytest.mark.parametrize("norm_position", ["peri", "deepnorm"])
@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_one_block_is_its_equation(norm, norm_position):
  # The Block module alone, on a stream of no particular scale (mean 3, std 5).
  L, H, D = 6, 2, 16
  block = tr.Block(H, 24, norm, norm_position, alpha=tr.deepnorm_alpha_beta(L)[0]
                   if norm_position == "deepnorm" else 1.0)
  x = jnp.asarray(RNG.normal(3, 5, (2, 7, D)), jnp.float32)
  params = _perturb(block.init(jax.random.key(0), x)["params"])
  y = np.asarray(block.apply({"params": params}, x), np.float64)
  p = _np(params)
  ref = np.stack([ref_block(np.asarray(xb, np.float64), p, num_layers=L, num_heads=H,
                            norm=norm, norm_position=norm_position) for xb in x])
  assert np.abs(y - ref).max() / np.abs(ref).max() < 2e-5


def test_deepnorm_constants_and_init():
  # Wang et al. 2022, Figure 2's table, decoder-only: alpha = (2N)^(1/4), beta = (8N)^(-1/4).
  for n, alpha, beta in ((1, 2 ** 0.25, 8 ** -0.25), (6, 12 ** 0.25, 48 ** -0.25),
                         (12, 24 ** 0.25, 96 ** -0.25)):
    a, b = tr.deepnorm_alpha_beta(n)
    assert a == pytest.approx(alpha, rel=1e-15) and b == pytest.approx(beta, rel=1e-15)
  assert tr.deepnorm_alpha_beta(18) == pytest.approx((6 ** 0.5, 12 ** -0.5), rel=1e-15)
  # Same names as post-norm, so the same random draws: W^V, W^O, W^1, W^2 are
  # post's times beta; W^Q, W^K, the norms, embeddings and logits are post's.
  post = _init(tr.TransformerLM(**SMALL, norm="layer", norm_position="post"))
  deep = _init(tr.TransformerLM(**SMALL, norm="layer", norm_position="deepnorm"))
  assert jax.tree_util.tree_structure(post) == jax.tree_util.tree_structure(deep)
  beta = (8 * SMALL["num_layers"]) ** -0.25
  for path, d in jax.tree_util.tree_leaves_with_path(deep):
    name = tr._key(path)
    sub = post
    for k in name.split("/"):
      sub = sub[k]
    scaled = re.search(r"(attn/(value|out)|mlp/(fc|proj))/kernel$", name)
    np.testing.assert_allclose(d, np.asarray(sub) * (beta if scaled else 1.0), rtol=1e-6,
                               err_msg=name)


@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_qk_norm_normalizes_each_heads_queries_and_keys(norm):
  model = tr.TransformerLM(**SMALL, norm=norm, norm_position="pre", qk_norm=True)
  params = _init(model)
  K = SMALL["d_model"] // SMALL["num_heads"]
  attn = params["block_0"]["attn"]
  want = {"gain", "bias"} if norm == "layer" else {"gain"}
  for n in ("query_norm", "key_norm"):
    assert set(attn[n]) == want and all(v.shape == (K,) for v in attn[n].values())
  # Stretch W^Q and W^K so that the raw queries and keys are far from unit scale.
  params = jax.tree_util.tree_map(lambda a: a, params)  # fresh dicts to edit
  for l in range(SMALL["num_layers"]):
    for n in ("query", "key"):
      d = params[f"block_{l}"]["attn"][n]
      d["kernel"], d["bias"] = d["kernel"] * 7.0, d["bias"] + 3.0
  _, state = model.apply({"params": params}, _tokens(), capture_intermediates=True)
  inter = state["intermediates"]
  for l in range(SMALL["num_layers"]):
    a = inter[f"block_{l}"]["attn"]
    for n in ("query_norm", "key_norm"):
      q = np.asarray(a[n]["__call__"][0], np.float64)  # (B, T, H, K)
      assert q.shape == (2, 12, SMALL["num_heads"], K)
      ms = (q ** 2).mean(-1)
      if norm == "layer":  # zero mean and unit variance (up to eps) per head
        np.testing.assert_allclose(q.mean(-1), 0, atol=1e-5)
      # Unit RMS per head, to eps / var and float32 rounding.
      np.testing.assert_allclose(ms, 1.0, atol=1e-3)
  # Without qk_norm the stretched queries are far from unit RMS: the check has teeth.
  plain = tr.TransformerLM(**SMALL, norm=norm, norm_position="pre")
  assert "query_norm" not in _init(plain)["block_0"]["attn"]
  strip = lambda b: {**b, "attn": {k: v for k, v in b["attn"].items() if not k.endswith("_norm")}}
  p_plain = {k: strip(v) if k.startswith("block_") else v for k, v in params.items()}
  _, state = plain.apply({"params": p_plain}, _tokens(), capture_intermediates=True)
  raw_q = np.asarray(state["intermediates"]["block_0"]["attn"]["query"]["__call__"][0])
  assert abs(np.sqrt((raw_q ** 2).mean()) - 1) > 0.5


@pytest.mark.parametrize("norm_position", ["post", "pre", "peri", "deepnorm"])
def test_causal(norm_position):
  model = tr.TransformerLM(**SMALL, norm="layer", norm_position=norm_position,
                           qk_norm=norm_position in ("peri", "deepnorm"))
  params = _perturb(_init(model))
  toks = np.asarray(_tokens(1))
  f = jax.jit(lambda t: model.apply({"params": params}, t))
  y = np.asarray(f(toks))
  for t in (0, 5, 10):
    changed = toks.copy()
    changed[0, t + 1:] = (changed[0, t + 1:] + 1 + np.arange(11 - t)) % 256
    y2 = np.asarray(f(changed))
    np.testing.assert_array_equal(y2[0, :t + 1], y[0, :t + 1])  # the past: untouched
    assert np.abs(y2[0, t + 1:] - y[0, t + 1:]).min() > 0       # the future: moved


def test_norm_none_networks_coincide_and_final_norm_only_in_pre():
  toks = _tokens()
  outs, trees = {}, {}
  for pos in ("post", "pre", "peri", "none"):
    model = tr.TransformerLM(**SMALL, norm="none", norm_position=pos)
    params = _init(model)
    trees[pos] = jax.tree_util.tree_structure(params)
    outs[pos] = np.asarray(model.apply({"params": params}, toks))
  assert trees["post"] == trees["pre"] == trees["peri"] == trees["none"]
  for pos in ("pre", "peri", "none"):
    np.testing.assert_array_equal(outs["post"], outs[pos])

  names = lambda p: {tr._key(k) for k, _ in jax.tree_util.tree_leaves_with_path(p)}
  pre = names(_init(tr.TransformerLM(**SMALL, norm="layer", norm_position="pre")))
  post = names(_init(tr.TransformerLM(**SMALL, norm="layer", norm_position="post")))
  none = names(_init(tr.TransformerLM(**SMALL, norm="none", norm_position="none")))
  rms = names(_init(tr.TransformerLM(**SMALL, norm="rms", norm_position="pre")))
  assert pre - post == {"final_norm/gain", "final_norm/bias"} and not post - pre
  assert pre - none == {f"{s}/{g}" for s in ["final_norm"] + [
      f"block_{l}/norm_{w}" for l in range(2) for w in ("attn", "mlp")] for g in ("gain", "bias")}
  assert "final_norm/gain" in rms and not any(n.endswith("bias") for n in rms if "norm" in n)
  # Peri: pre's norms, one more after each sublayer, and one on the input.
  peri = names(_init(tr.TransformerLM(**SMALL, norm="layer", norm_position="peri")))
  assert peri - pre == {f"{s}/{g}" for s in ["embed_norm"] + [
      f"block_{l}/norm_{w}_out" for l in range(2) for w in ("attn", "mlp")]
      for g in ("gain", "bias")} and not pre - peri
  # Deepnorm: post's names.
  deep = names(_init(tr.TransformerLM(**SMALL, norm="layer", norm_position="deepnorm")))
  assert deep == post
  # qk_norm adds a query and a key norm to each block's attention, whatever the placement.
  for pos, base in (("pre", pre), ("post", post), ("peri", peri)):
    qk = names(_init(tr.TransformerLM(**SMALL, norm="layer", norm_position=pos, qk_norm=True)))
    assert qk - base == {f"block_{l}/attn/{n}_norm/{g}" for l in range(2)
                         for n in ("query", "key") for g in ("gain", "bias")}
  qk_only = names(_init(tr.TransformerLM(**SMALL, norm="rms", norm_position="none",
                                         qk_norm=True)))
  assert qk_only - none == {f"block_{l}/attn/{n}_norm/gain" for l in range(2)
                            for n in ("query", "key")}


def test_sinusoidal_has_no_position_parameters_and_learned_has_a_table():
  learned = _init(tr.TransformerLM(**SMALL))
  sin = _init(tr.TransformerLM(**SMALL, positions="sinusoidal"))
  assert learned["pos"].shape == (12, 16) and "pos" not in sin
  np.testing.assert_allclose(tr.sinusoids(12, 16), _ref_sinusoids(12, 16), atol=1e-6)


@pytest.mark.slow
def test_bfloat16_runs_matmuls_in_bfloat16_and_its_loss_is_close_to_float32():
  cfg = dict(num_layers=2, d_model=64, num_heads=4, max_len=32, norm="layer",
             norm_position="pre")
  m32 = tr.TransformerLM(**cfg)
  m16 = tr.TransformerLM(**cfg, dtype="bfloat16")
  params = _init(m32, 32)
  assert jax.tree_util.tree_structure(params) == jax.tree_util.tree_structure(_init(m16, 32))
  windows = _tokens(8, 33, seed=3)
  l32, _ = jax.jit(functools.partial(tr.loss, m32))(params, windows)
  l16, metrics = jax.jit(functools.partial(tr.loss, m16))(params, windows)
  assert l16.dtype == jnp.float32 and np.isfinite(float(l16))
  assert abs(float(l16) - float(l32)) < 0.02, (float(l16), float(l32))
  assert metrics["bpc"] == pytest.approx(float(l16) / math.log(2))
  # The gradients are float32, like the parameters, and close to float32's.
  g16 = jax.jit(functools.partial(tr.loss_grads, m16))(params, windows)
  g32 = jax.jit(functools.partial(tr.loss_grads, m32))(params, windows)
  assert {a.dtype for a in jax.tree_util.tree_leaves(g16)} == {jnp.dtype(jnp.float32)}
  n16, n32 = tr.grad_norms(g16), tr.grad_norms(g32)
  for k in n32:
    assert float(n16[k]) == pytest.approx(float(n32[k]), rel=0.1), k
  # Every matmul of the bfloat16 model is a bfloat16 matmul; float32's none.
  jaxpr16 = str(jax.make_jaxpr(lambda p: tr.loss(m16, p, windows)[0])(params))
  operand_types = re.findall(r"(\w+)\[[\d,]*\] = dot_general", jaxpr16)
  assert operand_types and set(operand_types) == {"bf16"}, set(operand_types)
  jaxpr32 = str(jax.make_jaxpr(lambda p: tr.loss(m32, p, windows)[0])(params))
  assert set(re.findall(r"(\w+)\[[\d,]*\] = dot_general", jaxpr32)) == {"f32"}


def test_layer_norm_statistics_are_float32_inside_the_bfloat16_model():
  # The block's norm sees bfloat16 activations; its output must be the float64
  # layer norm of those bfloat16 values, rounded once to bfloat16.
  x = jnp.asarray(RNG.normal(300, 2, (2, 3, 64)), jnp.bfloat16)
  norm = tr.Norm("layer")
  p = norm.init(jax.random.key(0), x)
  y = norm.apply(p, x)
  assert y.dtype == jnp.bfloat16
  xf = np.asarray(x, np.float64)
  ref = (xf - xf.mean(-1, keepdims=True)) / np.sqrt(xf.var(-1, keepdims=True) + 1e-5)
  ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(ref), 2 ** -4))) - 7)
  assert (np.abs(np.asarray(y, np.float64) - ref) <= 1.0 * ulp).all()


def test_scaled_residual_init_scales_the_branch_outputs_only():
  plain = _init(tr.TransformerLM(**SMALL))
  scaled = _init(tr.TransformerLM(**SMALL, scaled_residual_init=True))
  for l in range(2):
    b, s = plain[f"block_{l}"], scaled[f"block_{l}"]
    for sub, name in (("attn", "out"), ("mlp", "proj")):  # W^O and W^2: / sqrt(2 L)
      np.testing.assert_allclose(s[sub][name]["kernel"], b[sub][name]["kernel"] / 2, rtol=1e-6)
    for sub, name in (("attn", "query"), ("attn", "value"), ("mlp", "fc")):
      np.testing.assert_array_equal(s[sub][name]["kernel"], b[sub][name]["kernel"])


@pytest.mark.slow
def test_grad_norms_per_layer_and_per_parameter():
  model = tr.TransformerLM(**SMALL, norm="layer", norm_position="post")
  params = _init(model)
  windows = _tokens(2, 13)
  g = jax.jit(functools.partial(tr.loss_grads, model))(params, windows)
  per_layer = tr.grad_norms(g)
  assert list(per_layer) == ["embed", "pos", "block_0", "block_1", "logits"]
  for name, v in per_layer.items():
    leaves = [np.asarray(a, np.float64) for a in jax.tree_util.tree_leaves(g[name])]
    assert float(v) == pytest.approx(math.sqrt(sum((a ** 2).sum() for a in leaves)), rel=1e-5)
  per_param = tr.grad_norms(g, depth=None)
  w2 = tr.block_grad_norms(g, "mlp/proj/kernel")
  np.testing.assert_allclose(w2, [per_param[f"block_{l}/mlp/proj/kernel"] for l in range(2)],
                             rtol=1e-6)
  assert list(tr.grad_norms(g, depth=2))[2:5] == ["block_0/attn", "block_0/mlp",
                                                  "block_0/norm_attn"]
  init = tr.init_grad_norms(model, params, windows)
  assert init.keys() == per_layer.keys()
  assert init["block_1"] == pytest.approx(float(per_layer["block_1"]), rel=1e-5)
  with pytest.raises(ValueError, match="has no parameter 'mlp/w2'"):
    tr.block_grad_norms(g, "mlp/w2")


@pytest.mark.slow
def test_a_tiny_model_learns():
  # Periodic text: after 50 Adam steps the loss is far below uniform (ln 256).
  text = np.frombuffer(b"the cat sat on the mat. " * 40, np.uint8)
  model = tr.TransformerLM(num_layers=2, d_model=32, num_heads=2, max_len=32)
  params = _init(model, 32)
  opt = optax.adam(3e-3)
  state = opt.init(params)
  starts = np.random.default_rng(0).integers(0, len(text) - 33, (50, 8))
  batches = jnp.asarray(text[starts[..., None] + np.arange(33)])

  def step(carry, w):
    p, s = carry
    (l, _), grads = jax.value_and_grad(lambda p: tr.loss(model, p, w), has_aux=True)(p)
    u, s = opt.update(grads, s, p)
    return (optax.apply_updates(p, u), s), l

  _, losses = jax.jit(lambda p, s: jax.lax.scan(step, (p, s), batches))(params, state)
  losses = np.asarray(losses)
  assert losses[0] > 4 and losses[-5:].mean() < 1.5, losses[[0, -1]]


def _error(**fields) -> str:
  with pytest.raises(ValueError) as e:
    tr.TransformerLM(**fields)
  msg = str(e.value)
  assert "\n" not in msg
  return msg


def test_bad_config_is_one_line():
  assert "norm_position='middle' is not valid; choose one of: post, pre, peri, deepnorm, " \
         "none" in _error(norm_position="middle")
  assert "norm='batch' is not valid; choose one of: none, layer, rms" in _error(norm="batch")
  assert "dtype='float16' is not valid; choose one of: float32, bfloat16" in \
      _error(dtype="float16")
  assert "dtype='fp8' is not valid" in _error(dtype="fp8")
  assert "takes norm='none'" in _error(norm_position="none", norm="layer")
  assert "positions='rotary'" in _error(positions="rotary")
  assert "does not split" in _error(d_model=10, num_heads=4)
  # The new switches' bad combinations.
  assert _error(norm="none", qk_norm=True).startswith(
      "qk_norm=True normalizes queries and keys with the norm, and norm='none' is none; "
      "choose one of: layer, rms")
  assert _error(norm="none", norm_position="none", qk_norm=True).startswith("qk_norm=True")
  assert _error(norm="none", norm_position="deepnorm") == (
      "norm_position='deepnorm' is post-norm with a scaled residual; it needs a norm, "
      "not norm='none'")
  assert _error(norm_position="deepnorm", scaled_residual_init=True).startswith(
      "norm_position='deepnorm' sets its own init")
  assert _error(qk_norm="yes") == "qk_norm='yes' is not valid; it must be True or False"
  assert "(or qk_norm=True" in _error(norm_position="none", norm="rms")
  # The same checks at config time, and the sequence length against the table.
  with pytest.raises(ValueError, match=r"^sequence length 300 is beyond the position "
                                       r"table of max_len=256 positions"):
    tr.check_config(max_len=256, seq_len=300)
  model = tr.TransformerLM(**SMALL)
  with pytest.raises(ValueError, match="sequence length 13 is beyond"):
    model.init(jax.random.key(0), _tokens(1, 13))


def test_a_dtype_the_platform_lacks_is_one_line(monkeypatch):
  # Simulate a backend without bfloat16: the probe's error becomes one line.
  def fail(name, backend):
    return "UNIMPLEMENTED: bf16 dot" if name == "bfloat16" else None
  monkeypatch.setattr(tr, "_platform_error", fail)
  msg = _error(dtype="bfloat16")
  assert msg.startswith("dtype='bfloat16' is not supported on this platform (")
  assert msg.endswith("UNIMPLEMENTED: bf16 dot")
  tr.check_dtype("float32")
