/* ringtrace.stages._core, the names every room reads: the Python types and interned strings (set once by
 * bind, module.c) and the resources' first format versions (tables.h).  Declared in core.h; defined here, in a
 * room that includes only what their types need, so the header's declarations point at no room that
 * includes it. */
#include <Python.h>

#include "tables.h"

PyObject *T_Record, *T_Usage, *T_Scope, *T_Abandoned, *T_UnmatchedEnd, *T_OpenScope, *T_Peak,
    *T_TensormapPeak, *T_RunSummary, *T_CappedSummary, *T_Band, *T_Bands, *RESOURCES;
PyObject *S_begin, *S_end, *S_empty, *S_capacity, *S_version, *S_tensormap_max, *S_heap_max, *S_total,
    *S_line, *S_site, *S_phase, *S_depth, *S_ring, *S_tws, *S_twe, *S_hs, *S_he, *S_dps, *S_dpe, *S_tm;

const int SINCE_VERSION[RT_RESOURCES] = {RT_SINCE_VERSIONS};
