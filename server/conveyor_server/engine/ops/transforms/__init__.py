"""DALI's ``fn.transforms``: the affine matrix builders (``affine.py``: the operators and
their probes; ``matrices.py``: DALI's float32 matrix arithmetic) whose matrices
``fn.warp_affine`` takes."""
