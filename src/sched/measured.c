/* Measured per-node times on disk: `tandem profile` stores what it measured; later plans of
 * the same model (same bytes, same static input shapes) use them in place of the roofline
 * estimate. <cache>/measured/<model key>.txt, lines "device<TAB>node index<TAB>node name<TAB>ms".
 *
 * The key leaves out the graph's node count: a CPU-only plan runs the blocked-layout pass
 * before placement and a multi-device plan after it (sched/plan.c), so the same model has two
 * graphs, and a line is matched to a node by index and name, else by name alone, where a
 * blocked twin ("conv/BlockedConv", "pool/BlockedPool") counts for the node it replaced:
 * the CPU's measured time of a convolution is then the time it will have once blocked. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/hash.h"
#include "sched/plan.h"
#include "sched/profile.h"

static uint64_t plan_key(const tdm_plan *p) {
    uint64_t h = p->model_hash ^ 0x9e3779b97f4a7c15ull;
    const tdm_graph *g = p->graph;
    for (size_t i = 0; i < g->n_inputs; i++) {
        const tdm_value *v = &g->values[g->inputs[i]];
        h = tdm_hash_u64(h, (uint64_t)(v->rank + 7));
        for (int d = 0; d < v->rank; d++) h = tdm_hash_u64(h, (uint64_t)v->dims[d]);
    }
    return h;
}

static bool measured_path(const tdm_plan *p, char *path, size_t size, bool make_dir) {
    char base[4096];
    if (!tdm_cache_dir(p->settings, base, sizeof base)) return false;
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/measured", base);
    if (make_dir) {
        mkdir(base, 0755);
        mkdir(dir, 0755);
    }
    int n = snprintf(path, size, "%s/%016llx.txt", dir, (unsigned long long)plan_key(p));
    return n > 0 && (size_t)n < size;
}

/* The node a line names (index and name, else the first node of that name, a blocked twin's
 * name standing for its original; name is modified); g->n_nodes if none. */
static size_t find_node(const tdm_graph *g, size_t idx, char *name) {
    if (idx < g->n_nodes && !strcmp(g->nodes[idx].name, name)) return idx;
    char *slash = strrchr(name, '/');
    if (slash && (!strcmp(slash, "/BlockedConv") || !strcmp(slash, "/BlockedPool"))) *slash = 0;
    for (size_t i = 0; name[0] && i < g->n_nodes; i++)
        if (!strcmp(g->nodes[i].name, name)) return i;
    return g->n_nodes;
}

int tdm_measured_apply(tdm_plan *p) {
    if (!p->node_ms || !p->model_hash) return 0;
    char path[4400];
    if (!measured_path(p, path, sizeof path, false)) return 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[1024];
    int used = 0;
    const tdm_graph *g = p->graph;
    while (fgets(line, sizeof line, f)) {
        char dev[64], name[512];
        unsigned long idx;
        double ms;
        if (sscanf(line, "%63[^\t]\t%lu\t%511[^\t]\t%lf", dev, &idx, name, &ms) != 4) continue;
        if (!(ms >= 0) || !isfinite(ms)) continue; /* (a damaged file: NaN, negative, inf) */
        if ((idx = find_node(g, idx, name)) >= g->n_nodes) continue;
        for (int d = 0; d < p->n_devices; d++)
            if (!strcmp(p->devices[d]->name, dev) && p->supported[idx * (size_t)p->n_devices + (size_t)d]) {
                p->node_ms[idx * (size_t)p->n_devices + (size_t)d] = ms;
                used++;
            }
    }
    fclose(f);
    return used;
}

tdm_status *tdm_measured_save(tdm_plan *p) {
    if (!p->measured_ms || p->measured_runs == 0)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "nothing measured: create the session with "
                       "profile = true and run it first");
    if (!p->model_hash) return TDM_ERR(TDM_ERR_UNSUPPORTED, "the session has no model key");
    char path[4400], tmp[4500];
    if (!measured_path(p, path, sizeof path, true))
        return TDM_ERR(TDM_ERR_IO, "no cache folder (set the cache_dir setting, TANDEM_CACHE_DIR or HOME)");
    /* keep other devices' lines, replace this plan's devices' lines for its nodes */
    const tdm_graph *g = p->graph;
    snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
    FILE *out = fopen(tmp, "w");
    if (!out) return TDM_ERR(TDM_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
    FILE *in = fopen(path, "r");
    if (in) {
        char line[1024];
        while (fgets(line, sizeof line, in)) {
            char dev[64];
            unsigned long idx;
            if (sscanf(line, "%63[^\t]\t%lu", dev, &idx) != 2) continue;
            char name[512] = "";
            sscanf(line, "%*[^\t]\t%*u\t%511[^\t]", name);
            idx = find_node(g, idx, name);
            bool replaced = idx < g->n_nodes && !strcmp(p->devices[g->nodes[idx].device]->name, dev);
            if (!replaced) fputs(line, out);
        }
        fclose(in);
    }
    pthread_mutex_lock(&p->mem_mu);
    for (size_t i = 0; i < g->n_nodes; i++)
        fprintf(out, "%s\t%zu\t%s\t%.6f\n", p->devices[g->nodes[i].device]->name, i, g->nodes[i].name,
                p->measured_ms[i] / (double)p->measured_runs);
    pthread_mutex_unlock(&p->mem_mu);
    if (fclose(out) != 0 || rename(tmp, path) != 0) {
        remove(tmp);
        return TDM_ERR(TDM_ERR_IO, "cannot write '%s'", path);
    }
    return NULL;
}
