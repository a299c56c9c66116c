"""The recurrent cells and the masked scan against float64 numpy
transcriptions of the paper's equations (tests/recurrent_refs.py)."""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lnorm import norms
from lnorm import recurrent as R
from tests.recurrent_refs import (B, H, I, LENGTHS, T, TOL, batch_leaves,
                                  f64, init_cell, inputs, length_mask,
                                  np_bnlstm, np_bn, np_gru, np_ln, np_lstm,
                                  np_rnn, perturb, random_carry, sig, wrap)

CELLS = {
    'LSTMCell(none)': lambda: R.LSTMCell(H),
    'LSTMCell(layer)': lambda: R.LSTMCell(H, norm='layer'),
    'LSTMCell(layer_c)': lambda: R.LSTMCell(H, norm='layer_c'),
    'GRUCell(none)': lambda: R.GRUCell(H),
    'GRUCell(layer)': lambda: R.GRUCell(H, norm='layer'),
    'RNNCell(none)': lambda: R.RNNCell(H),
    'RNNCell(layer)': lambda: R.RNNCell(H, norm='layer'),
    'LSTMCell(batch)': lambda: R.LSTMCell(H, norm='batch', max_steps=T),
}
PLAIN = [k for k in CELLS if k != 'LSTMCell(batch)']
NP_STEP = {
    'LSTMCell(none)': functools.partial(np_lstm, norm='none'),
    'LSTMCell(layer)': functools.partial(np_lstm, norm='layer'),
    'LSTMCell(layer_c)': functools.partial(np_lstm, norm='layer_c'),
    'GRUCell(none)': functools.partial(np_gru, norm='none'),
    'GRUCell(layer)': functools.partial(np_gru, norm='layer'),
    'RNNCell(none)': functools.partial(np_rnn, norm='none'),
    'RNNCell(layer)': functools.partial(np_rnn, norm='layer'),
}


def bn_cell(max_steps, **kw):
  return R.LSTMCell(H, norm='batch', max_steps=max_steps, **kw)


# --------------------------------------------------------------------- shapes

@pytest.mark.parametrize('name', list(CELLS))
def test_step_shapes_and_dtypes(name):
  cell = CELLS[name]()
  x = inputs((B, I))
  carry = cell.initialize_carry(jax.random.key(0), x.shape)
  v = cell.init(jax.random.key(1), carry, x)
  (new, y), _ = cell.apply(v, carry, x, mutable=['batch_stats'])
  assert cell.num_feature_axes == 1
  leaves = jax.tree_util.tree_leaves
  structure = jax.tree_util.tree_structure
  assert structure(new) == structure(carry)
  for a, b in zip(leaves(new), leaves(carry)):
    assert a.shape == b.shape and a.dtype == b.dtype
  assert y.shape == (B, H) and y.dtype == jnp.float32
  assert np.all(np.isfinite(y)) and np.any(y != 0)
  for l in batch_leaves(carry):
    assert l.shape == (B, H)


# ------------------------------------------------------- numpy references

@pytest.mark.parametrize('name', PLAIN)
def test_matches_numpy_reference(name):
  """One step of the bare cell, then T steps under jit(nn.RNN)."""
  cell = CELLS[name]()
  x = inputs((B, T, I))
  params = perturb(init_cell(cell)['params'])
  carry0 = random_carry(cell.initialize_carry(jax.random.key(0), (B, I)))
  (_, y1) = cell.apply({'params': params}, carry0, x[:, 0])
  rnn = nn.RNN(cell, return_carry=True)
  carry, y = jax.jit(rnn.apply)(wrap({'params': params}), x,
                                initial_carry=carry0)
  assert y.shape == (B, T, H)

  p, c_np, xs = f64(params), f64(carry0), f64(x)
  step = NP_STEP[name]
  ys = []
  for t in range(T):
    c_np, y_t = step(p, carry=c_np, x=xs[:, t])
    ys.append(y_t)
  np.testing.assert_allclose(y1, ys[0], **TOL)
  np.testing.assert_allclose(y, np.stack(ys, 1), **TOL)
  for a, b in zip(jax.tree_util.tree_leaves(carry),
                  jax.tree_util.tree_leaves(c_np)):
    np.testing.assert_allclose(a, b, **TOL)


