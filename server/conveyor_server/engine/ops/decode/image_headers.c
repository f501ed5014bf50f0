/* The headers of a whole batch of encoded image files in one call: what ``decode.check_file``
 * checks (format, a JPEG not cut short, the declared size against limits.max_image_pixels)
 * and a JPEG's EXIF orientation (``jpeg_fast.exif_orientation``), read by the same walks over
 * the bytes as those Python functions, with the GIL released. ``batch_headers.py`` wraps it;
 * tests/engine/test_image_headers.py compares it with the Python functions, and fuzzes it.
 *
 * It settles the files it reads all of, JPEG and PNG, that pass; every other file (another
 * format, an empty one, a JPEG cut short, a header it cannot read under a limit, a size
 * above the limit, an object that is not a C-contiguous 1-D uint8 array) is marked
 * unsettled, and the caller runs the Python functions on it, which raise the error.
 *
 * Python:
 *   walk_files(files, array_type, out, max_pixels) -> None
 *       files: a list or tuple; each an instance of array_type (numpy.ndarray) exporting a
 *       1-D C-contiguous buffer of unsigned bytes, or it is left unsettled.
 *   walk_spans(buffer, offsets, lengths, out, max_pixels) -> None
 *       the files are buffer[offsets[i]:offsets[i] + lengths[i]] (int64 arrays); a span
 *       outside the buffer raises ValueError before anything is read.
 * out: a writable int64 buffer of len(files) * N_FIELDS, one row per file, in the order of
 * FIELDS below. max_pixels: limits.max_image_pixels, or -1 for none.
 */
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030B0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

/* One row per file: its columns (batch_headers.py names them in this order). */
enum {
    F_FORMAT,      /* FMT_* below: decode.sniff_format's answer */
    F_SETTLED,     /* 1: read here and passes every check; 0: the caller reads it in Python */
    F_CONTIGUOUS,  /* 1: a C-contiguous 1-D uint8 array (nvImageCodec may read it in place) */
    F_COMPLETE,    /* 0: a JPEG cut short (decode.check_jpeg_complete refuses it) */
    F_ORIENTATION, /* a JPEG's EXIF orientation (1: none; 0: unreadable), 1 for others */
    F_HEIGHT,      /* the size the header declares (image_header.read_size), 0s where */
    F_WIDTH,       /* it declares none or cannot be read */
    F_CHANNELS,
    F_BITS,
    N_FIELDS
};

/* decode.sniff_format's names, in this order. */
enum { FMT_UNKNOWN, FMT_JPEG, FMT_PNG, FMT_BMP, FMT_TIFF, FMT_GIF, FMT_WEBP };

typedef struct {
    const uint8_t *data;
    int64_t size;
    int usable; /* 0: not a buffer the walk reads (left unsettled) */
} File;

static unsigned be16(const uint8_t *p) { return (unsigned)p[0] << 8 | p[1]; }

static uint64_t be32(const uint8_t *p)
{
    return (uint64_t)p[0] << 24 | (uint64_t)p[1] << 16 | (uint64_t)p[2] << 8 | p[3];
}

static unsigned u16(const uint8_t *p, int little)
{
    return little ? (unsigned)p[1] << 8 | p[0] : be16(p);
}

static uint64_t u32(const uint8_t *p, int little)
{
    return little ? (uint64_t)p[3] << 24 | (uint64_t)p[2] << 16 | (uint64_t)p[1] << 8 | p[0]
                  : be32(p);
}

/* decode.sniff_format: the signature at the file's start. */
static int sniff(const uint8_t *d, int64_t n)
{
    if (n >= 12 && memcmp(d, "RIFF", 4) == 0 && memcmp(d + 8, "WEBP", 4) == 0) return FMT_WEBP;
    if (n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) return FMT_JPEG;
    if (n >= 8 && memcmp(d, "\x89PNG\r\n\x1a\n", 8) == 0) return FMT_PNG;
    if (n >= 2 && d[0] == 'B' && d[1] == 'M') return FMT_BMP;
    if (n >= 4 && (memcmp(d, "II*\0", 4) == 0 || memcmp(d, "MM\0*", 4) == 0)) return FMT_TIFF;
    if (n >= 4 && memcmp(d, "GIF8", 4) == 0) return FMT_GIF;
    return FMT_UNKNOWN;
}

