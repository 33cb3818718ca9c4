/* ringtrace.stages._core, the scanner: the lines decode.Decoder reads, taken as the runtime writes them,
 * checked as the decoder checks them, and paired as they are read when linked to a Pairer.  See core.h. */
#include "core.h"

/* -- the site cache: the same site's bytes give the same str -------------------------------------- */

#define CACHE_SLOTS 4096
#define CACHE_FILL 2048

typedef struct {
    uint64_t hash;
    Py_ssize_t len;
    PyObject *str;
} CacheEntry;

static CacheEntry cache[CACHE_SLOTS];
static Py_ssize_t cache_fill;

static PyObject * /* borrowed */
site_str(const char *p, Py_ssize_t len)
{
    uint64_t h = 1469598103934665603ULL;
    for (Py_ssize_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)p[i]) * 1099511628211ULL;
    size_t i = (size_t)h & (CACHE_SLOTS - 1);
    for (;;) {
        CacheEntry *c = &cache[i];
        if (c->str == NULL)
            break;
        if (c->hash == h && c->len == len && memcmp(PyUnicode_DATA(c->str), p, (size_t)len) == 0)
            return c->str;
        i = (i + 1) & (CACHE_SLOTS - 1);
    }
    if (cache_fill >= CACHE_FILL) { /* a file with this many sites: start over (the strings live on where held) */
        for (size_t j = 0; j < CACHE_SLOTS; j++)
            Py_CLEAR(cache[j].str);
        cache_fill = 0;
        i = (size_t)h & (CACHE_SLOTS - 1);
    }
    PyObject *s = PyUnicode_New(len, 127);
    if (s == NULL)
        return NULL;
    memcpy(PyUnicode_DATA(s), p, (size_t)len);
    cache[i].hash = h;
    cache[i].len = len;
    cache[i].str = s;
    cache_fill++;
    return s;
}

/* -- the line scanner ---------------------------------------------------------------------------- */

typedef struct {
    int64_t depth, ring, tm;
    int begin, has_dp;
    int64_t tws, twe, hs, he, dps, dpe;
    const char *site;
    Py_ssize_t site_len;
} Parsed;

#define LIT(p, e, s)                                                                  \
    do {                                                                              \
        if ((e) - (p) < (Py_ssize_t)sizeof(s) - 1 || memcmp((p), (s), sizeof(s) - 1)) \
            return NULL;                                                              \
        (p) += sizeof(s) - 1;                                                         \
    } while (0)

/* A JSON integer as the runtime writes it: 0 or [1-9][0-9]{0,17} (anything else: not taken). */
static inline const char *
uint_at(const char *p, const char *e, int64_t *out)
{
    if (p >= e)
        return NULL;
    unsigned d = (unsigned)(unsigned char)*p - '0';
    if (d > 9)
        return NULL;
    p++;
    int64_t v = d;
    if (d == 0) {
        if (p < e && (unsigned)(unsigned char)*p - '0' <= 9)
            return NULL;
        *out = 0;
        return p;
    }
    const char *lim = e - p > 17 ? p + 17 : e;
    while (p < lim && (d = (unsigned)(unsigned char)*p - '0') <= 9) {
        v = v * 10 + d;
        p++;
    }
    if (p < e && (unsigned)(unsigned char)*p - '0' <= 9)
        return NULL;
    *out = v;
    return p;
}

#define UINT(p, e, dst)                          \
    do {                                         \
        if (((p) = uint_at((p), (e), &(dst))) == NULL) \
            return NULL;                         \
    } while (0)

/* One line at ``p`` (it ends at a newline or at ``e``), written exactly as the runtime writes a
 * record: returns where the next line starts, or NULL when the line is anything else. */
