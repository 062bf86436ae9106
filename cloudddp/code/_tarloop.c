/* The per-file loops of a code snapshot, in C: listing a folder's regular files with their stamps
 * (cloudddp.code.scan) and appending members to the tar stream's batch (cloudddp.code.tarstream).
 *
 * Each does only the common case and hands everything else back to the Python code that calls it, which stays the
 * reference: a folder's subfolders, symlinks and special files, and members with a long or non-ASCII name, given as
 * data, hashed or bigger than a chunk. A file that cannot be opened or shrinks is handed back too, and the Python
 * path packs it again and raises its own error. Built optionally (pyproject.toml): without it the Python loops
 * pack the same bytes. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BLOCK 512

/* ---- regular_files: one folder's plain regular files, stamped ---- */

static PyObject *
named(PyTypeObject *cls, Py_ssize_t n, PyObject **items)
{
    /* tuple.__new__(cls, items) for a named tuple class: its own __new__ is a Python call. Steals the items.
     * Left out of the garbage collector's watch, as CPython leaves a tuple of strings and numbers: it holds no
     * container, so no cycle (twenty thousand of them cost every collection in the scan its time). */
    PyObject *o = cls->tp_alloc(cls, n);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (o == NULL)
            Py_XDECREF(items[i]);
        else
            PyTuple_SET_ITEM(o, i, items[i]);
    }
    if (o != NULL)
        PyObject_GC_UnTrack(o);
    return o;
}

static PyObject *
stamp_of(PyTypeObject *stamp, const struct stat *st)
{
    PyObject *items[5] = {
        PyLong_FromLongLong((long long)st->st_size),
        PyLong_FromLongLong((long long)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec),
        PyLong_FromLongLong((long long)st->st_ctim.tv_sec * 1000000000LL + st->st_ctim.tv_nsec),
        PyLong_FromUnsignedLongLong((unsigned long long)st->st_ino),
        PyLong_FromLong((long)st->st_mode),
    };
    for (int i = 0; i < 5; i++) {
        if (items[i] == NULL) {
            for (int j = 0; j < 5; j++)
                Py_XDECREF(items[j]);
            return NULL;
        }
    }
    return named(stamp, 5, items);
}

/* The folder's entries as a list of (name, d_type), sorted by name as Python sorts str. */
static PyObject *
sorted_listing(int dirfd)
{
    DIR *dir = fdopendir(dirfd);
    if (dir == NULL) {
        close(dirfd);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    PyObject *listing = PyList_New(0);
    struct dirent *d;
    errno = 0;
    while (listing != NULL && (d = readdir(dir)) != NULL) {
        if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0)
            continue;
        PyObject *pair = Py_BuildValue("(O&i)", PyUnicode_DecodeFSDefault, d->d_name, (int)d->d_type);
        if (pair == NULL || PyList_Append(listing, pair) < 0)
            Py_CLEAR(listing);
        Py_XDECREF(pair);
    }
    if (listing != NULL && errno != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        Py_CLEAR(listing);
    }
    closedir(dir);
    if (listing != NULL && PyList_Sort(listing) < 0)
        Py_CLEAR(listing);
    return listing;
}

/* Whether the entry name in dirfd is a regular file, not a symlink (1: then st holds its lstat), is not or is gone
 * (0), or an error is set (-1). */
static int
lstat_regular(int dirfd, PyObject *name, struct stat *st)
{
    PyObject *encoded = PyUnicode_EncodeFSDefault(name);
    if (encoded == NULL)
        return -1;
    int statted = fstatat(dirfd, PyBytes_AS_STRING(encoded), st, AT_SYMLINK_NOFOLLOW) == 0;
    Py_DECREF(encoded);
    return statted && S_ISREG(st->st_mode);
}

/* Sorts one entry: a kept file into found, a file the rules leave out into left, anything else into rest. The
 * listing's type answers without a syscall; a file system that does not give it (DT_UNKNOWN) is asked with lstat. */
