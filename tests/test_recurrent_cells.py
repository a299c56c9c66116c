"""Recurrent cells against float64 numpy transcriptions of the equations."""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lnorm import native
from lnorm import recurrent as R

B, I, H, T = 3, 4, 5, 6
EPS = 1e-5
TOL = dict(rtol=1e-4, atol=2e-5)

CELLS = {
    'LSTMCell': lambda: R.LSTMCell(H),
    'LNLSTMCell': lambda: R.LNLSTMCell(H),
    'LayerNormCLSTMCell': lambda: R.LayerNormCLSTMCell(H),
    'GRUCell': lambda: R.GRUCell(H),
    'LNGRUCell': lambda: R.LNGRUCell(H),
    'RNNCell': lambda: R.RNNCell(H),
    'LNRNNCell': lambda: R.LNRNNCell(H),
    'BNLSTMCell': lambda: R.BNLSTMCell(H, max_steps=T),
}
PLAIN = [k for k in CELLS if k != 'BNLSTMCell']


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


def np_lstm(p, kind, carry, x):
  """Eqs. 17-19 ('plain'), 20-22 ('ln') and 29-31 ('lnc')."""
  c, h = carry
  wx, wh = x @ p['kernel_x'], h @ p['kernel_h']
  if kind == 'ln':
    z = np_ln(wh, p['gain_h']) + np_ln(wx, p['gain_x']) + p['bias']
  else:
    z = wh + wx + p['bias']
  f, i, o, g = (z[:, k * H:(k + 1) * H] for k in range(4))
  c = sig(f) * c + sig(i) * np.tanh(g)
  cn = c if kind == 'plain' else np_ln(c, p['gain_c'], p['bias_c'])
  h = sig(o) * np.tanh(cn)
  return (c, h), h


def np_gru(p, kind, carry, x):
  """Eqs. 23-25 ('plain', plus zero-initialised biases) and 26-28 ('ln')."""
  h = carry
  wx, wh = x @ p['kernel_x'], h @ p['kernel_h']
  Wx, Uh = x @ p['kernel_xc'], h @ p['kernel_hc']
  if kind == 'ln':
    zr = np_ln(wh, p['gain_h']) + np_ln(wx, p['gain_x']) + p['bias']
    cand = (np_ln(Wx, p['gain_xc'], p['bias_xc'])
            + sig(zr[:, H:]) * np_ln(Uh, p['gain_hc'], p['bias_hc']))
  else:
    zr = wh + wx + p['bias']
    cand = Wx + p['bias_c'] + sig(zr[:, H:]) * Uh
  z = sig(zr[:, :H])
  h = (1 - z) * h + z * np.tanh(cand)
  return h, h


def np_rnn(p, kind, carry, x):
  """Eq. 4 ('ln') and the plain RNN."""
  a = carry @ p['kernel_h'] + x @ p['kernel_x']
  if kind == 'ln':
    h = np.tanh(np_ln(a, p['gain'], p['bias']))
  else:
    h = np.tanh(a + p['bias'])
  return h, h


NP_STEP = {
    'LSTMCell': functools.partial(np_lstm, kind='plain'),
    'LNLSTMCell': functools.partial(np_lstm, kind='ln'),
    'LayerNormCLSTMCell': functools.partial(np_lstm, kind='lnc'),
    'GRUCell': functools.partial(np_gru, kind='plain'),
    'LNGRUCell': functools.partial(np_gru, kind='ln'),
    'RNNCell': functools.partial(np_rnn, kind='plain'),
    'LNRNNCell': functools.partial(np_rnn, kind='ln'),
}


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


def perturb(params, seed=0):
  """Moves every parameter off its initial value so gains and biases matter."""
  leaves, treedef = jax.tree_util.tree_flatten(params)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  leaves = [l + 0.5 * jax.random.normal(k, l.shape, l.dtype)
            for l, k in zip(leaves, keys)]
  return jax.tree_util.tree_unflatten(treedef, leaves)


