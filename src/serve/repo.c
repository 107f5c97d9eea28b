/* tandem serve: the model repository (see repo.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "serve/openai.h"
#include "serve/repo.h"

#define MAX_VERSIONS 1024
#define MAX_MODELS 4096

typedef enum sv_state { ST_UNAVAILABLE, ST_LOADING, ST_READY, ST_UNLOADING } sv_state;
static const char *const state_names[] = {"UNAVAILABLE", "LOADING", "READY", "UNLOADING"};

typedef struct sv_model {
    char *name;
    sv_state state;
    char *reason;
    int n_versions;
    sv_version **versions; /* ready ones, ascending */
} sv_model;

struct sv_repo {
    tdm_env *env;
    char *root; /* resolved */
    sv_repo_options opt;
    pthread_mutex_t mu;      /* models and refs */
    pthread_mutex_t load_mu; /* serialises loads and unloads */
    int n_models;
    sv_model **models;
};

static void logf_(sv_repo *r, const char *fmt, const char *a, const char *b) {
    if (r->opt.log) r->opt.log(r->opt.log_user, fmt, a, b);
}

/* ---- names and paths ------------------------------------------------------------------------ */

static sv_error *check_name(const char *name) {
    size_t n = strlen(name);
    if (!n || n > 255) return sv_err(400, "a model name must have 1 to 255 characters");
    if (!strcmp(name, ".") || !strcmp(name, "..") || name[0] == '.')
        return sv_err(400, "invalid model name '%s'", name);
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.'))
            return sv_err(400, "invalid model name (letters, digits, '_', '-', '.' only)");
    }
    return NULL;
}

/* Resolves path and checks it lies inside the repository. */
static sv_error *resolve_inside(sv_repo *r, const char *path, char *resolved) {
    if (!realpath(path, resolved)) return sv_err(404, "'%s': %s", path, strerror(errno));
    size_t n = strlen(r->root);
    if (strncmp(resolved, r->root, n) || resolved[n] != '/')
        return sv_err(400, "'%s' leads outside the model repository", path);
    return NULL;
}

static sv_error *read_small_file(const char *path, size_t max, char **out, size_t *len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return sv_err(errno == ENOENT ? 404 : 400, "'%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > max) {
        close(fd);
        return sv_err(400, "'%s' is not a regular file of at most %zu bytes", path, max);
    }
    char *buf = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (buf && got < (size_t)st.st_size) {
        ssize_t k = read(fd, buf + got, (size_t)st.st_size - got);
        if (k <= 0) break;
        got += (size_t)k;
    }
    close(fd);
    if (!buf || got != (size_t)st.st_size) {
        free(buf);
        return sv_err(500, "cannot read '%s'", path);
    }
    buf[got] = 0;
    *out = buf;
    *len = got;
    return NULL;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Version folders of a model, ascending. */
static sv_error *list_versions(const char *dir, int64_t *v, int *n) {
    DIR *d = opendir(dir);
    if (!d) return sv_err(404, "cannot open '%s': %s", dir, strerror(errno));
    *n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && *n < MAX_VERSIONS) {
        const char *s = e->d_name;
        if (!s[0] || s[0] == '0' || strspn(s, "0123456789") != strlen(s) || strlen(s) > 18) continue;
        char p[PATH_MAX];
        struct stat st;
        if (snprintf(p, sizeof p, "%s/%s", dir, s) >= (int)sizeof p || stat(p, &st) || !S_ISDIR(st.st_mode))
            continue;
        v[(*n)++] = strtoll(s, NULL, 10);
    }
    closedir(d);
    if (*n) qsort(v, (size_t)*n, sizeof *v, cmp_i64);
    return NULL;
}

/* ---- versions --------------------------------------------------------------------------------- */

static void version_free(sv_version *v) {
    if (!v) return;
    sv_sched_free(v->sched);
    sv_llm_free(v->llm);
    sv_stats_destroy(&v->stats);
    sv_config_free(v->cfg);
    free(v->model_name);
    free(v);
}

