r"""DRAW on binarized MNIST (paper section 6.4, Figure 4).

DRAW (Gregor et al. 2015) with 2x2 read and 5x5 write attention, encoder and
decoder LSTMs, a Bernoulli output and the negative variational bound as the
loss, trained with Adam. ``norm=layer_c`` is the paper's variant (LN on the
cell state only, eqs. 29-31); ``norm=none`` is the baseline; ``norm=layer``
(the LN-LSTM of eqs. 20-22) is beyond the paper. Data: Larochelle & Murray's
fixed binarization in <data_dir>/binarized_mnist (scripts/download_data.py
binarized_mnist), 50,000 train / 10,000 valid / 10,000 test. Reported: the
bound on all 10,000 test images (nats per image, one posterior sample each).

Command (one run; all variants and Figure 4 are one reproduce.py command):
  LNORM_DATA_DIR=../shared/data python -m experiments.main \
      --config configs/draw.py --workdir runs/draw_ln --config.norm=layer_c
  python scripts/reproduce.py fig4 [--preset cpu] [--results_dir results]
Presets, and their runtime on the 2-core CPU, idle (BENCHMARKS.md, "DRAW"):
  ``:paper`` (default): 64 glimpses, 256 units, z 100, batch 128, 200 epochs;
    ~205 images/s, ~4.5 min an epoch with its evaluation: ~16 h a run. A GPU
    run (the 64-step scan of small matmuls is latency-bound).
  ``:cpu``: 16 glimpses, 128 units, z 32, 20 epochs: LN against the baseline
    on a CPU; 970-1,220 images/s, 15-19 min a run.
  ``:smoke``: one tiny epoch on 1,000 images, for tests; 25-60 s, mostly
    compiling.
Results: results/fig4_cpu/results.md.
"""

import ml_collections


def get_config(preset: str = "paper") -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.experiment = "draw"         # the loop in experiments/draw.py
  c.norm = "layer_c"            # none | layer_c (eqs. 29-31, the paper's) | layer (eqs. 20-22)
  c.seed = 0                    # PRNG seed: init, shuffling, noise, samples
  c.batch_size = 128            # the paper's
  c.num_epochs = 200            # the paper's Figure 4 spans 200 epochs
  c.learning_rate = 1e-3        # Adam's default; the paper names Adam, no rate
  c.data_dir = ""               # '' = $LNORM_DATA_DIR, else ~/.cache/lnorm/data
  c.data_source = "amat"        # amat: <data_dir>/binarized_mnist/*.amat[.gz]; tfds: TFDS
  c.num_train = 0               # training images used; 0 = all 50,000
  c.num_eval = 0                # valid and test images used; 0 = all 10,000 of each
  c.num_glimpses = 64           # T: DRAW steps per image
  c.features = 256              # units of the encoder and of the decoder LSTM
  c.latent = 100                # size of z_t, per glimpse
  c.read_n = 2                  # read attention: N x N filters (2x2)
  c.write_n = 5                 # write attention: N x N filters (5x5)
  c.eps = 1e-5                  # layer norm eps (added to the variance)
  c.grad_clip_norm = 0.0        # global-norm gradient clipping; 0 = off (the paper's)
  c.eval_batch_size = 1000      # evaluation chunk; any size gives the same metrics
  c.eval_every_steps = 0        # evaluate (and checkpoint) every N updates too; 0 = per epoch
  c.num_devices = 0             # data parallel over this many devices (the batch split over them); 0 = all
  c.steps_per_call = 0          # at most N updates a jitted call (progress moves between); 0 = all to the next evaluation
  if preset == "paper":
    pass
  elif preset == "cpu":
    c.num_glimpses, c.features, c.latent, c.num_epochs = 16, 128, 32, 20
  elif preset == "smoke":
    c.num_glimpses, c.features, c.latent, c.num_epochs = 4, 32, 8, 1
    c.num_train, c.num_eval, c.batch_size, c.eval_batch_size = 1000, 500, 100, 250
  else:
    raise ValueError(f"unknown preset {preset!r}; choose paper, cpu or smoke")
  return c
