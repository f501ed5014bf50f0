/* Reading a batch's data files in one call, with the GIL released (``batch_read.py`` holds the
 * rules, the pure-Python twin of this loop and the messages built from what it reports).
 *
 * Per file: open it beneath its data root's open directory without following any symlink
 * (openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS; where the kernel
 * has no openat2, the walk DataRoots.open does: each folder opened relative to the one before
 * with O_NOFOLLOW | O_DIRECTORY, the file with O_NOFOLLOW), or, for a file of a pipeline without
 * data roots, as its path is spelled; refuse what is not a regular file and a file above the
 * limit from its fstat; read at most its listed size + 1 bytes (the limit + 1 where the listed
 * size is above the limit) into its slot of the batch's one buffer, so a file that grew is seen;
 * close it. A file is opened with O_NONBLOCK (opening a FIFO must not wait for a writer), taken
 * off once it is known to be a regular file.
 *
 * Python: read_files(dirfds, paths, sizes, offsets, limit, out, results) -> None.
 *   dirfds  int32[n]: the open directory of each file's root; -1: open the path as spelled
 *           (no data roots), following symlinks; any other negative value: the root could not
 *           be opened (the file is left alone, its status SKIPPED for the caller to fill in).
 *   paths   list of n str: each file's path relative to its root (or as spelled).
 *   sizes   int64[n]: each file's listed size; offsets int64[n]: where its slot starts in out.
 *   limit   the most bytes a file may hold (-1: no limit).
 *   out     the batch's buffer: file i's slot is out[offsets[i] : offsets[i] + min(sizes[i],
 *           limit) + 1].
 *   results int64[n * 3]: per file (status, a, b), as the STATUS_ constants below say.
 * The arguments are checked (slot inside out, sizes not negative) before anything is read.
 */
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030B0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* BATCH_READ_NO_OPENAT2: always the walk, as on a kernel without openat2 (the tests build
 * it so, and compare). */
#if defined(__linux__) && !defined(BATCH_READ_NO_OPENAT2) && defined(__has_include)
#if __has_include(<linux/openat2.h>)
#include <linux/openat2.h>
#define HAVE_OPENAT2 1
#endif
#endif

/* What a file's (status, a, b) say. */
#define STATUS_OK 0          /* a: bytes read (its listed size) */
#define STATUS_OPEN 1        /* a: errno of opening it, of its fstat or of its fcntl */
#define STATUS_DOTS 2        /* its path has a "." or ".." part (never listed so) */
#define STATUS_NOT_FILE 3    /* a: its st_mode */
#define STATUS_TOO_BIG 4     /* a: its size (fstat), above the limit */
#define STATUS_READ 5        /* a: errno of reading it */
#define STATUS_CHANGED 6     /* a: bytes read, b: its size (fstat); other than listed */
#define STATUS_SKIPPED 7     /* its root's directory could not be opened */

#define FILE_FLAGS (O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
#define DIR_FLAGS (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)

/* Whether openat2 is known to be missing (set once the kernel says ENOSYS). */
static volatile int no_openat2 = 0;

static int open_at(int dirfd, const char *name, int flags)
{
    int fd;
    do {
        fd = openat(dirfd, name, flags);
    } while (fd < 0 && errno == EINTR);
    return fd;
}

/* The walk: each folder of `path` (parts split on '/', empty parts skipped, "." and ".."
 * refused before) opened relative to the one before, the last part as the file. `scratch`
 * holds a copy of the path, cut into parts in place. */
static int open_walk(int root, char *scratch)
{
    int fd = root;
    char *part = scratch;
    for (;;) {
        while (*part == '/') {
            part++;
        }
        char *end = part;
        while (*end && *end != '/') {
            end++;
        }
        char *next = end;
        while (*next == '/') {
            next++;
        }
        const int last = *next == '\0';
        *end = '\0';
        int below;
        if (last) {
            below = open_at(fd, *part ? part : ".", FILE_FLAGS);
        } else {
            below = open_at(fd, part, DIR_FLAGS);
        }
        const int saved = errno;
        if (fd != root) {
            close(fd);
        }
        if (below < 0) {
            errno = saved;
            return -1;
        }
        fd = below;
        if (last) {
            return fd;
        }
        part = next;
    }
}

