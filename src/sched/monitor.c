/* Per-device counters of a session: see monitor.h. */
#include "sched/monitor.h"

#include <string.h>

#include "core/clock.h"

tdm_status *tdm_monitor_create(const tdm_allocator *a, tdm_monitor **out) {
    tdm_monitor *m = tdm_calloc(a, 1, sizeof *m);
    if (!m) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating device counters");
    if (pthread_mutex_init(&m->mu, NULL) != 0) {
        tdm_free(a, m);
        return TDM_ERR(TDM_ERR_RUNTIME, "cannot create the device counters' lock");
    }
    m->window_start_ns = tdm_now_ns();
    *out = m;
    return NULL;
}

void tdm_monitor_free(const tdm_allocator *a, tdm_monitor *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    tdm_free(a, m);
}

static bool slot_ok(const tdm_monitor *m, int dev) {
    return m && dev >= 0 && dev < TDM_MAX_DEVICES;
}

void tdm_monitor_node_begin(tdm_monitor *m, int dev) {
    if (!slot_ok(m, dev)) return;
    int64_t now = tdm_now_ns();
    pthread_mutex_lock(&m->mu);
    tdm_monitor_slot *s = &m->slot[dev];
    if (s->active++ == 0) s->active_since_ns = now;
    pthread_mutex_unlock(&m->mu);
}

void tdm_monitor_node_end(tdm_monitor *m, int dev) { tdm_monitor_nodes_end(m, dev, 1); }

void tdm_monitor_nodes_end(tdm_monitor *m, int dev, int64_t nodes) {
    if (!slot_ok(m, dev)) return;
    int64_t now = tdm_now_ns();
    pthread_mutex_lock(&m->mu);
    tdm_monitor_slot *s = &m->slot[dev];
    s->kernels += nodes;
    if (s->active > 0 && --s->active == 0) {
        /* an interval opened before a reset counts from the window start */
        int64_t from = s->active_since_ns > m->window_start_ns ? s->active_since_ns
                                                               : m->window_start_ns;
        if (now > from) s->busy_ns += now - from;
    }
    pthread_mutex_unlock(&m->mu);
}

void tdm_monitor_runs(tdm_monitor *m, const int *devs, int n, int delta) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < n; i++)
        if (devs[i] >= 0 && devs[i] < TDM_MAX_DEVICES) m->slot[devs[i]].in_flight += delta;
    pthread_mutex_unlock(&m->mu);
}

void tdm_monitor_memory(tdm_monitor *m, int dev, int64_t bytes) {
    if (!slot_ok(m, dev) || !bytes) return;
    pthread_mutex_lock(&m->mu);
    tdm_monitor_slot *s = &m->slot[dev];
    s->mem_in_use += bytes;
    if (s->mem_in_use > s->mem_peak) s->mem_peak = s->mem_in_use;
    pthread_mutex_unlock(&m->mu);
}

void tdm_monitor_copy(tdm_monitor *m, int dev, bool upload, int64_t bytes) {
    if (!slot_ok(m, dev)) return;
    pthread_mutex_lock(&m->mu);
    tdm_monitor_slot *s = &m->slot[dev];
    if (upload) {
        s->uploads++;
        s->bytes_up += bytes;
    } else {
        s->downloads++;
        s->bytes_down += bytes;
    }
    pthread_mutex_unlock(&m->mu);
}

void tdm_monitor_copy_pinned(tdm_monitor *m, int dev, int64_t bytes) {
    if (!slot_ok(m, dev)) return;
    pthread_mutex_lock(&m->mu);
    m->slot[dev].bytes_up_pinned += bytes;
    pthread_mutex_unlock(&m->mu);
}

void tdm_monitor_copy_kv(tdm_monitor *m, int dev, bool upload, int64_t bytes) {
    if (!slot_ok(m, dev)) return;
    pthread_mutex_lock(&m->mu);
    if (upload) m->slot[dev].kv_up += bytes;
    else m->slot[dev].kv_down += bytes;
    pthread_mutex_unlock(&m->mu);
}

void tdm_monitor_read(tdm_monitor *m, int dev, tdm_monitor_slot *out, int64_t *now_ns,
                      int64_t *window_start_ns) {
    memset(out, 0, sizeof *out);
    *now_ns = tdm_now_ns();
    *window_start_ns = *now_ns;
    if (!slot_ok(m, dev)) return;
    pthread_mutex_lock(&m->mu);
    int64_t now = tdm_now_ns();
    *out = m->slot[dev];
    if (out->active > 0) {
        int64_t from = out->active_since_ns > m->window_start_ns ? out->active_since_ns
                                                                 : m->window_start_ns;
        if (now > from) out->busy_ns += now - from;
    }
    *now_ns = now;
    *window_start_ns = m->window_start_ns;
    pthread_mutex_unlock(&m->mu);
}

void tdm_monitor_reset(tdm_monitor *m) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    m->window_start_ns = tdm_now_ns();
    for (int i = 0; i < TDM_MAX_DEVICES; i++) {
        tdm_monitor_slot *s = &m->slot[i];
        s->busy_ns = 0;
        s->kernels = 0;
        s->uploads = s->downloads = 0;
        s->bytes_up = s->bytes_down = 0;
        s->bytes_up_pinned = 0;
        s->kv_up = s->kv_down = 0;
        s->mem_peak = s->mem_in_use;
    }
    pthread_mutex_unlock(&m->mu);
}
