/* tandem serve: KServe v2 inference requests (JSON and the binary tensor data extension) and
 * their answers. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "serve/request.h"

#define SV_JSON_MAX_DEPTH 64

/* ---- JSON tensor data ---------------------------------------------------------------------- */

typedef struct decoder {
    tdm_dtype dtype;
    const char *name;
    int64_t want, got;
    uint8_t *out;  /* fixed-size elements */
    size_t esz;
    sv_buf bytes;  /* BYTES elements */
} decoder;

static sv_error *bad_elem(const decoder *d, const char *what) {
    return sv_err(400, "input '%s': element %lld: %s for datatype %s", d->name, (long long)d->got,
                  what, sv_dtype_v2_name(d->dtype));
}

/* One element as read: from a jansson value, or from the text of a "data" array. */
typedef struct elem {
    enum { E_INT, E_REAL, E_BOOL, E_STRING, E_OTHER } kind;
    long long i;
    double x;
    const char *s;
    size_t len;
} elem;

static sv_error *put_value(decoder *d, const elem *v);

static sv_error *put_elem(decoder *d, json_t *j) {
    elem v = {E_OTHER, 0, 0, NULL, 0};
    if (json_is_integer(j)) v.kind = E_INT, v.i = json_integer_value(j), v.x = (double)v.i;
    else if (json_is_real(j)) v.kind = E_REAL, v.x = json_real_value(j);
    else if (json_is_boolean(j)) v.kind = E_BOOL, v.i = json_is_true(j);
    else if (json_is_string(j))
        v.kind = E_STRING, v.s = json_string_value(j), v.len = json_string_length(j);
    return put_value(d, &v);
}

static sv_error *put_value(decoder *d, const elem *v) {
    if (d->got >= d->want)
        return sv_err(400, "input '%s': the data has more elements than the shape's %lld",
                      d->name, (long long)d->want);
    uint8_t *p = d->out ? d->out + (size_t)d->got * d->esz : NULL;
    tdm_dtype t = d->dtype;
    if (t == TDM_STRING) {
        if (v->kind != E_STRING) return bad_elem(d, "expected a string");
        size_t n = v->len;
        if (n > UINT32_MAX) return bad_elem(d, "string too long");
        uint32_t len = (uint32_t)n;
        sv_buf_add(&d->bytes, &len, 4);
        sv_buf_add(&d->bytes, v->s, n);
        if (d->bytes.oom) return sv_err(500, "out of memory");
    } else if (t == TDM_BOOL) {
        if (v->kind != E_BOOL) return bad_elem(d, "expected true or false");
        *p = v->i ? 1 : 0;
    } else if (t == TDM_FLOAT || t == TDM_DOUBLE || t == TDM_FLOAT16 || t == TDM_BFLOAT16) {
        if (v->kind != E_INT && v->kind != E_REAL) return bad_elem(d, "expected a number");
        double x = v->x;
        if (t == TDM_DOUBLE) {
            memcpy(p, &x, 8);
        } else {
            float f = (float)x;
            if (t == TDM_FLOAT) {
                memcpy(p, &f, 4);
            } else {
                uint16_t h = t == TDM_FLOAT16 ? sv_float_to_half(f) : sv_float_to_bf16(f);
                memcpy(p, &h, 2);
            }
        }
    } else {
        if (v->kind != E_INT) return bad_elem(d, "expected an integer");
        long long x = v->i;
        long long lo, hi;
        switch (t) {
        case TDM_INT8: lo = INT8_MIN, hi = INT8_MAX; break;
        case TDM_INT16: lo = INT16_MIN, hi = INT16_MAX; break;
        case TDM_INT32: lo = INT32_MIN, hi = INT32_MAX; break;
        case TDM_UINT8: lo = 0, hi = UINT8_MAX; break;
        case TDM_UINT16: lo = 0, hi = UINT16_MAX; break;
        case TDM_UINT32: lo = 0, hi = UINT32_MAX; break;
        case TDM_UINT64: lo = 0, hi = INT64_MAX; break;
        default: lo = INT64_MIN, hi = INT64_MAX; break;
        }
        if (x < lo || x > hi) return bad_elem(d, "value out of range");
        switch (d->esz) {
        case 1: { int8_t y = (int8_t)x; memcpy(p, &y, 1); break; }
        case 2: { int16_t y = (int16_t)x; memcpy(p, &y, 2); break; }
        case 4: { int32_t y = (int32_t)x; memcpy(p, &y, 4); break; }
        default: { int64_t y = x; memcpy(p, &y, 8); break; }
        }
    }
    d->got++;
    return NULL;
}

/* Nested or flat arrays; depth is bounded by the pre-scan. */
static sv_error *flatten(decoder *d, json_t *v) {
    if (!json_is_array(v)) return put_elem(d, v);
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) {
        sv_error *e = flatten(d, x);
        if (e) return e;
    }
    return NULL;
}

