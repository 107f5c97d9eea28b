/* CPU kernels: tree ensembles (ai.onnx.ml TreeEnsembleClassifier / TreeEnsembleRegressor).
 *
 * prepare() compiles the nodes_* / *_ids attributes once into flat arrays: nodes of all trees
 * in one array (children as indices), leaf votes grouped per leaf, one root per tree; it
 * refuses children that do not exist and trees with cycles, so a run can follow children
 * without bounds checks. A run walks every tree for each row, rows split over the session's
 * threads, with one score vector per row (double accumulation).
 *
 * Scores are finished as ONNX Runtime finishes them (its behaviour defines what converted
 * scikit-learn / XGBoost / LightGBM models mean): base values, the binary cases (one class's
 * votes only, weights all positive or not), and the post transforms. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/ml_util.h"
#include "core/alloc.h"
#include "core/half.h"

enum { M_LEQ, M_LT, M_GTE, M_GT, M_EQ, M_NEQ, M_LEAF, M_MEMBER };
enum { AG_SUM, AG_AVERAGE, AG_MIN, AG_MAX };

typedef struct te_node {
    double value;      /* threshold */
    int32_t feature;
    int32_t yes, no;   /* node indices (branches) */
    uint8_t mode;
    uint8_t miss_true; /* NaN takes the true branch */
    int32_t vote0, n_votes; /* BRANCH_MEMBER: the set's first index and size in members */
} te_node;

typedef struct te_vote {
    int32_t target;
    double weight;
} te_vote;

/* The compact form for float rows when every branch compares with <, <=, >= or > against a
 * float threshold (what scikit-learn, XGBoost and LightGBM converters write, missing-value
 * tracks included): 16 bytes a node, each tree laid out breadth first with a node's two
 * children side by side, so that a step is `i = left + go_right` without a branch:
 *   go_right = x > value, or x is NaN and the NaN bit is clear (x <= value goes left).
 * < and >= become <= against the next float down (exact for every float x); >= and > swap the
 * children; the NaN bit says which side NaN takes. A leaf points at itself (value +inf, NaN
 * bit set), so that every row can take the tree's full depth of steps. */
typedef struct te_cnode {
    float value;
    uint32_t feat;  /* feature, | TE_NAN_LEFT */
    int32_t left;   /* the left child's slot; the right child is left + 1 */
    int32_t orig;   /* the node (m->nodes) this slot copies: a leaf's votes */
} te_cnode;
#define TE_NAN_LEFT 0x80000000u

typedef struct te_model {
    te_node *nodes;
    te_cnode *cnodes; /* NULL when the compact form does not apply */
    int32_t *croot, *cdepth; /* per tree: its root slot, the steps its deepest leaf takes */
    int32_t cvotes; /* > 0: every leaf has this many votes, summed, and a leaf slot's orig is its
                     * first vote (one memory access a leaf instead of two) */
    int32_t *roots;
    te_vote *votes;
    double *base;
    double *members; /* TreeEnsemble's membership sets, one after the other */
    int64_t n_nodes, n_trees, n_base, n_out;
    int32_t max_feature;
    int post, agg;
    bool classifier, binary_case, all_positive;
    bool v5; /* TreeEnsemble (opset 5): output in the input's type, leaves may be shared */
    const int64_t *labels_int; /* borrowed from the node (lives as long as the plan) */
    char **labels_str;
} te_model;

typedef struct id_ref {
    int64_t tree, node;
    int32_t index;
} id_ref;

static int cmp_id(const void *a, const void *b) {
    const id_ref *x = a, *y = b;
    if (x->tree != y->tree) return x->tree < y->tree ? -1 : 1;
    return x->node < y->node ? -1 : x->node > y->node;
}

static int32_t find_id(const id_ref *ids, int64_t n, int64_t tree, int64_t node) {
    id_ref key = {tree, node, 0};
    const id_ref *hit = bsearch(&key, ids, (size_t)n, sizeof *ids, cmp_id);
    return hit ? hit->index : -1;
}

static int parse_mode(const char *s) {
    static const char *const names[] = {"BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT",
                                        "BRANCH_EQ", "BRANCH_NEQ", "LEAF"};
    for (int i = 0; i < 7; i++)
        if (!strcmp(s, names[i])) return i;
    return -1;
}

/* A list of numbers given as floats (NAME) or as a tensor (NAME_as_tensor, double or float);
 * n entries copied into dst as doubles. */
static void read_numbers(const tdm_node *node, const char *name, double *dst, int64_t n) {
    size_t nf = 0;
    const float *f = tdm_attr_floats(node, name, &nf);
    if (f) {
        for (int64_t i = 0; i < n && (size_t)i < nf; i++) dst[i] = f[i];
        return;
    }
    char tname[96];
    snprintf(tname, sizeof tname, "%s_as_tensor", name);
    const tdm_tensor *t = tdm_attr_tensor(node, tname);
    for (int64_t i = 0; t && i < n && i < t->count; i++)
        dst[i] = t->dtype == TDM_DOUBLE ? ((const double *)t->data)[i]
                                        : (double)((const float *)t->data)[i];
}

static int64_t numbers_len(const tdm_node *node, const char *name) {
    size_t nf = 0;
    if (tdm_attr_floats(node, name, &nf)) return (int64_t)nf;
    char tname[96];
    snprintf(tname, sizeof tname, "%s_as_tensor", name);
    const tdm_tensor *t = tdm_attr_tensor(node, tname);
    return t ? t->count : 0;
}

static void te_release(void *state, const tdm_allocator *a) {
    te_model *m = state;
    if (!m) return;
    tdm_free(a, m->nodes);
    tdm_free(a, m->cnodes);
    tdm_free(a, m->croot);
    tdm_free(a, m->cdepth);
    tdm_free(a, m->roots);
    tdm_free(a, m->votes);
    tdm_free(a, m->base);
    tdm_free(a, m->members);
    tdm_free(a, m);
}

/* Every tree is acyclic: a walk from each root never visits more nodes than the tree has.
 * `seen` (n_nodes, zeroed) marks nodes by tree number + 1. */
