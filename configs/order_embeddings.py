r"""Order embeddings for image-caption retrieval (paper section 6.1, Table 2, Figure 1).

Vendrov et al.'s (2016) order embeddings: captions through word embeddings
and a GRU, images through one linear map of precomputed CNN features, both
L2-normalised into the non-negative orthant; the order-violation penalty and
a contrastive hinge loss (margin 0.05) over the other pairs of the batch,
both directions; each gradient tensor clipped to norm 2 on its own, Adam at
1e-3, batch 128 (lnorm/order_embeddings.py, experiments/order_embeddings.py).
``norm=layer`` makes the sentence encoder an LN-GRU (eqs. 26-28); ``none`` is
the baseline. Dev and test retrieval (R@1, R@5, R@10, mean and median rank,
both directions) are evaluated every ``eval_every_steps`` updates.

Data: Vendrov's layout in ``features_dir`` ({train,dev,test}_ims.npy and
_caps.txt, 5 captions an image; ``prefix`` 'coco_' for Vendrov's own COCO
files). COCO cannot be had here: the default is the Flickr8k-1k stand-in
(1,000 Flickr8k images with the official split lists: 762 train, 113 dev,
125 test), its features made once by
  LNORM_DATA_DIR=../shared/data python scripts/extract_flickr8k_features.py
(EfficientNet-Lite0, the 1280-d global average pool, 10 crops averaged;
about 8 min here) into ~/.cache/lnorm/flickr8k_1k_features.

Command (one run each):
  python -m experiments.main --config configs/order_embeddings.py:cpu \
      --workdir runs/oe_ln --config.norm=layer
  (and --workdir runs/oe_base --config.norm=none)
Both norms, 3 seeds, Table 2 and Figure 1:
  python scripts/reproduce.py table2 --preset cpu --seeds 3 [--results_dir results]
Presets:
  ``:paper`` (default): Vendrov's COCO setting: GRU 1024, words 300, batch
    128, Adam 1e-3, per-tensor clip 2, 100 passes over the images (Vendrov's
    driver.py), evaluated every 300 updates (their validFreq). Point
    ``features_dir`` at Vendrov's COCO files (``--config.prefix=coco_``).
  ``:cpu``: the paper's model and optimiser on the Flickr8k-1k stand-in: 200
    passes over its 762 training images (5 updates a pass, 1,000 updates),
    dev and test evaluated every 10 updates. The model fits the 762 images
    within ~150 updates (training loss 500 -> 15), where dev recall peaks.
  ``:smoke``: a tiny model, 20 updates on the first 256 images, for tests.
Runtime, this 2-core CPU, shared with a niced background training job
(handwriting) throughout every measurement:
  paper: not measured here (COCO and a GPU).
  cpu:   1.07-1.2 s an update for either norm with the machine to itself (the
         handwriting job stopped; LN-GRU / GRU = 1.04 side by side,
         scripts/bench/order_embeddings.py), and ~3.3 s an evaluation with
         its checkpoint: 200 updates took 5m03s (layer, quiet) and 10m18s
         (none, beside other tests, 1.1-3.9 s an update). So one run of
         1,000 updates and 100 evaluations: ~24 min on a quiet machine,
         ~45-50 min shared; 3 seeds x 2 norms: ~2.5 h quiet, ~5 h shared,
         one at a time (--jobs 2 puts two side by side, a core each).
  smoke: under a minute, most of it compiling.
Paper's result (Table 2, COCO 1k test images, R@1 / R@5 / R@10 / mean r):
  OE (Vendrov et al.):  caption 46.6 / 79.3 / 89.1 / 5.2, image 37.8 / 73.6 / 85.7 / 7.9
  OE + LN:              caption 48.5 / 80.6 / 89.8 / 5.1, image 38.9 / 74.3 / 86.3 / 7.6
and Figure 1: with layer norm, validation recall rises faster and ends higher.
On the stand-in (a 125-image test pool, 762 training images) the absolute
numbers are not comparable with COCO's; the comparison of the two norms is
what can be checked. Ours: results/table2_cpu/results.md.
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