/* ---- "data" arrays read straight from the body ------------------------------------------------
 * A JSON tensor's "data" array would take about 15 times its text as a jansson tree. The body is
 * scanned first for the "data" arrays of root.inputs[i] (numbers and true/false only); jansson
 * reads the body with each such array replaced by [], and parse_input() decodes the array's text
 * element by element into the tensor buffer. The intermediate memory is the tensor itself. */

typedef struct data_span {
    const char *p; /* the array's text, from '[' to its ']'; NULL: left to jansson */
    size_t len;
} data_span;

#define SV_SPANS_MAX 64

typedef struct span_scan {
    data_span span[SV_SPANS_MAX]; /* by index in 'inputs' */
    size_t at[SV_SPANS_MAX];      /* the offset of each span, in body order for the filter */
    int n;                        /* spans recorded (in body order) */
    int order[SV_SPANS_MAX];      /* span index of the n-th recorded span */
} span_scan;

/* Skips a JSON string starting at b[i] == '"'; returns the index after it (n when unterminated). */
static size_t skip_string(const char *b, size_t n, size_t i) {
    for (i++; i < n; i++) {
        if (b[i] == '\\') i++;
        else if (b[i] == '"') return i + 1;
    }
    return n;
}

/* Finds root.inputs[i].data arrays of numbers and booleans. The body's nesting is at most
 * SV_JSON_MAX_DEPTH (checked before). Anything unusual (escaped keys, strings in the array)
 * leaves the array to jansson. */
static void scan_data_spans(const char *b, size_t n, span_scan *sc) {
    char stack[SV_JSON_MAX_DEPTH + 2];
    int depth = 0;
    bool expect_key = false, inputs_next = false, in_inputs = false, data_next = false;
    int input = -1;
    memset(sc, 0, sizeof *sc);
    for (size_t i = 0; i < n;) {
        char c = b[i];
        if (c == '"') {
            size_t e = skip_string(b, n, i);
            if (expect_key && depth == 1)
                inputs_next = e - i == 8 && !memcmp(b + i, "\"inputs\"", 8);
            if (expect_key && depth == 3 && in_inputs)
                data_next = e - i == 6 && !memcmp(b + i, "\"data\"", 6);
            expect_key = false;
            i = e;
            continue;
        }
        if (c == ':') {
            i++;
            while (i < n && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r')) i++;
            if (i >= n) return;
            if (data_next && b[i] == '[' && input >= 0 && input < SV_SPANS_MAX &&
                sc->n < SV_SPANS_MAX) {
                /* the data array: to its matching bracket; not taken when it holds a string */
                int d = 0;
                bool plain = true;
                size_t j = i;
                for (; j < n; j++) {
                    if (b[j] == '[') d++;
                    else if (b[j] == ']' && --d == 0) break;
                    else if (b[j] == '"' || b[j] == '{') plain = false;
                    if (d > SV_JSON_MAX_DEPTH) plain = false;
                }
                if (j >= n) return; /* unterminated: jansson says where */
                if (plain && !sc->span[input].p) {
                    sc->span[input].p = b + i;
                    sc->span[input].len = j + 1 - i;
                    sc->at[sc->n] = i;
                    sc->order[sc->n++] = input;
                }
                data_next = false;
                i = j + 1;
                continue;
            }
            if (depth == 1 && inputs_next && b[i] == '[') {
                in_inputs = true;
                input = -1;
            }
            inputs_next = data_next = false;
            continue;
        }
        if (c == '{' || c == '[') {
            if (depth > SV_JSON_MAX_DEPTH) return;
            if (depth == 2 && in_inputs && c == '{') input++;
            stack[depth++] = c;
            expect_key = c == '{';
        } else if (c == '}' || c == ']') {
            if (depth == 0) return;
            depth--;
            if (depth == 1 && c == ']') in_inputs = false;
            expect_key = false;
        } else if (c == ',') {
            expect_key = depth > 0 && stack[depth - 1] == '{';
        }
        i++;
    }
}

typedef struct span_feed {
    const char *b;
    size_t n, pos;
    const span_scan *sc;
    int next; /* the next span (in body order) */
} span_feed;

/* json_load_callback's source: the body with each span replaced by "[]". */
static size_t feed_without_spans(void *buffer, size_t buflen, void *data) {
    span_feed *f = data;
    char *out = buffer;
    size_t w = 0;
    while (w < buflen && f->pos < f->n) {
        if (f->next < f->sc->n && f->pos == f->sc->at[f->next]) {
            if (buflen - w < 2) break;
            out[w++] = '[';
            out[w++] = ']';
            f->pos += f->sc->span[f->sc->order[f->next]].len;
            f->next++;
            continue;
        }
        size_t end = f->next < f->sc->n ? f->sc->at[f->next] : f->n;
        size_t k = end - f->pos < buflen - w ? end - f->pos : buflen - w;
        memcpy(out + w, f->b + f->pos, k);
        w += k;
        f->pos += k;
    }
    return w;
}

/* The length of a JSON number at p (RFC 8259 grammar), 0 when there is none; *is_int when it
 * has no fraction and no exponent. */
static size_t number_len(const char *p, const char *e, bool *is_int) {
    const char *q = p;
    if (q < e && *q == '-') q++;
    if (q >= e || *q < '0' || *q > '9') return 0;
    if (*q == '0') q++;
    else while (q < e && *q >= '0' && *q <= '9') q++;
    *is_int = true;
    if (q < e && *q == '.') {
        q++;
        if (q >= e || *q < '0' || *q > '9') return 0;
        while (q < e && *q >= '0' && *q <= '9') q++;
        *is_int = false;
    }
    if (q < e && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < e && (*q == '+' || *q == '-')) q++;
        if (q >= e || *q < '0' || *q > '9') return 0;
        while (q < e && *q >= '0' && *q <= '9') q++;
        *is_int = false;
    }
    return (size_t)(q - p);
}

