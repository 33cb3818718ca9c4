/* ringtrace.stages._core: the compiled reading core (issue 27).
 *
 * Two types, each the compiled twin of a pure-Python stage, which stays the reference:
 *
 *   Scanner  the line scanner of ringtrace.stages.decode.Decoder: it takes the lines written
 *            exactly as the runtime writes them ({"site": "...", "phase": "begin", "depth": 1, ...},
 *            keys in the runtime's order, plain integers, an ASCII site without escapes) and makes
 *            the decoder's checks on them (depth, ring, dep pool, counters going backwards, the
 *            v4/v5 heap unrolling).  It stops at the first line it does not take, and the caller
 *            (ringtrace.stages.core.LinkedDecoder) reads that line with the Python decoder, so every
 *            problem keeps its line, reason and message.  It never reports a problem itself.
 *   Pairer   ringtrace.stages.pair.Pairer: the same pairing, running maxima, pinned, requests,
 *            depth cap, events and summary.  A Scanner linked to a Pairer pairs each line it takes
 *            without making a Record object (the summary-only readers), or also makes it (sinks
 *            that read records).  Asked to (``bands``), it also folds the report's bands as
 *            ringtrace.stages.bands.Folder does, from every record and paired scope, without an object.
 *
 * Counters are 128-bit: the decoder's counters fit in int64, but v4/v5 heap counters are unrolled
 * into monotonic ones that Python would let grow past it.  Everything runs under the GIL.
 * tests/stages/test_core.py feeds both paths the same bytes and requires identical results.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

typedef __int128 i128;

#define MAX_DEPTH 64   /* decode.MAX_DEPTH */
#define DEPTH_CAP 63   /* pair.DEPTH_CAP */
#define NEST 66        /* len(Pairer._nest) */
#define DEP_POOL_BATCH 64 /* ringtrace.model.runtime.DEP_POOL_BATCH */
#define MAX_RINGS 4096 /* the scanner leaves files with more rings in their metadata to Python */

/* -- the Python types, bound once by ringtrace.stages.core (bind) ------------------------------- */

static PyObject *T_Record, *T_Usage, *T_Scope, *T_Abandoned, *T_UnmatchedEnd, *T_OpenScope, *T_Peak,
    *T_TensormapPeak, *T_RunSummary, *T_CappedSummary, *T_Band, *T_Bands, *RESOURCES;
static PyObject *S_begin, *S_end, *S_empty, *S_capacity, *S_version, *S_tensormap_max, *S_heap_max, *S_total,
    *S_line, *S_site, *S_phase, *S_depth, *S_ring, *S_tws, *S_twe, *S_hs, *S_he, *S_dps, *S_dpe, *S_tm;

static int
bound(void)
{
    if (T_Record == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "ringtrace.stages._core: bind() was not called");
        return 0;
    }
    return 1;
}

/* -- integers ------------------------------------------------------------------------------------ */

static PyObject *
long_from(i128 v)
{
    if (v >= INT64_MIN && v <= INT64_MAX)
        return PyLong_FromLongLong((long long)v);
    int neg = v < 0;
    unsigned __int128 u = neg ? -(unsigned __int128)v : (unsigned __int128)v;
    PyObject *hi = PyLong_FromUnsignedLongLong((unsigned long long)(u >> 64));
    PyObject *lo = PyLong_FromUnsignedLongLong((unsigned long long)u);
    PyObject *sh = PyLong_FromLong(64);
    PyObject *res = NULL, *t = NULL;
    if (hi && lo && sh && (t = PyNumber_Lshift(hi, sh)) != NULL)
        res = PyNumber_Or(t, lo);
    Py_XDECREF(hi); Py_XDECREF(lo); Py_XDECREF(sh); Py_XDECREF(t);
    if (res && neg) {
        t = PyNumber_Negative(res);
        Py_DECREF(res);
        res = t;
    }
    return res;
}

/* ``o`` (an int) into ``*out``; values up to 2**127 in magnitude (the decoder's never come near). */
static int
i128_from(PyObject *o, i128 *out)
{
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (x == -1 && PyErr_Occurred())
        return -1;
    if (!overflow) {
        *out = x;
        return 0;
    }
    PyObject *base = PyLong_FromUnsignedLongLong(1ULL << 63), *two = PyLong_FromLong(2), *full = NULL, *qr = NULL;
    int rc = -1;
    if (base && two && (full = PyNumber_Multiply(base, two)) != NULL && (qr = PyNumber_Divmod(o, full)) != NULL) {
        long long q = PyLong_AsLongLong(PyTuple_GET_ITEM(qr, 0));
        unsigned long long r = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(qr, 1));
        if (!PyErr_Occurred() && q >= -(1LL << 62) && q < (1LL << 62)) {
            *out = (i128)q * ((i128)1 << 64) + (i128)r;
            rc = 0;
        } else if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_OverflowError, "counter too large for the compiled core");
        }
    }
    Py_XDECREF(base); Py_XDECREF(two); Py_XDECREF(full); Py_XDECREF(qr);
    return rc;
}

static inline i128
floordiv(i128 a, i128 b)
{
    i128 q = a / b;
    if (a % b != 0 && ((a < 0) != (b < 0)))
        q--;
    return q;
}

static inline i128
pymod(i128 a, i128 b)
{
    i128 r = a % b;
    if (r != 0 && ((r < 0) != (b < 0)))
        r += b;
    return r;
}

/* ``type(*args)``: steals every argument (any may be NULL after a failed allocation: then NULL). */
static PyObject *
make(PyObject *type, int n, ...)
{
    PyObject *args[20];
    va_list ap;
    int ok = 1;
    va_start(ap, n);
    for (int i = 0; i < n; i++) {
        args[i] = va_arg(ap, PyObject *);
        if (args[i] == NULL)
            ok = 0;
    }
    va_end(ap);
    PyObject *res = ok ? PyObject_Vectorcall(type, args, (size_t)n, NULL) : NULL;
    for (int i = 0; i < n; i++)
        Py_XDECREF(args[i]);
    return res;
}

#define NEW(o) Py_NewRef(o)
#define L(v) long_from(v)

/* -- records ------------------------------------------------------------------------------------- */

typedef struct {
    int64_t line, serial, depth, ring, tm;
    PyObject *site; /* borrowed while passed around; strong where stored (stack, last, tm_site) */
    int begin;
    char dps_none, dpe_none;
    i128 tws, twe, hs, he, dps, dpe;
} Rec;

static inline i128 dps0(const Rec *r) { return r->dps_none ? 0 : r->dps; }
static inline i128 dpe0(const Rec *r) { return r->dpe_none ? 0 : r->dpe; }

static PyObject *
opt_long(char none, i128 v)
{
    return none ? NEW(Py_None) : long_from(v);
}

