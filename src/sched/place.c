#include "sched/place.h"

#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "sched/cost.h"

/* A split must be predicted at least this much faster than the best single device. */
#define PLACE_SPLIT_MARGIN 0.05
/* A device keeping less than this share of its speed while the host's cores are busy
 * (profile host_busy_speed) computes on them. */
#define PLACE_SHARED_CORES 0.7

static const char *const reason_text[] = {
    [TDM_PLACE_FASTEST] = "earliest finish including copies",
    [TDM_PLACE_ONLY_SUPPORTED] = "the only device with a kernel for it",
    [TDM_PLACE_AFFINITY] = "affinity rule",
    [TDM_PLACE_MEMORY] = "faster devices lack memory for its weights",
    [TDM_PLACE_SINGLE_DEVICE] = "a split is not predicted 5% faster than one device alone",
    [TDM_PLACE_HOST_SHAPE] = "small shape computation stays on the host",
    [TDM_PLACE_FIRST_CHOICE] = "first device in preference order with a kernel",
    [TDM_PLACE_FOLLOWS_DATA] = "no arithmetic: stays on the device that holds its data",
};

const char *tdm_place_reason_text(tdm_place_reason r) {
    return (unsigned)r < sizeof reason_text / sizeof reason_text[0] ? reason_text[r] : "?";
}

void tdm_place_result_free(const tdm_allocator *a, tdm_place_result *r) {
    if (!r) return;
    tdm_free(a, r->device);
    tdm_free(a, r->reason);
    tdm_free(a, r->finish_ms);
    memset(r, 0, sizeof *r);
}

/* The state of one placement: the inputs, per-value availability and the working arrays of
 * the passes below. */
typedef struct heft {
    const tdm_place_input *in;
    int D;
    double *ready;  /* [value * D + d]: when the value is available on d (INFINITY: not yet) */
    int *src_dev;   /* per value: the device that holds the original (-1: host data) */
    double *value_bytes;
    double *avg;        /* per node: mean cost over the devices that support it */
    double *rank;       /* per node: upward rank */
    bool *done;         /* per node: placed */
    int *pending;       /* per node: inputs from nodes not placed yet */
    double *avail;      /* per device: when its queue is free */
    double *weights_on; /* per device: bytes of weights placed on it */
    bool pure[TDM_MAX_DEVICES]; /* single_ms[d] has every node on d (no fallback, no rule) */
    int host;           /* the first device that works on host memory, -1 if none */
    uint32_t *readers;  /* per value: bit d when a node on device d reads it (recount_copies) */
    tdm_place_result *r;
} heft;

/* One node's choice (pass 3). */
typedef struct heft_pick {
    int best;
    double eft;
    tdm_place_reason why;
    double node_weights; /* bytes of the node's constant inputs */
} heft_pick;

static bool is_const(const tdm_value *v) { return v->data && !v->is_input; }

/* When value v can be on device d, and what the copy would cost (0 when already there). */
static double arrival(heft *h, int v, int d, double *copy) {
    const tdm_place_input *in = h->in;
    const tdm_value *val = &in->g->values[v];
    *copy = 0;
    if (is_const(val)) return 0; /* weights are uploaded once per plan, not per run */
    double r = h->ready[(size_t)v * (size_t)h->D + (size_t)d];
    if (r < INFINITY) return r;
    int s = h->src_dev[v];
    double t0;
    const tdm_device_profile *from;
    if (s < 0) { /* graph input in host memory: from the first host device's point of view */
        t0 = 0;
        if (in->host_memory[d]) return 0;
        from = &in->profiles[h->host >= 0 ? h->host : 0];
    } else {
        t0 = h->ready[(size_t)v * (size_t)h->D + (size_t)s];
        from = &in->profiles[s];
    }
    *copy = tdm_cost_copy_ms(h->value_bytes[v], from, &in->profiles[d]);
    return t0 + *copy;
}

/* 1. The average cost of each node over the devices that support it. */
static tdm_status *average_costs(heft *h) {
    const tdm_place_input *in = h->in;
    const tdm_graph *g = in->g;
    int D = h->D;
    for (size_t i = 0; i < g->n_nodes; i++) {
        int cnt = 0;
        double sum = 0;
        for (int d = 0; d < D; d++)
            if (in->supported[i * (size_t)D + (size_t)d]) {
                sum += in->node_ms[i * (size_t)D + (size_t)d];
                cnt++;
            }
        if (cnt == 0)
            return TDM_ERR(TDM_ERR_UNSUPPORTED, "%s node '%s' cannot run on any of the devices",
                           g->nodes[i].op_type, g->nodes[i].name);
        h->avg[i] = sum / cnt;
    }
    return NULL;
}

