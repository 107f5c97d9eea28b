/* nn family: Einsum equation parsing and shape function. */
#include <string.h>

#include "ops/nn_geom.h"

tdm_status *tdm_nn_infer_einsum(tdm_infer_ctx *ctx);

static int letter_id(char c) {
    if (c >= 'a' && c <= 'z') return c - 'a';
    if (c >= 'A' && c <= 'Z') return 26 + (c - 'A');
    return -1;
}

/* One term of the equation: letters (ids) with an optional ellipsis position. */
typedef struct term {
    int n;           /* letters */
    int ids[TDM_MAX_RANK + 1];
    int ell_pos;     /* index in ids before which the ellipsis sits, or -1 */
} term;

static tdm_status *parse_term(const tdm_node *node, const char *s, size_t len, term *t) {
    t->n = 0;
    t->ell_pos = -1;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (c == ' ' || c == '\t') continue;
        if (c == '.') {
            if (i + 2 >= len || s[i + 1] != '.' || s[i + 2] != '.' || t->ell_pos >= 0)
                return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                      "malformed ellipsis in equation");
            t->ell_pos = t->n;
            i += 2;
            continue;
        }
        int id = letter_id(c);
        if (id < 0)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "invalid character '%c' in equation", c);
        if (t->n >= TDM_MAX_RANK)
            return tdm_node_error(node, TDM_ERR_LIMIT, "a term has more than %d labels",
                                  TDM_MAX_RANK);
        t->ids[t->n++] = id;
    }
    return NULL;
}

/* Combines the sizes a label has in different places (1 broadcasts; -1 unknown, -2 unset). */
static tdm_status *merge_dim(const tdm_node *node, int64_t *cur, int64_t d) {
    if (*cur == -2) {
        *cur = d;
    } else if (d < 0) {
        if (*cur == 1) *cur = TDM_DIM_UNKNOWN;
    } else if (*cur < 0) {
        if (d > 1) *cur = d;
    } else if (*cur == 1) {
        *cur = d;
    } else if (d != 1 && d != *cur) {
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "a label has sizes %lld and %lld",
                              (long long)*cur, (long long)d);
    }
    return NULL;
}