void sv_version_unref(sv_repo *r, sv_version *v) {
    if (!v) return;
    pthread_mutex_lock(&r->mu);
    bool last = --v->refs == 0;
    pthread_mutex_unlock(&r->mu);
    if (last) version_free(v);
}

/* Devices of a GPU backend ("cuda", or what the model's tandem_gpu_backend parameter names). */
static int gpu_devices(tdm_env *env, const char *backend, const char **names, int max) {
    int n = 0;
    size_t len = strlen(backend);
    for (size_t i = 0; i < tdm_env_device_count(env) && n < max; i++) {
        const char *d = tdm_env_device_name(env, i);
        if (!strncmp(d, backend, len) && d[len] == ':') names[n++] = d;
    }
    return n;
}

static bool has_device(tdm_env *env, const char *name) {
    for (size_t i = 0; i < tdm_env_device_count(env); i++)
        if (!strcmp(tdm_env_device_name(env, i), name)) return true;
    return false;
}

static sv_error *no_gpu(tdm_env *env, const char *model, const char *what) {
    char reasons[400] = "";
    size_t pos = 0;
    for (size_t i = 0; i < tdm_env_unavailable_count(env) && pos < sizeof reasons; i++)
        pos += (size_t)snprintf(reasons + pos, sizeof reasons - pos, "%s%s", i ? "; " : " (",
                                tdm_env_unavailable_reason(env, i));
    if (pos && pos < sizeof reasons - 1) strcat(reasons, ")");
    return sv_err(400, "model '%s': instance_group KIND_GPU needs %s, which is not available%s",
                  model, what, reasons);
}

/* Device per instance, from the instance groups. */
static sv_error *plan_devices(sv_repo *r, sv_model_config *cfg, char (*dev)[32], int *n) {
    /* KIND_GPU means CUDA devices; tandem's own parameter tandem_gpu_backend (e.g. "opencl")
     * picks another GPU backend */
    const char *backend = sv_config_param(cfg, "tandem_gpu_backend");
    if (!backend) backend = "cuda";
    if (strlen(backend) > 16 || strspn(backend, "abcdefghijklmnopqrstuvwxyz") != strlen(backend) ||
        !strcmp(backend, "cpu") || !backend[0])
        return sv_err(400, "model '%s': tandem_gpu_backend '%s' is not a GPU backend name", cfg->name,
                      backend);
    const char *gpus[16];
    int n_gpus = gpu_devices(r->env, backend, gpus, 16);
    *n = 0;
    for (int g = 0; g < cfg->n_groups; g++) {
        sv_instance_group *ig = &cfg->groups[g];
        if (ig->kind == SV_KIND_AUTO) ig->kind = n_gpus ? SV_KIND_GPU : SV_KIND_CPU; /* as Triton shows it */
        const char *list[16];
        char named[16][32];
        int m = 0;
        if (ig->kind == SV_KIND_CPU) {
            list[m++] = "cpu";
        } else if (ig->n_gpus) {
            for (int k = 0; k < ig->n_gpus; k++) {
                snprintf(named[k], sizeof named[k], "%s:%d", backend, ig->gpus[k]);
                if (!has_device(r->env, named[k])) return no_gpu(r->env, cfg->name, named[k]);
                list[m++] = named[k];
            }
        } else {
            if (!n_gpus) return no_gpu(r->env, cfg->name, "a GPU");
            for (int k = 0; k < n_gpus; k++) list[m++] = gpus[k];
        }
        for (int k = 0; k < m; k++)
            for (int c = 0; c < ig->count; c++) {
                if (*n >= SV_MAX_INSTANCES)
                    return sv_err(400, "model '%s': more than %d instances", cfg->name, SV_MAX_INSTANCES);
                snprintf(dev[(*n)++], 32, "%s", list[k]);
            }
    }
    return NULL;
}

