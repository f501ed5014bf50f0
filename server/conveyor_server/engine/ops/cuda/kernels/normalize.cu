// crop_mirror_normalize: out = in * mul[c] + add[c] in float32 (a crop window, mirrored
// horizontally where asked), converted to the output type; channels past the input's are 0
// (pad_output). NCHW (chw) or NHWC. blockIdx.z is the sample.
// geom: per sample 9 x i64: in_h, in_w, channels, y0, x0, out_h, out_w, mirror,
//   channels_out.
// mul, add: per sample `coef_stride` f32.
template <typename S, typename D>
__device__ void crop_mirror_normalize(const ptr_t* in_ptrs, const ptr_t* out_ptrs,
                                      const i64* geom, const float* mul, const float* add,
                                      int coef_stride, int chw) {
  const int s = blockIdx.z;
  const i64* g = geom + 9 * s;
  const i64 in_w = g[1], c = g[2], out_h = g[5], out_w = g[6], channels_out = g[8];
  const i64 x = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  const i64 y = (i64)blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= out_w || y >= out_h) return;
  const i64 sy = g[3] + y, sx = g[4] + (g[7] ? out_w - 1 - x : x);
  const S* in = (const S*)in_ptrs[s] + (sy * in_w + sx) * c;
  D* out = (D*)out_ptrs[s];
  const float* m = mul + s * coef_stride;
  const float* a = add + s * coef_stride;
  for (i64 ch = 0; ch < channels_out; ++ch) {
    const float v = ch < c ? __fadd_rn(__fmul_rn(load_f(in + ch), m[ch]), a[ch]) : 0.0f;
    const i64 at = chw ? (ch * out_h + y) * out_w + x : (y * out_w + x) * channels_out + ch;
    store_f(out + at, v);
  }
}

#define CMN(NAME, S, D) \
  extern "C" __global__ void NAME(const ptr_t* in_ptrs, const ptr_t* out_ptrs, \
                                  const i64* geom, const float* mul, const float* add, \
                                  int coef_stride, int chw) { \
    crop_mirror_normalize<S, D>(in_ptrs, out_ptrs, geom, mul, add, coef_stride, chw); \
  }
#define CMN_TO(S, SN) \
  CMN(crop_mirror_normalize_##SN##_float32, S, f32) \
  CMN(crop_mirror_normalize_##SN##_float16, S, f16) \
  CMN(crop_mirror_normalize_##SN##_uint8, S, u8) \
  CMN(crop_mirror_normalize_##SN##_int8, S, i8)
CMN_TO(u8, uint8)
CMN_TO(f16, float16)
CMN_TO(f32, float32)