static bool walk_ok(const te_model *m, int32_t root, int32_t tree, int32_t *seen, int32_t *stack) {
    int64_t top = 0;
    stack[top++] = root;
    while (top) {
        int32_t i = stack[--top];
        if (seen[i] == tree + 1) { /* reached twice: a cycle or a shared child */
            if (m->v5 && m->nodes[i].mode == M_LEAF) continue; /* a shared leaf is no cycle */
            return false;
        }
        seen[i] = tree + 1;
        if (m->nodes[i].mode == M_LEAF) continue;
        stack[top++] = m->nodes[i].yes;
        stack[top++] = m->nodes[i].no;
    }
    return true;
}

static tdm_status *build_nodes(const tdm_node *node, const tdm_allocator *a, te_model *m,
                               id_ref *ids) {
    size_t n = 0;
    const int64_t *tree = tdm_attr_ints(node, "nodes_treeids", &n);
    size_t n2 = 0;
    const int64_t *nid = tdm_attr_ints(node, "nodes_nodeids", &n2);
    const int64_t *feat = tdm_attr_ints(node, "nodes_featureids", &n2);
    const int64_t *yes = tdm_attr_ints(node, "nodes_truenodeids", &n2);
    const int64_t *no = tdm_attr_ints(node, "nodes_falsenodeids", &n2);
    size_t n_miss = 0;
    const int64_t *miss = tdm_attr_ints(node, "nodes_missing_value_tracks_true", &n_miss);
    const tdm_attr *modes = tdm_node_attr(node, "nodes_modes");
    m->n_nodes = (int64_t)n;
    m->nodes = tdm_calloc(a, n, sizeof *m->nodes);
    double *vals = tdm_calloc(a, n, sizeof *vals);
    if (!m->nodes || !vals) {
        tdm_free(a, vals);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    read_numbers(node, "nodes_values", vals, (int64_t)n);
    for (size_t i = 0; i < n; i++) ids[i] = (id_ref){tree[i], nid[i], (int32_t)i};
    qsort(ids, n, sizeof *ids, cmp_id);
    tdm_status *st = NULL;
    for (size_t i = 0; i + 1 < n && !st; i++)
        if (!cmp_id(&ids[i], &ids[i + 1]))
            st = TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tree %lld has node %lld twice",
                                (long long)ids[i].tree, (long long)ids[i].node);
    for (size_t i = 0; i < n && !st; i++) {
        te_node *t = &m->nodes[i];
        int mode = parse_mode(modes->strings[i]);
        if (mode < 0) {
            st = TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "unknown node mode '%s'",
                                modes->strings[i]);
            break;
        }
        t->mode = (uint8_t)mode;
        t->value = vals[i];
        t->miss_true = miss && n_miss == n && miss[i] != 0;
        if (mode == M_LEAF) continue;
        if (feat[i] < 0 || feat[i] > INT32_MAX) {
            st = TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "node %zu: feature id %lld", i,
                                (long long)feat[i]);
            break;
        }
        t->feature = (int32_t)feat[i];
        if (t->feature > m->max_feature) m->max_feature = t->feature;
        t->yes = find_id(ids, (int64_t)n, tree[i], yes[i]);
        t->no = find_id(ids, (int64_t)n, tree[i], no[i]);
        if (t->yes < 0 || t->no < 0)
            st = TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tree %lld node %lld: a child (%lld or %lld) does not exist",
                                (long long)tree[i], (long long)nid[i], (long long)yes[i],
                                (long long)no[i]);
    }
    tdm_free(a, vals);
    return st;
}

/* Roots: per tree, the node no other node of the tree points at (first by id). */
static tdm_status *find_roots(const tdm_node *node, const tdm_allocator *a, te_model *m,
                              const id_ref *ids) {
    int64_t n = m->n_nodes;
    int32_t *child = tdm_calloc(a, (size_t)n, sizeof *child);
    int32_t *stack = tdm_calloc(a, (size_t)n * 2 + 1, sizeof *stack);
    m->roots = tdm_calloc(a, (size_t)n, sizeof *m->roots);
    if (!child || !stack || !m->roots) {
        tdm_free(a, child);
        tdm_free(a, stack);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    for (int64_t i = 0; i < n; i++)
        if (m->nodes[i].mode != M_LEAF) child[m->nodes[i].yes] = child[m->nodes[i].no] = 1;
    tdm_status *st = NULL;
    for (int64_t k = 0; k < n && !st; k++) {
        bool first_of_tree = k == 0 || ids[k].tree != ids[k - 1].tree;
        if (first_of_tree) m->roots[m->n_trees] = -1;
        if (!child[ids[k].index] && m->roots[m->n_trees] < 0) m->roots[m->n_trees] = ids[k].index;
        bool last_of_tree = k == n - 1 || ids[k].tree != ids[k + 1].tree;
        if (!last_of_tree) continue;
        if (m->roots[m->n_trees] < 0)
            st = TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tree %lld has no root",
                                (long long)ids[k].tree);
        m->n_trees++;
    }
    memset(child, 0, (size_t)n * sizeof *child); /* reused as the walk's marks */
    for (int64_t t = 0; t < m->n_trees && !st; t++)
        if (!walk_ok(m, m->roots[t], (int32_t)t, child, stack))
            st = TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tree %lld is not a tree (a node is reached twice)", (long long)t);
    tdm_free(a, child);
    tdm_free(a, stack);
    return st;
}

