"""DALI's ``fn.transforms``: the affine matrix builders (``affine.py``) whose matrices
``fn.warp_affine`` takes."""
