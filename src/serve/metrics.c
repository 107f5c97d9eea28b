/* tandem serve: Prometheus metrics with Triton's names, latency summaries, and per-device
 * utilisation and memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "serve/openai.h"
#include "serve/server.h"

/* A label value in Prometheus' text format: backslash, double quote and line feed escaped;
 * every other byte as it is (names are UTF-8). */
static void label_value(sv_buf *b, const char *v) {
    sv_buf_str(b, "\"");
    for (const char *p = v; *p; p++) {
        if (*p == '\\') sv_buf_str(b, "\\\\");
        else if (*p == '"') sv_buf_str(b, "\\\"");
        else if (*p == '\n') sv_buf_str(b, "\\n");
        else sv_buf_add(b, p, 1);
    }
    sv_buf_str(b, "\"");
}

/* Opens the label set with the model's name and version (the caller closes it). */
static void label(sv_buf *b, const sv_version *v) {
    sv_buf_str(b, "{model=");
    label_value(b, v->model_name);
    sv_buf_str(b, ",version=");
    label_value(b, v->vstr);
}

static void device_label(sv_buf *b, const char *name, const char *dev) {
    sv_buf_printf(b, "%s{device=", name);
    label_value(b, dev);
    sv_buf_str(b, "}");
}

static void header(sv_buf *b, const char *name, const char *help, const char *type) {
    sv_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static bool read_proc_stat(uint64_t *busy, uint64_t *total) {
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return false;
    unsigned long long v[8] = {0};
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    if (n < 4) return false;
    *total = 0;
    for (int i = 0; i < 8; i++) *total += v[i];
    *busy = *total - v[3] - v[4]; /* minus idle and iowait */
    return true;
}

static void meminfo(uint64_t *total, uint64_t *avail) {
    *total = *avail = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) *total = kb * 1024;
        else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) *avail = kb * 1024;
    }
    fclose(f);
}

static uint64_t rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long long size = 0, res = 0;
    if (fscanf(f, "%llu %llu", &size, &res) != 2) res = 0;
    fclose(f);
    return res * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* Per model instance and device of its plan, from tandem's monitoring API
 * (tdm_session_monitor): utilisation, memory, kernels and copies. */
