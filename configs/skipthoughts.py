r"""Skip-thought vectors with and without layer norm (paper §6.3, Table 3, Figure 3).

The uni-skip model of Kiros et al. (2015): a GRU encoder and two GRU decoders
(previous and next sentence) conditioned on the sentence vector at every step;
``norm=layer`` makes all three LN-GRUs (eqs. 26-28), ``norm=none`` is the
baseline (eqs. 23-25). Adam after global-norm clipping at 5, Kiros et al.'s
settings. BookCorpus cannot be had here: ``corpus`` picks a stand-in
(lnorm/data/books.py): ``gutenberg`` (the default, as before the field
existed), the 17 Gutenberg books in ``<data_dir>/text/gutenberg`` (59,125
training triples from 15 books, 7,213 held-out from 2); or ``novels`` (the cpu
preset), the 99 novels of ``<data_dir>/text/novels/novels.tar.gz`` (about 9.4M
words; about 492,000 training triples from 94 books, 7,692 updates an epoch at batch
64; the byte LM's 5 test books held out). ``text_dir`` takes any folder of
one-sentence-a-line books instead (BookCorpus's own files). With
``eval_baselines`` the last evaluation also scores Table 3's baseline rows: the
mean of the trained word embeddings (``embmean_*``) and a TF-IDF bag of words
over the vocabulary (``tfidf_*``), with the same classifiers. Every evaluation
records the held-out per-word NLL and the SentEval tasks of ``eval_tasks``
(lnorm/senteval_protocol.py; data in ``<data_dir>/senteval``) in metrics.jsonl.

Command (one run each):
  LNORM_DATA_DIR=../shared/data python -m experiments.main \
      --config configs/skipthoughts.py:cpu --workdir runs/skip_ln --config.norm=layer
  (and --workdir runs/skip_base --config.norm=none)
Full evaluation of any checkpoint (10 folds, inner C selection, all tasks):
  LNORM_DATA_DIR=../shared/data python -m scripts.eval_skipthoughts --workdir runs/skip_ln
Both runs and Table 3: python scripts/reproduce.py table3 [--preset cpu]
Three seeds a norm, two runs at a time (Table 3 with mean ± sd and the claims
seed by seed):
  LNORM_DATA_DIR=../shared/data python scripts/reproduce.py table3 --preset cpu \
      --seeds 3 --jobs 2 --results_dir results
Presets:
  ``:paper`` (default): Kiros et al.'s model and settings: 620-d words, 2400 GRU
    units, 20,000 words, sentences of up to 30 tokens, batch 64, Adam at 2e-4
    (their code's Adam ignores the rate it is passed and uses 2e-4), clipping
    at 5. 20 epochs of the stand-in corpus (18,460 updates); the paper trained
    about 1M updates on BookCorpus (~74M sentences). A GPU run.
  ``:cpu``: the novels; 256-d words, 256 units, 10,000 words, Adam at 1e-3,
    1,500 updates (0.195 of an epoch: 96,000 of the ~492,000 training triples,
    none seen twice), evaluated every 300 updates on all five tasks with 5
    folds and C = 1 (no inner selection), all of SICK and up to 4,000
    sentences of each classification set; the baselines at the end. Sized
    so that 3 seeds a norm (6 runs, 2 at a time) finish in one sitting of
    this 2-core machine (below): a sitting's machine and workdirs do not
    outlive it, so a preset that needs several sittings never finishes here.
    The earlier 6,000-update preset (about 10 h for its 6 runs):
    ``--config.num_steps=6000 --config.eval_every_steps=1500``. Results made
    before the novels (Gutenberg, 128-d words, 4,000 words, 6 epochs = 5,538
    updates; results/table3_cpu as committed at 5922fa6) come back with
    ``--config.corpus=gutenberg --config.embed_dim=128
    --config.vocab_size=4000 --config.num_steps=0 --config.num_epochs=6
    --config.eval_every_steps=923``.
  ``:smoke``: a tiny model, 200 updates on the first 6,400 triples, SICK and MR
    (the baselines too: cheap at 500 words),
    on 2 folds, for tests.
Runtime, on the 2-core CPU:
  paper: not measured (a GPU run; on this CPU expect many seconds an update).
  cpu:   measured with two runs side by side and nothing else (``--jobs 2``,
         one BLAS thread a run): 0.7-0.8 s an update (tqdm's rate), each of the
         5 evaluations about 1 minute (SICK's 9 C values 42-50 s of it), the
         baselines at the last another 2-3 minutes: 23-33 minutes a run,
         about 1h35m for the 6 runs of --seeds 3 --jobs 2. One run alone, idle:
         0.5 s an update.
  smoke: a few minutes, most of it compiling and evaluating SICK.
Paper's result (Table 3, Figure 3; uni-skip, 2400 units, BookCorpus, about 1M
updates): with LN, SICK r and rho are higher and MSE lower, and MR, CR, SUBJ and
MPQA accuracies higher, than without; LN also improves faster along training.
Its rows are printed above ours in results.md (``scripts/paper/table3.PAPER_TABLE3``). On
9M words of novels the absolute numbers cannot come near the paper's; the
comparison between the two norms can still be made. Expected (the cpu preset,
results/table3_cpu, 3 seeds, on the stand-in): LN's held-out NLL lower at every
evaluation (4.394 ± 0.008 against 4.712 ± 0.012 at the end), SICK r higher
(0.601 ± 0.007 against 0.539 ± 0.030), SUBJ lower (73.5 against 77.2), MR, CR
and MPQA within the seeds' spread; both below a TF-IDF bag of words.
Gradient clipping: Kiros et al.'s paper says norm 10, their training code 5;
we use the code's 5.
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