static sv_error *load_version(sv_repo *r, const char *name, const char *cfg_text, size_t cfg_len,
                              bool cfg_json, int64_t version, sv_version **out) {
    sv_version *v = calloc(1, sizeof *v);
    if (!v || !(v->model_name = sv_strdup(name))) {
        free(v);
        return sv_err(500, "out of memory");
    }
    sv_stats_init(&v->stats);
    v->version = version;
    snprintf(v->vstr, sizeof v->vstr, "%lld", (long long)version);
    sv_error *e = NULL;
    if (cfg_text) {
        e = sv_config_parse(cfg_text, cfg_len, cfg_json, name, &v->cfg);
    } else {
        e = sv_config_default(name, &v->cfg);
    }
    char path[PATH_MAX], resolved[PATH_MAX];
    if (!e && v->cfg->backend && !strcmp(v->cfg->backend, "tandem_llm")) {
        /* a language model: the version folder is the model folder (openai.h) */
        if (snprintf(path, sizeof path, "%s/%s/%lld", r->root, name, (long long)version) >= (int)sizeof path)
            e = sv_err(400, "model path is too long");
        if (!e) e = resolve_inside(r, path, resolved);
        /* KServe's metadata names it (the config completion of ONNX models does not run) */
        if (!e && !v->cfg->platform && !(v->cfg->platform = sv_strdup("tandem_llm")))
            e = sv_err(500, "out of memory");
        if (!e) e = sv_llm_create(r->env, v->cfg, name, resolved, r->opt.threads, &v->llm);
        if (e) {
            version_free(v);
            return e;
        }
        v->refs = 1;
        *out = v;
        return NULL;
    }
    if (!e) {
        const char *file = v->cfg->default_model_filename ? v->cfg->default_model_filename : "model.onnx";
        if (snprintf(path, sizeof path, "%s/%s/%lld/%s", r->root, name, (long long)version, file) >=
            (int)sizeof path)
            e = sv_err(400, "model path is too long");
    }
    if (!e && (e = resolve_inside(r, path, resolved)) && e->http == 404) {
        sv_error_free(e);
        e = sv_err(400, "model '%s' version %lld: '%s' does not exist", name, (long long)version, path);
    }
    struct stat st;
    if (!e && (stat(resolved, &st) || !S_ISREG(st.st_mode)))
        e = sv_err(400, "'%s' is not a regular file", path);
    char dev[SV_MAX_INSTANCES][32];
    int n = 0;
    sv_instance_desc desc[SV_MAX_INSTANCES];
    int made = 0;
    if (!e) e = plan_devices(r, v->cfg, dev, &n);
    if (!e && n == 0) e = sv_err(400, "model '%s' has no instances", name);
    if (!e) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        int threads = r->opt.threads;
        const char *p = sv_config_param(v->cfg, "intra_op_thread_count");
        int64_t pv;
        if (!threads && p && sv_parse_i64(p, &pv) && pv > 0 && pv <= 1024) threads = (int)pv;
        if (!threads) threads = cores > n ? (int)(cores / n) : 1;
        int opt_level = 1;
        p = sv_config_param(v->cfg, "opt_level");
        if (p && sv_parse_i64(p, &pv) && pv >= 0 && pv <= 2) opt_level = (int)pv;
        for (int i = 0; i < n && !e; i++) {
            char devices[80];
            snprintf(devices, sizeof devices, "%s%s", dev[i], strcmp(dev[i], "cpu") ? ",cpu" : "");
            tdm_session_options so = {TDM_API_VERSION, devices, threads, opt_level, false};
            tdm_session *s = NULL;
            tdm_status *st2 = tdm_session_create(r->env, resolved, &so, &s);
            if (st2) {
                e = sv_err_status(400, st2, "loading the model failed");
                break;
            }
            desc[made].session = s;
            desc[made].device = dev[i];
            made++;
            if (i == 0) e = sv_config_complete(v->cfg, tdm_session_model(s));
        }
    }
    if (!e) {
        e = sv_sched_create(r->env, v->cfg, v->model_name, v->vstr, &v->stats, desc, made, &v->sched);
        made = 0; /* the scheduler owns them now */
    }
    for (int i = 0; i < made; i++) tdm_session_free(desc[i].session);
    if (e) {
        version_free(v);
        return e;
    }
    v->refs = 1;
    *out = v;
    return NULL;
}

