/* Static shape and type inference over a graph, and the graph passes. */
#ifndef TDM_GRAPH_INFER_H
#define TDM_GRAPH_INFER_H

#include "graph/graph.h"
#include "ops/op.h"

/* Fills infer-context input infos for node `n` from the graph's values (static knowledge). */
void tdm_graph_node_infos(const tdm_graph *g, const tdm_node *n, tdm_value_info *in,
                          tdm_value_info *out);

/* Runs every known schema's infer in topological order and records dtype/shape on values.
 * Keeps what the model declared when inference knows less. Errors only for certainly invalid
 * nodes. */
tdm_status *tdm_graph_infer_shapes(tdm_graph *g);

/* Evaluates a node whose inputs are all constant: fills outs[] (new tensors) or returns an
 * error; returns TDM_ERR_UNSUPPORTED to say "cannot fold this one". */
typedef tdm_status *(*tdm_fold_fn)(void *user, const tdm_node *n, const tdm_tensor *const *ins,
                                   tdm_tensor **outs);

/* Constant folding: nodes whose inputs are all constants are evaluated through `eval` and
 * replaced by constant values (Shape of a statically known shape folds too, so the
 * Shape->Gather->Concat chains exporters emit collapse). Control-flow bodies fold too (their
 * folded nodes leave the body; no Shape folding there). Returns the number of folded nodes. */
tdm_status *tdm_graph_fold_constants(tdm_graph *g, tdm_fold_fn eval, void *user, int *folded);

/* Removes nodes whose outputs nobody uses (graph outputs count as used). */
tdm_status *tdm_graph_remove_dead(tdm_graph *g, int *removed);

/* Drops nodes marked dead and re-finalizes. */
tdm_status *tdm_graph_compact(tdm_graph *g);

/* Float32 weights of dense ops (Conv, ConvTranspose, MatMul, Gemm and their fused forms;
 * not graph inputs or outputs) with subnormal elements get a copy of their own with those
 * elements 0; *changed counts the constants copied. A subnormal weight
 * changes no product-sum by more than FLT_MIN times the other operand, but each multiply by
 * one costs an Intel core a microcode assist: two 1x1 convolutions of PP-OCRv6's detector,
 * with 24% and 63% of their weights subnormal, took 172 of 238 ms per run on a Xeon. */
tdm_status *tdm_graph_flush_subnormal_constants(tdm_graph *g, int *changed);

#endif
