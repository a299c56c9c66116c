"""A small convnet for the section 6.7 comparison (the paper gives no architecture)."""

from typing import Sequence

import flax.linen as nn
import jax

from lnorm.layers import NormConv, NormDense


class ConvNet(nn.Module):
  """[conv 3x3 -> norm -> ReLU -> 2x2 max-pool] per entry of ``channels``,
  then a normalized ReLU dense layer of ``hidden`` units and an
  unnormalized linear output layer; logits out."""
  channels: Sequence[int] = (32, 64)
  hidden: int = 256
  num_classes: int = 10
  norm: str = "none"
  eps: float = 1e-5
  momentum: float = 0.99
  unbiased: bool = False
  bn_groups: int = 1              # batch norm: statistics per part of the batch (NormConv.groups)
  norm_groups: int = 0            # group norm: groups of channels (0: the largest divisor up to 32)

  @nn.compact
  def __call__(self, x_BxHxWxC: jax.Array, *, train: bool = True) -> jax.Array:
    kw = dict(norm=self.norm, eps=self.eps, momentum=self.momentum, unbiased=self.unbiased,
              groups=self.bn_groups, norm_groups=self.norm_groups)
    h = x_BxHxWxC
    for i, c in enumerate(self.channels):
      h = nn.relu(NormConv(c, name=f"conv{i}", **kw)(h, train=train))
      h = nn.max_pool(h, (2, 2), strides=(2, 2))
    h = h.reshape(h.shape[0], -1)
    h = nn.relu(NormDense(self.hidden, name="dense", **kw)(h, train=train))
    return NormDense(self.num_classes, name="out")(h, train=train)
