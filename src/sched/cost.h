/* The cost model: predicted time of a node on a device (roofline from FLOPs, bytes and the
 * device profile, plus launch overhead), replaced by measured times when a profile run of
 * the model exists; predicted time of moving a tensor between devices. */
#ifndef TDM_SCHED_COST_H
#define TDM_SCHED_COST_H

#include <stdint.h>

#include "graph/graph.h"
#include "sched/profile.h"

/* Floating-point operations of a node from its (static) shapes: 2*MACs for Conv, ConvTranspose,
 * MatMul, Gemm, FusedConv, FusedMatMul, Attention; elements times a small constant for
 * element-wise ops, reductions, normalisations. Unknown dims count as 1. */
double tdm_node_flops(const tdm_graph *g, const tdm_node *n);
/* Whether node n reads only the shape of its input `k` (Shape, Size: input 0), so that the
 * value need not be copied to n's device: the executor passes the tensor where it is. */
bool tdm_node_reads_shape_only(const tdm_node *n, int k);
/* Bytes the node reads and writes (inputs + outputs, static shapes). */
double tdm_node_bytes(const tdm_graph *g, const tdm_node *n);
/* Predicted milliseconds of node n on a device with profile p. */
double tdm_cost_node_ms(const tdm_graph *g, const tdm_node *n, const tdm_device_profile *p);
/* Predicted milliseconds to move `bytes` from device `from` to device `to` (0 when both
 * use host memory). */
double tdm_cost_copy_ms(double bytes, const tdm_device_profile *from, const tdm_device_profile *to);
/* Bytes of a value from its static dtype/shape (unknown dims count as 1). */
double tdm_value_bytes(const tdm_value *v);

#endif
