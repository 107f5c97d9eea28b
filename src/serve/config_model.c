/* tandem serve: completing a model configuration from the ONNX model, and its JSON form. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/config.h"

static void shape_str(int rank, const int64_t *dims, char *buf, size_t size) {
    size_t pos = 0;
    pos += (size_t)snprintf(buf + pos, size - pos, "[");
    for (int i = 0; i < rank && pos < size; i++)
        pos += (size_t)snprintf(buf + pos, size - pos, "%s%lld", i ? "," : "", (long long)dims[i]);
    if (pos < size) snprintf(buf + pos, size - pos, "]");
}

/* Checks one config input/output against the model's description; fills unknown parts. */
static sv_error *check_io(const sv_model_config *c, sv_io_config *io, const tdm_value_desc *d,
                          const char *kind) {
    if (io->dtype == TDM_UNDEFINED) io->dtype = d->dtype;
    if (sv_dtype_wire_size(d->dtype) == 0 && d->dtype != TDM_STRING)
        return sv_err(400, "model '%s': %s '%s' has type %s, which the KServe protocol cannot carry",
                      c->name, kind, d->name, tdm_dtype_name(d->dtype));
    if (io->dtype != d->dtype)
        return sv_err(400, "model '%s': the config gives %s '%s' the type %s but the model has %s",
                      c->name, kind, d->name, sv_dtype_config_name(io->dtype),
                      sv_dtype_config_name(d->dtype));
    int b = c->max_batch_size > 0 ? 1 : 0;
    if (io->rank < 0) { /* dims not given: from the model */
        if (d->rank < 0)
            return sv_err(400, "model '%s': %s '%s' has an unknown rank; give its dims in "
                          "config.pbtxt", c->name, kind, d->name);
        if (d->rank < b)
            return sv_err(400, "model '%s': %s '%s' is a scalar but max_batch_size > 0 needs a "
                          "batch dimension", c->name, kind, d->name);
        io->rank = d->rank - b;
        for (int i = 0; i < io->rank; i++) io->dims[i] = d->dims[i + b];
    }
    if (io->rank + b > TDM_MAX_RANK)
        return sv_err(400, "model '%s': %s '%s' has more than %d dimensions with the batch "
                      "dimension", c->name, kind, d->name, TDM_MAX_RANK);
    if (d->rank < 0) return NULL;
    const int64_t *want = io->has_reshape ? io->reshape : io->dims;
    int want_rank = io->has_reshape ? io->reshape_rank : io->rank;
    char a[200], m[200];
    shape_str(want_rank, want, a, sizeof a);
    shape_str(d->rank, d->dims, m, sizeof m);
    if (want_rank + b != d->rank)
        return sv_err(400, "model '%s': %s '%s': the config's dims %s%s do not match the "
                      "model's shape %s", c->name, kind, d->name, b ? "(after the batch dimension) " : "",
                      a, m);
    if (b && d->dims[0] >= 0)
        return sv_err(400, "model '%s': %s '%s' has a fixed first dimension %lld in the model, "
                      "but max_batch_size %d needs it dynamic (shape %s)", c->name, kind, d->name,
                      (long long)d->dims[0], c->max_batch_size, m);
    for (int i = 0; i < want_rank; i++) {
        int64_t md = d->dims[i + b];
        if (md >= 0 && want[i] >= 0 && md != want[i])
            return sv_err(400, "model '%s': %s '%s': the config's dims %s do not match the "
                          "model's shape %s", c->name, kind, d->name, a, m);
    }
    return NULL;
}

static sv_error *complete_list(sv_model_config *c, const tdm_model *model, bool inputs) {
    size_t n = inputs ? tdm_model_input_count(model) : tdm_model_output_count(model);
    const char *kind = inputs ? "input" : "output";
    if (n > SV_MAX_IO) return sv_err(400, "model '%s' has %zu %ss; at most %d", c->name, n, kind, SV_MAX_IO);
    int *cnt = inputs ? &c->n_inputs : &c->n_outputs;
    sv_io_config **arr = inputs ? &c->inputs : &c->outputs;
    bool *used = calloc(*cnt + 1, 1);
    if (!used) return sv_err(500, "out of memory");
    sv_error *e = NULL;
    for (size_t i = 0; i < n && !e; i++) {
        tdm_value_desc d;
        tdm_status *st = inputs ? tdm_model_input(model, i, &d) : tdm_model_output(model, i, &d);
        if (st) {
            e = sv_err_status(500, st, c->name);
            break;
        }
        int k = 0;
        while (k < *cnt && strcmp((*arr)[k].name, d.name)) k++;
        if (k == *cnt) { /* not in the config: add it from the model */
            sv_io_config *p = realloc(*arr, (size_t)(*cnt + 1) * sizeof *p);
            bool *u = realloc(used, (size_t)*cnt + 2);
            if (u) used = u;
            if (!p || !u) {
                if (p) *arr = p;
                e = sv_err(500, "out of memory");
                break;
            }
            *arr = p;
            memset(&p[k], 0, sizeof p[k]);
            p[k].rank = -1;
            if (!(p[k].name = sv_strdup(d.name))) {
                e = sv_err(500, "out of memory");
                break;
            }
            (*cnt)++;
        }
        used[k] = true;
        e = check_io(c, &(*arr)[k], &d, kind);
    }
    for (int k = 0; !e && k < *cnt; k++)
        if (!used[k])
            e = sv_err(400, "model '%s': the config names %s '%s', which the model does not have",
                       c->name, kind, (*arr)[k].name);
    free(used);
    return e;
}

