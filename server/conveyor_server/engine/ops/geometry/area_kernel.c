/* The area-averaging resize of uint8 images (resize's "area" filter), computed in the same
 * float32 operations, in the same order, as OpenCV's generic INTER_AREA loop, so that it
 * gives the same bytes (tests/engine/test_area_kernel.py compares them), only faster.
 *
 * Definition, per output pixel (y, x) and channel c, every operation rounded to float32:
 *   row[r][x][c] = (((0 + S[r][sx(x)][c] * wx(x,0)) + S[r][sx(x)+1][c] * wx(x,1)) + ...)
 *   out[y][x][c] = saturate_u8(rint(((row[sy(y)][x][c] * wy(y,0))
 *                                    + row[sy(y)+1][x][c] * wy(y,1)) + ...))
 * with the filters of resize_filters.area_filter (start, weights; zero weights pad the taps,
 * and add nothing to a sum of non-negative numbers). The order of each sum is the definition:
 * this file is compiled without floating-point contraction (no fused multiply-add) and without
 * reassociation, so every CPU computes the same bytes.
 *
 * Why it is faster: OpenCV adds each input pixel into its output cell in memory, one channel
 * at a time. Here the image is cut into bands of rows; a band is transposed (columns become
 * contiguous, pixels widened to 4 lanes), so the horizontal pass runs down whole columns in
 * vector registers, and the vertical pass runs along whole rows, fed from a ring of the few
 * rows it needs. Memory is bounded by the band, whatever the image's size. On the ResNet-50
 * pipeline's windows it takes 0.57 of OpenCV's CPU (bench/area_resize.py).
 *
 * Python: area_u8(src, in_h, in_w, channels, row_stride, dst, out_h, out_w, x_start, x_weights,
 * x_taps, y_start, y_weights, y_taps) -> bool, on contiguous buffers (src's rows row_stride
 * bytes apart, each in_w * channels bytes; dst's packed): True once dst holds the resize,
 * False where the call would take more than SCRATCH_LIMIT of memory (dst untouched). The GIL
 * is released while it computes.
 */
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030B0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

/* AVX2 and baseline builds of the vector loops, chosen when the module loads. They compute
 * the same numbers lane by lane (tests/engine/test_area_kernel.py builds this file without
 * them, and for the build machine's widest vectors, and compares the bytes);
 * AREA_KERNEL_ONE_BUILD leaves one build, for the compiler's target. */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__) \
        && !defined(AREA_KERNEL_ONE_BUILD)
#define VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define VECTOR_CLONES
#endif

/* Source rows per band (more when one output row needs more). */
#define BAND_ROWS 64
/* Rows the vertical pass's ring holds beyond those one output row reads. */
#define RING_AHEAD 3
/* The most scratch memory one call takes (bytes): a band is at least one output row's source
 * rows, so a shrink by a very large factor, or a very wide image, would need more; such a
 * call declines, and the caller resizes with OpenCV (the same bytes, O(width) memory). The
 * ResNet-50 pipeline's windows take ~1 MB. */
#define SCRATCH_LIMIT (64.0 * 1024 * 1024)
#define DECLINED 1

typedef struct {
    const uint8_t *src;
    long in_h, in_w, ch, stride;
    uint8_t *dst;
    long out_h, out_w;
    const int32_t *xs; const float *xw; long tx;
    const int32_t *ys; const float *yw; long ty;
} Area;

/* T[s][r][0..lanes) = S[r][s][0..ch): a band of rows, transposed; 3 channels take 4 lanes
 * (the 4th is never stored in the output). */