/* Decodes a data array's text [p, p + len) into d, element by element: the same checks as
 * the jansson path (put_value), nothing allocated per element. */
static sv_error *decode_span(decoder *d, const char *p, size_t len) {
    const char *e = p + len;
    bool want_value = true, after_open = false;
    int depth = 0;
    char num[400];
    while (p < e) {
        char c = *p;
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            p++;
            continue;
        }
        if (c == '[') {
            if (!want_value) break;
            depth++;
            after_open = true;
            p++;
            continue;
        }
        if (c == ']') {
            if (want_value && !after_open) break; /* "[1,]" */
            depth--;
            want_value = after_open = false;
            p++;
            continue;
        }
        if (c == ',') {
            if (want_value || depth == 0) break;
            want_value = true;
            after_open = false;
            p++;
            continue;
        }
        if (!want_value) break;
        elem v = {E_OTHER, 0, 0, NULL, 0};
        bool is_int = false;
        size_t k;
        if ((k = number_len(p, e, &is_int))) {
            if (k >= sizeof num)
                return sv_err(400, "malformed JSON: a number of %zu characters", k);
            memcpy(num, p, k);
            num[k] = 0;
            errno = 0;
            if (is_int) {
                v.kind = E_INT;
                v.i = strtoll(num, NULL, 10);
                v.x = (double)v.i;
                if (errno == ERANGE)
                    return sv_err(400, "malformed JSON: too big integer near '%s'", num);
            } else {
                v.kind = E_REAL;
                v.x = strtod(num, NULL);
                if (errno == ERANGE && fabs(v.x) > 1.0)
                    return sv_err(400, "malformed JSON: real number overflow near '%s'", num);
            }
        } else if (e - p >= 4 && !memcmp(p, "true", 4)) {
            v.kind = E_BOOL, v.i = 1, k = 4;
        } else if (e - p >= 5 && !memcmp(p, "false", 5)) {
            v.kind = E_BOOL, v.i = 0, k = 5;
        } else if (e - p >= 4 && !memcmp(p, "null", 4)) {
            k = 4;
        } else {
            break;
        }
        sv_error *err = put_value(d, &v);
        if (err) return err;
        p += k;
        want_value = after_open = false;
    }
    if (p < e || depth != 0)
        return sv_err(400, "malformed JSON in the 'data' array of input '%s'", d->name);
    return NULL;
}

/* Checks BYTES elements in wire form and counts them. */
static sv_error *check_bytes(const char *name, const uint8_t *p, size_t n, int64_t want) {
    size_t pos = 0;
    int64_t count = 0;
    while (pos < n) {
        if (n - pos < 4)
            return sv_err(400, "input '%s': BYTES element %lld: a 4-byte length prefix is cut "
                          "off", name, (long long)count);
        uint32_t len;
        memcpy(&len, p + pos, 4);
        pos += 4;
        if (len > n - pos)
            return sv_err(400, "input '%s': BYTES element %lld has length %u but only %zu bytes "
                          "are left", name, (long long)count, len, n - pos);
        if (memchr(p + pos, 0, len))
            return sv_err(400, "input '%s': BYTES element %lld contains a NUL byte, which "
                          "tandem's string tensors cannot hold", name, (long long)count);
        pos += len;
        count++;
    }
    if (count != want)
        return sv_err(400, "input '%s': %lld BYTES elements given, the shape needs %lld", name,
                      (long long)count, (long long)want);
    return NULL;
}