def random_carry(carry, seed=1):
  """Random floating leaves; integer leaves (BNLSTMCell's t) kept."""
  leaves, treedef = jax.tree_util.tree_flatten(carry)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  leaves = [jax.random.normal(k, l.shape, l.dtype)
            if jnp.issubdtype(l.dtype, jnp.floating) else l
            for l, k in zip(leaves, keys)]
  return jax.tree_util.tree_unflatten(treedef, leaves)


def inputs(shape, seed=2):
  return jax.random.normal(jax.random.key(seed), shape)


def batch_leaves(carry):
  return [l for l in jax.tree_util.tree_leaves(carry) if l.ndim > 0]


def wrap(tree):
  """Cell variables as they sit under ``nn.RNN`` / ``Recurrent``."""
  return {col: {'cell': v} for col, v in tree.items()}


def init_cell(cell, batch=B):
  """Initialises the bare cell (cheaper than tracing a scan)."""
  x = inputs((batch, I))
  return cell.init(jax.random.key(0), cell.initialize_carry(None, x.shape), x)


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
  cell = R.LNLSTMCell(H)
  x = inputs((B, I))
  carry0 = random_carry(cell.initialize_carry(jax.random.key(0), x.shape))
  params = perturb(cell.init(jax.random.key(1), carry0, x)['params'])
  (c, h), y = cell.apply({'params': params}, carry0, x)
  p = f64(params)
  (c_ref, h_ref), _ = np_lstm(p, 'ln', f64(carry0), f64(x))
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
    ('LNLSTMCell', ['gain_h', 'gain_x', 'gain_c'], ['bias', 'bias_c']),
    ('LayerNormCLSTMCell', ['gain_c'], ['bias', 'bias_c']),
    ('LNGRUCell', ['gain_h', 'gain_x', 'gain_xc', 'gain_hc'],
     ['bias', 'bias_xc', 'bias_hc']),
    ('LNRNNCell', ['gain'], ['bias']),
])
def test_ln_gains_start_at_one_biases_at_zero(name, gains, biases):
  cell = CELLS[name]()
  p = init_cell(cell)['params']
  for k in gains:
    np.testing.assert_array_equal(p[k], np.ones_like(p[k]))
  for k in biases:
    np.testing.assert_array_equal(p[k], np.zeros_like(p[k]))


@pytest.mark.parametrize('name,n', [('LSTMCell', 4), ('LNLSTMCell', 4),
                                    ('GRUCell', 2), ('LNRNNCell', 1)])
def test_recurrent_kernel_blocks_are_orthogonal(name, n):
  cell = CELLS[name]()
  p = init_cell(cell)['params']
  k = np.asarray(p['kernel_h'], np.float64)
  assert k.shape == (H, n * H) and p['kernel_x'].shape == (I, n * H)
  for j in range(n):
    blk = k[:, j * H:(j + 1) * H]
    np.testing.assert_allclose(blk.T @ blk, np.eye(H), atol=1e-5)


@pytest.mark.parametrize('cls', [R.LSTMCell, R.LNLSTMCell, R.LayerNormCLSTMCell,
                                 functools.partial(R.BNLSTMCell, max_steps=2)])
def test_forget_bias_sets_only_the_forget_slice(cls):
  cell = cls(H, forget_bias=1.0)
  p = init_cell(cell)['params']
  want = np.zeros(4 * H)
  want[:H] = 1.0
  np.testing.assert_array_equal(p['bias'], want)


# ---------------------------------------------------------------------- masks

LENGTHS = [T, 3, 1, 0]


def _masked_vs_stepped(cell, cell_vars):
  """Masked ``Recurrent`` run vs. the bare cell stepped L_i times."""
  nb = len(LENGTHS)
  x = inputs((nb, T, I))
  mask = np.arange(T)[None, :] < np.asarray(LENGTHS)[:, None]
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


def test_mask_freezes_bnlstm_in_eval_mode():
  cell = R.BNLSTMCell(H, max_steps=4, use_running_average=True)
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


# ------------------------------------------------------------------ BNLSTMCell

