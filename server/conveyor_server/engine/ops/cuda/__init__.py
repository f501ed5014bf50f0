"""The GPU operators (``device="gpu"``): batched CUDA kernels behind the batch contract.

A GPU batch is a list of CuPy arrays, HWC, one per sample, on the pipeline's device
(``device_id``); the GPU decoder produces it and the pinned output ring consumes it. Each
GPU operator is a per-batch operator (registered for ``device="gpu"``) that runs one launch
(two for resize) over the whole batch, whatever the samples' sizes:

- ``kernels/*.cu``: the CUDA C sources (``sources.py`` lists their kernels); compiled at run
  time by CuPy (NVRTC), and in CI by NVRTC alone (no GPU needed);
- ``planners.py`` (``resize_planners.py`` for the resizes, their passes in
  ``resize_batch.py``, the checks of a batch in ``batch_checks.py``): every sample's shapes,
  offsets and parameters, computed on the host by the CPU operators' own parameter code
  (over the whole batch with numpy where it is planned per batch), packed into a plan
  (``plans.py``: its arrays in one buffer);
- ``launch.py``: the plan's arrays to the device (one copy) and the kernels launched (CuPy,
  imported only there, when a GPU operator runs);
- ``device/streams.py`` (beside the output ring): the device's non-blocking compute
  stream all of it runs on, and what orders the copies out of the GPU after it;
- ``reference/``: numpy doing what each kernel does, from the same plan.

Without a CUDA device (or without CuPy) a ``device="gpu"`` operator is refused when the
pipeline is built, with ``DeviceUnavailable``.
"""