/* Leaf votes, grouped per node. */
static tdm_status *build_votes(const tdm_node *node, const tdm_allocator *a, te_model *m,
                               const id_ref *ids, const char *prefix) {
    char name[64];
    size_t n = 0;
    snprintf(name, sizeof name, "%s_treeids", prefix);
    const int64_t *tree = tdm_attr_ints(node, name, &n);
    snprintf(name, sizeof name, "%s_nodeids", prefix);
    size_t n2 = 0;
    const int64_t *nid = tdm_attr_ints(node, name, &n2);
    snprintf(name, sizeof name, "%s_ids", prefix);
    const int64_t *target = tdm_attr_ints(node, name, &n2);
    snprintf(name, sizeof name, "%s_weights", prefix);
    double *w = tdm_calloc(a, n ? n : 1, sizeof *w);
    int32_t *at = tdm_calloc(a, n ? n : 1, sizeof *at);
    m->votes = tdm_calloc(a, n ? n : 1, sizeof *m->votes);
    if (!w || !at || !m->votes) {
        tdm_free(a, w);
        tdm_free(a, at);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    read_numbers(node, name, w, (int64_t)n);
    tdm_status *st = NULL;
    m->all_positive = true;
    int64_t first_class = n ? target[0] : 0;
    bool one_class = true;
    for (size_t i = 0; i < n && !st; i++) {
        at[i] = find_id(ids, m->n_nodes, tree[i], nid[i]);
        if (at[i] < 0)
            st = TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "%s vote %zu names node %lld of tree %lld, which does not exist",
                                prefix, i, (long long)nid[i], (long long)tree[i]);
        else m->nodes[at[i]].n_votes++;
        if (w[i] < 0) m->all_positive = false;
        if (target[i] != first_class) one_class = false;
    }
    m->binary_case = m->classifier && m->n_out == 2 && n > 0 && one_class;
    int32_t next = 0;
    for (int64_t i = 0; i < m->n_nodes && !st; i++) {
        m->nodes[i].vote0 = next;
        next += m->nodes[i].n_votes;
        m->nodes[i].n_votes = 0;
    }
    for (size_t i = 0; i < n && !st; i++) { /* in attribute order within each leaf */
        te_node *leaf = &m->nodes[at[i]];
        m->votes[leaf->vote0 + leaf->n_votes++] = (te_vote){(int32_t)target[i], w[i]};
    }
    tdm_free(a, w);
    tdm_free(a, at);
    return st;
}

/* A node as a compact <= test: threshold, NaN side, children swapped; false when it cannot
 * be one (==, !=, membership, a threshold whose next float down is not exact). */
static bool compact_test(const te_node *t, float *thr, bool *nan_left, bool *swap) {
    float v = (float)t->value;
    bool down = t->mode == M_LT || t->mode == M_GTE;
    if (t->mode != M_LEQ && t->mode != M_LT && t->mode != M_GTE && t->mode != M_GT) return false;
    if (down) {
        if (v == -INFINITY) return false;
        v = nextafterf(v, -INFINITY);
        if (v != 0 && fabsf(v) < FLT_MIN) return false; /* subnormal: DAZ would change it */
    }
    *thr = v;
    *swap = t->mode == M_GTE || t->mode == M_GT; /* the <= test is true on the "no" side */
    *nan_left = *swap ? !t->miss_true : t->miss_true;
    return true;
}

