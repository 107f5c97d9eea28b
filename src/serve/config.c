/* tandem serve: Triton model configuration subset (see config.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/config.h"

/* ---- scalar accessors ------------------------------------------------------------------- */

typedef struct cfg_ctx {
    const char *what; /* "NAME/config.pbtxt" */
} cfg_ctx;

static sv_error *field_err(const cfg_ctx *c, const sv_pb_field *f, const char *fmt, const char *a) {
    char msg[400];
    snprintf(msg, sizeof msg, fmt, a);
    if (f && f->line) return sv_err(400, "%s:%d: '%s': %s", c->what, f->line, f->name, msg);
    return sv_err(400, "%s: '%s': %s", c->what, f ? f->name : "?", msg);
}

static sv_error *get_int(const cfg_ctx *c, const sv_pb_field *f, int64_t lo, int64_t hi,
                         int64_t *out) {
    if (f->kind != SV_PB_NUMBER && f->kind != SV_PB_STRING)
        return field_err(c, f, "expected an integer%s", "");
    char *end;
    errno = 0;
    long long v = strtoll(f->text, &end, 0);
    if (errno || end == f->text || *end) return field_err(c, f, "'%s' is not an integer", f->text);
    if (v < lo || v > hi) return field_err(c, f, "%s is out of range", f->text);
    *out = v;
    return NULL;
}

static sv_error *get_bool(const cfg_ctx *c, const sv_pb_field *f, bool *out) {
    if (f->kind == SV_PB_IDENT || f->kind == SV_PB_STRING || f->kind == SV_PB_NUMBER) {
        if (!strcmp(f->text, "true") || !strcmp(f->text, "True") || !strcmp(f->text, "1")) {
            *out = true;
            return NULL;
        }
        if (!strcmp(f->text, "false") || !strcmp(f->text, "False") || !strcmp(f->text, "0")) {
            *out = false;
            return NULL;
        }
    }
    return field_err(c, f, "expected true or false%s", "");
}

static sv_error *get_string(const cfg_ctx *c, const sv_pb_field *f, char **out) {
    if (f->kind != SV_PB_STRING) return field_err(c, f, "expected a quoted string%s", "");
    if (strlen(f->text) != f->len) return field_err(c, f, "the string contains a NUL byte%s", "");
    char *s = sv_strdup(f->text);
    if (!s) return sv_err(500, "out of memory");
    free(*out);
    *out = s;
    return NULL;
}

/* Enum value: an identifier (text format) or a string (JSON). */
static sv_error *get_enum(const cfg_ctx *c, const sv_pb_field *f, const char *const *names,
                          int n, int *out) {
    if (f->kind == SV_PB_IDENT || f->kind == SV_PB_STRING)
        for (int i = 0; i < n; i++)
            if (!strcmp(f->text, names[i])) {
                *out = i;
                return NULL;
            }
    return field_err(c, f, "unknown value '%s'", f->kind == SV_PB_MESSAGE ? "{...}" : f->text);
}

static sv_error *need_msg(const cfg_ctx *c, const sv_pb_field *f) {
    return f->kind == SV_PB_MESSAGE ? NULL : field_err(c, f, "expected a message { ... }%s", "");
}

/* Rejects a second occurrence of a singular field. */
static sv_error *once(const cfg_ctx *c, const sv_pb_msg *m, size_t i) {
    for (size_t j = 0; j < i; j++)
        if (!strcmp(m->fields[j].name, m->fields[i].name))
            return field_err(c, &m->fields[i], "given more than once%s", "");
    return NULL;
}

static sv_error *unknown(const cfg_ctx *c, const sv_pb_field *f, const char *in) {
    return field_err(c, f, "unknown field in %s", in);
}

/* ---- messages ------------------------------------------------------------------------------ */

static sv_error *read_dims(const cfg_ctx *c, const sv_pb_msg *m, const char *field, int *rank,
                           int64_t *dims) {
    *rank = 0;
    for (size_t i = 0; i < m->n; i++) {
        const sv_pb_field *f = &m->fields[i];
        if (strcmp(f->name, field)) continue;
        if (*rank == TDM_MAX_RANK) return field_err(c, f, "more than 8 dimensions%s", "");
        int64_t v = 0;
        sv_error *e = get_int(c, f, -1, INT64_MAX, &v);
        if (e) return e;
        if (v == 0) return field_err(c, f, "a dimension is 0%s", "");
        dims[(*rank)++] = v;
    }
    return NULL;
}

