/*
 * The model repository in Triton's layout:
 *
 *     DIR/NAME/config.pbtxt          optional; without it the config comes from the model
 *     DIR/NAME/VERSION/model.onnx    VERSION a positive integer; the file name can be changed
 *                                    with default_model_filename
 *
 * Loading a model reads its config, picks versions by the version policy, creates one tandem
 * session per instance (instance_group: KIND_CPU → "cpu", KIND_GPU → "cuda:N" or an error
 * when there is no GPU, KIND_AUTO → a GPU when there is one, else the CPU) and starts a
 * scheduler per version. Names are checked and every path is resolved and must stay inside
 * the repository folder (no "..", no symbolic link that leads out).
 *
 * Threading: all functions are thread-safe. Loads and unloads are serialised. A version
 * handed out by sv_repo_get stays valid until sv_version_unref, even across an unload (its
 * scheduler then refuses new requests with 503).
 */
#ifndef TDM_SERVE_REPO_H
#define TDM_SERVE_REPO_H

#include "serve/sched.h"

typedef struct sv_repo sv_repo;

struct sv_version {
    char *model_name;
    int64_t version;
    char vstr[24];
    sv_model_config *cfg;
    sv_sched *sched;        /* NULL for a language model */
    struct sv_llm *llm;     /* a language model (backend tandem_llm, openai.h), else NULL */
    sv_stats stats;
    int refs; /* under the repository's lock */
};

typedef void (*sv_log_fn)(void *user, const char *fmt, ...);

typedef struct sv_repo_options {
    int threads;           /* intra-op threads per instance; 0 = cores / CPU instances */
    sv_log_fn log;         /* may be NULL */
    void *log_user;
} sv_repo_options;

sv_error *sv_repo_create(tdm_env *env, const char *dir, const sv_repo_options *o, sv_repo **out);
/* Unloads every model (waiting for their requests) and frees the repository. */
void sv_repo_free(sv_repo *r);

/* Loads every model folder of the repository; failures are logged and recorded (the model
 * is then UNAVAILABLE with the reason). Returns the number of models that failed. */
int sv_repo_load_all(sv_repo *r);
/* Loads or reloads a model. `config_json` (may be NULL) replaces config.pbtxt. */
sv_error *sv_repo_load(sv_repo *r, const char *name, const char *config_json, size_t config_len);
/* Unloads a model: new requests are refused, accepted ones finish, then it is freed. */
sv_error *sv_repo_unload(sv_repo *r, const char *name);

/* A ready version of a model (`version` NULL or "" = the latest ready one): 404 for an
 * unknown model or version, 503 when it is not ready. The caller must sv_version_unref. */
sv_error *sv_repo_get(sv_repo *r, const char *name, const char *version, sv_version **out);
void sv_version_unref(sv_repo *r, sv_version *v);

/* Whether every model that was asked to load is ready. */
bool sv_repo_ready(sv_repo *r);
/* Ready versions of all models (referenced; release each with sv_version_unref). */
int sv_repo_versions(sv_repo *r, sv_version ***out);
/* Ready versions of one model, newest first, as JSON strings: "1","2" */
void sv_repo_model_versions_json(sv_repo *r, const char *name, sv_buf *b);
/* Repository index JSON array. */
void sv_repo_index_json(sv_repo *r, bool ready_only, sv_buf *b);
/* Answers every queued request of every model with 503 (shutdown after the grace period). */
void sv_repo_cancel_queued(sv_repo *r, const char *why);

#endif