static int
one_entry(PyObject *pair, int dirfd, PyObject *rel_dir, PyObject *left, PyTypeObject *entry_cls,
          PyTypeObject *stamp_cls, PyObject *found, PyObject *ignored, PyObject *rest)
{
    PyObject *name = PyTuple_GET_ITEM(pair, 0);
    long type = PyLong_AsLong(PyTuple_GET_ITEM(pair, 1));
    struct stat st;
    int regular = type == DT_UNKNOWN ? lstat_regular(dirfd, name, &st) : type == DT_REG;
    if (regular <= 0)
        return regular < 0 ? -1 : PyList_Append(rest, name);
    PyObject *rel = PyUnicode_Concat(rel_dir, name);
    if (rel == NULL)
        return -1;
    PyObject *answer = PyObject_CallOneArg(left, rel);
    int is_left = answer == NULL ? -1 : PyObject_IsTrue(answer);
    Py_XDECREF(answer);
    if (is_left != 0) {
        int failed = is_left < 0 || PyList_Append(ignored, rel) < 0;
        Py_DECREF(rel);
        return failed ? -1 : 0;
    }
    if (type != DT_UNKNOWN)
        regular = lstat_regular(dirfd, name, &st);
    if (regular <= 0) { /* gone, or changed since it was listed */
        Py_DECREF(rel);
        return regular < 0 ? -1 : PyList_Append(rest, name);
    }
    PyObject *items[2] = {rel, stamp_of(stamp_cls, &st)};
    if (items[1] == NULL) {
        Py_DECREF(rel);
        return -1;
    }
    PyObject *entry = named(entry_cls, 2, items);
    int failed = entry == NULL || PyList_Append(found, entry) < 0;
    Py_XDECREF(entry);
    return failed ? -1 : 0;
}

static PyObject *
regular_files(PyObject *self, PyObject *args)
{
    PyObject *here, *rel_dir, *left;
    PyTypeObject *entry_cls, *stamp_cls;
    if (!PyArg_ParseTuple(args, "O&UOO!O!:regular_files", PyUnicode_FSConverter, &here, &rel_dir, &left,
                          &PyType_Type, &entry_cls, &PyType_Type, &stamp_cls))
        return NULL;
    int dirfd = open(PyBytes_AS_STRING(here), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) {
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, here);
        Py_DECREF(here);
        return NULL;
    }
    Py_DECREF(here);
    int keep = dup(dirfd); /* fdopendir takes one; fstatat needs it after closedir */
    PyObject *listing = keep < 0 ? PyErr_SetFromErrno(PyExc_OSError) : sorted_listing(dirfd);
    if (keep < 0)
        close(dirfd);
    PyObject *found = PyList_New(0), *ignored = PyList_New(0), *rest = PyList_New(0);
    PyObject *result = NULL;
    if (listing != NULL && found != NULL && ignored != NULL && rest != NULL) {
        Py_ssize_t i, n = PyList_GET_SIZE(listing);
        for (i = 0; i < n; i++) {
            if (one_entry(PyList_GET_ITEM(listing, i), keep, rel_dir, left, entry_cls, stamp_cls, found, ignored,
                          rest) < 0)
                break;
        }
        if (i == n)
            result = PyTuple_Pack(3, found, ignored, rest);
    }
    if (keep >= 0)
        close(keep);
    Py_XDECREF(listing);
    Py_XDECREF(found);
    Py_XDECREF(ignored);
    Py_XDECREF(rest);
    return result;
}

/* ---- pack: members appended to the batch ---- */

typedef struct {
    PyObject *member; /* held while the GIL is released: name and path point into it */
    const char *name;
    Py_ssize_t name_len;
    const char *path;
    PyObject *encoded; /* the path's bytes, when it is not ASCII */
    long long size;
    int executable;
} Planned;

/* One member's header block, byte for byte tarstream.header()'s for an ASCII name of at most 100 characters. */
static void
header(char *h, const Planned *m)
{
    memset(h, 0, BLOCK);
    memcpy(h, m->name, (size_t)m->name_len);
    memcpy(h + 100, m->executable ? "0000755" : "0000644", 8);
    memcpy(h + 108, "0000000", 8);
    memcpy(h + 116, "0000000", 8);
    snprintf(h + 124, 12, "%011llo", m->size);
    memcpy(h + 136, "00000000000", 12);
    memset(h + 148, ' ', 8);
    h[156] = '0';
    memcpy(h + 257, "ustar\0" "00", 8);
    unsigned long sum = 0;
    for (int i = 0; i < BLOCK; i++)
        sum += (unsigned char)h[i];
    snprintf(h + 148, 7, "%06lo", sum);
    h[155] = ' ';
}

