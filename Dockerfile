# syntax=docker/dockerfile:1
# Conveyor server images, built from this repository's root. Two targets:
#
#   docker build --target cpu -t conveyor-server:0.1.0-cpu .   # python:3.11-slim, CPU engine
#   docker build --target gpu -t conveyor-server:0.1.0-gpu .   # CUDA 12 runtime + the [gpu] extra
#   docker build --target gpu --build-arg CUDA_MAJOR=13 -t conveyor-server:0.1.0-gpu-cu13 .
#                                                      # CUDA 13 runtime + the [gpu-cu13] extra
#
# Without --target the last stage, cpu, is built. Both run as UID 10001, read their
# configuration from /etc/conveyor/server.yaml (deploy/base/server.yaml is baked in there;
# Kubernetes mounts its ConfigMap over it) and serve gRPC on 50051, metrics on 9464.
# Every config key can be overridden by an environment variable CONVEYOR_<PATH>.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
# The gpu target's CUDA major version: 12 (the default) or 13. It picks the base image below
# and, through it, the server's extra with the matching CuPy, nvImageCodec and nvJPEG.
ARG CUDA_MAJOR=12
ARG CUDA12_IMAGE=nvidia/cuda:12.6.3-runtime-ubuntu24.04
ARG CUDA13_IMAGE=nvidia/cuda:13.0.1-runtime-ubuntu24.04
# Must equal the version in client/ and server/pyproject.toml (a test checks it).
ARG CONVEYOR_VERSION=0.1.0

# ---- builder: wheels of the two distributions of this repository. The client is pure
# Python; the server's compiled parts, the area resize kernel (engine/ops/geometry/
# area_kernel.c), the batch header walk (engine/ops/decode/image_headers.c) and the batch
# file reader (engine/data/batch_read.c), are built here against Python's stable ABI (one
# wheel for 3.11 and 3.12), so the runtime stages need no compiler. The build fails if one
# was not compiled (the server would compute the same bytes without them, more slowly). The dependencies (grpcio, numpy,
# OpenCV, ...) are installed from PyPI by each runtime stage, for that stage's own Python, at
# the exact versions of server/constraints.txt (the server's output bytes depend on the
# numpy/OpenCV/libjpeg-turbo builds: a rebuild with the same pins computes the same bytes;
# `make test` runs on the same versions).
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# The Debian release is fixed by PYTHON_IMAGE; apt pins would break on security updates.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY client/ client/
COPY server/ server/
RUN pip wheel --no-deps --wheel-dir /wheels ./client ./server \
    && python -c "import glob, zipfile; (wheel,) = glob.glob('/wheels/conveyor_server-*.whl'); \
names = zipfile.ZipFile(wheel).namelist(); \
missing = [m for m in ('_area_kernel', '_image_headers', '_batch_read') \
           if not any(m in n for n in names)]; \
raise SystemExit(f'not built: {missing}' if missing else 0)"

# ---- the CUDA bases of the gpu target, one per CUDA major version, each naming the server's
# extra built for it. Only the one CUDA_MAJOR names is built (and pulled).
FROM ${CUDA12_IMAGE} AS cuda12
ENV CONVEYOR_GPU_EXTRA=gpu

FROM ${CUDA13_IMAGE} AS cuda13
ENV CONVEYOR_GPU_EXTRA=gpu-cu13

# ---- gpu: NVIDIA's CUDA runtime image (Ubuntu 24.04 ships Python 3.12; Conveyor needs
# 3.11+) with CuPy, nvImageCodec and nvJPEG from the server's [gpu] or [gpu-cu13] extra.
# Its base is one of the two stages above (tagged there); hadolint does not resolve the
# stage name through the ARG.
# hadolint ignore=DL3006
FROM cuda${CUDA_MAJOR} AS gpu
ARG CONVEYOR_VERSION
# The CUDA tag fixes the Ubuntu release; apt version pins would break the build whenever
# Ubuntu supersedes a package with a security update, so the packages are left unpinned.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/conveyor \
    && groupadd --gid 10001 conveyor \
    && useradd --uid 10001 --gid 10001 --no-log-init --no-create-home \
        --home-dir /tmp --shell /usr/sbin/nologin conveyor
