/* tandem generate: text from a language model folder (include/tandem/generator.h), the prompt
 * tokenized (and put in the model's chat template) with include/tandem/tokenizer.h. Public API
 * only. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmd_generate.h"
#include "tandem/generator.h"
#include "tandem/tokenizer.h"

static void generate_usage(FILE *f) {
    fprintf(f,
            "usage: tandem generate MODEL_DIR (--prompt TEXT | --prompt-ids LIST) [--chat | --no-chat]\n"
            "                       [--system TEXT] [--max-tokens N] [--max-length N]\n"
            "                       [--temperature T] [--top-k K] [--top-p P]\n"
            "                       [--repetition-penalty R] [--presence-penalty P]\n"
            "                       [--frequency-penalty F] [--seed S] [--stop-id ID]...\n"
            "                       [--ignore-eos] [--threads N] [--json]\n"
            "                       [--device DEV] [--device-memory DEV=SIZE] [--residency R]\n"
            "                       [--kv-type auto|f32|f16|int8|int4]\n\n"
            "Generates text with the language model in MODEL_DIR (an ONNX Runtime GenAI folder:\n"
            "genai_config.json, model.onnx, tokenizer.json; or a Hugging Face optimum export with\n"
            "model.onnx and config.json). Prints the text as it is produced, then a summary on\n"
            "stderr: prompt tokens, prefill tokens/s, decode tokens/s, time to first token.\n"
            "Ctrl-C stops the generation (the summary still comes).\n"
            "  --prompt TEXT      the prompt, tokenized with the folder's tokenizer.json\n"
            "  --prompt-ids LIST  the prompt as comma-separated token ids (no tokenizer needed;\n"
            "                     without one, the generated ids are printed instead of text)\n"
            "  --chat             put the prompt in the model's chat template (tokenizer_config.json\n"
            "                     chat_template) as the user's message, with the generation prompt.\n"
            "                     The default when the folder has a chat template (instruct\n"
            "                     models); --no-chat feeds the prompt as it is\n"
            "  --no-chat          the prompt as it is, even when the folder has a chat template\n"
            "  --system TEXT      a system message before the user's (chat only)\n"
            "  --max-tokens N     generate at most N tokens (default 128)\n"
            "  --max-length N     context of the KV cache (default: prompt + max tokens, at most\n"
            "                     the folder's max_length)\n"
            "  --temperature T    0 (default) = greedy; > 0 samples at that temperature\n"
            "  --top-k K          sample among the K most likely tokens (0 = all)\n"
            "  --top-p P          sample among the most likely tokens whose probability reaches P\n"
            "  --repetition-penalty R  > 1 discourages tokens already in the text (1 = none)\n"
            "  --presence-penalty P    OpenAI's, -2..2: each generated token's logit lowered by P\n"
            "  --frequency-penalty F   OpenAI's, -2..2: ... by F times how often it was generated\n"
            "  --seed S           seed of the sampling (default 0): the same seed, same tokens\n"
            "  --stop-id ID       another token id that ends the generation (repeatable); the\n"
            "                     folder's eos ids and the tokenizer's eos token always do\n"
            "  --ignore-eos       never sample an eos token (its logit is set to -inf), so runs\n"
            "                     have a fixed length\n"
            "  --threads N        intra-op threads (default: all cores)\n"
            "  --device DEV       run the decoder on DEV (e.g. test:0, opencl:0, cuda:0; nodes it\n"
            "                     lacks on the CPU); the KV cache stays in host memory\n"
            "  --device-memory cpu=SIZE  memory budget (e.g. cpu=512MiB): weights, activations and\n"
            "                     the KV cache (max-length long) must fit in it; with --device,\n"
            "                     DEV=SIZE or DEV=P%% (of the weights): weights and activations on\n"
            "                     DEV (the rest streamed or on the CPU). The summary then gives\n"
            "                     each device's peak and the bytes uploaded per decoded token\n"
            "  --residency R      mapped (external data read from disk in place, not counted in the\n"
            "                     budget), streamed / layers, kv=auto|device|host|cpu (where the KV\n"
            "                     cache lives; auto: on the device when the budget holds it, split\n"
            "                     by layer, or with its attention on the CPU); comma-separated\n"
            "  --kv-type T        the KV cache's type: auto (the model's: float32, or float16 for a\n"
            "                     folder converted with --kv-dtype float16), f32 / f16 (must be the\n"
            "                     model's), int8 (8-bit codes, a bfloat16 scale per 32: 68 bytes\n"
            "                     a row of 64), int4 (4-bit codes as GGUF Q4_0: 36 bytes a row of\n"
            "                     64; faster at depth, less exact); int8 / int4: GenAI folders, CPU\n"
            "  --json             print one JSON object at the end instead of streaming: text,\n"
            "                     tokens (the generated ids), prompt_tokens, prefill_tokens_per_s,\n"
            "                     decode_tokens_per_s, ttft_ms, stop_reason\n");
}

#define MAX_STOP 64

typedef struct gen_args {
    const char *dir, *prompt, *prompt_ids, *system, *device_memory, *residency, *device, *kv_type;
    int chat; /* -1 auto, 0 no, 1 yes */
    long max_tokens, max_length, threads, top_k;
    double temperature, top_p, rep, presence, frequency;
    unsigned long long seed;
    int32_t stop[MAX_STOP];
    int n_stop;
    bool json, ignore_eos;
} gen_args;

