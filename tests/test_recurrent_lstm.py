"""``LSTM``, the whole-sequence layer, against scanning ``LSTMCell`` of the
same norm (itself tested against the paper's equations in
test_recurrent_cells.py): outputs, carries, gradients and parameters."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lnorm import native
from lnorm import recurrent as R
from lnorm.recurrent import lstm_scan
from tests.recurrent_refs import (B, H, I, LENGTHS, T, assert_batch_axes_and_carry,
                                  assert_f32_paths_near_f64, assert_params_are_the_cells,
                                  assert_rejects_bad_shapes, assert_second_order_and_vmap,
                                  f32_atol, f64, inputs, length_mask, native_xla_f64, perturb,
                                  random_carry)

# ------------------------------------------------------------ sequence LSTM

SEQ_NORMS = ['none', 'layer', 'layer_c']


def _seq_setup(norm, dtype=jnp.float32, seed=0, features=H):
  """Perturbed parameters shared by ``LSTM(norm)`` and its cell."""
  nb = len(LENGTHS)
  x = inputs((nb, T, I)).astype(dtype)
  lstm = R.LSTM(features, norm=norm, return_carry=True, param_dtype=dtype)
  params = perturb(jax.jit(lstm.init)(jax.random.key(seed), x)['params'], seed)
  carry0 = random_carry((jnp.zeros((nb, features), dtype),) * 2)
  mask = length_mask()
  cell = R.LSTMCell(features, norm=norm, param_dtype=dtype)
  return lstm, cell, params, x, carry0, mask


def _seq_grad(run):
  """Gradient of a scalar of y and the final carry, with (y, c, h) as aux."""

  def loss(params, x, carry0):
    (c, h), y = run(params, x, carry0)
    w = jnp.cos(jnp.arange(y.size, dtype=y.dtype)).reshape(y.shape)
    return (jnp.sum(y * w) + jnp.sum(c * jnp.sin(c)) + jnp.sum(h ** 2),
            (y, c, h))

  return jax.jit(jax.grad(loss, argnums=(0, 1, 2), has_aux=True))


def _seq_runs(lstm, cell, mask):
  def ours(p, x, carry0):
    return lstm.apply({'params': p}, x, mask, initial_carry=carry0)

  def ref(p, x, carry0):
    return R.Recurrent(cell).apply({'params': {'cell': p}}, x, mask,
                                   initial_carry=carry0)

  return ours, ref


# 256 units with the batch of 4: B * H reaches the size at which the native
# kernels split the work among a team of threads (lstm_cpu.cc, team.h).
@pytest.mark.slow
@pytest.mark.parametrize('features', [H, 256])
@pytest.mark.parametrize('masked', [False, True])
@pytest.mark.parametrize('norm', SEQ_NORMS)
def test_lstm_matches_recurrent_cell(norm, masked, features, impl):
  """Outputs, final carry and all gradients equal those of the cell's scan."""
  lstm, cell, params, x, carry0, mask = _seq_setup(norm, features=features)
  mask = mask if masked else None
  ours, ref = _seq_runs(lstm, cell, mask)
  g, (y, c, h) = _seq_grad(ours)(params, x, carry0)
  g_ref, (y_ref, c_ref, h_ref) = _seq_grad(ref)(params, x, carry0)
  # The perturbed W_h makes pre-activations sums of `features` terms of
  # size ~0.5: their float32 rounding grows with the width. Two float32
  # orders of summation, so it also depends on the CPU's code (2.8e-6 at an
  # output of 0.12 on an AVX2 AMD EPYC host); the float64 tests bound the error.
  tol = dict(rtol=1e-5, atol=5e-6 if features == H else 2e-5)
  np.testing.assert_allclose(y, y_ref, **tol)
  np.testing.assert_allclose(c, c_ref, **tol)
  np.testing.assert_allclose(h, h_ref, **tol)
  if masked:
    np.testing.assert_array_equal(y[np.logical_not(mask)], 0.0)
  assert (jax.tree_util.tree_structure(g)
          == jax.tree_util.tree_structure(g_ref))
  for a, b in zip(jax.tree_util.tree_leaves(g),
                  jax.tree_util.tree_leaves(g_ref)):
    scale = float(np.max(np.abs(b)))
    assert scale > 0
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=5e-5 * scale)


