/* Placement: which device runs each node.
 *
 * HEFT-style list scheduling over the DAG with transfer costs: nodes are ranked by upward
 * cost (their own average cost plus the costliest path to an output, copies included), then,
 * in that order, each node goes to the device where it would finish earliest, counting the
 * copies its inputs need (a tensor crosses to a device once; later consumers there reuse
 * it). Constraints: what each device supports, user affinity, device memory for weights,
 * no-fallback. Afterwards the plan is compared with running everything on each single
 * device, and the best single device wins when the split is not predicted to be faster. */
#ifndef TDM_SCHED_PLACE_H
#define TDM_SCHED_PLACE_H

#include <stdbool.h>

#include "graph/graph.h"
#include "sched/profile.h"

typedef enum tdm_place_reason {
    TDM_PLACE_FASTEST = 0,     /* earliest finish, copies included */
    TDM_PLACE_ONLY_SUPPORTED,  /* the only device with a kernel for it */
    TDM_PLACE_AFFINITY,        /* a user rule */
    TDM_PLACE_MEMORY,          /* better devices had no room for its weights */
    TDM_PLACE_SINGLE_DEVICE,   /* a split is not predicted 5% faster than one device alone */
    TDM_PLACE_HOST_SHAPE,      /* a small shape computation stays on the host */
    TDM_PLACE_FIRST_CHOICE,    /* no profiles: the first device in preference order */
    TDM_PLACE_FOLLOWS_DATA,    /* no arithmetic (Reshape, Transpose...): stays with its data */
} tdm_place_reason;

const char *tdm_place_reason_text(tdm_place_reason r);

typedef struct tdm_place_input {
    const tdm_graph *g;
    int n_devices;
    const tdm_device_profile *profiles; /* per device */
    const bool *host_memory;           /* per device */
    const bool *supported;             /* [node * n_devices + d] */
    const double *node_ms;             /* [node * n_devices + d] predicted or measured ms */
    const int *forced;                 /* per node: device forced by a rule, or -1; may be NULL */
    bool no_fallback;                  /* only device 0 */
    const double *value_bytes;         /* per value of g: its size in bytes for copies; NULL =
                                          from g's static shapes (tdm_value_bytes) */
} tdm_place_input;

typedef struct tdm_place_result {
    int *device;                 /* per node */
    tdm_place_reason *reason;    /* per node */
    double *finish_ms;           /* per node: predicted finish time */
    double makespan_ms;          /* predicted end of the whole graph (devices in parallel) */
    double serial_ms;            /* predicted sum of node and copy times (devices in turn) */
    double copy_ms;              /* predicted time spent copying */
    double copy_bytes;
    double single_ms[TDM_MAX_DEVICES]; /* predicted time on each device alone (INFINITY: cannot) */
} tdm_place_result;

tdm_status *tdm_place_heft(const tdm_place_input *in, const tdm_allocator *a,
                           tdm_place_result *out);
void tdm_place_result_free(const tdm_allocator *a, tdm_place_result *r);

#endif