/* ---- request ---------------------------------------------------------------------------------- */

static sv_error *shape_matches(const sv_model_config *cfg, const sv_io_config *io, sv_in *x) {
    int b = cfg->max_batch_size > 0 ? 1 : 0;
    char got[200], want[200];
    size_t pos = 0;
    pos += (size_t)snprintf(got, sizeof got, "[");
    for (int i = 0; i < x->rank && pos < sizeof got; i++)
        pos += (size_t)snprintf(got + pos, sizeof got - pos, "%s%lld", i ? "," : "", (long long)x->dims[i]);
    if (pos < sizeof got) snprintf(got + pos, sizeof got - pos, "]");
    pos = (size_t)snprintf(want, sizeof want, "[%s", b ? "-1" : "");
    for (int i = 0; i < io->rank && pos < sizeof want; i++)
        pos += (size_t)snprintf(want + pos, sizeof want - pos, "%s%lld", i || b ? "," : "", (long long)io->dims[i]);
    if (pos < sizeof want) snprintf(want + pos, sizeof want - pos, "]");
    bool ok = x->rank == io->rank + b;
    for (int i = 0; ok && i < io->rank; i++)
        if (io->dims[i] >= 0 && x->dims[i + b] != io->dims[i]) ok = false;
    if (!ok)
        return sv_err(400, "unexpected shape for input '%s' for model '%s': got %s, the model "
                      "expects %s", io->name, cfg->name, got, want);
    if (b && (x->dims[0] < 1 || x->dims[0] > cfg->max_batch_size))
        return sv_err(400, "input '%s': batch size %lld is outside 1..%d (max_batch_size of "
                      "model '%s')", io->name, (long long)x->dims[0], cfg->max_batch_size, cfg->name);
    return NULL;
}

static sv_error *parse_input(const sv_model_config *cfg, json_t *j, sv_request *r, sv_in *x,
                             int64_t *binary_size, const data_span *span) {
    if (!json_is_object(j)) return sv_err(400, "each entry of 'inputs' must be an object");
    const char *name = json_string_value(json_object_get(j, "name"));
    if (!name) return sv_err(400, "an input has no 'name' string");
    int k = 0;
    while (k < cfg->n_inputs && strcmp(cfg->inputs[k].name, name)) k++;
    if (k == cfg->n_inputs)
        return sv_err(400, "unexpected inference input '%s' for model '%s'", name, cfg->name);
    for (int i = 0; i < r->n_in; i++)
        if (r->in[i].cfg == k) return sv_err(400, "input '%s' is given twice", name);
    const sv_io_config *io = &cfg->inputs[k];
    x->cfg = k;
    const char *dt = json_string_value(json_object_get(j, "datatype"));
    if (!dt) return sv_err(400, "input '%s' has no 'datatype' string", name);
    x->dtype = sv_dtype_from_v2(dt);
    if (x->dtype == TDM_UNDEFINED) return sv_err(400, "input '%s': invalid datatype '%s'", name, dt);
    if (x->dtype != io->dtype)
        return sv_err(400, "inference input '%s' data-type is '%s', but model '%s' expects '%s'",
                      name, dt, cfg->name, sv_dtype_v2_name(io->dtype));
    json_t *shape = json_object_get(j, "shape");
    if (!json_is_array(shape)) return sv_err(400, "input '%s' has no 'shape' array", name);
    if (json_array_size(shape) > TDM_MAX_RANK)
        return sv_err(400, "input '%s': shape has %zu dimensions; at most %d", name,
                      json_array_size(shape), TDM_MAX_RANK);
    x->rank = (int)json_array_size(shape);
    for (int i = 0; i < x->rank; i++) {
        json_t *d = json_array_get(shape, (size_t)i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return sv_err(400, "input '%s': shape entries must be non-negative integers", name);
        x->dims[i] = json_integer_value(d);
    }
    if (!sv_shape_count(x->rank, x->dims, &x->count))
        return sv_err(400, "input '%s': the element count of the shape overflows", name);
    sv_error *e = shape_matches(cfg, io, x);
    if (e) return e;
    size_t esz = sv_dtype_wire_size(x->dtype);
    json_t *params = json_object_get(j, "parameters");
    json_t *bds = params ? json_object_get(params, "binary_data_size") : NULL;
    json_t *data = json_object_get(j, "data");
    if (params && !json_is_object(params)) return sv_err(400, "input '%s': 'parameters' must be an object", name);
    if (bds) {
        if (data) return sv_err(400, "input '%s' has both 'data' and binary_data_size", name);
        if (!json_is_integer(bds) || json_integer_value(bds) < 0)
            return sv_err(400, "input '%s': binary_data_size must be a non-negative integer", name);
        *binary_size = json_integer_value(bds);
        if (esz) {
            int64_t want;
            if (__builtin_mul_overflow(x->count, (int64_t)esz, &want))
                return sv_err(400, "input '%s': binary_data_size is %lld bytes, but shape and "
                              "datatype need more than %lld", name, (long long)*binary_size,
                              (long long)INT64_MAX);
            if (want != *binary_size)
                return sv_err(400, "input '%s': binary_data_size is %lld bytes, but shape and "
                              "datatype need %lld", name, (long long)*binary_size, (long long)want);
        }
        return NULL;
    }
    *binary_size = -1;
    if (!data) return sv_err(400, "input '%s' has neither 'data' nor binary_data_size", name);
    decoder d = {x->dtype, name, x->count, 0, NULL, esz, {0}};
    if (esz) {
        /* each JSON element takes at least one byte of the body: the count is bounded */
        if ((uint64_t)x->count > r->body_len)
            return sv_err(400, "input '%s': the shape has %lld elements, more than the body could "
                          "hold", name, (long long)x->count);
        d.out = malloc((size_t)x->count * esz + 1);
        if (!d.out) return sv_err(500, "out of memory");
    }
    e = span && span->p ? decode_span(&d, span->p, span->len) : flatten(&d, data);
    if (!e && d.got != d.want)
        e = sv_err(400, "input '%s': the data has %lld elements but the shape needs %lld", name,
                   (long long)d.got, (long long)d.want);
    if (e) {
        free(d.out);
        sv_buf_free(&d.bytes);
        return e;
    }
    if (esz) {
        x->owned = d.out;
        x->nbytes = (size_t)x->count * esz;
    } else {
        x->owned = (uint8_t *)sv_buf_take(&d.bytes, &x->nbytes);
        if (!x->owned) return sv_err(500, "out of memory");
    }
    x->data = x->owned;
    return NULL;
}

static sv_error *parse_params(json_t *root, sv_request *r) {
    json_t *p = json_object_get(root, "parameters");
    if (!p) return NULL;
    if (!json_is_object(p)) return sv_err(400, "'parameters' must be an object");
    json_t *v;
    if ((v = json_object_get(p, "binary_data_output"))) {
        if (!json_is_boolean(v)) return sv_err(400, "binary_data_output must be true or false");
        r->binary_default = json_is_true(v);
    }
    if ((v = json_object_get(p, "priority"))) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > UINT32_MAX)
            return sv_err(400, "priority must be a non-negative integer");
        r->priority = (uint32_t)json_integer_value(v);
    }
    if ((v = json_object_get(p, "timeout"))) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT64_MAX / 1000)
            return sv_err(400, "timeout must be a non-negative integer (microseconds)");
        r->timeout_us = (uint64_t)json_integer_value(v);
    }
    if ((v = json_object_get(p, "sequence_id")) && !(json_is_integer(v) && json_integer_value(v) == 0) &&
        !(json_is_string(v) && !json_string_length(v)))
        return sv_err(400, "sequence_id: sequence batching is not supported by tandem serve");
    return NULL;
}