static bool parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static bool parse_double(const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) return false;
    *out = v;
    return true;
}

static int bad_value(const char *opt, const char *val, const char *want) {
    fprintf(stderr, "tandem: generate: %s '%s': expected %s\n", opt, val, want);
    return 2;
}

/* -1 to go on, else the exit code. */
static int parse_args(int argc, char **argv, gen_args *a) {
    a->chat = -1;
    a->max_tokens = 128;
    a->rep = 1;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long l;
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            generate_usage(stdout);
            return 0;
        } else if (!strcmp(o, "--chat")) {
            a->chat = 1;
        } else if (!strcmp(o, "--no-chat")) {
            a->chat = 0;
        } else if (!strcmp(o, "--json")) {
            a->json = true;
        } else if (!strcmp(o, "--ignore-eos")) {
            a->ignore_eos = true;
        } else if (o[0] == '-' && o[1] == '-' && !v) {
            fprintf(stderr, "tandem: generate: %s needs a value (or is unknown)\n", o);
            generate_usage(stderr);
            return 2;
        } else if (!strcmp(o, "--prompt")) {
            a->prompt = argv[++i];
        } else if (!strcmp(o, "--prompt-ids")) {
            a->prompt_ids = argv[++i];
        } else if (!strcmp(o, "--system")) {
            a->system = argv[++i];
        } else if (!strcmp(o, "--max-tokens")) {
            if (!parse_long(argv[++i], 1, 1 << 24, &a->max_tokens))
                return bad_value(o, argv[i], "an integer >= 1");
        } else if (!strcmp(o, "--max-length")) {
            if (!parse_long(argv[++i], 1, 1 << 24, &a->max_length))
                return bad_value(o, argv[i], "an integer >= 1");
        } else if (!strcmp(o, "--device-memory")) {
            a->device_memory = argv[++i];
        } else if (!strcmp(o, "--device")) {
            a->device = argv[++i];
        } else if (!strcmp(o, "--residency")) {
            a->residency = argv[++i];
        } else if (!strcmp(o, "--kv-type")) {
            a->kv_type = argv[++i];
        } else if (!strcmp(o, "--threads")) {
            if (!parse_long(argv[++i], 0, 4096, &a->threads))
                return bad_value(o, argv[i], "an integer >= 0");
        } else if (!strcmp(o, "--top-k")) {
            if (!parse_long(argv[++i], 0, 1 << 24, &a->top_k))
                return bad_value(o, argv[i], "an integer >= 0");
        } else if (!strcmp(o, "--temperature")) {
            if (!parse_double(argv[++i], 0, 1e6, &a->temperature))
                return bad_value(o, argv[i], "a number >= 0");
        } else if (!strcmp(o, "--top-p")) {
            if (!parse_double(argv[++i], 0, 1, &a->top_p))
                return bad_value(o, argv[i], "a number in [0, 1]");
        } else if (!strcmp(o, "--repetition-penalty")) {
            if (!parse_double(argv[++i], 1e-6, 1e6, &a->rep))
                return bad_value(o, argv[i], "a number > 0");
        } else if (!strcmp(o, "--presence-penalty") || !strcmp(o, "--frequency-penalty")) {
            if (!parse_double(argv[++i], -2, 2, o[2] == 'p' ? &a->presence : &a->frequency))
                return bad_value(o, argv[i], "a number in [-2, 2]");
        } else if (!strcmp(o, "--seed")) {
            char *end;
            errno = 0;
            a->seed = strtoull(argv[++i], &end, 10);
            if (errno || end == argv[i] || *end) return bad_value(o, argv[i], "an integer >= 0");
        } else if (!strcmp(o, "--stop-id")) {
            if (!parse_long(argv[++i], 0, INT32_MAX, &l)) return bad_value(o, argv[i], "a token id");
            if (a->n_stop == MAX_STOP) return bad_value(o, argv[i], "at most 64 stop ids");
            a->stop[a->n_stop++] = (int32_t)l;
        } else if (o[0] == '-') {
            fprintf(stderr, "tandem: generate: unknown option '%s'\n", o);
            generate_usage(stderr);
            return 2;
        } else if (!a->dir) {
            a->dir = o;
        } else {
            fprintf(stderr, "tandem: generate: unexpected argument '%s'\n", o);
            return 2;
        }
    }
    if (!a->dir || (!a->prompt == !a->prompt_ids)) {
        if (a->dir) fprintf(stderr, "tandem: generate: give one of --prompt and --prompt-ids\n");
        generate_usage(stderr);
        return 2;
    }
    return -1;
}

