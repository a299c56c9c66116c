r"""Permutation-invariant MNIST (paper section 6.6, Figure 6).

A 784-1000-1000-10 ReLU MLP trained with Adam. ``norm=layer`` normalizes the
two hidden layers; ``norm=batch`` all three layers (batch statistics in
training, running averages at test time); ``norm=none`` is the baseline.
55,000 training images, the last 5,000 of the training file for validation,
the 10,000 test images for the reported error. Data: <data_dir>/mnist
(scripts/download_data.py mnist).

Command (one run; Figure 6 with its 3 seeds is one reproduce.py command):
  LNORM_DATA_DIR=../shared/data python -m experiments.main \
      --config configs/pi_mnist.py --workdir runs/pi_mnist_ln --config.norm=layer
  python scripts/reproduce.py fig6 [--preset cpu] [--seeds 3] [--jobs 2]
Presets, and their runtime on the 2-core CPU, idle (BENCHMARKS.md):
  ``:paper`` (default): 60 epochs at batch 128 or 4 (the paper's). An epoch
    takes 3.5-5.0 s at batch 128 and 28-42 s at batch 4 (batch norm the
    slowest), plus ~1 s of evaluation: ~5 min (batch 128) and 30-40 min
    (batch 4) a run.
  ``:cpu``: the same model for 10 epochs: under 1 min idle at batch 128 (~2 min
    with another job beside it), 5-7 min at batch 4.
  ``:smoke``: two short epochs of a 64-64 MLP on 2,000 images, for tests; seconds.
The learning rates are searched (LEARNING_RATES below; scripts/reproduce.py
fig6_lr). Results: results/fig6/results.md (paper preset, 3 seeds),
results/fig6_cpu/results.md, results/fig6_lr/results.md.
"""

import ml_collections

# Adam learning rates per (norm, batch_size), picked by the lowest validation
# error in `python scripts/reproduce.py fig6_lr` (results/fig6_lr/results.md):
# batch 128 runs 5 epochs, batch 4 runs 1 epoch, for each rate in LR_GRID.
LR_GRID = {128: (3e-4, 1e-3, 3e-3), 4: (3e-5, 1e-4, 3e-4)}
LEARNING_RATES = {("none", 128): 3e-4, ("layer", 128): 3e-4, ("batch", 128): 3e-4,
                  ("none", 4): 1e-4, ("layer", 4): 3e-5, ("batch", 4): 3e-4}


def learning_rate(norm: str, batch_size: int) -> float:
  """The searched rate of (norm, batch_size); a one-line ValueError for a pair
  the search did not cover (never another norm's rate)."""
  if (norm, batch_size) not in LEARNING_RATES:
    raise ValueError(f"no searched learning rate for norm={norm!r} at batch {batch_size} "
                     "(searched: " + ", ".join(f"{n}@{b}" for n, b in LEARNING_RATES)
                     + "); give --config.learning_rate")
  return LEARNING_RATES[norm, batch_size]


def get_config(preset: str = "paper") -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.experiment = "pi_mnist"     # the loop in experiments/pi_mnist.py
  c.norm = "layer"              # a dense/conv layer's norm (lnorm/norms.py: none, layer, batch, weight, rms, group, dyt, derf, scale) or package.module:Name
  c.seed = 0                    # PRNG seed: init, shuffling
  c.batch_size = 128            # the paper: 128 or 4
  c.num_epochs = 60             # the paper's Figure 6 spans 60 epochs
  # Adam. The paper gives none; this is the searched rate for the default
  # (layer, 128). Other norms and batch sizes: see LEARNING_RATES above.
  c.learning_rate = learning_rate("layer", 128)
  c.data_dir = ""               # '' = $LNORM_DATA_DIR, else ~/.cache/lnorm/data
  c.data_source = "idx"         # idx: <data_dir>/<dataset>/*.gz files; tfds: TFDS
  c.dataset = "mnist"           # mnist | fashion_mnist
  c.num_train = 0               # training images used; 0 = all 55,000
  c.num_valid = 5000            # held out from the end of the training file
  c.hidden = (1000, 1000)       # hidden layer sizes
  c.norm_groups = 0             # norm=group: groups of features, dividing every normalized layer's; 0 = the largest divisor up to 32 (Wu & He's G)
  c.eps = 1e-5                  # normalization eps (added to the variance)
  c.bn_momentum = 0.99          # batch norm running-average decay
  c.bn_unbiased = True          # batch norm: N/(N-1) variance (the paper at batch 4)
  c.eval_batch_size = 2000      # evaluation chunk; any size gives the same metrics
  c.scan_epoch = True           # each epoch one jitted lax.scan (else a step per call)
  c.eval_every_steps = 0        # evaluate (and checkpoint) every N updates too; 0 = per epoch
  c.num_devices = 0             # data parallel over this many devices (the batch split over them); 0 = all
  c.bn_stats = "global"         # batch norm over devices: global (the whole batch, synchronised) | local (each device's part)
  c.steps_per_call = 0          # at most N updates a jitted call (progress moves between); 0 = all to the next evaluation
  if preset == "paper":
    pass
  elif preset == "cpu":
    c.num_epochs = 10
  elif preset == "smoke":
    c.num_epochs, c.num_train, c.num_valid, c.hidden = 2, 2000, 500, (64, 64)
  else:
    raise ValueError(f"unknown preset {preset!r}; choose paper, cpu or smoke")
  return c
