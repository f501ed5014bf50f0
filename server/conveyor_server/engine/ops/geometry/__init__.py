"""Operators that move pixels: ``rotate``, ``resize`` (``resize_filters.py``: its
antialiasing filters), ``crop``, ``random_resized_crop`` and the keyed random window
(``random_window.py``) it shares with the window decoders."""
