// rotate and warp_affine: an affine warp, out[y, x] = in(M (x, y, 1)), as OpenCV's
// warpAffine with WARP_INVERSE_MAP computes it: the source position in float32,
// ((m0 x + m1 y) + m2); nearest rounds it to the nearest pixel, linear weighs the four
// pixels around it. With `corner` (warp_affine's nearest, as DALI's), M maps pixel corners
// (the first pixel spans [0, 1)) and the position is computed as DALI's CPU warp does: the
// row starts at M (0.5, y + 0.5), ((m0 0.5 + m1 (y + 0.5)) + m2), and each pixel after adds
// (m0, m3), one float sum at a time (a thread repeats its row's x sums: O(width) work per
// pixel, for DALI's exact positions); nearest takes the pixel whose square holds the
// position (floor).
// Pixels outside the image are the fill value (constant border) or the nearest edge pixel
// (replicate). One launch per batch: blockIdx.z is the sample.
// geom: per sample 5 x i64: in_h, in_w, channels, out_h, out_w.
// matrix: per sample 6 x f32, the output-to-input map (row-major 2x3).
// fill: per sample `fill_stride` f32, one per channel (constant border only).

// An index from a float position, clamped first so that the conversion is safe.
__device__ __forceinline__ i64 to_index(float v, i64 n) {
  return (i64)fminf(fmaxf(v, -2.0f), (float)n + 1.0f);
}

template <typename T>
__device__ __forceinline__ float fetch(const T* in, i64 y, i64 x, i64 ch, i64 h, i64 w,
                                       i64 c, bool replicate, float fill) {
  if (replicate) {
    y = y < 0 ? 0 : (y >= h ? h - 1 : y);
    x = x < 0 ? 0 : (x >= w ? w - 1 : x);
  } else if (y < 0 || y >= h || x < 0 || x >= w) {
    return fill;
  }
  return load_f(in + (y * w + x) * c + ch);
}

template <typename T>
__device__ void warp_affine(const ptr_t* in_ptrs, const ptr_t* out_ptrs, const i64* geom,
                            const float* matrix, const float* fill, int fill_stride,
                            int linear, int replicate, int corner) {
  const int s = blockIdx.z;
  const i64* g = geom + 5 * s;
  const i64 in_h = g[0], in_w = g[1], c = g[2], out_h = g[3], out_w = g[4];
  const i64 x = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  const i64 y = (i64)blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= out_w || y >= out_h) return;
  const float* m = matrix + 6 * s;
  const float fx = (float)x, fy = (float)y;
  const float sx = __fadd_rn(__fadd_rn(__fmul_rn(m[0], fx), __fmul_rn(m[1], fy)), m[2]);
  const float sy = __fadd_rn(__fadd_rn(__fmul_rn(m[3], fx), __fmul_rn(m[4], fy)), m[5]);
  const T* in = (const T*)in_ptrs[s];
  T* out = (T*)out_ptrs[s] + (y * out_w + x) * c;
  const float* f = fill + s * fill_stride;
  if (!linear && corner) {
    const float cy = __fadd_rn(fy, 0.5f);
    float px = __fadd_rn(__fadd_rn(__fmul_rn(m[0], 0.5f), __fmul_rn(m[1], cy)), m[2]);
    float py = __fadd_rn(__fadd_rn(__fmul_rn(m[3], 0.5f), __fmul_rn(m[4], cy)), m[5]);
    for (i64 k = 0; k < x; ++k) {
      px = __fadd_rn(px, m[0]);
      py = __fadd_rn(py, m[3]);
    }
    const i64 ix = to_index(floorf(px), in_w), iy = to_index(floorf(py), in_h);
    for (i64 ch = 0; ch < c; ++ch)
      store_f(out + ch, fetch(in, iy, ix, ch, in_h, in_w, c, replicate, replicate ? 0.0f : f[ch]));
    return;
  }
  if (!linear) {
    const i64 ix = to_index(rintf(sx), in_w), iy = to_index(rintf(sy), in_h);
    for (i64 ch = 0; ch < c; ++ch)
      store_f(out + ch, fetch(in, iy, ix, ch, in_h, in_w, c, replicate, replicate ? 0.0f : f[ch]));
    return;
  }
  const float x0 = floorf(sx), y0 = floorf(sy);
  const float ax = __fsub_rn(sx, x0), ay = __fsub_rn(sy, y0);
  const float bx = __fsub_rn(1.0f, ax), by = __fsub_rn(1.0f, ay);
  const float w00 = __fmul_rn(by, bx), w01 = __fmul_rn(by, ax);
  const float w10 = __fmul_rn(ay, bx), w11 = __fmul_rn(ay, ax);
  const i64 ix = to_index(x0, in_w), iy = to_index(y0, in_h);
  for (i64 ch = 0; ch < c; ++ch) {
    const float fv = replicate ? 0.0f : f[ch];
    float acc = __fmul_rn(fetch(in, iy, ix, ch, in_h, in_w, c, replicate, fv), w00);
    acc = __fadd_rn(acc, __fmul_rn(fetch(in, iy, ix + 1, ch, in_h, in_w, c, replicate, fv), w01));
    acc = __fadd_rn(acc, __fmul_rn(fetch(in, iy + 1, ix, ch, in_h, in_w, c, replicate, fv), w10));
    acc = __fadd_rn(acc, __fmul_rn(fetch(in, iy + 1, ix + 1, ch, in_h, in_w, c, replicate, fv), w11));
    store_f(out + ch, acc);
  }
}

#define WARP_AFFINE(NAME, T) \
  extern "C" __global__ void NAME(const ptr_t* in_ptrs, const ptr_t* out_ptrs, \
                                  const i64* geom, const float* matrix, const float* fill, \
                                  int fill_stride, int linear, int replicate, \
                                  int corner) { \
    warp_affine<T>(in_ptrs, out_ptrs, geom, matrix, fill, fill_stride, linear, replicate, \
                   corner); \
  }
WARP_AFFINE(warp_affine_uint8, u8)
WARP_AFFINE(warp_affine_uint16, u16)
WARP_AFFINE(warp_affine_int16, i16)
WARP_AFFINE(warp_affine_float32, f32)