static void render_monitor(sv_version **v, int n, sv_buf *b) {
    enum { UTIL, MEM, PEAK, KERNELS, INFLIGHT, COPIES, BYTES, N_FAM };
    static const char *const fam[N_FAM][3] = {
        {"tandem_device_utilization", "gauge",
         "Fraction of time the device executed nodes of the model instance, since the previous scrape"},
        {"tandem_device_memory_bytes", "gauge",
         "Bytes the model instance's runs hold on the device now (weights on devices with their own memory, arenas, tensors)"},
        {"tandem_device_memory_peak_bytes", "gauge",
         "Highest tandem_device_memory_bytes since the instance was loaded"},
        {"tandem_device_kernels_total", "counter", "Nodes the device executed for the model instance"},
        {"tandem_device_runs_in_flight", "gauge", "Runs of the model instance executing on the device now"},
        {"tandem_device_copies_total", "counter",
         "Copies into (upload) and out of (download) the device's memory for the model instance"},
        {"tandem_device_copy_bytes_total", "counter",
         "Bytes copied into (upload) and out of (download) the device's memory for the model instance"},
    };
    /* gather first (each call moves the utilisation window), then print family by family */
    int n_rows = 0, cap = 0;
    struct row {
        const sv_version *v;
        int inst;
        tdm_device_monitor m;
        double util;
    } *rows = NULL;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < SV_MAX_INSTANCES; j++) {
            tdm_device_monitor m[SV_MON_DEVICES];
            double u[SV_MON_DEVICES];
            int k = sv_sched_monitor(v[i]->sched, j, SV_MON_DEVICES, m, u);
            if (!k) break;
            for (int d = 0; d < k; d++) {
                if (n_rows == cap) {
                    int nc = cap ? 2 * cap : 16;
                    struct row *r2 = realloc(rows, (size_t)nc * sizeof *r2);
                    if (!r2) break;
                    rows = r2;
                    cap = nc;
                }
                rows[n_rows++] = (struct row){v[i], j, m[d], u[d]};
            }
        }
    }
    for (int f = 0; f < N_FAM; f++) {
        header(b, fam[f][0], fam[f][2], fam[f][1]);
        for (int r = 0; r < n_rows; r++) {
            const struct row *w = &rows[r];
            for (int dir = 0; dir < (f >= COPIES ? 2 : 1); dir++) {
                sv_buf_str(b, fam[f][0]);
                label(b, w->v);
                sv_buf_printf(b, ",instance=\"%d\",device=", w->inst);
                label_value(b, w->m.device ? w->m.device : "?");
                if (f >= COPIES) sv_buf_str(b, dir ? ",direction=\"download\"" : ",direction=\"upload\"");
                sv_buf_str(b, "} ");
                const tdm_device_monitor *m = &w->m;
                switch (f) {
                case UTIL: sv_buf_printf(b, "%.4f\n", w->util); break;
                case MEM: sv_buf_printf(b, "%lld\n", (long long)(m->memory_in_use > 0 ? m->memory_in_use : 0)); break;
                case PEAK: sv_buf_printf(b, "%lld\n", (long long)(m->memory_peak > 0 ? m->memory_peak : 0)); break;
                case KERNELS: sv_buf_printf(b, "%lld\n", (long long)m->kernels); break;
                case INFLIGHT: sv_buf_printf(b, "%d\n", m->runs_in_flight); break;
                case COPIES: sv_buf_printf(b, "%lld\n", (long long)(dir ? m->downloads : m->uploads)); break;
                default:
                    sv_buf_printf(b, "%lld\n", (long long)(dir ? m->bytes_downloaded : m->bytes_uploaded));
                    break;
                }
            }
        }
    }
    free(rows);
}

