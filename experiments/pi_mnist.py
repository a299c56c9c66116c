"""Permutation-invariant MNIST (section 6.6): an MLP on flattened pixels."""

from __future__ import annotations

import ml_collections

from experiments import classifier
from experiments.runner import loop
from experiments.runner.errors import check
from lnorm import layers, norms
from lnorm.mlp import MLP


def validate(config: ml_collections.ConfigDict) -> None:
  check(all(h >= 1 for h in config.hidden), f"hidden={config.hidden} needs sizes >= 1")
  classifier.validate(config, layers.accept, lambda: (*config.hidden, *_output(config)))


def _output(config) -> tuple[int, ...]:
  """The output layer's width if it is normalized: section 6.6 layer-
  normalizes the hidden layers only and batch-normalizes all of them, so a
  norm with batch statistics normalizes the output layer too."""
  return (10,) if norms.get(config.norm).running_stats else ()


def create_model(config) -> MLP:
  return MLP(features=(*config.hidden, 10), norm_output=bool(_output(config)),
             **classifier.norm_fields(config))


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str
                       ) -> classifier.TrainState:
  validate(config)
  return loop.run(config, workdir, lambda: classifier.task(
      config, create_model(config), classifier.load_data(config, flatten=True)))
