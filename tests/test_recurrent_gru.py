"""``GRU``, the whole-sequence layer, against scanning ``GRUCell`` of the same
norm (itself tested against the paper's equations in
test_recurrent_cells.py)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lnorm import native
from lnorm import recurrent as R
from lnorm.recurrent import gru_scan
from tests.recurrent_refs import (B, H, I, LENGTHS, T, assert_batch_axes_and_carry,
                                  assert_f32_paths_near_f64, assert_params_are_the_cells,
                                  assert_rejects_bad_shapes, assert_second_order_and_vmap, f64,
                                  inputs, length_mask, native_xla_f64, perturb, random_carry)


def _setup(norm, dtype=jnp.float32):
  nb = len(LENGTHS)
  x = inputs((nb, T, I)).astype(dtype)
  gru = R.GRU(H, norm=norm, return_carry=True, param_dtype=dtype)
  params = perturb(jax.jit(gru.init)(jax.random.key(0), x)['params'])
  h0 = random_carry(jnp.zeros((nb, H), dtype))
  return gru, R.GRUCell(H, norm=norm, param_dtype=dtype), params, x, h0


def _grad(run):
  def loss(params, x, h0):
    h, y = run(params, x, h0)
    w = jnp.cos(jnp.arange(y.size, dtype=y.dtype)).reshape(y.shape)
    return jnp.sum(y * w) + jnp.sum(h * jnp.sin(h)), (y, h)

  return jax.jit(jax.grad(loss, argnums=(0, 1, 2), has_aux=True))


@pytest.mark.slow
@pytest.mark.parametrize('masked', [False, True])
@pytest.mark.parametrize('norm', ('none', 'layer'))
def test_gru_matches_recurrent_cell(norm, masked, impl):
  """Outputs, final carry and all gradients equal those of the cell's scan."""
  gru, cell, params, x, h0 = _setup(norm)
  mask = length_mask() if masked else None
  ours = lambda p, x, h0: gru.apply({'params': p}, x, mask, initial_carry=h0)
  ref = lambda p, x, h0: R.Recurrent(cell).apply(
      {'params': {'cell': p}}, x, mask, initial_carry=h0)
  g, (y, h) = _grad(ours)(params, x, h0)
  g_ref, (y_ref, h_ref) = _grad(ref)(params, x, h0)
  np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(h, h_ref, rtol=1e-5, atol=1e-6)
  if masked:
    np.testing.assert_array_equal(y[np.logical_not(mask)], 0.0)
  assert jax.tree.structure(g) == jax.tree.structure(g_ref)
  for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(g_ref)):
    scale = float(np.max(np.abs(b)))
    assert scale > 0
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=5e-5 * scale)


@pytest.mark.parametrize('norm', ('none', 'layer'))
def test_gru_matches_nn_rnn_in_float64(norm):
  """No mask, zero initial carry: as ``nn.RNN(GRUCell)``, to float64
  rounding."""
  with jax.enable_x64(True):
    gru, cell, params, x, _ = _setup(norm, jnp.float64)
    y = R.GRU(H, norm=norm, param_dtype=jnp.float64).apply(
        {'params': params}, x)
    y_ref = nn.RNN(cell).apply({'params': {'cell': params}}, x)
    assert y.dtype == jnp.float64
    np.testing.assert_allclose(y, y_ref, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize('masked', [False, True])
@pytest.mark.parametrize('norm', ('none', 'layer'))
def test_gru_hand_written_backward_in_float64(norm, masked):
  """``gru_scan``'s backward (the W_h gradient after the scan, the gates
  recomputed, LN as RMSNorm of centred kernels) against autodiff of the
  cell's scan, to float64 rounding."""
  with jax.enable_x64(True):
    gru, cell, params, x, h0 = _setup(norm, jnp.float64)
    mask = length_mask() if masked else None
    ours = lambda p, x, h0: gru.apply({'params': p}, x, mask, initial_carry=h0)
    ref = lambda p, x, h0: R.Recurrent(cell).apply(
        {'params': {'cell': p}}, x, mask, initial_carry=h0)
    g, _ = _grad(ours)(params, x, h0)
    g_ref, _ = _grad(ref)(params, x, h0)
    for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(g_ref)):
      assert a.dtype == jnp.float64
      np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12 * float(np.max(np.abs(b))))