/* ---- the prompt ---- */

static bool file_in(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (f) fclose(f);
    return f != NULL;
}

int cli_parse_ids(const char *s, int32_t **ids, size_t *n) {
    size_t cap = 16, k = 0;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v) return -1;
    while (*s) {
        char *end;
        errno = 0;
        long x = strtol(s, &end, 10);
        if (errno || end == s || x < 0 || x > INT32_MAX || (*end && *end != ',')) {
            free(v);
            return -1;
        }
        if (k == cap) {
            int32_t *nv = realloc(v, (cap *= 2) * sizeof *v);
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv;
        }
        v[k++] = (int32_t)x;
        s = *end ? end + 1 : end;
    }
    if (k == 0) {
        free(v);
        return -1;
    }
    *ids = v;
    *n = k;
    return 0;
}

/* The prompt's ids: --prompt-ids (*owned_by_cli), or --prompt through the chat template and
 * the tokenizer. 0, or an exit code after a message. */
static int prompt_ids(const gen_args *a, const tdm_tokenizer *tok, int32_t **ids, size_t *n,
                      bool *chat_used, bool *owned_by_cli) {
    *chat_used = false;
    *owned_by_cli = false;
    if (a->prompt_ids) {
        if (cli_parse_ids(a->prompt_ids, ids, n)) {
            fprintf(stderr, "tandem: generate: --prompt-ids '%s': expected comma-separated token "
                    "ids\n", a->prompt_ids);
            return 2;
        }
        *owned_by_cli = true;
        return 0;
    }
    const char *tmpl = tdm_tokenizer_chat_template(tok);
    bool chat = a->chat == 1 || (a->chat == -1 && tmpl);
    if (chat && !tmpl) {
        fprintf(stderr, "tandem: generate: --chat: the folder's tokenizer_config.json has no "
                "chat_template\n");
        return 1;
    }
    if (!chat) {
        tdm_status *st = tdm_tokenizer_encode(tok, a->prompt, strlen(a->prompt), true, ids, n);
        return st ? cli_fail(st, "generate: the prompt") : 0;
    }
    tdm_chat_message msgs[2];
    size_t nm = 0;
    if (a->system) msgs[nm++] = (tdm_chat_message){"system", a->system};
    msgs[nm++] = (tdm_chat_message){"user", a->prompt};
    char *text = NULL;
    tdm_status *st = tdm_chat_render(tmpl, msgs, nm, true, tdm_tokenizer_special_text(tok, "bos"),
                                     tdm_tokenizer_special_text(tok, "eos"), &text);
    if (st) return cli_fail(st, "generate: the chat template");
    /* the template writes the special tokens (a BOS too, when the model has one) */
    st = tdm_tokenizer_encode(tok, text, strlen(text), false, ids, n);
    tdm_string_free(text);
    if (st) return cli_fail(st, "generate: the prompt");
    *chat_used = true;
    return 0;
}

