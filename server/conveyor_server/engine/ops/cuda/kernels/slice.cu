// crop and flip: out[y, x, c] = in[y0 + y', x0 + x', c] (y', x' mirrored where flipped), or
// the fill value where that is outside the image (crop's "pad"). Copies elements, so one
// kernel per element size. One launch per batch: blockIdx.z is the sample.
// geom: per sample 9 x i64: in_h, in_w, channels, out_h, out_w, y0, x0, flip_x, flip_y.
// fill: per sample `fill_stride` values (one per channel), in the sample type.
template <typename T>
__device__ void slice_flip(const ptr_t* in_ptrs, const ptr_t* out_ptrs, const i64* geom,
                           const T* fill, int fill_stride) {
  const int s = blockIdx.z;
  const i64* g = geom + 9 * s;
  const i64 in_h = g[0], in_w = g[1], c = g[2], out_h = g[3], out_w = g[4];
  const i64 col = (i64)blockIdx.x * blockDim.x + threadIdx.x;  // over out_w * channels
  const i64 row = (i64)blockIdx.y * blockDim.y + threadIdx.y;
  if (row >= out_h || col >= out_w * c) return;
  const i64 x = col / c, ch = col - x * c;
  const i64 sy = g[5] + (g[8] ? out_h - 1 - row : row);
  const i64 sx = g[6] + (g[7] ? out_w - 1 - x : x);
  const T* in = (const T*)in_ptrs[s];
  T* out = (T*)out_ptrs[s];
  const bool inside = sy >= 0 && sy < in_h && sx >= 0 && sx < in_w;
  out[row * out_w * c + col] = inside ? in[(sy * in_w + sx) * c + ch] : fill[s * fill_stride + ch];
}

#define SLICE_FLIP(NAME, T) \
  extern "C" __global__ void NAME(const ptr_t* in_ptrs, const ptr_t* out_ptrs, \
                                  const i64* geom, const T* fill, int fill_stride) { \
    slice_flip<T>(in_ptrs, out_ptrs, geom, fill, fill_stride); \
  }
SLICE_FLIP(slice_flip_1, u8)
SLICE_FLIP(slice_flip_2, u16)
SLICE_FLIP(slice_flip_4, unsigned int)
SLICE_FLIP(slice_flip_8, unsigned long long)
