/* The cost model: predicted time of a node on a device (roofline from FLOPs, bytes and the
 * device profile, plus launch overhead), replaced by measured times when a profile run of
 * the model exists; predicted time of moving a tensor between devices. */
#ifndef TDM_SCHED_COST_H
#define TDM_SCHED_COST_H

#include <stdint.h>

#include "core/tensor.h"
#include "graph/graph.h"
#include "sched/profile.h"

/* Floating-point operations of a node from its (static) shapes: 2*MACs for Conv, ConvTranspose,
 * MatMul, Gemm, FusedConv, FusedMatMul, Attention; elements times a small constant for
 * element-wise ops, reductions, normalisations. Unknown dims count as 1. */
double tdm_node_flops(const tdm_graph *g, const tdm_node *n);
/* The FLOPs and bytes of one run of node n from the values of its inputs `in` (host memory),
 * for ops whose work those values set rather than the shapes: GroupQueryAttention
 * (seqlens_k, total_sequence_length) and PagedAttention (cumulative_sequence_length,
 * past_seqlens). FLOPs: heads x the cache rows each query row saw x (4 head size + 6); bytes:
 * the cache rows read (once per kv head) and written, the other inputs and the output, and
 * whole present caches where they are not the past's memory (`out`, may be NULL). false for
 * other ops, or when the values are not readable here (then the run's shapes stand). */
bool tdm_node_run_cost(const tdm_node *n, int n_in, const tdm_tensor *const *in, int n_out,
                       tdm_tensor *const *out, double *flops, double *bytes);
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
