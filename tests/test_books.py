"""Book triples and the vocabulary (lnorm/data/books.py) on tiny files."""

import numpy as np
import pytest

from lnorm.data import DataError
from lnorm.data import books
from lnorm.data import files
from tests.pinned import pin
from tests.tiny_data import write_novels


def _write(d, name, lines):
  d.mkdir(parents=True, exist_ok=True)
  (d / name).write_text("\n".join(lines) + "\n")
  return d / name


def _triples_as_words(t, vocab):
  return [tuple(vocab.decode(r) for r in rows) for rows in zip(*t.batch(np.arange(len(t))))]


def test_triples_stay_within_books(tmp_path):
  a = _write(tmp_path, "a.txt", ["a1 .", "a2 .", "a3 .", "a4 ."])
  b = _write(tmp_path, "b.txt", ["b1 .", "b2 .", "b3 ."])
  c = _write(tmp_path, "c.txt", ["c1 .", "c2 ."])  # too short for a triple
  docs = books.read_documents([a, b, c])
  vocab = books.Vocab.build([s for d in docs for s in d.sentences], 50)
  t = books.triples(docs, vocab, max_len=5)
  assert _triples_as_words(t, vocab) == [
      ("a1 .", "a2 .", "a3 ."), ("a2 .", "a3 .", "a4 ."), ("b1 .", "b2 .", "b3 .")]
  assert t.tokens.shape == (9, 5)
  # Every triple's three sentences are in one document.
  m = t.middle
  assert np.all(t.doc_of[m - 1] == t.doc_of[m]) and np.all(t.doc_of[m + 1] == t.doc_of[m])


def test_blank_lines_end_documents(tmp_path):
  f = _write(tmp_path, "corpus.txt", ["x1", "x2", "x3", "", "", "y1", "y2", "y3", "y4", ""])
  docs = books.read_documents([f])
  assert [d.name for d in docs] == ["corpus.txt", "corpus.txt#1"]
  vocab = books.Vocab.build(["x1 x2 x3 y1 y2 y3 y4"], 20)
  words = _triples_as_words(books.triples(docs, vocab, 4), vocab)
  assert words == [("x1", "x2", "x3"), ("y1", "y2", "y3"), ("y2", "y3", "y4")]


def test_vocab_order_specials_and_encoding():
  v = books.Vocab.build(["b a c a", "b a .", "<unk> <eos>"], size=6)
  # a (3) > b (2) > '.' = c (1, alphabetical); specials are never counted.
  assert v.words == ("<pad>", "<eos>", "<unk>", "a", "b", ".")
  assert (v.words[books.PAD], v.words[books.EOS], v.words[books.UNK]) == books.SPECIALS
  enc = v.encode(["A b c", "a a a a a a", ""], max_len=4)
  np.testing.assert_array_equal(enc, [[3, 4, books.UNK, books.EOS],
                                      [3, 3, 3, books.EOS],  # truncated, still ends in EOS
                                      [books.EOS, books.PAD, books.PAD, books.PAD]])
  assert enc.dtype == np.int32
  assert v.decode(enc[0]) == "a b <unk>"
  with pytest.raises(ValueError):
    books.Vocab.build(["a"], size=3)


def test_tokenize_is_treebank_like_and_idempotent():
  t = books.tokenize("I don't know, \"he\" said. Emma's (yes)!")
  assert t == ["i", "do", "n't", "know", ",", '"', "he", '"', "said", ".", "emma", "'s",
               "(", "yes", ")", "!"]
  assert books.tokenize(" ".join(t)) == t


def test_vocab_from_training_books_only(tmp_path, monkeypatch):
  d = tmp_path / books.GUTENBERG
  _write(d, "train1.txt", ["common words here", "common again", "common x"])
  _write(d, "train2.txt", ["more common text", "and more", "the end"])
  _write(d, "held.txt", ["heldoutonly word", "heldoutonly", "heldoutonly"])
  monkeypatch.setenv("LNORM_DATA_DIR", str(tmp_path))
  pin(monkeypatch, books.GUTENBERG, d)
  c = books.load_gutenberg(None, vocab_size=100, max_len=6, heldout=("held.txt",))
  assert c.vocab.words[3] == "common"
  assert "heldoutonly" not in c.vocab.words
  assert c.heldout.documents == ("held.txt",) and len(c.heldout) == 1
  assert np.all(c.heldout.tokens[:, 0] == books.UNK)
  assert c.train.documents == ("train1.txt", "train2.txt") and len(c.train) == 2


