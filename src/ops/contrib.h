/* The contrib operator family's schemas (ops/contrib*.c): helpers they share. Private to
 * the family. */
#ifndef TDM_OPS_CONTRIB_H
#define TDM_OPS_CONTRIB_H

#include "ops/op.h"

/* Input i is given (present). */
bool tdm_contrib_has_in(const tdm_infer_ctx *c, int i);
/* Input i, when given and of known type, has a type in `mask` (TDM_T bits). */
tdm_status *tdm_contrib_need_type(const tdm_infer_ctx *c, int i, const char *what, uint32_t mask);
/* Input i, when given and of known rank, has a rank in [lo, hi]. */
tdm_status *tdm_contrib_need_rank(const tdm_infer_ctx *c, int i, const char *what, int lo, int hi);
/* Input i, when given and of known shape, holds one value. */
tdm_status *tdm_contrib_need_scalar(const tdm_infer_ctx *c, int i, const char *what);
/* Input i, when given, is 1-D with n values (n < 0: any). */
tdm_status *tdm_contrib_need_vec(const tdm_infer_ctx *c, int i, const char *what, int64_t n);
/* v = dtype dt, rank `rank`, every dim unknown. */
void tdm_contrib_set(tdm_value_info *v, tdm_dtype dt, int rank);

#endif
