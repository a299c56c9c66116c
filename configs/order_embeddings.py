r"""Order embeddings for image-caption retrieval (paper section 6.1, Table 2, Figure 1).

Vendrov et al.'s (2016) order embeddings: captions through word embeddings and
a GRU, images through one linear map of precomputed CNN features, both
L2-normalised into the non-negative orthant; the order-violation penalty and a
contrastive hinge loss over the batch's other pairs, both directions; each
gradient tensor clipped on its own, Adam (lnorm/order_embeddings.py).
``norm=layer`` makes the sentence encoder an LN-GRU (eqs. 26-28); ``none`` is
the baseline. Dev and test retrieval (R@1, R@5, R@10, mean and median rank,
both directions) every ``eval_every_steps`` updates. Data: Vendrov's layout in
``features_dir``. COCO cannot be had here: the default is the Flickr8k-1k
stand-in (1,000 images, official splits: 762 train, 113 dev, 125 test), its
EfficientNet-Lite0 features made once (about 8 min) by
  LNORM_DATA_DIR=../shared/data python scripts/extract_flickr8k_features.py

Command (one run; both norms, Table 2 and Figure 1 are one reproduce.py command):
  python -m experiments.main --config configs/order_embeddings.py:cpu \
      --workdir runs/oe_ln --config.norm=layer
  python scripts/reproduce.py table2 --preset cpu [--seeds 3] [--results_dir results]
Presets, and their runtime on the 2-core CPU:
  ``:paper`` (default): Vendrov's COCO setting (GRU 1024, words 300, batch 128,
    100 passes, evaluated every 300 updates); point ``features_dir`` at their
    files (``--config.prefix=coco_``). A GPU run; not measured.
  ``:cpu``: the paper's model on the stand-in, 1,000 updates (200 passes over
    its 762 images), evaluated every 10: 1.1-1.2 s an update and ~3.3 s an
    evaluation, ~24 min a run idle, ~45-50 min beside another job.
  ``:smoke``: a tiny model, 20 updates on 256 images, for tests; under a minute.
Results: results/table2_cpu/results.md.
"""

import ml_collections


def get_config(preset: str = "paper") -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.experiment = "order_embeddings"  # the loop in experiments/order_embeddings.py
  c.norm = "layer"              # none (GRU, eqs. 23-25) | layer (LN-GRU, eqs. 26-28)
  c.seed = 0                    # PRNG seed: init, image order and caption draws
  c.batch_size = 128            # distinct images per update, one caption each (Vendrov's)
  c.num_epochs = 100            # passes over the training images (Vendrov's driver.py: 100)
  c.learning_rate = 1e-3        # Adam's rate (Vendrov's driver.py)
  c.grad_clip = 2.0             # clip each gradient tensor's L2 norm to this, separately (Vendrov's maxnorm); 0 = off
  c.margin = 0.05               # the contrastive hinge's margin (Vendrov's, for order embeddings)
  c.embed_dim = 300             # word vectors (Vendrov's dim_word)
  c.features = 1024             # GRU units = the embedding space's dimension (Vendrov's dim)
  c.eps = 1e-5                  # layer norm eps (added to the variance)
  c.data_dir = ""               # '' = $LNORM_DATA_DIR, else ~/.cache/lnorm/data; holds flickr8k_1k (the extraction's input; training reads features_dir)
  c.features_dir = ""           # Vendrov's layout; '' = <cache>/flickr8k_1k_features, where scripts/extract_flickr8k_features.py writes
  c.prefix = ""                 # file-name prefix in features_dir: '' ({split}_ims.npy), 'coco_' for Vendrov's files
  c.min_count = 1               # words seen fewer times in the training captions are UNK (Vendrov keeps all)
  c.max_vocab = 0               # at most this many word ids, specials included; 0 = all
  c.max_len = 0                 # tokens per caption incl. EOS, longer ones cut; 0 = no cut (Vendrov's)
  c.num_train_images = 0        # training images used (the first N); 0 = all
  c.eval_every_steps = 300      # evaluate dev and test (and checkpoint) every N updates (Vendrov's validFreq), and at the end
  c.eval_batch_size = 128       # captions (sorted by length, cut to the batch's longest) or images a batch when embedding a split; any size gives the same metrics
  c.num_devices = 0             # data parallel over this many devices (the batch split over them); 0 = all
  c.steps_per_call = 0          # at most N updates a jitted call (progress moves between); 0 = all to the next evaluation
  if preset == "paper":
    pass
  elif preset == "cpu":
    c.num_epochs, c.eval_every_steps = 200, 10  # the paper's model; 1,000 updates on the stand-in
  elif preset == "smoke":
    c.features, c.embed_dim, c.num_epochs, c.eval_every_steps = 32, 16, 10, 10
    c.batch_size, c.num_train_images, c.eval_batch_size = 128, 256, 250
  else:
    raise ValueError(f"unknown preset {preset!r}; choose paper, cpu or smoke")
  return c
