// Shared by every Conveyor kernel source: sample types, loads and saturating stores.
// Self-contained (no headers), so NVRTC compiles it anywhere. Every product and sum is
// written with the _rn intrinsics, so the compiler never fuses them into an FMA: the numpy
// references (engine/cuda/reference) round the same way.
typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef short i16;
typedef int i32;
typedef float f32;
typedef long long i64;
typedef unsigned long long ptr_t;
// A float16 value held as its 16 bits, converted with PTX's cvt (round to nearest even).
struct f16 { unsigned short bits; };

__device__ __forceinline__ float half_to_float(unsigned short h) {
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}
__device__ __forceinline__ unsigned short float_to_half(float f) {
  unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}
__device__ __forceinline__ unsigned short double_to_half(double d) {
  unsigned short h; asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(d)); return h;
}

// Loads as float (exact for every type here but i32).
__device__ __forceinline__ float load_f(const u8* p) { return (float)*p; }
__device__ __forceinline__ float load_f(const i8* p) { return (float)*p; }
__device__ __forceinline__ float load_f(const u16* p) { return (float)*p; }
__device__ __forceinline__ float load_f(const i16* p) { return (float)*p; }
__device__ __forceinline__ float load_f(const i32* p) { return __int2float_rn(*p); }
__device__ __forceinline__ float load_f(const f32* p) { return *p; }
__device__ __forceinline__ float load_f(const f16* p) { return half_to_float(p->bits); }

// Loads as double (exact for every type here).
__device__ __forceinline__ double load_d(const u8* p) { return (double)*p; }
__device__ __forceinline__ double load_d(const i8* p) { return (double)*p; }
__device__ __forceinline__ double load_d(const u16* p) { return (double)*p; }
__device__ __forceinline__ double load_d(const i16* p) { return (double)*p; }
__device__ __forceinline__ double load_d(const i32* p) { return (double)*p; }
__device__ __forceinline__ double load_d(const f32* p) { return (double)*p; }
__device__ __forceinline__ double load_d(const f16* p) { return (double)half_to_float(p->bits); }

// Round to nearest (ties to even), NaN to 0, clamp: the engine's saturate_cast.
__device__ __forceinline__ float sat_f(float v, float lo, float hi) {
  v = rintf(v);
  if (v != v) v = 0.0f;
  return fminf(fmaxf(v, lo), hi);
}
__device__ __forceinline__ double sat_d(double v, double lo, double hi) {
  v = rint(v);
  if (v != v) v = 0.0;
  return fmin(fmax(v, lo), hi);
}

// Stores of a float value.
__device__ __forceinline__ void store_f(u8* p, float v) { *p = (u8)sat_f(v, 0.0f, 255.0f); }
__device__ __forceinline__ void store_f(i8* p, float v) { *p = (i8)sat_f(v, -128.0f, 127.0f); }
__device__ __forceinline__ void store_f(u16* p, float v) { *p = (u16)sat_f(v, 0.0f, 65535.0f); }
__device__ __forceinline__ void store_f(i16* p, float v) { *p = (i16)sat_f(v, -32768.0f, 32767.0f); }
__device__ __forceinline__ void store_f(i32* p, float v) {
  *p = (i32)sat_d((double)v, -2147483648.0, 2147483647.0);
}
__device__ __forceinline__ void store_f(f32* p, float v) { *p = v; }
__device__ __forceinline__ void store_f(f16* p, float v) { p->bits = float_to_half(v); }

// Stores of a double value.
__device__ __forceinline__ void store_d(u8* p, double v) { *p = (u8)sat_d(v, 0.0, 255.0); }
__device__ __forceinline__ void store_d(i8* p, double v) { *p = (i8)sat_d(v, -128.0, 127.0); }
__device__ __forceinline__ void store_d(u16* p, double v) { *p = (u16)sat_d(v, 0.0, 65535.0); }
__device__ __forceinline__ void store_d(i16* p, double v) { *p = (i16)sat_d(v, -32768.0, 32767.0); }
__device__ __forceinline__ void store_d(i32* p, double v) {
  *p = (i32)sat_d(v, -2147483648.0, 2147483647.0);
}
__device__ __forceinline__ void store_d(f32* p, double v) { *p = (float)v; }
__device__ __forceinline__ void store_d(f16* p, double v) { p->bits = double_to_half(v); }

// A float value rounded as storing it in T and loading it back would round it.
template <typename T> __device__ __forceinline__ float as_type(float v) {
  T t; store_f(&t, v); return load_f(&t);
}
