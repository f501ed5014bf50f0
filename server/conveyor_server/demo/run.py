"""``conveyor-demo``: the seed notebook as a service.

Makes a small JPEG data set in class folders, starts a private Redis and two servers
("nodes" A and B), creates the rotate pipeline on A, runs 3 warm-up batches, checkpoints
to Redis, pulls the reference batch from A, restores the pipeline on B from the checkpoint
id, pulls B's first batch, and compares them byte for byte. Writes a PNG of the batch.
Exits 0 only on an exact match; ends every process it started, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

import cv2
import numpy as np

import conveyor
from conveyor.errors import ConveyorError, Unavailable
from conveyor.transport.channel import wait_serving
from conveyor_server.demo.launch import spawn_server, stop_server
from conveyor_server.demo.pipelines import rotate_pipeline
from conveyor_server.demo.sample_data import make_image_folder
from conveyor_server.store.redis_process import RedisProcess, find_redis_server

WARMUP = 3


class DemoError(Exception):
    pass


def start_server(label: str, port: int, redis_url: str, data_root: Path,
                 log_dir: Path) -> tuple[subprocess.Popen[str], str]:
    log_path = log_dir / f"server-{label}.log"
    args = ["--host", "127.0.0.1", "--port", str(port), "--redis-url", redis_url,
            "--data-root", str(data_root)]
    with log_path.open("w") as log:
        try:
            proc, address = spawn_server(args, stderr=log)
        except Unavailable:
            lines = [x for x in log_path.read_text().splitlines() if x.strip()] or ["no output"]
            raise DemoError(f"server {label} did not start on port {port}: {lines[-1]}") from None
    wait_serving(address)
    return proc, address


def draw_grid(images: list[np.ndarray], labels: list[int], angles: list[float],
              path: Path, cell: int = 256) -> None:
    tiles = []
    for img, label, angle in zip(images, labels, angles, strict=True):
        h, w = img.shape[:2]
        scale = min((cell - 28) / h, cell / w)
        small = cv2.resize(img, (max(1, int(w * scale)), max(1, int(h * scale))),
                           interpolation=cv2.INTER_AREA)
        tile = np.full((cell, cell, 3), 255, dtype=np.uint8)
        y, x = 28 + (cell - 28 - small.shape[0]) // 2, (cell - small.shape[1]) // 2
        tile[y:y + small.shape[0], x:x + small.shape[1]] = small
        cv2.putText(tile, f"label={label}, angle={angle:.2f}", (6, 19),
                    cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1, cv2.LINE_AA)
        tiles.append(tile)
    rows = [np.hstack(tiles[i:i + 4]) for i in range(0, len(tiles), 4)]
    grid = np.vstack(rows)
    cv2.imwrite(str(path), cv2.cvtColor(grid, cv2.COLOR_RGB2BGR))


def run(args: argparse.Namespace, processes: list[Any]) -> bool:
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.data:
        data = Path(args.data).resolve()
        if not data.is_dir():
            raise DemoError(f"data set path {args.data!r} does not exist: pass a directory of "
                            "class folders, or omit --data to generate one")
    else:
        data = out / "data"
        if not data.is_dir():
            make_image_folder(data, counts=(8,) * 6, size=(240, 320))
    n_files = sum(1 for p in data.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    ports = [int(p) for p in args.ports.split(",")] if args.ports else [0, 0]
    if len(ports) != 2:
        raise DemoError("--ports takes two ports, e.g. --ports 50051,50052")

    print("Conveyor demo: one pipeline, checkpointed to Redis on server A, restored on server B")
    print(f"  data      {data} ({n_files} images in class folders)")
    redis_dir = out / "redis"
    if len(str(redis_dir / "redis.sock")) > 100:  # unix socket paths are short
        redis_dir = Path(tempfile.mkdtemp(prefix="conveyor-demo-redis-"))
    redis_proc = RedisProcess(redis_dir, appendonly=True)
    processes.append(redis_proc)
    redis_proc.start()
    print(f"  redis     {redis_proc.url} (private redis-server: {find_redis_server()})")
    a_proc, a_addr = start_server("A", ports[0], redis_proc.url, data.parent, out)
    processes.append(a_proc)
    b_proc, b_addr = start_server("B", ports[1], redis_proc.url, data.parent, out)
    processes.append(b_proc)
    print(f"  server A  {a_addr}\n  server B  {b_addr}\n")

    spec = rotate_pipeline(str(data))
    # Not placed: the demo shows server A's pipeline going on on server B.
    with (conveyor.Client(a_addr, timeout=30, place=False) as node_a,
          conveyor.Client(b_addr, timeout=30, place=False) as node_b):
        pipe = node_a.create("rotate", spec)
        for _ in range(WARMUP):
            pipe.run()
        print(f"A: created pipeline 'rotate', ran {WARMUP} warm-up batches")
        ckpt = pipe.checkpoint()
        print(f"A: checkpoint {ckpt.id} after batch {ckpt.batches}, {len(ckpt.data)} bytes, "
              "stored in Redis")
        ref_images, ref_labels, ref_angles = pipe.run()
        print("A: pulled the reference batch")
        restored = node_b.restore("rotate", checkpoint=ckpt.id)
        print(f"B: restored 'rotate' from {ckpt.id} (A is now fenced)")
        images, labels, angles = restored.run()
        print("B: pulled its first batch\n")

    ref_l = [int(t[0]) for t in ref_labels]
    got_l = [int(t[0]) for t in labels]
    ref_a = [float(t) for t in ref_angles]
    got_a = [float(t) for t in angles]
    print(f"{'sample':>6}  {'label A':>7}  {'label B':>7}  {'angle A':>9}  {'angle B':>9}  "
          f"{'image A == B':>12}")
    same_images = []
    for i in range(len(ref_l)):
        same = ref_images[i].shape == images[i].shape and \
            ref_images[i].tobytes() == images[i].tobytes()
        same_images.append(same)
        print(f"{i:>6}  {ref_l[i]:>7}  {got_l[i]:>7}  {ref_a[i]:>9.4f}  {got_a[i]:>9.4f}  "
              f"{'yes' if same else 'NO':>12}")
    ok_labels, ok_angles = ref_l == got_l, ref_a == got_a
    ok_images = all(same_images)
    image_bytes = sum(img.nbytes for img in images)
    print(f"\nlabels: {'identical' if ok_labels else 'DIFFER'}   angles: "
          f"{'identical' if ok_angles else 'DIFFER'}   images: "
          f"{sum(same_images)}/{len(same_images)} identical ({image_bytes} bytes)")
    png = out / "restored_batch.png"
    draw_grid(list(images), got_l, got_a, png)
    ok = ok_labels and ok_angles and ok_images
    print("exact match: server B resumed with exactly the batch A would have given" if ok
          else "MISMATCH: the restored batch differs from the reference")
    print(f"wrote {png}")
    return ok


def cleanup(processes: list[Any]) -> None:
    for proc in reversed(processes):
        if isinstance(proc, RedisProcess):
            proc.cleanup()
        else:
            stop_server(proc)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="conveyor-demo", description=__doc__.splitlines()[0])
    p.add_argument("--out", default="demo-out", help="output directory (default demo-out)")
    p.add_argument("--data", default=None,
                   help="existing directory of class folders (default: generate one in OUT)")
    p.add_argument("--ports", default=None, help="ports of servers A and B (default: free ones)")
    args = p.parse_args(argv)
    processes: list[Any] = []

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        return 0 if run(args, processes) else 1
    except KeyboardInterrupt:
        print("conveyor-demo: interrupted; stopping the servers and Redis", file=sys.stderr)
        return 130
    except (DemoError, ConveyorError) as exc:
        print(f"conveyor-demo: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 2
    finally:
        cleanup(processes)


if __name__ == "__main__":
    sys.exit(main())
