"""``Recurrent``: a cell scanned over time with a (batch, time) mask."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import linen as nn
from flax.typing import Array, PRNGKey

Carry = Any


def _freeze(batch_shape: tuple[int, ...], m_B: Array, new: Array, old: Array
            ) -> Array:
  """Keeps ``old`` where the mask is off; leaves without the batch axes advance.

  A leaf without leading batch axes (``LSTMCell(norm='batch')``'s step
  counter) is shared by the batch and so cannot be frozen per example.
  """
  nb = len(batch_shape)
  if new.shape[:nb] != batch_shape:
    return new
  m = m_B.reshape(batch_shape + (1,) * (new.ndim - nb))
  return jnp.where(m, new, old)


class Recurrent(nn.Module):
  """Scans ``cell`` over time with an optional (*batch, time) boolean mask.

  ``__call__(x, mask=None) -> (final_carry, y)`` with x (*batch, time,
  *features) and y (*batch, time, *out). Where ``mask`` is False the cell
  still runs (fixed shapes under ``lax.scan``) but every carry leaf with the
  batch axes keeps its previous value and the output is 0, so the final carry
  of a sequence is its carry after its last unmasked step. Unlike
  ``nn.RNN(seq_lengths=...)``, which selects the carry at ``length - 1``
  after the fact and leaves padded outputs as computed, the mask may have
  holes, a length of 0 keeps the initial carry, and outputs are zeroed.

  The ``stats`` collection (the running averages of ``LSTMCell(norm=
  'batch')``) is carried through the scan when it is mutable, so the cell
  updates it at every step under ``apply(..., mutable=['batch_stats'])``. At
  init and when it is immutable it is broadcast instead: a scan cannot create
  a carried variable, nor return an immutable one. The batch statistics
  include the padded examples of each step: batch norm itself is not masked.

  The cell holds ``dtype`` and ``param_dtype``; ``Recurrent``, like
  ``nn.RNN``, has no parameters of its own.
  """

  cell: nn.RNNCellBase
  stats: str = 'batch_stats'
  unroll: int = 1

  def __call__(self, x: Array, mask: Array | None = None, *,
               initial_carry: Carry | None = None,
               init_key: PRNGKey | None = None) -> tuple[Carry, Any]:
    t_axis = x.ndim - self.cell.num_feature_axes - 1
    if t_axis < 0:
      raise ValueError(f'input of shape {x.shape} has no time axis')
    batch_shape = x.shape[:t_axis]
    if mask is not None:
      mask = jnp.asarray(mask, bool)
      if mask.shape != x.shape[:t_axis + 1]:
        raise ValueError(f'mask has shape {mask.shape}; expected '
                         f'{x.shape[:t_axis + 1]} (batch..., time)')
      mask = jnp.moveaxis(mask, -1, 0)
    if initial_carry is None:
      key = jax.random.key(0) if init_key is None else init_key
      initial_carry = self.cell.initialize_carry(
          key, batch_shape + x.shape[t_axis + 1:])

    def step(cell: nn.RNNCellBase, carry: Carry, inp: tuple[Array, Any]):
      x_t, m_B = inp
      new_carry, y = cell(carry, x_t)
      if m_B is None:
        return new_carry, y
      new_carry = jax.tree_util.tree_map(
          functools.partial(_freeze, batch_shape, m_B), new_carry, carry)
      zeros = jax.tree_util.tree_map(jnp.zeros_like, y)
      y = jax.tree_util.tree_map(
          functools.partial(_freeze, batch_shape, m_B), y, zeros)
      return new_carry, y

    carried = (not self.is_initializing()
               and self.is_mutable_collection(self.stats))
    scan = nn.scan(step,
                   variable_broadcast=['params'] + ([] if carried
                                                    else [self.stats]),
                   variable_carry=[self.stats] if carried else False,
                   split_rngs={'params': False}, in_axes=0, out_axes=0,
                   unroll=self.unroll)
    x_TxBxI = jnp.moveaxis(x, t_axis, 0)
    carry, y = scan(self.cell, initial_carry, (x_TxBxI, mask))
    y = jax.tree_util.tree_map(lambda v: jnp.moveaxis(v, 0, t_axis), y)
    return carry, y