# GRPC_VERBOSITY: gRPC's own notes (a failed TLS handshake of a plaintext client or a port
# scan) stay out of the JSON log; its errors still show.
ENV PATH=/opt/conveyor/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    CUPY_CACHE_DIR=/tmp/cupy-kernel-cache GRPC_VERBOSITY=ERROR
# Not in server/constraints.txt: the GPU extras (CuPy, nvImageCodec, nvJPEG, NVML's bindings)
# and this stage's CUDA libraries. A checkpoint of a GPU pipeline records their versions
# (the engine identity's GPU path) and restores only where they are the same.
# The runtime base has no CUDA headers, and CuPy compiles no kernel without them: the extra
# brings them as a wheel (nvidia-cuda-runtime), and the build fails here, not at the first
# batch, if CuPy's lookup (cuda-pathfinder) does not find cuda_runtime.h.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    --mount=type=bind,source=server/constraints.txt,target=/constraints.txt \
    server_wheel="$(echo /wheels/conveyor_server-${CONVEYOR_VERSION}-*.whl)" \
    && pip install -c /constraints.txt "/wheels/conveyor-${CONVEYOR_VERSION}-py3-none-any.whl" \
        "${server_wheel}[${CONVEYOR_GPU_EXTRA}]" \
    && python -c "from cuda.pathfinder import find_nvidia_header_directory as find; \
raise SystemExit(0 if find('cudart') else 'no CUDA headers (cuda_runtime.h) for CuPy')"
COPY deploy/base/server.yaml /etc/conveyor/server.yaml
USER 10001:10001
WORKDIR /tmp
# 50051: gRPC (TLS with the baked configuration), 9464: metrics, 50052: plaintext health,
# 50053: the data port (batch bytes, TLS as 50051).
EXPOSE 50051 9464 50052 50053
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-m", "conveyor_server.app.probe", "--address", "127.0.0.1:50052", \
         "--timeout", "3"]
# SIGTERM starts the drain (drain.grace_s): give `docker stop` a longer --time.
ENTRYPOINT ["conveyor-server"]
CMD ["--config", "/etc/conveyor/server.yaml"]

# ---- cpu (the default target): the CPU engine on python:3.11-slim.
FROM ${PYTHON_IMAGE} AS cpu
ARG CONVEYOR_VERSION
RUN python -m venv /opt/conveyor \
    && groupadd --gid 10001 conveyor \
    && useradd --uid 10001 --gid 10001 --no-log-init --no-create-home \
        --home-dir /tmp --shell /usr/sbin/nologin conveyor
ENV PATH=/opt/conveyor/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 GRPC_VERBOSITY=ERROR
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    --mount=type=bind,source=server/constraints.txt,target=/constraints.txt \
    pip install -c /constraints.txt "/wheels/conveyor-${CONVEYOR_VERSION}-py3-none-any.whl" \
        /wheels/conveyor_server-${CONVEYOR_VERSION}-*.whl
COPY deploy/base/server.yaml /etc/conveyor/server.yaml
USER 10001:10001
WORKDIR /tmp
# 50051: gRPC (TLS with the baked configuration), 9464: metrics, 50052: plaintext health,
# 50053: the data port (batch bytes, TLS as 50051).
EXPOSE 50051 9464 50052 50053
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-m", "conveyor_server.app.probe", "--address", "127.0.0.1:50052", \
         "--timeout", "3"]
# SIGTERM starts the drain (drain.grace_s): give `docker stop` a longer --time.
ENTRYPOINT ["conveyor-server"]
CMD ["--config", "/etc/conveyor/server.yaml"]
