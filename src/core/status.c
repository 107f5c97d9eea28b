#include "core/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tdm_status {
    tdm_code code;
    int is_static;
    char *message;
};

static char oom_text[] = "out of memory (while reporting an error)";
/* Immutable after compile time: only read, never written. */
static struct tdm_status oom_status = {TDM_ERR_OUT_OF_MEMORY, 1, oom_text};

static const char *const code_names[] = {
#define TDM_X_(name, value, text) [value] = text,
    TDM_STATUS_CODES(TDM_X_)
#undef TDM_X_
};

const char *tdm_code_name(tdm_code code) {
    if ((unsigned)code >= sizeof code_names / sizeof code_names[0] || !code_names[code])
        return "unknown";
    return code_names[code];
}

static tdm_status *status_vnew(tdm_code code, const char *prefix, const char *fmt, va_list ap) {
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) n = 0;
    size_t plen = prefix ? strlen(prefix) : 0;
    tdm_status *st = malloc(sizeof *st);
    char *msg = malloc((size_t)n + plen + 1);
    if (!st || !msg) {
        free(st);
        free(msg);
        return &oom_status;
    }
    vsnprintf(msg, (size_t)n + 1, fmt, ap);
    if (prefix) memcpy(msg + n, prefix, plen + 1);
    st->code = code == TDM_OK ? TDM_ERR_INTERNAL : code;
    st->is_static = 0;
    st->message = msg;
    return st;
}

tdm_status *tdm_status_new(tdm_code code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tdm_status *st = status_vnew(code, NULL, fmt, ap);
    va_end(ap);
    return st;
}

tdm_status *tdm_status_wrap(tdm_status *st, const char *fmt, ...) {
    if (!st || st->is_static) return st;
    va_list ap;
    va_start(ap, fmt);
    tdm_status *n = status_vnew(st->code, st->message, fmt, ap);
    va_end(ap);
    if (n->is_static) return st; /* keep the original on OOM */
    tdm_status_free(st);
    return n;
}

tdm_code tdm_status_code(const tdm_status *st) { return st ? st->code : TDM_OK; }
const char *tdm_status_message(const tdm_status *st) { return st ? st->message : "ok"; }

void tdm_status_free(tdm_status *st) {
    if (!st || st->is_static) return;
    free(st->message);
    free(st);
}
