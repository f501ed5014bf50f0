import numpy as np

STATUS_OK: int
STATUS_OPEN: int
STATUS_DOTS: int
STATUS_NOT_FILE: int
STATUS_TOO_BIG: int
STATUS_READ: int
STATUS_CHANGED: int
STATUS_SKIPPED: int

def read_files(dirfds: np.ndarray, paths: list[str], sizes: np.ndarray, offsets: np.ndarray,
               limit: int, out: np.ndarray, results: np.ndarray) -> None: ...