static PyObject *
record_object(const Rec *r)
{
    return make(T_Record, 12, PyLong_FromLongLong(r->line), NEW(r->site), NEW(r->begin ? S_begin : S_end),
                PyLong_FromLongLong(r->depth), PyLong_FromLongLong(r->ring), L(r->tws), L(r->twe), L(r->hs),
                L(r->he), opt_long(r->dps_none, r->dps), opt_long(r->dpe_none, r->dpe),
                PyLong_FromLongLong(r->tm));
}

static int
get_i64(PyObject *o, PyObject *name, int64_t *out)
{
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL)
        return -1;
    long long x = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (x == -1 && PyErr_Occurred())
        return -1;
    *out = x;
    return 0;
}

static int
get_i128(PyObject *o, PyObject *name, i128 *out, char *none)
{
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL)
        return -1;
    int rc = 0;
    if (none != NULL && v == Py_None) {
        *none = 1;
        *out = 0;
    } else {
        if (none != NULL)
            *none = 0;
        rc = i128_from(v, out);
    }
    Py_DECREF(v);
    return rc;
}

/* A Record object as a Rec; ``r->site`` is a new reference (the caller releases it). */
static int
rec_from(PyObject *o, Rec *r)
{
    memset(r, 0, sizeof *r);
    PyObject *phase;
    if (get_i64(o, S_line, &r->line) || get_i64(o, S_depth, &r->depth) || get_i64(o, S_ring, &r->ring)
        || get_i64(o, S_tm, &r->tm) || get_i128(o, S_tws, &r->tws, NULL) || get_i128(o, S_twe, &r->twe, NULL)
        || get_i128(o, S_hs, &r->hs, NULL) || get_i128(o, S_he, &r->he, NULL)
        || get_i128(o, S_dps, &r->dps, &r->dps_none) || get_i128(o, S_dpe, &r->dpe, &r->dpe_none))
        return -1;
    if (r->depth < 0 || r->depth >= NEST) {
        PyErr_Format(PyExc_ValueError, "depth %lld outside 0..%d", (long long)r->depth, NEST - 1);
        return -1;
    }
    if ((phase = PyObject_GetAttr(o, S_phase)) == NULL)
        return -1;
    r->begin = PyObject_RichCompareBool(phase, S_begin, Py_EQ);
    Py_DECREF(phase);
    if (r->begin < 0)
        return -1;
    if ((r->site = PyObject_GetAttr(o, S_site)) == NULL)
        return -1;
    return 0;
}

/* -- Pairer -------------------------------------------------------------------------------------- */

typedef struct {
    i128 twe, he, dpe;
    char dpe_none;
} Cnt;

static inline Cnt cnt(const Rec *r) { Cnt c = {r->twe, r->he, r->dpe, r->dpe_none}; return c; }

typedef struct {
    char used, has_own;
    int64_t serial; /* the open scope's begin (``st[0] is p``) */
    Cnt acc, own;
} Nest;

typedef struct {
    int64_t ring;
    char has_last, in_rings;
    Rec last; /* the ring's latest record (site held) */
    /* pair._Ring */
    int64_t scopes;
    i128 maxima[12];
    PyObject *sites[9]; /* held; NULL is "" */
    int64_t lines[9];
    i128 request[2];
    char nested, has_first, first_dps_none;
    i128 first_tws, first_hs, first_dps;
    i128 heap_held; /* pair._Ring.heap_held: the largest heap alloc of a scope less a possible skipped end */
    char has_batch, batch_full; /* Peak.batch: the record it is read from (pair.Pairer._batch) */
    i128 batch; /* that record's dep_pool_end - dep_pool_start (None as 0) */
    struct Band *bands[6]; /* the fold: occupancy of each resource, then high water of each (NULL: no sample) */
} Slot;

typedef struct {
    PyObject_HEAD
    PyObject *meta;
    i128 *heap_caps; /* meta.heap_max; <= 0: unknown */
    Py_ssize_t n_heap_caps;
    Rec *stack; /* open scopes, depths strictly increasing: at most NEST */
    Py_ssize_t n;
    Nest *nest; /* NEST entries, allocated at the first nested scope */
    Slot **slots;
    Py_ssize_t n_slots;
    int32_t direct[64]; /* ring -> slot index + 1, for rings 0..63 */
    int64_t serial;
    int64_t records, scopes, unmatched_begins, unmatched_ends, max_depth, depth_cap_line, uncounted, last_line;
    int64_t tm_peak, tm_live;
    PyObject *tm_site; /* held */
    PyObject *pending; /* list of events made by linked pushes, or NULL when events are not kept */
    int keep_events;
    PyObject *sites; /* set: every site that began (RunSummary.sites) */
    /* the fold of the bands (bands.Folder), when fold_width > 0 */
    Py_ssize_t fold_width;
    char fold_started;
    int64_t fold_shift, fold_first; /* every band's first shift (from the metadata at the first record) */
    struct Band *fold_tm;
} Pairer;

static PyTypeObject PairerType;

static void
rec_release(Rec *r)
{
    Py_CLEAR(r->site);
}

static void
rec_store(Rec *dst, const Rec *src)
{
    PyObject *old = dst->site;
    *dst = *src;
    Py_XINCREF(dst->site);
    Py_XDECREF(old);
}