static sv_error *read_io(const cfg_ctx *c, const sv_pb_field *fm, sv_io_config *io) {
    sv_error *e = need_msg(c, fm);
    if (e) return e;
    const sv_pb_msg *m = fm->msg;
    bool have_dims = false;
    for (size_t i = 0; i < m->n && !e; i++) {
        const sv_pb_field *f = &m->fields[i];
        bool b;
        if (strcmp(f->name, "dims") && (e = once(c, m, i))) break;
        if (!strcmp(f->name, "name")) {
            e = get_string(c, f, &io->name);
        } else if (!strcmp(f->name, "data_type")) {
            if (f->kind != SV_PB_IDENT && f->kind != SV_PB_STRING) {
                e = field_err(c, f, "expected a TYPE_* value%s", "");
            } else {
                io->dtype = sv_dtype_from_config(f->text);
                if (io->dtype == TDM_UNDEFINED) e = field_err(c, f, "unsupported data type '%s'", f->text);
            }
        } else if (!strcmp(f->name, "dims")) {
            have_dims = true;
        } else if (!strcmp(f->name, "reshape")) {
            if (!(e = need_msg(c, f))) {
                for (size_t k = 0; k < f->msg->n && !e; k++)
                    if (strcmp(f->msg->fields[k].name, "shape"))
                        e = unknown(c, &f->msg->fields[k], "reshape");
                if (!e) e = read_dims(c, f->msg, "shape", &io->reshape_rank, io->reshape);
                io->has_reshape = true;
            }
        } else if (!strcmp(f->name, "optional")) {
            e = get_bool(c, f, &io->optional);
        } else if (!strcmp(f->name, "is_shape_tensor") || !strcmp(f->name, "allow_ragged_batch")) {
            if (!(e = get_bool(c, f, &b)) && b) e = field_err(c, f, "is not supported by tandem%s", "");
        } else if (!strcmp(f->name, "format") || !strcmp(f->name, "label_filename") ||
                   !strcmp(f->name, "is_non_linear_format_io")) {
            /* layout hints and labels: no effect here */
        } else {
            e = unknown(c, f, "an input or output");
        }
    }
    if (!e && have_dims) e = read_dims(c, m, "dims", &io->rank, io->dims);
    if (!e && !io->name) e = field_err(c, fm, "has no name%s", "");
    if (!e && !have_dims) io->rank = -1; /* completed from the model */
    return e;
}

static sv_error *read_policy(const cfg_ctx *c, const sv_pb_field *fm, sv_queue_policy *p) {
    sv_error *e = need_msg(c, fm);
    const sv_pb_msg *m = e ? NULL : fm->msg;
    static const char *const actions[] = {"REJECT", "DELAY"};
    for (size_t i = 0; m && i < m->n && !e; i++) {
        const sv_pb_field *f = &m->fields[i];
        int64_t v = 0;
        if ((e = once(c, m, i))) break;
        if (!strcmp(f->name, "timeout_action")) {
            int a = 0;
            if (!(e = get_enum(c, f, actions, 2, &a))) p->delay = a == 1;
        } else if (!strcmp(f->name, "default_timeout_microseconds")) {
            if (!(e = get_int(c, f, 0, INT64_MAX / 1000, &v))) p->default_timeout_us = (uint64_t)v;
        } else if (!strcmp(f->name, "allow_timeout_override")) {
            e = get_bool(c, f, &p->allow_timeout_override);
        } else if (!strcmp(f->name, "max_queue_size")) {
            if (!(e = get_int(c, f, 0, UINT32_MAX, &v))) p->max_queue_size = (uint32_t)v;
        } else {
            e = unknown(c, f, "a queue policy");
        }
    }
    return e;
}

