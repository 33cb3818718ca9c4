/* ringtrace.sinks.perfetto._encode: the compiled twin of ringtrace.sinks.perfetto._records.encode.
 *
 * encode(parts, rings, tm_uuid, records, events, i, ei) -> (i, ei) writes one track-event packet per
 * record from records[i] on, exactly the bytes of _records.encode (the reference, which stays in Python),
 * into one bytes object appended to ``parts``.  It stops at the first record it does not write and
 * returns its index and the index of that record's first pair event; the caller writes that record with
 * the reference and calls it again after it.  It writes a record when:
 *
 *   - its ring is in ``rings`` (a RingState: its sequence, names, counters and capacities), and for a
 *     begin its site is interned on that ring (the reference makes new rings and sites, which append
 *     descriptors and interned names);
 *   - its pair events are Scope and UnmatchedEnd only, and a closing Scope began on the same ring (the
 *     reference ends abandoned scopes and odd ones with packets of their own);
 *   - every object is of the bound type (``bind``) with its fields in member slots, every integer fits
 *     int64 and every value written is below 2**64 (the reference's varint writes longer ones).
 *
 * Field numbers are Perfetto's, as in _wire.py (whose constants tests/sinks/perfetto/test_trace_writer.py
 * checks against the descriptors); tests/sinks/perfetto/test_encode.py holds this file to the reference
 * byte for byte.  Everything runs under the GIL and calls no Python code.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#include "tables.h" /* ringtrace/stages/_core_src: the constants shared with Python, from its tables */

typedef __int128 i128;

/* put_record reads a Record's three pairs of counters by name: a fourth resource needs its pair there too */
_Static_assert(RT_RESOURCES == 3, "the encoder writes three resources (put_record: tws..dpe)");

/* -- the wire (_wire.py) ------------------------------------------------------------------------ */

#define TRACE_PACKET 0x0A        /* Trace.packet = 1, LEN */
#define PKT_TIMESTAMP 0x40       /* TracePacket.timestamp = 8, VARINT */
#define PKT_TRACK_EVENT 0x5A     /* TracePacket.track_event = 11, LEN */
#define EV_DEBUG_ANNOTATION 0x22 /* TrackEvent.debug_annotations = 4, LEN */
#define EV_TYPE 0x48             /* TrackEvent.type = 9, VARINT */
#define EV_TRACK_UUID 0x58       /* TrackEvent.track_uuid = 11, VARINT */
#define EV_EXTRA_VALUE 0x60      /* TrackEvent.extra_counter_values = 12, VARINT */
#define EV_COUNTER_VALUE "\xF0\x01" /* TrackEvent.counter_value = 30, VARINT (two bytes) */
#define ANN_NAME_IID 0x08        /* DebugAnnotation.name_iid = 1, VARINT */
#define ANN_INT 0x20             /* DebugAnnotation.int_value = 4, VARINT */
#define SLICE_BEGIN 1
#define SLICE_END 2
#define COUNTER 4
#define IID_DEPTH 1              /* _wire.IID_DEPTH, IID_LINE, IID_USAGE */
#define IID_LINE 2
#define IID_USAGE 3
#define RESOURCES RT_RESOURCES   /* Scope.usage's length (tables.h, from model/runtime.TABLE) */
#define PACKET_FIXED 2           /* len(PKT_TIMESTAMP) + len(PKT_TRACK_EVENT) */

/* -- the bound types and their field slots ------------------------------------------------------ */

enum { R_LINE, R_SITE, R_PHASE, R_RING, R_TWS, R_TWE, R_HS, R_HE, R_DPS, R_DPE, R_TM, R_N };
enum { S_END_LINE, S_BEGIN_LINE, S_DEPTH, S_USAGE, S_BEGIN_RING, S_N };
enum { U_HIGH, U_LIVE, U_ALLOC, U_N };

static const char *R_NAMES[R_N] = {"line", "site", "phase", "ring", "task_window_start", "task_window_end",
                                   "heap_start", "heap_end", "dep_pool_start", "dep_pool_end", "tensormap"};
static const char *S_NAMES[S_N] = {"end_line", "begin_line", "depth", "usage", "begin_ring"};
static const char *U_NAMES[U_N] = {"high_water", "live_at_exit", "alloc"};