static void transpose_band(const Area *a, long r0, long rows, long lanes, uint8_t *T)
{
    const long rl = rows * lanes, ch = a->ch, in_w = a->in_w;
    for (long rb = 0; rb < rows; rb += 32) {
        const long re = rb + 32 < rows ? rb + 32 : rows;
        for (long sb = 0; sb < in_w; sb += 32) {
            const long se = sb + 32 < in_w ? sb + 32 : in_w;
            long r = rb;
            if (ch == 3) {
                /* Four rows at a time: four 4-byte reads, one 16-byte write. The row's last
                 * pixel is read byte by byte, so no read goes past the image. */
                const long whole = se < in_w ? se : in_w - 1;
                for (; r + 4 <= re; r += 4) {
                    const uint8_t *S = a->src + (r0 + r) * a->stride;
                    uint8_t *t = T + r * 4;
                    for (long s = sb; s < whole; s++) {
                        uint8_t four[16];
                        for (int q = 0; q < 4; q++) {
                            memcpy(four + 4 * q, S + q * a->stride + s * 3, 4);
                        }
                        memcpy(t + s * rl, four, 16);
                    }
                }
            }
            for (; r < re; r++) {
                const uint8_t *S = a->src + (r0 + r) * a->stride;
                uint8_t *t = T + r * lanes;
                if (ch == 3) {
                    const long whole = se < in_w ? se : in_w - 1;
                    long s = sb;
                    for (; s < whole; s++) memcpy(t + s * rl, S + s * 3, 4);
                } else if (ch == 4) {
                    for (long s = sb; s < se; s++) memcpy(t + s * rl, S + s * 4, 4);
                } else {
                    for (long s = sb; s < se; s++) t[s * rl] = S[s];
                }
            }
            if (ch == 3 && se == in_w) {  /* the last pixel of every row */
                for (long q = rb; q < re; q++) {
                    const uint8_t *S = a->src + (r0 + q) * a->stride + (in_w - 1) * 3;
                    uint8_t *p = T + (in_w - 1) * rl + q * 4;
                    p[0] = S[0]; p[1] = S[1]; p[2] = S[2]; p[3] = 0;
                }
            }
        }
    }
}

/* H[x][0..n) = the horizontal pass of output column x over the band's n = rows * lanes
 * values, in the definition's order. */
VECTOR_CLONES static void horizontal(const uint8_t *T, long n, long in_w, float *H, long out_w,
                                     const int32_t *xs, const float *xw, long tx)
{
    for (long x = 0; x < out_w; x++) {
        float *h = H + x * n;
        for (long i = 0; i < n; i++) h[i] = 0.0f;
        for (long k = 0; k < tx; k++) {
            long s = xs[x] + k;
            if (s > in_w - 1) s = in_w - 1;  /* a padding tap: weight 0 */
            const uint8_t *p = T + s * n;
            const float w = xw[x * tx + k];
            for (long i = 0; i < n; i++) h[i] = h[i] + (float)p[i] * w;
        }
    }
}

/* One output row: the weighted sum of ty rows of n values, rounded half to even and
 * saturated to uint8 (OpenCV's saturate_cast). */
VECTOR_CLONES static void vertical(float *const *rows, const float *w, long ty, long n,
                                   float *acc, uint8_t *out)
{
    const float *h0 = rows[0];
    for (long i = 0; i < n; i++) acc[i] = h0[i] * w[0];
    for (long j = 1; j < ty; j++) {
        const float *hj = rows[j];
        const float wj = w[j];
        for (long i = 0; i < n; i++) acc[i] = acc[i] + hj[i] * wj;
    }
    for (long i = 0; i < n; i++) {
        float v = acc[i];
        v = v < 0.0f ? 0.0f : v;
        v = v > 255.0f ? 255.0f : v;
        out[i] = (uint8_t)(int)rintf(v);
    }
}

