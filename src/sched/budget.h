/* Memory budgets and weight residency (issue 21): the most a device may hold for weights,
 * activations and reserved memory (a generator's KV cache) together, and where each weight
 * lives so that a plan stays under it.
 *
 * Budgets come as text, "DEV=SIZE[,DEV=SIZE]" (tdm_session_options.device_memory, the CLI's
 * --device-memory): SIZE is a number with an optional unit, B, KiB, MiB, GiB, TiB (binary),
 * KB, MB, GB, TB (decimal) or K, M, G, T (binary), or a percentage of the weights the plan
 * places on that device ("test:0=25%": a quarter of them plus the activations and the
 * reserve, which every plan on the device needs).
 *
 * Residency of a weight (a constant read by nodes of the plan):
 *   resident  uploaded once to the device that reads it, kept for the plan's life (or, on a
 *             host-memory device, in ordinary memory);
 *   streamed  kept in host memory and uploaded before each run's first reader on the device
 *             into a pool of device buffers (the ring), prefetched a window of k weight-reading
 *             nodes ahead, freed back to the ring after its last reader;
 *   mapped    external data (or the model file) mapped from disk and read in place by CPU
 *             kernels: pages are read on use and are not copied whole into memory (loader
 *             option; does not count against a host budget).
 *
 * The fit pass runs after placement. For each budgeted device it adds up the weights read
 * there, an activation peak from static shapes (a liveness sweep like the memory plan's) and
 * the reserve. When they exceed the budget it compares two valid plans with the cost model:
 * (a) streamed: small weights resident first, the rest streamed through a ring sized for a
 * prefetch window k (k from the budget and the predicted time: uploads on the copy queue
 * overlap compute where the device copies asynchronously), and (b) layers: the nodes that
 * fit in order stay on the device, the rest go to the CPU (what llama.cpp's -ngl does). The
 * faster predicted plan wins; the reason is kept for tdm_plan_explain. A node whose weights
 * alone do not fit next to the activations (not even streamed: the ring must hold one node's
 * weights), such as a tied embedding's Gather and lm head under a 10% budget, goes to the CPU
 * first (the reason kept in moved_note); when the CPU cannot run it, the budget is an error
 * that names the device, the budget in bytes (and how a share resolved), the largest weight
 * and the least budget that would run the plan.
 *
 * KV cache placement (a generator's plan: graph values marked kv_layer, graph/graph.h): each
 * layer's cache lives on the device that runs its attention (the first reader of its past),
 * kept there between runs as a state bound in place (TDM_KV_DEVICE: no copies per token), or
 * in host memory (TDM_KV_HOST: the past uploaded and the present downloaded every token; a
 * host-memory device's layers are TDM_KV_CPU, no copies). The fit decides before the weights:
 * a byte of cache on the device saves two bytes of copies per token (past up, present down),
 * a resident weight one (its upload when streamed), so the caches take the room first: all
 * layers when the weights, the activations and every cache fit; else the first layers in
 * order whose caches fit next to the activations and a ring of two nodes' weights (split by
 * layer); none when not even one does (host). A share budget ("P%") holds every cache on top
 * of its share. Without a budget every cache stays on its device. Fed-back caches (a new
 * present each step: kv_layer < 0) stay in host memory. The kept caches are the device's
 * reserve; the decision is kept across run-time refits. */
#ifndef TDM_SCHED_BUDGET_H
#define TDM_SCHED_BUDGET_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/backend.h"
#include "core/status.h"

struct tdm_plan;

typedef enum tdm_residency {
    TDM_RES_NONE = 0, /* not a weight */
    TDM_RES_RESIDENT,
    TDM_RES_STREAMED,
    TDM_RES_MAPPED,
} tdm_residency;

const char *tdm_residency_name(tdm_residency r);

/* How the fit pass chose (tdm_budget_plan.choice). */
typedef enum tdm_fit_choice {
    TDM_FIT_NONE = 0,  /* no budget, or everything fits */
    TDM_FIT_STREAMED,  /* weights over the budget streamed */
    TDM_FIT_LAYERS,    /* nodes that did not fit moved to the CPU */
} tdm_fit_choice;

/* One budget as given: bytes, or a share of the weights on the device. */
typedef struct tdm_budget_spec {
    int64_t bytes;   /* 0 = none */
    double percent;  /* > 0: this share of the weights placed on the device */
} tdm_budget_spec;

/* Parses a size ("24MiB", "8GiB", "1.5G", "4096", "25%"); what: for messages. */
tdm_status *tdm_size_parse(const char *text, const char *what, tdm_budget_spec *out);
/* Parses "DEV=SIZE[,DEV=SIZE]" against the devices (by name); out[i] for devs[i]. A device
 * not among devs, a repeated device or a bad size is TDM_ERR_INVALID_ARGUMENT naming it.
 * NULL or "" sets nothing. */
tdm_status *tdm_budget_parse(const char *spec, tdm_device *const *devs, int n_devices,
                             tdm_budget_spec *out);