static sv_error *parse_outputs(const sv_model_config *cfg, json_t *root, sv_request *r) {
    json_t *outs = json_object_get(root, "outputs");
    if (!outs) return NULL;
    if (!json_is_array(outs)) return sv_err(400, "'outputs' must be an array");
    if (json_array_size(outs) > (size_t)cfg->n_outputs)
        return sv_err(400, "%zu outputs requested; model '%s' has %d", json_array_size(outs),
                      cfg->name, cfg->n_outputs);
    r->out = calloc(json_array_size(outs) + 1, sizeof *r->out);
    if (!r->out) return sv_err(500, "out of memory");
    size_t i;
    json_t *o;
    json_array_foreach(outs, i, o) {
        const char *name = json_is_object(o) ? json_string_value(json_object_get(o, "name")) : NULL;
        if (!name) return sv_err(400, "each requested output needs a 'name' string");
        int k = 0;
        while (k < cfg->n_outputs && strcmp(cfg->outputs[k].name, name)) k++;
        if (k == cfg->n_outputs)
            return sv_err(400, "unexpected inference output '%s' for model '%s'", name, cfg->name);
        for (int q = 0; q < r->n_out; q++)
            if (r->out[q].cfg == k) return sv_err(400, "output '%s' is requested twice", name);
        sv_out *x = &r->out[r->n_out++];
        x->cfg = k;
        x->binary = r->binary_default;
        json_t *p = json_object_get(o, "parameters");
        if (p && !json_is_object(p)) return sv_err(400, "output '%s': 'parameters' must be an object", name);
        json_t *bd = p ? json_object_get(p, "binary_data") : NULL;
        if (bd) {
            if (!json_is_boolean(bd)) return sv_err(400, "output '%s': binary_data must be true or false", name);
            x->binary = json_is_true(bd);
        }
        json_t *cls = p ? json_object_get(p, "classification") : NULL;
        if (cls && !(json_is_integer(cls) && json_integer_value(cls) == 0))
            return sv_err(501, "output '%s': the classification extension is not supported", name);
    }
    return NULL;
}

