"""The colour operators: ``brightness_contrast``, ``hsv`` and ``color_twist``
(``color.py``), and their parameters as DALI computes them (``color_params.py``), shared
with their GPU forms."""