/* ---- output ---- */

static void json_string(FILE *f, const char *s, size_t len) {
    fputc('"', f);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

typedef struct stream_ctx {
    tdm_token_stream *ts; /* NULL: no tokenizer (ids printed), or --json */
    bool print_ids;
    tdm_status *err;      /* the stream's first error */
} stream_ctx;

static bool on_token(void *user, int32_t t) {
    stream_ctx *c = user;
    if (c->ts) {
        const char *piece = NULL;
        size_t len = 0;
        tdm_status *st = tdm_token_stream_push(c->ts, t, &piece, &len);
        if (st) {
            c->err = st;
            return false;
        }
        fwrite(piece, 1, len, stdout); /* a piece may hold NUL bytes */
        fflush(stdout);
    } else if (c->print_ids) {
        printf("%d ", t);
        fflush(stdout);
    }
    return true;
}

static tdm_generator *volatile g_sigint_gen; /* the generator Ctrl-C cancels (one per process) */

static void on_sigint(int sig) {
    (void)sig;
    if (g_sigint_gen) tdm_generator_cancel(g_sigint_gen);
}

static double per_s(double n, double ms) { return ms > 0 ? n * 1e3 / ms : 0; }

int cmd_generate(int argc, char **argv) {
    gen_args a;
    memset(&a, 0, sizeof a);
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) return rc;
    tdm_env_options eo = {0};
    eo.api_version = TDM_API_VERSION;
    eo.threads = (int)a.threads;
    tdm_env *env = NULL;
    tdm_tokenizer *tok = NULL;
    tdm_generator *g = NULL;
    tdm_token_stream *ts = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    char *text = NULL;
    size_t text_len = 0;
    bool chat_used = false, ids_cli = false;
    tdm_status *st = tdm_env_create(&eo, &env);
    if (!st && (a.prompt || file_in(a.dir, "tokenizer.json"))) st = tdm_tokenizer_load(a.dir, &tok);
    if (st && !a.prompt && tdm_status_code(st) != TDM_ERR_OUT_OF_MEMORY) {
        /* ids in, ids out: the tokenizer is only for the text */
        fprintf(stderr, "tandem: generate: no text (the tokenizer: [%s] %s); printing token ids\n",
                tdm_code_name(tdm_status_code(st)), tdm_status_message(st));
        tdm_status_free(st);
        st = NULL;
    }
    if (st) {
        rc = cli_fail(st, "generate");
        goto done;
    }
    if ((rc = prompt_ids(&a, tok, &ids, &n_ids, &chat_used, &ids_cli))) goto done;
    {
        int32_t stops[MAX_STOP + 1];
        size_t ns = 0;
        for (int i = 0; i < a.n_stop; i++) stops[ns++] = a.stop[i];
        int32_t eos = tok && !a.ignore_eos ? tdm_tokenizer_special_id(tok, "eos") : -1;
        if (eos >= 0) stops[ns++] = eos;
        tdm_generator_options go;
        memset(&go, 0, sizeof go);
        go.struct_size = sizeof go;
        go.threads = (int)a.threads;
        go.max_length = a.max_length ? (int)a.max_length
                        : (int)(n_ids + (size_t)a.max_tokens > (1u << 24) ? (1u << 24)
                                                                         : n_ids + (size_t)a.max_tokens);
        go.sampling.temperature = (float)a.temperature;
        go.sampling.top_k = (int)a.top_k;
        go.sampling.top_p = (float)a.top_p;
        go.sampling.repetition_penalty = (float)a.rep;
        go.sampling.seed = a.seed;
        go.presence_penalty = (float)a.presence;
        go.frequency_penalty = (float)a.frequency;
        go.stop_ids = stops;
        go.n_stop_ids = ns;
        go.ignore_eos = a.ignore_eos;
        go.device_memory = a.device_memory;
        go.residency = a.residency;
        go.kv_type = a.kv_type;
        go.device = a.device;
        st = tdm_generator_create(env, a.dir, &go, &g);
    }
    if (!st && tok) st = tdm_token_stream_create(tok, true, &ts);
    stream_ctx sc = {a.json ? NULL : ts, !a.json && !tok, NULL};
    g_sigint_gen = g;
    void (*old_sigint)(int) = g ? signal(SIGINT, on_sigint) : SIG_DFL;
    if (!st) st = tdm_generator_append(g, ids, n_ids);
    /* per device: the peak over the whole generation, uploads of the decode steps only */
    int64_t peaks[8] = {0};
    size_t n_dev = g ? tdm_session_monitor_count(tdm_generator_session(g)) : 0;
    if (n_dev > 8) n_dev = 8;
    for (size_t i = 0; !st && i < n_dev; i++) {
        tdm_device_monitor m;
        if (!tdm_session_monitor(tdm_generator_session(g), i, &m, sizeof m)) peaks[i] = m.memory_peak;
    }
    if (!st && g) tdm_session_monitor_reset(tdm_generator_session(g));
    if (!st) st = tdm_generator_generate(g, (size_t)a.max_tokens, on_token, &sc);
    if (g) signal(SIGINT, old_sigint);
    g_sigint_gen = NULL;
    bool cancelled = tdm_status_code(st) == TDM_ERR_CANCELLED;
    if (cancelled) {
        tdm_status_free(st);
        st = NULL;
    }
    if (!st && sc.err) st = sc.err;
    /* the generated ids: after the prompt, without a final stop token */
    size_t n_all = 0, n_gen = 0;
    const int32_t *all = g ? tdm_generator_tokens(g, &n_all) : NULL;
    const int32_t *gen = all ? all + n_ids : NULL;
    n_gen = n_all > n_ids ? n_all - n_ids : 0;
    bool stopped = n_gen && tdm_generator_is_stop_token(g, gen[n_gen - 1]);
    if (stopped) n_gen--;
    if (!st && tok) st = tdm_tokenizer_decode(tok, gen, n_gen, true, &text, &text_len);
    if (st) {
        rc = cli_fail(st, "generate");
        goto done;
    }
    tdm_generator_stats gs;
    tdm_generator_get_stats(g, &gs);
    const char *reason = cancelled                             ? "cancelled"
                         : stopped                             ? "stop_token"
                         : n_gen >= (size_t)a.max_tokens       ? "max_tokens"
                         : (int)n_all >= tdm_generator_max_length(g) ? "max_length"
                                                               : "callback";
    double pp = per_s((double)gs.prompt_tokens, gs.prefill_ms);
    double tg = per_s((double)gs.decode_tokens, gs.decode_ms);
    tdm_device_monitor dm[8];
    for (size_t i = 0; i < n_dev; i++) {
        tdm_status *ms = tdm_session_monitor(tdm_generator_session(g), i, &dm[i], sizeof dm[i]);
        if (ms) {
            tdm_status_free(ms);
            memset(&dm[i], 0, sizeof dm[i]);
            dm[i].device = "?";
        }
        if (dm[i].memory_peak < peaks[i]) dm[i].memory_peak = peaks[i];
    }
    bool show_dev = a.device || a.device_memory;
    if (a.json) {
        printf("{\"text\": ");
        if (text) json_string(stdout, text, text_len);
        else printf("null");
        printf(", \"tokens\": [");
        for (size_t i = 0; i < n_gen; i++) printf("%s%d", i ? ", " : "", gen[i]);
        printf("], \"prompt_tokens\": %zu, \"generated_tokens\": %zu, \"prefill_tokens_per_s\": %.3f, "
               "\"decode_tokens_per_s\": %.3f, \"ttft_ms\": %.3f, \"prefill_ms\": %.3f, "
               "\"decode_ms\": %.3f, \"stop_reason\": \"%s\", \"chat\": %s, \"kv_cache\": \"%s\"",
               n_ids, n_gen, pp, tg, gs.ttft_ms, gs.prefill_ms, gs.decode_ms, reason,
               chat_used ? "true" : "false", tdm_generator_form(g));
        if (show_dev) {
            printf(", \"devices\": [");
            for (size_t i = 0; i < n_dev; i++)
                printf("%s{\"device\": \"%s\", \"memory_peak\": %lld, \"decode_bytes_uploaded\": %lld, "
                       "\"decode_bytes_uploaded_pinned\": %lld, \"decode_bytes_downloaded\": %lld, "
                       "\"decode_kv_bytes_uploaded\": %lld, \"decode_kv_bytes_downloaded\": %lld, "
                       "\"decode_tokens\": %lld, \"bytes_uploaded_per_token\": %.1f, "
                       "\"bytes_downloaded_per_token\": %.1f}", i ? ", " : "",
                       dm[i].device, (long long)dm[i].memory_peak, (long long)dm[i].bytes_uploaded,
                       (long long)dm[i].bytes_uploaded_pinned, (long long)dm[i].bytes_downloaded,
                       (long long)dm[i].kv_bytes_uploaded, (long long)dm[i].kv_bytes_downloaded,
                       (long long)gs.decode_tokens,
                       gs.decode_tokens ? (double)dm[i].bytes_uploaded / (double)gs.decode_tokens : 0.0,
                       gs.decode_tokens ? (double)dm[i].bytes_downloaded / (double)gs.decode_tokens : 0.0);
            printf("]");
            /* the plan's budget object (tdm_session_explain JSON): budgets, streamed bytes */
            char *ex = NULL;
            tdm_status *es = tdm_session_explain(tdm_generator_session(g), TDM_EXPLAIN_JSON, &ex);
            const char *b0 = ex ? strstr(ex, "\"budget\":{") : NULL;
            const char *b1 = b0 ? strstr(b0, ",\"weights\":[") : NULL;
            if (b0 && b1) printf(", \"plan_budget\": %.*s", (int)(b1 - b0 - 9), b0 + 9);
            /* where each layer's KV cache lives, and its copies per token (the last object) */
            const char *k0 = ex ? strstr(ex, ",\"kv_cache\":{") : NULL;
            const char *k1 = k0 ? strstr(k0, ",\"reason\":") : NULL;
            if (k1) k1 = strchr(k1 + 11, '}'); /* (the reason has no braces) */
            if (k0 && k1) printf(", \"kv_placement\": %.*s", (int)(k1 + 1 - (k0 + 12)), k0 + 12);
            tdm_status_free(es);
            tdm_string_free(ex);
        }
        printf("}\n");
    } else {
        printf("\n");
        fflush(stdout);
        fprintf(stderr, "[%zu prompt tokens: prefill %.1f tokens/s; %zu generated: decode %.1f "
                "tokens/s; time to first token %.1f ms; %s]\n", n_ids, pp, n_gen, tg, gs.ttft_ms,
                reason);
        for (size_t i = 0; show_dev && i < n_dev; i++)
            fprintf(stderr, "memory: %s peak %.2f MiB; uploaded %.3f MiB per decoded token (KV cache "
                    "%.3f up, %.3f down)\n", dm[i].device, (double)dm[i].memory_peak / 1048576,
                    gs.decode_tokens ? (double)dm[i].bytes_uploaded / 1048576 / (double)gs.decode_tokens
                                     : 0.0,
                    gs.decode_tokens ? (double)dm[i].kv_bytes_uploaded / 1048576 / (double)gs.decode_tokens
                                     : 0.0,
                    gs.decode_tokens ? (double)dm[i].kv_bytes_downloaded / 1048576 / (double)gs.decode_tokens
                                     : 0.0);
    }
    rc = 0;
done:
    tdm_string_free(text);
    tdm_token_stream_free(ts);
    tdm_generator_free(g);
    tdm_tokenizer_free(tok);
    if (ids_cli) free(ids);
    else tdm_tokens_free(ids);
    tdm_env_free(env);
    return rc;
}
