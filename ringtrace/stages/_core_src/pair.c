/* ringtrace.stages._core, the pairer: ringtrace.stages.pair.Pairer's twin (its summary: summary.c, its
 * fold of the bands: bands.c).  See core.h for the rooms. */
#include "core.h"

/* -- Pairer -------------------------------------------------------------------------------------- */

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

Slot *
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

PyObject *
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

PyObject *
usage(i128 a, i128 b, i128 c)
{
    return make(T_Usage, 3, L(a), L(b), L(c));
}

/* Pair.push_many's loop body for one record; events into ``events`` (NULL: none made). */
int
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

PyObject *
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

PyTypeObject PairerType = {
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
