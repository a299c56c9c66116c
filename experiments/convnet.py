"""ConvNets on MNIST and Fashion-MNIST (section 6.7)."""

from __future__ import annotations

import ml_collections

from experiments import classifier
from experiments.runner import loop
from experiments.runner.errors import check
from lnorm import layers
from lnorm.convnet import ConvNet


def validate(config: ml_collections.ConfigDict) -> None:
  check(all(c >= 1 for c in config.channels) and config.hidden >= 1,
        f"channels={config.channels} and hidden={config.hidden} need sizes >= 1")
  classifier.validate(config, layers.accept, lambda: (*config.channels, config.hidden))


def create_model(config) -> ConvNet:
  return ConvNet(channels=config.channels, hidden=config.hidden,
                 **classifier.norm_fields(config))


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str
                       ) -> classifier.TrainState:
  validate(config)
  return loop.run(config, workdir, lambda: classifier.task(
      config, create_model(config), classifier.load_data(config, flatten=False)))