# The native kernels' sizes: H not a multiple of 8 (their padded tails), one
# example, and B * H = 4 * 257, from which they split each step's rows among
# XLA's threads (rows.h, ForRows).
NATIVE_SIZES = [(len(LENGTHS), H), (1, 13),
                pytest.param((len(LENGTHS), 257), marks=pytest.mark.slow)]


@pytest.mark.parametrize('size', NATIVE_SIZES, ids=lambda s: f'B{s[0]}-H{s[1]}')
@pytest.mark.parametrize('masked', [False, True])
@pytest.mark.parametrize('norm', ('none', 'layer'))
def test_gru_native_steps_match_xla_and_float64(norm, masked, size, monkeypatch):
  """On CPU, float32: outputs, final carry and all gradients through the
  native time steps equal the XLA scan's to float32 rounding, and autodiff
  of the cell's scan in float64 to the tolerance of the float32 paths."""
  if not native.load():
    pytest.skip('native kernels unavailable')
  nb, features = size
  x = inputs((nb, T, I))
  gru = R.GRU(features, norm=norm, return_carry=True)
  params = perturb(jax.jit(gru.init)(jax.random.key(0), x)['params'])
  h0 = random_carry(jnp.zeros((nb, features)))
  mask = length_mask(LENGTHS if nb > 1 else [T - 2]) if masked else None
  ours = lambda p, x, h0: gru.apply({'params': p}, x, mask, initial_carry=h0)
  cell64 = R.GRUCell(features, norm=norm, param_dtype=jnp.float64)
  ref64 = lambda p, x, h0: R.Recurrent(cell64).apply(
      {'params': {'cell': p}}, x, mask, initial_carry=h0)
  args = (params, x, h0)
  _, got, want, want64 = native_xla_f64(_grad, ours, ref64, args, gru_scan, 'lnorm_gru',
                                        monkeypatch)
  with jax.enable_x64(True):  # float64 keeps to XLA
    assert 'lnorm_gru' not in _grad(ours).lower(*f64(args)).as_text()
  if masked:
    np.testing.assert_array_equal(got[1][0][np.logical_not(mask)], 0.0)
  # Each path against float64: a step sums I + H products, over T steps.
  assert_f32_paths_near_f64(got, want, want64, (I + features) * T)


@pytest.mark.slow
@pytest.mark.parametrize('norm', ('none', 'layer'))
def test_gru_second_order_and_vmap(norm, impl):
  """Higher-order derivatives and vmap, which the native kernels leave to
  XLA, against the cell's scan."""
  gru, cell, params, x, h0 = _setup(norm)
  ours = lambda p, x: gru.apply({'params': p}, x, initial_carry=h0)[1]
  ref = lambda p, x: R.Recurrent(cell).apply({'params': {'cell': p}}, x, initial_carry=h0)[1]
  assert_second_order_and_vmap(ours, ref, params, x, atol=1e-6)


@pytest.mark.parametrize('norm', ('none', 'layer'))
def test_gru_empty_batch(norm, impl):
  """A batch of none: empty outputs and zero gradients."""
  gru = R.GRU(H, norm=norm)
  params = gru.init(jax.random.key(0), inputs((B, T, I)))
  x = jnp.zeros((0, T, I))
  y = jax.jit(gru.apply)(params, x)
  grads = jax.jit(jax.grad(lambda p: jnp.sum(gru.apply(p, x))))(params)
  assert y.shape == (0, T, H)
  assert all(bool(jnp.all(g == 0)) for g in jax.tree.leaves(grads))