/* The output rows [y0, y1) from the source rows [r0, r0 + rows). */
static void band(const Area *a, long y0, long y1, long r0, long rows, long lanes,
                 uint8_t *T, float *H, float *ring, float **taps, float *acc, uint8_t *packed)
{
    const long n = rows * lanes, wl = a->out_w * lanes, ch = a->ch, ty = a->ty;
    transpose_band(a, r0, rows, lanes, T);
    horizontal(T, n, a->in_w, H, a->out_w, a->xs, a->xw, a->tx);
    /* The ring holds the rows an output row reads (ty) and up to 3 read ahead: rows move
     * into it four at a time where they can, one 64-byte read of H per pixel. */
    const long slots = ty + RING_AHEAD;
    long next = 0;  /* the next band row to move into the ring (row-major) */
    for (long y = y0; y < y1; y++) {
        const long first = a->ys[y] - r0;
        long last = first + ty - 1;
        if (last > rows - 1) last = rows - 1;
        while (next <= last) {
            const float *col = H + next * lanes;
            if (lanes == 4 && next + 4 <= rows) {
                float *row[4];
                for (int q = 0; q < 4; q++) row[q] = ring + ((next + q) % slots) * wl;
                for (long x = 0; x < a->out_w; x++) {
                    const float *c = col + x * n;
                    memcpy(row[0] + x * 4, c, 16); memcpy(row[1] + x * 4, c + 4, 16);
                    memcpy(row[2] + x * 4, c + 8, 16); memcpy(row[3] + x * 4, c + 12, 16);
                }
                next += 4;
            } else {
                float *row = ring + (next % slots) * wl;
                if (lanes == 4) {  /* a constant size: one 16-byte move per pixel */
                    for (long x = 0; x < a->out_w; x++) memcpy(row + x * 4, col + x * n, 16);
                } else {
                    for (long x = 0; x < a->out_w; x++) row[x] = col[x * n];
                }
                next++;
            }
        }
        for (long j = 0; j < ty; j++) {
            long r = first + j;
            if (r > rows - 1) r = rows - 1;  /* a padding tap: weight 0 */
            taps[j] = ring + (r % slots) * wl;
        }
        uint8_t *D = a->dst + y * a->out_w * ch;
        if (lanes == ch) {
            vertical(taps, a->yw + y * ty, ty, wl, acc, D);
        } else {
            vertical(taps, a->yw + y * ty, ty, wl, acc, packed);
            for (long x = 0; x < a->out_w; x++) memcpy(D + x * 3, packed + x * 4, 3);
        }
    }
}

/* The band that starts at output row y0 ends before the returned row: at least one output
 * row, and as many more as fit in BAND_ROWS source rows. */
static long band_end(const Area *a, long y0)
{
    long y1 = y0 + 1;
    while (y1 < a->out_h && a->ys[y1] + a->ty - a->ys[y0] <= BAND_ROWS) y1++;
    return y1;
}

static long band_rows(const Area *a, long y0, long y1)
{
    long end = a->ys[y1 - 1] + a->ty;
    if (end > a->in_h) end = a->in_h;
    return end - a->ys[y0];
}

/* 0: resized; DECLINED: its scratch memory would pass SCRATCH_LIMIT (nothing written);
 * -1: out of memory. */
static int resize(const Area *a)
{
    const long lanes = a->ch == 3 ? 4 : a->ch;
    long most = 0;
    for (long y0 = 0; y0 < a->out_h;) {
        const long y1 = band_end(a, y0), rows = band_rows(a, y0, y1);
        if (rows > most) most = rows;
        y0 = y1;
    }
    const long wl = a->out_w * lanes;
    const double t_bytes = (double)(a->in_w * most * lanes + wl);
    const double h_floats = (double)(a->out_w * most * lanes + (a->ty + RING_AHEAD + 1) * wl);
    if (t_bytes + 4.0 * h_floats > SCRATCH_LIMIT) return DECLINED;
    uint8_t *T = malloc((size_t)t_bytes);
    float *H = malloc(sizeof(float) * (size_t)h_floats);
    float **taps = malloc(sizeof(float *) * (size_t)a->ty);
    if (T == NULL || H == NULL || taps == NULL) {
        free(T); free(H); free(taps);
        return -1;
    }
    float *ring = H + a->out_w * most * lanes, *acc = ring + (a->ty + RING_AHEAD) * wl;
    uint8_t *packed = T + a->in_w * most * lanes;
    for (long y0 = 0; y0 < a->out_h;) {
        const long y1 = band_end(a, y0);
        band(a, y0, y1, a->ys[y0], band_rows(a, y0, y1), lanes, T, H, ring, taps, acc, packed);
        y0 = y1;
    }
    free(T); free(H); free(taps);
    return 0;
}

