/* Fusion passes: rewrite standard ONNX patterns into tandem's fused operators
 * (src/ops/fused.h). Each pass keeps the model's numerics within the tolerances stated in
 * its unit test. */
#ifndef TDM_GRAPH_FUSE_H
#define TDM_GRAPH_FUSE_H

#include "graph/graph.h"

/* Runs every fusion pass once over g (nodes replaced are marked dead; the caller compacts
 * and re-infers shapes). *count receives the number of rewrites. */
tdm_status *tdm_graph_fuse(tdm_graph *g, int *count);

#endif
