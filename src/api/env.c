#include <stdio.h>
#include <string.h>

#include "api/api_impl.h"
#include "api/settings.h"
#include "core/alloc.h"

/* Discovers backends not discovered yet: eager ones (lazy_too false) or the lazy ones whose
 * name starts with `prefix` (NULL = all). Caller holds discover_mu or is the creator. */
static tdm_status *discover_backends(tdm_env *env, const char *prefix, bool lazy_too) {
    for (int b = 0; tdm_backends[b] && b < TDM_MAX_DEVICES; b++) {
        const tdm_backend_reg *reg = tdm_backends[b];
        if (env->discovered[b]) continue;
        if (reg->lazy && !lazy_too) continue;
        if (reg->lazy && prefix && strncmp(reg->name, prefix, strlen(reg->name)) != 0) continue;
        env->discovered[b] = true;
        int n = 0;
        char why[256] = "";
        tdm_status *st = reg->discover(env->alloc, &env->log, &env->settings,
                                       env->devices + env->n_devices,
                                       TDM_MAX_DEVICES - env->n_devices, &n, why, sizeof why);
        if (st && tdm_status_code(st) == TDM_ERR_OUT_OF_MEMORY) return st;
        if (st) {
            snprintf(why, sizeof why, "%s", tdm_status_message(st));
            tdm_status_free(st);
            n = 0;
        }
        for (int k = 0; k < n; k++) env->devices[env->n_devices + k]->index = env->n_devices + k;
        env->n_devices += n;
        if (n == 0 && why[0] && env->n_unavailable < TDM_MAX_DEVICES) {
            char line[300];
            snprintf(line, sizeof line, "%s: %s", reg->name, why);
            env->unavailable[env->n_unavailable] = tdm_strdup(env->alloc, line);
            if (!env->unavailable[env->n_unavailable])
                return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating the environment");
            env->n_unavailable++;
            tdm_log(&env->log, TDM_LOG_INFO, "%s", line);
        }
    }
    return NULL;
}

tdm_status *tdm_env_discover(tdm_env *env, const char *prefix) {
    pthread_mutex_lock(&env->discover_mu);
    tdm_status *st = discover_backends(env, prefix, true);
    pthread_mutex_unlock(&env->discover_mu);
    return st;
}

/* Listing devices means knowing all of them. */
static void discover_all(const tdm_env *env) {
    tdm_status_free(tdm_env_discover((tdm_env *)env, NULL));
}

/* The TANDEM_LOG logger: one line a message on stderr. level_names[l] names tdm_log_level l,
 * as the setting spells it. */
static const char *const level_names[] = {"error", "warn", "info", "debug"};

static void log_to_stderr(void *user, tdm_log_level level, const char *message) {
    (void)user;
    fprintf(stderr, "tandem: %s: %s\n", level_names[level >= 0 && level <= 3 ? level : 3], message);
}

tdm_status *tdm_env_create(const tdm_env_options *o, tdm_env **out) {
    if (!out) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_env_create: out is NULL");
    if (o && o->api_version != TDM_API_VERSION)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_env_options.api_version is %d; this library "
                       "speaks version %d", o->api_version, TDM_API_VERSION);
    const tdm_allocator *a = NULL;
    if (o && (o->allocator.alloc || o->allocator.free)) {
        if (!o->allocator.alloc || !o->allocator.free)
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "allocator hook needs both alloc and free");
        a = &o->allocator;
    }
    tdm_env *env = tdm_calloc(a, 1, sizeof *env);
    if (!env) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating the environment");
    if (a) {
        env->alloc_storage = *a;
        env->alloc = &env->alloc_storage;
    }
    if (o) {
        env->log.fn = o->log;
        env->log.user = o->log_user;
        env->log.level = o->log_level;
        env->threads = o->threads;
    }
    if (env->threads <= 0) env->threads = tdm_cpu_count();
    pthread_mutex_init(&env->discover_mu, NULL);
    tdm_status *st = tdm_settings_read(o, &env->settings); /* the process environment, once */
    if (!st && !env->log.fn && env->settings.log_stderr[0]) {
        for (int i = 0; i < 4; i++)
            if (!strcmp(env->settings.log_stderr, level_names[i])) env->log.level = (tdm_log_level)i;
        env->log.fn = log_to_stderr;
    }
    if (!st) st = discover_backends(env, NULL, false);
    for (int i = 0; !st && i < env->n_devices; i++) /* before anything runs on it */
        if (!strcmp(env->devices[i]->name, "cpu")) {
            st = tdm_device_configure(env->devices[i], "cpu_isa", env->settings.cpu_isa);
            if (!st)
                st = tdm_device_configure(env->devices[i], "cpu_layout", env->settings.cpu_layout);
        }
    if (st) {
        tdm_env_free(env);
        return st;
    }
    *out = env;
    return NULL;
}