/* ---- models ----------------------------------------------------------------------------------- */

static sv_model *find_model(sv_repo *r, const char *name) {
    for (int i = 0; i < r->n_models; i++)
        if (!strcmp(r->models[i]->name, name)) return r->models[i];
    return NULL;
}

static sv_model *get_or_add_model(sv_repo *r, const char *name) {
    sv_model *m = find_model(r, name);
    if (m || r->n_models >= MAX_MODELS) return m;
    sv_model **arr = realloc(r->models, (size_t)(r->n_models + 1) * sizeof *arr);
    if (!arr) return NULL;
    r->models = arr;
    m = calloc(1, sizeof *m);
    if (!m || !(m->name = sv_strdup(name))) {
        free(m);
        return NULL;
    }
    arr[r->n_models++] = m;
    return m;
}

static void set_state(sv_model *m, sv_state st, const char *reason) {
    m->state = st;
    free(m->reason);
    m->reason = reason ? sv_strdup(reason) : NULL;
}

/* Drains and releases detached versions. */
static void retire(sv_repo *r, sv_version **old, int n) {
    for (int i = 0; i < n; i++) {
        sv_sched_drain(old[i]->sched);
        sv_llm_drain(old[i]->llm); /* an unloaded language model cancels its requests */
        sv_version_unref(r, old[i]);
    }
    free(old);
}