def test_lnlstm_carries_raw_cell_and_normalizes_it_only_for_h():
  cell = R.LSTMCell(H, norm='layer')
  x = inputs((B, I))
  carry0 = random_carry(cell.initialize_carry(jax.random.key(0), x.shape))
  params = perturb(jax.jit(cell.init)(jax.random.key(1), carry0, x)['params'])
  (c, h), y = cell.apply({'params': params}, carry0, x)
  p = f64(params)
  (c_ref, h_ref), _ = np_lstm(p, 'layer', f64(carry0), f64(x))
  np.testing.assert_allclose(c, c_ref, **TOL)
  np.testing.assert_allclose(h, h_ref, **TOL)
  np.testing.assert_array_equal(y, h)
  # The test separates the readings: LN(c) is far from c, and
  # o * tanh(c) (no LN) is far from h.
  assert not np.allclose(c, np_ln(c_ref, p['gain_c'], p['bias_c']), atol=1e-2)
  z = (np_ln(f64(carry0)[1] @ p['kernel_h'], p['gain_h'])
       + np_ln(f64(x) @ p['kernel_x'], p['gain_x']) + p['bias'])
  assert not np.allclose(h, sig(z[:, 2 * H:3 * H]) * np.tanh(c_ref), atol=1e-2)


# ------------------------------------------------------------- initialisation

@pytest.mark.parametrize('name,gains,biases', [
    ('LSTMCell(layer)', ['gain_h', 'gain_x', 'gain_c'], ['bias', 'bias_c']),
    ('LSTMCell(layer_c)', ['gain_c'], ['bias', 'bias_c']),
    ('GRUCell(layer)', ['gain_h', 'gain_x', 'gain_xc', 'gain_hc'],
     ['bias', 'bias_xc', 'bias_hc']),
    ('RNNCell(layer)', ['gain'], ['bias']),
])
def test_ln_gains_start_at_one_biases_at_zero(name, gains, biases):
  cell = CELLS[name]()
  p = init_cell(cell)['params']
  for k in gains:
    np.testing.assert_array_equal(p[k], np.ones_like(p[k]))
  for k in biases:
    np.testing.assert_array_equal(p[k], np.zeros_like(p[k]))


@pytest.mark.parametrize('name,n', [
    ('LSTMCell(none)', 4), ('LSTMCell(layer)', 4), ('GRUCell(none)', 2),
    ('RNNCell(layer)', 1)])
def test_recurrent_kernel_blocks_are_orthogonal(name, n):
  cell = CELLS[name]()
  p = init_cell(cell)['params']
  k = np.asarray(p['kernel_h'], np.float64)
  assert k.shape == (H, n * H) and p['kernel_x'].shape == (I, n * H)
  for j in range(n):
    blk = k[:, j * H:(j + 1) * H]
    np.testing.assert_allclose(blk.T @ blk, np.eye(H), atol=1e-5)


@pytest.mark.parametrize('norm', ('none', 'layer', 'layer_c', 'batch'))
def test_forget_bias_sets_only_the_forget_slice(norm):
  cell = R.LSTMCell(H, norm=norm, forget_bias=1.0, max_steps=2)
  p = init_cell(cell)['params']
  want = np.zeros(4 * H)
  want[:H] = 1.0
  np.testing.assert_array_equal(p['bias'], want)


# ---------------------------------------------------------------------- masks