static const char *
parse_line(const char *p, const char *e, Parsed *r, Py_ssize_t max_line)
{
    const char *start = p;
    LIT(p, e, "{\"site\": \"");
    const char *q = memchr(p, '"', (size_t)(e - p));
    if (q == NULL)
        return NULL;
    for (const char *c = p; c < q; c++) {
        unsigned char ch = (unsigned char)*c;
        if (ch < 0x20 || ch > 0x7e || ch == '\\')
            return NULL;
    }
    r->site = p;
    r->site_len = q - p;
    p = q;
    LIT(p, e, "\", \"phase\": \"");
    if (e - p >= 6 && memcmp(p, "begin\"", 6) == 0) {
        r->begin = 1;
        p += 6;
    } else if (e - p >= 4 && memcmp(p, "end\"", 4) == 0) {
        r->begin = 0;
        p += 4;
    } else {
        return NULL;
    }
    LIT(p, e, ", \"depth\": ");
    UINT(p, e, r->depth);
    LIT(p, e, ", \"ring\": ");
    UINT(p, e, r->ring);
    LIT(p, e, ", \"" RT_RESOURCE_0 "_start\": ");
    UINT(p, e, r->tws);
    LIT(p, e, ", \"" RT_RESOURCE_0 "_end\": ");
    UINT(p, e, r->twe);
    LIT(p, e, ", \"" RT_RESOURCE_1 "_start\": ");
    UINT(p, e, r->hs);
    LIT(p, e, ", \"" RT_RESOURCE_1 "_end\": ");
    UINT(p, e, r->he);
    static const char dp_key[] = ", \"" RT_RESOURCE_2 "_start\": ";
    if (e - p >= (Py_ssize_t)sizeof dp_key - 1 && memcmp(p, dp_key, sizeof dp_key - 1) == 0) {
        p += sizeof dp_key - 1;
        UINT(p, e, r->dps);
        LIT(p, e, ", \"" RT_RESOURCE_2 "_end\": ");
        UINT(p, e, r->dpe);
        r->has_dp = 1;
    } else {
        r->has_dp = 0;
        r->dps = r->dpe = 0;
    }
    LIT(p, e, ", \"tensormap\": ");
    UINT(p, e, r->tm);
    LIT(p, e, "}");
    if (p - start > max_line)
        return NULL;
    if (p == e)
        return p;
    return *p == '\n' ? p + 1 : NULL;
}

typedef struct {
    char has, has_raw, dirty, begin, dp_none, has_cap;
    int64_t line, depth, tm;
    PyObject *site; /* held */
    i128 tws, twe, hs, he, dps, dpe, raw, cap;
} RingState;

typedef struct {
    PyObject_HEAD
    Pairer *pairer; /* held, or NULL: records go to ``out`` only */
    int keep_records;
    int configured, wraps, need_dp, drop_dp;
    Py_ssize_t rings, max_line;
    RingState *rs;
} Scanner;

static void
scanner_clear_rings(Scanner *self)
{
    for (Py_ssize_t i = 0; i < self->rings; i++)
        Py_CLEAR(self->rs[i].site);
    PyMem_Free(self->rs);
    self->rs = NULL;
    self->rings = 0;
}

static int
Scanner_init(Scanner *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"pairer", "keep_records", NULL};
    PyObject *pairer = Py_None;
    int keep = 1;
    if (!bound() || !PyArg_ParseTupleAndKeywords(args, kwds, "|Op", kwlist, &pairer, &keep))
        return -1;
    if (pairer != Py_None && !PyObject_TypeCheck(pairer, &PairerType)) {
        PyErr_SetString(PyExc_TypeError, "pairer must be a ringtrace.stages._core.Pairer or None");
        return -1;
    }
    Py_XSETREF(self->pairer, pairer == Py_None ? NULL : (Pairer *)Py_NewRef(pairer));
    self->keep_records = keep || pairer == Py_None;
    return 0;
}

static void
Scanner_dealloc(Scanner *self)
{
    scanner_clear_rings(self);
    Py_XDECREF(self->pairer);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The file's metadata as the decoder read it, and its version's rule (decode.VERSIONS: the scanner holds
 * no version rule of its own). */
static PyObject *
Scanner_configure(Scanner *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"wraps", "dep_pool", "rings", "heap_max", "max_line", NULL};
    int wraps, dep_pool;
    Py_ssize_t rings, max_line;
    PyObject *heap;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "ppnOn", kwlist, &wraps, &dep_pool, &rings, &heap, &max_line))
        return NULL;
    scanner_clear_rings(self);
    self->configured = 0;
    if (rings <= 0 || rings > MAX_RINGS)
        Py_RETURN_FALSE;
    PyObject *seq = PySequence_Fast(heap, "heap_max must be a sequence");
    if (seq == NULL)
        return NULL;
    if ((self->rs = PyMem_Calloc((size_t)rings, sizeof(RingState))) == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    self->rings = rings;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < rings && i < n; i++) {
        i128 cap;
        if (i128_from(PySequence_Fast_GET_ITEM(seq, i), &cap)) {
            Py_DECREF(seq);
            scanner_clear_rings(self);
            return NULL;
        }
        self->rs[i].has_cap = cap > 0;
        self->rs[i].cap = cap;
    }
    Py_DECREF(seq);
    self->wraps = wraps;
    self->need_dp = dep_pool;
    self->drop_dp = !dep_pool;
    self->max_line = max_line;
    self->configured = 1;
    Py_RETURN_TRUE;
}