static tdm_status *build_compact(const tdm_node *node, const tdm_allocator *a, te_model *m) {
    size_t nf = 0;
    if (m->v5) {
        const tdm_tensor *t = tdm_attr_tensor(node, "nodes_splits");
        if (!t || t->dtype != TDM_FLOAT) return NULL;
    } else if (!tdm_attr_floats(node, "nodes_values", &nf)) {
        return NULL; /* double thresholds */
    }
    int64_t interior = 0;
    for (int64_t i = 0; i < m->n_nodes; i++) {
        float thr;
        bool nl, sw;
        if (m->nodes[i].mode == M_LEAF) continue;
        if (!compact_test(&m->nodes[i], &thr, &nl, &sw)) return NULL;
        interior++;
    }
    /* each tree copies what it reaches (a leaf shared by two branches twice): at most two
     * slots per interior node it reaches plus its root; trees sharing nodes (opset 5 allows
     * it) may copy more, so the walk below checks the room. */
    int64_t cap = 2 * interior + m->n_trees + 1;
    if (cap > ((int64_t)1 << 28)) return NULL;
    m->cnodes = tdm_alloc(a, (size_t)cap * sizeof *m->cnodes);
    m->croot = tdm_calloc(a, (size_t)m->n_trees + 1, sizeof *m->croot);
    m->cdepth = tdm_calloc(a, (size_t)m->n_trees + 1, sizeof *m->cdepth);
    int32_t *queue = tdm_alloc(a, (size_t)cap * 2 * sizeof *queue); /* (slot, depth) pairs */
    if (!m->cnodes || !m->croot || !m->cdepth || !queue) {
        tdm_free(a, queue);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    int64_t next = 0;
    bool fits = true;
    for (int64_t t = 0; t < m->n_trees && fits; t++) {
        int64_t head = 0, tail = 0;
        int32_t root = (int32_t)next++;
        m->croot[t] = root;
        m->cnodes[root].orig = m->roots[t];
        queue[tail++] = root, queue[tail++] = 0;
        while (head < tail) {
            int32_t slot = queue[head++], depth = queue[head++];
            const te_node *nd = &m->nodes[m->cnodes[slot].orig];
            te_cnode *c = &m->cnodes[slot];
            if (nd->mode == M_LEAF) {
                c->value = INFINITY, c->feat = TE_NAN_LEFT, c->left = slot;
                if (depth > m->cdepth[t]) m->cdepth[t] = depth;
                continue;
            }
            if (next + 2 > cap) {
                fits = false;
                break;
            }
            float thr = 0;
            bool nan_left = false, swap = false;
            compact_test(nd, &thr, &nan_left, &swap);
            c->value = thr;
            c->feat = (uint32_t)nd->feature | (nan_left ? TE_NAN_LEFT : 0);
            c->left = (int32_t)next;
            m->cnodes[next].orig = swap ? nd->no : nd->yes;
            m->cnodes[next + 1].orig = swap ? nd->yes : nd->no;
            queue[tail++] = (int32_t)next, queue[tail++] = depth + 1;
            queue[tail++] = (int32_t)next + 1, queue[tail++] = depth + 1;
            next += 2;
        }
    }
    tdm_free(a, queue);
    if (fits && (m->agg == AG_SUM || m->agg == AG_AVERAGE)) {
        int32_t k = -1;
        for (int64_t i = 0; i < next && k != 0; i++)
            if (m->cnodes[i].left == (int32_t)i) {
                int32_t nv = m->nodes[m->cnodes[i].orig].n_votes;
                k = k < 0 || k == nv ? nv : 0;
            }
        if (k > 0) {
            m->cvotes = k;
            for (int64_t i = 0; i < next; i++)
                if (m->cnodes[i].left == (int32_t)i) m->cnodes[i].orig = m->nodes[m->cnodes[i].orig].vote0;
        }
    }
    if (!fits) {
        tdm_free(a, m->cnodes), tdm_free(a, m->croot), tdm_free(a, m->cdepth);
        m->cnodes = NULL, m->croot = m->cdepth = NULL;
    }
    return NULL;
}

/* One number of a float / double / float16 tensor. */
static double tensor_num(const tdm_tensor *t, int64_t i) {
    return t->dtype == TDM_FLOAT    ? ((const float *)t->data)[i]
           : t->dtype == TDM_DOUBLE ? ((const double *)t->data)[i]
                                    : tdm_f16_to_f32(((const uint16_t *)t->data)[i]);
}

/* TreeEnsemble (opset 5): interior nodes first, then one node per leaf_* entry (one vote
 * each); children and roots are indices already (checked by the schema). BRANCH_MEMBER nodes
 * keep their set as a range of `members`. */
static tdm_status *prepare_v5(const tdm_node *node, const tdm_allocator *a, te_model *m) {
    size_t n = 0, n_leaf = 0, n_roots = 0, n_miss = 0, n2 = 0;
    const int64_t *feat = tdm_attr_ints(node, "nodes_featureids", &n);
    const int64_t *yes = tdm_attr_ints(node, "nodes_truenodeids", &n2);
    const int64_t *no = tdm_attr_ints(node, "nodes_falsenodeids", &n2);
    const int64_t *yl = tdm_attr_ints(node, "nodes_trueleafs", &n2);
    const int64_t *nl = tdm_attr_ints(node, "nodes_falseleafs", &n2);
    const int64_t *miss = tdm_attr_ints(node, "nodes_missing_value_tracks_true", &n_miss);
    const int64_t *roots = tdm_attr_ints(node, "tree_roots", &n_roots);
    const int64_t *tid = tdm_attr_ints(node, "leaf_targetids", &n_leaf);
    const tdm_tensor *splits = tdm_attr_tensor(node, "nodes_splits");
    const tdm_tensor *modes = tdm_attr_tensor(node, "nodes_modes");
    const tdm_tensor *w = tdm_attr_tensor(node, "leaf_weights");
    const tdm_tensor *mv = tdm_attr_tensor(node, "membership_values");
    if (!feat || !yes || !no || !yl || !nl || !roots || !tid || !splits || !modes || !w)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "TreeEnsemble: an attribute is missing");
    int64_t t_max = 0;
    for (size_t i = 0; i < n_leaf; i++) t_max = tid[i] + 1 > t_max ? tid[i] + 1 : t_max;
    m->n_out = tdm_node_attr(node, "n_targets") ? tdm_attr_int(node, "n_targets", 1) : t_max;
    int64_t agg = tdm_attr_int(node, "aggregate_function", 1);
    m->agg = agg == 0 ? AG_AVERAGE : agg == 2 ? AG_MIN : agg == 3 ? AG_MAX : AG_SUM;
    static const int posts[] = {PT_NONE, PT_SOFTMAX, PT_LOGISTIC, PT_SOFTMAX_ZERO, PT_PROBIT};
    int64_t post = tdm_attr_int(node, "post_transform", 0);
    m->post = post >= 0 && post <= 4 ? posts[post] : PT_NONE;
    m->n_nodes = (int64_t)(n + n_leaf);
    m->n_trees = (int64_t)n_roots;
    m->nodes = tdm_calloc(a, (size_t)m->n_nodes, sizeof *m->nodes);
    m->votes = tdm_calloc(a, n_leaf, sizeof *m->votes);
    m->roots = tdm_calloc(a, n_roots, sizeof *m->roots);
    m->base = tdm_calloc(a, 1, sizeof *m->base);
    m->members = tdm_calloc(a, mv && mv->count ? (size_t)mv->count : 1, sizeof *m->members);
    if (!m->nodes || !m->votes || !m->roots || !m->base || !m->members)
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    const uint8_t *mode = modes->data;
    int64_t mpos = 0;
    for (size_t i = 0; i < n; i++) {
        te_node *t = &m->nodes[i];
        if (mode[i] > 6 || yes[i] < 0 || no[i] < 0 ||
            yes[i] >= (int64_t)(yl[i] ? n_leaf : n) || no[i] >= (int64_t)(nl[i] ? n_leaf : n))
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "TreeEnsemble: node %zu is malformed", i);
        t->mode = mode[i] == 6 ? M_MEMBER : mode[i];
        t->value = tensor_num(splits, (int64_t)i);
        t->feature = (int32_t)feat[i];
        if (t->feature > m->max_feature) m->max_feature = t->feature;
        t->miss_true = miss && n_miss == n && miss[i] != 0;
        t->yes = (int32_t)(yl[i] ? (int64_t)n + yes[i] : yes[i]);
        t->no = (int32_t)(nl[i] ? (int64_t)n + no[i] : no[i]);
        if (t->mode == M_MEMBER) { /* the next NaN-delimited set */
            if (!mv) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "TreeEnsemble: no membership_values");
            t->vote0 = (int32_t)mpos;
            while (mpos < mv->count && !isnan(tensor_num(mv, mpos)))
                m->members[mpos] = tensor_num(mv, mpos), mpos++;
            t->n_votes = (int32_t)(mpos - t->vote0);
            mpos++; /* the NaN */
        }
    }
    for (size_t l = 0; l < n_leaf; l++) {
        te_node *t = &m->nodes[n + l];
        t->mode = M_LEAF;
        t->vote0 = (int32_t)l;
        t->n_votes = 1;
        m->votes[l] = (te_vote){(int32_t)tid[l], tensor_num(w, (int64_t)l)};
        if (tid[l] < 0 || tid[l] >= m->n_out)
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "TreeEnsemble: leaf %zu's target", l);
    }
    int32_t *seen = tdm_calloc(a, (size_t)m->n_nodes, sizeof *seen);
    int32_t *stack = tdm_calloc(a, (size_t)m->n_nodes * 2 + 1, sizeof *stack);
    tdm_status *st = NULL;
    if (!seen || !stack) st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    for (size_t t = 0; t < n_roots && !st; t++) {
        if (roots[t] < 0 || roots[t] >= (int64_t)n) {
            st = TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "TreeEnsemble: tree_roots[%zu]", t);
            break;
        }
        m->roots[t] = (int32_t)roots[t];
        if (!walk_ok(m, m->roots[t], (int32_t)t, seen, stack))
            st = TDM_ERR(TDM_ERR_INVALID_ARGUMENT,
                         "TreeEnsemble: tree %zu is not a tree (an interior node is reached twice)", t);
    }
    tdm_free(a, seen);
    tdm_free(a, stack);
    return st;
}

