/* tandem serve: a KServe v2 / Triton-compatible HTTP inference server (src/serve/). */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "serve/server.h"

#define MAX_LOAD_MODELS 256

static void serve_usage(FILE *f) {
    fprintf(f,
            "usage: tandem serve --model-repository DIR [--http-port 8000] [--metrics-port 8002]\n"
            "                    [--host 127.0.0.1] [--max-body-mb 64] [options]\n\n"
            "Serves the models of a Triton-style model repository (DIR/NAME/config.pbtxt,\n"
            "DIR/NAME/VERSION/model.onnx) over HTTP with the KServe v2 protocol and Triton's\n"
            "extensions (binary tensor data, model repository, configuration, statistics), a\n"
            "dynamic batcher, and Prometheus metrics on GET /metrics of the metrics port.\n"
            "Language models (config.pbtxt backend: \"tandem_llm\", the model folder as tandem\n"
            "generate takes it in DIR/NAME/1/) are served with OpenAI's API on the same port:\n"
            "POST /v1/completions, POST /v1/chat/completions (stream: true for server-sent\n"
            "events), GET /v1/models; continuous batching over a paged KV cache; engine options\n"
            "from the config's parameters (max_batch, max_step_tokens, block_size, kv_blocks,\n"
            "kv_memory_mb, max_length, threads, no_batching, no_prefix_cache, max_waiting,\n"
            "kv_cache_dtype: auto, f32, f16, int8 or int4, the paged cache's element type).\n"
            "SIGTERM or SIGINT stops it after the accepted requests are answered.\n\n"
            "  --model-repository DIR  the model repository (required)\n"
            "  --host ADDR             address to listen on (default 127.0.0.1)\n"
            "  --http-port N           KServe v2 HTTP port (default 8000; 0 = any free port)\n"
            "  --metrics-port N        metrics port (default 8002; 0 = any free port; -1 = off)\n"
            "  --max-body-mb N         largest request body, also after gzip/deflate (default 64)\n"
            "  --http-threads N        HTTP threads (default 4)\n"
            "  --threads N             intra-op threads per model instance (default: cores /\n"
            "                          instances of the model)\n"
            "  --connection-timeout S  close idle connections after S seconds (default 60)\n"
            "  --header-timeout S      a request's headers must arrive within S seconds of its\n"
            "                          first byte (default 5)\n"
            "  --keep-alive 0|1        1 (default): keep connections open between requests; 0:\n"
            "                          close after each answer\n"
            "  --check-heads 0|1       1 (default): every request head of a kept-alive connection\n"
            "                          is checked before libmicrohttpd reads it, so that transport\n"
            "                          errors come back as JSON; 0: only a connection's first\n"
            "                          (later bad heads get libmicrohttpd's HTML pages)\n"
            "  --request-timeout S     a request body must arrive within S seconds (default 120)\n"
            "  --min-upload-kbps N     after --header-timeout, a body must average N KiB/s or\n"
            "                          more (default 16; 0 = no minimum)\n"
            "  --max-connections N     open connections; when all are taken, the connection idle\n"
            "                          longest closes for a new one (default: from the\n"
            "                          descriptor limit, which is raised to its hard limit)\n"
            "  --max-connections-per-ip N  open connections per client address (default 0 = any)\n"
            "  --request-memory MB     memory for request bodies being received and parsed, all\n"
            "                          together; past it, 503 with Retry-After (default RAM / 8)\n"
            "  --max-json-mb N         largest JSON of a request, not counting the tensors'\n"
            "                          \"data\" arrays of numbers, which are read straight into\n"
            "                          the tensors (default 8)\n"
            "  --shutdown-timeout S    on SIGTERM, wait S seconds for accepted requests before\n"
            "                          answering still-queued ones with 503 (default 30)\n"
            "  --model-control-mode M  none (load every model at start, default) or explicit\n"
            "                          (load only --load-model ones); load/unload work in both\n"
            "  --load-model NAME       with explicit mode: load NAME at start (repeatable)\n"
            "  --exit-on-error BOOL    stop when a model fails to load at start (default true)\n");
}

