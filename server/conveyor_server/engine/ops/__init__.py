"""The engine's operators (decode, geometry, normalization), by type, each registered per
sample or per batch (``registry.py``)."""