void tdm_env_free(tdm_env *env) {
    if (!env) return;
    pthread_mutex_destroy(&env->discover_mu);
    for (int i = 0; i < env->n_devices; i++) tdm_device_close(env->devices[i]);
    for (int i = 0; i < env->n_unavailable; i++) tdm_free(env->alloc, env->unavailable[i]);
    if (env->alloc) {
        tdm_allocator copy = env->alloc_storage; /* env holds the hook it is freed with */
        tdm_free(&copy, env);
    } else {
        tdm_free(NULL, env);
    }
}

size_t tdm_env_device_count(const tdm_env *env) {
    if (!env) return 0;
    discover_all(env);
    return (size_t)env->n_devices;
}
const char *tdm_env_device_name(const tdm_env *env, size_t i) {
    if (!env) return NULL;
    discover_all(env);
    return i < (size_t)env->n_devices ? env->devices[i]->name : NULL;
}
const char *tdm_env_device_description(const tdm_env *env, size_t i) {
    if (!env) return NULL;
    discover_all(env);
    return i < (size_t)env->n_devices ? env->devices[i]->description : NULL;
}
const char *tdm_env_device_isa(const tdm_env *env, size_t i) {
    if (!env) return NULL; /* (no discovery: the CPU is there from creation, at index 0) */
    return i < (size_t)env->n_devices && env->devices[i]->isa[0] ? env->devices[i]->isa : NULL;
}
size_t tdm_env_unavailable_count(const tdm_env *env) {
    if (!env) return 0;
    discover_all(env);
    return (size_t)env->n_unavailable;
}
const char *tdm_env_unavailable_reason(const tdm_env *env, size_t i) {
    if (!env) return NULL;
    discover_all(env);
    return i < (size_t)env->n_unavailable ? env->unavailable[i] : NULL;
}

tdm_device *tdm_env_find_device(const tdm_env *env, const char *name) {
    char prefix[32];
    snprintf(prefix, sizeof prefix, "%.*s", (int)strcspn(name, ":"), name);
    tdm_status_free(tdm_env_discover((tdm_env *)env, prefix));
    for (int i = 0; i < env->n_devices; i++)
        if (strcmp(env->devices[i]->name, name) == 0) return env->devices[i];
    /* "cuda" means "cuda:0" */
    size_t len = strlen(name);
    for (int i = 0; i < env->n_devices; i++)
        if (strncmp(env->devices[i]->name, name, len) == 0 && env->devices[i]->name[len] == ':' &&
            strcmp(env->devices[i]->name + len, ":0") == 0)
            return env->devices[i];
    return NULL;
}

const char *tdm_version_string(void) { return TANDEM_VERSION; }

/* The environment's allocator hook (NULL = libc), for the library's parts that only see the
 * public handle (src/llm: llm/llm_internal.h). */
const tdm_allocator *tdm_env_allocator(const tdm_env *env) { return env ? env->alloc : NULL; }