@pytest.mark.parametrize('norm', SEQ_NORMS)
def test_lstm_gradients_exact_in_float64(norm):
  """The hand-written backward is the derivative, not an approximation."""
  with jax.enable_x64(True):
    lstm, cell, params, x, carry0, mask = _seq_setup(norm, jnp.float64)
    ours, ref = _seq_runs(lstm, cell, mask)
    g, _ = _seq_grad(ours)(params, x, carry0)
    g_ref, _ = _seq_grad(ref)(params, x, carry0)
    for a, b in zip(jax.tree_util.tree_leaves(g),
                    jax.tree_util.tree_leaves(g_ref)):
      assert a.dtype == jnp.float64
      np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize('norm', SEQ_NORMS)
def test_lstm_matches_nn_rnn_and_defaults(norm, impl):
  """No mask, zero initial carry, y only: as ``nn.RNN(cell)``."""
  lstm, cell, params, x, _, _ = _seq_setup(norm)
  y = jax.jit(R.LSTM(H, norm=norm).apply)({'params': params}, x)
  y_ref = jax.jit(nn.RNN(cell).apply)({'params': {'cell': params}}, x)
  np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize('masked', [False, True])
@pytest.mark.parametrize('norm', SEQ_NORMS)
def test_lstm_native_steps_serve_float32_on_cpu(norm, masked):
  if not native.load():
    pytest.skip('native kernels unavailable')
  lstm, _, params, x, carry0, mask = _seq_setup(norm)
  mask = mask if masked else None
  ours, _ = _seq_runs(lstm, None, mask)
  text = jax.jit(_seq_grad(ours)).lower(params, x, carry0).as_text()
  assert 'lnorm_lstm_fwd' in text and 'lnorm_lstm_bwd' in text
  with jax.enable_x64(True):  # float64 keeps to XLA
    lstm64, _, p64, x64, c64, _ = _seq_setup(norm, jnp.float64)
    ours64, _ = _seq_runs(lstm64, None, None)
    assert 'lnorm_lstm' not in jax.jit(ours64).lower(p64, x64, c64).as_text()


# The native scans' sizes (lstm_cpu.cc, gemm.h): H not a multiple of the
# gemm's panel width or of 8 (padded tails of the panels and of the row
# passes), one example, and B = 11 (a full block of rows for the gemm's
# tiles and a tail) with B * H >= 1024, from which a team of threads splits
# the products' columns and the batch's rows; 257: an odd number of panels.
# B=1 at H=1100 makes a team of two of which one member has no rows.
# The W_h gradient is formed in the backward kernel up to
# DW_IN_KERNEL_MAX_ROWS of T B, by XLA after it with the limit at 0. x of
# I <= XW_IN_KERNEL_MAX_I features goes to the kernels, which form xw = x @
# k_x row by row; wider x goes as xw, formed by XLA (I = 12).
# (B, H, T, limit or None for the default, I).
NATIVE_SIZES = [(len(LENGTHS), H, T, None, I), (1, 13, T, None, I),
                (11, 100, T, None, I), (11, 100, T, 0, I),
                (11, 100, T, None, 12),
                pytest.param((len(LENGTHS), 257, T, None, I),
                             marks=pytest.mark.slow),
                pytest.param((1, 1100, T, None, I), marks=pytest.mark.slow)]


@pytest.mark.parametrize(
    'size', NATIVE_SIZES,
    ids=lambda s: f'B{s[0]}-H{s[1]}-T{s[2]}-I{s[4]}'
    + ('-dW_by_xla' if s[3] == 0 else ''))
