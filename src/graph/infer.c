#include "graph/infer.h"

#include <string.h>

void tdm_graph_node_infos(const tdm_graph *g, const tdm_node *n, tdm_value_info *in,
                          tdm_value_info *out) {
    for (int k = 0; k < n->n_inputs; k++) {
        tdm_value_info *vi = &in[k];
        memset(vi, 0, sizeof *vi);
        vi->rank = -1;
        int v = n->inputs[k];
        if (v < 0) continue;
        const tdm_value *val = &g->values[v];
        vi->present = true;
        vi->dtype = val->dtype;
        vi->rank = val->rank;
        for (int d = 0; d < val->rank && d < TDM_MAX_RANK; d++) vi->dims[d] = val->dims[d];
        /* an initializer that is also a graph input can be overridden: not a constant */
        vi->data = val->is_input ? NULL : val->data;
    }
    for (int k = 0; k < n->n_outputs; k++) {
        memset(&out[k], 0, sizeof out[k]);
        out[k].rank = -1;
        out[k].present = n->outputs[k] >= 0;
    }
}

static void merge_info(tdm_value *val, const tdm_value_info *vi) {
    if (vi->dtype != TDM_UNDEFINED) val->dtype = vi->dtype;
    if (vi->rank < 0) return;
    if (val->rank != vi->rank) {
        val->rank = vi->rank;
        for (int d = 0; d < vi->rank; d++) val->dims[d] = vi->dims[d];
        return;
    }
    for (int d = 0; d < vi->rank; d++)
        if (vi->dims[d] >= 0) val->dims[d] = vi->dims[d];
}

tdm_status *tdm_graph_infer_shapes(tdm_graph *g) {
    for (size_t i = 0; i < g->n_nodes; i++) {
        tdm_node *n = &g->nodes[i];
        if (n->dead || !n->schema || !n->schema->infer) continue;
        if (n->n_inputs > 64 || n->n_outputs > 64) continue; /* variadic giants: skip statics */
        tdm_value_info in[64], out[64];
        tdm_graph_node_infos(g, n, in, out);
        tdm_infer_ctx ctx = {n, n->opset, n->n_inputs, in, n->n_outputs, out};
        TDM_TRY(n->schema->infer(&ctx));
        for (int k = 0; k < n->n_outputs; k++)
            if (n->outputs[k] >= 0) merge_info(&g->values[n->outputs[k]], &out[k]);
    }
    return NULL;
}
