"""The operator schemas: each operator's and reader's one declaration.

``registry.py`` holds ``OpSchema`` and ``SCHEMAS`` (every operator, by name), the public way
to read a declaration (``schema_of``) and to decode an ``OpSpec``'s arguments; ``args.py``
the kinds of arguments a schema declares; ``output_sizes.py`` the rules that fix an
output's shape from constant arguments. The declarations themselves are grouped by kind:
``readers.py``, ``sources.py``, ``color.py``, ``geometry.py``, ``layout.py``,
``arithmetic.py``, ``reductions.py``, ``transforms.py``. ``fn``, the server's validation,
bounds, builders, GPU planners and the operator reference all read them.

Imports: ``conveyor.errors``, the definition contract's ``unsupported.py`` and
``tfrecord.py``, the generated messages; nothing else of ``conveyor``.
"""
