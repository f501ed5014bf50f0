"""Operators that move pixels: ``rotate``, ``resize`` (``resize_filters.py``: its
antialiasing filters; ``area_resize.py``: the area-averaging step, in OpenCV or in the
server's compiled kernel ``area_kernel.c`` with OpenCV's bytes), ``crop``,
``random_resized_crop`` and the keyed random window (``random_window.py``) it shares with
the window decoders."""