static int cmp_in(const void *a, const void *b) {
    return ((const sv_in *)a)->cfg - ((const sv_in *)b)->cfg;
}

static sv_error *parse(sv_request *r, const sv_model_config *cfg, int64_t header_len) {
    size_t len = r->body_len;
    if (header_len >= 0 && (uint64_t)header_len > len)
        return sv_err(400, "Inference-Header-Content-Length is %lld but the body has %zu bytes",
                      (long long)header_len, len);
    size_t jlen = header_len >= 0 ? (size_t)header_len : len;
    if (sv_json_depth(r->body, jlen, SV_JSON_MAX_DEPTH) > SV_JSON_MAX_DEPTH)
        return sv_err(400, "the JSON nests deeper than %d levels", SV_JSON_MAX_DEPTH);
    span_scan *sc = malloc(sizeof *sc);
    if (!sc) return sv_err(500, "out of memory");
    scan_data_spans(r->body, jlen, sc);
    json_error_t jerr;
    span_feed feed = {r->body, jlen, 0, sc, 0};
    json_t *root = json_load_callback(feed_without_spans, &feed, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        free(sc);
        return sv_err(400, "malformed JSON at line %d, column %d: %s", jerr.line, jerr.column,
                      jerr.text);
    }
    sv_error *e = NULL;
    json_t *inputs = json_object_get(root, "inputs");
    json_t *id = json_object_get(root, "id");
    if (!json_is_object(root)) e = sv_err(400, "the request must be a JSON object");
    else if (id && !json_is_string(id)) e = sv_err(400, "'id' must be a string");
    else if (id && !(r->id = sv_strndup(json_string_value(id), json_string_length(id))))
        e = sv_err(500, "out of memory");
    if (!e) e = parse_params(root, r);
    if (!e && !json_is_array(inputs)) e = sv_err(400, "the request has no 'inputs' array");
    if (!e && json_array_size(inputs) > (size_t)cfg->n_inputs)
        e = sv_err(400, "%zu inputs given; model '%s' has %d", json_array_size(inputs), cfg->name,
                   cfg->n_inputs);
    int64_t *bsize = NULL;
    if (!e) {
        r->in = calloc(json_array_size(inputs) + 1, sizeof *r->in);
        bsize = calloc(json_array_size(inputs) + 1, sizeof *bsize);
        if (!r->in || !bsize) e = sv_err(500, "out of memory");
    }
    for (size_t i = 0; !e && i < json_array_size(inputs); i++) {
        e = parse_input(cfg, json_array_get(inputs, i), r, &r->in[r->n_in], &bsize[i],
                        i < SV_SPANS_MAX ? &sc->span[i] : NULL);
        if (!e) r->n_in++;
    }
    if (!e) e = parse_outputs(cfg, root, r);
    json_decref(root);
    free(sc);
    /* binary data: sections follow the JSON in input order */
    size_t pos = jlen;
    for (int i = 0; !e && i < r->n_in; i++) {
        if (bsize[i] < 0) continue;
        if (header_len < 0) {
            e = sv_err(400, "input '%s' has binary_data_size but the request has no "
                       "Inference-Header-Content-Length header", cfg->inputs[r->in[i].cfg].name);
            break;
        }
        if ((uint64_t)bsize[i] > len - pos) {
            e = sv_err(400, "input '%s': binary_data_size %lld is more than the %zu bytes left "
                       "after the JSON header (binary sizes do not add up)",
                       cfg->inputs[r->in[i].cfg].name, (long long)bsize[i], len - pos);
            break;
        }
        sv_in *x = &r->in[i];
        x->data = (const uint8_t *)r->body + pos;
        x->nbytes = (size_t)bsize[i];
        pos += x->nbytes;
        if (x->dtype == TDM_STRING) e = check_bytes(cfg->inputs[x->cfg].name, x->data, x->nbytes, x->count);
    }
    if (!e && pos != len)
        e = sv_err(400, "%zu bytes after the JSON header are not claimed by any input's "
                   "binary_data_size (binary sizes do not add up)", len - pos);
    free(bsize);
    if (e) return e;
    /* every non-optional input must be there, and agree on the batch size */
    for (int k = 0; k < cfg->n_inputs; k++) {
        bool have = false;
        for (int i = 0; i < r->n_in; i++) have |= r->in[i].cfg == k;
        if (!have && !cfg->inputs[k].optional)
            return sv_err(400, "expected %d inputs but got %d inputs for model '%s': input '%s' "
                          "is missing", cfg->n_inputs, r->n_in, cfg->name, cfg->inputs[k].name);
    }
    r->batch = 1;
    if (cfg->max_batch_size > 0 && r->n_in) {
        r->batch = r->in[0].dims[0];
        for (int i = 1; i < r->n_in; i++)
            if (r->in[i].dims[0] != r->batch)
                return sv_err(400, "inputs disagree on the batch size: %lld and %lld",
                              (long long)r->batch, (long long)r->in[i].dims[0]);
    }
    qsort(r->in, (size_t)r->n_in, sizeof *r->in, cmp_in);
    return NULL;
}