static bool first_dim_dynamic(const tdm_model *model) {
    size_t ni = tdm_model_input_count(model), no = tdm_model_output_count(model);
    if (!ni || !no) return false;
    for (size_t i = 0; i < ni + no; i++) {
        tdm_value_desc d;
        tdm_status *st = i < ni ? tdm_model_input(model, i, &d) : tdm_model_output(model, i - ni, &d);
        if (st) {
            tdm_status_free(st);
            return false;
        }
        if (d.rank < 1 || d.dims[0] >= 0) return false;
    }
    return true;
}

sv_error *sv_config_complete(sv_model_config *c, const tdm_model *model) {
    if (!c->max_batch_given && !c->inputs_given && !c->outputs_given && first_dim_dynamic(model)) {
        /* Triton's auto-complete: a model whose every input and output has a dynamic first
         * dimension batches, with the dynamic batcher on. */
        c->max_batch_size = 4;
        if (!c->dynamic_batching) {
            c->dynamic_batching = true;
            c->level_policy = calloc(1, sizeof *c->level_policy);
            if (!c->level_policy) return sv_err(500, "out of memory");
        }
    }
    for (int i = 0; i < c->n_preferred; i++)
        if (c->max_batch_size > 0 && c->preferred[i] > c->max_batch_size)
            return sv_err(400, "model '%s': preferred_batch_size %d is larger than max_batch_size %d",
                          c->name, c->preferred[i], c->max_batch_size);
    sv_error *e = complete_list(c, model, true);
    if (!e) e = complete_list(c, model, false);
    if (e) return e;
    if (!c->platform && !(c->platform = sv_strdup("onnxruntime_onnx"))) return sv_err(500, "out of memory");
    if (!c->backend && !(c->backend = sv_strdup("tandem"))) return sv_err(500, "out of memory");
    if (!c->default_model_filename && !(c->default_model_filename = sv_strdup("model.onnx")))
        return sv_err(500, "out of memory");
    return NULL;
}

/* ---- JSON ---------------------------------------------------------------------------------- */

static void json_dims(sv_buf *b, const char *key, int rank, const int64_t *dims) {
    sv_buf_printf(b, "\"%s\":[", key);
    for (int i = 0; i < rank; i++) sv_buf_printf(b, "%s%lld", i ? "," : "", (long long)dims[i]);
    sv_buf_str(b, "]");
}

static void json_io(sv_buf *b, const sv_io_config *io, bool input) {
    sv_buf_str(b, "{\"name\":");
    sv_buf_json_str(b, io->name, strlen(io->name));
    sv_buf_printf(b, ",\"data_type\":\"%s\",", sv_dtype_config_name(io->dtype));
    if (input) sv_buf_str(b, "\"format\":\"FORMAT_NONE\",");
    json_dims(b, "dims", io->rank > 0 ? io->rank : 0, io->dims);
    if (io->has_reshape) {
        sv_buf_str(b, ",\"reshape\":{");
        json_dims(b, "shape", io->reshape_rank, io->reshape);
        sv_buf_str(b, "}");
    }
    sv_buf_str(b, ",\"is_shape_tensor\":false");
    if (input) sv_buf_printf(b, ",\"allow_ragged_batch\":false,\"optional\":%s", io->optional ? "true" : "false");
    else sv_buf_str(b, ",\"label_filename\":\"\"");
    sv_buf_str(b, "}");
}