/* Options of the fit pass (tdm_plan_options.budget). */
typedef struct tdm_budget_options {
    tdm_budget_spec spec[TDM_MAX_DEVICES]; /* per plan device */
    int64_t reserve[TDM_MAX_DEVICES];      /* bytes held outside the plan (KV cache) */
    int force;       /* 0 = the cost model chooses; TDM_FIT_STREAMED / TDM_FIT_LAYERS force */
    int window;      /* > 0: the prefetch window k (else chosen) */
    int64_t min_activations[TDM_MAX_DEVICES]; /* activation peaks measured for a run's shapes
                                                 (the static estimate counts unknown dims
                                                 as 1): the fit takes the larger */
    int kv_force;                          /* 0 = the fit places the KV caches; else a
                                              tdm_kv_place for every layer ("kv=..." in the
                                              residency option) */
    bool kv_decided;                       /* run-time refits: the KV placement stays */
    int kv_keep[TDM_MAX_DEVICES];          /* then: the first layers kept on each device */
} tdm_budget_options;

/* Where a layer of a generator's KV cache lives (tdm_kv_plan.place). */
typedef enum tdm_kv_place {
    TDM_KV_NONE = 0,
    TDM_KV_DEVICE, /* on the device of its attention, bound in place: no copies per token */
    TDM_KV_HOST,   /* in host memory, its attention on a device: past up, present down */
    TDM_KV_CPU,    /* in host memory, its attention on a host-memory device: no copies */
} tdm_kv_place;

const char *tdm_kv_place_name(int place);

/* The KV cache placement of a plan (tdm_plan.kv; NULL when the graph marks no cache). */
typedef struct tdm_kv_plan {
    int n_layers;
    unsigned char *place;       /* per layer: tdm_kv_place */
    signed char *device;        /* per layer: plan device of its attention */
    int64_t *bytes;             /* per layer: key + value at the context length */
    int64_t on_device[TDM_MAX_DEVICES]; /* bytes of caches kept on each plan device */
    int64_t uploaded_per_token, downloaded_per_token; /* copies of the host layers per decode
                                   step (a fed-back cache: at the full context length) */
    bool fed_back;              /* the caches are fed back (their copies grow per token) */
    char why[600];
} tdm_kv_plan;

/* Builds p->kv from the graph's marks and the placement (after the fit; without a budget
 * the caches of devices with memory of their own stay there). */
tdm_status *tdm_kv_plan_build(struct tdm_plan *p);
/* The plan device of the first node of g reading value v (dev: per node, NULL: the nodes'
 * placement), or -1. */
int tdm_budget_first_reader_dev(const struct tdm_graph *g, const int *dev, int v);
void tdm_kv_plan_free(const tdm_allocator *a, tdm_kv_plan *k);

/* The fit of a plan (tdm_plan.budget), figures per plan device. */
typedef struct tdm_budget_plan {
    int64_t budget[TDM_MAX_DEVICES];   /* resolved bytes, 0 = none */
    int64_t share[TDM_MAX_DEVICES];    /* a percentage budget's bytes of weights */
    int64_t reserve[TDM_MAX_DEVICES];
    int64_t weights[TDM_MAX_DEVICES];  /* weights read on the device */
    int64_t resident[TDM_MAX_DEVICES]; /* of which resident */
    int64_t streamed[TDM_MAX_DEVICES]; /* of which streamed (bytes uploaded per run) */
    int64_t ring[TDM_MAX_DEVICES];     /* device memory of the streamed weights' ring */
    int64_t activations[TDM_MAX_DEVICES]; /* activation peak (static shapes) */
    int window[TDM_MAX_DEVICES];       /* prefetch window k */
    int choice;                        /* tdm_fit_choice */
    double predicted_ms;               /* of the chosen plan (one run) */
    double predicted_streamed_ms, predicted_layers_ms; /* the candidates (0: not considered,
                                                         INFINITY: not possible) */
    char why[1024];                    /* the reason, for explanations */
    char moved_note[400];              /* nodes whose weights alone exceed a budget, moved to
                                          the CPU before the candidates (kept across refits) */
    unsigned char *residency;          /* per value: tdm_residency */
    /* for the executor: per plan device the nodes that read streamed weights (units), in
     * order; per node its position in its device's list (the first unit at or after it) */
    int *units[TDM_MAX_DEVICES];
    int n_units[TDM_MAX_DEVICES];
    int *unit_pos;                     /* per node */
    int *last_reader;                  /* [value * D + d]: last node on d reading value */
    bool any_streamed;
    tdm_budget_options options;        /* what the fit was given (run-time refits start there) */
    uint64_t shapes_key;               /* input shapes the activations were last checked for */
    int kv_keep[TDM_MAX_DEVICES];      /* KV layers (in order) whose cache stays on the device */
    int kv_layers[TDM_MAX_DEVICES];    /* of the shared-form layers whose attention runs there */
    char kv_why[600];                  /* how the caches were placed */
} tdm_budget_plan;

/* The fit pass over p's placement (p->graph's devices set). When the layers plan wins,
 * *keep (allocated with p->alloc, caller frees) gets the device of every node and the caller
 * places again with it and calls the pass once more (moved = true: no further moves).
 * Fills p->budget (allocated here; freed by tdm_budget_plan_free). */
tdm_status *tdm_budget_fit(struct tdm_plan *p, const tdm_budget_options *o, bool moved, int **keep);
void tdm_budget_plan_free(const tdm_allocator *a, tdm_budget_plan *b);
/* Activation peaks per plan device (out[d], n_devices) of graph g as placed, from its static
 * shapes: the fit's estimate, for a copy of a plan's graph with a run's input shapes;
 * weights_of: the graph whose values with data are the weights (same value indices). */
tdm_status *tdm_budget_activations(const tdm_allocator *a, const struct tdm_graph *g,
                                   const struct tdm_graph *weights_of, int n_devices, int64_t *out);

#endif