size_t sv_infer_tree_len(const char *body, size_t jlen) {
    span_scan *sc = malloc(sizeof *sc);
    if (!sc) return jlen;
    scan_data_spans(body, jlen, sc);
    size_t n = jlen;
    for (int i = 0; i < sc->n; i++) n -= sc->span[sc->order[i]].len - 2;
    free(sc);
    return n;
}

sv_error *sv_infer_header_len(const char *value, int64_t *header_len) {
    *header_len = -1;
    if (!value) return NULL;
    int64_t n;
    if (!sv_parse_i64(value, &n) || n < 0)
        return sv_err(400, "Inference-Header-Content-Length '%.64s' is not a non-negative integer",
                      value);
    *header_len = n;
    return NULL;
}

sv_error *sv_infer_parse(sv_version *ver, const sv_model_config *cfg, char *body, size_t len,
                         int64_t header_len, sv_request **out) {
    sv_request *r = calloc(1, sizeof *r);
    if (!r) {
        free(body);
        return sv_err(500, "out of memory");
    }
    r->ver = ver;
    r->cfg = cfg;
    r->body = body;
    r->body_len = len;
    sv_error *e = parse(r, cfg, header_len);
    if (e) {
        r->ver = NULL;
        sv_request_free(r);
        return e;
    }
    *out = r;
    return NULL;
}

void sv_request_free(sv_request *r) {
    if (!r) return;
    for (int i = 0; r->in && i < r->n_in; i++) free(r->in[i].owned);
    free(r->in);
    free(r->out);
    free(r->id);
    free(r->body);
    free(r->resp);
    free(r);
}

/* ---- answers ---------------------------------------------------------------------------------- */

static void put_float(sv_buf *b, double v, bool single) {
    if (isnan(v)) {
        sv_buf_str(b, "NaN");
        return;
    }
    if (isinf(v)) {
        sv_buf_str(b, v > 0 ? "Infinity" : "-Infinity");
        return;
    }
    char tmp[40];
    if (single) { /* shortest text that reads back as the same float */
        float f = (float)v;
        for (int p = 6; p <= 9; p++) {
            snprintf(tmp, sizeof tmp, "%.*g", p, (double)f);
            if (strtof(tmp, NULL) == f) break;
        }
    } else {
        for (int p = 15; p <= 17; p++) {
            snprintf(tmp, sizeof tmp, "%.*g", p, v);
            if (strtod(tmp, NULL) == v) break;
        }
    }
    sv_buf_str(b, tmp);
}

static sv_error *put_json_data(sv_buf *b, const char *name, const sv_slice *s) {
    const uint8_t *p = s->data;
    sv_buf_str(b, "[");
    for (int64_t i = 0; i < s->count; i++) {
        if (i) sv_buf_add(b, ",", 1);
        switch (s->dtype) {
        case TDM_BOOL: sv_buf_str(b, p[i] ? "true" : "false"); break;
        case TDM_UINT8: sv_buf_printf(b, "%u", p[i]); break;
        case TDM_INT8: sv_buf_printf(b, "%d", ((const int8_t *)p)[i]); break;
        case TDM_UINT16: sv_buf_printf(b, "%u", ((const uint16_t *)p)[i]); break;
        case TDM_INT16: sv_buf_printf(b, "%d", ((const int16_t *)p)[i]); break;
        case TDM_UINT32: sv_buf_printf(b, "%u", ((const uint32_t *)p)[i]); break;
        case TDM_INT32: sv_buf_printf(b, "%d", ((const int32_t *)p)[i]); break;
        case TDM_UINT64: sv_buf_printf(b, "%llu", (unsigned long long)((const uint64_t *)p)[i]); break;
        case TDM_INT64: sv_buf_printf(b, "%lld", (long long)((const int64_t *)p)[i]); break;
        case TDM_FLOAT: put_float(b, ((const float *)p)[i], true); break;
        case TDM_DOUBLE: put_float(b, ((const double *)p)[i], false); break;
        case TDM_FLOAT16: put_float(b, sv_half_to_float(((const uint16_t *)p)[i]), true); break;
        case TDM_BFLOAT16: put_float(b, sv_bf16_to_float(((const uint16_t *)p)[i]), true); break;
        case TDM_STRING: {
            const char *str = ((const char *const *)s->data)[i];
            size_t n = str ? strlen(str) : 0;
            if (!sv_utf8_valid(str ? str : "", n))
                return sv_err(400, "output '%s': element %lld is not UTF-8; ask for it with "
                              "binary_data", name, (long long)i);
            sv_buf_json_str(b, str ? str : "", n);
            break;
        }
        default: return sv_err(500, "output '%s': type %s cannot be sent", name, tdm_dtype_name(s->dtype));
        }
    }
    sv_buf_str(b, "]");
    return NULL;
}