/* v4/v5: decode.Decoder._unroll */
static void
unroll(const RingState *s, i128 *tail, i128 *head)
{
    if (!s->has_cap)
        return;
    i128 cap = s->cap, raw_tail = *tail, raw_head = *head, h;
    if (!s->has_raw || !s->has)
        h = raw_head < raw_tail ? raw_head + cap : raw_head;
    else
        h = s->he + pymod(raw_head - s->raw, cap);
    *tail = h - pymod(raw_head - raw_tail, cap);
    *head = h;
}

static PyObject *
Scanner_scan(Scanner *self, PyObject *args)
{
    Py_buffer buf;
    Py_ssize_t start, end;
    long long line;
    PyObject *out;
    if (!PyArg_ParseTuple(args, "y*nnLO!", &buf, &start, &end, &line, &PyList_Type, &out))
        return NULL;
    if (start < 0 || end > buf.len || start > end) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "start and end must lie within the buffer");
        return NULL;
    }
    const char *base = buf.buf, *p = base + start, *e = base + end;
    long long lines = 0, records = 0;
    Pairer *pairer = self->pairer;
    PyObject *events = pairer ? pairer->pending : NULL;
    int failed = 0;
    while (self->configured && p < e) {
        Parsed r;
        const char *next = parse_line(p, e, &r, self->max_line);
        if (next == NULL || r.depth > MAX_DEPTH || r.ring >= self->rings || (self->need_dp && !r.has_dp))
            break;
        if (self->drop_dp)
            r.has_dp = 0;
        RingState *s = &self->rs[r.ring];
        i128 hs = r.hs, he = r.he;
        if (self->wraps)
            unroll(s, &hs, &he);
        i128 dps = r.has_dp ? r.dps : 0, dpe = r.has_dp ? r.dpe : 0;
        if (s->has && (r.tws < s->tws || r.twe < s->twe || dps < (s->dp_none ? 0 : s->dps)
                       || dpe < (s->dp_none ? 0 : s->dpe) || (!self->wraps && (hs < s->hs || he < s->he))))
            break; /* going backwards: the Python decoder says which counter */
        PyObject *site = site_str(r.site, r.site_len);
        if (site == NULL) {
            failed = 1;
            break;
        }
        Rec rec = {line + lines, 0, r.depth, r.ring, r.tm, site, r.begin, !r.has_dp, !r.has_dp,
                   r.tws, r.twe, hs, he, r.dps, r.dpe};
        if (!r.has_dp)
            rec.dps = rec.dpe = 0;
        s->has = s->has_raw = s->dirty = 1;
        s->raw = r.he;
        s->line = rec.line;
        s->depth = r.depth;
        s->begin = (char)r.begin;
        s->tm = r.tm;
        s->dp_none = (char)!r.has_dp;
        s->tws = r.tws;
        s->twe = r.twe;
        s->hs = hs;
        s->he = he;
        s->dps = dps;
        s->dpe = dpe;
        set_site(&s->site, site);
        lines++;
        records++;
        p = next;
        if (self->keep_records) {
            PyObject *obj = record_object(&rec);
            if (obj == NULL || PyList_Append(out, obj)) {
                Py_XDECREF(obj);
                failed = 1;
                break;
            }
            Py_DECREF(obj);
        }
        if (pairer != NULL) {
            rec.serial = ++pairer->serial;
            if (pair_one(pairer, &rec, events)) {
                failed = 1;
                break;
            }
        }
    }
    Py_ssize_t pos = p - base;
    PyBuffer_Release(&buf);
    if (failed)
        return NULL;
    return Py_BuildValue("nLL", pos, lines, records);
}

/* The rings the scanner moved since the last export, into the Python decoder's ``_last`` and
 * ``_raw_heap`` (before a line is read by the Python decoder). */
