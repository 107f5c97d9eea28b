#include "core/trace.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"

typedef struct trace_event {
    char name[96];
    char cat[32];
    char args[160];
    int track;
    int64_t t0, t1;
    uint64_t flow_out, flow_in[4];
} trace_event;

struct tdm_trace {
    const tdm_allocator *a;
    pthread_mutex_t mu;
    trace_event *ev;
    size_t n, cap;
    char tracks[64][48];
    int n_tracks;
    uint64_t next_flow;
    int64_t origin;
    bool dropped;
};

tdm_status *tdm_trace_create(const tdm_allocator *a, tdm_trace **out) {
    tdm_trace *t = tdm_calloc(a, 1, sizeof *t);
    if (!t) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating a trace");
    t->a = a;
    pthread_mutex_init(&t->mu, NULL);
    t->origin = tdm_now_ns();
    t->next_flow = 1;
    *out = t;
    return NULL;
}

void tdm_trace_free(tdm_trace *t) {
    if (!t) return;
    pthread_mutex_destroy(&t->mu);
    tdm_free(t->a, t->ev);
    tdm_free(t->a, t);
}

uint64_t tdm_trace_flow_id(tdm_trace *t) {
    pthread_mutex_lock(&t->mu);
    uint64_t id = t->next_flow++;
    pthread_mutex_unlock(&t->mu);
    return id;
}

size_t tdm_trace_count(tdm_trace *t) {
    pthread_mutex_lock(&t->mu);
    size_t n = t->n;
    pthread_mutex_unlock(&t->mu);
    return n;
}

void tdm_trace_event_flows(tdm_trace *t, const char *track, const char *name, const char *cat,
                           int64_t t0, int64_t t1, const char *args, uint64_t flow_out,
                           const uint64_t *flow_in, int n_flow_in) {
    pthread_mutex_lock(&t->mu);
    int tr = 0;
    while (tr < t->n_tracks && strcmp(t->tracks[tr], track)) tr++;
    if (tr == t->n_tracks && t->n_tracks < 64) {
        snprintf(t->tracks[tr], sizeof t->tracks[tr], "%s", track);
        t->n_tracks++;
    }
    if (tr == 64 || (t->n == t->cap && tdm_grow(t->a, (void **)&t->ev, &t->cap, t->n + 1, sizeof *t->ev))) {
        t->dropped = true; /* a trace never fails the run */
        pthread_mutex_unlock(&t->mu);
        return;
    }
    trace_event *e = &t->ev[t->n++];
    snprintf(e->name, sizeof e->name, "%s", name);
    snprintf(e->cat, sizeof e->cat, "%s", cat);
    snprintf(e->args, sizeof e->args, "%s", args ? args : "");
    e->track = tr;
    e->t0 = t0;
    e->t1 = t1 < t0 ? t0 : t1;
    e->flow_out = flow_out;
    memset(e->flow_in, 0, sizeof e->flow_in);
    for (int k = 0; k < n_flow_in && k < 4; k++) e->flow_in[k] = flow_in[k];
    pthread_mutex_unlock(&t->mu);
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

tdm_status *tdm_trace_write(tdm_trace *t, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) return TDM_ERR(TDM_ERR_IO, "cannot write trace '%s': %s", path, strerror(errno));
    pthread_mutex_lock(&t->mu);
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"tandem\",\"dropped_events\":%s},"
               "\"traceEvents\":[\n", t->dropped ? "true" : "false");
    fprintf(f, "{\"ph\":\"M\",\"pid\":1,\"name\":\"process_name\",\"args\":{\"name\":\"tandem\"}}");
    for (int tr = 0; tr < t->n_tracks; tr++) {
        fprintf(f, ",\n{\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":", tr + 1);
        json_str(f, t->tracks[tr]);
        fprintf(f, "}}");
        fprintf(f, ",\n{\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":%d}}",
                tr + 1, tr);
    }
    for (size_t i = 0; i < t->n; i++) {
        const trace_event *e = &t->ev[i];
        double ts = (double)(e->t0 - t->origin) / 1e3, dur = (double)(e->t1 - e->t0) / 1e3;
        fprintf(f, ",\n{\"ph\":\"X\",\"pid\":1,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"name\":", e->track + 1,
                ts, dur);
        json_str(f, e->name);
        fprintf(f, ",\"cat\":");
        json_str(f, e->cat);
        fprintf(f, ",\"args\":{%s}}", e->args);
        /* flow arrows: start at the end of the copy, end at the start of the consumer */
        if (e->flow_out)
            fprintf(f, ",\n{\"ph\":\"s\",\"pid\":1,\"tid\":%d,\"ts\":%.3f,\"id\":%llu,\"name\":\"data\",\"cat\":\"flow\"}",
                    e->track + 1, ts + dur, (unsigned long long)e->flow_out);
        for (int k = 0; k < 4; k++)
            if (e->flow_in[k])
                fprintf(f, ",\n{\"ph\":\"f\",\"bp\":\"e\",\"pid\":1,\"tid\":%d,\"ts\":%.3f,\"id\":%llu,\"name\":\"data\",\"cat\":\"flow\"}",
                        e->track + 1, ts, (unsigned long long)e->flow_in[k]);
    }
    fprintf(f, "\n]}\n");
    pthread_mutex_unlock(&t->mu);
    if (fclose(f) != 0) return TDM_ERR(TDM_ERR_IO, "cannot write trace '%s'", path);
    return NULL;
}

void tdm_trace_event(tdm_trace *t, const char *track, const char *name, const char *cat,
                     int64_t t0, int64_t t1, const char *args, uint64_t flow_out,
                     uint64_t flow_in) {
    tdm_trace_event_flows(t, track, name, cat, t0, t1, args, flow_out, &flow_in, flow_in ? 1 : 0);
}