static void json_policy(sv_buf *b, const sv_queue_policy *p) {
    sv_buf_printf(b,
                  "{\"timeout_action\":\"%s\",\"default_timeout_microseconds\":%llu,"
                  "\"allow_timeout_override\":%s,\"max_queue_size\":%u}",
                  p->delay ? "DELAY" : "REJECT", (unsigned long long)p->default_timeout_us,
                  p->allow_timeout_override ? "true" : "false", p->max_queue_size);
}

void sv_config_to_json(const sv_model_config *c, sv_buf *b) {
    static const char *const kinds[] = {"KIND_AUTO", "KIND_CPU", "KIND_GPU", "KIND_MODEL"};
    sv_buf_str(b, "{\"name\":");
    sv_buf_json_str(b, c->name, strlen(c->name));
    sv_buf_str(b, ",\"platform\":");
    sv_buf_json_str(b, c->platform ? c->platform : "", c->platform ? strlen(c->platform) : 0);
    sv_buf_str(b, ",\"backend\":");
    sv_buf_json_str(b, c->backend ? c->backend : "", c->backend ? strlen(c->backend) : 0);
    sv_buf_str(b, ",\"version_policy\":");
    if (c->vp == SV_VP_ALL) {
        sv_buf_str(b, "{\"all\":{}}");
    } else if (c->vp == SV_VP_LATEST) {
        sv_buf_printf(b, "{\"latest\":{\"num_versions\":%d}}", c->vp_latest);
    } else {
        sv_buf_str(b, "{\"specific\":{");
        json_dims(b, "versions", c->n_vp_versions, c->vp_versions);
        sv_buf_str(b, "}}");
    }
    sv_buf_printf(b, ",\"max_batch_size\":%d,\"input\":[", c->max_batch_size);
    for (int i = 0; i < c->n_inputs; i++) {
        if (i) sv_buf_str(b, ",");
        json_io(b, &c->inputs[i], true);
    }
    sv_buf_str(b, "],\"output\":[");
    for (int i = 0; i < c->n_outputs; i++) {
        if (i) sv_buf_str(b, ",");
        json_io(b, &c->outputs[i], false);
    }
    sv_buf_str(b, "],\"instance_group\":[");
    for (int i = 0; i < c->n_groups; i++) {
        const sv_instance_group *g = &c->groups[i];
        if (i) sv_buf_str(b, ",");
        sv_buf_str(b, "{\"name\":");
        sv_buf_json_str(b, g->name ? g->name : "", g->name ? strlen(g->name) : 0);
        sv_buf_printf(b, ",\"kind\":\"%s\",\"count\":%d,\"gpus\":[", kinds[g->kind], g->count);
        for (int k = 0; k < g->n_gpus; k++) sv_buf_printf(b, "%s%d", k ? "," : "", g->gpus[k]);
        sv_buf_str(b, "],\"secondary_devices\":[],\"profile\":[],\"passive\":false,\"host_policy\":\"\"}");
    }
    sv_buf_str(b, "]");
    if (c->dynamic_batching) {
        sv_buf_str(b, ",\"dynamic_batching\":{\"preferred_batch_size\":[");
        for (int i = 0; i < c->n_preferred; i++) sv_buf_printf(b, "%s%d", i ? "," : "", c->preferred[i]);
        sv_buf_printf(b,
                      "],\"max_queue_delay_microseconds\":%llu,\"preserve_ordering\":%s,"
                      "\"priority_levels\":%u,\"default_priority_level\":%u,\"default_queue_policy\":",
                      (unsigned long long)c->max_queue_delay_us,
                      c->preserve_ordering ? "true" : "false", c->priority_levels,
                      c->default_priority);
        json_policy(b, &c->default_policy);
        sv_buf_str(b, ",\"priority_queue_policy\":{");
        for (uint32_t l = 1; l <= c->priority_levels; l++) {
            sv_buf_printf(b, "%s\"%u\":", l > 1 ? "," : "", l);
            json_policy(b, &c->level_policy[l]);
        }
        sv_buf_str(b, "}}");
    }
    sv_buf_str(b, ",\"default_model_filename\":");
    const char *dmf = c->default_model_filename ? c->default_model_filename : "model.onnx";
    sv_buf_json_str(b, dmf, strlen(dmf));
    sv_buf_str(b, ",\"parameters\":{");
    for (int i = 0; i < c->n_params; i++) {
        if (i) sv_buf_str(b, ",");
        sv_buf_json_str(b, c->params[i].key, strlen(c->params[i].key));
        sv_buf_str(b, ":{\"string_value\":");
        sv_buf_json_str(b, c->params[i].value, strlen(c->params[i].value));
        sv_buf_str(b, "}");
    }
    sv_buf_str(b, "}}");
}
