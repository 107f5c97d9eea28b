/* States of a plan kept on a device between runs (sched/plan.h tdm_plan_state_new): a
 * generator's KV cache bound in place on the device that runs its attention. */
#include <string.h>

#include "core/alloc.h"
#include "sched/budget.h"
#include "sched/monitor.h"
#include "sched/plan.h"

tdm_status *tdm_plan_state_new(tdm_plan *p, int v, tdm_dtype dtype, int rank, const int64_t *dims,
                               tdm_tensor **out) {
    if (!p || v < 0 || (size_t)v >= p->graph->n_values || !out)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_plan_state_new: bad argument");
    int d = tdm_budget_first_reader_dev(p->graph, NULL, v);
    tdm_device *dev = d >= 0 && d < p->n_devices ? p->devices[d] : NULL;
    tdm_tensor *zero = NULL;
    TDM_TRY(tdm_tensor_new(p->alloc, dtype, rank, dims, &zero)); /* zeroed */
    if (!dev || dev->host_memory) {
        *out = zero;
        return NULL;
    }
    tdm_tensor *t = NULL;
    tdm_status *st = tdm_device_to_device(dev, p->alloc, zero, &t);
    if (!st) st = tdm_device_synchronize(dev); /* (an upload may return early) */
    tdm_tensor_destroy(zero);
    if (st) {
        tdm_tensor_destroy(t);
        return tdm_status_wrap(st, "the state of '%s' on %s: ", p->graph->values[v].name, dev->name);
    }
    if (p->monitor) {
        tdm_monitor_memory(p->monitor, dev->index, (int64_t)t->nbytes);
        tdm_monitor_copy(p->monitor, dev->index, true, (int64_t)t->nbytes);
    }
    *out = t;
    return NULL;
}

void tdm_plan_state_free(tdm_plan *p, tdm_tensor *t) {
    if (!t) return;
    if (p && p->monitor && t->device)
        tdm_monitor_memory(p->monitor, ((tdm_device *)t->device)->index, -(int64_t)t->nbytes);
    tdm_tensor_destroy(t);
}
