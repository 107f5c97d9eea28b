/* Batches along the leading dim, for the run strategies that divide a run (replicas split a
 * batch between devices, a pipeline cuts it into micro-batches): whether a model can be split,
 * the batch size of a run, slices of host tensors and joining the parts' outputs again. */
#ifndef TDM_SCHED_BATCH_H
#define TDM_SCHED_BATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "core/alloc.h"
#include "core/status.h"
#include "core/tensor.h"
#include "graph/graph.h"

/* Every input without data and every output of g has a dynamic leading (batch) dim, and there
 * is at least one such input: a batch can be split along it. */
bool tdm_batch_splittable(const tdm_graph *g);

/* The batch size of a run: the common leading dim of the given inputs (by_input: per graph
 * input of g, NULL = its initializer), when every one of them is a host tensor of rank >= 1
 * that is not a string and every input without data is given; otherwise -1. */
int64_t tdm_batch_rows(const tdm_graph *g, const tdm_tensor *const *by_input);

/* Rows [begin, begin + count) of host tensor t along its leading dim, as a view of its data. */
tdm_status *tdm_batch_slice(const tdm_allocator *a, const tdm_tensor *t, int64_t begin,
                            int64_t count, tdm_tensor **out);

/* Joins parts[0..np) (host tensors, same dtype, rank >= 1, same trailing dims, not strings)
 * along the leading dim into a new tensor; rows (may be NULL) gives the leading dim each part
 * must have. One part without rows is copied as it is (any tensor). name: the output's name, for the message. */
tdm_status *tdm_batch_join(const tdm_allocator *a, const tdm_tensor *const *parts, int np,
                           const int64_t *rows, const char *name, tdm_tensor **out);

#endif