static int check_filter(const Py_buffer *start, const Py_buffer *weights, long taps, long out,
                        long in, const char *axis)
{
    if (out < 1 || taps < 1 || start->len != out * (Py_ssize_t)sizeof(int32_t)
            || weights->len != out * taps * (Py_ssize_t)sizeof(float)) {
        PyErr_Format(PyExc_ValueError, "area_u8: the %s filter does not fit %ld outputs of "
                     "%ld taps", axis, out, taps);
        return -1;
    }
    const int32_t *s = start->buf;
    for (long i = 0; i < out; i++) {
        if (s[i] < 0 || s[i] >= in || (i > 0 && s[i] < s[i - 1])) {
            PyErr_Format(PyExc_ValueError, "area_u8: the %s filter's start %ld is %ld: each "
                         "must be in [0, %ld) and none below the one before", axis, i,
                         (long)s[i], in);
            return -1;
        }
    }
    return 0;
}

static PyObject *area_u8(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer src, dst, xs, xw, ys, yw;
    long in_h, in_w, ch, stride, out_h, out_w, tx, ty;
    if (!PyArg_ParseTuple(args, "y*llllw*lly*y*ly*y*l", &src, &in_h, &in_w, &ch, &stride, &dst,
                          &out_h, &out_w, &xs, &xw, &tx, &ys, &yw, &ty)) {
        return NULL;
    }
    PyObject *result = NULL;
    if (in_h < 1 || in_w < 1 || (ch != 1 && ch != 3 && ch != 4)
            || stride < in_w * ch || src.len < (in_h - 1) * stride + in_w * ch
            || dst.len != out_h * out_w * ch) {
        PyErr_Format(PyExc_ValueError, "area_u8: the buffers do not hold a %ldx%ldx%ld image "
                     "(rows %ld bytes apart) and its %ldx%ld output (1, 3 or 4 channels)", in_h,
                     in_w, ch, stride, out_h, out_w);
    } else if (check_filter(&xs, &xw, tx, out_w, in_w, "x") == 0
               && check_filter(&ys, &yw, ty, out_h, in_h, "y") == 0) {
        const Area a = {src.buf, in_h, in_w, ch, stride, dst.buf, out_h, out_w,
                        xs.buf, xw.buf, tx, ys.buf, yw.buf, ty};
        int outcome;
        Py_BEGIN_ALLOW_THREADS
        outcome = resize(&a);
        Py_END_ALLOW_THREADS
        if (outcome < 0) {
            PyErr_NoMemory();
        } else {
            result = PyBool_FromLong(outcome == 0);
        }
    }
    PyBuffer_Release(&src); PyBuffer_Release(&dst);
    PyBuffer_Release(&xs); PyBuffer_Release(&xw);
    PyBuffer_Release(&ys); PyBuffer_Release(&yw);
    return result;
}

static PyMethodDef methods[] = {
    {"area_u8", area_u8, METH_VARARGS,
     "area_u8(src, in_h, in_w, channels, row_stride, dst, out_h, out_w, x_start, x_weights, "
     "x_taps, y_start, y_weights, y_taps) -> bool: the area resize of a uint8 image into dst; "
     "False (dst untouched) where it would take more than its scratch limit."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_area_kernel",
    "The area-averaging resize of uint8 images, byte for byte as OpenCV's INTER_AREA.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__area_kernel(void)
{
    return PyModule_Create(&module);
}
