/*
 * Triton model configuration (the subset tandem serve reads) and its completion from the
 * ONNX model. Fields not listed here are rejected when they change behaviour tandem does not
 * have (sequence_batching, ensemble_scheduling, ragged batches, shape tensors) and ignored
 * with a note when they only tune another backend (optimization, model_warmup, ...).
 */
#ifndef TDM_SERVE_CONFIG_H
#define TDM_SERVE_CONFIG_H

#include "serve/pbtxt.h"

#define SV_MAX_IO 256          /* inputs or outputs per model */
#define SV_MAX_INSTANCES 64    /* instances per model version */
#define SV_MAX_PRIORITY 64     /* priority levels */

typedef struct sv_io_config {
    char *name;
    tdm_dtype dtype;
    int rank; /* without the batch dimension when max_batch_size > 0 */
    int64_t dims[TDM_MAX_RANK];
    bool has_reshape;
    int reshape_rank;
    int64_t reshape[TDM_MAX_RANK];
    bool optional;
} sv_io_config;

typedef enum sv_kind { SV_KIND_AUTO, SV_KIND_CPU, SV_KIND_GPU, SV_KIND_MODEL } sv_kind;

typedef struct sv_instance_group {
    char *name;
    sv_kind kind;
    int count;
    int n_gpus;
    int gpus[16];
} sv_instance_group;

typedef struct sv_queue_policy {
    bool delay;                   /* timeout_action: DELAY (else REJECT) */
    uint64_t default_timeout_us;  /* 0 = none */
    bool allow_timeout_override;
    uint32_t max_queue_size;      /* 0 = unlimited */
} sv_queue_policy;

typedef enum sv_version_policy { SV_VP_LATEST, SV_VP_ALL, SV_VP_SPECIFIC } sv_version_policy;

typedef struct sv_param {
    char *key, *value;
} sv_param;

typedef struct sv_model_config {
    char *name;
    char *platform;
    char *backend;
    char *default_model_filename;
    int max_batch_size;
    sv_version_policy vp;
    int vp_latest;            /* num_versions for LATEST */
    int n_vp_versions;
    int64_t vp_versions[64];  /* for SPECIFIC */
    int n_inputs, n_outputs;
    sv_io_config *inputs, *outputs;
    int n_groups;
    sv_instance_group *groups;
    bool dynamic_batching;
    int n_preferred;
    int preferred[32];
    uint64_t max_queue_delay_us;
    bool preserve_ordering;
    uint32_t priority_levels;     /* 0 = one level */
    uint32_t default_priority;
    sv_queue_policy default_policy;
    sv_queue_policy *level_policy; /* priority_levels + 1 entries when priority_levels > 0 */
    int n_params;
    sv_param *params;
    bool inputs_given, outputs_given; /* the config named them (else completed from the model) */
    bool max_batch_given;             /* else derived from the model (Triton's auto-complete) */
} sv_model_config;

/* Parses a configuration text (config.pbtxt, or with `json` the JSON "config" of a load
 * request) and reads it: sv_pb_parse / sv_pb_from_json, then sv_config_from_tree. A pure
 * function of the text, used by the repository and by tests/fuzz/fuzz_config.c. */
sv_error *sv_config_parse(const char *text, size_t len, bool json, const char *dir_name,
                          sv_model_config **out);
/* Reads a config tree. `dir_name` is the model's folder name (config name must match). */
sv_error *sv_config_from_tree(const sv_pb_msg *tree, const char *dir_name, sv_model_config **out);
/* A default config for a model folder without config.pbtxt. */
sv_error *sv_config_default(const char *dir_name, sv_model_config **out);
/* Completes and checks the config against the model: fills inputs/outputs that the config
 * does not name, derives max_batch_size (and enables the dynamic batcher) when the config
 * does not give it and every input and output has a dynamic first dimension, checks names,
 * types and shapes. 400 on mismatch. */
sv_error *sv_config_complete(sv_model_config *c, const tdm_model *model);
/* A parameter value, or NULL. */
const char *sv_config_param(const sv_model_config *c, const char *key);
/* The config as Triton's JSON (for GET .../config). */
void sv_config_to_json(const sv_model_config *c, sv_buf *b);
void sv_config_free(sv_model_config *c);

#endif
