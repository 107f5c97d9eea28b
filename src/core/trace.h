/* The trace recorder: events on one monotonic clock (kernels, copies, runs), written as
 * Chrome trace JSON that Perfetto and chrome://tracing open: one track per device queue and
 * per host thread, flow arrows from a copy to the kernel that reads it. Thread-safe; costs
 * nothing when no recorder is attached (callers test the pointer). */
#ifndef TDM_CORE_TRACE_H
#define TDM_CORE_TRACE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

typedef struct tdm_trace tdm_trace;

tdm_status *tdm_trace_create(const tdm_allocator *a, tdm_trace **out);
void tdm_trace_free(tdm_trace *t);

/* A complete event [t0, t1] (tdm_now_ns) on `track` ("cpu", "test:0 copies", "run"):
 * `name` and `cat` are copied; `args` is a JSON object body without braces (may be NULL);
 * flow_out > 0 starts an arrow with that id, flow_in > 0 ends the arrow with that id. */
void tdm_trace_event(tdm_trace *t, const char *track, const char *name, const char *cat,
                     int64_t t0, int64_t t1, const char *args, uint64_t flow_out,
                     uint64_t flow_in);
/* The same with up to 4 incoming arrows. */
void tdm_trace_event_flows(tdm_trace *t, const char *track, const char *name, const char *cat,
                           int64_t t0, int64_t t1, const char *args, uint64_t flow_out,
                           const uint64_t *flow_in, int n_flow_in);
/* A new id for a flow arrow. */
uint64_t tdm_trace_flow_id(tdm_trace *t);
/* Writes all events recorded so far. */
tdm_status *tdm_trace_write(tdm_trace *t, const char *path);
/* Events recorded so far. */
size_t tdm_trace_count(tdm_trace *t);

#endif