static tdm_status *te_prepare(const tdm_node *node, int opset, int n_in,
                              const tdm_tensor *const *in, const tdm_allocator *a, void **state) {
    (void)opset, (void)n_in, (void)in;
    te_model *m = tdm_calloc(a, 1, sizeof *m);
    if (!m) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    if (!strcmp(node->op_type, "TreeEnsemble")) {
        m->v5 = true;
        tdm_status *st = prepare_v5(node, a, m);
        if (!st) st = build_compact(node, a, m);
        if (st) {
            te_release(m, a);
            return st;
        }
        *state = m;
        return NULL;
    }
    m->classifier = !strcmp(node->op_type, "TreeEnsembleClassifier");
    m->post = ml_parse_post(tdm_attr_string(node, "post_transform", "NONE"));
    const char *agg = tdm_attr_string(node, "aggregate_function", "SUM");
    m->agg = !strcmp(agg, "AVERAGE") ? AG_AVERAGE : !strcmp(agg, "MIN") ? AG_MIN
             : !strcmp(agg, "MAX") ? AG_MAX : AG_SUM;
    if (m->classifier) {
        size_t ni = 0;
        m->labels_int = tdm_attr_ints(node, "classlabels_int64s", &ni);
        const tdm_attr *ls = tdm_node_attr(node, "classlabels_strings");
        if (ls && ls->type == TDM_ATTR_STRINGS && ls->n) {
            m->labels_str = ls->strings;
            m->n_out = (int64_t)ls->n;
            m->labels_int = NULL;
        } else {
            m->n_out = (int64_t)ni;
        }
    } else {
        m->n_out = tdm_attr_int(node, "n_targets", 1);
    }
    m->n_base = numbers_len(node, "base_values");
    m->base = tdm_calloc(a, (size_t)(m->n_base ? m->n_base : 1), sizeof *m->base);
    size_t n = 0;
    tdm_attr_ints(node, "nodes_treeids", &n);
    id_ref *ids = tdm_calloc(a, n ? n : 1, sizeof *ids);
    tdm_status *st = NULL;
    if (!m->base || !ids) st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    if (!st) {
        read_numbers(node, "base_values", m->base, m->n_base);
        st = build_nodes(node, a, m, ids);
    }
    if (!st) st = find_roots(node, a, m, ids);
    if (!st) st = build_votes(node, a, m, ids, m->classifier ? "class" : "target");
    if (!st) st = build_compact(node, a, m);
    tdm_free(a, ids);
    if (st) {
        te_release(m, a);
        return st;
    }
    *state = m;
    return NULL;
}

/* ---- scores ---- */

/* Adds a leaf's votes to one row's scores. */
static inline void add_votes(const te_model *m, const te_node *leaf, double *s, uint8_t *has) {
    for (int32_t j = 0; j < leaf->n_votes; j++) {
        const te_vote *vt = &m->votes[leaf->vote0 + j];
        double *p = &s[vt->target];
        if (m->agg == AG_MIN) *p = has[vt->target] && *p <= vt->weight ? *p : vt->weight;
        else if (m->agg == AG_MAX) *p = has[vt->target] && *p >= vt->weight ? *p : vt->weight;
        else *p += vt->weight;
        has[vt->target] = 1;
    }
}

/* ---- the compact walk: leaf slots of `n` rows (row k at x + k * F) through one tree ---- */

static inline int32_t cstep(const te_cnode *c, const float *row) {
    float x = row[c->feat & ~TE_NAN_LEFT];
    bool right = x > c->value || (!(c->feat & TE_NAN_LEFT) && x != x);
    return c->left + right;
}

/* Portable: eight rows at once (independent walks the CPU overlaps), no branch per step. */
static void walk_portable(const te_cnode *cn, int32_t root, int32_t depth, const float *x,
                          int64_t F, int64_t n, int32_t *leaf) {
    int64_t r = 0;
    for (; r + 8 <= n; r += 8) {
        int32_t i[8];
        const float *row = x + r * F;
        for (int k = 0; k < 8; k++) i[k] = root;
        for (int32_t d = 0; d < depth; d++) {
            int moved = 0;
            for (int k = 0; k < 8; k++) {
                int32_t nk = cstep(&cn[i[k]], row + k * F);
                moved |= nk != i[k];
                i[k] = nk;
            }
            if (!moved) break;
        }
        memcpy(leaf + r, i, sizeof i);
    }
    for (; r < n; r++) {
        int32_t i = root;
        for (int32_t d = 0; d < depth; d++) i = cstep(&cn[i], x + r * F);
        leaf[r] = i;
    }
}

#ifdef TDM_SIMD_X86
#include <immintrin.h>
/* AVX2: eight rows a vector; the node's fields and the row values by gathers. Returns the rows
 * walked (the whole eights): the caller walks the rest with walk_portable, so that no SSE code
 * runs from inside an AVX function (GCC may leave the upper halves dirty across such a call). */
