/* ringtrace's tables for its C sources, written from the Python tables by `make core-header`
 * (python -m ringtrace.stages.core_header): do not edit.  tests/stages/test_core_header.py fails when
 * it is stale. */
#ifndef RINGTRACE_TABLES_H
#define RINGTRACE_TABLES_H

#define RT_MAX_DEPTH 64 /* ringtrace.stages.decode.MAX_DEPTH */
#define RT_DEPTH_CAP 63 /* ringtrace.stages.pair.DEPTH_CAP */
#define RT_NEST 66 /* ringtrace.stages.pair.NEST */
#define RT_DEP_POOL_BATCH 64 /* ringtrace.model.runtime.DEP_POOL_BATCH */

/* ringtrace.model.runtime.TABLE: the per-ring resources in report order, and their first versions */
#define RT_RESOURCES 3
#define RT_RESOURCE_NAMES "task_window", "heap", "dep_pool"
#define RT_SINCE_VERSIONS 4, 4, 5
#define RT_RESOURCE_0 "task_window"
#define RT_RESOURCE_1 "heap"
#define RT_RESOURCE_2 "dep_pool"

/* ringtrace.model.records.Record: its fields, in order (the core builds records positionally) */
#define RT_RECORD_FIELDS 12
#define RT_RECORD_LINE 0
#define RT_RECORD_SITE 1
#define RT_RECORD_PHASE 2
#define RT_RECORD_DEPTH 3
#define RT_RECORD_RING 4
#define RT_RECORD_TASK_WINDOW_START 5
#define RT_RECORD_TASK_WINDOW_END 6
#define RT_RECORD_HEAP_START 7
#define RT_RECORD_HEAP_END 8
#define RT_RECORD_DEP_POOL_START 9
#define RT_RECORD_DEP_POOL_END 10
#define RT_RECORD_TENSORMAP 11

#endif