static sv_error *load_locked(sv_repo *r, const char *name, const char *cfg_json, size_t cfg_json_len) {
    char dir[PATH_MAX], resolved[PATH_MAX], cfg_path[PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s/%s", r->root, name) >= (int)sizeof dir)
        return sv_err(400, "model path is too long");
    sv_error *e = resolve_inside(r, dir, resolved);
    if (e) {
        sv_error_free(e);
        return sv_err(404, "failed to load '%s': no model folder of that name in the repository "
                      "(or it leads outside)", name);
    }
    const char *slash = strrchr(resolved, '/');
    if (slash != resolved + strlen(r->root) || strcmp(slash + 1, name))
        return sv_err(400, "failed to load '%s': the model folder must be directly inside the "
                      "repository", name);
    char *text = NULL;
    size_t len = 0;
    bool json = false;
    if (cfg_json) {
        text = sv_strndup(cfg_json, cfg_json_len);
        len = cfg_json_len;
        json = true;
        if (!text) return sv_err(500, "out of memory");
    } else {
        if (snprintf(cfg_path, sizeof cfg_path, "%s/config.pbtxt", resolved) >= (int)sizeof cfg_path)
            return sv_err(400, "model path is too long");
        char rc[PATH_MAX];
        if (access(cfg_path, F_OK) == 0) {
            e = resolve_inside(r, cfg_path, rc);
            if (!e) e = read_small_file(rc, SV_PB_MAX_TEXT, &text, &len);
            if (e) return e;
        }
    }
    /* which versions: parse the config once for the policy */
    sv_model_config *probe = NULL;
    if (text) {
        e = sv_config_parse(text, len, json, name, &probe);
    } else {
        e = sv_config_default(name, &probe);
    }
    int64_t *all = e ? NULL : malloc(MAX_VERSIONS * sizeof *all);
    int n_all = 0, first = 0, count = 0;
    if (!e && !all) e = sv_err(500, "out of memory");
    if (!e) e = list_versions(resolved, all, &n_all);
    if (!e && !n_all) e = sv_err(400, "model '%s' has no version folders (DIR/%s/1/model.onnx)", name, name);
    int64_t pick[MAX_VERSIONS];
    if (!e) {
        if (probe->vp == SV_VP_ALL) {
            first = 0, count = n_all;
        } else if (probe->vp == SV_VP_LATEST) {
            count = probe->vp_latest < n_all ? probe->vp_latest : n_all;
            first = n_all - count;
        }
        for (int i = 0; i < count; i++) pick[i] = all[first + i];
        if (probe->vp == SV_VP_SPECIFIC) {
            for (int i = 0; i < probe->n_vp_versions && !e; i++) {
                int k = 0;
                while (k < n_all && all[k] != probe->vp_versions[i]) k++;
                if (k == n_all) e = sv_err(400, "model '%s': version %lld of the version policy does not exist",
                                           name, (long long)probe->vp_versions[i]);
                else pick[count++] = all[k];
            }
            if (count) qsort(pick, (size_t)count, sizeof *pick, cmp_i64);
        }
    }
    sv_config_free(probe);
    free(all);
    sv_version **fresh = e ? NULL : calloc((size_t)count + 1, sizeof *fresh);
    if (!e && !fresh) e = sv_err(500, "out of memory");
    int made = 0;
    for (int i = 0; !e && i < count; i++) {
        e = load_version(r, name, text, len, json, pick[i], &fresh[i]);
        if (!e) made++;
    }
    free(text);
    if (e) {
        for (int i = 0; i < made; i++) sv_version_unref(r, fresh[i]);
        free(fresh);
        return e;
    }
    pthread_mutex_lock(&r->mu);
    sv_model *m = find_model(r, name);
    sv_version **old = m->versions;
    int n_old = m->n_versions;
    m->versions = fresh;
    m->n_versions = made;
    set_state(m, ST_READY, NULL);
    pthread_mutex_unlock(&r->mu);
    retire(r, old, n_old);
    return NULL;
}

sv_error *sv_repo_load(sv_repo *r, const char *name, const char *config_json, size_t config_len) {
    sv_error *e = check_name(name);
    if (e) return e;
    pthread_mutex_lock(&r->load_mu);
    pthread_mutex_lock(&r->mu);
    sv_model *m = get_or_add_model(r, name);
    bool serving = m && m->n_versions;
    if (m) set_state(m, serving ? ST_READY : ST_LOADING, NULL);
    pthread_mutex_unlock(&r->mu);
    if (!m) e = sv_err(500, "out of memory (or too many models)");
    else e = load_locked(r, name, config_json, config_len);
    if (e && m) {
        pthread_mutex_lock(&r->mu);
        if (!m->n_versions) set_state(m, ST_UNAVAILABLE, e->msg);
        if (!m->n_versions && e->http == 404) { /* no such folder: forget the name again */
            int i = 0;
            while (r->models[i] != m) i++;
            r->models[i] = r->models[--r->n_models];
            free(m->reason);
            free(m->name);
            free(m);
        }
        pthread_mutex_unlock(&r->mu);
        logf_(r, "model '%s' failed to load: %s", name, e->msg);
    } else {
        logf_(r, "model '%s' is ready%s", name, "");
    }
    pthread_mutex_unlock(&r->load_mu);
    return e;
}

sv_error *sv_repo_unload(sv_repo *r, const char *name) {
    sv_error *e = check_name(name);
    if (e) return e;
    pthread_mutex_lock(&r->load_mu);
    pthread_mutex_lock(&r->mu);
    sv_model *m = find_model(r, name);
    sv_version **old = NULL;
    int n_old = 0;
    if (m) {
        old = m->versions;
        n_old = m->n_versions;
        m->versions = NULL;
        m->n_versions = 0;
        set_state(m, ST_UNLOADING, NULL);
    }
    pthread_mutex_unlock(&r->mu);
    if (!m) {
        char dir[PATH_MAX], resolved[PATH_MAX];
        snprintf(dir, sizeof dir, "%s/%s", r->root, name);
        sv_error *x = resolve_inside(r, dir, resolved);
        if (x) {
            sv_error_free(x);
            e = sv_err(404, "failed to unload '%s': no such model", name);
        }
    }
    retire(r, old, n_old);
    if (m) {
        pthread_mutex_lock(&r->mu);
        set_state(m, ST_UNAVAILABLE, "unloaded");
        pthread_mutex_unlock(&r->mu);
        logf_(r, "model '%s' is unloaded%s", name, "");
    }
    pthread_mutex_unlock(&r->load_mu);
    return e;
}

int sv_repo_load_all(sv_repo *r) {
    DIR *d = opendir(r->root);
    if (!d) return 1;
    char **names = NULL;
    int n = 0, failed = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < MAX_MODELS) {
        if (e->d_name[0] == '.') continue;
        sv_error *x = check_name(e->d_name);
        if (x) {
            sv_error_free(x);
            continue;
        }
        char p[PATH_MAX];
        struct stat st;
        if (snprintf(p, sizeof p, "%s/%s", r->root, e->d_name) >= (int)sizeof p || stat(p, &st) ||
            !S_ISDIR(st.st_mode))
            continue;
        char **nn = realloc(names, (size_t)(n + 1) * sizeof *nn);
        if (!nn) break;
        names = nn;
        if ((names[n] = sv_strdup(e->d_name))) n++;
    }
    closedir(d);
    for (int i = 0; i < n; i++) {
        sv_error *x = sv_repo_load(r, names[i], NULL, 0);
        if (x) failed++;
        sv_error_free(x);
        free(names[i]);
    }
    free(names);
    return failed;
}