static sv_error *read_batching(const cfg_ctx *c, const sv_pb_field *fm, sv_model_config *cfg) {
    sv_error *e = need_msg(c, fm);
    if (e) return e;
    const sv_pb_msg *m = fm->msg;
    cfg->dynamic_batching = true;
    /* the per-level policies need priority_levels first */
    for (size_t i = 0; i < m->n && !e; i++) {
        const sv_pb_field *f = &m->fields[i];
        int64_t v = 0;
        if (strcmp(f->name, "preferred_batch_size") && strcmp(f->name, "priority_queue_policy") &&
            (e = once(c, m, i)))
            break;
        if (!strcmp(f->name, "preferred_batch_size")) {
            if (cfg->n_preferred == 32) e = field_err(c, f, "more than 32 sizes%s", "");
            else if (!(e = get_int(c, f, 1, 1 << 24, &v))) cfg->preferred[cfg->n_preferred++] = (int)v;
        } else if (!strcmp(f->name, "max_queue_delay_microseconds")) {
            if (!(e = get_int(c, f, 0, 3600ll * 1000000, &v))) cfg->max_queue_delay_us = (uint64_t)v;
        } else if (!strcmp(f->name, "preserve_ordering")) {
            e = get_bool(c, f, &cfg->preserve_ordering);
        } else if (!strcmp(f->name, "priority_levels")) {
            if (!(e = get_int(c, f, 0, SV_MAX_PRIORITY, &v))) cfg->priority_levels = (uint32_t)v;
        } else if (!strcmp(f->name, "default_priority_level")) {
            if (!(e = get_int(c, f, 0, SV_MAX_PRIORITY, &v))) cfg->default_priority = (uint32_t)v;
        } else if (!strcmp(f->name, "default_queue_policy")) {
            e = read_policy(c, f, &cfg->default_policy);
        } else if (!strcmp(f->name, "priority_queue_policy")) {
            /* handled below */
        } else {
            e = unknown(c, f, "dynamic_batching");
        }
    }
    if (e) return e;
    if (cfg->priority_levels && (cfg->default_priority < 1 || cfg->default_priority > cfg->priority_levels))
        return sv_err(400, "%s: default_priority_level must be between 1 and priority_levels (%u)",
                      c->what, cfg->priority_levels);
    if (!cfg->priority_levels && cfg->default_priority)
        return sv_err(400, "%s: default_priority_level is set but priority_levels is 0", c->what);
    cfg->level_policy = calloc(cfg->priority_levels + 1, sizeof *cfg->level_policy);
    if (!cfg->level_policy) return sv_err(500, "out of memory");
    for (uint32_t l = 0; l <= cfg->priority_levels; l++) cfg->level_policy[l] = cfg->default_policy;
    for (size_t i = 0; i < m->n && !e; i++) {
        const sv_pb_field *f = &m->fields[i];
        if (strcmp(f->name, "priority_queue_policy")) continue;
        if ((e = need_msg(c, f))) break;
        int64_t level = -1;
        const sv_pb_field *value = NULL;
        for (size_t k = 0; k < f->msg->n && !e; k++) {
            const sv_pb_field *g = &f->msg->fields[k];
            if (!strcmp(g->name, "key")) e = get_int(c, g, 1, SV_MAX_PRIORITY, &level);
            else if (!strcmp(g->name, "value")) value = g;
            else e = unknown(c, g, "priority_queue_policy");
        }
        if (e) break;
        if (level < 1 || (uint32_t)level > cfg->priority_levels || !value)
            e = field_err(c, f, "needs a key between 1 and priority_levels and a value%s", "");
        else
            e = read_policy(c, value, &cfg->level_policy[level]);
    }
    return e;
}

static sv_error *read_group(const cfg_ctx *c, const sv_pb_field *fm, sv_instance_group *g) {
    sv_error *e = need_msg(c, fm);
    if (e) return e;
    const sv_pb_msg *m = fm->msg;
    static const char *const kinds[] = {"KIND_AUTO", "KIND_CPU", "KIND_GPU", "KIND_MODEL"};
    g->count = 1;
    g->kind = SV_KIND_AUTO;
    for (size_t i = 0; i < m->n && !e; i++) {
        const sv_pb_field *f = &m->fields[i];
        int64_t v = 0;
        bool b;
        if (strcmp(f->name, "gpus") && strcmp(f->name, "secondary_devices") && (e = once(c, m, i)))
            break;
        if (!strcmp(f->name, "name")) {
            e = get_string(c, f, &g->name);
        } else if (!strcmp(f->name, "kind")) {
            int k = 0;
            if (!(e = get_enum(c, f, kinds, 4, &k))) g->kind = (sv_kind)k;
        } else if (!strcmp(f->name, "count")) {
            if (!(e = get_int(c, f, 1, SV_MAX_INSTANCES, &v))) g->count = (int)v;
        } else if (!strcmp(f->name, "gpus")) {
            if (g->n_gpus == 16) e = field_err(c, f, "more than 16 GPUs%s", "");
            else if (!(e = get_int(c, f, 0, 255, &v))) g->gpus[g->n_gpus++] = (int)v;
        } else if (!strcmp(f->name, "passive")) {
            if (!(e = get_bool(c, f, &b)) && b) e = field_err(c, f, "passive instances are not supported%s", "");
        } else if (!strcmp(f->name, "profile") || !strcmp(f->name, "host_policy") ||
                   !strcmp(f->name, "rate_limiter") || !strcmp(f->name, "secondary_devices")) {
            /* TensorRT profiles, NUMA host policies, rate limiter: no effect here */
        } else {
            e = unknown(c, f, "instance_group");
        }
    }
    if (!e && g->kind == SV_KIND_MODEL)
        e = field_err(c, fm, "KIND_MODEL is not supported; use KIND_CPU, KIND_GPU or KIND_AUTO%s", "");
    return e;
}

