/* Copies of a graph: run strategies make their replicas' and stages' graphs from the one IR
 * the loader built (src/sched/strategy.h), never by parsing the model again. */
#ifndef TDM_GRAPH_CLONE_H
#define TDM_GRAPH_CLONE_H

#include <stdbool.h>

#include "graph/graph.h"

/* A deep copy of g with the same allocator: values, nodes, attributes, subgraph bodies (their
 * parent the copy), opsets, inputs and outputs; the name index is rebuilt. keep_data (may be
 * NULL: every value's) says per value of g whether its constant data is copied; a value left
 * without data is the caller's to take out of use (a pipeline stage copies only the weights
 * its nodes read). *out untouched on failure. */
tdm_status *tdm_graph_clone(const tdm_graph *g, const bool *keep_data, tdm_graph **out);
/* tdm_graph_clone of every value, the constant data (values' and attributes' tensors, in
 * subgraph bodies too) shared with g's (tdm_tensor_share) instead of copied: the bytes are
 * held once and freed with the last graph that holds them, whichever is freed first. Neither
 * graph may edit a constant's bytes in place afterwards (the passes replace a constant with a
 * new tensor). g's tensors are marked shared (not thread-safe for g). */
tdm_status *tdm_graph_clone_sharing(tdm_graph *g, tdm_graph **out);

#endif
