// cast: each value converted through double (which holds every value of these types
// exactly), rounded to nearest (ties to even) and saturated for integers, NaN to 0, as the
// engine's saturate_cast. Samples of any shape, flattened. blockIdx.y is the sample.
// counts: per sample, its number of values.
template <typename S, typename D>
__device__ void cast_values(const ptr_t* in_ptrs, const ptr_t* out_ptrs, const i64* counts) {
  const int s = blockIdx.y;
  const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= counts[s]) return;
  store_d((D*)out_ptrs[s] + i, load_d((const S*)in_ptrs[s] + i));
}

#define CAST(S, SN, D, DN) \
  extern "C" __global__ void cast_##SN##_##DN(const ptr_t* in_ptrs, const ptr_t* out_ptrs, \
                                              const i64* counts) { \
    cast_values<S, D>(in_ptrs, out_ptrs, counts); \
  }
#define CAST_FROM(S, SN) \
  CAST(S, SN, u8, uint8) CAST(S, SN, i8, int8) CAST(S, SN, u16, uint16) \
  CAST(S, SN, i16, int16) CAST(S, SN, i32, int32) CAST(S, SN, f16, float16) \
  CAST(S, SN, f32, float32)
CAST_FROM(u8, uint8)
CAST_FROM(i8, int8)
CAST_FROM(u16, uint16)
CAST_FROM(i16, int16)
CAST_FROM(i32, int32)
CAST_FROM(f16, float16)
CAST_FROM(f32, float32)