@pytest.mark.parametrize('masked', [False, True])
@pytest.mark.parametrize('norm', SEQ_NORMS)
def test_lstm_native_scans_match_xla_and_float64(norm, masked, size, monkeypatch):
  """On CPU, float32: outputs, final carry and all gradients through the
  native scans equal the XLA scans' to float32 rounding, and autodiff of the
  cell's scan in float64 to the tolerance of the float32 paths."""
  if not native.load():
    pytest.skip('native kernels unavailable')
  nb, features, steps, dw_limit, inputs_n = size
  if dw_limit is not None:
    monkeypatch.setattr(lstm_scan, 'DW_IN_KERNEL_MAX_ROWS', dw_limit)
  lengths = (LENGTHS * nb)[:nb] if nb > 1 else [steps - 2]
  x = inputs((nb, steps, inputs_n))
  lstm = R.LSTM(features, norm=norm, return_carry=True)
  params = perturb(jax.jit(lstm.init)(jax.random.key(0), x)['params'])
  carry0 = random_carry((jnp.zeros((nb, features)),) * 2)
  mask = length_mask(lengths, steps) if masked else None
  ours = lambda p, x, c0: lstm.apply({'params': p}, x, mask, initial_carry=c0)
  cell64 = R.LSTMCell(features, norm=norm, param_dtype=jnp.float64)
  ref64 = lambda p, x, c0: R.Recurrent(cell64).apply(
      {'params': {'cell': p}}, x, mask, initial_carry=c0)
  text, got, want, want64 = native_xla_f64(_seq_grad, ours, ref64, (params, x, carry0),
                                           lstm_scan, 'lnorm_lstm', monkeypatch)
  # The forward kernel takes x (proj = 1) or xw (proj = 0), as I says, and
  # with x, 'layer''s backward kernel too.
  in_kernel = inputs_n <= lstm_scan.XW_IN_KERNEL_MAX_I
  assert text.count('proj = 1 ') == in_kernel * (1 + (norm == 'layer'))
  if masked:
    np.testing.assert_array_equal(got[1][0][np.logical_not(mask)], 0.0)
  # Each path against float64: a step sums I + H products, over T steps.
  assert_f32_paths_near_f64(got, want, want64, (inputs_n + features) * steps)


@pytest.mark.parametrize('masked', [False, True])
@pytest.mark.parametrize('norm', SEQ_NORMS)
def test_lstm_native_dw_matches_xla_dw(norm, masked, monkeypatch):
  """The W_h gradient formed in the backward kernel against XLA's matmul
  after it: as close to float64's. 10 steps of 110, with the size limit
  raised: 1100 rows of T B, two of the kernel's blocks (kKBlock = 1024),
  the second partial. (The other gradients may differ in the last bits:
  the kernels pool the gain and bias sums per thread of the team, which
  forms with as many of XLA's workers as join in time.)"""
  if not native.load():
    pytest.skip('native kernels unavailable')
  nb, features, steps = 110, 100, 10
  x = inputs((nb, steps, I))
  lstm = R.LSTM(features, norm=norm, return_carry=True)
  params = perturb(jax.jit(lstm.init)(jax.random.key(0), x)['params'])
  carry0 = random_carry((jnp.zeros((nb, features)),) * 2)
  mask = length_mask((LENGTHS * nb)[:nb], steps) if masked else None
  ours = lambda p, x, c0: lstm.apply({'params': p}, x, mask, initial_carry=c0)
  monkeypatch.setattr(lstm_scan, 'DW_IN_KERNEL_MAX_ROWS', nb * steps)
  got = _seq_grad(ours)(params, x, carry0)
  monkeypatch.setattr(lstm_scan, 'DW_IN_KERNEL_MAX_ROWS', 0)
  want = _seq_grad(ours)(params, x, carry0)
  with jax.enable_x64(True):
    cell64 = R.LSTMCell(features, norm=norm, param_dtype=jnp.float64)
    ref = lambda p, x, c0: R.Recurrent(cell64).apply(
        {'params': {'cell': p}}, x, mask, initial_carry=c0)
    want64 = _seq_grad(ref)(f64(params), f64(x), f64(carry0))
  dw, dw_xla, dw64 = (np.asarray(g[0][0]['kernel_h'], np.float64)
                      for g in (got, want, want64))
  assert not np.array_equal(dw, dw_xla)  # the kernel's sums, not XLA's
  # dW sums T B rows of h dz, each dz through T steps of I + H products.
  terms = nb * steps + (I + features) * steps
  for d in (dw, dw_xla):
    np.testing.assert_allclose(d, dw64, rtol=0, atol=f32_atol(np.max(np.abs(dw64)), terms))


