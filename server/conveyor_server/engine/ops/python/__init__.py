"""DALI's ``fn.python_function``: a user's Python function run as an operator
(``python_function.py``)."""
