/* ringtrace.stages._core, the module glue: the Python types bound once (bind), integers, records, the
 * module and its two types (Pairer: pair.c, Scanner: scan.c).  See core.h for the rooms. */
#include "core.h"

int
bound(void)
{
    if (T_Record == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "ringtrace.stages._core: bind() was not called");
        return 0;
    }
    return 1;
}

/* -- integers ------------------------------------------------------------------------------------ */

/* ``o`` (an int) into ``*out``; values up to 2**127 in magnitude (the decoder's never come near). */
int
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

/* ``type(*args)``: steals every argument (any may be NULL after a failed allocation: then NULL). */
PyObject *
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

/* -- records ------------------------------------------------------------------------------------- */

static PyObject *
opt_long(char none, i128 v)
{
    return none ? NEW(Py_None) : long_from(v);
}

PyObject *
record_object(const Rec *r)
{
    PyObject *f[RT_RECORD_FIELDS] = {
        [RT_RECORD_LINE] = PyLong_FromLongLong(r->line), [RT_RECORD_SITE] = NEW(r->site),
        [RT_RECORD_PHASE] = NEW(r->begin ? S_begin : S_end), [RT_RECORD_DEPTH] = PyLong_FromLongLong(r->depth),
        [RT_RECORD_RING] = PyLong_FromLongLong(r->ring), [RT_RECORD_TASK_WINDOW_START] = L(r->tws),
        [RT_RECORD_TASK_WINDOW_END] = L(r->twe), [RT_RECORD_HEAP_START] = L(r->hs), [RT_RECORD_HEAP_END] = L(r->he),
        [RT_RECORD_DEP_POOL_START] = opt_long(r->dps_none, r->dps),
        [RT_RECORD_DEP_POOL_END] = opt_long(r->dpe_none, r->dpe), [RT_RECORD_TENSORMAP] = PyLong_FromLongLong(r->tm)};
    return make(T_Record, RT_RECORD_FIELDS, f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9], f[10],
                f[11]);
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
int
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

/* -- events ------------------------------------------------------------------------------------- */

/* ``events.append(ev)``, releasing ``ev`` (NULL: a failed allocation, -1) */
int
emit(PyObject *events, PyObject *ev)
{
    if (ev == NULL)
        return -1;
    int rc = PyList_Append(events, ev);
    Py_DECREF(ev);
    return rc;
}

/* -- module -------------------------------------------------------------------------------------- */

static PyObject *
bind(PyObject *mod, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"Record", "Usage", "Scope", "Abandoned", "UnmatchedEnd", "OpenScope", "Peak",
                             "TensormapPeak", "RunSummary", "CappedSummary", "Band", "Bands", NULL};
    PyObject *t[12];
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOOOOOOO", kwlist, &t[0], &t[1], &t[2], &t[3], &t[4],
                                     &t[5], &t[6], &t[7], &t[8], &t[9], &t[10], &t[11]))
        return NULL;
    PyObject **dst[12] = {&T_Record, &T_Usage, &T_Scope, &T_Abandoned, &T_UnmatchedEnd, &T_OpenScope, &T_Peak,
                          &T_TensormapPeak, &T_RunSummary, &T_CappedSummary, &T_Band, &T_Bands};
    for (int i = 0; i < 12; i++)
        Py_XSETREF(*dst[i], Py_NewRef(t[i]));
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_VARARGS | METH_KEYWORDS,
     "bind(Record, Usage, Scope, Abandoned, UnmatchedEnd, OpenScope, Peak, TensormapPeak, RunSummary, "
     "CappedSummary, Band, Bands): the types the core makes (ringtrace.stages.core calls it once)."},
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
        || intern(&S_tws, RT_RESOURCE_0 "_start") || intern(&S_twe, RT_RESOURCE_0 "_end") || intern(&S_hs, RT_RESOURCE_1 "_start")
        || intern(&S_he, RT_RESOURCE_1 "_end") || intern(&S_dps, RT_RESOURCE_2 "_start") || intern(&S_dpe, RT_RESOURCE_2 "_end")
        || intern(&S_tm, "tensormap"))
        return NULL;
    if (RESOURCES == NULL && (RESOURCES = Py_BuildValue("(sss)", RT_RESOURCE_NAMES)) == NULL)
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
