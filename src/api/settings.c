/* Settings as options, the environment as their defaults: the one place in the library that
 * reads the process environment (getenv), once per tdm_env_create.
 *
 * One row per setting: the TANDEM_* variable, the tdm_env_options field it is the default of
 * and the tdm_settings field (core/settings.h) the resolved value goes to. The README's table
 * "Settings" lists the same rows. */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/settings.h"
#include "core/status.h"

typedef enum {
    S_TEXT,   /* a string (a path, a list); `words`, when set, lists the values allowed */
    S_INT,    /* an integer 0..max; the option's negative values mean 0 */
    S_SWITCH, /* on or off */
} s_kind;

typedef struct s_row {
    const char *var;   /* the environment variable */
    const char *field; /* the tdm_env_options (and tdm_settings) field */
    s_kind kind;
    size_t opt_off, opt_size;
    size_t set_off, set_size;
    int64_t max;       /* S_INT */
    const char *words; /* S_TEXT: "a|b|c", or NULL for any value */
} s_row;

#define OPT_(f) offsetof(tdm_env_options, f), sizeof(((tdm_env_options *)0)->f)
#define SET_(f) offsetof(tdm_settings, f), sizeof(((tdm_settings *)0)->f)
#define ROW_(var, f, kind, max, words) {var, #f, kind, OPT_(f), SET_(f), max, words}

static const s_row rows[] = {
    ROW_("TANDEM_CACHE_DIR", cache_dir, S_TEXT, 0, NULL),
    ROW_("TANDEM_PLUGIN_DIR", plugin_dir, S_TEXT, 0, NULL),
    ROW_("TANDEM_SPIN_US", spin_us, S_INT, 1000000, NULL),
    ROW_("TANDEM_SYNC_COPIES", sync_copies, S_SWITCH, 0, NULL),
    ROW_("TANDEM_LOOP_MAX_ITERATIONS", loop_max_iterations, S_INT, INT64_MAX, NULL),
    ROW_("TANDEM_LOOP_TIMEOUT_MS", loop_timeout_ms, S_INT, INT64_MAX, NULL),
    ROW_("TANDEM_CUDA_DISABLE", cuda_disable, S_SWITCH, 0, NULL),
    ROW_("TANDEM_CUDA_PRECISION", cuda_precision, S_TEXT, 0, "fp32|tf32|fp16|bf16"),
    ROW_("TANDEM_CUDA_MEM_LIMIT_MB", cuda_mem_limit_mb, S_INT, (int64_t)1 << 40, NULL),
    ROW_("TANDEM_CUDA_GRAPHS", cuda_graphs, S_SWITCH, 0, NULL),
    ROW_("TANDEM_CUDA_GRAPHS_LOG", cuda_graphs_log, S_TEXT, 0, NULL),
    ROW_("TANDEM_OPENCL_DISABLE", opencl_disable, S_SWITCH, 0, NULL),
    ROW_("TANDEM_OPENCL_KERNELS", opencl_kernels, S_TEXT, 0, "gpu|cpu"),
    ROW_("TANDEM_CPU_ISA", cpu_isa, S_TEXT, 0, NULL), /* (names checked by the CPU device) */
    ROW_("TANDEM_CPU_LAYOUT", cpu_layout, S_TEXT, 0, "auto|blocked|channels_last"),
    ROW_("TANDEM_TEST_DEVICES", test_devices, S_INT, 4, NULL),
    ROW_("TANDEM_TEST_DEVICE_DELAY_US", test_device_delay_us, S_INT, 60000000, NULL),
    ROW_("TANDEM_TEST_DEVICE_OPS", test_device_ops, S_TEXT, 0, NULL),
    ROW_("TANDEM_TEST_DEVICE_FAIL_EVERY", test_device_fail_every, S_INT, INT64_MAX, NULL),
    ROW_("TANDEM_LOG", log_stderr, S_TEXT, 0, "error|warn|info|debug"),
    /* a new setting: one row here, a field in tdm_env_options and tdm_settings, a line in
     * the README's table */
};

/* The row's fields have the types its kind reads and writes (a guard for new rows). */
static bool row_types_match(const s_row *r) {
    switch (r->kind) {
    case S_TEXT:
        return r->opt_size == sizeof(const char *) && r->set_size > 1;
    case S_INT:
        return (r->opt_size == sizeof(int) || r->opt_size == sizeof(int64_t)) &&
               r->set_size == sizeof(int64_t);
    case S_SWITCH:
        return r->opt_size == sizeof(int) && r->set_size == sizeof(bool);
    }
    return false;
}