/* Whether C packs this member (1), Python does (0), or it is not a member (-1, an exception set). */
static int
plan(PyObject *item, long long chunk, Planned *m)
{
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) < 6) {
        PyErr_SetString(PyExc_TypeError, "a member is a tuple of six fields");
        return -1;
    }
    PyObject *name = PyTuple_GET_ITEM(item, 0), *path = PyTuple_GET_ITEM(item, 1);
    if (PyTuple_GET_ITEM(item, 5) != Py_None || !PyUnicode_Check(name) || !PyUnicode_Check(path) ||
        !PyUnicode_IS_ASCII(name) || PyUnicode_GET_LENGTH(name) > 100)
        return 0;
    int hashed = PyObject_IsTrue(PyTuple_GET_ITEM(item, 4));
    m->executable = PyObject_IsTrue(PyTuple_GET_ITEM(item, 3));
    m->size = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 2));
    if (hashed < 0 || m->executable < 0 || (m->size == -1 && PyErr_Occurred()))
        return -1;
    if (hashed || m->size < 0 || m->size > chunk)
        return 0;
    m->name = (const char *)PyUnicode_DATA(name);
    m->name_len = PyUnicode_GET_LENGTH(name);
    m->encoded = NULL;
    if (PyUnicode_IS_ASCII(path)) {
        m->path = (const char *)PyUnicode_DATA(path);
        if ((Py_ssize_t)strlen(m->path) != PyUnicode_GET_LENGTH(path))
            return 0; /* an embedded NUL: Python refuses it */
    } else {
        if (!PyUnicode_FSConverter(path, &m->encoded))
            return -1;
        m->path = PyBytes_AS_STRING(m->encoded);
    }
    Py_INCREF(item);
    m->member = item;
    return 1;
}

/* Header, bytes and padding of one member at out; 0, or -1 when the file cannot be opened or read in full. */
static int
put(char *out, const Planned *m)
{
    header(out, m);
    int fd = open(m->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    char *at = out + BLOCK;
    long long left = m->size;
    while (left > 0) {
        ssize_t got = read(fd, at, (size_t)left);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        at += got;
        left -= got;
    }
    close(fd);
    memset(at, 0, (size_t)((BLOCK - m->size % BLOCK) % BLOCK));
    return left == 0 ? 0 : -1;
}

static void
release(Planned *planned, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_XDECREF(planned[i].encoded);
        Py_XDECREF(planned[i].member);
    }
    PyMem_Free(planned);
}

static PyObject *
pack(PyObject *self, PyObject *args)
{
    PyObject *batch, *members;
    Py_ssize_t start;
    long long chunk;
    if (!PyArg_ParseTuple(args, "O!O!nL:pack", &PyByteArray_Type, &batch, &PyList_Type, &members, &start, &chunk))
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(members), base = PyByteArray_GET_SIZE(batch), total = 0, n = 0;
    Planned *planned = PyMem_Calloc((size_t)(count > start ? count - start : 1), sizeof(Planned));
    if (planned == NULL)
        return PyErr_NoMemory();
    /* As many members as C packs, up to the first that fills the chunk (the Python loop's flush point). */
    while (start + n < count && base + total < chunk) {
        int simple = plan(PyList_GET_ITEM(members, start + n), chunk, &planned[n]);
        if (simple < 0) {
            release(planned, n);
            return NULL;
        }
        if (simple == 0)
            break;
        total += BLOCK + (Py_ssize_t)((planned[n].size + BLOCK - 1) / BLOCK * BLOCK);
        n++;
    }
    Py_ssize_t done = 0, offset = base;
    if (n > 0 && PyByteArray_Resize(batch, base + total) == 0) {
        char *buffer = PyByteArray_AS_STRING(batch);
        Py_BEGIN_ALLOW_THREADS
        for (; done < n; done++) {
            if (put(buffer + offset, &planned[done]) < 0)
                break;
            offset += BLOCK + (Py_ssize_t)((planned[done].size + BLOCK - 1) / BLOCK * BLOCK);
        }
        Py_END_ALLOW_THREADS
        if (done < n && PyByteArray_Resize(batch, offset) < 0) /* the failed member: Python's to pack or refuse */
            done = -1;
    } else if (n > 0) {
        done = -1;
    }
    release(planned, n);
    return done < 0 ? NULL : PyLong_FromSsize_t(start + done);
}

static PyMethodDef methods[] = {
    {"regular_files", regular_files, METH_VARARGS,
     "regular_files(here, rel_dir, left, entry, stamp) -> (found, left_out, rest): the folder's regular files "
     "(not symlinks) that left(rel) keeps, as entry(rel, stamp(lstat fields)); those it leaves out, as rel; the "
     "names of every other entry. Each list in name order."},
    {"pack", pack, METH_VARARGS,
     "pack(batch, members, start, chunk) -> the index of the first member not packed: appends members from start "
     "(header, bytes, padding) until the batch reaches chunk, or at the first member Python must pack."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_tarloop", "The per-file loops of a code snapshot, in C.", -1, methods, NULL, NULL, NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__tarloop(void)
{
    return PyModule_Create(&module);
}