static bool parse_int(const char *s, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = (int)v;
    return true;
}

int cmd_serve(int argc, char **argv) {
    sv_serve_options o = sv_serve_defaults();
    const char *load[MAX_LOAD_MODELS];
    int n_load = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            serve_usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "tandem serve: unknown option or missing value: %s\n\n", a);
            serve_usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        int n = 0;
        bool ok = true;
        if (!strcmp(a, "--model-repository")) {
            o.model_repository = v;
        } else if (!strcmp(a, "--host")) {
            o.host = v;
        } else if (!strcmp(a, "--http-port")) {
            ok = parse_int(v, 0, 65535, &o.http_port);
        } else if (!strcmp(a, "--metrics-port")) {
            ok = parse_int(v, -1, 65535, &o.metrics_port);
        } else if (!strcmp(a, "--max-body-mb")) {
            ok = parse_int(v, 1, 1 << 16, &n);
            o.max_body_bytes = (size_t)n << 20;
        } else if (!strcmp(a, "--http-threads")) {
            ok = parse_int(v, 1, 256, &o.http_threads);
        } else if (!strcmp(a, "--threads")) {
            ok = parse_int(v, 0, 1024, &o.threads);
        } else if (!strcmp(a, "--connection-timeout")) {
            ok = parse_int(v, 1, 86400, &o.connection_timeout_s);
        } else if (!strcmp(a, "--keep-alive")) {
            ok = parse_int(v, 0, 1, &n);
            o.no_keep_alive = n == 0;
        } else if (!strcmp(a, "--check-heads")) {
            ok = parse_int(v, 0, 1, &n);
            o.no_head_checks = n == 0;
        } else if (!strcmp(a, "--header-timeout")) {
            ok = parse_int(v, 1, 86400, &o.header_timeout_s);
        } else if (!strcmp(a, "--min-upload-kbps")) {
            ok = parse_int(v, 0, 1 << 20, &n);
            o.min_upload_rate = (size_t)n << 10;
        } else if (!strcmp(a, "--max-connections")) {
            ok = parse_int(v, 1, 1 << 20, &o.max_connections);
        } else if (!strcmp(a, "--max-connections-per-ip")) {
            ok = parse_int(v, 0, 1 << 20, &o.max_connections_per_ip);
        } else if (!strcmp(a, "--request-memory")) {
            ok = parse_int(v, 1, 1 << 24, &n);
            o.request_memory = (size_t)n << 20;
        } else if (!strcmp(a, "--max-json-mb")) {
            ok = parse_int(v, 1, 1 << 16, &n);
            o.max_json_bytes = (size_t)n << 20;
        } else if (!strcmp(a, "--request-timeout")) {
            ok = parse_int(v, 0, 86400, &o.request_timeout_s);
        } else if (!strcmp(a, "--shutdown-timeout")) {
            ok = parse_int(v, 0, 86400, &o.shutdown_timeout_s);
        } else if (!strcmp(a, "--model-control-mode")) {
            ok = !strcmp(v, "none") || !strcmp(v, "explicit");
            o.explicit_mode = !strcmp(v, "explicit");
        } else if (!strcmp(a, "--load-model")) {
            ok = n_load < MAX_LOAD_MODELS;
            if (ok) load[n_load++] = v;
        } else if (!strcmp(a, "--exit-on-error")) {
            ok = !strcmp(v, "true") || !strcmp(v, "false");
            o.exit_on_error = !strcmp(v, "true");
        } else {
            fprintf(stderr, "tandem serve: unknown option %s\n\n", a);
            serve_usage(stderr);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "tandem serve: bad value for %s: '%s'\n", a, v);
            return 2;
        }
    }
    if (!o.model_repository) {
        fprintf(stderr, "tandem serve: --model-repository is required\n\n");
        serve_usage(stderr);
        return 2;
    }
    if (n_load && !o.explicit_mode) {
        fprintf(stderr, "tandem serve: --load-model needs --model-control-mode explicit\n");
        return 2;
    }
    o.load_models = load;
    o.n_load_models = n_load;
    return sv_serve_main(&o);
}
