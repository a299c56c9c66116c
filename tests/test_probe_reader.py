"""The probe's synthetic questions have the answers they claim."""

import numpy as np
import pytest

from scripts import probe_reader as pr


@pytest.mark.parametrize("task", list(pr.TASKS))
def test_answer_is_the_entity_after_the_query_cue(task):
  cues, m, filler = pr.TASKS[task]
  d = pr.make_task(task, 200, np.random.default_rng(0))
  for P, Q, A, C in zip(d["passage"], d["query"], d["answer"], d["candidates"]):
    cue = Q[1]
    at = np.flatnonzero(P == cue)
    assert len(at) == 1  # the cue occurs once
    assert P[at[0] + 1] == pr.ENT_TOK[A]
    assert C[A] and C.sum() == m
    assert Q[2] == pr.PLACEHOLDER
    ents = np.isin(P, pr.ENT_TOK)
    assert ents.sum() == m
    words = P[~ents & (P >= 100)]
    assert len(set(words.tolist())) <= filler
  # every cue is asked about
  assert set(d["query"][:, 1]) == set(range(2, 2 + cues))


def test_run_returns_a_curve():
  r = pr.run("marker", "none", 0, steps=4, solved=0.0, every=2)
  assert [s for s, _ in r["curve"]] == [2, 4]
  assert all(0 <= e <= 1 for _, e in r["curve"])


def test_an_unwritable_results_dir_is_refused_before_any_run(tmp_path, monkeypatch, capsys):
  (tmp_path / "f").write_text("")
  monkeypatch.setattr(pr, "run", lambda *a, **k: pytest.fail("trained before checking"))
  assert pr.main(["--results_dir", str(tmp_path / "f" / "out")]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith(f"error: cannot write {tmp_path / 'f' / 'out'}")
