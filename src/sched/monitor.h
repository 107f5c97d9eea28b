/* Per-device counters of a session (the numbers tdm_session_monitor reports): busy time as
 * the union of the intervals in which a device executes at least one node, memory the
 * executor holds on the device (device buffers; heap tensors and arenas for host memory),
 * runs in flight, and copies (uploads into and downloads out of each device's memory).
 *
 * One tdm_monitor belongs to a session and is shared by all of its plans (throughput mode:
 * every replica), so a device that two replicas use is counted once. Slots are indexed by
 * the device's position in the environment (tdm_device.index). A plan without a monitor
 * (plan->monitor == NULL) counts nothing. Every function takes the monitor's lock: runs on
 * several threads update the same counters. */
#ifndef TDM_SCHED_MONITOR_H
#define TDM_SCHED_MONITOR_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"
#include "core/alloc.h"
#include "core/status.h"


typedef struct tdm_monitor_slot {
    int active;              /* nodes executing on the device right now */
    int64_t active_since_ns; /* when `active` last went from 0 to 1 */
    int64_t busy_ns;         /* closed busy intervals since the window start */
    int64_t kernels;         /* nodes executed since the window start */
    int in_flight;           /* runs in progress whose plan uses the device */
    int64_t mem_in_use, mem_peak; /* bytes; peak since the window start */
    int64_t uploads, downloads;   /* copies since the window start */
    int64_t bytes_up, bytes_down;
    int64_t bytes_up_pinned;      /* of bytes_up: copied from registered (page-locked) host memory */
    int64_t kv_up, kv_down;       /* of bytes_up / bytes_down: a generator's KV cache */
} tdm_monitor_slot;

typedef struct tdm_monitor {
    pthread_mutex_t mu;
    int64_t window_start_ns;
    tdm_monitor_slot slot[TDM_MAX_DEVICES];
} tdm_monitor;

tdm_status *tdm_monitor_create(const tdm_allocator *a, tdm_monitor **out);
void tdm_monitor_free(const tdm_allocator *a, tdm_monitor *m);

/* Node execution on device slot `dev` starts / ends (busy intervals and kernel count). */
void tdm_monitor_node_begin(tdm_monitor *m, int dev);
void tdm_monitor_node_end(tdm_monitor *m, int dev);
/* Ends an interval opened by tdm_monitor_node_begin that ran `nodes` nodes back to back. */
void tdm_monitor_nodes_end(tdm_monitor *m, int dev, int64_t nodes);
/* A run of a plan using these devices starts (+1) or ends (-1). */
void tdm_monitor_runs(tdm_monitor *m, const int *devs, int n, int delta);
/* Memory held on device slot `dev` grows (bytes > 0) or shrinks (bytes < 0). */
void tdm_monitor_memory(tdm_monitor *m, int dev, int64_t bytes);
/* A copy of `bytes` into (upload) or out of (download) device slot `dev`'s memory. */
void tdm_monitor_copy(tdm_monitor *m, int dev, bool upload, int64_t bytes);
/* Of an upload counted by tdm_monitor_copy: `bytes` came from registered host memory. */
void tdm_monitor_copy_pinned(tdm_monitor *m, int dev, int64_t bytes);
/* Of the bytes counted by tdm_monitor_copy: a generator's KV cache (graph/graph.h kv_layer). */
void tdm_monitor_copy_kv(tdm_monitor *m, int dev, bool upload, int64_t bytes);
/* Snapshot of one slot plus the current time and window start, taken under the lock;
 * busy_ns includes the open interval. */
void tdm_monitor_read(tdm_monitor *m, int dev, tdm_monitor_slot *out, int64_t *now_ns,
                      int64_t *window_start_ns);
/* Starts a new window: busy time, kernels and copies to zero, peak to the current use. */
void tdm_monitor_reset(tdm_monitor *m);

#endif