# Run in a fresh process: threads that an earlier test's calls left pinned
# would already be in the first snapshot.
_AFFINITY_SCRIPT = """
import json, os, jax, jax.numpy as jnp, numpy as np
from lnorm import recurrent as R
def affinities():
  out = {}
  for tid in os.listdir('/proc/self/task'):
    try:
      out[tid] = sorted(os.sched_getaffinity(int(tid)))
    except OSError:  # the thread ended meanwhile
      pass
  return out
x = jnp.asarray(np.random.default_rng(0).standard_normal((11, 20, 3)), jnp.float32)
lstm = R.LSTM(100, norm='layer')  # B * H >= 1024: a team forms
params = lstm.init(jax.random.key(0), x)['params']
grad = jax.jit(jax.grad(lambda p: jnp.sum(lstm.apply({'params': p}, x) ** 2)))
compiled = grad.lower(params).compile()
assert 'lnorm_lstm_fwd' in compiled.as_text()
before = affinities()
for _ in range(5):
  jax.block_until_ready(compiled(params))
print(json.dumps([before, affinities()]))
"""


@pytest.mark.skipif(not hasattr(os, 'sched_getaffinity')
                    or len(os.sched_getaffinity(0)) < 2,
                    reason='needs Linux and two CPUs for a team')
def test_lstm_native_team_restores_thread_affinity():
  """Each member of a kernel's team holds one CPU while it runs (team.h):
  afterwards every thread of the process has its own CPUs back, the
  threads that ran the team (the caller and XLA's workers) included."""
  if not native.load():
    pytest.skip('native kernels unavailable')
  out = subprocess.run([sys.executable, '-c', _AFFINITY_SCRIPT], check=True,
                       capture_output=True, text=True,
                       env={**os.environ, 'LNORM_NATIVE': 'require'})
  before, after = json.loads(out.stdout.strip().splitlines()[-1])
  common = sorted(set(before) & set(after))
  assert len(common) > 2
  assert {t: after[t] for t in common} == {t: before[t] for t in common}


@pytest.mark.slow
@pytest.mark.parametrize('norm', SEQ_NORMS)
def test_lstm_second_order_and_vmap(norm, impl):
  """Higher-order derivatives and vmap, which the kernels leave to XLA,
  against the cell's scan."""
  lstm, cell, params, x, carry0, _ = _seq_setup(norm)
  ours, ref = _seq_runs(lstm, cell, None)
  y = lambda run: lambda p, x: run(p, x, carry0)[1]
  # atol: test_lstm_matches_recurrent_cell's.
  assert_second_order_and_vmap(y(ours), y(ref), params, x, atol=5e-6)


@pytest.mark.slow
def test_lstm_layer_norm_far_from_zero(impl):
  """Centring the kernels (LN as RMSNorm) loses no accuracy to the cell.

  Kernel rows with a large common component make W x and W h far from zero
  mean, which layer norm must remove; both float32 paths are compared with
  the cell in float64.
  """
  lstm, cell, params, x, carry0, mask = _seq_setup('layer')
  params = dict(params, kernel_x=params['kernel_x'] + 30.0,
                kernel_h=params['kernel_h'] - 20.0)
  (_, _), y = lstm.apply({'params': params}, x, mask, initial_carry=carry0)
  _, y32 = R.Recurrent(cell).apply({'params': {'cell': params}}, x, mask,
                                   initial_carry=carry0)
  with jax.enable_x64(True):
    cell64 = R.LSTMCell(H, norm='layer', param_dtype=jnp.float64)
    _, y64 = R.Recurrent(cell64).apply(
        {'params': {'cell': f64(params)}}, f64(x), mask,
        initial_carry=f64(carry0))
    y64 = np.asarray(y64)
  # The bound is the one for rows near zero mean: had the offsets' common
  # component (about 30 |x| and 20 |h| a row) not been removed exactly, the
  # error would grow with it.
  atol = f32_atol(float(np.max(np.abs(y64))), (I + H) * T)
  np.testing.assert_allclose(y, y64, rtol=0, atol=atol)
  np.testing.assert_allclose(y32, y64, rtol=0, atol=atol)


@pytest.mark.parametrize('norm,names', [
    ('none', {'kernel_x', 'kernel_h', 'bias'}),
    ('layer', {'kernel_x', 'kernel_h', 'bias', 'gain_h', 'gain_x', 'gain_c',
               'bias_c'}),
    ('layer_c', {'kernel_x', 'kernel_h', 'bias', 'gain_c', 'bias_c'}),
])
def test_lstm_params_are_the_cells(norm, names):
  p = assert_params_are_the_cells(R.LSTM(H, norm=norm, forget_bias=1.0),
                                  R.LSTMCell(H, norm=norm, forget_bias=1.0))
  assert set(p) == names
  k_h = np.asarray(p['kernel_h'], np.float64)
  for j in range(4):
    blk = k_h[:, j * H:(j + 1) * H]
    np.testing.assert_allclose(blk.T @ blk, np.eye(H), atol=1e-5)