TDM_TARGET_AVX2 static int64_t walk_avx2(const te_cnode *cn, int32_t root, int32_t depth,
                                         const float *x, int64_t F, int64_t n, int32_t *leaf) {
    const int *ci = (const int *)cn;
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i nanbit = _mm256_set1_epi32((int)TE_NAN_LEFT), one = _mm256_set1_epi32(1);
    int64_t r = 0;
    for (; r + 8 <= n; r += 8) {
        const float *xb = x + r * F;
        __m256i off = _mm256_mullo_epi32(lanes, _mm256_set1_epi32((int)F));
        __m256i idx = _mm256_set1_epi32(root);
        for (int32_t d = 0; d < depth; d++) {
            __m256i i4 = _mm256_slli_epi32(idx, 2);
            __m256 thr = _mm256_i32gather_ps((const float *)ci, i4, 4);
            __m256i ft = _mm256_i32gather_epi32(ci + 1, i4, 4);
            __m256i lf = _mm256_i32gather_epi32(ci + 2, i4, 4);
            __m256 xv = _mm256_i32gather_ps(xb, _mm256_add_epi32(off, _mm256_andnot_si256(nanbit, ft)), 4);
            __m256 gt = _mm256_cmp_ps(xv, thr, _CMP_GT_OQ);
            __m256 nan = _mm256_cmp_ps(xv, xv, _CMP_UNORD_Q);
            __m256 nan_right = _mm256_andnot_ps(_mm256_castsi256_ps(_mm256_srai_epi32(ft, 31)), nan);
            __m256i right = _mm256_and_si256(_mm256_castps_si256(_mm256_or_ps(gt, nan_right)), one);
            __m256i nidx = _mm256_add_epi32(lf, right);
            int moved = _mm256_movemask_epi8(_mm256_cmpeq_epi32(nidx, idx)) != -1;
            idx = nidx;
            if (!moved) break;
        }
        _mm256_storeu_si256((__m256i *)(leaf + r), idx);
    }
    return r;
}

/* AVX-512: sixteen rows a vector, two vectors in flight (their gathers overlap); stops when
 * every row of both sits on a leaf (leaves point at themselves). */
TDM_TARGET_AVX512 static inline __m512i step512(const int *ci, const float *xb, __m512i off,
                                                __m512i idx) {
    const __m512i nanbit = _mm512_set1_epi32((int)TE_NAN_LEFT), one = _mm512_set1_epi32(1);
    __m512i i4 = _mm512_slli_epi32(idx, 2);
    __m512 thr = _mm512_i32gather_ps(i4, ci, 4);
    __m512i ft = _mm512_i32gather_epi32(i4, ci + 1, 4);
    __m512i lf = _mm512_i32gather_epi32(i4, ci + 2, 4);
    __m512 xv = _mm512_i32gather_ps(_mm512_add_epi32(off, _mm512_andnot_si512(nanbit, ft)), xb, 4);
    __mmask16 gt = _mm512_cmp_ps_mask(xv, thr, _CMP_GT_OQ);
    __mmask16 nan = _mm512_cmp_ps_mask(xv, xv, _CMP_UNORD_Q);
    __mmask16 nan_left = _mm512_test_epi32_mask(ft, nanbit);
    return _mm512_mask_add_epi32(lf, (__mmask16)(gt | (nan & ~nan_left)), lf, one);
}

TDM_TARGET_AVX512 static int64_t walk_avx512(const te_cnode *cn, int32_t root, int32_t depth,
                                             const float *x, int64_t F, int64_t n, int32_t *leaf) {
    const int *ci = (const int *)cn;
    const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i off = _mm512_mullo_epi32(lanes, _mm512_set1_epi32((int)F));
    int64_t r = 0;
    for (; r + 32 <= n; r += 32) {
        const float *xa = x + r * F, *xb = x + (r + 16) * F;
        __m512i a = _mm512_set1_epi32(root), b = a;
        for (int32_t d = 0; d < depth; d++) {
            __m512i na = step512(ci, xa, off, a), nb = step512(ci, xb, off, b);
            __mmask16 moved = _mm512_cmpneq_epi32_mask(na, a) | _mm512_cmpneq_epi32_mask(nb, b);
            a = na, b = nb;
            if (!moved) break;
        }
        _mm512_storeu_si512(leaf + r, a);
        _mm512_storeu_si512(leaf + r + 16, b);
    }
    for (; r + 16 <= n; r += 16) {
        const float *xa = x + r * F;
        __m512i a = _mm512_set1_epi32(root);
        for (int32_t d = 0; d < depth; d++) {
            __m512i na = step512(ci, xa, off, a);
            __mmask16 moved = _mm512_cmpneq_epi32_mask(na, a);
            a = na;
            if (!moved) break;
        }
        _mm512_storeu_si512(leaf + r, a);
    }
    return r < n ? r + walk_avx2(cn, root, depth, x + r * F, F, n - r, leaf + r) : r;
}
#endif

/* Scores of rows [r0, r1) (float rows, compact trees): tree by tree, so that a tree's nodes
 * stay in cache while every row of the block walks it; then each row's leaf votes. */
static void vote_block_f32(const te_model *m, const float *x, int64_t r0, int64_t r1, int64_t F,
                           double *s, uint8_t *has, int isa, int32_t *leaf) {
    const te_cnode *cn = m->cnodes;
    int64_t n = r1 - r0;
    const float *xb = x + r0 * F;
    bool one_sum = m->agg == AG_SUM || m->agg == AG_AVERAGE;
    for (int64_t t = 0; t < m->n_trees; t++) {
        int32_t root = m->croot[t], depth = m->cdepth[t];
#ifdef TDM_SIMD_X86
        int64_t done = isa >= TDM_ISA_AVX512_CORE ? walk_avx512(cn, root, depth, xb, F, n, leaf)
                       : isa >= TDM_ISA_AVX2       ? walk_avx2(cn, root, depth, xb, F, n, leaf)
                                                   : 0;
        if (done < n) walk_portable(cn, root, depth, xb + done * F, F, n - done, leaf + done);
#else
        (void)isa;
        walk_portable(cn, root, depth, xb, F, n, leaf);
#endif
        if (m->cvotes == 1) {
            for (int64_t r = 0; r < n; r++) {
                const te_vote *v = &m->votes[cn[leaf[r]].orig];
                s[r * m->n_out + v->target] += v->weight;
                has[r * m->n_out + v->target] = 1;
            }
            continue;
        }
        if (m->cvotes > 1) {
            for (int64_t r = 0; r < n; r++) {
                const te_vote *v = &m->votes[cn[leaf[r]].orig];
                double *sr = s + r * m->n_out;
                uint8_t *hr = has + r * m->n_out;
                for (int32_t q = 0; q < m->cvotes; q++) sr[v[q].target] += v[q].weight, hr[v[q].target] = 1;
            }
            continue;
        }
        for (int64_t r = 0; r < n; r++) {
            const te_node *lf = &m->nodes[cn[leaf[r]].orig];
            double *sr = s + r * m->n_out;
            if (one_sum) { /* the common case: sums, no MIN / MAX bookkeeping */
                const te_vote *v = &m->votes[lf->vote0];
                uint8_t *hr = has + r * m->n_out;
                for (int32_t q = 0; q < lf->n_votes; q++) sr[v[q].target] += v[q].weight, hr[v[q].target] = 1;
            } else {
                add_votes(m, lf, sr, has + r * m->n_out);
            }
        }
    }
}