static sv_error *read_version_policy(const cfg_ctx *c, const sv_pb_field *fm, sv_model_config *cfg) {
    sv_error *e = need_msg(c, fm);
    if (e) return e;
    const sv_pb_msg *m = fm->msg;
    if (m->n != 1) return field_err(c, fm, "needs exactly one of latest, all, specific%s", "");
    const sv_pb_field *f = &m->fields[0];
    if ((e = need_msg(c, f))) return e;
    if (!strcmp(f->name, "all")) {
        cfg->vp = SV_VP_ALL;
        return f->msg->n ? unknown(c, &f->msg->fields[0], "all") : NULL;
    }
    if (!strcmp(f->name, "latest")) {
        cfg->vp = SV_VP_LATEST;
        cfg->vp_latest = 1;
        for (size_t i = 0; i < f->msg->n && !e; i++) {
            int64_t v = 0;
            if (strcmp(f->msg->fields[i].name, "num_versions"))
                e = unknown(c, &f->msg->fields[i], "latest");
            else if (!(e = get_int(c, &f->msg->fields[i], 1, 64, &v)))
                cfg->vp_latest = (int)v;
        }
        return e;
    }
    if (!strcmp(f->name, "specific")) {
        cfg->vp = SV_VP_SPECIFIC;
        for (size_t i = 0; i < f->msg->n && !e; i++) {
            int64_t v = 0;
            if (strcmp(f->msg->fields[i].name, "versions")) e = unknown(c, &f->msg->fields[i], "specific");
            else if (cfg->n_vp_versions == 64) e = field_err(c, f, "more than 64 versions%s", "");
            else if (!(e = get_int(c, &f->msg->fields[i], 1, INT64_MAX, &v)))
                cfg->vp_versions[cfg->n_vp_versions++] = v;
        }
        if (!e && !cfg->n_vp_versions) e = field_err(c, f, "lists no versions%s", "");
        return e;
    }
    return unknown(c, f, "version_policy");
}

static sv_error *read_param(const cfg_ctx *c, const sv_pb_field *fm, sv_model_config *cfg) {
    sv_error *e = need_msg(c, fm);
    if (e) return e;
    char *key = NULL, *value = NULL;
    for (size_t i = 0; i < fm->msg->n && !e; i++) {
        const sv_pb_field *f = &fm->msg->fields[i];
        if (!strcmp(f->name, "key")) {
            e = get_string(c, f, &key);
        } else if (!strcmp(f->name, "value")) {
            if (!(e = need_msg(c, f))) {
                for (size_t k = 0; k < f->msg->n && !e; k++) {
                    if (strcmp(f->msg->fields[k].name, "string_value"))
                        e = unknown(c, &f->msg->fields[k], "a parameter value");
                    else
                        e = get_string(c, &f->msg->fields[k], &value);
                }
            }
        } else {
            e = unknown(c, f, "parameters");
        }
    }
    if (!e && (!key || !value)) e = field_err(c, fm, "needs a key and a value { string_value }%s", "");
    if (!e && cfg->n_params >= 256) e = field_err(c, fm, "more than 256 parameters%s", "");
    if (!e) {
        sv_param *p = realloc(cfg->params, (size_t)(cfg->n_params + 1) * sizeof *p);
        if (!p) {
            e = sv_err(500, "out of memory");
        } else {
            cfg->params = p;
            p[cfg->n_params].key = key;
            p[cfg->n_params].value = value;
            cfg->n_params++;
            return NULL;
        }
    }
    free(key);
    free(value);
    return e;
}

/* Appends one element to an array of structs (zeroed). */
static void *grow(void *arr, int *n, size_t size, int max) {
    if (*n >= max) return NULL;
    char *p = realloc(arr, (size_t)(*n + 1) * size);
    if (!p) return NULL;
    memset(p + (size_t)*n * size, 0, size);
    (*n)++;
    return p;
}

