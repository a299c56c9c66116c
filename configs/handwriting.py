r"""Handwriting synthesis on IAM-OnDB (paper section 6.5, Figure 5).

Graves' (2013, section 5) synthesis network: 3 LSTM layers of 400 with skip
connections, a soft window of 10 Gaussians over the text, a mixture of 20
bivariate Gaussians and an end-of-stroke Bernoulli (3.65M weights), trained
with Adam, batch 8, sequences of 500 pen points. ``norm=layer`` is the
LN-LSTM (eqs. 20-22) in every layer, ``norm=none`` the baseline,
``norm=layer_c`` (LN on c_t only) an extra. Data: IAM-OnDB's lineStrokes and
ascii archives in ``<data_dir>/iam_ondb/`` (research use only: never commit
them). Reported: NLL in nats per line and per point, of offsets divided by the
training std (42.2, 37.1 pen units), on a split by form hash: not Graves' -1096.9
(in pen units a line of N points has an NLL N ln(42.2 x 37.1) = 7.36 N higher).

Command (one run; both norms and Figure 5 are one reproduce.py command):
  LNORM_DATA_DIR=../shared/data python -m experiments.main \
      --config configs/handwriting.py:cpu --workdir runs/hw_layer --config.norm=layer
  python scripts/reproduce.py fig5 [--preset cpu] [--seeds 3 --jobs 2]
Presets, and their runtime on the 2-core CPU (BENCHMARKS.md):
  ``:paper`` (default): the paper's model and batch, 20 epochs (24,220
    updates); 4.5-4.8 s an update: ~30 h a run. A GPU run.
  ``:cpu``: 128 units, 10 mixtures, 300-point sequences, 5 epochs (6,055
    updates), 256 whole validation and test lines every 500: 35-40 min a run
    two at a time; ``--seeds 3 --jobs 2`` about 2 h.
  ``:smoke``: a tiny model, 40 lines, 10 updates, for tests; a few minutes
    (parsing the XML files the first time takes ~2 min more).
Results: results/fig5_cpu/results.md.
"""

import ml_collections


def get_config(preset: str = "paper") -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.experiment = "handwriting"  # the loop in experiments/handwriting.py
  c.norm = "layer"              # none | layer (eqs. 20-22, every layer) | layer_c (eqs. 29-31)
  c.seed = 0                    # PRNG seed: init, shuffling, samples
  c.batch_size = 8              # the paper's (Figure 5)
  c.num_epochs = 20             # epochs of the training lines (1,211 updates each); ours, the paper gives none
  c.num_steps = 0               # updates in the run, if > 0 (instead of num_epochs)
  c.learning_rate = 1e-4        # Adam; the paper gives no rate, Graves' RMSProp used 1e-4
  c.data_dir = ""               # '' = $LNORM_DATA_DIR, else ~/.cache/lnorm/data
  c.num_train = 0               # training lines used; 0 = all (9,689)
  c.max_len = 500               # training rows per line (its first ones); the paper's 500
  c.hidden = 400                # units per LSTM layer (Graves: 400)
  c.num_layers = 3              # LSTM layers (Graves: 3)
  c.num_window = 10             # K, Gaussians of the soft window (Graves: 10)
  c.num_mixtures = 20           # M, bivariate Gaussians of the output (Graves: 20)
  c.eps = 1e-5                  # layer norm eps (added to the variance)
  c.output_grad_clip = 100.0    # Graves' clip of the output derivatives (per line sum); 0 = off
  c.grad_clip_norm = 10.0       # global-norm clip of the gradients (for Graves' LSTM clip); 0 = off
  c.num_eval = 0                # valid and test lines evaluated; 0 = all
  c.eval_max_len = 0            # rows per evaluated line; 0 = whole lines (Graves' metric)
  c.eval_batch_size = 16        # lines per evaluation batch; any size gives the same metrics
  c.eval_every_steps = 1000     # evaluate (and checkpoint) every N updates, and at each epoch end
  c.steps_per_call = 0          # unused: the loop runs one jitted call per update here
  c.num_samples = 3             # test texts written at the end (samples.png); 0 = none
  c.sample_bias = 1.0           # Graves' sampling bias (section 5.4) of the biased samples
  c.sample_points_per_char = 30  # sampling length: this many points a character, plus 50
  if preset == "paper":
    pass
  elif preset == "cpu":
    c.hidden, c.num_mixtures, c.max_len = 128, 10, 300
    c.learning_rate = 1e-3
    c.num_epochs, c.eval_every_steps = 5, 500
    c.num_eval, c.eval_max_len = 256, 0
  elif preset == "smoke":
    c.hidden, c.num_window, c.num_mixtures, c.max_len, c.batch_size = 16, 2, 3, 50, 4
    c.learning_rate = 1e-3
    c.num_train, c.num_eval, c.eval_max_len, c.eval_batch_size = 40, 8, 100, 4
    c.num_epochs, c.eval_every_steps, c.num_samples, c.sample_points_per_char = 1, 5, 1, 2
  else:
    raise ValueError(f"unknown preset {preset!r}; choose paper, cpu or smoke")
  return c