@pytest.mark.slow
def test_lstm_batch_axes_and_carry():
  assert_batch_axes_and_carry(R.LSTM(H, norm='layer', return_carry=True))


@pytest.mark.slow
@pytest.mark.parametrize('norm', SEQ_NORMS)
def test_lstm_empty_batch(norm, impl):
  """A batch of none: empty outputs and zero gradients."""
  lstm = R.LSTM(H, norm=norm)
  params = lstm.init(jax.random.key(0), inputs((B, T, I)))
  x = jnp.zeros((0, T, I))
  loss = lambda p: jnp.sum(lstm.apply(p, x))
  y = jax.jit(lstm.apply)(params, x)
  grads = jax.jit(jax.grad(loss))(params)
  assert y.shape == (0, T, H)
  assert all(bool(jnp.all(g == 0)) for g in jax.tree.leaves(grads))


def test_lstm_checks_arguments():
  with pytest.raises(ValueError, match="norm='weight' is not valid; choose one of: none, "
                     "layer, layer_c, batch, rms"):
    R.LSTM(H, norm='weight')
  with pytest.raises(ValueError, match="LSTM\\(norm='batch'\\) needs max_steps"):
    R.LSTM(H, norm='batch')
  assert_rejects_bad_shapes(R.LSTM(H))


@pytest.mark.slow
def test_lstm_bfloat16_compute():
  lstm, _, params, x, carry0, mask = _seq_setup('layer')
  half = lstm.clone(dtype=jnp.bfloat16)

  def loss(p):
    (c, h), y = half.apply({'params': p}, x, mask, initial_carry=carry0)
    return jnp.sum(y.astype(jnp.float32)), (y, c, h)

  g, (y, c, h) = jax.jit(jax.grad(loss, has_aux=True))(params)
  (_, _), y32 = lstm.apply({'params': params}, x, mask, initial_carry=carry0)
  assert y.dtype == c.dtype == h.dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(y, np.float32), y32, atol=5e-2)
  for leaf in jax.tree_util.tree_leaves(g):
    assert leaf.dtype == jnp.float32 and np.all(np.isfinite(leaf))


@pytest.mark.slow
def test_lstm_float32_with_x64_enabled():
  """As Flax's layers: float32 inputs and the default param_dtype give
  float32 parameters and outputs under jax_enable_x64; float64 parameters
  give float64 outputs."""
  with jax.enable_x64(True):
    x = inputs((B, T, I)).astype(jnp.float32)
    for norm in SEQ_NORMS:
      lstm = R.LSTM(H, norm=norm)
      params = lstm.init(jax.random.key(0), x)
      assert all(l.dtype == jnp.float32 for l in jax.tree.leaves(params))
      assert lstm.apply(params, x).dtype == jnp.float32
      lstm64 = R.LSTM(H, norm=norm, param_dtype=jnp.float64)
      assert lstm64.apply(lstm64.init(jax.random.key(0), x), x).dtype == \
          jnp.float64


@pytest.mark.parametrize('inputs_n', [1, 3, 8])
def test_proj_matches_float64(inputs_n):
  """``proj`` (x @ k, with its own backward) and its gradients against
  float64 numpy."""
  rng = np.random.default_rng(inputs_n)
  x = rng.standard_normal((5, 3, inputs_n)).astype(np.float32)
  k = rng.standard_normal((inputs_n, 12)).astype(np.float32)
  d = rng.standard_normal((5, 3, 12)).astype(np.float32)
  y, vjp = jax.vjp(lstm_scan.proj, jnp.asarray(x), jnp.asarray(k))
  dx, dk = vjp(jnp.asarray(d))
  x64, k64, d64 = (a.astype(np.float64) for a in (x, k, d))
  np.testing.assert_allclose(y, x64 @ k64, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(dx, d64 @ k64.T, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(dk, np.einsum('tbi,tbf->if', x64, d64),
                             rtol=1e-5, atol=1e-5)
