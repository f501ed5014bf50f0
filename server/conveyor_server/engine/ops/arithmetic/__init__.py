"""The expression operators (``math.binary``, ``math.scalar``, ``math.unary``,
``math.clamp``): DALI's arithmetic operators and ``fn.math`` functions, elementwise on each
sample, with DALI's type promotions (``expressions.py``, element rules in ``elementwise.py``)."""