sv_error *sv_config_from_tree(const sv_pb_msg *m, const char *dir_name, sv_model_config **out) {
    char what[300];
    snprintf(what, sizeof what, "%s/config.pbtxt", dir_name);
    cfg_ctx c = {what};
    sv_model_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg) return sv_err(500, "out of memory");
    cfg->vp = SV_VP_LATEST;
    cfg->vp_latest = 1;
    sv_error *e = NULL;
    for (size_t i = 0; i < m->n && !e; i++) {
        const sv_pb_field *f = &m->fields[i];
        const char *n = f->name;
        int64_t v = 0;
        bool repeated = !strcmp(n, "input") || !strcmp(n, "output") ||
                        !strcmp(n, "instance_group") || !strcmp(n, "parameters");
        if (!repeated && (e = once(&c, m, i))) break;
        if (!strcmp(n, "name")) {
            if (!(e = get_string(&c, f, &cfg->name)) && strcmp(cfg->name, dir_name))
                e = field_err(&c, f, "must equal the model's folder name '%s'", dir_name);
        } else if (!strcmp(n, "platform")) {
            if (!(e = get_string(&c, f, &cfg->platform)) && strcmp(cfg->platform, "onnxruntime_onnx") &&
                strcmp(cfg->platform, "tandem_onnx"))
                e = field_err(&c, f, "platform '%s' is not supported (tandem serves ONNX models: "
                              "onnxruntime_onnx)", cfg->platform);
        } else if (!strcmp(n, "backend")) {
            if (!(e = get_string(&c, f, &cfg->backend)) && strcmp(cfg->backend, "onnxruntime") &&
                strcmp(cfg->backend, "tandem") && strcmp(cfg->backend, "tandem_llm"))
                e = field_err(&c, f, "backend '%s' is not supported (use onnxruntime, tandem, or "
                              "tandem_llm for a language model served with the OpenAI API)",
                              cfg->backend);
        } else if (!strcmp(n, "max_batch_size")) {
            if (!(e = get_int(&c, f, 0, 1 << 24, &v))) cfg->max_batch_size = (int)v;
            cfg->max_batch_given = true;
        } else if (!strcmp(n, "default_model_filename")) {
            if (!(e = get_string(&c, f, &cfg->default_model_filename)) &&
                (strchr(cfg->default_model_filename, '/') || !strcmp(cfg->default_model_filename, "..") ||
                 !strcmp(cfg->default_model_filename, ".") || !cfg->default_model_filename[0]))
                e = field_err(&c, f, "must be a plain file name%s", "");
        } else if (!strcmp(n, "version_policy")) {
            e = read_version_policy(&c, f, cfg);
        } else if (!strcmp(n, "input") || !strcmp(n, "output")) {
            bool in = n[0] == 'i';
            int *cnt = in ? &cfg->n_inputs : &cfg->n_outputs;
            sv_io_config *arr = grow(in ? cfg->inputs : cfg->outputs, cnt, sizeof *arr, SV_MAX_IO);
            if (!arr) {
                e = field_err(&c, f, "too many entries (or out of memory)%s", "");
                break;
            }
            if (in) cfg->inputs = arr, cfg->inputs_given = true;
            else cfg->outputs = arr, cfg->outputs_given = true;
            e = read_io(&c, f, &arr[*cnt - 1]);
        } else if (!strcmp(n, "instance_group")) {
            sv_instance_group *arr = grow(cfg->groups, &cfg->n_groups, sizeof *arr, SV_MAX_INSTANCES);
            if (!arr) {
                e = field_err(&c, f, "too many entries (or out of memory)%s", "");
                break;
            }
            cfg->groups = arr;
            e = read_group(&c, f, &arr[cfg->n_groups - 1]);
        } else if (!strcmp(n, "dynamic_batching")) {
            e = read_batching(&c, f, cfg);
        } else if (!strcmp(n, "parameters")) {
            e = read_param(&c, f, cfg);
        } else if (!strcmp(n, "sequence_batching") || !strcmp(n, "ensemble_scheduling") ||
                   !strcmp(n, "batch_input") || !strcmp(n, "batch_output")) {
            e = field_err(&c, f, "is not supported by tandem serve%s", "");
        } else if (!strcmp(n, "optimization") || !strcmp(n, "model_warmup") ||
                   !strcmp(n, "response_cache") || !strcmp(n, "model_transaction_policy") ||
                   !strcmp(n, "model_operations") || !strcmp(n, "cc_model_filenames") ||
                   !strcmp(n, "metric_tags") || !strcmp(n, "model_repository_agents") ||
                   !strcmp(n, "runtime") || !strcmp(n, "model_metrics")) {
            /* tuning for other backends: no effect here */
        } else {
            e = unknown(&c, f, "the model configuration");
        }
    }
    if (!e) {
        int total = 0;
        for (int i = 0; i < cfg->n_groups; i++) {
            const sv_instance_group *g = &cfg->groups[i];
            total += g->count * (g->n_gpus ? g->n_gpus : 1);
        }
        if (total > SV_MAX_INSTANCES)
            e = sv_err(400, "%s: %d instances in all; at most %d", what, total, SV_MAX_INSTANCES);
        for (int i = 0; !e && i < cfg->n_preferred; i++)
            if (cfg->max_batch_given && cfg->preferred[i] > cfg->max_batch_size)
                e = sv_err(400, "%s: preferred_batch_size %d is larger than max_batch_size %d", what,
                           cfg->preferred[i], cfg->max_batch_size);
        for (int i = 0; !e && i < cfg->n_inputs; i++)
            for (int j = 0; !e && j < i; j++)
                if (!strcmp(cfg->inputs[i].name, cfg->inputs[j].name))
                    e = sv_err(400, "%s: input '%s' is listed twice", what, cfg->inputs[i].name);
        for (int i = 0; !e && i < cfg->n_outputs; i++)
            for (int j = 0; !e && j < i; j++)
                if (!strcmp(cfg->outputs[i].name, cfg->outputs[j].name))
                    e = sv_err(400, "%s: output '%s' is listed twice", what, cfg->outputs[i].name);
    }
    if (!e && !cfg->name && !(cfg->name = sv_strdup(dir_name))) e = sv_err(500, "out of memory");
    if (!e && !cfg->n_groups) { /* Triton's default: one instance, on a GPU when there is one */
        if (!(cfg->groups = calloc(1, sizeof *cfg->groups))) e = sv_err(500, "out of memory");
        else cfg->n_groups = 1, cfg->groups[0].kind = SV_KIND_AUTO, cfg->groups[0].count = 1;
    }
    for (int i = 0; !e && i < cfg->n_groups; i++) {
        if (cfg->groups[i].name) continue;
        char gname[300];
        snprintf(gname, sizeof gname, "%s_%d", cfg->name, i);
        if (!(cfg->groups[i].name = sv_strdup(gname))) e = sv_err(500, "out of memory");
    }
    if (e) {
        sv_config_free(cfg);
        return e;
    }
    *out = cfg;
    return NULL;
}

