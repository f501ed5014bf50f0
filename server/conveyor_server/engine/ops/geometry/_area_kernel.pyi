import numpy as np

def area_u8(src: np.ndarray, in_h: int, in_w: int, channels: int, row_stride: int,
            dst: np.ndarray, out_h: int, out_w: int, x_start: np.ndarray, x_weights: np.ndarray,
            x_taps: int, y_start: np.ndarray, y_weights: np.ndarray, y_taps: int) -> bool: ...