/* 2. The upward rank of each node (its cost plus the longest path after it, copies at the
 * mean copy cost), in reverse topological order (nodes are sorted). */
static void upward_ranks(heft *h) {
    const tdm_place_input *in = h->in;
    const tdm_graph *g = in->g;
    size_t N = g->n_nodes;
    int D = h->D;
    double avg_copy_per_byte = 0;
    int pairs = 0;
    for (int x = 0; x < D; x++)
        for (int y = 0; y < D; y++)
            if (x != y) {
                avg_copy_per_byte += tdm_cost_copy_ms(1e6, &in->profiles[x], &in->profiles[y]) / 1e6;
                pairs++;
            }
    if (pairs) avg_copy_per_byte /= pairs;
    for (size_t i = N; i-- > 0;) {
        const tdm_node *n = &g->nodes[i];
        double best = 0;
        for (int k = 0; k < n->n_outputs; k++) {
            int v = n->outputs[k];
            if (v < 0) continue;
            for (size_t c = i + 1; c < N; c++) {
                const tdm_node *m = &g->nodes[c];
                bool reads = false;
                for (int j = 0; j < m->n_inputs && !reads; j++) reads = m->inputs[j] == v;
                for (int j = 0; j < m->n_implicit && !reads; j++) reads = m->implicit[j] == v;
                if (!reads) continue;
                double path = h->value_bytes[v] * avg_copy_per_byte + h->rank[c];
                if (path > best) best = path;
            }
        }
        h->rank[i] = h->avg[i] + best;
    }
}

/* Small integer results (shape arithmetic) stay on a host device. */
static bool shape_like(const heft *h, const tdm_node *n) {
    const tdm_graph *g = h->in->g;
    bool like = n->n_outputs > 0;
    for (int k = 0; k < n->n_outputs; k++) {
        int v = n->outputs[k];
        if (v < 0) continue;
        const tdm_value *val = &g->values[v];
        if (!(val->dtype == TDM_INT64 || val->dtype == TDM_INT32) || h->value_bytes[v] > 512) like = false;
    }
    return like;
}

/* A node without arithmetic (the cost model's data movement: Reshape, Transpose, Concat,
 * Slice, Gather...) stays on the device holding its largest input made at run time (graph
 * inputs: the host), where it can run: moved elsewhere for a launch cost a few microseconds
 * lower, it costs a copy there and another back to its consumers, which the finish time of
 * the node alone does not see (BERT on an H200 and the CPU: Reshapes and Transposes of
 * activations went to the CPU between products on the GPU). -1: no such input. */
static int follow_data(const heft *h, const tdm_node *n) {
    const tdm_graph *g = h->in->g;
    if (tdm_node_flops(g, n) != 0 || tdm_node_reads_shape_only(n, 0)) return -1;
    int best = -1;
    for (int j = 0; j < n->n_inputs; j++) {
        int v = n->inputs[j];
        if (v < 0 || is_const(&g->values[v])) continue;
        if (best < 0 || h->value_bytes[v] > h->value_bytes[best]) best = v;
    }
    if (best < 0) return -1;
    return h->src_dev[best] >= 0 ? h->src_dev[best] : h->host;
}

/* 3a. The device where node `pick` finishes first (inputs' copies included), within the
 * rules: support, no_fallback, affinity, shape work on the host, device memory. */
