"""Readers beyond ``readers.file``: ``readers.numpy`` and ``readers.webdataset``.

Each lists its data once, when the pipeline is built, every path checked against the data
roots first (``data_paths.py``); orders its samples with the file reader's stage (DALI's
readers share one loader, so sharding, shuffling and padding are the same); digests its
listing into every checkpoint (``identity.py``); and reads one sample's outputs by index at
run time (a ``SampleSource``, ``build.py``), so a restore starts at any position without
replay.

``build.py`` makes a reader's parts from its arguments; ``numpy_reader.py`` (with
``npy_format.py``) and ``webdataset.py`` (with ``tar_index.py``) hold the two readers.
"""
