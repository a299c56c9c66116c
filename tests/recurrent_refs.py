"""Float64 numpy transcriptions of the recurrent equations, helpers shared by
the tests of the cells and of the sequence layers, and the checks that the
sequence layers' tests (``LSTM``'s and ``GRU``'s) both make."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

B, I, H, T = 3, 4, 5, 6
EPS = 1e-5
TOL = dict(rtol=1e-4, atol=2e-5)
# float32's unit roundoff.
U32 = 2.0 ** -24


def f32_atol(scale: float, terms: int, growth: float = 32.0) -> float:
  """How far a float32 path may be from float64 at values of size ``scale``.

  A sum of n products rounds to within n·u of the sum of their magnitudes
  (Higham, Accuracy and Stability of Numerical Algorithms, §3.1) in any order
  of summation, so the bound holds whatever a compiler or an instruction set
  (AVX2, AVX-512) does; the error of another float32 path does not, which is
  why no test bounds one path by another's. ``terms``: the rounded products
  along the longest chain, e.g. a step's I + H times T steps of a recurrence.
  ``growth`` covers the gates' and norms' amplification (the 1/σ of a
  normalized row), which is largest at small widths."""
  return growth * U32 * terms * scale


# Sequence lengths of a padded batch: full, partial, one step and empty.
LENGTHS = [T, 3, 1, 0]


def length_mask(lengths=LENGTHS, steps=T):
  return np.arange(steps)[None, :] < np.asarray(lengths)[:, None]


# ------------------------------------------------------------------ numpy refs

def sig(a):
  return 1.0 / (1.0 + np.exp(-a))


def np_ln(a, g=None, b=None, eps=EPS):
  mu = a.mean(-1, keepdims=True)
  var = ((a - mu) ** 2).mean(-1, keepdims=True)
  y = (a - mu) / np.sqrt(var + eps)
  if g is not None:
    y = y * g
  if b is not None:
    y = y + b
  return y


def np_bn(a, g, b, mean, var, eps=EPS):
  y = (a - mean) / np.sqrt(var + eps) * g
  return y if b is None else y + b


def np_lstm(p, norm, carry, x):
  """Eqs. 17-19 ('none'), 20-22 ('layer') and 29-31 ('layer_c')."""
  c, h = carry
  wx, wh = x @ p['kernel_x'], h @ p['kernel_h']
  if norm == 'layer':
    z = np_ln(wh, p['gain_h']) + np_ln(wx, p['gain_x']) + p['bias']
  else:
    z = wh + wx + p['bias']
  f, i, o, g = (z[:, k * H:(k + 1) * H] for k in range(4))
  c = sig(f) * c + sig(i) * np.tanh(g)
  cn = c if norm == 'none' else np_ln(c, p['gain_c'], p['bias_c'])
  h = sig(o) * np.tanh(cn)
  return (c, h), h


def np_gru(p, norm, carry, x):
  """Eqs. 23-25 ('none', plus zero-initialised biases) and 26-28 ('layer')."""
  h = carry
  wx, wh = x @ p['kernel_x'], h @ p['kernel_h']
  Wx, Uh = x @ p['kernel_xc'], h @ p['kernel_hc']
  if norm == 'layer':
    zr = np_ln(wh, p['gain_h']) + np_ln(wx, p['gain_x']) + p['bias']
    cand = (np_ln(Wx, p['gain_xc'], p['bias_xc'])
            + sig(zr[:, H:]) * np_ln(Uh, p['gain_hc'], p['bias_hc']))
  else:
    zr = wh + wx + p['bias']
    cand = Wx + p['bias_c'] + sig(zr[:, H:]) * Uh
  z = sig(zr[:, :H])
  h = (1 - z) * h + z * np.tanh(cand)
  return h, h


def np_rnn(p, norm, carry, x):
  """Eq. 4 ('layer') and the plain RNN ('none')."""
  a = carry @ p['kernel_h'] + x @ p['kernel_x']
  if norm == 'layer':
    h = np.tanh(np_ln(a, p['gain'], p['bias']))
  else:
    h = np.tanh(a + p['bias'])
  return h, h


def np_bnlstm(p, stats, carry, xs, *, train, max_steps, momentum):
  """Cooijmans et al. 2016 over (T, B, I) inputs; returns ys, carry, stats."""
  c, h = carry
  stats = {k: v.copy() for k, v in stats.items()}
  ys = []
  for t, x in enumerate(xs):
    row = min(t, max_steps - 1)

    def bn(name, a, g, b):
      if not train:
        return np_bn(a, g, b, stats['mean_' + name][row],
                     stats['var_' + name][row])
      mean, var = a.mean(0), a.var(0)
      if t < max_steps:
        for k, s in (('mean_' + name, mean), ('var_' + name, var)):
          stats[k][t] = momentum * stats[k][t] + (1 - momentum) * s
      return np_bn(a, g, b, mean, var)

    z = (bn('h', h @ p['kernel_h'], p['gain_h'], None)
         + bn('x', x @ p['kernel_x'], p['gain_x'], None) + p['bias'])
    f, i, o, g = (z[:, k * H:(k + 1) * H] for k in range(4))
    c = sig(f) * c + sig(i) * np.tanh(g)
    h = sig(o) * np.tanh(bn('c', c, p['gain_c'], p['bias_c']))
    ys.append(h)
  return np.stack(ys), (c, h), stats


# --------------------------------------------------------------------- helpers

def f64(tree):
  return jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), tree)


# The helpers below draw with numpy, not jax.random: an eager jax op compiles
# on first use, and the native/xla fixture clears jax's caches before each
# test, so eager draws cost seconds a test.
def _normal(shape, dtype, seed):
  a = np.random.default_rng(seed).standard_normal(shape)
  return jnp.asarray(a.astype(np.dtype(dtype)))


def perturb(params, seed=0):
  """Moves every parameter off its initial value so gains and biases matter."""
  leaves, treedef = jax.tree_util.tree_flatten(params)
  leaves = [jnp.asarray((np.asarray(l, np.float64) + 0.5 * np.random.default_rng(
      [seed, k]).standard_normal(l.shape)).astype(l.dtype))
            for k, l in enumerate(leaves)]
  return jax.tree_util.tree_unflatten(treedef, leaves)


def random_carry(carry, seed=1):
  """Random floating leaves; integer leaves (norm='batch''s step t) kept."""
  leaves, treedef = jax.tree_util.tree_flatten(carry)
  leaves = [_normal(l.shape, l.dtype, [seed, k])
            if jnp.issubdtype(l.dtype, jnp.floating) else l
            for k, l in enumerate(leaves)]
  return jax.tree_util.tree_unflatten(treedef, leaves)


def inputs(shape, seed=2):
  return _normal(shape, jnp.float32, seed)


def batch_leaves(carry):
  return [l for l in jax.tree_util.tree_leaves(carry) if l.ndim > 0]


def wrap(tree):
  """Cell variables as they sit under ``nn.RNN`` / ``Recurrent``."""
  return {col: {'cell': v} for col, v in tree.items()}


def init_cell(cell, batch=B):
  """Initialises the bare cell (cheaper than tracing a scan)."""
  x = inputs((batch, I))
  carry = cell.initialize_carry(None, x.shape)
  return jax.jit(cell.init)(jax.random.key(0), carry, x)


# ----------------------------------------------------- sequence layers' checks

def native_xla_f64(make_grad, ours, ref64, args, scan_module, kernel, monkeypatch):
  """What the native kernels' tests compare: the gradients (outputs as aux)
  of ``ours`` through the native kernels, asserted in its HLO as
  ``<kernel>_fwd`` and ``_bwd``; through XLA, ``scan_module._native_ok``
  off; and of ``ref64``, the cell's scan, in float64. ``make_grad(run)``: the
  test's jitted gradient. Returns the HLO text and the three."""
  grad = make_grad(ours)
  text = grad.lower(*args).as_text()
  assert f'{kernel}_fwd' in text and f'{kernel}_bwd' in text
  got = grad(*args)
  with monkeypatch.context() as m:
    m.setattr(scan_module, '_native_ok', lambda *_: False)
    grad_xla = make_grad(ours)
    assert kernel not in grad_xla.lower(*args).as_text()
    want = grad_xla(*args)
  with jax.enable_x64(True):
    want64 = make_grad(ref64)(*f64(args))
  return text, got, want, want64


def assert_f32_paths_near_f64(got, want, want64, terms):
  """Both float32 paths' leaves against float64's, to ``f32_atol`` of
  ``terms`` rounded products."""
  assert jax.tree.structure(got) == jax.tree.structure(want)
  for a, b, c in zip(jax.tree.leaves(got), jax.tree.leaves(want), jax.tree.leaves(want64)):
    assert a.dtype == jnp.float32
    a, b, c = (np.asarray(v, np.float64) for v in (a, b, c))
    scale = float(np.max(np.abs(c)))
    assert scale > 0
    np.testing.assert_allclose(a, c, rtol=0, atol=f32_atol(scale, terms))
    np.testing.assert_allclose(b, c, rtol=0, atol=f32_atol(scale, terms))


def assert_second_order_and_vmap(ours, ref, params, x, atol):
  """Higher-order derivatives and vmap, which the native kernels leave to
  XLA: ``ours(p, x) -> y`` against ``ref``, the cell's scan, in the
  parameter gradient of |dy/dx|^2 and in y of a vmapped pair of inputs
  (``atol``: the float32 paths' distance in y)."""

  def grad_norm(run):
    def f(p):
      g = jax.grad(lambda x: jnp.sum(jnp.sin(run(p, x))))(x)
      return jnp.sum(g * g)
    return jax.jit(jax.grad(f))

  for a, b in zip(jax.tree.leaves(grad_norm(ours)(params)),
                  jax.tree.leaves(grad_norm(ref)(params))):
    # Third derivatives, two float32 orders: through 10 LN-LSTM steps 1.6e-5
    # of the largest entry apart on an AVX2 AMD EPYC host.
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=5e-5 * float(np.max(np.abs(b))))
  xs = jnp.stack([x, 2 * x])
  y = jax.jit(jax.vmap(lambda x: ours(params, x)))(xs)
  for k in range(2):
    np.testing.assert_allclose(y[k], jax.jit(ref)(params, xs[k]), rtol=1e-5, atol=atol)


