"""The MLP of permutation-invariant MNIST (section 6.6)."""

from typing import Sequence

import flax.linen as nn
import jax

from lnorm.layers import NormDense


class MLP(nn.Module):
  """ReLU MLP of ``NormDense`` layers; logits out.

  ``norm_output``: whether the output layer is normalized too. The paper
  (section 6.6) layer-normalizes only the hidden layers but batch-normalizes
  all of them.
  """
  features: Sequence[int]         # hidden sizes, then the number of outputs
  norm: str = "none"
  norm_output: bool = False
  eps: float = 1e-5
  momentum: float = 0.99
  unbiased: bool = False
  bn_groups: int = 1              # batch norm: statistics per part of the batch (NormDense.groups)
  norm_groups: int = 0            # group norm: groups of features (0: the largest divisor up to 32)

  @nn.compact
  def __call__(self, x_BxD: jax.Array, *, train: bool = True) -> jax.Array:
    h = x_BxD
    last = len(self.features) - 1
    for i, f in enumerate(self.features):
      norm = self.norm if (i < last or self.norm_output) else "none"
      h = NormDense(f, norm=norm, eps=self.eps, momentum=self.momentum,
                    unbiased=self.unbiased, groups=self.bn_groups,
                    norm_groups=self.norm_groups,
                    name=f"dense{i}")(h, train=train)
      if i < last:
        h = nn.relu(h)
    return h