static tdm_status *choose_device(heft *h, size_t pick, heft_pick *p) {
    const tdm_place_input *in = h->in;
    const tdm_graph *g = in->g;
    int D = h->D;
    const tdm_node *n = &g->nodes[pick];
    int n_supported = 0;
    for (int d = 0; d < D; d++) n_supported += in->supported[pick * (size_t)D + (size_t)d];
    p->node_weights = 0;
    for (int j = 0; j < n->n_inputs; j++)
        if (n->inputs[j] >= 0 && is_const(&g->values[n->inputs[j]])) p->node_weights += h->value_bytes[n->inputs[j]];
    bool shape = shape_like(h, n);
    p->best = -1;
    p->eft = INFINITY;
    p->why = n_supported == 1 ? TDM_PLACE_ONLY_SUPPORTED : TDM_PLACE_FASTEST;
    bool memory_excluded = false;
    int forced = in->forced ? in->forced[pick] : -1;
    int follow = shape || forced >= 0 ? -1 : follow_data(h, n);
    double follow_eft = INFINITY;
    for (int d = 0; d < D; d++) {
        if (!in->supported[pick * (size_t)D + (size_t)d]) continue;
        if (in->no_fallback && d != 0) continue;
        if (forced >= 0 && d != forced) continue;
        if (shape && !in->host_memory[d] && forced < 0) {
            bool host_ok = false;
            for (int e = 0; e < D; e++)
                host_ok |= in->host_memory[e] && in->supported[pick * (size_t)D + (size_t)e] &&
                           !(in->no_fallback && e != 0);
            if (host_ok) continue;
        }
        int64_t cap = in->profiles[d].memory_bytes;
        if (!in->host_memory[d] && cap > 0 && h->weights_on[d] + p->node_weights > 0.9 * (double)cap) {
            memory_excluded = true;
            continue;
        }
        double est = h->avail[d], copy;
        for (int j = 0; j < n->n_inputs; j++)
            if (n->inputs[j] >= 0 && !tdm_node_reads_shape_only(n, j)) {
                double t = arrival(h, n->inputs[j], d, &copy);
                if (t > est) est = t;
            }
        double eft = est + in->node_ms[pick * (size_t)D + (size_t)d];
        if (d == follow) follow_eft = eft;
        if (eft < p->eft) {
            p->eft = eft;
            p->best = d;
        }
    }
    if (p->best < 0)
        return TDM_ERR(TDM_ERR_UNSUPPORTED, "%s node '%s' cannot be placed: %s", n->op_type, n->name,
                       forced >= 0 ? "its affinity device has no kernel for it"
                       : memory_excluded ? "no device has memory left for its weights"
                       : in->no_fallback ? "the first device has no kernel for it and fallback is off"
                                         : "no device supports it");
    if (follow >= 0 && follow_eft < INFINITY && follow != p->best) {
        p->best = follow;
        p->eft = follow_eft;
        p->why = TDM_PLACE_FOLLOWS_DATA; /* (follow is -1 when forced or shape) */
    } else if (forced >= 0) {
        p->why = TDM_PLACE_AFFINITY;
    } else if (shape && in->host_memory[p->best] && n_supported > 1) {
        p->why = TDM_PLACE_HOST_SHAPE;
    } else if (memory_excluded) {
        p->why = TDM_PLACE_MEMORY;
    }
    return NULL;
}

/* 3b. Commits node `pick` to p->best: copies of its inputs, the device's queue, its outputs'
 * availability, and the nodes waiting for them. */
static void commit_node(heft *h, size_t pick, const heft_pick *p) {
    const tdm_place_input *in = h->in;
    const tdm_graph *g = in->g;
    int D = h->D, best = p->best;
    tdm_place_result *r = h->r;
    const tdm_node *n = &g->nodes[pick];
    double copy;
    for (int j = 0; j < n->n_inputs; j++) {
        int v = n->inputs[j];
        if (v < 0 || tdm_node_reads_shape_only(n, j)) continue;
        double t = arrival(h, v, best, &copy);
        if (copy > 0) {
            r->copy_ms += copy;
            r->copy_bytes += h->value_bytes[v];
        }
        if (!is_const(&g->values[v])) h->ready[(size_t)v * (size_t)D + (size_t)best] = t;
    }
    h->avail[best] = p->eft;
    h->weights_on[best] += p->node_weights;
    r->device[pick] = best;
    r->reason[pick] = p->why;
    r->finish_ms[pick] = p->eft;
    r->serial_ms += in->node_ms[pick * (size_t)D + (size_t)best];
    for (int k = 0; k < n->n_outputs; k++) {
        int v = n->outputs[k];
        if (v < 0) continue;
        h->src_dev[v] = best;
        h->ready[(size_t)v * (size_t)D + (size_t)best] = p->eft;
    }
    h->done[pick] = true;
    for (size_t c = pick + 1; c < g->n_nodes; c++) {
        const tdm_node *m = &g->nodes[c];
        for (int k = 0; k < n->n_outputs; k++) {
            int v = n->outputs[k];
            if (v < 0) continue;
            for (int j = 0; j < m->n_inputs; j++)
                if (m->inputs[j] == v) h->pending[c]--;
            for (int j = 0; j < m->n_implicit; j++)
                if (m->implicit[j] == v) h->pending[c]--;
        }
    }
    if (p->eft > r->makespan_ms) r->makespan_ms = p->eft;
}

