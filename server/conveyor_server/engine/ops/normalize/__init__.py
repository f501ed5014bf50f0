"""Operators that change values and types: ``crop_mirror_normalize`` per sample
(``normalize.py``, with ``cast``), per batch (``normalize_batch.py``, its output
in a pooled buffer of ``batch_buffers.py``), and its uint8 path by table lookup
(``normalize_table.py``)."""