static Slot *
slot_for(Pairer *self, int64_t ring)
{
    if (ring >= 0 && ring < 64) {
        int32_t i = self->direct[ring];
        if (i)
            return self->slots[i - 1];
    } else {
        for (Py_ssize_t i = 0; i < self->n_slots; i++)
            if (self->slots[i]->ring == ring)
                return self->slots[i];
    }
    Slot **grown = PyMem_Realloc(self->slots, sizeof(Slot *) * (size_t)(self->n_slots + 1));
    if (grown == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    self->slots = grown;
    Slot *s = PyMem_Calloc(1, sizeof(Slot));
    if (s == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    s->ring = ring;
    grown[self->n_slots++] = s;
    if (ring >= 0 && ring < 64)
        self->direct[ring] = (int32_t)self->n_slots;
    return s;
}

static Slot *
ring_for(Pairer *self, int64_t ring, const Rec *first)
{
    Slot *s = slot_for(self, ring);
    if (s != NULL && !s->in_rings) {
        s->in_rings = 1;
        s->has_first = 1;
        s->first_tws = first->tws;
        s->first_hs = first->hs;
        s->first_dps = first->dps;
        s->first_dps_none = first->dps_none;
    }
    return s;
}

static int
heap_cap(Pairer *self, int64_t ring, i128 *cap)
{
    Py_ssize_t n = self->n_heap_caps;
    if (ring < 0) /* Meta.capacity indexes a tuple: a negative ring counts from its end */
        ring += n;
    if (ring < 0 || ring >= n || self->heap_caps[ring] <= 0)
        return 0;
    *cap = self->heap_caps[ring];
    return 1;
}

/* pair.held_bytes: heap bytes a scope surely allocated between two heads (``cap`` 0: unknown) */
static i128
held_bytes(i128 begin, i128 end, i128 cap)
{
    if (cap != 0 && end > begin && floordiv(begin, cap) != floordiv(end - 1, cap))
        return end - floordiv(end - 1, cap) * cap;
    return end - begin;
}

/* pair.Pairer._heap_cap: Meta.capacity("heap", ring) or 0 */
static i128
heap_cap0(Pairer *self, int64_t ring)
{
    i128 cap;
    return heap_cap(self, ring, &cap) ? cap : 0;
}

static void
pin(Slot *ring, i128 t, i128 h, i128 d)
{
    i128 *m = ring->maxima;
    if (t > m[9]) m[9] = t;
    if (h > m[10]) m[10] = h;
    if (d > m[11]) m[11] = d;
}

static inline i128 max0(i128 v) { return v > 0 ? v : 0; }

static int
mark(Pairer *self, const Rec *p)
{
    Slot *ring = ring_for(self, p->ring, p);
    if (ring == NULL)
        return -1;
    if (!ring->nested) {
        ring->nested = 1;
        i128 *m = ring->maxima;
        m[9] = max0(m[2]);
        m[10] = max0(m[5]);
        m[11] = max0(m[8]);
    }
    if (self->nest == NULL && (self->nest = PyMem_Calloc(NEST, sizeof(Nest))) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Nest *st = &self->nest[p->depth];
    if (!st->used || st->serial != p->serial) {
        st->used = 1;
        st->serial = p->serial;
        st->acc = cnt(p);
        st->has_own = 0;
    }
    return 0;
}

static void
held_from_own(Pairer *self, Slot *ring, const Nest *st, const Rec *e)
{
    Cnt own = st->own;
    int has = st->has_own;
    if (!has && e->twe > st->acc.twe) {
        own = st->acc;
        has = 1;
    }
    if (has)
        pin(ring, e->twe - own.twe, held_bytes(own.he, e->he, heap_cap0(self, e->ring)),
            dpe0(e) - (own.dpe_none ? 0 : own.dpe));
}

static void
nested_end(Pairer *self, Slot *ring, const Rec *b, const Rec *e, i128 t, i128 h, i128 d)
{
    Nest *nest = self->nest;
    if (self->n && self->stack[self->n - 1].ring == b->ring) {
        const Rec *p = &self->stack[self->n - 1];
        Nest *st = nest ? &nest[p->depth] : NULL;
        if (st == NULL || !st->used || st->serial != p->serial || st->has_own)
            return;
        if (b->twe > st->acc.twe) {
            st->own = st->acc;
            st->has_own = 1;
            return;
        }
        st->acc = cnt(e);
    }
    Nest *own = nest ? &nest[b->depth] : NULL;
    if (own != NULL && own->used && own->serial == b->serial) {
        own->used = 0;
        held_from_own(self, ring, own, e);
    } else {
        (void)h;
        pin(ring, t, held_bytes(b->he, e->he, heap_cap0(self, e->ring)), d);
    }
}

static void
request(Pairer *self, Slot *ring, const Rec *b, const Rec *e, i128 h, i128 d)
{
    i128 cap;
    if (heap_cap(self, e->ring, &cap) && floordiv(b->he, cap) == floordiv(e->he - 1, cap) && h > ring->request[0])
        ring->request[0] = h;
    if (d > ring->request[1])
        ring->request[1] = d;
}

static int
emit(PyObject *events, PyObject *ev)
{
    if (ev == NULL)
        return -1;
    int rc = PyList_Append(events, ev);
    Py_DECREF(ev);
    return rc;
}

static PyObject *
open_scope(const Rec *b)
{
    return make(T_OpenScope, 4, NEW(b->site), PyLong_FromLongLong(b->depth), PyLong_FromLongLong(b->ring),
                PyLong_FromLongLong(b->line));
}

static int
abandon(Pairer *self, int64_t min_depth, int64_t line, PyObject *events)
{
    while (self->n && self->stack[self->n - 1].depth >= min_depth) {
        Rec *b = &self->stack[--self->n];
        self->unmatched_begins++;
        int rc = 0;
        if (events != NULL)
            rc = emit(events, make(T_Abandoned, 2, open_scope(b), PyLong_FromLongLong(line)));
        rec_release(b);
        if (rc)
            return -1;
    }
    return 0;
}

static PyObject *
usage(i128 a, i128 b, i128 c)
{
    return make(T_Usage, 3, L(a), L(b), L(c));
}

static void
set_site(PyObject **slot, PyObject *site)
{
    PyObject *old = *slot;
    *slot = Py_NewRef(site);
    Py_XDECREF(old);
}

/* -- the bands: ringtrace.stages.bands (Series, Folder) ------------------------------------------ */

typedef struct {
    int64_t x, x_hi, depth, begin; /* first x; x of the greatest; the depth and begin line carried with it */
    i128 lo, hi;
    PyObject *site; /* held: the site carried with the greatest */
} Col;

typedef struct Band {
    int64_t shift;
    Py_ssize_t n, cap;
    Col *cols;
} Band;

/* ``x >> shift`` as Python computes it (any shift) */
static inline int64_t
col_of(int64_t x, int64_t shift)
{
    return shift >= 63 ? (x < 0 ? -1 : 0) : x >> shift;
}

static Band *
band_new(int64_t shift)
{
    Band *s = PyMem_Calloc(1, sizeof(Band));
    if (s == NULL)
        PyErr_NoMemory();
    else
        s->shift = shift;
    return s;
}

static void
band_free(Band *s)
{
    if (s == NULL)
        return;
    for (Py_ssize_t i = 0; i < s->n; i++)
        Py_XDECREF(s->cols[i].site);
    PyMem_Free(s->cols);
    PyMem_Free(s);
}

/* Series._halve: columns merged in pairs (each keeps its least, and its first greatest with what it carries) */
static void
band_halve(Band *s)
{
    s->shift++;
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < s->n; i++) {
        Col *c = &s->cols[i];
        if (k && col_of(s->cols[k - 1].x, s->shift) == col_of(c->x, s->shift)) {
            Col *m = &s->cols[k - 1];
            if (c->lo < m->lo)
                m->lo = c->lo;
            if (c->hi > m->hi) {
                m->hi = c->hi;
                m->x_hi = c->x_hi;
                m->depth = c->depth;
                m->begin = c->begin;
                Py_XSETREF(m->site, c->site); /* c's reference moves to m */
            } else {
                Py_CLEAR(c->site);
            }
        } else {
            if (k != i)
                s->cols[k] = *c; /* moved, with its reference */
            k++;
        }
    }
    s->n = k;
}

/* Series.add: one sample at ``x`` (never less than the last) */
static int
band_add(Band *s, Py_ssize_t width, int64_t x, i128 v, PyObject *site, int64_t depth, int64_t begin)
{
    for (;;) {
        int64_t b = col_of(x, s->shift);
        if (s->n) {
            Col *last = &s->cols[s->n - 1];
            if (col_of(last->x, s->shift) == b) {
                if (v < last->lo)
                    last->lo = v;
                if (v > last->hi) {
                    last->hi = v;
                    last->x_hi = x;
                    last->depth = depth;
                    last->begin = begin;
                    set_site(&last->site, site);
                }
                return 0;
            }
            if (b >= 2 * (int64_t)width) {
                band_halve(s);
                continue;
            }
        }
        if (s->n == s->cap) {
            Py_ssize_t cap = s->cap ? 2 * s->cap : 16;
            Col *grown = PyMem_Realloc(s->cols, sizeof(Col) * (size_t)cap);
            if (grown == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            s->cols = grown;
            s->cap = cap;
        }
        Col c = {x, x, depth, begin, v, v, Py_NewRef(site)};
        s->cols[s->n++] = c;
        return 0;
    }
}

/* bands.span_of, as a shift: max(0, (span - 1).bit_length()) */
static int
fold_start(Pairer *self)
{
    self->fold_started = 1;
    self->fold_shift = 0;
    if (self->meta == Py_None)
        return 0;
    PyObject *total = PyObject_GetAttr(self->meta, S_total);
    if (total == NULL)
        return -1;
    int truth = PyObject_IsTrue(total);
    i128 t = 0;
    int rc = truth > 0 ? i128_from(total, &t) : truth;
    Py_DECREF(total);
    if (rc < 0 || truth == 0)
        return rc < 0 ? -1 : 0;
    i128 lines = t + 1;
    i128 span = lines ? -floordiv(-lines, (i128)self->fold_width) : 1;
    i128 v = span - 1;
    if (v < 0)
        v = -v;
    while (v > 0) {
        self->fold_shift++;
        v >>= 1;
    }
    return 0;
}

static Band *
slot_band(Pairer *self, Slot *s, int k)
{
    if (s->bands[k] == NULL)
        s->bands[k] = band_new(self->fold_shift);
    return s->bands[k];
}

/* Folder.push of one record: the tensormap, and each resource's head - tail on its ring */
static int
fold_record(Pairer *self, Slot *s, const Rec *e)
{
    if (!self->fold_started) {
        if (fold_start(self) || (self->fold_tm = band_new(self->fold_shift)) == NULL)
            return -1;
        self->fold_first = e->line;
    }
    Py_ssize_t w = self->fold_width;
    Band *tw, *hp, *dp = NULL;
    if ((tw = slot_band(self, s, 0)) == NULL || (hp = slot_band(self, s, 1)) == NULL
        || (!e->dpe_none && (dp = slot_band(self, s, 2)) == NULL))
        return -1;
    if (band_add(self->fold_tm, w, e->line, e->tm, e->site, e->depth, 0)
        || band_add(tw, w, e->line, e->twe - e->tws, e->site, e->depth, 0)
        || band_add(hp, w, e->line, e->he - e->hs, e->site, e->depth, 0))
        return -1;
    return dp ? band_add(dp, w, e->line, e->dpe - dps0(e), e->site, e->depth, 0) : 0;
}

/* Folder.push of one paired scope: each resource's high water on the end's ring, at the end's line */
static int
fold_scope(Pairer *self, Slot *s, const Rec *b, const Rec *e, i128 t0, i128 h0, int dp, i128 d0)
{
    i128 fig[3] = {t0, h0, d0};
    for (int i = 0; i < (dp ? 3 : 2); i++) {
        Band *band = slot_band(self, s, 3 + i);
        if (band == NULL || band_add(band, self->fold_width, e->line, fig[i], e->site, e->depth, b->line))
            return -1;
    }
    return 0;
}

static PyObject *
band_object(const Band *s, int64_t ring, int resource)
{
    PyObject *cols = PyTuple_New(s ? s->n : 0);
    if (cols == NULL)
        return NULL;
    for (Py_ssize_t i = 0; s && i < s->n; i++) {
        const Col *c = &s->cols[i];
        PyObject *t = PyTuple_New(7);
        if (t == NULL) {
            Py_DECREF(cols);
            return NULL;
        }
        PyObject *v[7] = {PyLong_FromLongLong(c->x), L(c->lo), L(c->hi), PyLong_FromLongLong(c->x_hi),
                          NEW(c->site), PyLong_FromLongLong(c->depth), PyLong_FromLongLong(c->begin)};
        int ok = 1;
        for (int j = 0; j < 7; j++) {
            ok &= v[j] != NULL;
            PyTuple_SET_ITEM(t, j, v[j]);
        }
        PyTuple_SET_ITEM(cols, i, t);
        if (!ok) {
            Py_DECREF(cols);
            return NULL;
        }
    }
    return make(T_Band, 4, PyLong_FromLongLong(ring), PyLong_FromLong(resource),
                PyLong_FromLongLong(s ? s->shift : 0), cols);
}

/* Pair.push_many's loop body for one record; events into ``events`` (NULL: none made). */
static int
pair_one(Pairer *self, const Rec *e, PyObject *events)
{
    Slot *es = slot_for(self, e->ring);
    if (es == NULL || (self->fold_width && fold_record(self, es, e)))
        return -1;
    es->has_last = 1;
    rec_store(&es->last, e);
    if (e->twe < DEP_POOL_BATCH) {
        es->has_batch = 1;
        es->batch = dpe0(e) - dps0(e);
    } else if (!es->batch_full && !e->begin) { /* the scope that owns the ring's 64th task closes */
        es->has_batch = es->batch_full = 1;
        es->batch = dpe0(e) - dps0(e);
    }
    self->records++;
    self->last_line = e->line;
    self->tm_live = e->tm;
    int64_t depth = e->depth;
    if (e->tm > self->tm_peak) {
        self->tm_peak = e->tm;
        set_site(&self->tm_site, e->site);
    }
    if (depth > self->max_depth) {
        self->max_depth = depth;
        if (depth >= DEPTH_CAP && !self->depth_cap_line)
            self->depth_cap_line = e->line;
    }
    if (e->begin) {
        if (PySet_Add(self->sites, e->site))
            return -1;
        if (self->n) {
            Rec *top = &self->stack[self->n - 1];
            if (top->depth >= depth) {
                if (abandon(self, depth, e->line, events))
                    return -1;
            } else if (e->twe == top->twe && top->ring == e->ring) {
                if (mark(self, top))
                    return -1;
            }
        }
        Rec *slot = &self->stack[self->n++];
        slot->site = NULL;
        rec_store(slot, e);
        return 0;
    }
    const Rec *b = NULL; /* NULL: ``b is e`` */
    if (self->n) {
        b = &self->stack[self->n - 1];
        if (b->depth > depth) {
            if (abandon(self, depth + 1, e->line, events))
                return -1;
            b = self->n ? &self->stack[self->n - 1] : NULL;
        }
    }
    int same = 0;
    if (b != NULL && b->depth == depth && (same = PyObject_RichCompareBool(b->site, e->site, Py_EQ)) < 0)
        return -1;
    if (!same) {
        self->unmatched_ends++;
        if (events != NULL)
            return emit(events, make(T_UnmatchedEnd, 4, NEW(e->site), PyLong_FromLongLong(depth),
                                     PyLong_FromLongLong(e->ring), PyLong_FromLongLong(e->line)));
        return 0;
    }
    Rec bb = self->stack[--self->n]; /* popped: its site reference is ours now */
    b = &bb;
    int64_t parent = self->n ? self->stack[self->n - 1].line : 0;
    i128 x = e->twe;
    i128 t0 = x - b->tws, t1 = x - e->tws, t2 = x - b->twe;
    x = e->he;
    i128 h0 = x - b->hs, h1 = x - e->hs, h2 = x - b->he;
    int dp = !(b->dps_none || b->dpe_none || e->dps_none || e->dpe_none);
    i128 d0 = -1, d1 = -1, d2 = -1;
    if (dp) {
        x = e->dpe;
        d0 = x - b->dps;
        d1 = x - e->dps;
        d2 = x - b->dpe;
    }
    int rc = 0;
    if (self->fold_width && fold_scope(self, es, b, e, t0, h0, dp, d0)) {
        rc = -1;
        goto done;
    }
    int64_t sets = 0;
    int counted = !self->depth_cap_line;
    if (counted) {
        Slot *ring = ring_for(self, e->ring, b);
        if (ring == NULL) {
            rc = -1;
            goto done;
        }
        if (t2 == 1)
            request(self, ring, b, e, h2, d2);
        if (ring->nested)
            nested_end(self, ring, b, e, t2, h2, d2);
        if (h2 > ring->heap_held) {
            int64_t rn = e->ring;
            i128 cap = (rn >= 0 && rn < self->n_heap_caps) ? self->heap_caps[rn] : 0;
            i128 hh = held_bytes(b->he, e->he, cap);
            if (hh > ring->heap_held)
                ring->heap_held = hh;
        }
        ring->scopes++;
        i128 fig[9] = {t0, t1, t2, h0, h1, h2, d0, d1, d2};
        int first = ring->scopes == 1;
        for (int i = 0; i < (dp ? 3 : 2); i++) {
            int j = 3 * i;
            if (fig[j] > ring->maxima[j] || first) {
                ring->maxima[j] = fig[j];
                set_site(&ring->sites[j], e->site);
                ring->lines[j] = b->line;
                sets |= 1 << j;
            }
            if (fig[j + 1] > ring->maxima[j + 1] || first) {
                ring->maxima[j + 1] = fig[j + 1];
                set_site(&ring->sites[j + 1], e->site);
                sets |= 2 << j;
            }
            if (fig[j + 2] > ring->maxima[j + 2] || first) {
                ring->maxima[j + 2] = fig[j + 2];
                set_site(&ring->sites[j + 2], e->site);
                sets |= 4 << j;
            }
        }
    } else {
        self->uncounted++;
    }
    self->scopes++;
    if (events != NULL) {
        PyObject *use = PyTuple_New(3);
        if (use == NULL) {
            rc = -1;
            goto done;
        }
        PyTuple_SET_ITEM(use, 0, usage(t0, t1, t2));
        PyTuple_SET_ITEM(use, 1, usage(h0, h1, h2));
        PyTuple_SET_ITEM(use, 2, dp ? usage(d0, d1, d2) : NEW(Py_None));
        if (!PyTuple_GET_ITEM(use, 0) || !PyTuple_GET_ITEM(use, 1) || !PyTuple_GET_ITEM(use, 2)) {
            Py_DECREF(use);
            rc = -1;
            goto done;
        }
        PyObject *args[6] = {PyLong_FromLongLong(depth), PyLong_FromLongLong(e->ring), PyLong_FromLongLong(b->line),
                             PyLong_FromLongLong(e->line), PyLong_FromLongLong(parent), PyLong_FromLongLong(sets)};
        if (!counted || b->ring != e->ring)
            rc = emit(events, make(T_Scope, 9, NEW(e->site), args[0], args[1], args[2], args[3], args[4], use,
                                   args[5], b->ring == e->ring ? NEW(Py_None) : PyLong_FromLongLong(b->ring)));
        else
            rc = emit(events, make(T_Scope, 8, NEW(e->site), args[0], args[1], args[2], args[3], args[4], use,
                                   args[5]));
    }
done:
    rec_release(&bb);
    return rc;
}

static int
pair_objects(Pairer *self, PyObject *recs, PyObject *events)
{
    PyObject *seq = PySequence_Fast(recs, "records must be a sequence");
    if (seq == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    int rc = 0;
    for (Py_ssize_t i = 0; i < n && rc == 0; i++) {
        Rec r;
        if (rec_from(items[i], &r)) {
            Py_XDECREF(r.site);
            rc = -1;
            break;
        }
        r.serial = ++self->serial;
        rc = pair_one(self, &r, events);
        Py_DECREF(r.site);
    }
    Py_DECREF(seq);
    return rc;
}

static int
Pairer_set_meta(Pairer *self, PyObject *meta, void *closure)
{
    if (meta == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete meta");
        return -1;
    }
    i128 *caps = NULL;
    Py_ssize_t n = 0;
    if (meta != Py_None) {
        PyObject *heap = PyObject_GetAttr(meta, S_heap_max);
        if (heap == NULL)
            return -1;
        PyObject *seq = PySequence_Fast(heap, "heap_max must be a sequence");
        Py_DECREF(heap);
        if (seq == NULL)
            return -1;
        n = PySequence_Fast_GET_SIZE(seq);
        caps = PyMem_Calloc((size_t)(n ? n : 1), sizeof(i128));
        if (caps == NULL) {
            Py_DECREF(seq);
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            if (i128_from(PySequence_Fast_GET_ITEM(seq, i), &caps[i])) {
                Py_DECREF(seq);
                PyMem_Free(caps);
                return -1;
            }
        }
        Py_DECREF(seq);
    }
    PyMem_Free(self->heap_caps);
    self->heap_caps = caps;
    self->n_heap_caps = n;
    Py_INCREF(meta);
    Py_SETREF(self->meta, meta);
    return 0;
}

static PyObject *
Pairer_get_meta(Pairer *self, void *closure)
{
    return Py_NewRef(self->meta);
}

static PyObject *
Pairer_get_pending(Pairer *self, void *closure)
{
    return Py_NewRef(self->pending ? self->pending : Py_None);
}

static int
Pairer_init(Pairer *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"meta", "keep_events", "bands", NULL};
    PyObject *meta = Py_None;
    int keep = 1;
    Py_ssize_t width = 0;
    if (!bound() || !PyArg_ParseTupleAndKeywords(args, kwds, "|Opn", kwlist, &meta, &keep, &width))
        return -1;
    if (width < 0 || width > ((Py_ssize_t)1 << 40)) {
        PyErr_SetString(PyExc_ValueError, "bands: columns per band, 0 (none) to 2**40");
        return -1;
    }
    if (self->stack != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Pairer.__init__ called twice");
        return -1;
    }
    if ((self->stack = PyMem_Calloc(NEST + 1, sizeof(Rec))) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->tm_peak = -1;
    self->tm_site = Py_NewRef(S_empty);
    if ((self->sites = PySet_New(NULL)) == NULL)
        return -1;
    self->keep_events = keep;
    self->fold_width = width;
    if (keep && (self->pending = PyList_New(0)) == NULL)
        return -1;
    Py_INCREF(Py_None);
    self->meta = Py_None;
    return Pairer_set_meta(self, meta, NULL);
}

static void
Pairer_dealloc(Pairer *self)
{
    for (Py_ssize_t i = 0; i < self->n; i++)
        rec_release(&self->stack[i]);
    PyMem_Free(self->stack);
    PyMem_Free(self->nest);
    for (Py_ssize_t i = 0; i < self->n_slots; i++) {
        Slot *s = self->slots[i];
        rec_release(&s->last);
        for (int j = 0; j < 9; j++)
            Py_XDECREF(s->sites[j]);
        for (int j = 0; j < 6; j++)
            band_free(s->bands[j]);
        PyMem_Free(s);
    }
    PyMem_Free(self->slots);
    PyMem_Free(self->heap_caps);
    Py_XDECREF(self->meta);
    Py_XDECREF(self->tm_site);
    Py_XDECREF(self->pending);
    Py_XDECREF(self->sites);
    band_free(self->fold_tm);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
Pairer_push_many(Pairer *self, PyObject *recs)
{
    PyObject *events = PyList_New(0);
    if (events == NULL)
        return NULL;
    if (pair_objects(self, recs, events)) {
        Py_DECREF(events);
        return NULL;
    }
    return events;
}

static PyObject *
Pairer_push(Pairer *self, PyObject *rec)
{
    PyObject *one = PyTuple_Pack(1, rec);
    if (one == NULL)
        return NULL;
    PyObject *events = Pairer_push_many(self, one);
    Py_DECREF(one);
    if (events == NULL)
        return NULL;
    PyObject *res = PyList_AsTuple(events);
    Py_DECREF(events);
    return res;
}

static PyObject *
Pairer_push_linked(Pairer *self, PyObject *recs)
{
    if (pair_objects(self, recs, self->pending))
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Pairer_take_events(Pairer *self, PyObject *unused)
{
    if (self->pending == NULL)
        return PyList_New(0);
    PyObject *fresh = PyList_New(0);
    if (fresh == NULL)
        return NULL;
    PyObject *out = self->pending;
    self->pending = fresh;
    return out;
}

static PyObject *
Pairer_open_scopes(Pairer *self, void *closure)
{
    PyObject *out = PyTuple_New(self->n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < self->n; i++) {
        PyObject *o = open_scope(&self->stack[i]);
        if (o == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, o);
    }
    return out;
}

static PyObject *
Pairer_open_usage(Pairer *self, PyObject *unused)
{
    PyObject *out = PyTuple_New(self->n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < self->n; i++) {
        const Rec *b = &self->stack[i];
        Slot *s = slot_for(self, b->ring);
        if (s == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        const Rec *e = s->has_last ? &s->last : b;
        PyObject *tw = usage(e->twe - b->tws, e->twe - e->tws, e->twe - b->twe);
        PyObject *hp = usage(e->he - b->hs, e->he - e->hs, e->he - b->he);
        PyObject *dp = (b->dps_none || b->dpe_none || e->dps_none || e->dpe_none)
                           ? NEW(Py_None)
                           : usage(e->dpe - b->dps, e->dpe - e->dps, e->dpe - b->dpe);
        PyObject *t = (tw && hp && dp) ? PyTuple_Pack(3, tw, hp, dp) : NULL;
        Py_XDECREF(tw); Py_XDECREF(hp); Py_XDECREF(dp);
        if (t == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, t);
    }
    return out;
}

/* Pairer._open_pinned */
static void
open_pinned(Pairer *self, Slot *s, i128 held[3])
{
    held[0] = held[1] = held[2] = 0;
    if (!s->has_last)
        return;
    const Rec *last = &s->last;
    for (Py_ssize_t i = 0; i < self->n; i++) {
        const Rec *b = &self->stack[i];
        if (b->ring != s->ring)
            continue;
        const Nest *st = self->nest ? &self->nest[b->depth] : NULL;
        Cnt base;
        if (st != NULL && st->used && st->serial == b->serial) {
            if (!st->has_own)
                continue;
            base = st->own;
        } else {
            base = cnt(b);
        }
        held[0] = last->twe - base.twe;
        held[1] = last->he - base.he;
        held[2] = dpe0(last) - (base.dpe_none ? 0 : base.dpe);
        return;
    }
}

static int
by_ring(const void *a, const void *b)
{
    int64_t x = (*(Slot *const *)a)->ring, y = (*(Slot *const *)b)->ring;
    return (x > y) - (x < y);
}

static PyObject *
site_or_empty(PyObject *site)
{
    return NEW(site ? site : S_empty);
}

static PyObject *
Pairer_summary(Pairer *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"parse_errors", "finished", NULL};
    long long parse_errors = 0;
    int finished = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|Lp", kwlist, &parse_errors, &finished))
        return NULL;
    PyObject *meta = self->meta;
    int v4 = 0;
    if (meta != Py_None) {
        PyObject *version = PyObject_GetAttr(meta, S_version);
        if (version == NULL)
            return NULL;
        PyObject *four = PyLong_FromLong(4);
        v4 = four ? PyObject_RichCompareBool(version, four, Py_EQ) : -1;
        Py_DECREF(version);
        Py_XDECREF(four);
        if (v4 < 0)
            return NULL;
    }
    Slot **order = PyMem_Malloc(sizeof(Slot *) * (size_t)(self->n_slots ? self->n_slots : 1));
    if (order == NULL)
        return PyErr_NoMemory();
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < self->n_slots; i++)
        if (self->slots[i]->has_last)
            order[k++] = self->slots[i];
    qsort(order, (size_t)k, sizeof(Slot *), by_ring);
    PyObject *peaks = PyList_New(0), *res = NULL, *tensormap = NULL, *opened = NULL, *tm_cap = NULL;
    if (peaks == NULL)
        goto fail;
    for (Py_ssize_t r = 0; r < k; r++) {
        Slot *s = order[r];
        const Rec *e = &s->last;
        int paired = s->in_rings; /* else pair._Ring(): zeros, no first */
        i128 live[3] = {e->twe - e->tws, e->he - e->hs, e->dpe_none ? 0 : e->dpe - dps0(e)};
        i128 tails[3] = {e->tws, e->hs, dps0(e)};
        i128 first[3] = {0, 0, 1};
        if (paired && s->has_first) {
            first[0] = s->first_tws;
            first[1] = s->first_hs;
            first[2] = s->first_dps_none ? 0 : s->first_dps;
        }
        int moved = tails[0] > first[0] || tails[1] > first[1] || tails[2] > first[2];
        i128 held[3];
        open_pinned(self, s, held);
        int64_t scopes = paired ? s->scopes : 0;
        i128 requests[3] = {1, paired ? s->request[0] : 0, paired ? s->request[1] : 0};
        for (int i = 0; i < 3; i++) {
            if (i == 2 && v4)
                continue;
            PyObject *resource = PyTuple_GET_ITEM(RESOURCES, i);
            PyObject *cap;
            if (meta != Py_None) {
                PyObject *ring_no = PyLong_FromLongLong(s->ring);
                cap = ring_no ? PyObject_CallMethodObjArgs(meta, S_capacity, resource, ring_no, NULL) : NULL;
                Py_XDECREF(ring_no);
            } else {
                cap = NEW(Py_None);
            }
            int j = 3 * i;
            i128 m0 = 0, m1 = 0, m2 = 0, pinned = 0;
            PyObject *s0 = NULL, *s1 = NULL, *s2 = NULL;
            int64_t line0 = 0;
            if (paired) {
                m0 = s->maxima[j];
                m1 = s->maxima[j + 1];
                m2 = s->maxima[j + 2];
                s0 = s->sites[j];
                s1 = s->sites[j + 1];
                s2 = s->sites[j + 2];
                line0 = s->lines[j];
                pinned = s->nested ? s->maxima[9 + i] : (i == 1 ? s->heap_held : max0(m2));
            }
            PyObject *peak = make(T_Peak, 17, PyLong_FromLongLong(s->ring), NEW(resource), cap, L(m0), site_or_empty(s0),
                                  PyLong_FromLongLong(line0), L(m1), site_or_empty(s1), L(m2), site_or_empty(s2),
                                  L(live[i]), PyLong_FromLongLong(scopes), L(pinned), L(held[i]),
                                  L(scopes ? requests[i] : 0), NEW(moved ? Py_True : Py_False),
                                  L(i == 2 && s->has_batch ? s->batch : 0));
            if (emit(peaks, peak))
                goto fail;
        }
    }
    if (meta != Py_None) {
        PyObject *tm = PyObject_GetAttr(meta, S_tensormap_max);
        if (tm == NULL)
            goto fail;
        int truth = PyObject_IsTrue(tm);
        if (truth <= 0) {
            Py_DECREF(tm);
            if (truth < 0)
                goto fail;
            tm = NEW(Py_None);
        }
        tm_cap = tm;
    } else {
        tm_cap = NEW(Py_None);
    }
    tensormap = make(T_TensormapPeak, 4, tm_cap, PyLong_FromLongLong(self->tm_peak > 0 ? self->tm_peak : 0),
                     NEW(self->tm_site), PyLong_FromLongLong(self->tm_live));
    tm_cap = NULL;
    if (tensormap == NULL || (opened = Pairer_open_scopes(self, NULL)) == NULL)
        goto fail;
    PyObject *peaks_t = PyList_AsTuple(peaks);
    if (peaks_t == NULL)
        goto fail;
    PyObject *wedged = finished ? NEW(opened) : PyTuple_New(0);
    PyObject *sites = PySequence_List(self->sites);
    if (sites != NULL && PyList_Sort(sites) == 0)
        Py_SETREF(sites, PyList_AsTuple(sites));
    else
        Py_CLEAR(sites);
    if (self->depth_cap_line)
        res = make(T_CappedSummary, 14, NEW(meta), PyLong_FromLongLong(self->records), PyLong_FromLongLong(self->scopes),
                   PyLong_FromLongLong(self->unmatched_begins), PyLong_FromLongLong(self->unmatched_ends),
                   PyLong_FromLongLong(parse_errors), peaks_t, NEW(tensormap), wedged,
                   PyLong_FromLongLong(self->max_depth), NEW(opened), sites, PyLong_FromLongLong(self->depth_cap_line),
                   PyLong_FromLongLong(self->uncounted));
    else
        res = make(T_RunSummary, 12, NEW(meta), PyLong_FromLongLong(self->records), PyLong_FromLongLong(self->scopes),
                   PyLong_FromLongLong(self->unmatched_begins), PyLong_FromLongLong(self->unmatched_ends),
                   PyLong_FromLongLong(parse_errors), peaks_t, NEW(tensormap), wedged,
                   PyLong_FromLongLong(self->max_depth), NEW(opened), sites);
fail:
    PyMem_Free(order);
    Py_XDECREF(peaks);
    Py_XDECREF(tensormap);
    Py_XDECREF(opened);
    Py_XDECREF(tm_cap);
    return res;
}

/* Folder.bands: the bands so far (None unless the pairer folds them) */
static PyObject *
Pairer_bands(Pairer *self, PyObject *unused)
{
    if (!self->fold_width)
        Py_RETURN_NONE;
    Slot **order = PyMem_Malloc(sizeof(Slot *) * (size_t)(self->n_slots ? self->n_slots : 1));
    if (order == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < self->n_slots; i++)
        order[i] = self->slots[i];
    qsort(order, (size_t)self->n_slots, sizeof(Slot *), by_ring);
    PyObject *parts[2] = {PyList_New(0), PyList_New(0)}, *res = NULL;
    for (int kind = 0; kind < 2 && parts[0] && parts[1]; kind++) {
        for (Py_ssize_t r = 0; r < self->n_slots; r++) {
            for (int i = 0; i < 3; i++) {
                const Band *band = order[r]->bands[3 * kind + i];
                if (band != NULL && emit(parts[kind], band_object(band, order[r]->ring, i)))
                    goto fail;
            }
        }
    }
    if (parts[0] && parts[1])
        res = make(T_Bands, 6, PyLong_FromSsize_t(self->fold_width), PyLong_FromLongLong(self->fold_first),
                   PyLong_FromLongLong(self->fold_started ? self->last_line : 0), band_object(self->fold_tm, -1, -1),
                   PyList_AsTuple(parts[0]), PyList_AsTuple(parts[1]));
fail:
    PyMem_Free(order);
    Py_XDECREF(parts[0]);
    Py_XDECREF(parts[1]);
    return res;
}

static PyMethodDef Pairer_methods[] = {
    {"push", (PyCFunction)Pairer_push, METH_O, "Push one record; the events it caused (as Pairer.push)."},
    {"push_many", (PyCFunction)Pairer_push_many, METH_O, "Push records in order; their events (as Pairer.push_many)."},
    {"push_linked", (PyCFunction)Pairer_push_linked, METH_O,
     "Push records in order; their events go to the pending list (when events are kept), after the scanner's."},
    {"take_events", (PyCFunction)Pairer_take_events, METH_NOARGS, "The pending events, in order; the list starts anew."},
    {"open_usage", (PyCFunction)Pairer_open_usage, METH_NOARGS, "As Pairer.open_usage."},
    {"summary", (PyCFunction)(void (*)(void))Pairer_summary, METH_VARARGS | METH_KEYWORDS, "As Pairer.summary."},
    {"bands", (PyCFunction)Pairer_bands, METH_NOARGS, "As ringtrace.stages.bands.Folder.bands (None: not folded)."},
    {NULL}};

static PyMemberDef Pairer_members[] = {
    {"records", T_LONGLONG, offsetof(Pairer, records), READONLY, NULL},
    {"scopes", T_LONGLONG, offsetof(Pairer, scopes), READONLY, NULL},
    {"unmatched_begins", T_LONGLONG, offsetof(Pairer, unmatched_begins), READONLY, NULL},
    {"unmatched_ends", T_LONGLONG, offsetof(Pairer, unmatched_ends), READONLY, NULL},
    {"max_depth", T_LONGLONG, offsetof(Pairer, max_depth), READONLY, NULL},
    {"depth_cap_line", T_LONGLONG, offsetof(Pairer, depth_cap_line), READONLY, NULL},
    {"uncounted", T_LONGLONG, offsetof(Pairer, uncounted), READONLY, NULL},
    {"last_line", T_LONGLONG, offsetof(Pairer, last_line), READONLY, "The line of the last record pushed (0: none)."},
    {"keep_events", T_BOOL, offsetof(Pairer, keep_events), READONLY, NULL},
    {NULL}};

static PyGetSetDef Pairer_getset[] = {
    {"meta", (getter)Pairer_get_meta, (setter)Pairer_set_meta, NULL, NULL},
    {"open_scopes", (getter)Pairer_open_scopes, NULL, "Scopes open right now, outermost first.", NULL},
    {"pending", (getter)Pairer_get_pending, NULL, "Events not taken yet (None when events are not kept).", NULL},
    {NULL}};

static PyTypeObject PairerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ringtrace.stages._core.Pairer",
    .tp_doc = "The compiled twin of ringtrace.stages.pair.Pairer.",
    .tp_basicsize = sizeof(Pairer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Pairer_init,
    .tp_dealloc = (destructor)Pairer_dealloc,
    .tp_methods = Pairer_methods,
    .tp_members = Pairer_members,
    .tp_getset = Pairer_getset,
};

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
    LIT(p, e, ", \"task_window_start\": ");
    UINT(p, e, r->tws);
    LIT(p, e, ", \"task_window_end\": ");
    UINT(p, e, r->twe);
    LIT(p, e, ", \"heap_start\": ");
    UINT(p, e, r->hs);
    LIT(p, e, ", \"heap_end\": ");
    UINT(p, e, r->he);
    if (e - p >= 20 && memcmp(p, ", \"dep_pool_start\": ", 20) == 0) {
        p += 20;
        UINT(p, e, r->dps);
        LIT(p, e, ", \"dep_pool_end\": ");
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

static PyObject *
Scanner_configure(Scanner *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"version", "rings", "heap_max", "max_line", NULL};
    long long version;
    Py_ssize_t rings, max_line;
    PyObject *heap;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "LnOn", kwlist, &version, &rings, &heap, &max_line))
        return NULL;
    scanner_clear_rings(self);
    self->configured = 0;
    if (rings <= 0 || rings > MAX_RINGS || version < 4)
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
    self->wraps = version == 4 || version == 5;
    self->need_dp = version >= 5;
    self->drop_dp = version == 4;
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
     "configure(version, rings, heap_max, max_line) -> bool: the metadata the decoder read (False: the scanner "
     "takes no line of this file)."},
    {"scan", (PyCFunction)Scanner_scan, METH_VARARGS,
     "scan(buf, start, end, line, out) -> (pos, lines, records): take lines of buf[start:end] from its start "
     "(the first is line ``line``) up to the first line not taken, which starts at ``pos``."},
    {"export", (PyCFunction)Scanner_export, METH_VARARGS, "export(last, raw_heap): see the C source."},
    {"load", (PyCFunction)Scanner_load, METH_VARARGS, "load(last, raw_heap): see the C source."},
    {NULL}};

static PyTypeObject ScannerType = {
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

/* -- module -------------------------------------------------------------------------------------- */

static PyObject *
bind(PyObject *mod, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"Record", "Usage", "Scope", "Abandoned", "UnmatchedEnd", "OpenScope", "Peak",
                             "TensormapPeak", "RunSummary", "CappedSummary", "Band", "Bands", "resources", NULL};
    PyObject *t[13];
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOOOOOOOO!", kwlist, &t[0], &t[1], &t[2], &t[3], &t[4],
                                     &t[5], &t[6], &t[7], &t[8], &t[9], &t[10], &t[11], &PyTuple_Type, &t[12]))
        return NULL;
    if (PyTuple_GET_SIZE(t[12]) != 3) {
        PyErr_SetString(PyExc_ValueError, "resources must name three resources");
        return NULL;
    }
    PyObject **dst[13] = {&T_Record, &T_Usage, &T_Scope, &T_Abandoned, &T_UnmatchedEnd, &T_OpenScope, &T_Peak,
                          &T_TensormapPeak, &T_RunSummary, &T_CappedSummary, &T_Band, &T_Bands, &RESOURCES};
    for (int i = 0; i < 13; i++)
        Py_XSETREF(*dst[i], Py_NewRef(t[i]));
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_VARARGS | METH_KEYWORDS,
     "bind(Record, Usage, Scope, Abandoned, UnmatchedEnd, OpenScope, Peak, TensormapPeak, RunSummary, "
     "CappedSummary, Band, Bands, resources): the types the core makes (ringtrace.stages.core calls it once)."},
    {NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ringtrace.stages._core",
    "The compiled reading core: a line scanner and a pairer, the twins of ringtrace.stages.decode and .pair.", -1,
    module_methods};