/* The path normalized into `scratch` (single slashes, none leading or trailing, "." for the
 * root itself); -1 if a part is "." or "..". */
static int normalize(const char *path, char *scratch)
{
    char *w = scratch;
    const char *p = path;
    while (*p) {
        while (*p == '/') {
            p++;
        }
        if (!*p) {
            break;
        }
        const char *end = p;
        while (*end && *end != '/') {
            end++;
        }
        const size_t n = (size_t)(end - p);
        if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.')) {
            return -1;
        }
        if (w != scratch) {
            *w++ = '/';
        }
        memcpy(w, p, n);
        w += n;
        p = end;
    }
    if (w == scratch) {
        *w++ = '.';
    }
    *w = '\0';
    return 0;
}

/* A descriptor of `path` beneath the directory `root` (-1 and errno where it cannot be
 * opened). `scratch` holds the normalized path. */
static int open_beneath(int root, char *scratch)
{
#if defined(HAVE_OPENAT2) && defined(SYS_openat2)
    if (!no_openat2) {
        struct open_how how;
        memset(&how, 0, sizeof how);
        how.flags = FILE_FLAGS;
        how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
        long fd;
        do {
            fd = syscall(SYS_openat2, root, scratch, &how, sizeof how);
        } while (fd < 0 && errno == EINTR);
        if (fd >= 0 || errno != ENOSYS) {
            return (int)fd;
        }
        no_openat2 = 1;
    }
#endif
    return open_walk(root, scratch);
}

typedef struct {
    Py_ssize_t n;
    const int32_t *dirfds;
    const char **paths;
    const int64_t *sizes, *offsets;
    int64_t limit;
    uint8_t *out;
    int64_t *results;
    char *scratch;
} Batch;

