#include <stdio.h>
#include <string.h>

#include "api/api_impl.h"
#include "core/alloc.h"

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
    for (int b = 0; tdm_backends[b]; b++) {
        const tdm_backend_reg *reg = tdm_backends[b];
        int n = 0;
        char why[256] = "";
        tdm_status *st = reg->discover(env->alloc, &env->log, env->devices + env->n_devices,
                                       TDM_MAX_DEVICES - env->n_devices, &n, why, sizeof why);
        if (st && tdm_status_code(st) == TDM_ERR_OUT_OF_MEMORY) {
            tdm_env_free(env);
            return st;
        }
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
            if (!env->unavailable[env->n_unavailable]) {
                tdm_env_free(env);
                return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating the environment");
            }
            env->n_unavailable++;
            tdm_log(&env->log, TDM_LOG_INFO, "%s", line);
        }
    }
    *out = env;
    return NULL;
}

void tdm_env_free(tdm_env *env) {
    if (!env) return;
    for (int i = 0; i < env->n_devices; i++) tdm_device_close(env->devices[i]);
    for (int i = 0; i < env->n_unavailable; i++) tdm_free(env->alloc, env->unavailable[i]);
    if (env->alloc) {
        tdm_allocator copy = env->alloc_storage; /* env holds the hook it is freed with */
        tdm_free(&copy, env);
    } else {
        tdm_free(NULL, env);
    }
}

size_t tdm_env_device_count(const tdm_env *env) { return env ? (size_t)env->n_devices : 0; }
const char *tdm_env_device_name(const tdm_env *env, size_t i) {
    return env && i < (size_t)env->n_devices ? env->devices[i]->name : NULL;
}
const char *tdm_env_device_description(const tdm_env *env, size_t i) {
    return env && i < (size_t)env->n_devices ? env->devices[i]->description : NULL;
}
size_t tdm_env_unavailable_count(const tdm_env *env) { return env ? (size_t)env->n_unavailable : 0; }
const char *tdm_env_unavailable_reason(const tdm_env *env, size_t i) {
    return env && i < (size_t)env->n_unavailable ? env->unavailable[i] : NULL;
}

tdm_device *tdm_env_find_device(const tdm_env *env, const char *name) {
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
