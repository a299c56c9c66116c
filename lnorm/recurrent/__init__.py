"""Recurrent layers of the paper, with the norms of ``lnorm.norms``.

* ``cells.py``: ``LSTMCell``, ``GRUCell`` and ``RNNCell``, one per recurrence,
  each with a ``norm`` field (any norm of ``lnorm.norms`` for the cell's
  sites: ``lstm_norms()``, ``gru_norms()``, ``rnn_norms()``); ``nn.RNN(cell)``
  scans them.
* ``masked_scan.py``: ``Recurrent``, a cell scanned with a (batch, time) mask
  that freezes the carry past the end of each sequence.
* ``lstm.py``: ``LSTM``, a whole-sequence LSTM layer that computes what
  scanning ``LSTMCell`` computes, faster: the path for stacks of LSTMs over
  sequences known in advance. ``lstm_scan.py`` holds its scans, custom VJP
  and native-kernel dispatch.
* ``gru.py``: ``GRU``, the same for ``GRUCell``.
"""

from lnorm.recurrent.cells import (GRUCell, LSTMCell, RNNCell, gru_norms, lstm_norms,
                                   rnn_norms)
from lnorm.recurrent.gru import GRU
from lnorm.recurrent.lstm import LSTM
from lnorm.recurrent.masked_scan import Recurrent

__all__ = ['LSTMCell', 'GRUCell', 'RNNCell', 'Recurrent', 'LSTM', 'GRU',
           'lstm_norms', 'gru_norms', 'rnn_norms']
