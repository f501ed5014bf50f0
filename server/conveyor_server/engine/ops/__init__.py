"""The engine's operators (decode, geometry, normalization), by type, each registered per
sample or per batch (``registry.py``) by its module, beside its behaviour probe; what each
takes is declared in its schema (``conveyor.schema``). ``engine/catalog.py`` imports every
module here."""