static PyTypeObject *T_Record, *T_Scope, *T_Usage, *T_Abandoned, *T_UnmatchedEnd;
static Py_ssize_t R_OFF[R_N], S_OFF[S_N], U_OFF[U_N], A_LINE, E_LINE;
static PyObject *S_begin, *S_end;

/* The object in member slot ``off`` (borrowed; NULL when unset). */
#define SLOT(o, off) (*(PyObject **)((char *)(o) + (off)))

/* The slot offset of field ``name`` of ``type``: its member descriptor must hold an object. */
static int
slot_of(PyTypeObject *type, const char *name, Py_ssize_t *off)
{
    PyObject *d = PyObject_GetAttrString((PyObject *)type, name);
    if (d == NULL)
        return -1;
    int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
    if (ok)
        *off = ((PyMemberDescrObject *)d)->d_member->offset;
    Py_DECREF(d);
    if (!ok)
        PyErr_Format(PyExc_TypeError, "%s.%s is not an object slot", type->tp_name, name);
    return ok ? 0 : -1;
}

static PyObject *
bind(PyObject *mod, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"Record", "Scope", "Usage", "Abandoned", "UnmatchedEnd", NULL};
    PyTypeObject *t[5];
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!O!O!O!", kwlist, &PyType_Type, &t[0], &PyType_Type, &t[1],
                                     &PyType_Type, &t[2], &PyType_Type, &t[3], &PyType_Type, &t[4]))
        return NULL;
    for (int k = 0; k < R_N; k++)
        if (slot_of(t[0], R_NAMES[k], &R_OFF[k]) < 0)
            return NULL;
    for (int k = 0; k < S_N; k++)
        if (slot_of(t[1], S_NAMES[k], &S_OFF[k]) < 0)
            return NULL;
    for (int k = 0; k < U_N; k++)
        if (slot_of(t[2], U_NAMES[k], &U_OFF[k]) < 0)
            return NULL;
    if (slot_of(t[3], "line", &A_LINE) < 0 || slot_of(t[4], "line", &E_LINE) < 0)
        return NULL;
    PyTypeObject **dst[5] = {&T_Record, &T_Scope, &T_Usage, &T_Abandoned, &T_UnmatchedEnd};
    for (int k = 0; k < 5; k++)
        Py_XSETREF(*dst[k], (PyTypeObject *)Py_NewRef(t[k]));
    Py_RETURN_NONE;
}

/* -- integers and varints ----------------------------------------------------------------------- */

/* ``o``, an int within int64, into ``*out``; 0: anything else (no error set). */
static inline int
i64(PyObject *o, int64_t *out)
{
    int overflow;
    long long x;
    if (o != NULL && Py_IS_TYPE(o, &PyLong_Type)) {  /* an exact int: no __index__, no error but overflow */
        x = PyLong_AsLongLongAndOverflow(o, &overflow);
        *out = x;
        return !overflow;
    }
    if (o == NULL || !PyLong_Check(o))
        return 0;
    x = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    *out = x;
    return 1;
}

/* A value the reference's varint writes in at most 10 bytes: below 2**64 (negatives as two's complement). */
#define FITS(v) ((v) < ((i128)1 << 64))