static int
intern(PyObject **dst, const char *s)
{
    return (*dst = PyUnicode_InternFromString(s)) == NULL ? -1 : 0;
}

PyMODINIT_FUNC
PyInit__core(void)
{
    if (PyType_Ready(&PairerType) < 0 || PyType_Ready(&ScannerType) < 0)
        return NULL;
    if (intern(&S_begin, "begin") || intern(&S_end, "end") || intern(&S_empty, "") || intern(&S_capacity, "capacity")
        || intern(&S_version, "version") || intern(&S_tensormap_max, "tensormap_max")
        || intern(&S_heap_max, "heap_max") || intern(&S_total, "total") || intern(&S_line, "line") || intern(&S_site, "site")
        || intern(&S_phase, "phase") || intern(&S_depth, "depth") || intern(&S_ring, "ring")
        || intern(&S_tws, "task_window_start") || intern(&S_twe, "task_window_end") || intern(&S_hs, "heap_start")
        || intern(&S_he, "heap_end") || intern(&S_dps, "dep_pool_start") || intern(&S_dpe, "dep_pool_end")
        || intern(&S_tm, "tensormap"))
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Pairer", (PyObject *)&PairerType) < 0
        || PyModule_AddObjectRef(m, "Scanner", (PyObject *)&ScannerType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