/* One score vector for one row: the votes of every tree. */
static void vote_row(const te_model *m, const void *x, tdm_dtype dt, int64_t row, int64_t F,
                     double *s, uint8_t *has) {
    for (int64_t t = 0; t < m->n_trees; t++) {
        const te_node *nd = &m->nodes[m->roots[t]];
        while (nd->mode != M_LEAF) {
            int64_t k = row * F + nd->feature;
            double v = dt == TDM_FLOAT     ? ((const float *)x)[k]
                       : dt == TDM_DOUBLE  ? ((const double *)x)[k]
                       : dt == TDM_FLOAT16 ? tdm_f16_to_f32(((const uint16_t *)x)[k])
                       : dt == TDM_INT64   ? (double)((const int64_t *)x)[k]
                                           : (double)((const int32_t *)x)[k];
            bool go;
            switch (nd->mode) {
            case M_LEQ: go = v <= nd->value; break;
            case M_LT: go = v < nd->value; break;
            case M_GTE: go = v >= nd->value; break;
            case M_GT: go = v > nd->value; break;
            case M_EQ: go = v == nd->value; break;
            case M_MEMBER:
                go = false;
                for (int32_t q = 0; q < nd->n_votes && !go; q++) go = v == m->members[nd->vote0 + q];
                break;
            default: go = v != nd->value; break;
            }
            if (nd->miss_true && isnan(v)) go = true;
            nd = &m->nodes[go ? nd->yes : nd->no];
        }
        add_votes(m, nd, s, has);
    }
}

/* Regression: base values, averaging, transforms; the n_out results replace s. */
static void finish_regression(const te_model *m, double *s, const uint8_t *has) {
    int64_t n = m->n_out;
    double origin = m->n_base == 1 ? m->base[0] : 0;
    if (n == 1) { /* one target: only PROBIT transforms it */
        double v = m->agg == AG_AVERAGE ? s[0] / (double)m->n_trees : s[0];
        if ((m->agg == AG_MIN || m->agg == AG_MAX) && !has[0]) v = 0;
        v += origin;
        s[0] = v;
        if (m->v5) ml_post_transform(m->post, s, 1); /* the spec (ONNX Runtime 1.32 ignores all */
        else if (m->post == PT_PROBIT) s[0] = ml_probit(v); /* but PROBIT for one target) */
        return;
    }
    bool use_base = m->n_base == n;
    for (int64_t k = 0; k < n; k++) {
        double v = has[k] ? s[k] : 0;
        if (m->agg == AG_AVERAGE) v /= (double)m->n_trees;
        s[k] = v + (use_base ? m->base[k] : 0);
    }
    ml_post_transform(m->post, s, n);
}

/* The binary decision: which label wins, and how a single score becomes two. */
static int64_t binary_label(const te_model *m, double s0, bool h0, double s1, bool h1,
                            int *extra) {
    double pos = h1 ? s1 : h0 ? s0 : 0;
    if (m->binary_case) {
        if (m->all_positive) {
            *extra = pos > 0.5 ? 0 : 1;
            return pos > 0.5 ? 1 : 0;
        }
        *extra = pos > 0 ? 2 : 3;
        return pos > 0 ? 1 : 0;
    }
    return pos > 0 ? -1 : -2; /* ONNX Runtime's fixed labels 1 / 0, not class indices */
}

/* Classification: writes n_out scores and returns the label (a class index >= 0, or -1 / -2
 * for the literal labels 1 / 0). */
static int64_t finish_classes(const te_model *m, double *s, uint8_t *has, float *z) {
    int64_t n = m->n_out;
    if (n != 2) {
        for (int64_t k = 0; k < m->n_base && k < n; k++) {
            s[k] = has[k] ? s[k] + m->base[k] : m->base[k];
            has[k] = 1;
        }
        int64_t best = -1;
        for (int64_t k = 0; k < n; k++)
            if (has[k] && (best < 0 || s[k] > s[best])) best = k;
        ml_post_transform(m->post, s, n);
        for (int64_t k = 0; k < n; k++) z[k] = (float)s[k];
        return best < 0 ? 0 : best;
    }
    int extra = -1;
    int64_t size = 2;
    if (m->n_base == 2) {
        if (has[1]) {
            s[1] = m->base[1] + s[0];
            s[0] = -s[1];
        } else {
            s[1] += m->base[1];
            s[0] += m->base[0];
        }
    } else if (m->n_base == 1) {
        s[0] += m->base[0];
        if (!has[1]) size = 1;
    } else {
        extra = 3;
        if (!has[1]) size = 1;
    }
    int64_t label = size == 2 && has[1] ? binary_label(m, s[0], has[0], s[1], has[1], &extra)
                                        : binary_label(m, s[0], has[0], 0, false, &extra);
    if (size == 2) {
        ml_post_transform(m->post, s, 2);
    } else if (m->post == PT_PROBIT) {
        s[0] = ml_probit(s[0]);
        s[1] = 0;
    } else {
        double v = s[0];
        switch (extra) {
        case 0: case 1: s[0] = 1 - v, s[1] = v; break;
        case 2: case 3:
            if (m->post == PT_LOGISTIC) s[0] = ml_logistic(-v), s[1] = ml_logistic(v);
            else if (extra == 2) s[0] = -v, s[1] = v;
            else s[1] = -v;
            break;
        default: s[1] = 0; break;
        }
    }
    z[0] = (float)s[0];
    z[1] = (float)s[1];
    return label;
}