static void read_one(const Batch *b, Py_ssize_t i)
{
    int64_t *r = b->results + 3 * i;
    r[0] = STATUS_OK; r[1] = 0; r[2] = 0;
    const int root = b->dirfds[i];
    int fd;
    if (b->paths[i] == NULL) {  /* a NUL byte in its name (never listed so) */
        r[0] = STATUS_OPEN; r[1] = EINVAL;
        return;
    }
    if (root == -1) {
        fd = open_at(AT_FDCWD, b->paths[i], O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    } else if (root < 0) {
        r[0] = STATUS_SKIPPED;
        return;
    } else if (normalize(b->paths[i], b->scratch) < 0) {
        r[0] = STATUS_DOTS;
        return;
    } else {
        fd = open_beneath(root, b->scratch);
    }
    if (fd < 0) {
        r[0] = STATUS_OPEN; r[1] = errno;
        return;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        r[0] = STATUS_OPEN; r[1] = errno;
    } else if (!S_ISREG(st.st_mode)) {
        r[0] = STATUS_NOT_FILE; r[1] = st.st_mode;
    } else if (fcntl(fd, F_SETFL, 0) != 0) {  /* off with O_NONBLOCK: a regular file */
        r[0] = STATUS_OPEN; r[1] = errno;
    } else if (b->limit >= 0 && st.st_size > b->limit) {
        r[0] = STATUS_TOO_BIG; r[1] = st.st_size;
    } else {
        const int64_t listed = b->sizes[i];
        const int64_t want = (b->limit >= 0 && listed > b->limit ? b->limit : listed) + 1;
        uint8_t *slot = b->out + b->offsets[i];
        int64_t got = 0;
        while (got < want) {
            const ssize_t n = pread(fd, slot + got, (size_t)(want - got), (off_t)got);
            if (n < 0) {
                if (errno == EINTR) {
                    continue;
                }
                r[0] = STATUS_READ; r[1] = errno;
                break;
            }
            if (n == 0) {
                break;
            }
            got += n;
        }
        if (r[0] == STATUS_OK) {
            r[1] = got;
            if (got != listed || (b->limit >= 0 && got > b->limit)) {
                r[0] = STATUS_CHANGED; r[2] = st.st_size;
            }
        }
    }
    close(fd);
}

static PyObject *read_files(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer dirfds, sizes, offsets, out, results;
    PyObject *paths;
    long long limit;
    if (!PyArg_ParseTuple(args, "y*O!y*y*Lw*w*", &dirfds, &PyList_Type, &paths, &sizes,
                          &offsets, &limit, &out, &results)) {
        return NULL;
    }
    PyObject *result = NULL;
    PyObject **encoded = NULL;
    const char **texts = NULL;
    char *scratch = NULL;
    Py_ssize_t n = PyList_Size(paths), made = 0;
    if (n < 0) {
        goto done;
    }
    if (dirfds.len != n * (Py_ssize_t)sizeof(int32_t)
            || sizes.len != n * (Py_ssize_t)sizeof(int64_t)
            || offsets.len != n * (Py_ssize_t)sizeof(int64_t)
            || results.len != 3 * n * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "read_files: dirfds (int32), sizes, offsets (int64) "
                        "and results (int64, 3 per file) must hold one entry per path");
        goto done;
    }
    const int64_t *size = sizes.buf, *offset = offsets.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        const int64_t want = (limit >= 0 && size[i] > limit ? limit : size[i]) + 1;
        if (size[i] < 0 || offset[i] < 0 || offset[i] > out.len || want > out.len - offset[i]) {
            PyErr_Format(PyExc_ValueError, "read_files: file %zd's slot (offset %lld, %lld "
                         "bytes) is not inside the buffer of %zd bytes", i,
                         (long long)offset[i], (long long)want, out.len);
            goto done;
        }
    }
    encoded = PyMem_Calloc((size_t)n + 1, sizeof *encoded);
    texts = PyMem_Calloc((size_t)n + 1, sizeof *texts);
    if (encoded == NULL || texts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    size_t longest = 1;
    for (; made < n; made++) {
        PyObject *path = PyList_GetItem(paths, made);  /* borrowed */
        if (path == NULL || (encoded[made] = PyUnicode_EncodeFSDefault(path)) == NULL) {
            goto done;
        }
        char *text;
        Py_ssize_t length;
        if (PyBytes_AsStringAndSize(encoded[made], &text, &length) < 0) {
            goto done;
        }
        texts[made] = strlen(text) == (size_t)length ? text : NULL;
        if ((size_t)length + 1 > longest) {
            longest = (size_t)length + 1;
        }
    }
    scratch = PyMem_Malloc(longest + 1);
    if (scratch == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const Batch batch = {n, dirfds.buf, texts, size, offset, (int64_t)limit, out.buf,
                         results.buf, scratch};
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        read_one(&batch, i);
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    if (encoded != NULL) {
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_XDECREF(encoded[i]);
        }
    }
    PyMem_Free(encoded);
    PyMem_Free(texts);
    PyMem_Free(scratch);
    PyBuffer_Release(&dirfds); PyBuffer_Release(&sizes); PyBuffer_Release(&offsets);
    PyBuffer_Release(&out); PyBuffer_Release(&results);
    return result;
}

static PyMethodDef methods[] = {
    {"read_files", read_files, METH_VARARGS,
     "read_files(dirfds, paths, sizes, offsets, limit, out, results) -> None: each file read "
     "beneath its root's directory into its slot of out, (status, a, b) per file in results."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_batch_read",
    "Reading a batch's data files in one call, with the GIL released.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__batch_read(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "STATUS_OK", STATUS_OK) < 0
            || PyModule_AddIntConstant(m, "STATUS_OPEN", STATUS_OPEN) < 0
            || PyModule_AddIntConstant(m, "STATUS_DOTS", STATUS_DOTS) < 0
            || PyModule_AddIntConstant(m, "STATUS_NOT_FILE", STATUS_NOT_FILE) < 0
            || PyModule_AddIntConstant(m, "STATUS_TOO_BIG", STATUS_TOO_BIG) < 0
            || PyModule_AddIntConstant(m, "STATUS_READ", STATUS_READ) < 0
            || PyModule_AddIntConstant(m, "STATUS_CHANGED", STATUS_CHANGED) < 0
            || PyModule_AddIntConstant(m, "STATUS_SKIPPED", STATUS_SKIPPED) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