sv_error *sv_config_parse(const char *text, size_t len, bool json, const char *dir_name,
                          sv_model_config **out) {
    sv_pb_msg *tree = NULL;
    char what[300];
    snprintf(what, sizeof what, "%s/config%s", dir_name, json ? " (JSON)" : ".pbtxt");
    sv_error *e = json ? sv_pb_from_json(text, len, what, &tree) : sv_pb_parse(text, len, what, &tree);
    if (!e) e = sv_config_from_tree(tree, dir_name, out);
    sv_pb_free(tree);
    return e;
}

sv_error *sv_config_default(const char *dir_name, sv_model_config **out) {
    sv_pb_msg empty = {0};
    return sv_config_from_tree(&empty, dir_name, out);
}

const char *sv_config_param(const sv_model_config *c, const char *key) {
    for (int i = 0; i < c->n_params; i++)
        if (!strcmp(c->params[i].key, key)) return c->params[i].value;
    return NULL;
}

void sv_config_free(sv_model_config *c) {
    if (!c) return;
    free(c->name);
    free(c->platform);
    free(c->backend);
    free(c->default_model_filename);
    for (int i = 0; i < c->n_inputs; i++) free(c->inputs[i].name);
    for (int i = 0; i < c->n_outputs; i++) free(c->outputs[i].name);
    free(c->inputs);
    free(c->outputs);
    for (int i = 0; i < c->n_groups; i++) free(c->groups[i].name);
    free(c->groups);
    free(c->level_policy);
    for (int i = 0; i < c->n_params; i++) {
        free(c->params[i].key);
        free(c->params[i].value);
    }
    free(c->params);
    free(c);
}