def assert_params_are_the_cells(layer, cell):
  """A sequence layer's initial parameters are its cell's: the same names,
  shapes and dtype (float32), and the same constant inits (gains 1, biases
  0 or the forget bias). Returns the layer's."""
  p = layer.init(jax.random.key(0), inputs((B, T, I)))['params']
  p_cell = init_cell(cell)['params']
  assert set(p) == set(p_cell)
  for k in p:
    assert p[k].shape == p_cell[k].shape and p[k].dtype == jnp.float32
    if not k.startswith('kernel'):
      np.testing.assert_array_equal(p[k], p_cell[k])
  return p


def assert_batch_axes_and_carry(layer):
  """``layer`` (a sequence layer with ``return_carry``) takes any number of
  batch axes, none included, and its final carry continues the sequence."""
  x = inputs((2, 3, T, I))
  params = perturb(jax.jit(layer.init)(jax.random.key(0), x)['params'])
  apply = jax.jit(layer.apply)
  carry, y = apply({'params': params}, x)
  assert y.shape == (2, 3, T, H)
  assert all(a.shape == (2, 3, H) for a in jax.tree.leaves(carry))
  _, y_flat = apply({'params': params}, x.reshape(6, T, I))
  np.testing.assert_allclose(y.reshape(6, T, H), y_flat, rtol=1e-6, atol=1e-7)
  _, y1 = apply({'params': params}, x[0, 0])
  np.testing.assert_allclose(y1, y[0, 0], rtol=1e-6, atol=1e-7)
  # Two halves with the carry handed over equal the whole.
  k = T // 2
  carry1, ya = apply({'params': params}, x[..., :k, :])
  carry2, yb = apply({'params': params}, x[..., k:, :], initial_carry=carry1)
  np.testing.assert_allclose(jnp.concatenate([ya, yb], -2), y, rtol=1e-5, atol=1e-6)
  for a, b in zip(jax.tree.leaves(carry2), jax.tree.leaves(carry)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def assert_rejects_bad_shapes(layer):
  """A sequence layer's errors for a mask of another shape than the input's
  (batch, time) and for an input without a time axis."""
  x = inputs((B, T, I))
  with pytest.raises(ValueError, match='mask'):
    layer.init(jax.random.key(0), x, np.ones((B, T + 1), bool))
  with pytest.raises(ValueError, match='time axis'):
    layer.init(jax.random.key(0), x[0, 0])