static inline int
vlen(uint64_t v)
{
    int n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* An int64 (a negative is 2**63 or more as two's complement: written whole, as by the reference) or a length. */
static inline char *
put(char *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (char)(v | 0x80);
        v >>= 7;
    }
    *p++ = (char)v;
    return p;
}

/* ``v`` (FITS) as the reference's varint writes it: two's complement for a negative, and a negative below
 * -2**64 + 2**14 (a difference of two int64 counters can be) in three bytes, the low 14 bits and a zero
 * byte, as its table lookups make it. */
static inline char *
put_value(char *p, i128 v)
{
    uint64_t u = (uint64_t)v;
    if (v < 0 && u < (1u << 14)) {
        *p++ = (char)((u & 0x7F) | 0x80);
        *p++ = (char)((u >> 7) | 0x80);
        *p++ = 0;
        return p;
    }
    return put(p, u);
}

static inline char *
put_bytes(char *p, const char *s, Py_ssize_t n)
{
    memcpy(p, s, (size_t)n);
    return p + n;
}

/* A whole int ``debug_annotations`` field: name_iid ``iid``, int_value ``v`` (_wire.ann). */
static inline char *
put_ann(char *p, int iid, uint64_t v)
{
    *p++ = EV_DEBUG_ANNOTATION;
    p = put(p, (uint64_t)(1 + vlen((uint64_t)iid) + 1 + vlen(v)));
    *p++ = ANN_NAME_IID;
    p = put(p, (uint64_t)iid);
    *p++ = ANN_INT;
    return put(p, v);
}

/* Python's ``a // b`` (b != 0); in int64 where ``a`` is (the common case: __int128 division is a call). */
static inline i128
floordiv(i128 a, int64_t b)
{
    if (a >= INT64_MIN && a <= INT64_MAX) {
        int64_t q = (int64_t)a / b, r = (int64_t)a % b;
        return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
    }
    i128 q = a / b;
    if (a % b != 0 && ((a < 0) != (b < 0)))
        q--;
    return q;
}

/* -- growing buffers, kept between calls (under the GIL) ------------------------------------------ */

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Buf;

static Buf OUT, TE;  /* a call's packets; one track event */
#define KEEP (4 << 20)  /* a buffer grown past this is freed after the call */

static int
grow(Buf *b, Py_ssize_t more)
{
    Py_ssize_t cap = b->cap ? b->cap : 1 << 16;
    while (cap < b->len + more)
        cap *= 2;
    char *data = PyMem_Realloc(b->data, (size_t)cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

static inline int
reserve(Buf *b, Py_ssize_t more)
{
    return b->len + more <= b->cap ? 0 : grow(b, more);
}

/* -- rings --------------------------------------------------------------------------------------- */

/* A RingState (_layout.py) as this call reads it; ``ok`` 0: its records go to the reference. */
typedef struct {
    int64_t ring;
    int ok, has_dp, ncaps;
    PyObject *names;                       /* borrowed from the RingState, which ``rings`` holds */
    const char *seq, *extra, *pct_extra;   /* borrowed bytes */
    Py_ssize_t seq_len, extra_len, pct_extra_len;
    int64_t caps[RESOURCES];
} Ring;

#define CACHED 16

/* Fills ``g`` from ``state``; an attribute it lacks or of another type: not ``ok``. */
static void
ring_read(Ring *g, PyObject *state)
{
    static const char *names[] = {"names", "seq", "full", "caps", "extra", "pct_extra"};
    PyObject *v[6];
    g->ok = 0;
    for (int k = 0; k < 6; k++)
        v[k] = PyObject_GetAttrString(state, names[k]);
    for (int k = 0; k < 6; k++)
        if (v[k] == NULL) {
            PyErr_Clear();
            goto done;
        }
    if (!PyDict_CheckExact(v[0]) || !PyBytes_CheckExact(v[1]) || !PyBool_Check(v[2]) || !PyTuple_CheckExact(v[3])
        || !PyBytes_CheckExact(v[4]) || !PyBytes_CheckExact(v[5]))
        goto done;
    g->has_dp = v[2] == Py_True;  /* RingState.full: of the three, the dep pool is the one a ring may lack */
    g->ncaps = (int)PyTuple_GET_SIZE(v[3]);
    if (g->ncaps != 0 && g->ncaps != (g->has_dp ? 3 : 2))
        goto done;
    for (int k = 0; k < g->ncaps; k++)
        if (!i64(PyTuple_GET_ITEM(v[3], k), &g->caps[k]) || g->caps[k] == 0)
            goto done;
    /* the RingState keeps these objects alive: the references are dropped below, the pointers kept */
    g->names = v[0];
    g->seq = PyBytes_AS_STRING(v[1]);
    g->seq_len = PyBytes_GET_SIZE(v[1]);
    g->extra = PyBytes_AS_STRING(v[4]);
    g->extra_len = PyBytes_GET_SIZE(v[4]);
    g->pct_extra = PyBytes_AS_STRING(v[5]);
    g->pct_extra_len = PyBytes_GET_SIZE(v[5]);
    g->ok = 1;
done:
    for (int k = 0; k < 6; k++)
        Py_XDECREF(v[k]);
}

/* -- events -------------------------------------------------------------------------------------- */

/* The line of the record that caused ``ev`` (_layout.event_line); 0: not a bound type or not an int64. */
static inline int
event_line(PyObject *ev, int64_t *line)
{
    PyTypeObject *t = Py_TYPE(ev);
    if (t == T_Scope)
        return i64(SLOT(ev, S_OFF[S_END_LINE]), line);
    if (t == T_Abandoned)
        return i64(SLOT(ev, A_LINE), line);
    if (t == T_UnmatchedEnd)
        return i64(SLOT(ev, E_LINE), line);
    return 0;
}

/* -- one record ------------------------------------------------------------------------------------ */

/* The usage annotations of a closing Scope (``usage``: a 3-tuple of Usage or None); NULL: not writable. */
static char *
put_usage(char *p, PyObject *usage)
{
    if (!PyTuple_CheckExact(usage) || PyTuple_GET_SIZE(usage) != RESOURCES)
        return NULL;
    for (int k = 0; k < RESOURCES; k++) {
        PyObject *u = PyTuple_GET_ITEM(usage, k);
        if (u == Py_None)
            continue;
        if (Py_TYPE(u) != T_Usage)
            return NULL;
        for (int f = 0; f < U_N; f++) {
            int64_t x;
            if (!i64(SLOT(u, U_OFF[f]), &x))
                return NULL;
            p = put_ann(p, IID_USAGE + 3 * k + f, (uint64_t)x);
        }
    }
    return p;
}

/* Appends the packet of ``rec`` (closing: the Scope its events close, or NULL) to ``out``: 1 written, 0 not
 * writable (nothing appended), -1 a Python error. */
static int
put_record(PyObject *rec, const Ring *g, PyObject *closing, int64_t line, int64_t tm_uuid)
{
    int64_t tws, twe, hs, he, dps = 0, dpe = 0, tm;
    if (!i64(SLOT(rec, R_OFF[R_TWS]), &tws) || !i64(SLOT(rec, R_OFF[R_TWE]), &twe)
        || !i64(SLOT(rec, R_OFF[R_HS]), &hs) || !i64(SLOT(rec, R_OFF[R_HE]), &he)
        || !i64(SLOT(rec, R_OFF[R_TM]), &tm))
        return 0;
    i128 x[RESOURCES] = {(i128)twe - tws, (i128)he - hs, 0};
    int nres = g->has_dp ? 3 : 2;
    if (g->has_dp) {  /* (dep_pool_end or 0) - (dep_pool_start or 0) */
        PyObject *s = SLOT(rec, R_OFF[R_DPS]), *e = SLOT(rec, R_OFF[R_DPE]);
        if (s == NULL || e == NULL || (s != Py_None && !i64(s, &dps)) || (e != Py_None && !i64(e, &dpe)))
            return 0;
        x[2] = (i128)dpe - dps;
    }
    i128 pct[RESOURCES];
    for (int k = 0; k < g->ncaps; k++) {
        pct[k] = floordiv(100 * x[k], g->caps[k]);
        if (!FITS(pct[k]))
            return 0;
    }
    for (int k = 0; k < nres; k++)
        if (!FITS(x[k]))
            return 0;

    PyObject *phase = SLOT(rec, R_OFF[R_PHASE]);
    if (phase == NULL || !PyUnicode_CheckExact(phase))
        return 0;
    int begin = phase == S_begin || (phase != S_end && PyUnicode_Compare(phase, S_begin) == 0);
    PyObject *iid = NULL, *usage = NULL;
    int64_t depth = 0, begin_line = 0;
    if (begin) {
        PyObject *site = SLOT(rec, R_OFF[R_SITE]);
        if (site == NULL || !PyUnicode_CheckExact(site))
            return 0;
        iid = PyDict_GetItemWithError(g->names, site);
        if (iid == NULL) {
            if (PyErr_Occurred())
                return -1;
            return 0;  /* a new site: interned by the reference */
        }
        if (!PyBytes_CheckExact(iid))
            return 0;
    } else if (closing != NULL) {
        if (SLOT(closing, S_OFF[S_BEGIN_RING]) != Py_None || !i64(SLOT(closing, S_OFF[S_DEPTH]), &depth)
            || !i64(SLOT(closing, S_OFF[S_BEGIN_LINE]), &begin_line))
            return 0;
        usage = SLOT(closing, S_OFF[S_USAGE]);
        if (usage == NULL)
            return 0;
    }

    /* the track event */
    Py_ssize_t var = (iid ? PyBytes_GET_SIZE(iid) : 0) + g->extra_len + g->pct_extra_len;
    if (reserve(&TE, 512 + var) < 0)
        return -1;
    char *t0 = TE.data, *p = t0;
    char vals[3 * 11], *v = vals;
    for (int k = 0; k < nres; k++) {
        *v++ = EV_EXTRA_VALUE;
        v = put_value(v, x[k]);
    }
    char pcts[3 * 11], *q = pcts;
    for (int k = 0; k < g->ncaps; k++) {
        *q++ = EV_EXTRA_VALUE;
        q = put_value(q, pct[k]);
    }
    *p++ = EV_TYPE;
    if (begin) {  /* BEGIN: name_iid, vals, tensormap, use % */
        *p++ = SLICE_BEGIN;
        p = put_bytes(p, PyBytes_AS_STRING(iid), PyBytes_GET_SIZE(iid));
        p = put_bytes(p, vals, v - vals);
        *p++ = EV_EXTRA_VALUE;
        p = put(p, (uint64_t)tm);
        p = put_bytes(p, pcts, q - pcts);
    } else if (closing != NULL) {  /* END: vals, tensormap, use %, depth, line, usage */
        *p++ = SLICE_END;
        p = put_bytes(p, vals, v - vals);
        *p++ = EV_EXTRA_VALUE;
        p = put(p, (uint64_t)tm);
        p = put_bytes(p, pcts, q - pcts);
        p = put_ann(p, IID_DEPTH, (uint64_t)depth);
        p = put_ann(p, IID_LINE, (uint64_t)begin_line);
        if ((p = put_usage(p, usage)) == NULL)
            return 0;
    } else {  /* COUNTER on the tensormap track: its value, the extra counters' uuids, vals, use % */
        *p++ = COUNTER;
        *p++ = EV_TRACK_UUID;
        p = put(p, (uint64_t)tm_uuid);
        p = put_bytes(p, EV_COUNTER_VALUE, 2);
        p = put(p, (uint64_t)tm);
        p = put_bytes(p, g->extra, g->extra_len);
        p = put_bytes(p, g->pct_extra, g->pct_extra_len);
        p = put_bytes(p, vals, v - vals);
        p = put_bytes(p, pcts, q - pcts);
    }
    Py_ssize_t te = p - t0;

    /* the packet: timestamp (the line), sequence, the event */
    uint64_t n = (uint64_t)(te + PACKET_FIXED + vlen((uint64_t)line) + g->seq_len + vlen((uint64_t)te));
    if (reserve(&OUT, 40 + g->seq_len + te) < 0)
        return -1;
    p = OUT.data + OUT.len;
    *p++ = TRACE_PACKET;
    p = put(p, n);
    *p++ = PKT_TIMESTAMP;
    p = put(p, (uint64_t)line);
    p = put_bytes(p, g->seq, g->seq_len);
    *p++ = PKT_TRACK_EVENT;
    p = put(p, (uint64_t)te);
    p = put_bytes(p, t0, te);
    OUT.len = p - OUT.data;
    return 1;
}

/* -- encode ---------------------------------------------------------------------------------------- */

static PyObject *
encode(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (T_Record == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "ringtrace.sinks.perfetto._encode: bind() was not called");
        return NULL;
    }
    if (nargs != 7 || !PyList_Check(args[0]) || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "encode(parts: list, rings: dict, tm_uuid, records, events, i, ei)");
        return NULL;
    }
    PyObject *parts = args[0], *rings = args[1];
    Py_ssize_t i = PyLong_AsSsize_t(args[5]), ei = PyLong_AsSsize_t(args[6]);
    if ((i == -1 || ei == -1) && PyErr_Occurred())
        return NULL;
    PyObject *recs = PySequence_Fast(args[3], "records must be a sequence");
    PyObject *evs = recs ? PySequence_Fast(args[4], "events must be a sequence") : NULL;
    if (evs == NULL) {
        Py_XDECREF(recs);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(recs), ne = PySequence_Fast_GET_SIZE(evs);
    PyObject **R = PySequence_Fast_ITEMS(recs), **E = PySequence_Fast_ITEMS(evs);
    OUT.len = 0;
    Ring cache[CACHED];
    int cached = 0, failed = 0;
    const Ring *g = NULL;
    int64_t tm_uuid, ev_line = -1;
    if (i < 0 || ei < 0 || !i64(args[2], &tm_uuid) || (ei < ne && !event_line(E[ei], &ev_line)))
        goto done;  /* nothing written: the reference writes every record */
    for (; i < n; i++) {
        PyObject *rec = R[i];
        int64_t line, r;
        if (Py_TYPE(rec) != T_Record || !i64(SLOT(rec, R_OFF[R_LINE]), &line)
            || !i64(SLOT(rec, R_OFF[R_RING]), &r))
            break;
        if (g == NULL || g->ring != r) {
            g = NULL;
            for (int k = 0; k < cached; k++)
                if (cache[k].ring == r)
                    g = &cache[k];
            if (g == NULL) {
                PyObject *state = PyDict_GetItemWithError(rings, SLOT(rec, R_OFF[R_RING]));
                if (state == NULL) {
                    failed = PyErr_Occurred() != NULL;
                    break;  /* a new ring: the reference makes it */
                }
                Ring *slot = &cache[cached < CACHED ? cached++ : CACHED - 1];
                slot->ring = r;
                ring_read(slot, state);
                g = slot;
            }
        }
        if (!g->ok)
            break;
        /* its pair events: the closing Scope (the last one of this line), no Abandoned */
        PyObject *closing = NULL;
        Py_ssize_t ej = ei;
        int64_t next_line = ev_line;
        if (line == ev_line) {
            int odd = ei >= ne;  /* (ev_line -1 with no event left: the reference's IndexError) */
            while (!odd) {
                PyObject *pe = E[ej];
                if (Py_TYPE(pe) == T_Scope)
                    closing = pe;
                else if (Py_TYPE(pe) != T_UnmatchedEnd)
                    odd = 1;
                ej++;
                next_line = -1;
                if (ej < ne && !event_line(E[ej], &next_line))
                    odd = 1;
                if (odd || next_line != line)
                    break;
            }
            if (odd)
                break;
        }
        int rc = put_record(rec, g, closing, line, tm_uuid);
        if (rc <= 0) {
            failed = rc < 0;
            break;
        }
        ei = ej;
        ev_line = next_line;
    }
done:
    if (!failed && OUT.len) {
        PyObject *b = PyBytes_FromStringAndSize(OUT.data, OUT.len);
        failed = b == NULL || PyList_Append(parts, b) < 0;
        Py_XDECREF(b);
    }
    if (OUT.cap > KEEP) {
        PyMem_Free(OUT.data);
        OUT = (Buf){0};
    }
    Py_DECREF(recs);
    Py_DECREF(evs);
    return failed ? NULL : Py_BuildValue("(nn)", i, ei);
}

static PyMethodDef module_methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_VARARGS | METH_KEYWORDS,
     "bind(Record, Scope, Usage, Abandoned, UnmatchedEnd): the types encode reads (ringtrace.sinks.perfetto._records "
     "calls it once)."},
    {"encode", (PyCFunction)(void (*)(void))encode, METH_FASTCALL,
     "encode(parts, rings, tm_uuid, records, events, i, ei) -> (i, ei): the packets of records[i:] up to the "
     "first record it does not write (see the C source), as one bytes object appended to parts."},
    {NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ringtrace.sinks.perfetto._encode",
    "The compiled twin of ringtrace.sinks.perfetto._records.encode: the packets of a run's records.", -1,
    module_methods};

PyMODINIT_FUNC
PyInit__encode(void)
{
    if ((S_begin = PyUnicode_InternFromString("begin")) == NULL || (S_end = PyUnicode_InternFromString("end")) == NULL)
        return NULL;
    return PyModule_Create(&module);
}