def _masked_vs_stepped(cell, cell_vars):
  """Masked ``Recurrent`` run vs. the bare cell stepped L_i times."""
  nb = len(LENGTHS)
  x = inputs((nb, T, I))
  mask = length_mask()
  carry0 = random_carry(cell.initialize_carry(None, (nb, I)))
  carry, y = jax.jit(R.Recurrent(cell).apply)(wrap(cell_vars), x, mask,
                                              initial_carry=carry0)
  assert y.shape == (nb, T, H)
  step = jax.jit(cell.apply)
  for i, L in enumerate(LENGTHS):
    c = jax.tree_util.tree_map(lambda a: a[i:i + 1] if a.ndim else a, carry0)
    for t in range(L):
      c, y_t = step(cell_vars, c, x[i:i + 1, t])
      np.testing.assert_allclose(y[i, t], y_t[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(y[i, L:], 0.0)
    for a, b in zip(batch_leaves(carry), batch_leaves(c)):
      np.testing.assert_allclose(a[i], b[0], rtol=1e-5, atol=1e-6)
    if L < T:  # Guard: one more step would have moved the carry.
      c_more, _ = step(cell_vars, c, x[i:i + 1, L])
      assert not np.allclose(batch_leaves(c_more)[-1][0],
                             batch_leaves(carry)[-1][i], atol=1e-3)


@pytest.mark.parametrize('name', PLAIN)
def test_mask_freezes_carry_and_zeroes_outputs(name):
  cell = CELLS[name]()
  _masked_vs_stepped(cell, {'params': perturb(init_cell(cell)['params'])})


@pytest.mark.slow
def test_mask_freezes_batch_lstm_in_eval_mode():
  cell = bn_cell(4, use_running_average=True)
  v = init_cell(cell)
  stats = jax.tree_util.tree_map(
      lambda a: a + 0.3 * jnp.abs(inputs(a.shape, seed=a.size)),
      v['batch_stats'])
  _masked_vs_stepped(cell, {'params': perturb(v['params']),
                            'batch_stats': stats})


def test_mask_with_a_hole_skips_that_step():
  cell = R.LSTMCell(H)
  x = inputs((1, 4, I))
  rec = R.Recurrent(cell)
  v = wrap({'params': perturb(init_cell(cell)['params'])})
  carry, y = jax.jit(rec.apply)(v, x, np.array([[True, True, False, True]]))
  carry_ref, y_ref = jax.jit(rec.apply)(v, x[:, np.array([0, 1, 3])])
  np.testing.assert_allclose(carry[0], carry_ref[0], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(y[0, 3], y_ref[0, 2], rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(y[0, 2], 0.0)


def test_mask_shape_is_checked():
  rec = R.Recurrent(R.LSTMCell(H))
  x = inputs((B, T, I))
  with pytest.raises(ValueError, match='mask'):
    rec.init(jax.random.key(0), x, np.ones((B, T + 1), bool))


# ------------------------------------------------------- LSTMCell(norm='batch')

def _bn_setup(max_steps, steps, momentum=0.9, nb=6):
  cell = bn_cell(max_steps, momentum=momentum)
  x = inputs((nb, steps, I))
  return cell, x, wrap(init_cell(cell, nb))


@pytest.mark.slow
def test_batch_lstm_init():
  cell, x, v = _bn_setup(max_steps=4, steps=T)
  # Recurrent creates the running averages although the scan carries them.
  v_rec = jax.jit(R.Recurrent(cell).init)(jax.random.key(0), x)
  assert jax.tree_util.tree_structure(v_rec) == jax.tree_util.tree_structure(v)
  for a, b in zip(jax.tree_util.tree_leaves(v_rec['batch_stats']),
                  jax.tree_util.tree_leaves(v['batch_stats'])):
    np.testing.assert_array_equal(a, b)
  p, s = v['params']['cell'], v['batch_stats']['cell']
  for k in ('gain_h', 'gain_x', 'gain_c'):
    np.testing.assert_allclose(p[k], 0.1)
  np.testing.assert_array_equal(p['bias_c'], 0.0)
  np.testing.assert_array_equal(p['bias'], 0.0)
  for n, F in (('h', 4 * H), ('x', 4 * H), ('c', H)):
    np.testing.assert_array_equal(s['mean_' + n], np.zeros((4, F)))
    np.testing.assert_array_equal(s['var_' + n], np.ones((4, F)))
  carry = cell.initialize_carry(None, (B, I))
  assert carry[2].shape == () and carry[2].dtype == jnp.int32 and carry[2] == 0


@pytest.mark.parametrize('max_steps,steps', [(5, 3), (3, 5)])
def test_batch_lstm_training_matches_numpy(max_steps, steps):
  cell, x, v = _bn_setup(max_steps, steps)
  params = perturb(v['params'])
  carry0 = random_carry(cell.initialize_carry(None, x.shape[:1] + x.shape[2:]))
  (carry, y), upd = jax.jit(functools.partial(
      R.Recurrent(cell).apply, mutable=['batch_stats']))(
          {'params': params, 'batch_stats': v['batch_stats']}, x,
          initial_carry=carry0)
  s = upd['batch_stats']['cell']
  ys, (c_ref, h_ref), s_ref = np_bnlstm(
      f64(params['cell']), f64(v['batch_stats']['cell']), f64(carry0[:2]),
      f64(jnp.swapaxes(x, 0, 1)), train=True, max_steps=max_steps,
      momentum=0.9)
  tol = dict(rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(y, np.swapaxes(ys, 0, 1), **tol)
  np.testing.assert_allclose(carry[0], c_ref, **tol)
  np.testing.assert_allclose(carry[1], h_ref, **tol)
  assert int(carry[2]) == steps
  for k in s_ref:
    np.testing.assert_allclose(s[k], s_ref[k], **tol)
  seen = min(steps, max_steps)
  for n in ('h', 'x', 'c'):
    # Rows seen moved; rows never reached keep their initial 0 and 1.
    assert np.all(np.any(np.asarray(s['mean_' + n][:seen]) != 0, axis=1))
    np.testing.assert_array_equal(s['mean_' + n][seen:], 0.0)
    np.testing.assert_array_equal(s['var_' + n][seen:], 1.0)
  # Statistics are per step.
  assert not np.allclose(s['mean_x'][0], s['mean_x'][1], atol=1e-4)
  assert not np.allclose(s['var_c'][0], s['var_c'][1], atol=1e-4)


@pytest.mark.slow
def test_batch_lstm_unbiased_variance():
  nb = 4
  cell = bn_cell(2, momentum=0.5, unbiased=True)
  v = init_cell(cell, nb)
  params = perturb(v['params'])
  carry0 = random_carry(cell.initialize_carry(None, (nb, I)))
  x = inputs((nb, I))
  (_, y), upd = cell.apply({'params': params, 'batch_stats': v['batch_stats']},
                           carry0, x, mutable=['batch_stats'])
  p = f64(params)
  wx = f64(x) @ p['kernel_x']
  wh = f64(carry0[1]) @ p['kernel_h']
  bn = lambda a, g, b: np_bn(a, g, b, a.mean(0), a.var(0, ddof=1))
  z = bn(wh, p['gain_h'], None) + bn(wx, p['gain_x'], None) + p['bias']
  f, i, o, g = (z[:, k * H:(k + 1) * H] for k in range(4))
  c = sig(f) * f64(carry0[0]) + sig(i) * np.tanh(g)
  np.testing.assert_allclose(
      y, sig(o) * np.tanh(bn(c, p['gain_c'], p['bias_c'])), rtol=1e-4,
      atol=1e-4)
  np.testing.assert_allclose(upd['batch_stats']['var_x'][0],
                             0.5 + 0.5 * wx.var(0, ddof=1), rtol=1e-4)


@pytest.mark.slow
def test_batch_lstm_eval_uses_stored_rows_and_clamps_past_max_steps():
  max_steps, steps = 3, 5
  cell, x, v = _bn_setup(max_steps, steps)
  cell = cell.clone(use_running_average=True)
  params = perturb(v['params'])
  stats = jax.tree_util.tree_map(
      lambda a: a + 0.5 * jnp.abs(inputs(a.shape, seed=a.size)),
      v['batch_stats'])
  variables = {'params': params, 'batch_stats': stats}
  carry, y = jax.jit(R.Recurrent(cell).apply)(variables, x)
  ys, _, _ = np_bnlstm(
      f64(params['cell']), f64(stats['cell']),
      (np.zeros((x.shape[0], H)), np.zeros((x.shape[0], H))),
      f64(jnp.swapaxes(x, 0, 1)), train=False, max_steps=max_steps,
      momentum=0.9)
  np.testing.assert_allclose(y, np.swapaxes(ys, 0, 1), rtol=1e-4, atol=1e-5)
  # No batch statistics: one example alone gives the same outputs.
  _, y0 = R.Recurrent(cell).apply(variables, x[:1])
  np.testing.assert_allclose(y0[0], y[0], rtol=1e-5, atol=1e-6)
  # Guard: batch statistics would give other outputs.
  ys_train, _, _ = np_bnlstm(
      f64(params['cell']), f64(stats['cell']),
      (np.zeros((x.shape[0], H)), np.zeros((x.shape[0], H))),
      f64(jnp.swapaxes(x, 0, 1)), train=True, max_steps=max_steps,
      momentum=0.9)
  assert not np.allclose(ys_train, ys, atol=1e-2)


@pytest.mark.slow
def test_batch_lstm_under_nn_rnn():
  cell, x, v = _bn_setup(max_steps=4, steps=T)
  init_rnn = nn.RNN(cell, variable_broadcast=('params', 'batch_stats'))
  v_rnn = init_rnn.init(jax.random.key(0), x)
  assert jax.tree_util.tree_structure(v_rnn) == jax.tree_util.tree_structure(v)
  params = perturb(v['params'])
  train = nn.RNN(cell, variable_carry='batch_stats')
  y, upd = jax.jit(functools.partial(train.apply, mutable=['batch_stats']))(
      {'params': params, 'batch_stats': v['batch_stats']}, x)
  evaluate = nn.RNN(cell.clone(use_running_average=True),
                    variable_broadcast=('params', 'batch_stats'))
  y_eval = evaluate.apply({'params': params, **upd}, x)

  zeros = (np.zeros((x.shape[0], H)), np.zeros((x.shape[0], H)))
  run = functools.partial(np_bnlstm, f64(params['cell']), carry=zeros,
                          xs=f64(jnp.swapaxes(x, 0, 1)), max_steps=4,
                          momentum=0.9)
  ys, _, s_ref = run(f64(v['batch_stats']['cell']), train=True)
  ys_eval, _, _ = run(s_ref, train=False)
  tol = dict(rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(y, np.swapaxes(ys, 0, 1), **tol)
  for k in s_ref:
    np.testing.assert_allclose(upd['batch_stats']['cell'][k], s_ref[k], **tol)
  np.testing.assert_allclose(y_eval, np.swapaxes(ys_eval, 0, 1), **tol)


# ------------------------------------------------------------------ gradients

@pytest.mark.slow
@pytest.mark.parametrize('name', list(CELLS))
def test_gradients_are_finite(name):
  cell = CELLS[name]()
  x = inputs((len(LENGTHS), T, I))
  mask = length_mask()
  rec = R.Recurrent(cell)
  v = wrap(init_cell(cell))
  stats = v.get('batch_stats', {})

  def loss(params):
    (carry, y), _ = rec.apply({'params': params, 'batch_stats': stats}, x, mask,
                              mutable=['batch_stats'])
    return jnp.sum(y ** 2) + sum(jnp.sum(l ** 2) for l in batch_leaves(carry))

  g = jax.jit(jax.grad(loss))(v['params'])
  for leaf in jax.tree_util.tree_leaves(g):
    assert np.all(np.isfinite(leaf))
  # Gradient reaches the recurrent kernel, i.e. flows back through time.
  assert np.any(np.abs(g['cell']['kernel_h']) > 0)


# ---------------------------------------------------------------- norm names

@pytest.mark.parametrize('cls,valid', [(R.LSTMCell, R.lstm_norms),
                                       (R.GRUCell, R.gru_norms),
                                       (R.RNNCell, R.rnn_norms)])
def test_unsupported_norm_is_a_one_line_error_naming_the_valid_ones(cls, valid):
  valid = valid()
  assert {'none', 'layer'} <= set(valid) < set(norms.names())
  for norm in norms.names():
    if norm in valid:
      continue
    with pytest.raises(ValueError) as e:
      cls(H, norm=norm)
    assert str(e.value) == norms.message(norm, valid)
  with pytest.raises(ValueError, match='layer_norm'):
    cls(H, norm='layer_norm')


def test_batch_lstm_needs_max_steps():
  with pytest.raises(ValueError, match='max_steps'):
    R.LSTMCell(H, norm='batch')


# -------------------------------------------------------------------- dtypes

@pytest.mark.parametrize('name', PLAIN)
def test_float64_params_match_numpy_to_float64_precision(name):
  """``param_dtype=float64`` computes in float64: the equations to 1e-10."""
  with jax.enable_x64(True):
    cell = CELLS[name]().clone(param_dtype=jnp.float64)
    x = f64(inputs((B, T, I)))
    params = perturb(init_cell(cell)['params'])
    assert all(l.dtype == jnp.float64 for l in jax.tree.leaves(params))
    carry0 = f64(random_carry(cell.initialize_carry(None, (B, I))))
    carry, y = nn.RNN(cell, return_carry=True).apply(
        wrap({'params': params}), x, initial_carry=carry0)
    assert y.dtype == jnp.float64
    c_np, ys = f64(carry0), []
    for t in range(T):
      c_np, y_t = NP_STEP[name](f64(params), carry=c_np, x=x[:, t])
      ys.append(y_t)
    np.testing.assert_allclose(y, np.stack(ys, 1), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize('name', list(CELLS))
def test_float32_params_and_outputs_with_x64_enabled(name):
  """As Flax's layers: float32 inputs and the default param_dtype give
  float32 parameters, carries and outputs even under jax_enable_x64."""
  with jax.enable_x64(True):
    cell = CELLS[name]()
    x = inputs((B, T, I)).astype(jnp.float32)
    v = R.Recurrent(cell).init(jax.random.key(0), x)
    for leaf in jax.tree.leaves(v['params']):
      assert leaf.dtype == jnp.float32
    (carry, y), _ = R.Recurrent(cell).apply(v, x, mutable=['batch_stats'])
    assert y.dtype == jnp.float32
    for leaf in batch_leaves(carry):
      assert leaf.dtype == jnp.float32


@pytest.mark.slow
@pytest.mark.parametrize('name', list(CELLS))
def test_bfloat16_compute_keeps_the_carry_type(name):
  """``dtype=bfloat16`` runs the matmuls and norms in bfloat16; parameters
  stay float32 and each step returns the carry's dtype, so nn.RNN's scan
  keeps its carry type."""
  cell = CELLS[name]()
  half = cell.clone(dtype=jnp.bfloat16)
  x = inputs((B, T, I))
  v = init_cell(cell)
  params = perturb(v['params'])
  variables = wrap(dict(v, params=params))
  (_, y32), _ = R.Recurrent(cell).apply(variables, x, mutable=['batch_stats'])
  (carry, y16), _ = R.Recurrent(half).apply(variables, x,
                                            mutable=['batch_stats'])
  assert y16.dtype == jnp.float32
  for leaf in batch_leaves(carry):
    assert leaf.dtype == jnp.float32
  err = float(np.max(np.abs(y16 - y32)))
  assert 0 < err < 0.1  # bfloat16 rounding: changed, but only a little