/* `s` is one of the '|'-separated words. */
static bool is_word(const char *words, const char *s) {
    size_t len = strlen(s);
    for (const char *w = words; *w;) {
        size_t wl = strcspn(w, "|");
        if (wl == len && strncmp(w, s, len) == 0) return true;
        w += wl + (w[wl] == '|');
    }
    return false;
}

/* A text value (`what` names where it came from) into the resolved field. */
static tdm_status *put_text(const s_row *r, const char *what, const char *v, tdm_settings *out) {
    if (r->words && !is_word(r->words, v))
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "%s='%.60s' is not one of %s", what, v, r->words);
    size_t len = strlen(v);
    if (len >= r->set_size)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "%s is %zu bytes long; at most %zu", what, len,
                       r->set_size - 1);
    memcpy((char *)out + r->set_off, v, len + 1);
    return NULL;
}

static void put_int(const s_row *r, int64_t v, tdm_settings *out) {
    memcpy((char *)out + r->set_off, &v, sizeof v);
}

static void put_switch(const s_row *r, bool v, tdm_settings *out) {
    memcpy((char *)out + r->set_off, &v, sizeof v);
}

/* The option field of row r, when the caller set it: *done = true and the value stored. */
static tdm_status *from_option(const s_row *r, const tdm_env_options *o, tdm_settings *out,
                               bool *done) {
    const char *p = (const char *)o + r->opt_off;
    char what[80];
    snprintf(what, sizeof what, "tdm_env_options.%s", r->field);
    if (r->kind == S_TEXT) {
        const char *v;
        memcpy(&v, p, sizeof v);
        if (!v || !v[0]) return NULL;
        *done = true;
        return put_text(r, what, v, out);
    }
    int64_t v;
    if (r->opt_size == sizeof(int64_t)) {
        memcpy(&v, p, sizeof v);
    } else {
        int i;
        memcpy(&i, p, sizeof i);
        v = i;
    }
    if (v == 0) return NULL;
    *done = true;
    if (r->kind == S_SWITCH) {
        put_switch(r, v > 0, out);
        return NULL;
    }
    if (v > r->max)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "%s is %" PRId64 "; at most %" PRId64, what, v,
                       r->max);
    put_int(r, v < 0 ? 0 : v, out);
    return NULL;
}

/* The environment variable of row r, when set and not empty. */
static tdm_status *from_environment(const s_row *r, tdm_settings *out) {
    const char *v = getenv(r->var);
    if (!v || !v[0]) return NULL;
    if (r->kind == S_TEXT) return put_text(r, r->var, v, out);
    if (r->kind == S_SWITCH) {
        static const char *const on[] = {"1", "true", "on", "yes"}, *const off[] = {"0", "false",
                                                                                     "off", "no"};
        for (size_t i = 0; i < sizeof on / sizeof on[0]; i++) {
            if (strcasecmp(v, on[i]) == 0) {
                put_switch(r, true, out);
                return NULL;
            }
            if (strcasecmp(v, off[i]) == 0) {
                put_switch(r, false, out);
                return NULL;
            }
        }
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "%s='%.60s' is not 1 or 0 (true/false, on/off, "
                       "yes/no)", r->var, v);
    }
    char *end = NULL;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < 0 || x > r->max)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "%s='%.60s' is not an integer in 0..%" PRId64,
                       r->var, v, r->max);
    put_int(r, (int64_t)x, out);
    return NULL;
}

/* The cache folder when neither the option nor TANDEM_CACHE_DIR says: $XDG_CACHE_HOME/tandem
 * (absolute paths only, as XDG asks), else $HOME/.cache/tandem, else none. A folder whose
 * path does not fit is none too. */
static void default_cache_dir(tdm_settings *out) {
    const char *v;
    int n = -1;
    if ((v = getenv("XDG_CACHE_HOME")) && v[0] == '/')
        n = snprintf(out->cache_dir, sizeof out->cache_dir, "%s/tandem", v);
    else if ((v = getenv("HOME")) && v[0])
        n = snprintf(out->cache_dir, sizeof out->cache_dir, "%s/.cache/tandem", v);
    if (n < 0 || (size_t)n >= sizeof out->cache_dir) out->cache_dir[0] = 0;
}

tdm_status *tdm_settings_read(const tdm_env_options *o, tdm_settings *out) {
    if (!out) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_settings_read: out is NULL");
    tdm_settings s = tdm_settings_builtin;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        bool done = false;
        if (!row_types_match(&rows[i]))
            return TDM_ERR(TDM_ERR_INTERNAL, "settings table: %s has fields of the wrong type",
                           rows[i].field);
        if (o) TDM_TRY(from_option(&rows[i], o, &s, &done));
        if (!done) TDM_TRY(from_environment(&rows[i], &s));
    }
    if (!s.cache_dir[0]) default_cache_dir(&s);
    *out = s;
    return NULL;
}