static PyObject *
Scanner_export(Scanner *self, PyObject *args)
{
    PyObject *last, *raw_heap;
    if (!PyArg_ParseTuple(args, "O!O!", &PyDict_Type, &last, &PyDict_Type, &raw_heap))
        return NULL;
    for (Py_ssize_t i = 0; i < self->rings; i++) {
        RingState *s = &self->rs[i];
        if (!s->dirty)
            continue;
        Rec r = {s->line, 0, s->depth, (int64_t)i, s->tm, s->site, s->begin, s->dp_none, s->dp_none,
                 s->tws, s->twe, s->hs, s->he, s->dps, s->dpe};
        PyObject *key = PyLong_FromSsize_t(i), *obj = record_object(&r), *raw = long_from(s->raw);
        int rc = (key && obj && raw) ? (PyDict_SetItem(last, key, obj) || PyDict_SetItem(raw_heap, key, raw)) : -1;
        Py_XDECREF(key); Py_XDECREF(obj); Py_XDECREF(raw);
        if (rc)
            return NULL;
        s->dirty = 0;
    }
    Py_RETURN_NONE;
}

/* The Python decoder's ``_last`` and ``_raw_heap`` into the scanner (after it read a line). */
static PyObject *
Scanner_load(Scanner *self, PyObject *args)
{
    PyObject *last, *raw_heap;
    if (!PyArg_ParseTuple(args, "O!O!", &PyDict_Type, &last, &PyDict_Type, &raw_heap))
        return NULL;
    for (Py_ssize_t i = 0; i < self->rings; i++) {
        RingState *s = &self->rs[i];
        s->has = s->has_raw = s->dirty = 0;
    }
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(last, &pos, &key, &value)) {
        Py_ssize_t ring = PyLong_AsSsize_t(key);
        if (ring == -1 && PyErr_Occurred())
            return NULL;
        if (ring < 0 || ring >= self->rings)
            continue;
        RingState *s = &self->rs[ring];
        Rec r;
        if (rec_from(value, &r)) {
            Py_XDECREF(r.site);
            return NULL;
        }
        s->has = 1;
        s->line = r.line;
        s->depth = r.depth;
        s->begin = (char)r.begin;
        s->tm = r.tm;
        s->dp_none = r.dps_none || r.dpe_none;
        s->tws = r.tws;
        s->twe = r.twe;
        s->hs = r.hs;
        s->he = r.he;
        s->dps = r.dps;
        s->dpe = r.dpe;
        set_site(&s->site, r.site);
        Py_DECREF(r.site);
        if (r.dps_none != r.dpe_none) /* a mix the decoder never makes: keep it exact by not scanning */
            self->configured = 0;
    }
    pos = 0;
    while (PyDict_Next(raw_heap, &pos, &key, &value)) {
        Py_ssize_t ring = PyLong_AsSsize_t(key);
        if (ring == -1 && PyErr_Occurred())
            return NULL;
        if (ring < 0 || ring >= self->rings)
            continue;
        if (i128_from(value, &self->rs[ring].raw))
            return NULL;
        self->rs[ring].has_raw = 1;
    }
    Py_RETURN_NONE;
}

static PyMethodDef Scanner_methods[] = {
    {"configure", (PyCFunction)(void (*)(void))Scanner_configure, METH_VARARGS | METH_KEYWORDS,
     "configure(wraps, dep_pool, rings, heap_max, max_line) -> bool: the metadata the decoder read and its "
     "version's rule (decode.VERSIONS; False: the scanner takes no line of this file)."},
    {"scan", (PyCFunction)Scanner_scan, METH_VARARGS,
     "scan(buf, start, end, line, out) -> (pos, lines, records): take lines of buf[start:end] from its start "
     "(the first is line ``line``) up to the first line not taken, which starts at ``pos``."},
    {"export", (PyCFunction)Scanner_export, METH_VARARGS, "export(last, raw_heap): see the C source."},
    {"load", (PyCFunction)Scanner_load, METH_VARARGS, "load(last, raw_heap): see the C source."},
    {NULL}};

PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ringtrace.stages._core.Scanner",
    .tp_doc = "The compiled line scanner of ringtrace.stages.decode.Decoder (see ringtrace.stages.core).",
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Scanner_init,
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_methods = Scanner_methods,
};
