/* Monitoring API (tandem.h, "monitoring"): per-device figures of a session read from the
 * counters the executor keeps (sched/monitor.h) and the session's queue of asynchronous runs. */
#include <stddef.h>
#include <string.h>

#include "api/api_impl.h"
#include "sched/monitor.h"

size_t tdm_session_monitor_count(const tdm_session *s) { return s ? (size_t)s->n_devices : 0; }

/* Asynchronous runs waiting in the session's queue (src/api/session.c; the prototype belongs
 * in api_impl.h, which this helper does not own). */

tdm_status *tdm_session_monitor(tdm_session *s, size_t index, tdm_device_monitor *out,
                                size_t struct_size) {
    size_t min_size = offsetof(tdm_device_monitor, window_ms) + sizeof out->window_ms;
    if (!s || !out) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_session_monitor: NULL argument");
    if (struct_size < min_size)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT,
                       "tdm_session_monitor: struct_size %zu is smaller than %zu", struct_size,
                       min_size);
    if (index >= tdm_session_monitor_count(s))
        return TDM_ERR(TDM_ERR_NOT_FOUND, "the session has no device %zu", index);
    const tdm_device *dev = s->devices[index];
    tdm_monitor_slot c;
    int64_t now = 0, start = 0;
    tdm_monitor_read(s->monitor, dev->index, &c, &now, &start);
    tdm_device_monitor m;
    memset(&m, 0, sizeof m);
    m.device = dev->name;
    m.window_ms = (double)(now - start) / 1e6;
    m.busy_ms = (double)c.busy_ns / 1e6;
    if (m.busy_ms > m.window_ms) m.busy_ms = m.window_ms; /* clock reads a few ns apart */
    m.utilization = m.window_ms > 0 ? m.busy_ms / m.window_ms : 0;
    m.kernels = c.kernels;
    m.memory_in_use = c.mem_in_use;
    m.memory_peak = c.mem_peak > c.mem_in_use ? c.mem_peak : c.mem_in_use;
    m.runs_in_flight = c.in_flight;
    m.runs_queued = tdm_session_queued_runs(s);
    m.uploads = c.uploads;
    m.downloads = c.downloads;
    m.bytes_uploaded = c.bytes_up;
    m.bytes_downloaded = c.bytes_down;
    m.bytes_uploaded_pinned = c.bytes_up_pinned;
    m.kv_bytes_uploaded = c.kv_up;
    m.kv_bytes_downloaded = c.kv_down;
    double secs = m.window_ms / 1e3;
    m.copies_per_s = secs > 0 ? (double)(c.uploads + c.downloads) / secs : 0;
    m.copy_bytes_per_s = secs > 0 ? (double)(c.bytes_up + c.bytes_down) / secs : 0;
    memcpy(out, &m, struct_size < sizeof m ? struct_size : sizeof m);
    return NULL;
}

void tdm_session_monitor_reset(tdm_session *s) {
    if (s) tdm_monitor_reset(s->monitor);
}
