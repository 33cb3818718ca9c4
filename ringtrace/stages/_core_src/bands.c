/* ringtrace.stages._core, the bands: ringtrace.stages.bands (Series, Folder) folded by the pairer as it pairs,
 * without a record or scope object.  See core.h for the rooms. */
#include "core.h"

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

void
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
int
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
int
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

/* Folder.bands: the bands so far (None unless the pairer folds them) */
PyObject *
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

