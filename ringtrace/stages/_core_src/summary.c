/* ringtrace.stages._core, the pairer's summary: Pairer.summary (pair.Pairer.summary's twin).  See core.h. */
#include "core.h"

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

int
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

PyObject *
Pairer_summary(Pairer *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"parse_errors", "finished", NULL};
    long long parse_errors = 0;
    int finished = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|Lp", kwlist, &parse_errors, &finished))
        return NULL;
    PyObject *meta = self->meta;
    long long version = LLONG_MAX; /* the resources a version's records carry: SINCE_VERSION (tables.h) */
    if (meta != Py_None) {
        PyObject *v = PyObject_GetAttr(meta, S_version);
        if (v == NULL)
            return NULL;
        int overflow;
        version = PyLong_AsLongLongAndOverflow(v, &overflow);
        Py_DECREF(v);
        if (version == -1 && PyErr_Occurred())
            return NULL;
        if (overflow)
            version = overflow > 0 ? LLONG_MAX : LLONG_MIN;
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
            if (version < SINCE_VERSION[i])
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

