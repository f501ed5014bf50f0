"""Per-sample operators of the server engine (decode, geometry, normalization), by type."""