@pytest.mark.parametrize('norm', ('none', 'layer'))
def test_gru_params_are_the_cells(norm):
  assert_params_are_the_cells(R.GRU(H, norm=norm), R.GRUCell(H, norm=norm))


@pytest.mark.slow
def test_gru_batch_axes_and_carry():
  assert_batch_axes_and_carry(R.GRU(H, norm='layer', return_carry=True))


@pytest.mark.slow
def test_gru_dtypes():
  """float32 under jax_enable_x64 stays float32; bfloat16 compute gives
  bfloat16 outputs and float32 gradients."""
  with jax.enable_x64(True):
    x = inputs((B, T, I)).astype(jnp.float32)
    gru = R.GRU(H, norm='layer')
    params = gru.init(jax.random.key(0), x)
    assert all(l.dtype == jnp.float32 for l in jax.tree.leaves(params))
    assert gru.apply(params, x).dtype == jnp.float32
  x = inputs((B, T, I))
  params = R.GRU(H, norm='layer').init(jax.random.key(0), x)
  half = R.GRU(H, norm='layer', dtype=jnp.bfloat16)
  y16 = half.apply(params, x)
  assert y16.dtype == jnp.bfloat16
  g = jax.grad(lambda p: jnp.sum(half.apply(p, x).astype(jnp.float32)))(params)
  assert all(l.dtype == jnp.float32 and np.all(np.isfinite(l))
             for l in jax.tree.leaves(g))
  # bfloat16 compute, float32 statistics: the gradients stay near float32's.
  full = R.GRU(H, norm='layer')
  g32 = jax.grad(lambda p: jnp.sum(full.apply(p, x)))(params)
  for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(g32)):
    np.testing.assert_allclose(a, b, atol=0.05 * float(np.max(np.abs(b))))


def test_gru_checks_arguments():
  with pytest.raises(ValueError, match="norm='layer_c' is not valid; choose one of: none, "
                     "layer, rms"):
    R.GRU(H, norm='layer_c')
  assert_rejects_bad_shapes(R.GRU(H))


@pytest.mark.parametrize('norm', ('none', 'layer'))
def test_gru_context_is_the_cells_scan_over_x_and_context(norm):
  """With ``context`` (*batch, D): scanning the cell over [x_t; context],
  outputs, carry and gradients (the context's included)."""
  D, nb = 3, len(LENGTHS)
  x, mask = inputs((nb, T, I)), length_mask()
  c = inputs((nb, D)) * 2.0
  gru = R.GRU(H, norm=norm, return_carry=True)
  params = perturb(jax.jit(gru.init)(jax.random.key(0), x, context=c)['params'])
  assert params['kernel_x'].shape == (I + D, 2 * H)
  cell = R.GRUCell(H, norm=norm)

  def loss(run):
    def f(p, c):
      h, y = run(p, c)
      w = jnp.cos(jnp.arange(y.size, dtype=y.dtype)).reshape(y.shape)
      return jnp.sum(y * w) + jnp.sum(h * jnp.sin(h)), (y, h)
    return jax.jit(jax.grad(f, argnums=(0, 1), has_aux=True))

  ours = lambda p, c: gru.apply({'params': p}, x, mask, context=c)
  xc = lambda c: jnp.concatenate([x, jnp.broadcast_to(c[:, None], (nb, T, D))], -1)
  ref = lambda p, c: R.Recurrent(cell).apply({'params': {'cell': p}}, xc(c), mask)
  g, (y, h) = loss(ours)(params, c)
  g_ref, (y_ref, h_ref) = loss(ref)(params, c)
  np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(h, h_ref, rtol=1e-5, atol=1e-6)
  for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(g_ref)):
    scale = float(np.max(np.abs(b)))
    assert scale > 0
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=5e-5 * scale)
  with pytest.raises(ValueError, match='context'):
    gru.apply({'params': params}, x, context=c[:2])
