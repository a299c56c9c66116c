"""Permutation-invariant MNIST (section 6.6): an MLP on flattened pixels."""

from __future__ import annotations

import ml_collections

from experiments import classifier
from experiments.runner import loop, parallel
from experiments.runner.errors import check
from lnorm.layers import NORMS
from lnorm.mlp import MLP


def validate(config: ml_collections.ConfigDict) -> None:
  classifier.validate(config, NORMS)
  check(all(h >= 1 for h in config.hidden), f"hidden={config.hidden} needs sizes >= 1")
  parallel.bn_groups(config)  # bn_stats and num_devices, before the data loads


def create_model(config) -> MLP:
  # Section 6.6: layer norm on the hidden layers only, batch norm on all.
  return MLP(features=(*config.hidden, 10), norm=config.norm,
             norm_output=config.norm == "batch", eps=config.eps,
             momentum=config.bn_momentum, unbiased=config.bn_unbiased,
             bn_groups=parallel.bn_groups(config))


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str
                       ) -> classifier.TrainState:
  validate(config)
  return loop.run(config, workdir, lambda: classifier.task(
      config, create_model(config), classifier.load_data(config, flatten=True)))
