// resize and random_resized_crop: one separable pass along one axis,
//   out[i] = sum_k weights[i, k] * in[clamp(start[i] + k)],
// accumulated in float32 in tap order (starting from the first tap's product). A resize is two launches per batch: the first pass
// (the sample's type to a float32 buffer, along the axis the CPU operator filters first,
// optionally rounded as the sample's type), then the other axis (float32 to the output type).
// The filters come from engine/ops/geometry/resize_filters.py. blockIdx.z is the sample.
// geom: per sample 12 x i64: src_h, src_w, src_row_stride, src_offset (elements; a crop
//   window's corner), channels, dst_h, dst_w, axis (0: rows, 1: columns), start_offset,
//   weight_offset, taps, round_between.
template <typename S, typename D, typename R>
__device__ void resize_pass(const ptr_t* src_ptrs, const ptr_t* dst_ptrs, const i64* geom,
                            const int* starts, const float* weights) {
  const int s = blockIdx.z;
  const i64* g = geom + 12 * s;
  const i64 src_h = g[0], src_w = g[1], stride = g[2], c = g[4], dst_h = g[5], dst_w = g[6];
  const i64 x = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  const i64 y = (i64)blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= dst_w || y >= dst_h) return;
  const bool rows = g[7] == 0;
  const i64 i = rows ? y : x, n = rows ? src_h : src_w, taps = g[10];
  const i64 start = starts[g[8] + i];
  const float* w = weights + g[9] + i * taps;
  const S* src = (const S*)src_ptrs[s] + g[3];
  D* dst = (D*)dst_ptrs[s] + (y * dst_w + x) * c;
  for (i64 ch = 0; ch < c; ++ch) {
    float acc = 0.0f;
    for (i64 k = 0; k < taps; ++k) {
      i64 j = start + k;
      j = j < 0 ? 0 : (j >= n ? n - 1 : j);
      const S* p = rows ? src + j * stride + x * c + ch : src + y * stride + j * c + ch;
      const float term = __fmul_rn(w[k], load_f(p));
      acc = k == 0 ? term : __fadd_rn(acc, term);
    }
    store_f(dst + ch, g[11] ? as_type<R>(acc) : acc);
  }
}

// First pass: the sample's type S to float32 (rounded as S where asked).
#define RESIZE_FIRST(NAME, S) \
  extern "C" __global__ void NAME(const ptr_t* src_ptrs, const ptr_t* dst_ptrs, \
                                  const i64* geom, const int* starts, const float* weights) { \
    resize_pass<S, f32, S>(src_ptrs, dst_ptrs, geom, starts, weights); \
  }
// Second pass: float32 to the output type D.
#define RESIZE_SECOND(NAME, D) \
  extern "C" __global__ void NAME(const ptr_t* src_ptrs, const ptr_t* dst_ptrs, \
                                  const i64* geom, const int* starts, const float* weights) { \
    resize_pass<f32, D, f32>(src_ptrs, dst_ptrs, geom, starts, weights); \
  }
RESIZE_FIRST(resize_first_uint8, u8)
RESIZE_FIRST(resize_first_uint16, u16)
RESIZE_FIRST(resize_first_int16, i16)
RESIZE_FIRST(resize_first_float32, f32)
RESIZE_SECOND(resize_second_uint8, u8)
RESIZE_SECOND(resize_second_uint16, u16)
RESIZE_SECOND(resize_second_int16, i16)
RESIZE_SECOND(resize_second_float32, f32)