/* ---- lookups ---------------------------------------------------------------------------------- */

sv_error *sv_repo_get(sv_repo *r, const char *name, const char *version, sv_version **out) {
    pthread_mutex_lock(&r->mu);
    sv_model *m = find_model(r, name);
    sv_error *e = NULL;
    sv_version *v = NULL;
    if (!m) {
        e = sv_err(404, "Request for unknown model: '%s' is not found", name);
    } else if (!m->n_versions) {
        e = sv_err(503, "Request for unknown model: '%s' has no available versions (%s%s%s)", name,
                   state_names[m->state], m->reason ? ": " : "", m->reason ? m->reason : "");
    } else if (!version || !version[0]) {
        v = m->versions[m->n_versions - 1];
    } else {
        int64_t want;
        if (!sv_parse_i64(version, &want)) {
            e = sv_err(400, "'%s' is not a model version", version);
        } else {
            for (int i = 0; i < m->n_versions; i++)
                if (m->versions[i]->version == want) v = m->versions[i];
            if (!v) e = sv_err(404, "Request for unknown model: '%s' version %s is not found", name, version);
        }
    }
    if (v) v->refs++;
    pthread_mutex_unlock(&r->mu);
    if (!e) *out = v;
    return e;
}

int sv_repo_versions(sv_repo *r, sv_version ***out) {
    pthread_mutex_lock(&r->mu);
    int n = 0;
    for (int i = 0; i < r->n_models; i++) n += r->models[i]->n_versions;
    sv_version **arr = calloc((size_t)n + 1, sizeof *arr);
    int k = 0;
    for (int i = 0; arr && i < r->n_models; i++)
        for (int j = 0; j < r->models[i]->n_versions; j++) {
            arr[k] = r->models[i]->versions[j];
            arr[k++]->refs++;
        }
    pthread_mutex_unlock(&r->mu);
    *out = arr;
    return k;
}

void sv_repo_model_versions_json(sv_repo *r, const char *name, sv_buf *b) {
    pthread_mutex_lock(&r->mu);
    sv_model *m = find_model(r, name);
    for (int i = m ? m->n_versions - 1 : -1; i >= 0; i--)
        sv_buf_printf(b, "%s\"%s\"", i == m->n_versions - 1 ? "" : ",", m->versions[i]->vstr);
    pthread_mutex_unlock(&r->mu);
}

