r"""ConvNets with layer, batch or no normalization (paper section 6.7).

The paper reports, without numbers, that layer norm speeds up a convnet over
no normalization, but batch norm does better still. It gives no architecture;
ours (lnorm/convnet.py): two [3x3 conv -> norm -> ReLU -> 2x2 max-pool] blocks
of 32 and 64 channels, a normalized 256-unit ReLU layer, and a linear output
layer. Layer norm takes its statistics over all H x W x C units of an
example; batch norm over N x H x W for each channel. Data: <data_dir>/mnist,
or <data_dir>/fashion_mnist with --config.dataset=fashion_mnist
(scripts/download_data.py).

Command (one run; all six, MNIST and Fashion-MNIST, are one reproduce.py command):
  LNORM_DATA_DIR=../shared/data python -m experiments.main \
      --config configs/convnet.py --workdir runs/convnet_ln --config.norm=layer
  python scripts/reproduce.py convnet [--preset cpu] [--seeds N] [--jobs 2]
Presets, and their runtime on the 2-core CPU:
  ``:paper`` (default): 20 epochs (the paper states none); 70-77 s an epoch
    alone, ~2 min with two runs at once: 30-40 min a run.
  ``:cpu``: 3 epochs of a (16, 32)-channel, 128-unit net; ~1 min an epoch.
  ``:smoke``: one epoch of a tiny net on 1,000 images, for tests; seconds.
Results: results/convnet/results.md (paper preset), results/convnet_cpu/results.md.
"""

import ml_collections


def get_config(preset: str = "paper") -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.experiment = "convnet"      # the loop in experiments/convnet.py
  c.norm = "layer"              # a dense/conv layer's norm (lnorm/norms.py: none, layer, batch, weight, rms, group, dyt, derf, scale) or package.module:Name
  c.seed = 0                    # PRNG seed: init, shuffling
  c.batch_size = 128            # minibatch size
  c.num_epochs = 20             # epochs of training
  c.learning_rate = 1e-3        # Adam
  c.data_dir = ""               # '' = $LNORM_DATA_DIR, else ~/.cache/lnorm/data
  c.data_source = "idx"         # idx: <data_dir>/<dataset>/*.gz files; tfds: TFDS
  c.dataset = "mnist"           # mnist | fashion_mnist
  c.num_train = 0               # training images used; 0 = all 55,000
  c.num_valid = 5000            # held out from the end of the training file
  c.channels = (32, 64)         # channels of the conv blocks
  c.hidden = 256                # units of the dense hidden layer
  c.norm_groups = 0             # norm=group: groups of features, dividing every normalized layer's; 0 = the largest divisor up to 32 (Wu & He's G)
  c.eps = 1e-5                  # normalization eps (added to the variance)
  c.bn_momentum = 0.99          # batch norm running-average decay
  c.bn_unbiased = False         # batch norm: N/(N-1) variance in training
  c.bn_stats = "global"         # batch norm over devices: global (the whole batch, synchronised) | local (each device's part)
  c.eval_batch_size = 1000      # evaluation chunk; any size gives the same metrics
  # One jitted call per step: XLA:CPU runs convolutions ~3x slower inside a
  # scan's while loop (experiments/classifier.py). True is fine on a GPU.
  c.scan_epoch = False
  c.eval_every_steps = 0        # evaluate (and checkpoint) every N updates too; 0 = per epoch
  c.num_devices = 0             # data parallel over this many devices (the batch split over them); 0 = all
  c.steps_per_call = 0          # at most N updates a jitted call (progress moves between); 0 = all to the next evaluation
  if preset == "paper":
    pass
  elif preset == "cpu":
    c.num_epochs, c.channels, c.hidden = 3, (16, 32), 128
  elif preset == "smoke":
    c.num_epochs, c.num_train, c.num_valid, c.channels, c.hidden = 1, 1000, 500, (8, 16), 32
  else:
    raise ValueError(f"unknown preset {preset!r}; choose paper, cpu or smoke")
  return c