def _bn_setup(max_steps, steps, momentum=0.9, nb=6):
  cell = R.BNLSTMCell(H, max_steps=max_steps, momentum=momentum)
  x = inputs((nb, steps, I))
  return cell, x, wrap(init_cell(cell, nb))


def test_bnlstm_init():
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
def test_bnlstm_training_matches_numpy(max_steps, steps):
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


def test_bnlstm_unbiased_variance():
  nb = 4
  cell = R.BNLSTMCell(H, max_steps=2, momentum=0.5, unbiased=True)
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


def test_bnlstm_eval_uses_stored_rows_and_clamps_past_max_steps():
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


def test_bnlstm_under_nn_rnn():
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

@pytest.mark.parametrize('name', list(CELLS))
def test_gradients_are_finite(name):
  cell = CELLS[name]()
  x = inputs((len(LENGTHS), T, I))
  mask = np.arange(T)[None, :] < np.asarray(LENGTHS)[:, None]
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


# ------------------------------------------------------------ sequence LSTM

SEQ_CELLS = {'none': R.LSTMCell, 'layer': R.LNLSTMCell,
             'layer_c': R.LayerNormCLSTMCell}


def _seq_setup(norm, dtype=jnp.float32, seed=0, features=H):
  """Perturbed parameters shared by ``LSTM(norm)`` and its cell."""
  nb = len(LENGTHS)
  x = inputs((nb, T, I)).astype(dtype)
  lstm = R.LSTM(features, norm=norm, return_carry=True, param_dtype=dtype)
  params = perturb(lstm.init(jax.random.key(seed), x)['params'], seed)
  carry0 = random_carry((jnp.zeros((nb, features), dtype),) * 2)
  mask = np.arange(T)[None, :] < np.asarray(LENGTHS)[:, None]
  cell = SEQ_CELLS[norm](features, param_dtype=dtype)
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
# kernels split each step's rows among XLA's threads (lstm_cpu.cc, ForRows).
@pytest.mark.parametrize('features', [H, 256])
@pytest.mark.parametrize('masked', [False, True])
@pytest.mark.parametrize('norm', list(SEQ_CELLS))
def test_lstm_matches_recurrent_cell(norm, masked, features, impl):
  """Outputs, final carry and all gradients equal those of the cell's scan."""
  lstm, cell, params, x, carry0, mask = _seq_setup(norm, features=features)
  mask = mask if masked else None
  ours, ref = _seq_runs(lstm, cell, mask)
  g, (y, c, h) = _seq_grad(ours)(params, x, carry0)
  g_ref, (y_ref, c_ref, h_ref) = _seq_grad(ref)(params, x, carry0)
  # The perturbed W_h makes pre-activations sums of `features` terms of
  # size ~0.5: their float32 rounding grows with the width.
  tol = dict(rtol=1e-5, atol=1e-6 if features == H else 2e-5)
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


@pytest.mark.parametrize('norm', list(SEQ_CELLS))
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


@pytest.mark.parametrize('norm', list(SEQ_CELLS))
def test_lstm_matches_nn_rnn_and_defaults(norm, impl):
  """No mask, zero initial carry, y only: as ``nn.RNN(cell)``."""
  lstm, cell, params, x, _, _ = _seq_setup(norm)
  y = jax.jit(R.LSTM(H, norm=norm).apply)({'params': params}, x)
  y_ref = jax.jit(nn.RNN(cell).apply)({'params': {'cell': params}}, x)
  np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('masked', [False, True])
@pytest.mark.parametrize('norm', list(SEQ_CELLS))
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


