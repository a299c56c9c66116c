"""The run machinery every experiment shares: the command line (cli), the
workdir and its lock and checkpoints (workdir), the loop (loop), progress,
errors, data parallelism (parallel), config help, figures, and what building a
train state repeats (train_state)."""