/* 3. List scheduling: the ready node of highest rank goes where it finishes first. */
static tdm_status *list_schedule(heft *h) {
    const tdm_graph *g = h->in->g;
    size_t N = g->n_nodes;
    for (size_t i = 0; i < N; i++) {
        const tdm_node *n = &g->nodes[i];
        for (int j = 0; j < n->n_inputs; j++) {
            int v = n->inputs[j];
            if (v >= 0 && g->values[v].producer >= 0) h->pending[i]++;
        }
        for (int j = 0; j < n->n_implicit; j++)
            if (g->values[n->implicit[j]].producer >= 0) h->pending[i]++;
    }
    for (size_t step = 0; step < N; step++) {
        size_t pick = N;
        for (size_t i = 0; i < N; i++)
            if (!h->done[i] && h->pending[i] == 0 && (pick == N || h->rank[i] > h->rank[pick])) pick = i;
        if (pick == N) return TDM_ERR(TDM_ERR_INTERNAL, "placement: no ready node (cycle?)");
        heft_pick p;
        TDM_TRY(choose_device(h, pick, &p));
        commit_node(h, pick, &p);
    }
    return NULL;
}

/* Results leave through host memory: the copies of outputs computed elsewhere. */
static void outputs_to_host(heft *h) {
    const tdm_place_input *in = h->in;
    const tdm_graph *g = in->g;
    tdm_place_result *r = h->r;
    int D = h->D;
    for (size_t o = 0; o < g->n_outputs; o++) {
        int v = g->outputs[o];
        int s = h->src_dev[v];
        if (s >= 0 && !in->host_memory[s]) {
            int host = h->host >= 0 ? h->host : 0;
            double c = tdm_cost_copy_ms(h->value_bytes[v], &in->profiles[s], &in->profiles[host]);
            r->copy_ms += c;
            r->copy_bytes += h->value_bytes[v];
            double t = h->ready[(size_t)v * (size_t)D + (size_t)s] + c;
            if (t > r->makespan_ms) r->makespan_ms = t;
        }
    }
    r->serial_ms += r->copy_ms;
}

/* Where node i goes when device d runs the plan "alone": d, or the node's affinity device, or
 * the host device for a node d has no kernel for (shape work such as Shape, which only the
 * CPU runs: "cuda:0 alone" is cuda:0 with the CPU for those, as --placement cuda:0 runs it;
 * an H200 ran BERT so at 12.3 ms where the split HEFT made instead took 25 ms); -1 when
 * neither can. */
static int alone_device(const tdm_place_input *in, size_t i, int d, int host) {
    int D = in->n_devices;
    if (in->forced && in->forced[i] >= 0) return in->forced[i];
    if (in->supported[i * (size_t)D + (size_t)d]) return d;
    if (host >= 0 && host != d && in->supported[i * (size_t)D + (size_t)host]) return host;
    return -1;
}

/* 4. Each device alone, for comparison (inputs in and outputs out included, and the copies
 * to and from the nodes it leaves to another device). */
static void single_device_times(heft *h) {
    const tdm_place_input *in = h->in;
    const tdm_graph *g = in->g;
    tdm_place_result *r = h->r;
    int D = h->D;
    for (int d = 0; d < TDM_MAX_DEVICES; d++) r->single_ms[d] = INFINITY;
    int host = h->host;
    double all_weights = 0;
    for (size_t v = 0; v < g->n_values; v++)
        if (is_const(&g->values[v])) all_weights += h->value_bytes[v];
    for (int d = 0; d < D; d++) {
        double sum = 0;
        bool ok = true;
        int own = 0;
        for (size_t i = 0; i < g->n_nodes && ok; i++) {
            int e = alone_device(in, i, d, host);
            ok = e >= 0;
            if (!ok) break;
            own += e == d;
            sum += in->node_ms[i * (size_t)D + (size_t)e];
            if (e == d) continue;
            /* the node's inputs to e and its outputs back, at most (some stay on e) */
            const tdm_node *n = &g->nodes[i];
            for (int k = 0; k < n->n_inputs; k++)
                if (n->inputs[k] >= 0 && !is_const(&g->values[n->inputs[k]]) &&
                    !tdm_node_reads_shape_only(n, k))
                    sum += tdm_cost_copy_ms(h->value_bytes[n->inputs[k]], &in->profiles[d], &in->profiles[e]);
            for (int k = 0; k < n->n_outputs; k++)
                if (n->outputs[k] >= 0)
                    sum += tdm_cost_copy_ms(h->value_bytes[n->outputs[k]], &in->profiles[e], &in->profiles[d]);
        }
        ok = ok && own > 0;
        h->pure[d] = ok && own == (int)g->n_nodes;
        int64_t cap = in->profiles[d].memory_bytes;
        if (!in->host_memory[d] && cap > 0 && all_weights > 0.9 * (double)cap) ok = false;
        if (!ok) continue;
        if (!in->host_memory[d] && host >= 0) {
            for (size_t k = 0; k < g->n_inputs; k++)
                if (!g->values[g->inputs[k]].data)
                    sum += tdm_cost_copy_ms(h->value_bytes[g->inputs[k]], &in->profiles[host], &in->profiles[d]);
            for (size_t k = 0; k < g->n_outputs; k++)
                sum += tdm_cost_copy_ms(h->value_bytes[g->outputs[k]], &in->profiles[d], &in->profiles[host]);
        }
        r->single_ms[d] = sum;
    }
}

