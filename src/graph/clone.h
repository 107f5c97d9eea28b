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

#endif