void sv_metrics_render(sv_repo *repo, sv_metrics_state *ms, sv_buf *b) {
    sv_version **v = NULL;
    int n = sv_repo_versions(repo, &v);
    /* language models (openai.h) have their own metrics: they go to the end of the list */
    int n_llm = 0, k = 0;
    for (int i = 0; i < n; i++) {
        if (v[i]->llm) continue;
        sv_version *t = v[k];
        v[k++] = v[i];
        v[i] = t;
    }
    n_llm = n - k;
    n = k;
    sv_stats *snap = malloc((size_t)(n ? n : 1) * sizeof *snap);
    uint64_t *pending = calloc((size_t)n + 1, sizeof *pending);
    uint64_t (*cancelled)[SV_CANCEL_N] = calloc((size_t)n + 1, sizeof *cancelled);
    if (!snap || !pending || !cancelled) {
        for (int i = 0; i < n + n_llm; i++) sv_version_unref(repo, v[i]);
        free(v);
        free(snap);
        free(pending);
        free(cancelled);
        sv_buf_str(b, "# out of memory\n");
        return;
    }
    for (int i = 0; i < n; i++) {
        sv_stats_snapshot(&v[i]->stats, &snap[i]);
        pending[i] = sv_sched_pending(v[i]->sched);
        sv_sched_cancelled(v[i]->sched, cancelled[i]);
    }
    static const struct {
        const char *name, *help;
        int field;
    } counters[] = {
        {"nv_inference_request_success", "Number of successful inference requests, all batch sizes", 0},
        {"nv_inference_request_failure", "Number of failed inference requests, all batch sizes", 1},
        {"nv_inference_count", "Number of inferences performed (batch elements)", 2},
        {"nv_inference_exec_count", "Number of model executions performed", 3},
        {"nv_inference_request_duration_us", "Cumulative inference request duration in microseconds", 4},
        {"nv_inference_queue_duration_us", "Cumulative inference queuing duration in microseconds", 5},
        {"nv_inference_compute_input_duration_us", "Cumulative compute input duration in microseconds", 6},
        {"nv_inference_compute_infer_duration_us", "Cumulative compute inference duration in microseconds", 7},
        {"nv_inference_compute_output_duration_us", "Cumulative inference compute output duration in microseconds", 8},
    };
    for (size_t c = 0; c < sizeof counters / sizeof counters[0]; c++) {
        header(b, counters[c].name, counters[c].help, "counter");
        for (int i = 0; i < n; i++) {
            const sv_stats *s = &snap[i];
            uint64_t val = 0;
            switch (counters[c].field) {
            case 0: val = s->success.count; break;
            case 1: val = s->fail.count; break;
            case 2: val = s->inference_count; break;
            case 3: val = s->execution_count; break;
            case 4: val = (s->success.ns + s->fail.ns) / 1000; break;
            case 5: val = s->queue.ns / 1000; break;
            case 6: val = s->in.ns / 1000; break;
            case 7: val = s->infer.ns / 1000; break;
            default: val = s->out.ns / 1000; break;
            }
            sv_buf_str(b, counters[c].name);
            label(b, v[i]);
            sv_buf_printf(b, "} %llu\n", (unsigned long long)val);
        }
    }
    header(b, "nv_inference_pending_request_count",
           "Instantaneous number of pending requests awaiting execution per-model", "gauge");
    for (int i = 0; i < n; i++) {
        sv_buf_str(b, "nv_inference_pending_request_count");
        label(b, v[i]);
        sv_buf_printf(b, "} %llu\n", (unsigned long long)pending[i]);
    }
    header(b, "tandem_request_cancelled_total",
           "Inference requests ended without the model's answer (also counted in "
           "nv_inference_request_failure): reason disconnect = the client went away while the "
           "request was queued (it never ran), queue_timeout = its timeout passed in the queue, "
           "run_timeout = the timeouts of every request of its batch passed while the batch ran",
           "counter");
    for (int i = 0; i < n; i++) {
        for (int r = 0; r < SV_CANCEL_N; r++) {
            sv_buf_str(b, "tandem_request_cancelled_total");
            label(b, v[i]);
            sv_buf_printf(b, ",reason=\"%s\"} %llu\n", sv_cancel_reason_name((sv_cancel_reason)r),
                          (unsigned long long)cancelled[i][r]);
        }
    }
    static const char *const summaries[SV_N_PHASES][2] = {
        {"nv_inference_request_summary_us", "Summary of inference request duration in microseconds"},
        {"nv_inference_queue_summary_us", "Summary of inference queuing duration in microseconds"},
        {"nv_inference_compute_input_summary_us", "Summary of compute input duration in microseconds"},
        {"nv_inference_compute_infer_summary_us", "Summary of compute inference duration in microseconds"},
        {"nv_inference_compute_output_summary_us", "Summary of compute output duration in microseconds"},
    };
    static const double qs[] = {0.5, 0.9, 0.99};
    for (int p = 0; p < SV_N_PHASES; p++) {
        header(b, summaries[p][0], summaries[p][1], "summary");
        for (int i = 0; i < n; i++) {
            const sv_window *w = &snap[i].win[p];
            for (int q = 0; q < 3; q++) {
                sv_buf_str(b, summaries[p][0]);
                label(b, v[i]);
                sv_buf_printf(b, ",quantile=\"%g\"} %.0f\n", qs[q], sv_window_quantile(w, qs[q]));
            }
            sv_buf_printf(b, "%s_sum", summaries[p][0]);
            label(b, v[i]);
            sv_buf_printf(b, "} %llu\n", (unsigned long long)w->sum_us);
            sv_buf_printf(b, "%s_count", summaries[p][0]);
            label(b, v[i]);
            sv_buf_printf(b, "} %llu\n", (unsigned long long)w->count);
        }
    }

    /* devices: instances, busy fraction since the previous scrape */
    uint64_t now = sv_now_ns();
    char dev[16][32];
    uint64_t busy[16] = {0};
    int inst[16] = {0}, nd = 0;
    for (int i = 0; i < n; i++) {
        const char *names[SV_MAX_INSTANCES];
        uint64_t ns[SV_MAX_INSTANCES];
        int k = sv_sched_instances(v[i]->sched, SV_MAX_INSTANCES, names, ns);
        for (int j = 0; j < k; j++) {
            int d = 0;
            while (d < nd && strcmp(dev[d], names[j])) d++;
            if (d == nd) {
                if (nd == 16) continue;
                snprintf(dev[nd++], sizeof dev[0], "%s", names[j]);
            }
            busy[d] += ns[j];
            inst[d]++;
        }
    }
    double dt = ms->last_ns ? (double)(now - ms->last_ns) : 0;
    double util[16];
    for (int d = 0; d < nd; d++) {
        util[d] = 0;
        int prev = 0;
        while (prev < ms->n_dev && strcmp(ms->dev[prev], dev[d])) prev++;
        if (prev < ms->n_dev && dt > 0 && busy[d] >= ms->dev_busy[prev] && inst[d])
            util[d] = (double)(busy[d] - ms->dev_busy[prev]) / (dt * inst[d]);
        else if (prev < ms->n_dev)
            util[d] = ms->dev_util[prev];
        if (util[d] > 1) util[d] = 1;
    }
    header(b, "tandem_device_instances", "Model instances placed on each device", "gauge");
    for (int d = 0; d < nd; d++) {
        device_label(b, "tandem_device_instances", dev[d]);
        sv_buf_printf(b, " %d\n", inst[d]);
    }
    header(b, "tandem_instance_busy_ratio",
           "Fraction of time the device's instances were running batches (inputs, run, answers), "
           "since the previous scrape", "gauge");
    for (int d = 0; d < nd; d++) {
        device_label(b, "tandem_instance_busy_ratio", dev[d]);
        sv_buf_printf(b, " %.4f\n", util[d]);
    }
    header(b, "tandem_device_busy_seconds", "Time the device's loaded instances spent running batches",
           "gauge");
    for (int d = 0; d < nd; d++) {
        device_label(b, "tandem_device_busy_seconds", dev[d]);
        sv_buf_printf(b, " %.6f\n", (double)busy[d] * 1e-9);
    }
    header(b, "tandem_device_memory_used_bytes",
           "Memory used on the device (cpu: the server's resident set)", "gauge");
    sv_buf_printf(b, "tandem_device_memory_used_bytes{device=\"cpu\"} %llu\n",
                  (unsigned long long)rss_bytes());
    render_monitor(v, n, b);
    ms->last_ns = now;
    ms->n_dev = nd;
    for (int d = 0; d < nd; d++) {
        memcpy(ms->dev[d], dev[d], sizeof dev[d]);
        ms->dev_busy[d] = busy[d];
        ms->dev_util[d] = util[d];
    }

    /* the host, as Triton reports it */
    uint64_t cb, ct;
    if (read_proc_stat(&cb, &ct)) {
        if (ms->cpu_total && ct > ms->cpu_total)
            ms->cpu_util = (double)(cb - ms->cpu_busy) / (double)(ct - ms->cpu_total);
        ms->cpu_busy = cb;
        ms->cpu_total = ct;
    }
    uint64_t mt, ma;
    meminfo(&mt, &ma);
    header(b, "nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", "gauge");
    sv_buf_printf(b, "nv_cpu_utilization %.4f\n", ms->cpu_util);
    header(b, "nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", "gauge");
    sv_buf_printf(b, "nv_cpu_memory_total_bytes %llu\n", (unsigned long long)mt);
    header(b, "nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", "gauge");
    sv_buf_printf(b, "nv_cpu_memory_used_bytes %llu\n", (unsigned long long)(mt - ma));

    sv_llm_metrics(v + n, n_llm, b);
    for (int i = 0; i < n + n_llm; i++) sv_version_unref(repo, v[i]);
    free(v);
    free(snap);
    free(pending);
    free(cancelled);
}