/* The copies of r->device's assignment: each value read on a device other than the one that
 * holds it, once per device (graph inputs start in host memory; results end there). */
static void recount_copies(heft *h) {
    const tdm_place_input *in = h->in;
    const tdm_graph *g = in->g;
    tdm_place_result *r = h->r;
    int host = h->host >= 0 ? h->host : 0;
    memset(h->readers, 0, (g->n_values + 1) * sizeof *h->readers);
    for (size_t i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_inputs; k++) {
            int v = g->nodes[i].inputs[k];
            if (v >= 0 && !tdm_node_reads_shape_only(&g->nodes[i], k))
                h->readers[v] |= 1u << r->device[i];
        }
    for (size_t o = 0; o < g->n_outputs; o++) h->readers[g->outputs[o]] |= 1u << host;
    r->copy_ms = 0;
    r->copy_bytes = 0;
    for (size_t v = 0; v < g->n_values; v++) {
        const tdm_value *val = &g->values[v];
        if (is_const(val)) continue;
        int src = val->producer >= 0 ? r->device[val->producer] : host;
        for (int d = 0; d < h->D; d++) {
            if (!(h->readers[v] >> d & 1) || d == src) continue;
            if (in->host_memory[d] && in->host_memory[src]) continue; /* both on host memory */
            double c = tdm_cost_copy_ms(h->value_bytes[v], &in->profiles[src], &in->profiles[d]);
            if (c > 0) {
                r->copy_ms += c;
                r->copy_bytes += h->value_bytes[v];
            }
        }
    }
}

/* 5. A split that is not predicted to beat the best single device by PLACE_SPLIT_MARGIN
 * is not worth its copies and synchronisation (devices run concurrently, so the makespan
 * is what counts; the margin covers the cost model's error, which is tens of percent per
 * node on shared or emulated devices: MobileNetV2 with its last Gemm on PoCL, predicted
 * 0.4% faster than the CPU alone, measured slower): everything goes to that device. */
static void split_or_single(heft *h) {
    const tdm_place_input *in = h->in;
    tdm_place_result *r = h->r;
    size_t N = in->g->n_nodes;
    int D = h->D;
    /* the best device alone; one that leaves nodes to another device (a fallback, a rule)
     * copies between them too, and must beat the best device that runs everything by the
     * same margin as a split */
    int best_single = -1, best_pure = -1;
    for (int d = 0; d < D; d++) {
        if (r->single_ms[d] < INFINITY && (best_single < 0 || r->single_ms[d] < r->single_ms[best_single]))
            best_single = d;
        if (h->pure[d] && r->single_ms[d] < INFINITY &&
            (best_pure < 0 || r->single_ms[d] < r->single_ms[best_pure]))
            best_pure = d;
    }
    if (best_pure >= 0 && best_single != best_pure &&
        r->single_ms[best_pure] * (1 - PLACE_SPLIT_MARGIN) <= r->single_ms[best_single])
        best_single = best_pure;
    if (in->no_fallback) best_single = r->single_ms[0] < INFINITY ? 0 : -1;
    bool split = false;
    for (size_t i = 1; i < N; i++) split |= r->device[i] != r->device[0];
    /* a device that computes on the host's own cores (host_busy_speed well below 1)
     * overlaps nothing with the CPU and takes cores from it: a split with it is not
     * predicted at all (per-node figures measured at different moments on a shared
     * machine pick noise: PoCL + CPU splits of ResNet-50 and BERT measured 2.6-2.9x
     * slower than the CPU alone); it runs only what no other device can */
    bool shared = false;
    for (size_t i = 0; i < N && split; i++) {
        double keep = in->profiles[r->device[i]].host_busy_speed;
        shared |= !in->host_memory[r->device[i]] && keep > 0 && keep < PLACE_SHARED_CORES;
    }
    if (best_single >= 0 && split &&
        (shared || r->single_ms[best_single] * (1 - PLACE_SPLIT_MARGIN) <= r->makespan_ms)) {
        for (size_t i = 0; i < N; i++) {
            int e = alone_device(in, i, best_single, h->host);
            r->device[i] = e;
            r->reason[i] = e == best_single ? TDM_PLACE_SINGLE_DEVICE
                           : in->forced && in->forced[i] >= 0 ? TDM_PLACE_AFFINITY
                                                              : TDM_PLACE_ONLY_SUPPORTED;
        }
        r->serial_ms = r->makespan_ms = r->single_ms[best_single];
        recount_copies(h);
    }
}

