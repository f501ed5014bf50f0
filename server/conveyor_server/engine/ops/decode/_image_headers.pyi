from collections.abc import Sequence

import numpy as np

N_FIELDS: int

def walk_files(files: Sequence[np.ndarray], array_type: type, out: np.ndarray,
               max_pixels: int) -> None: ...
def walk_spans(buffer: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, out: np.ndarray,
               max_pixels: int) -> None: ...
