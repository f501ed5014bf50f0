"""Admission: what one pipeline may make the server hold.

``limits.py`` holds the limits (``EngineLimits``: bytes of a batch, pixels of an image,
bytes of a file, extents; ``SpecBounds``: batch size, threads, prefetch depth, operators,
argument sizes) and the checks made while batches are computed; ``spec_bounds.py`` checks
a spec against them before anything is built from it, reading each operator's declaration
(which arguments are paths, extents or lists as long as the data set, its output-size
rule).

Imports: no other room of the engine.
"""
