"""Data sets for the experiments, loaded into NumPy arrays.

Every loader raises ``DataError`` (never a traceback from gzip or NumPy) when a
file is missing or damaged; its message is one line that names the file and
says how to get it.
"""


class DataError(Exception):
  """A data file is missing, corrupt, fails its checksum or has a bad format."""


# After DataError: the loaders import it from this package.
from lnorm.data import mnist  # pylint: disable=g-import-not-at-top,wrong-import-position
from lnorm.data.files import (  # pylint: disable=g-import-not-at-top,wrong-import-position
    DATA_DIR_ENV, DEFAULT_DATA_DIR, resolve_data_dir)
from lnorm.data.mnist import (  # pylint: disable=g-import-not-at-top,wrong-import-position
    DATASETS, load, load_mnist, load_tfds, split_train_valid)
from lnorm.data import binarized_mnist  # pylint: disable=g-import-not-at-top,wrong-import-position

__all__ = [
    "DATA_DIR_ENV", "DATASETS", "DEFAULT_DATA_DIR", "DataError", "load",
    "binarized_mnist", "load_mnist", "load_tfds", "mnist", "resolve_data_dir",
    "split_train_valid",
]
