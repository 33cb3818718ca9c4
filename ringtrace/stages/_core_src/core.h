/* ringtrace.stages._core: the compiled reading core (issue 27), in rooms (issue 36).
 *
 * Two types, each the compiled twin of a pure-Python stage, which stays the reference:
 *
 *   Scanner  (scan.c) the line scanner of ringtrace.stages.decode.Decoder: it takes the lines written
 *            exactly as the runtime writes them ({"site": "...", "phase": "begin", "depth": 1, ...},
 *            keys in the runtime's order, plain integers, an ASCII site without escapes) and makes
 *            the decoder's checks on them (depth, ring, dep pool, counters going backwards, the
 *            v4/v5 heap unrolling).  It stops at the first line it does not take, and the decoder
 *            reads that line itself (see decode.LineScanner), so every problem keeps its line, reason
 *            and message.  It never reports a problem itself.
 *   Pairer   (pair.c, its summary in summary.c) ringtrace.stages.pair.Pairer: the same pairing, running
 *            maxima, pinned, requests, depth cap, events and summary.  A Scanner linked to a Pairer pairs
 *            each line it takes without making a Record object (the summary-only readers), or also makes
 *            it (sinks that read records).  Asked to (``bands``), it also folds the report's bands as
 *            ringtrace.stages.bands.Folder does (bands.c), from every record and paired scope, without an object.
 *
 * module.c is the glue: the Python types bound once (bind), integers, records, the module.  This header
 * holds what the rooms share; tables.h (generated from the Python tables: ringtrace.stages.core_header)
 * every constant shared with Python.
 *
 * Counters are 128-bit: the decoder's counters fit in int64, but v4/v5 heap counters are unrolled
 * into monotonic ones that Python would let grow past it.  Everything runs under the GIL.
 * tests/stages/test_core.py feeds both paths the same bytes and requires identical results.
 */
#ifndef RINGTRACE_CORE_H
#define RINGTRACE_CORE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#include "tables.h"

typedef __int128 i128;

#define MAX_DEPTH RT_MAX_DEPTH
#define DEPTH_CAP RT_DEPTH_CAP
#define NEST RT_NEST
#define DEP_POOL_BATCH RT_DEP_POOL_BATCH
#define MAX_RINGS 4096 /* the scanner leaves files with more rings in their metadata to Python */

/* What the C code is written for; a table that moved past it fails the build here, and the install then says
 * so in one line and reads on the pure path.  A fourth resource needs: Rec's pair of counters, Slot's maxima,
 * sites, lines and bands sized by RT_RESOURCES, the scanner's keys, and the summary's loop over them. */
_Static_assert(RT_RESOURCES == 3, "the C core carries three resources (Rec: tws..dpe)");
_Static_assert(RT_RECORD_FIELDS == 12, "the C core builds a Record of 12 fields (module.c, record_object)");
_Static_assert(NEST > MAX_DEPTH, "the pairer's nesting table holds every depth the scanner takes");

/* -- names.c: the Python types and names, bound once by ringtrace.stages.core (bind, module.c) ----------- */

extern PyObject *T_Record, *T_Usage, *T_Scope, *T_Abandoned, *T_UnmatchedEnd, *T_OpenScope, *T_Peak,
    *T_TensormapPeak, *T_RunSummary, *T_CappedSummary, *T_Band, *T_Bands, *RESOURCES;
extern PyObject *S_begin, *S_end, *S_empty, *S_capacity, *S_version, *S_tensormap_max, *S_heap_max, *S_total,
    *S_line, *S_site, *S_phase, *S_depth, *S_ring, *S_tws, *S_twe, *S_hs, *S_he, *S_dps, *S_dpe, *S_tm;
extern const int SINCE_VERSION[RT_RESOURCES];

int bound(void);

/* -- module.c: integers and objects ---------------------------------------------------------------------- */

int i128_from(PyObject *o, i128 *out);
PyObject *make(PyObject *type, int n, ...);
int emit(PyObject *events, PyObject *ev);

/* an integer past int64 as a Python int (long_from's rare case) */
static inline PyObject *
long_big(i128 v)
{
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

static inline PyObject *
long_from(i128 v)
{
    if (v >= INT64_MIN && v <= INT64_MAX)
        return PyLong_FromLongLong((long long)v);
    return long_big(v);
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

/* ``*slot = site``, holding it and releasing what it held */
static inline void
set_site(PyObject **slot, PyObject *site)
{
    PyObject *old = *slot;
    *slot = Py_NewRef(site);
    Py_XDECREF(old);
}

static inline i128 max0(i128 v) { return v > 0 ? v : 0; }

#define NEW(o) Py_NewRef(o)
#define L(v) long_from(v)

/* -- module.c: records ----------------------------------------------------------------------------------- */

typedef struct {
    int64_t line, serial, depth, ring, tm;
    PyObject *site; /* borrowed while passed around; strong where stored (stack, last, tm_site) */
    int begin;
    char dps_none, dpe_none;
    i128 tws, twe, hs, he, dps, dpe;
} Rec;

static inline i128 dps0(const Rec *r) { return r->dps_none ? 0 : r->dps; }
static inline i128 dpe0(const Rec *r) { return r->dpe_none ? 0 : r->dpe; }

PyObject *record_object(const Rec *r);
int rec_from(PyObject *o, Rec *r);

/* -- pair.c: the Pairer ---------------------------------------------------------------------------------- */

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

struct Band; /* bands.c */

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

extern PyTypeObject PairerType;

Slot *slot_for(Pairer *self, int64_t ring);
int pair_one(Pairer *self, const Rec *e, PyObject *events);
PyObject *usage(i128 a, i128 b, i128 c);
PyObject *open_scope(const Rec *b);
PyObject *Pairer_open_scopes(Pairer *self, void *closure);
int by_ring(const void *a, const void *b);

/* -- summary.c: Pairer.summary --------------------------------------------------------------------------- */

PyObject *Pairer_summary(Pairer *self, PyObject *args, PyObject *kwds);

/* -- bands.c: the fold of the bands (bands.Folder) ------------------------------------------------------- */

int fold_record(Pairer *self, Slot *s, const Rec *e);
int fold_scope(Pairer *self, Slot *s, const Rec *b, const Rec *e, i128 t0, i128 h0, int dp, i128 d0);
void band_free(struct Band *s);
PyObject *Pairer_bands(Pairer *self, PyObject *unused);

/* -- scan.c: the Scanner --------------------------------------------------------------------------------- */

extern PyTypeObject ScannerType;

#endif