/* jpeg_fast.tiff_orientation: the Orientation tag (0x0112) of the first IFD of an EXIF
 * block of len bytes; 1 where the IFD has none, 0 where the block cannot be read. */
static int64_t tiff_orientation(const uint8_t *t, int64_t len)
{
    if (len < 8 || !((t[0] == 'I' && t[1] == 'I') || (t[0] == 'M' && t[1] == 'M'))) return 0;
    const int little = t[0] == 'I';
    const int64_t ifd = (int64_t)u32(t + 4, little);
    if (ifd + 2 > len) return 0;
    const int64_t count = u16(t + ifd, little);
    for (int64_t i = 0; i < count; i++) {
        const int64_t entry = ifd + 2 + 12 * i;
        if (entry + 12 > len) return 0;
        if (u16(t + entry, little) == 0x0112) return u16(t + entry + 8, little);
    }
    return 1;
}

/* jpeg_markers.segments, strict: segment by segment from SOI by their lengths, up to the
 * first start-of-scan, stopping where a segment does not start with 0xFF or the data ends.
 * Returns jpeg_fast.exif_orientation's answer (the first EXIF APP1's orientation; else 1
 * where a SOS is reached, 0 where not) and sets *sos to the first SOS's offset (-1: none);
 * past the EXIF segment the walk goes on only where need_sos asks for the SOS. */
static int64_t jpeg_segments(const uint8_t *d, int64_t n, int need_sos, int64_t *sos)
{
    int64_t orientation = -1;
    int64_t pos = 2;
    *sos = -1;
    while (pos + 4 <= n) {
        if (d[pos] != 0xFF) break;
        const unsigned marker = d[pos + 1];
        if (marker == 0xFF) { /* a fill byte before a marker */
            pos += 1;
            continue;
        }
        if (marker == 0xDA) {
            *sos = pos;
            break;
        }
        if ((marker >= 0xD0 && marker <= 0xD7) || marker == 0x01) { /* no length */
            pos += 2;
            continue;
        }
        const int64_t length = be16(d + pos + 2);
        if (marker == 0xE1 && orientation < 0 && pos + 10 <= n
                && memcmp(d + pos + 4, "Exif\0\0", 6) == 0) {
            int64_t end = pos + 2 + length;
            if (end > n) end = n;
            orientation = tiff_orientation(d + pos + 10, end > pos + 10 ? end - pos - 10 : 0);
            if (!need_sos) return orientation;
        }
        pos += 2 + length;
    }
    if (orientation >= 0) return orientation;
    return *sos >= 0 ? 1 : 0;
}

