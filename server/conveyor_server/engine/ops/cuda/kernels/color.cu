// The colour operators. brightness_contrast: out = in * mul + add per value, in float32.
// hsv and color_twist: out[c] = ((m[c][0] r + m[c][1] g) + m[c][2] b) + m[c][3] per RGB
// pixel, in float32. The parameters come from engine/ops/color/color_params.py.
// blockIdx.z is the sample.
// geom: per sample 2 x i64: pixels (h * w), channels.
// coef: per sample 2 f32 (mul, add), or 12 f32 (the 3x4 matrix, row-major).
template <typename S, typename D>
__device__ void brightness_contrast(const ptr_t* in_ptrs, const ptr_t* out_ptrs,
                                    const i64* geom, const float* coef) {
  const int s = blockIdx.z;
  const i64 n = geom[2 * s] * geom[2 * s + 1];
  const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = load_f((const S*)in_ptrs[s] + i);
  store_f((D*)out_ptrs[s] + i, __fadd_rn(__fmul_rn(v, coef[2 * s]), coef[2 * s + 1]));
}

template <typename S, typename D>
__device__ void color_matrix(const ptr_t* in_ptrs, const ptr_t* out_ptrs, const i64* geom,
                             const float* coef) {
  const int s = blockIdx.z;
  const i64 pixels = geom[2 * s];
  const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= pixels) return;
  const S* in = (const S*)in_ptrs[s] + 3 * i;
  D* out = (D*)out_ptrs[s] + 3 * i;
  const float r = load_f(in), g = load_f(in + 1), b = load_f(in + 2);
  const float* m = coef + 12 * s;
  for (int ch = 0; ch < 3; ++ch) {
    const float* row = m + 4 * ch;
    float v = __fadd_rn(__fmul_rn(row[0], r), __fmul_rn(row[1], g));
    v = __fadd_rn(__fadd_rn(v, __fmul_rn(row[2], b)), row[3]);
    store_f(out + ch, v);
  }
}

#define COLOR(S, SN, D, DN) \
  extern "C" __global__ void brightness_contrast_##SN##_##DN( \
      const ptr_t* in_ptrs, const ptr_t* out_ptrs, const i64* geom, const float* coef) { \
    brightness_contrast<S, D>(in_ptrs, out_ptrs, geom, coef); \
  } \
  extern "C" __global__ void color_matrix_##SN##_##DN( \
      const ptr_t* in_ptrs, const ptr_t* out_ptrs, const i64* geom, const float* coef) { \
    color_matrix<S, D>(in_ptrs, out_ptrs, geom, coef); \
  }
#define COLOR_FROM(S, SN) \
  COLOR(S, SN, u8, uint8) COLOR(S, SN, i16, int16) COLOR(S, SN, u16, uint16) \
  COLOR(S, SN, f16, float16) COLOR(S, SN, f32, float32)
COLOR_FROM(u8, uint8)
COLOR_FROM(i16, int16)
COLOR_FROM(u16, uint16)
COLOR_FROM(f16, float16)
COLOR_FROM(f32, float32)
