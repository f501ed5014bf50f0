# conveyor-server: the server and its CPU engine. Build: docker build -t conveyor-server .
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
RUN useradd --create-home --uid 10001 conveyor
WORKDIR /src
COPY client/ client/
COPY server/ server/
RUN pip install ./client ./server && rm -rf /src

USER conveyor
WORKDIR /home/conveyor
EXPOSE 50051
# Kubernetes sends SIGTERM: the server drains (checkpoints at acknowledged positions).
ENTRYPOINT ["conveyor-server", "--port", "50051"]
CMD ["--data-root", "/data"]