void sv_repo_index_json(sv_repo *r, bool ready_only, sv_buf *b) {
    /* the repository's folders, plus models known from loads */
    char **names = NULL;
    int n = 0;
    DIR *d = opendir(r->root);
    struct dirent *e;
    while (d && (e = readdir(d)) && n < MAX_MODELS) {
        sv_error *x = check_name(e->d_name);
        char p[PATH_MAX];
        struct stat st;
        if (x || snprintf(p, sizeof p, "%s/%s", r->root, e->d_name) >= (int)sizeof p || stat(p, &st) ||
            !S_ISDIR(st.st_mode)) {
            sv_error_free(x);
            continue;
        }
        char **nn = realloc(names, (size_t)(n + 1) * sizeof *nn);
        if (!nn) break;
        names = nn;
        if ((names[n] = sv_strdup(e->d_name))) n++;
    }
    if (d) closedir(d);
    if (n) qsort(names, (size_t)n, sizeof *names, cmp_str);
    pthread_mutex_lock(&r->mu);
    sv_buf_str(b, "[");
    bool first = true;
    for (int i = 0; i < n; i++) {
        sv_model *m = find_model(r, names[i]);
        if (m && m->n_versions) {
            for (int j = 0; j < m->n_versions; j++) {
                sv_buf_str(b, first ? "{\"name\":" : ",{\"name\":");
                sv_buf_json_str(b, names[i], strlen(names[i]));
                sv_buf_printf(b, ",\"version\":\"%s\",\"state\":\"READY\",\"reason\":\"\"}",
                              m->versions[j]->vstr);
                first = false;
            }
        } else if (!ready_only) {
            sv_buf_str(b, first ? "{\"name\":" : ",{\"name\":");
            sv_buf_json_str(b, names[i], strlen(names[i]));
            const char *reason = m ? (m->reason ? m->reason : "") : "not loaded";
            sv_buf_printf(b, ",\"version\":\"\",\"state\":\"%s\",\"reason\":",
                          state_names[m ? m->state : ST_UNAVAILABLE]);
            sv_buf_json_str(b, reason, strlen(reason));
            sv_buf_str(b, "}");
            first = false;
        }
        free(names[i]);
    }
    sv_buf_str(b, "]");
    pthread_mutex_unlock(&r->mu);
    free(names);
}

void sv_repo_cancel_queued(sv_repo *r, const char *why) {
    sv_version **v = NULL;
    int n = sv_repo_versions(r, &v);
    for (int i = 0; i < n; i++) {
        if (v[i]->sched) sv_sched_cancel_queued(v[i]->sched, why);
        sv_llm_cancel_all(v[i]->llm);
        sv_version_unref(r, v[i]);
    }
    free(v);
}

/* ---- lifecycle -------------------------------------------------------------------------------- */

sv_error *sv_repo_create(tdm_env *env, const char *dir, const sv_repo_options *o, sv_repo **out) {
    char resolved[PATH_MAX];
    if (!realpath(dir, resolved)) return sv_err(400, "model repository '%s': %s", dir, strerror(errno));
    struct stat st;
    if (stat(resolved, &st) || !S_ISDIR(st.st_mode))
        return sv_err(400, "model repository '%s' is not a folder", dir);
    sv_repo *r = calloc(1, sizeof *r);
    if (!r || !(r->root = sv_strdup(resolved))) {
        free(r);
        return sv_err(500, "out of memory");
    }
    r->env = env;
    if (o) r->opt = *o;
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->load_mu, NULL);
    *out = r;
    return NULL;
}

void sv_repo_free(sv_repo *r) {
    if (!r) return;
    for (int i = 0; i < r->n_models; i++) {
        sv_model *m = r->models[i];
        retire(r, m->versions, m->n_versions);
        free(m->reason);
        free(m->name);
        free(m);
    }
    free(r->models);
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->load_mu);
    free(r->root);
    free(r);
}