typedef struct te_job {
    const te_model *m;
    const void *x;
    tdm_dtype dt;
    int64_t F;
    void *z;          /* [N, n_out] of out_dt */
    tdm_dtype out_dt; /* float, or TreeEnsemble's double / float16 */
    int64_t *labels;  /* classifier: class index, -1 (literal 1) or -2 (literal 0) */
    double *scratch;  /* n_out doubles per thread slot: allocated per range below */
    const tdm_allocator *alloc;
    int failed;
    int isa; /* the device's level: which walk */
} te_job;

#define TE_BLOCK 64 /* rows that walk one tree before the next tree */

static void te_rows(void *arg, int64_t begin, int64_t end) {
    te_job *j = arg;
    const te_model *m = j->m;
    size_t per = (size_t)m->n_out * TE_BLOCK;
    double *s = tdm_alloc(j->alloc, per * (sizeof(double) + 1) + TE_BLOCK * sizeof(int32_t));
    if (!s) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    int32_t *leaf = (int32_t *)(s + per); /* a block's leaf slots, one tree at a time */
    uint8_t *has = (uint8_t *)(leaf + TE_BLOCK);
    for (int64_t b = begin; b < end; b += TE_BLOCK) {
        int64_t e = b + TE_BLOCK < end ? b + TE_BLOCK : end, rows = e - b;
        memset(s, 0, (size_t)(rows * m->n_out) * sizeof *s);
        memset(has, 0, (size_t)(rows * m->n_out));
        if (m->cnodes && j->dt == TDM_FLOAT) {
            vote_block_f32(m, j->x, b, e, j->F, s, has, j->isa, leaf);
        } else {
            for (int64_t r = b; r < e; r++)
                vote_row(m, j->x, j->dt, r, j->F, s + (r - b) * m->n_out, has + (r - b) * m->n_out);
        }
        for (int64_t r = b; r < e; r++) {
            double *sr = s + (r - b) * m->n_out;
            uint8_t *hr = has + (r - b) * m->n_out;
            if (m->classifier) {
                j->labels[r] = finish_classes(m, sr, hr, (float *)j->z + r * m->n_out);
                continue;
            }
            finish_regression(m, sr, hr);
            if (j->out_dt == TDM_DOUBLE)
                memcpy((double *)j->z + r * m->n_out, sr, (size_t)m->n_out * sizeof *sr);
            else if (j->out_dt == TDM_FLOAT16)
                for (int64_t k = 0; k < m->n_out; k++)
                    ((uint16_t *)j->z)[r * m->n_out + k] = tdm_f32_to_f16((float)sr[k]);
            else
                for (int64_t k = 0; k < m->n_out; k++)
                    ((float *)j->z)[r * m->n_out + k] = (float)sr[k];
        }
    }
    tdm_free(j->alloc, s);
}

static tdm_status *run_tree_ensemble(tdm_kernel_ctx *ctx) {
    const te_model *m = ctx->state;
    const tdm_tensor *x = ctx->in[0];
    if (!m) return TDM_ERR(TDM_ERR_INTERNAL, "tree ensemble: not prepared");
    int64_t N = x->rank == 2 ? x->dims[0] : 1, F = x->dims[x->rank - 1];
    if (m->max_feature >= F)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "the trees read feature %d but the input has %lld",
                              (int)m->max_feature, (long long)F);
    bool cls = m->classifier;
    tdm_tensor *zt = cls ? (ctx->n_out > 1 ? ctx->out[1] : NULL) : ctx->out[0];
    float *z = zt ? zt->data : tdm_alloc(ctx->alloc, (size_t)(N * m->n_out) * sizeof *z + 1);
    tdm_dtype out_dt = m->v5 ? x->dtype : TDM_FLOAT;
    int64_t *lab = cls ? tdm_alloc(ctx->alloc, (size_t)N * sizeof *lab + 1) : NULL;
    tdm_status *st = NULL;
    if (!z || (cls && !lab)) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
        goto done;
    }
    te_job j = {m, x->data, x->dtype, F, z, out_dt, lab, NULL, ctx->alloc, 0,
                (int)tdm_cpu_simd_of(ctx)->level};
    /* rows in chunks that cover about 64k node visits each */
    int64_t grain = TE_BLOCK * 4; /* blocks of rows; the pool balances them */
    tdm_parallel_for(ctx->pool, N, grain, te_rows, &j);
    if (j.failed) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
        goto done;
    }
    if (cls) {
        tdm_tensor *y = ctx->out[0];
        for (int64_t r = 0; r < N; r++) {
            int64_t k = lab[r];
            if (m->labels_str) {
                const char *s = m->labels_str[k >= 0 ? k : k == -1 ? 1 : 0];
                char *c = tdm_strdup(y->alloc, s);
                if (!c) {
                    st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
                    goto done;
                }
                tdm_free(y->alloc, ((char **)y->data)[r]);
                ((char **)y->data)[r] = c;
            } else {
                ((int64_t *)y->data)[r] = k >= 0 ? m->labels_int[k] : k == -1 ? 1 : 0;
            }
        }
    }
done:
    if (!zt) tdm_free(ctx->alloc, z);
    tdm_free(ctx->alloc, lab);
    return st;
}

const tdm_kernel_def tdm_cpu_kernels_ml_tree[] = {
    {"ai.onnx.ml", "TreeEnsembleClassifier", 1, 0, 0,
     TDM_T(TDM_FLOAT) | TDM_T(TDM_DOUBLE) | TDM_T(TDM_INT32) | TDM_T(TDM_INT64),
     run_tree_ensemble, te_prepare, te_release},
    {"ai.onnx.ml", "TreeEnsembleRegressor", 1, 0, 0,
     TDM_T(TDM_FLOAT) | TDM_T(TDM_DOUBLE) | TDM_T(TDM_INT32) | TDM_T(TDM_INT64),
     run_tree_ensemble, te_prepare, te_release},
    /* TreeEnsemble (opset 5): the same evaluator, output in the input's type */
    {"ai.onnx.ml", "TreeEnsemble", 5, 0, 0,
     TDM_T(TDM_FLOAT) | TDM_T(TDM_DOUBLE) | TDM_T(TDM_FLOAT16), run_tree_ensemble, te_prepare,
     te_release},
};
const int tdm_cpu_kernels_ml_tree_count =
    (int)(sizeof tdm_cpu_kernels_ml_tree / sizeof tdm_cpu_kernels_ml_tree[0]);
