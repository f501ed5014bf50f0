"""The operators, by kind, each registered per sample or per batch (``registry.py``) by its
module, beside its behaviour probe; what each takes is declared in its schema
(``conveyor.definition.schemas.registry``). ``engine/catalog.py`` imports every module here.

- ``geometry/``: rotate, resize (and its filters), crop, random_resized_crop and the
  random window it shares with the window decoders;
- ``decode/``: the image decoders (CPU, window, ``device="mixed"`` through nvImageCodec) and
  the image header parsers that bound an image before it is decoded;
- ``color/``: brightness_contrast, brightness, contrast, hsv, hue, color_twist, saturation,
  equalize and their parameters;
- ``normalize/``: crop_mirror_normalize (per sample, per batch, by table), cast and
  normalize;
- ``layout/``: transpose, reshape, cat and stack;
- ``python/``: python_function (the user's named function);
- ``reductions/``: ``fn.reductions.*`` in DALI's summation order;
- ``transforms/``: ``fn.transforms.*``, the affine matrix builders;
- ``cuda/``: the GPU forms (planners, kernels, launches);
- ``probes/``: the behaviour probes' contract (``probe_set.py``) and their canonical inputs;
- ``args.py`` (argument helpers the operators share) and ``threads.py`` (OpenCV's own
  threads, off where the engine runs samples in parallel).

Imports: ``admission`` (the limits an operator checks), ``device`` (CUDA devices and
streams), and the foundation ``keyed_random``.
"""