tdm_status *tdm_place_heft(const tdm_place_input *in, const tdm_allocator *a,
                           tdm_place_result *out) {
    const tdm_graph *g = in->g;
    size_t N = g->n_nodes, V = g->n_values;
    int D = in->n_devices;
    if (D < 1 || D > TDM_MAX_DEVICES)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "placement needs 1..%d devices", TDM_MAX_DEVICES);
    tdm_place_result r;
    memset(&r, 0, sizeof r);
    heft h = {.in = in, .D = D, .r = &r};
    h.rank = tdm_calloc(a, N + 1, sizeof *h.rank);
    h.avg = tdm_calloc(a, N + 1, sizeof *h.avg);
    h.done = tdm_calloc(a, N + 1, sizeof *h.done);
    h.pending = tdm_calloc(a, N + 1, sizeof *h.pending);
    h.avail = tdm_calloc(a, (size_t)D, sizeof *h.avail);
    h.weights_on = tdm_calloc(a, (size_t)D, sizeof *h.weights_on);
    h.ready = tdm_alloc(a, (V + 1) * (size_t)D * sizeof *h.ready);
    h.src_dev = tdm_alloc(a, (V + 1) * sizeof *h.src_dev);
    h.value_bytes = tdm_calloc(a, V + 1, sizeof *h.value_bytes);
    h.readers = tdm_calloc(a, V + 1, sizeof *h.readers);
    h.host = -1;
    for (int d = 0; d < D && h.host < 0; d++)
        if (in->host_memory[d]) h.host = d;
    r.device = tdm_calloc(a, N + 1, sizeof *r.device);
    r.reason = tdm_calloc(a, N + 1, sizeof *r.reason);
    r.finish_ms = tdm_calloc(a, N + 1, sizeof *r.finish_ms);
    tdm_status *st = NULL;
    if (!h.rank || !h.avg || !h.done || !h.pending || !h.avail || !h.weights_on || !h.ready || !h.src_dev ||
        !h.value_bytes || !h.readers || !r.device || !r.reason || !r.finish_ms)
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory placing nodes");
    for (size_t v = 0; v < V && !st; v++) {
        h.value_bytes[v] = in->value_bytes ? in->value_bytes[v] : tdm_value_bytes(&g->values[v]);
        h.src_dev[v] = -1;
        for (int d = 0; d < D; d++) h.ready[v * (size_t)D + (size_t)d] = INFINITY;
    }
    if (!st) st = average_costs(&h);
    if (!st) {
        upward_ranks(&h);
        st = list_schedule(&h);
    }
    if (!st) {
        outputs_to_host(&h);
        single_device_times(&h);
        split_or_single(&h);
    }
    tdm_free(a, h.rank);
    tdm_free(a, h.avg);
    tdm_free(a, h.done);
    tdm_free(a, h.pending);
    tdm_free(a, h.avail);
    tdm_free(a, h.weights_on);
    tdm_free(a, h.ready);
    tdm_free(a, h.src_dev);
    tdm_free(a, h.value_bytes);
    tdm_free(a, h.readers);
    if (st) {
        tdm_place_result_free(a, &r);
        return st;
    }
    *out = r;
    return NULL;
}
