/* Asynchronous copies between host and devices for the executor (sched/xfer.c), used for
 * devices that have the version 3 members of the device interface (events, download_async,
 * host_alloc); devices without them keep the executor's blocking copies.
 *
 * Per run: a download of a device tensor is issued as soon as its producer has been queued
 * (into staging memory, download_async + an event) and the host consumer waits on that event
 * right before it runs, so the copy overlaps the device's later work; an upload is queued
 * without blocking: from the caller's tensor when it outlives the run (graph inputs,
 * constants), else from staging memory filled by a memcpy (the source may be freed at once),
 * or, for a tensor downloaded from another device, from that download's staging memory after
 * the destination waited on the download's event. Staging memory (host_alloc: pinned or
 * mapped) stays with the plan and is reused across runs; a staging block is reused only after
 * the events of every copy that read it (fences) completed. No device-wide synchronize.
 *
 * The sync_copies setting (TANDEM_SYNC_COPIES=1) turns this off (the blocking path, as for
 * devices without version 3), for comparisons. */
#ifndef TDM_SCHED_XFER_H
#define TDM_SCHED_XFER_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/backend.h"

struct tdm_plan;
typedef struct tdm_xfer tdm_xfer;
typedef struct tdm_xfer_pool tdm_xfer_pool;

/* The device has every member the asynchronous path needs. */
bool tdm_xfer_device_async(const tdm_device *dev);
/* True when the settings (sync_copies; NULL = the built-in defaults) ask for the blocking
 * path. */
bool tdm_xfer_forced_sync(const tdm_settings *set);

/* Per-run state for a plan of n_values values; *out = NULL (not an error) when no device of
 * the plan is asynchronous or the blocking path is forced. */
tdm_status *tdm_xfer_begin(struct tdm_plan *p, const tdm_allocator *a, size_t n_values,
                           tdm_xfer **out);
/* Waits for the uploads of this run that are still queued, returns the staging memory it
 * holds and frees x. NULL-safe. The first error seen wins (and the rest is still cleaned). */
tdm_status *tdm_xfer_end(tdm_xfer *x);

/* Starts copying device tensor t (value v, on an asynchronous device) to the host: *host is
 * a view of staging memory, valid after tdm_xfer_wait(x, v). The caller keeps the view as
 * the value's host copy and calls tdm_xfer_drop(x, v) before destroying it. */
tdm_status *tdm_xfer_download(tdm_xfer *x, int v, const tdm_tensor *t, tdm_tensor **host);
/* Whether value v has a download started by tdm_xfer_download (waited for or not). */
bool tdm_xfer_has_download(const tdm_xfer *x, int v);
/* Blocks until value v's download (if any) has completed; t0 and t1 (may be NULL) get when it
 * was issued and when the wait ended (for the trace), *first true for the first waiter. */
tdm_status *tdm_xfer_wait(tdm_xfer *x, int v, int64_t *t0, int64_t *t1, bool *first);
/* Copies host tensor src (value v; `lives` = it stays valid until the run ends) to dev,
 * without blocking: *out is a new device tensor that work queued later on dev may read. */
tdm_status *tdm_xfer_upload(tdm_xfer *x, tdm_device *dev, int v, const tdm_tensor *src,
                            bool lives, tdm_tensor **out);
/* Value v's host copy is about to be destroyed: its staging memory goes back to the pool
 * (with the events of the uploads that read it). */
void tdm_xfer_drop(tdm_xfer *x, int v);

/* The plan's staging memory (freed with the plan). */
void tdm_xfer_pool_free(tdm_xfer_pool *pool, const tdm_allocator *a);

#endif