static int padding(uint8_t c) { return c == 0 || c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* decode.check_jpeg_complete's first test: the last 64 bytes, padding stripped, end with
 * the end-of-image marker. */
static int tail_ends_with_eoi(const uint8_t *d, int64_t n)
{
    const int64_t start = n > 64 ? n - 64 : 0;
    int64_t end = n;
    while (end > start && padding(d[end - 1])) end--;
    return end - start >= 2 && d[end - 2] == 0xFF && d[end - 1] == 0xD9;
}

/* Whether an end-of-image marker (FF D9) starts at or after ``from``. */
static int eoi_from(const uint8_t *d, int64_t n, int64_t from)
{
    const uint8_t *p = d + from, *last = d + n - 1; /* a marker starts before the last byte */
    while (p < last) {
        p = memchr(p, 0xFF, (size_t)(last - p));
        if (p == NULL) return 0;
        if (p[1] == 0xD9) return 1;
        p++;
    }
    return 0;
}

/* image_header._jpeg: the first frame header (SOFn), read past the segments before it as
 * libjpeg does (bytes that are not a marker skipped, fill bytes swallowed). 0 where
 * read_size raises (cut short, SOI/EOI/SOS first, a length below 2). */
static int jpeg_frame(const uint8_t *d, int64_t n, int64_t *row)
{
    int64_t pos = 2;
    for (;;) {
        if (pos >= n) return 0;
        if (d[pos] != 0xFF) {
            const uint8_t *p = memchr(d + pos, 0xFF, (size_t)(n - pos));
            if (p == NULL) return 0;
            pos = p - d;
        }
        while (pos < n && d[pos] == 0xFF) pos++;
        if (pos >= n) return 0;
        const unsigned marker = d[pos++];
        if (marker == 0x00 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) continue;
        if (marker == 0xD8 || marker == 0xD9 || marker == 0xDA) return 0;
        if (pos + 2 > n) return 0;
        const int64_t length = be16(d + pos);
        if (marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8
                && marker != 0xCC) {
            if (pos + 8 > n) return 0;
            row[F_BITS] = d[pos + 2];
            row[F_HEIGHT] = be16(d + pos + 3);
            row[F_WIDTH] = be16(d + pos + 5);
            row[F_CHANNELS] = d[pos + 7];
            return 1;
        }
        if (length < 2) return 0;
        pos += length;
    }
}

/* image_header._png: the IHDR chunk. 0 where read_size raises. */
static int png_header(const uint8_t *d, int64_t n, int64_t *row)
{
    if (n < 33 || be32(d + 8) != 13 || memcmp(d + 12, "IHDR", 4) != 0) return 0;
    const uint64_t width = be32(d + 16), height = be32(d + 20);
    if (width >= (1u << 31) || height >= (1u << 31)) return 0;
    static const int channels[7] = {1, 0, 3, 3, 2, 0, 4}; /* by colour type */
    row[F_WIDTH] = (int64_t)width;
    row[F_HEIGHT] = (int64_t)height;
    row[F_CHANNELS] = d[25] < 7 ? channels[d[25]] : 0;
    row[F_BITS] = d[24];
    return 1;
}

/* limits.check_image: height x width, counted per byte of a sample, above max_pixels. */
static int above_limit(const int64_t *row, int64_t max_pixels)
{
    const int64_t bytes = row[F_BITS] > 8 ? (row[F_BITS] + 7) / 8 : 1;
    const uint64_t pixels = (uint64_t)row[F_HEIGHT] * (uint64_t)row[F_WIDTH]; /* < 2^62 */
    return pixels > (uint64_t)(max_pixels / bytes); /* pixels * bytes > max_pixels */
}

static void walk_one(const File *f, int64_t max_pixels, int64_t *row)
{
    row[F_FORMAT] = FMT_UNKNOWN;
    row[F_SETTLED] = 0;
    row[F_CONTIGUOUS] = f->usable;
    row[F_COMPLETE] = 1;
    row[F_ORIENTATION] = 1;
    row[F_HEIGHT] = row[F_WIDTH] = row[F_CHANNELS] = row[F_BITS] = 0;
    if (!f->usable) return;
    const uint8_t *d = f->data;
    const int64_t n = f->size;
    const int format = sniff(d, n);
    row[F_FORMAT] = format;
    int sized;
    if (format == FMT_JPEG) {
        const int tail = tail_ends_with_eoi(d, n);
        int64_t sos;
        row[F_ORIENTATION] = jpeg_segments(d, n, !tail, &sos);
        row[F_COMPLETE] = tail || (sos >= 0 && eoi_from(d, n, sos));
        sized = jpeg_frame(d, n, row);
        if (!row[F_COMPLETE]) return;
    } else if (format == FMT_PNG) {
        sized = png_header(d, n, row);
    } else {
        return;
    }
    if (max_pixels >= 0 && (!sized || above_limit(row, max_pixels))) return;
    row[F_SETTLED] = 1;
}

static void walk_all(const File *files, Py_ssize_t count, int64_t max_pixels, int64_t *out)
{
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count; i++) walk_one(&files[i], max_pixels, out + i * N_FIELDS);
    Py_END_ALLOW_THREADS
}

static int check_out(const Py_buffer *out, Py_ssize_t count)
{
    if (out->len != count * N_FIELDS * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_Format(PyExc_ValueError, "out holds %zd bytes, not %zd files x %d int64 fields",
                     out->len, count, N_FIELDS);
        return -1;
    }
    return 0;
}

/* A buffer of unsigned bytes, one dimension, C-contiguous. */
static int byte_vector(const Py_buffer *view)
{
    const int unsigned_bytes = view->format == NULL || strcmp(view->format, "B") == 0;
    return unsigned_bytes && view->itemsize == 1 && view->ndim == 1
           && PyBuffer_IsContiguous(view, 'C');
}

