"""Recurrent cells, the masked scan and the sequence LSTM (being split into
this package's modules)."""

from lnorm.recurrent.lstm_scan import *  # noqa: F401,F403
