"""DALI's ``fn.reductions``: ``tree.py`` reduces a sample in DALI's CPU summation order (so
float sums are its bits, on every CPU), ``reductions.py`` registers the operators and their
probes."""
