/* Graph IR: values (tensors by name) with dtype and shape, nodes with typed attributes.
 *
 * A graph owns everything in it (names, attributes, initializer tensors) through its
 * allocator. Values are referred to by index; a node input index of -1 is an omitted
 * optional input. After tdm_graph_finalize() the nodes are in topological order and every
 * value knows its producer and consumer count. */
#ifndef TDM_GRAPH_GRAPH_H
#define TDM_GRAPH_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tensor.h"
#include "tandem/tandem.h"

struct tdm_op_schema;
struct tdm_graph;

#define TDM_DIM_UNKNOWN (-1)

typedef enum tdm_attr_type {
    TDM_ATTR_UNDEFINED = 0,
    TDM_ATTR_FLOAT = 1,
    TDM_ATTR_INT = 2,
    TDM_ATTR_STRING = 3,
    TDM_ATTR_TENSOR = 4,
    TDM_ATTR_GRAPH = 5,
    TDM_ATTR_FLOATS = 6,
    TDM_ATTR_INTS = 7,
    TDM_ATTR_STRINGS = 8,
    TDM_ATTR_TENSORS = 9,
    TDM_ATTR_GRAPHS = 10,
} tdm_attr_type; /* numbers equal ONNX AttributeProto.AttributeType */

typedef struct tdm_attr {
    char *name;
    tdm_attr_type type;
    float f;
    int64_t i;
    char *s;       /* STRING: NUL-terminated copy */
    size_t s_len;
    tdm_tensor *t; /* TENSOR */
    struct tdm_graph *g; /* GRAPH */
    size_t n;      /* element count of the list types */
    float *floats;
    int64_t *ints;
    char **strings;
    tdm_tensor **tensors;
    struct tdm_graph **graphs;
} tdm_attr;

typedef struct tdm_value {
    char *name;
    tdm_dtype dtype;             /* TDM_UNDEFINED if not known */
    tdm_dtype item_dtype;        /* a sequence (or optional) of tensors: their element type as
                                    declared (checked on graph inputs); else TDM_UNDEFINED */
    int rank;                    /* -1 if not known */
    int64_t dims[TDM_MAX_RANK];  /* TDM_DIM_UNKNOWN for a dynamic dim */
    char *dim_params[TDM_MAX_RANK]; /* symbolic dim names (owned), or NULL */
    tdm_tensor *data;            /* constant data (initializer, folded constant), owned */
    int producer;                /* node index, -1 for graph inputs and constants */
    int n_consumers;
    bool is_input;               /* graph input (may also have data: overridable default) */
    bool is_output;
    bool is_initializer;         /* came from graph.initializer */
    bool is_outer;               /* (subgraphs) value captured from an enclosing graph */
    /* a generator's KV cache (marked by src/llm/generator.c, read by the budget pass,
     * sched/budget.h): the layer + 1 of a past input or present output (0 = not a cache),
     * negative when the cache is fed back (a new present each step, never kept in place); the
     * bytes of a past at the context length; kv_state: the plan keeps it on its device as a
     * state bound in place (not an activation of the run) */
    int kv_layer;
    int64_t kv_bytes;
    bool kv_state;
} tdm_value;

typedef struct tdm_node {
    char *name;
    char *op_type;
    char *domain;  /* "" for the default ONNX domain */
    int opset;     /* the model's opset for the node's domain */
    int n_inputs;
    int *inputs;   /* value indices; -1 = omitted */
    int n_outputs;
    int *outputs;  /* value indices; -1 = omitted */
    int n_attrs;
    tdm_attr *attrs;
    const struct tdm_op_schema *schema; /* resolved at finalize; NULL if unknown op */
    int n_implicit;
    int *implicit; /* values that the node's subgraphs read from this graph's scope (If/Loop
                      bodies name them directly): dependencies like inputs, but not passed
                      to the kernel */
    int device;    /* placement: index into the session's device list; -1 unplaced */
    bool dead;     /* removed by a pass (skipped, compacted later) */
} tdm_node;

typedef struct tdm_opset_import {
    char *domain;
    int64_t version;
} tdm_opset_import;

typedef struct tdm_graph {
    const tdm_allocator *alloc;
    char *name;
    tdm_value *values;
    size_t n_values, cap_values;
    tdm_node *nodes;
    size_t n_nodes, cap_nodes;
    int *inputs;       /* graph inputs (value indices), model order */
    size_t n_inputs;
    int *outputs;      /* graph outputs (value indices) */
    size_t n_outputs;
    tdm_opset_import *opsets; /* only the top-level graph's are filled */
    size_t n_opsets;
    struct tdm_graph *parent; /* enclosing graph of a subgraph */
    int depth;               /* subgraph nesting depth (0 = main graph) */
} tdm_graph;

tdm_status *tdm_graph_new(const tdm_allocator *a, tdm_graph **out);
void tdm_graph_free(tdm_graph *g);

/* Finds a value by name; -1 if none. O(1) average after tdm_graph_index(). */
int tdm_graph_find_value(const tdm_graph *g, const char *name);
/* For a name a subgraph g reads from enclosing graphs: the value of the innermost enclosing
 * graph that defines it (not one that reads it from further out too), or NULL. */
const tdm_value *tdm_graph_outer_def(const tdm_graph *g, const char *name);
/* Adds a value with a copy of `name` (no dtype, unknown rank). Rejects duplicates only
 * when `unique` is set. */
tdm_status *tdm_graph_add_value(tdm_graph *g, const char *name, int *out_index);
/* Adds a node; takes ownership of nothing: name/op/domain are copied; input/output arrays are
 * allocated empty with the given counts (filled by the caller). */
tdm_status *tdm_graph_add_node(tdm_graph *g, const char *name, const char *op_type,
                               const char *domain, int n_inputs, int n_outputs, int *out_index);

int64_t tdm_graph_opset(const tdm_graph *g, const char *domain);

/* Resolves schemas, checks that every input is defined, sorts nodes topologically (cycle ->
 * error), computes producers and consumer counts. */
tdm_status *tdm_graph_finalize(tdm_graph *g);

/* Attribute lookup on a node; NULL if absent. */
const tdm_attr *tdm_node_attr(const tdm_node *n, const char *name);
int64_t tdm_attr_int(const tdm_node *n, const char *name, int64_t def);
float tdm_attr_float(const tdm_node *n, const char *name, float def);
const char *tdm_attr_string(const tdm_node *n, const char *name, const char *def);
/* Returns the list and its length in *count, or NULL (and *count = 0) if absent. */
const int64_t *tdm_attr_ints(const tdm_node *n, const char *name, size_t *count);
const float *tdm_attr_floats(const tdm_node *n, const char *name, size_t *count);
const tdm_tensor *tdm_attr_tensor(const tdm_node *n, const char *name);

void tdm_attr_clear(const tdm_allocator *a, tdm_attr *attr);
/* Appends an attribute named name (copied) to n, its other fields zero, at *out (the node's
 * attribute array is reallocated: earlier pointers into it are stale); TDM_ERR_OUT_OF_MEMORY
 * leaves n as it was. */
tdm_status *tdm_node_append_attr(const tdm_allocator *a, tdm_node *n, const char *name,
                                 tdm_attr **out);

#endif