static PyObject *walk_files(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *files, *array_type;
    Py_buffer out;
    long long max_pixels;
    if (!PyArg_ParseTuple(args, "OOw*L", &files, &array_type, &out, &max_pixels)) return NULL;
    PyObject *result = NULL;
    File *walked = NULL;
    Py_buffer *views = NULL;
    Py_ssize_t count = 0, held = 0;
    PyObject *seq = PySequence_Tuple(files);
    if (seq == NULL) goto done;
    count = PyTuple_Size(seq);
    if (check_out(&out, count) < 0) goto done;
    walked = PyMem_Calloc(count ? (size_t)count : 1, sizeof(File));
    views = PyMem_Calloc(count ? (size_t)count : 1, sizeof(Py_buffer));
    if (walked == NULL || views == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PyTuple_GetItem(seq, i); /* borrowed */
        const int is_array = PyObject_IsInstance(item, array_type);
        if (is_array < 0) goto done;
        if (!is_array) continue;
        if (PyObject_GetBuffer(item, &views[held], PyBUF_RECORDS_RO) < 0) {
            PyErr_Clear(); /* an array numpy cannot export: left to the Python functions */
            continue;
        }
        if (byte_vector(&views[held])) {
            walked[i].data = views[held].buf;
            walked[i].size = views[held].len;
            walked[i].usable = 1;
            held++;
        } else {
            PyBuffer_Release(&views[held]);
        }
    }
    walk_all(walked, count, max_pixels, out.buf);
    result = Py_NewRef(Py_None);
done:
    for (Py_ssize_t i = 0; i < held; i++) PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    PyMem_Free(walked);
    Py_XDECREF(seq);
    PyBuffer_Release(&out);
    return result;
}

static int int64_vector(const Py_buffer *view, Py_ssize_t count, const char *name)
{
    if (view->len != count * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_Format(PyExc_ValueError, "%s holds %zd bytes, not %zd int64", name, view->len,
                     count);
        return -1;
    }
    return 0;
}

static PyObject *walk_spans(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer buffer, offsets, lengths, out;
    long long max_pixels;
    if (!PyArg_ParseTuple(args, "y*y*y*w*L", &buffer, &offsets, &lengths, &out, &max_pixels)) {
        return NULL;
    }
    PyObject *result = NULL;
    File *walked = NULL;
    const Py_ssize_t count = offsets.len / (Py_ssize_t)sizeof(int64_t);
    if (int64_vector(&offsets, count, "offsets") < 0 || int64_vector(&lengths, count, "lengths") < 0
            || check_out(&out, count) < 0) {
        goto done;
    }
    walked = PyMem_Calloc(count ? (size_t)count : 1, sizeof(File));
    if (walked == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const int64_t *offset = offsets.buf, *length = lengths.buf;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (offset[i] < 0 || length[i] < 0 || offset[i] > buffer.len
                || length[i] > buffer.len - offset[i]) {
            PyErr_Format(PyExc_ValueError, "file %zd spans bytes %lld to %lld, outside the "
                         "buffer's %zd", i, (long long)offset[i],
                         (long long)offset[i] + (long long)length[i], buffer.len);
            goto done;
        }
        walked[i].data = (const uint8_t *)buffer.buf + offset[i];
        walked[i].size = length[i];
        walked[i].usable = 1;
    }
    walk_all(walked, count, max_pixels, out.buf);
    result = Py_NewRef(Py_None);
done:
    PyMem_Free(walked);
    PyBuffer_Release(&buffer);
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&lengths);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"walk_files", walk_files, METH_VARARGS,
     "walk_files(files, array_type, out, max_pixels) -> None: each file's header row into out "
     "(int64, len(files) x N_FIELDS); max_pixels -1 for no limit."},
    {"walk_spans", walk_spans, METH_VARARGS,
     "walk_spans(buffer, offsets, lengths, out, max_pixels) -> None: as walk_files, for the "
     "files buffer[offsets[i]:offsets[i] + lengths[i]]."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_image_headers",
    "The headers of a batch of encoded image files, read in one call (batch_headers.py).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__image_headers(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "N_FIELDS", N_FIELDS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
