r"""A byte-level Transformer LM: where the norm goes, at what precision (beyond the paper).

A decoder-only Transformer (lnorm/transformer.py) over bytes, reported in bits
per byte. ``norm_position`` = post (Vaswani et al. 2017), pre (Xiong et al.
2020), peri (Kim et al. 2025), deepnorm (Wang et al. 2022) or none; ``norm`` =
layer | rms (Zhang & Sennrich 2019) | none; ``qk_norm``; Adam with an optional
linear warm-up. Claims tested (scripts/paper/transformer.py): post-LN needs the
warm-up, pre-LN does not, and their gradient norms by layer at initialisation
(Xiong et al.); RMSNorm as good in less time (Zhang & Sennrich); the paper's
fewer updates with a norm than without (no norm at GPT-2's init and at Xavier's,
to tell the norm from the init). Data: the 99 Gutenberg novels of
<data_dir>/text/novels/novels.tar.gz split by whole books (5 validation, 5 test;
lnorm/data/bytes_lm.py), or enwik8 with ``data_source=enwik8``.

Command (one run; the study's grid is one reproduce.py command):
  LNORM_DATA_DIR=../shared/data python -m experiments.main \
      --config configs/transformer.py:cpu --workdir runs/tf_post --config.norm_position=post
  python scripts/reproduce.py transformer --preset cpu [--seeds 3 --jobs 2]
Presets, and their runtime on the 2-core CPU, idle (BENCHMARKS.md):
  ``:cpu`` (default): 12 layers of width 64 (4 heads, d_ff 256), windows of 64
    bytes, batch 32, Adam 1e-3 after 200 warm-up updates, 2,000 updates,
    validation every 100 on 512 windows; on the 2-core AVX-512 host, one
    device a core (the default): 0.12 s an update at 12 layers, 0.024 s at 2
    (``--config.num_layers=2``, the study's shallow model), ~4 min of updates
    a 12-layer run (BENCHMARKS.md, "The default in whole runs"); 0.15 and 0.03
    s on one device (``--cpu_devices=0``).
  ``:paper``: 12 layers of 512 (8 heads, d_ff 2048), windows of 256, batch 64,
    Adam 5e-4, 4,000 warm-up updates, 100,000 updates. A GPU run; not run here.
  ``:smoke``: 3 layers of 32, windows of 16, 20 updates, for tests; ~20 s.
Results: results/transformer_cpu/results.md.
"""

import ml_collections


def get_config(preset: str = "cpu") -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.experiment = "transformer"  # the loop in experiments/transformer.py
  c.norm = "layer"              # none | layer (gain, bias) | rms (gain only, Zhang & Sennrich)
  # post (Vaswani et al.) | pre (Xiong et al.) | peri (Kim et al. 2025: a norm before
  # and after each sublayer, on the input, and a final one) | deepnorm (Wang et al.
  # 2022: N(alpha x + F(x)), alpha and the init's beta from num_layers) | none (takes norm=none)
  c.norm_position = "pre"
  # normalize each head's queries and keys with `norm`, own gains (Henry et al. 2020;
  # Dehghani et al. 2023), with any norm_position
  c.qk_norm = False
  c.seed = 0                    # PRNG seed: init, the training windows, the gradient-norm batch
  c.num_layers = 12             # blocks; the study's deep model (2 is its shallow one)
  c.d_model = 64                # width of the residual stream
  c.num_heads = 4               # attention heads (d_model must split into them)
  c.d_ff = 256                  # MLP units; 0 = 4 * d_model
  c.max_len = 64                # rows of the position table; seq_len may not exceed it
  c.positions = "learned"       # learned (a table) | sinusoidal (Vaswani et al.'s fixed one)
  c.activation = "relu"         # relu (Vaswani, Xiong) | gelu
  c.eps = 1e-5                  # the norms' eps (added to the variance / mean square)
  # W^O and W^2 start at Xavier / sqrt(2 L) (GPT-2). Off: Xiong et al.'s
  # setting. The study runs norm=none both ways (at 12 layers, off starts
  # with a loss of ~860 nats: lnorm/transformer.py), the normalized models off.
  c.scaled_residual_init = False
  c.dtype = "float32"           # float32 | bfloat16: activations and matmuls (params and norm statistics stay float32)
  c.seq_len = 64                # T: bytes a window predicts (each window holds T + 1)
  c.batch_size = 32             # windows per update
  c.learning_rate = 1e-3        # Adam's peak rate (after the warm-up)
  c.warmup_steps = 200          # linear warm-up from 0 over this many updates; 0 = none
  c.schedule = "constant"       # after the warm-up: constant | cosine (to 0 at num_steps)
  c.grad_clip_norm = 0.0        # global-norm gradient clipping; 0 = off (Xiong et al. clip nothing)
  c.num_steps = 2000            # updates in the run
  c.eval_every_steps = 100      # validation bpc (and a checkpoint) every N updates, and at the end
  c.num_eval_windows = 512      # fixed validation and test windows, evenly spaced over each split; 0 = all
  c.eval_batch_size = 64        # windows per evaluation call; any size gives the same bpc
  c.data_source = "novels"      # novels (Gutenberg, split by book) | enwik8 (<data_dir>/enwik8[.zip])
  c.data_dir = ""               # '' = $LNORM_DATA_DIR, else ~/.cache/lnorm/data
  c.num_devices = 0             # data parallel over this many devices (the batch split over them); 0 = all
  c.steps_per_call = 0          # at most N updates a jitted call (progress moves between); 0 = all to the next evaluation
  if preset == "cpu":
    pass
  elif preset == "paper":
    c.d_model, c.num_heads, c.d_ff, c.seq_len, c.max_len = 512, 8, 2048, 256, 256
    c.batch_size, c.learning_rate, c.warmup_steps = 64, 5e-4, 4000
    c.num_steps, c.eval_every_steps, c.num_eval_windows = 100_000, 2000, 2048
  elif preset == "smoke":
    # 3 layers: the study's shallow model has 2 (scripts/paper/transformer.py).
    c.num_layers, c.d_model, c.num_heads, c.d_ff, c.seq_len, c.max_len = 3, 32, 2, 64, 16, 16
    c.batch_size, c.warmup_steps, c.num_steps, c.eval_every_steps = 8, 5, 20, 10
    c.num_eval_windows, c.eval_batch_size = 64, 32
  else:
    raise ValueError(f"unknown preset {preset!r}; choose cpu, paper or smoke")
  return c