tdm_status *tdm_nn_einsum_parse(const tdm_node *node, const char *eq, int n, const int *ranks,
                                const int64_t (*dims)[TDM_MAX_RANK], tdm_einsum_spec *spec,
                                bool *ok) {
    memset(spec, 0, sizeof *spec);
    *ok = false;
    if (n < 1 || n > TDM_EINSUM_MAX_OPS)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "Einsum takes 1 to %d inputs",
                              TDM_EINSUM_MAX_OPS);
    const char *arrow = strstr(eq, "->");
    size_t lhs_len = arrow ? (size_t)(arrow - eq) : strlen(eq);
    term terms[TDM_EINSUM_MAX_OPS];
    int nt = 0;
    size_t start = 0;
    for (size_t i = 0; i <= lhs_len; i++) {
        if (i == lhs_len || eq[i] == ',') {
            if (nt >= n)
                return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                      "equation has more terms than the %d inputs", n);
            TDM_TRY(parse_term(node, eq + start, i - start, &terms[nt]));
            nt++;
            start = i + 1;
        }
    }
    if (nt != n)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "equation has %d terms for %d inputs", nt, n);
    term out_term;
    if (arrow) TDM_TRY(parse_term(node, arrow + 2, strlen(arrow + 2), &out_term));
    for (int k = 0; k < n; k++)
        if (ranks[k] < 0) return NULL;

    int ell_max = 0;
    int ell[TDM_EINSUM_MAX_OPS];
    for (int k = 0; k < n; k++) {
        ell[k] = ranks[k] - terms[k].n;
        if (terms[k].ell_pos < 0 ? ell[k] != 0 : ell[k] < 0)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "term %d has %d labels for an input of rank %d", k,
                                  terms[k].n, ranks[k]);
        if (ell[k] > ell_max) ell_max = ell[k];
    }
    for (int l = 0; l < TDM_EINSUM_MAX_LABELS; l++) spec->dim[l] = -2;
    int count[TDM_EINSUM_MAX_LABELS] = {0};
    spec->n_ops = n;
    for (int k = 0; k < n; k++) {
        const term *t = &terms[k];
        int ax = 0;
        spec->rank[k] = ranks[k];
        for (int i = 0; i <= t->n; i++) {
            if (i == t->ell_pos)
                for (int j = 0; j < ell[k]; j++)
                    spec->labels[k][ax++] = TDM_EINSUM_LETTERS + ell_max - ell[k] + j;
            if (i < t->n) spec->labels[k][ax++] = t->ids[i];
        }
        for (int a = 0; a < ranks[k]; a++) {
            int l = spec->labels[k][a];
            count[l]++;
            spec->used[l] = true;
            TDM_TRY(merge_dim(node, &spec->dim[l], dims[k][a]));
        }
    }
    int r = 0;
    if (arrow) {
        bool seen[TDM_EINSUM_MAX_LABELS] = {false};
        for (int i = 0; i <= out_term.n; i++) {
            if (i == out_term.ell_pos)
                for (int j = 0; j < ell_max; j++) {
                    if (r >= TDM_MAX_RANK) goto too_big;
                    spec->out_labels[r++] = TDM_EINSUM_LETTERS + j;
                }
            if (i == out_term.n) break;
            int l = out_term.ids[i];
            if (!spec->used[l])
                return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                      "output label '%c' does not appear in the inputs",
                                      l < 26 ? 'a' + l : 'A' + (l - 26));
            if (seen[l])
                return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                      "output label '%c' is repeated",
                                      l < 26 ? 'a' + l : 'A' + (l - 26));
            seen[l] = true;
            if (r >= TDM_MAX_RANK) goto too_big;
            spec->out_labels[r++] = l;
        }
    } else {
        for (int j = 0; j < ell_max; j++) spec->out_labels[r++] = TDM_EINSUM_LETTERS + j;
        for (int c = 0; c < 52; c++) { /* ASCII order: A-Z, then a-z */
            int l = c < 26 ? 26 + c : c - 26;
            if (count[l] == 1) {
                if (r >= TDM_MAX_RANK) goto too_big;
                spec->out_labels[r++] = l;
            }
        }
    }
    spec->out_rank = r;
    *ok = true;
    return NULL;
too_big:
    return tdm_node_error(node, TDM_ERR_LIMIT, "result rank exceeds %d", TDM_MAX_RANK);
}

tdm_status *tdm_nn_infer_einsum(tdm_infer_ctx *ctx) {
    tdm_value_info *y = &ctx->out[0];
    y->dtype = ctx->in[0].dtype;
    const char *eq = tdm_attr_string(ctx->node, "equation", NULL);
    if (!eq)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "attribute 'equation' is required");
    int ranks[TDM_EINSUM_MAX_OPS];
    int64_t dims[TDM_EINSUM_MAX_OPS][TDM_MAX_RANK];
    int n = ctx->n_in > TDM_EINSUM_MAX_OPS ? TDM_EINSUM_MAX_OPS + 1 : ctx->n_in;
    for (int k = 0; k < n && k < TDM_EINSUM_MAX_OPS; k++) {
        ranks[k] = ctx->in[k].rank;
        for (int a = 0; a < TDM_MAX_RANK; a++)
            dims[k][a] = a < ranks[k] ? ctx->in[k].dims[a] : TDM_DIM_UNKNOWN;
    }
    tdm_einsum_spec spec;
    bool ok;
    TDM_TRY(tdm_nn_einsum_parse(ctx->node, eq, n, ranks, (const int64_t(*)[TDM_MAX_RANK])dims,
                                &spec, &ok));
    if (!ok) return NULL;
    y->rank = spec.out_rank;
    for (int i = 0; i < spec.out_rank; i++) {
        int64_t d = spec.dim[spec.out_labels[i]];
        y->dims[i] = d == -2 ? TDM_DIM_UNKNOWN : d;
    }
    return NULL;
}