static void put_binary(sv_buf *b, const sv_slice *s) {
    if (s->dtype != TDM_STRING) {
        sv_buf_add(b, s->data, (size_t)s->count * sv_dtype_wire_size(s->dtype));
        return;
    }
    for (int64_t i = 0; i < s->count; i++) {
        const char *str = ((const char *const *)s->data)[i];
        uint32_t n = str ? (uint32_t)strlen(str) : 0;
        sv_buf_add(b, &n, 4);
        sv_buf_add(b, str, n);
    }
}

static size_t binary_size(const sv_slice *s) {
    if (s->dtype != TDM_STRING) return (size_t)s->count * sv_dtype_wire_size(s->dtype);
    size_t n = 0;
    for (int64_t i = 0; i < s->count; i++) {
        const char *str = ((const char *const *)s->data)[i];
        n += 4 + (str ? strlen(str) : 0);
    }
    return n;
}

void sv_infer_respond(sv_request *r, const char *model_name, const char *version,
                      const sv_slice *slices) {
    const sv_model_config *cfg = r->cfg;
    sv_buf j = {0}, bin = {0};
    sv_error *e = NULL;
    sv_buf_str(&j, "{\"model_name\":");
    sv_buf_json_str(&j, model_name, strlen(model_name));
    sv_buf_str(&j, ",\"model_version\":");
    sv_buf_json_str(&j, version, strlen(version));
    if (r->id) {
        sv_buf_str(&j, ",\"id\":");
        sv_buf_json_str(&j, r->id, strlen(r->id));
    }
    sv_buf_str(&j, ",\"outputs\":[");
    int n = r->n_out ? r->n_out : cfg->n_outputs;
    bool any_binary = false;
    for (int i = 0; i < n && !e; i++) {
        int k = r->n_out ? r->out[i].cfg : i;
        bool binary = r->n_out ? r->out[i].binary : r->binary_default;
        const sv_slice *s = &slices[k];
        const char *name = cfg->outputs[k].name;
        const char *dt = sv_dtype_v2_name(s->dtype);
        if (!dt[0]) {
            e = sv_err(500, "output '%s' has type %s, which the protocol cannot carry", name,
                       tdm_dtype_name(s->dtype));
            break;
        }
        if (i) sv_buf_str(&j, ",");
        sv_buf_str(&j, "{\"name\":");
        sv_buf_json_str(&j, name, strlen(name));
        sv_buf_printf(&j, ",\"datatype\":\"%s\",\"shape\":[", dt);
        for (int q = 0; q < s->rank; q++) sv_buf_printf(&j, "%s%lld", q ? "," : "", (long long)s->dims[q]);
        sv_buf_str(&j, "]");
        if (binary) {
            any_binary = true;
            sv_buf_printf(&j, ",\"parameters\":{\"binary_data_size\":%zu}}", binary_size(s));
            put_binary(&bin, s);
        } else {
            sv_buf_str(&j, ",\"data\":");
            e = put_json_data(&j, name, s);
            sv_buf_str(&j, "}");
        }
    }
    sv_buf_str(&j, "]}");
    if (!e && (j.oom || bin.oom)) e = sv_err(500, "out of memory building the answer");
    if (e) {
        sv_buf_free(&j);
        sv_buf_free(&bin);
        sv_infer_fail(r, e);
        return;
    }
    r->json_len = any_binary ? j.len : 0;
    sv_buf_add(&j, bin.p, bin.len);
    sv_buf_free(&bin);
    free(r->resp);
    r->resp = sv_buf_take(&j, &r->resp_len);
    r->http = r->resp ? 200 : 500;
    if (!r->resp) r->json_len = 0;
}

void sv_infer_fail(sv_request *r, sv_error *e) {
    sv_buf b = {0};
    sv_buf_str(&b, "{\"error\":");
    sv_buf_json_str(&b, e->msg, strlen(e->msg));
    sv_buf_str(&b, "}");
    free(r->resp);
    r->http = e->http;
    r->json_len = 0;
    r->resp = sv_buf_take(&b, &r->resp_len);
    sv_error_free(e);
}