@pytest.mark.parametrize('norm', list(SEQ_CELLS))
def test_lstm_second_order_and_vmap(norm, impl):
  """Higher-order derivatives and vmap, which the kernels leave to XLA,
  against the cell's scan."""
  lstm, cell, params, x, carry0, _ = _seq_setup(norm)
  ours, ref = _seq_runs(lstm, cell, None)

  def grad_norm(run):
    def f(p):
      g = jax.grad(lambda x: jnp.sum(jnp.sin(run(p, x, carry0)[1])))(x)
      return jnp.sum(g * g)
    return jax.grad(f)

  for a, b in zip(jax.tree_util.tree_leaves(grad_norm(ours)(params)),
                  jax.tree_util.tree_leaves(grad_norm(ref)(params))):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * float(np.max(np.abs(b))))
  xs = jnp.stack([x, 2 * x])
  y = jax.vmap(lambda x: ours(params, x, carry0)[1])(xs)
  for k in range(2):
    np.testing.assert_allclose(y[k], ref(params, xs[k], carry0)[1],
                               rtol=1e-5, atol=1e-6)


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
    cell64 = R.LNLSTMCell(H, param_dtype=jnp.float64)
    _, y64 = R.Recurrent(cell64).apply(
        {'params': {'cell': f64(params)}}, f64(x), mask,
        initial_carry=f64(carry0))
    y64 = np.asarray(y64)
  err, err_cell = np.max(np.abs(y - y64)), np.max(np.abs(y32 - y64))
  assert err < 1e-5 and err <= 2 * err_cell + 1e-6


@pytest.mark.parametrize('norm,names', [
    ('none', {'kernel_x', 'kernel_h', 'bias'}),
    ('layer', {'kernel_x', 'kernel_h', 'bias', 'gain_h', 'gain_x', 'gain_c',
               'bias_c'}),
    ('layer_c', {'kernel_x', 'kernel_h', 'bias', 'gain_c', 'bias_c'}),
])
def test_lstm_params_are_the_cells(norm, names):
  x = inputs((B, T, I))
  p = R.LSTM(H, norm=norm, forget_bias=1.0).init(jax.random.key(0), x)[
      'params']
  cell = SEQ_CELLS[norm](H, forget_bias=1.0)
  p_cell = init_cell(cell)['params']
  assert set(p) == set(p_cell) == names
  for k in names:
    assert p[k].shape == p_cell[k].shape and p[k].dtype == jnp.float32
    if not k.startswith('kernel'):
      np.testing.assert_array_equal(p[k], p_cell[k])  # gains 1, biases 0
  k_h = np.asarray(p['kernel_h'], np.float64)
  for j in range(4):
    blk = k_h[:, j * H:(j + 1) * H]
    np.testing.assert_allclose(blk.T @ blk, np.eye(H), atol=1e-5)


def test_lstm_batch_axes_and_carry():
  """Any number of batch axes; the final carry continues the sequence."""
  lstm = R.LSTM(H, norm='layer', return_carry=True)
  x = inputs((2, 3, T, I))
  params = perturb(lstm.init(jax.random.key(0), x)['params'])
  apply = jax.jit(lstm.apply)
  (c, h), y = apply({'params': params}, x)
  assert y.shape == (2, 3, T, H) and c.shape == h.shape == (2, 3, H)
  (_, _), y_flat = apply({'params': params}, x.reshape(6, T, I))
  np.testing.assert_allclose(y.reshape(6, T, H), y_flat, rtol=1e-6,
                             atol=1e-7)
  (_, _), y1 = apply({'params': params}, x[0, 0])  # no batch axis
  np.testing.assert_allclose(y1, y[0, 0], rtol=1e-6, atol=1e-7)
  # Two halves with the carry handed over equal the whole.
  k = T // 2
  (c1, h1), ya = apply({'params': params}, x[..., :k, :])
  (c2, h2), yb = apply({'params': params}, x[..., k:, :],
                       initial_carry=(c1, h1))
  np.testing.assert_allclose(jnp.concatenate([ya, yb], -2), y, rtol=1e-5,
                             atol=1e-6)
  np.testing.assert_allclose(c2, c, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(h2, h, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('norm', list(SEQ_CELLS))
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
  x = inputs((B, T, I))
  with pytest.raises(ValueError, match='norm'):
    R.LSTM(H, norm='batch').init(jax.random.key(0), x)
  with pytest.raises(ValueError, match='mask'):
    R.LSTM(H).init(jax.random.key(0), x, np.ones((B, T + 1), bool))
  with pytest.raises(ValueError, match='time axis'):
    R.LSTM(H).init(jax.random.key(0), x[0, 0])


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
