r"""Skip-thought vectors with and without layer norm (paper §6.3, Table 3, Figure 3).

The uni-skip model of Kiros et al. (2015): a GRU encoder and two GRU decoders
(previous and next sentence) conditioned on the sentence vector at every step;
``norm=layer`` makes all three LN-GRUs (eqs. 26-28), ``norm=none`` is the
baseline (eqs. 23-25). Adam after global-norm clipping at 5 (Kiros et al.'s
code; their paper says 10). Every evaluation records the held-out per-word NLL
and the SentEval tasks of ``eval_tasks`` (lnorm/senteval_protocol.py, data in
<data_dir>/senteval); ``eval_baselines`` adds Table 3's baseline rows at the
last. BookCorpus cannot be had here: ``corpus`` picks a stand-in
(lnorm/data/books.py): ``gutenberg``, 17 books in <data_dir>/text/gutenberg, or
``novels``, 99 novels in <data_dir>/text/novels/novels.tar.gz (~9.4M words);
``text_dir`` takes any folder of one-sentence-a-line books (BookCorpus's).

Command (one run; both norms and Table 3 are one reproduce.py command):
  LNORM_DATA_DIR=../shared/data python -m experiments.main \
      --config configs/skipthoughts.py:cpu --workdir runs/skip_ln --config.norm=layer
  python scripts/reproduce.py table3 [--preset cpu] [--seeds 3 --jobs 2]
  python -m scripts.eval_skipthoughts --workdir runs/skip_ln  # full SentEval of a checkpoint
Presets, and their runtime on the 2-core CPU:
  ``:paper`` (default): Kiros et al.'s model and settings (620-d words, 2400
    units, 20,000 words, batch 64, Adam 2e-4), 20 epochs of the Gutenberg
    stand-in (18,460 updates). A GPU run; not measured.
  ``:cpu``: the novels, 256-d words and units, 10,000 words, Adam 1e-3, 1,500
    updates, evaluated every 300 on all five tasks (5 folds, C = 1, up to
    4,000 sentences a set): 0.7-0.8 s an update two runs at a time, 23-33 min a
    run with its evaluations; ``--seeds 3 --jobs 2`` about 1h35m.
  ``:smoke``: a tiny model, 200 updates, SICK and MR on 2 folds; a few minutes.
Results: results/table3_cpu/results.md.
"""

import ml_collections


def get_config(preset: str = "paper") -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.experiment = "skipthoughts"  # the loop in experiments/skipthoughts.py
  c.norm = "layer"              # none (GRU, eqs. 23-25) | layer (LN-GRU, eqs. 26-28)
  c.seed = 0                    # PRNG seed: init and shuffling; the CV folds use seed + 1111
  c.batch_size = 64             # triples per update (Kiros et al.'s)
  c.num_epochs = 20             # passes over the training triples (unless num_steps)
  c.num_steps = 0               # updates in the run, if > 0 (instead of num_epochs)
  c.learning_rate = 2e-4        # Adam's rate (Kiros et al.'s code: 2e-4)
  c.data_dir = ""               # '' = $LNORM_DATA_DIR, else ~/.cache/lnorm/data; holds text/gutenberg and senteval
  c.corpus = "gutenberg"        # gutenberg (17 books, text/gutenberg) | novels (99 novels, text/novels/novels.tar.gz)
  c.text_dir = ""               # '' = the corpus above; else a folder of *.txt books, one sentence a line (corpus gutenberg)
  c.heldout_books = "austen-persuasion.txt,chesterton-thursday.txt"  # held-out file names in text_dir
  c.num_train = 0               # training triples used (the first N, in book order); 0 = all
  c.vocab_size = 20000          # words incl. PAD, EOS, UNK; the most frequent training tokens
  c.max_len = 30                # tokens per training sentence incl. EOS; longer ones are cut (Kiros: 30)
  c.embed_dim = 620             # word vectors (Kiros et al.: 620)
  c.features = 2400             # GRU units of the encoder and each decoder (uni-skip: 2400)
  c.eps = 1e-5                  # layer norm eps (added to the variance)
  c.grad_clip_norm = 5.0        # global-norm gradient clipping (Kiros et al.: 5); 0 = off
  c.eval_every_steps = 2000     # evaluate (and checkpoint) every N updates, and at epoch ends
  c.steps_per_call = 100        # at most N updates a jitted call (progress moves between)
  c.num_heldout = 2000          # held-out triples for heldout_nll; 0 = all 7,213
  c.eval_batch_size = 256       # sentences a batch when encoding and for heldout_nll
  c.eval_max_len = 64           # tokens per evaluation sentence incl. EOS; longer ones are cut
  c.eval_tasks = "SICK,MR,CR,SUBJ,MPQA"  # SentEval tasks at each evaluation; '' = none
  c.eval_folds = 10             # cross-validation folds (MR, CR, SUBJ, MPQA)
  c.eval_inner_folds = 5        # inner folds to choose C on the training folds; 0 = C = 1
  c.eval_max_examples = 0       # sentences per classification set (a seeded subset); 0 = all
  c.eval_baselines = True       # at the last evaluation also score embmean_* (mean of the trained
                                # word embeddings) and tfidf_* (TF-IDF bag of words) on eval_tasks
  if preset == "paper":
    pass
  elif preset == "cpu":
    c.corpus = "novels"
    c.embed_dim, c.features, c.vocab_size, c.learning_rate = 256, 256, 10000, 1e-3
    c.num_steps, c.eval_every_steps, c.steps_per_call = 1500, 300, 50
    c.eval_folds, c.eval_inner_folds, c.eval_max_examples = 5, 0, 4000
  elif preset == "smoke":
    c.embed_dim, c.features, c.vocab_size, c.max_len, c.batch_size = 16, 32, 500, 12, 32
    c.num_train = 6400
    c.num_epochs, c.eval_every_steps, c.steps_per_call, c.num_heldout = 1, 0, 0, 256
    c.eval_tasks, c.eval_folds, c.eval_inner_folds, c.eval_max_examples = "SICK,MR", 2, 0, 400
  else:
    raise ValueError(f"unknown preset {preset!r}; choose paper, cpu or smoke")
  return c
