"""DALI's layout operators: ``transpose``, ``reshape``, ``cat`` and ``stack`` (``layout.py``
registers them and their probes). They move values and never change them."""