def test_missing_data_is_a_one_line_error(tmp_path, monkeypatch):
  with pytest.raises(DataError, match="gutenberg/ not found") as e:
    books.load_gutenberg(tmp_path)
  assert "\n" not in str(e.value)
  _write(tmp_path / books.GUTENBERG, "a.txt", ["x", "y", "z"])
  # Not the 17 pinned books: refused, naming the folder, before anything is read.
  with pytest.raises(DataError) as e:
    books.load_gutenberg(tmp_path)
  assert str(e.value).startswith(f"{tmp_path / books.GUTENBERG}: SHA-256 is ")
  assert files.SHA256[books.GUTENBERG] in str(e.value) and "\n" not in str(e.value)
  assert books.load_gutenberg(tmp_path, heldout=(), verify=False).train.documents == ("a.txt",)
  pin(monkeypatch, books.GUTENBERG, tmp_path / books.GUTENBERG)
  with pytest.raises(DataError, match="held-out books .* not among"):
    books.load_gutenberg(tmp_path)
  # One byte changed in one book after it was pinned: refused.
  _write(tmp_path / books.GUTENBERG, "a.txt", ["x", "y", "Z"])
  with pytest.raises(DataError, match="gutenberg: SHA-256 is"):
    books.load_gutenberg(tmp_path)
  (tmp_path / "empty").mkdir()
  with pytest.raises(DataError, match="no .txt books"):
    books.book_files(tmp_path / "empty")


def test_default_split_is_documented():
  assert len(books.HELDOUT_BOOKS) == 2
  for name in books.HELDOUT_BOOKS:
    assert name in books.__doc__


def test_split_sentences_keeps_abbreviations_initials_and_lower_case_continuations():
  got = books.split_sentences(
      '"Ah! poor Miss Taylor! \'Tis a sad business." Mr. Knightley came in. J. W. Arrowsmith '
      'said so! "Why?" he asked. (It was late.) Then I. Then Dr. Perry and St. Paul? Yes!!! '
      'No... Well? ok')
  assert got == ['"Ah! poor Miss Taylor!', '\'Tis a sad business."', "Mr. Knightley came in.",
                 "J. W. Arrowsmith said so!", '"Why?" he asked.', "(It was late.)", "Then I.",
                 "Then Dr. Perry and St. Paul?", "Yes!!!", "No...", "Well? ok"]
  assert books.split_sentences("  ") == []


_NOVEL_A = ("Produced by Someone, www.example.org\n\nCHAPTER I\n\nThe cat sat. The dog\n"
            "ran--far away. Mr. Smith\nsaw it!\n\n[Illustration: a dog]\n\n"
            '"Was it _very_ far?" she asked. It was.\n')
_NOVEL_B = "One dog. Two cats. Three birds.\n"
_NOVEL_C = "Held one. Held two. Held three. Held four.\n"


def test_novels_are_cleaned_split_into_sentences_and_held_out_by_name(tmp_path, monkeypatch):
  write_novels(tmp_path, {"austen_emma.txt": _NOVEL_A, "b_two.txt": _NOVEL_B,
                         "c_held.txt": _NOVEL_C}, monkeypatch)
  assert books.novel_sentences(_NOVEL_A) == [
      "CHAPTER I", "The cat sat.", "The dog ran -- far away.", "Mr. Smith saw it!",
      '"Was it very far?" she asked.', "It was."]
  c = books.load_novels(tmp_path, vocab_size=100, max_len=8, heldout=("c_held.txt",))
  assert c.train.documents == ("austen_emma.txt", "b_two.txt")
  assert c.heldout.documents == ("c_held.txt",)
  # 6 + 3 training sentences, 4 held-out; a triple per sentence with two neighbours.
  assert c.train.tokens.shape == (9, 8) and c.heldout.tokens.shape == (4, 8)
  assert len(c.train) == 4 + 1 and len(c.heldout) == 2
  assert _triples_as_words(c.train, c.vocab)[1] == (
      "the cat sat .", "the dog ran -- far away .", "mr . smith saw it !")
  assert _triples_as_words(c.train, c.vocab)[-1] == ("one dog .", "two cats .", "three birds .")
  assert _triples_as_words(c.heldout, c.vocab)[0][0] == "<unk> one ."  # 'held' is no training word
  assert "held" not in c.vocab.words and "www" not in c.vocab.words
  assert "very" in c.vocab.words and "illustration" not in c.vocab.words


def test_novels_split_errors_are_one_line(tmp_path, monkeypatch):
  write_novels(tmp_path, {"austen_emma.txt": _NOVEL_B, "carroll_alice.txt": _NOVEL_B,
                         "c_held.txt": _NOVEL_C}, monkeypatch)
  # A book also in text/gutenberg may not be held out while another one trains.
  with pytest.raises(DataError, match="austen_emma.txt, carroll_alice.txt are also in "
                     "text/gutenberg: hold out all of them or none, not carroll_alice.txt alone"):
    books.load_novels(tmp_path, heldout=("carroll_alice.txt",))
  c = books.load_novels(tmp_path, heldout=("carroll_alice.txt", "austen_emma.txt"))
  assert c.train.documents == ("c_held.txt",)
  with pytest.raises(DataError, match="held-out books nope.txt not among its 3 books"):
    books.load_novels(tmp_path, heldout=("nope.txt",))
  with pytest.raises(DataError, match="novels.tar.gz not found"):
    books.load_novels(tmp_path / "nowhere")
  # By default the byte LM's test books are held out, and the four books
  # shared with text/gutenberg all train.
  assert books.NOVELS_HELDOUT == books.bytes_lm.TEST_BOOKS
  assert not set(books.NOVELS_HELDOUT) & set(books.NOVELS_IN_GUTENBERG)
