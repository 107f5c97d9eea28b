/* classify_folder: classifies every PPM/PGM image of a folder with a tandem user pipeline.
 *
 *   decode + resize + normalize  ->  model  ->  top-k
 *   (CPU worker threads)            (the session's devices)   (one CPU thread)
 *
 * and prints one line per image, in file-name order, then per-stage throughput and
 * utilisation (on stderr). --sequential does the same work one image at a time on the calling
 * thread (decode, run, top-k), the way a program without a pipeline would; its lines on
 * stdout are identical, which the example's test checks.
 *
 *   classify_folder DIR [--model M.onnx] [--devices cpu] [--mode latency|throughput|pipeline]
 *                       [--workers N] [--top K] [--sequential]
 *   classify_folder --make-images DIR N [WIDTH HEIGHT]   writes N test images (P6 and P5)
 *
 * The model takes a float32 NCHW image [1, 3, H, W] (the bundled models/default/model.onnx:
 * 64x64, 10 classes); images are resized (bilinear) to H x W and normalised with the ImageNet
 * mean and standard deviation. Only the public API (tandem.h, pipeline.h) is used. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tandem/pipeline.h"
#include "tandem/tandem.h"

#ifndef CLASSIFY_DEFAULT_MODEL
#define CLASSIFY_DEFAULT_MODEL "models/default/model.onnx"
#endif
#define MAX_SIDE 16384
#define MAX_TOP 10

typedef struct app {
    tdm_env *env;
    tdm_session *session;
    const char *in_name, *out_name; /* model input and first output (owned by the model) */
    int H, W;                       /* model input size */
    int top;
    char **files;
    size_t n_files;
    const char *dir;
} app;

/* Per image result, filled by the top-k stage (or the sequential loop). */
typedef struct result {
    int cls[MAX_TOP];
    float prob[MAX_TOP];
} result;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- PPM/PGM (binary P6/P5) ---- */

/* Skips whitespace and # comments; reads one decimal number. */
static int pnm_number(const unsigned char *b, size_t n, size_t *pos, long *out) {
    for (;;) {
        while (*pos < n && (b[*pos] == ' ' || b[*pos] == '\t' || b[*pos] == '\n' || b[*pos] == '\r')) (*pos)++;
        if (*pos < n && b[*pos] == '#') {
            while (*pos < n && b[*pos] != '\n') (*pos)++;
            continue;
        }
        break;
    }
    long v = 0;
    size_t start = *pos;
    while (*pos < n && b[*pos] >= '0' && b[*pos] <= '9' && *pos - start < 9) v = v * 10 + (b[(*pos)++] - '0');
    if (*pos == start) return -1;
    *out = v;
    return 0;
}

/* Decodes a binary PPM (P6) or PGM (P5) into 8-bit RGB (*rgb, w*h*3 bytes, malloc'd). */
static tdm_status *decode_pnm(const char *path, unsigned char **rgb, int *w, int *h) {
    FILE *f = fopen(path, "rb");
    if (!f) return tdm_status_create(TDM_ERR_IO, "%s: %s", path, strerror(errno));
    unsigned char *b = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 65536;
            if (cap > (size_t)3 * MAX_SIDE * MAX_SIDE * 2 + 4096) {
                free(b);
                fclose(f);
                return tdm_status_create(TDM_ERR_LIMIT, "%s: file too large", path);
            }
            unsigned char *nb = realloc(b, cap);
            if (!nb) {
                free(b);
                fclose(f);
                return tdm_status_create(TDM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
            }
            b = nb;
        }
        size_t got = fread(b + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    fclose(f);
    size_t pos = 2;
    long width, height, maxval;
    tdm_status *st = NULL;
    if (n < 2 || b[0] != 'P' || (b[1] != '6' && b[1] != '5'))
        st = tdm_status_create(TDM_ERR_INVALID_ARGUMENT, "%s: not a binary PPM (P6) or PGM (P5) image", path);
    else if (pnm_number(b, n, &pos, &width) || pnm_number(b, n, &pos, &height) || pnm_number(b, n, &pos, &maxval))
        st = tdm_status_create(TDM_ERR_INVALID_ARGUMENT, "%s: bad header", path);
    else if (width < 1 || height < 1 || width > MAX_SIDE || height > MAX_SIDE || maxval < 1 || maxval > 65535)
        st = tdm_status_create(TDM_ERR_INVALID_ARGUMENT, "%s: size %ldx%ld or maxval %ld out of range", path,
                               width, height, maxval);
    if (st) {
        free(b);
        return st;
    }
    pos++; /* the single whitespace after maxval */
    int ch = b[1] == '6' ? 3 : 1, bps = maxval > 255 ? 2 : 1;
    size_t need = (size_t)width * (size_t)height * (size_t)ch * (size_t)bps; /* < 2^32: sides bounded */
    if (pos > n || n - pos < need) {
        free(b);
        return tdm_status_create(TDM_ERR_INVALID_ARGUMENT, "%s: truncated (%zu of %zu pixel bytes)", path,
                                 pos > n ? 0 : n - pos, need);
    }
    unsigned char *out = malloc((size_t)width * (size_t)height * 3);
    if (!out) {
        free(b);
        return tdm_status_create(TDM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    }
    const unsigned char *px = b + pos;
    for (size_t i = 0; i < (size_t)width * (size_t)height; i++)
        for (int c = 0; c < 3; c++) {
            size_t k = (i * (size_t)ch + (size_t)(ch == 3 ? c : 0)) * (size_t)bps;
            long v = bps == 2 ? (px[k] << 8 | px[k + 1]) : px[k];
            out[i * 3 + (size_t)c] = (unsigned char)((v * 255 + maxval / 2) / maxval);
        }
    free(b);
    *rgb = out;
    *w = (int)width;
    *h = (int)height;
    return NULL;
}

/* Bilinear resize to H x W and ImageNet normalisation into a new [1, 3, H, W] tensor. */
static tdm_status *preprocess(const app *a, const unsigned char *rgb, int w, int h, tdm_tensor **out) {
    static const float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};
    int64_t dims[4] = {1, 3, a->H, a->W};
    tdm_tensor *t = NULL;
    tdm_status *st = tdm_tensor_create(a->env, TDM_FLOAT, 4, dims, &t);
    if (st) return st;
    float *dst = tdm_tensor_data(t);
    for (int y = 0; y < a->H; y++) {
        float sy = ((float)y + 0.5f) * (float)h / (float)a->H - 0.5f;
        if (sy < 0) sy = 0;
        int y0 = (int)sy, y1 = y0 + 1 < h ? y0 + 1 : h - 1;
        float fy = sy - (float)y0;
        for (int x = 0; x < a->W; x++) {
            float sx = ((float)x + 0.5f) * (float)w / (float)a->W - 0.5f;
            if (sx < 0) sx = 0;
            int x0 = (int)sx, x1 = x0 + 1 < w ? x0 + 1 : w - 1;
            float fx = sx - (float)x0;
            for (int c = 0; c < 3; c++) {
                float p00 = rgb[((size_t)y0 * (size_t)w + (size_t)x0) * 3 + (size_t)c];
                float p01 = rgb[((size_t)y0 * (size_t)w + (size_t)x1) * 3 + (size_t)c];
                float p10 = rgb[((size_t)y1 * (size_t)w + (size_t)x0) * 3 + (size_t)c];
                float p11 = rgb[((size_t)y1 * (size_t)w + (size_t)x1) * 3 + (size_t)c];
                float v = (p00 * (1 - fx) + p01 * fx) * (1 - fy) + (p10 * (1 - fx) + p11 * fx) * fy;
                dst[((size_t)c * (size_t)a->H + (size_t)y) * (size_t)a->W + (size_t)x] = (v / 255.0f - mean[c]) / stdv[c];
            }
        }
    }
    *out = t;
    return NULL;
}

static void topk(const tdm_tensor *scores, int k, result *r) {
    const float *p = tdm_tensor_data_const(scores);
    int64_t n = tdm_tensor_element_count(scores);
    for (int j = 0; j < k; j++) {
        r->cls[j] = -1;
        r->prob[j] = 0;
    }
    for (int64_t i = 0; i < n; i++) {
        for (int j = 0; j < k; j++) {
            if (r->cls[j] < 0 || p[i] > r->prob[j]) {
                memmove(&r->cls[j + 1], &r->cls[j], (size_t)(k - j - 1) * sizeof r->cls[0]);
                memmove(&r->prob[j + 1], &r->prob[j], (size_t)(k - j - 1) * sizeof r->prob[0]);
                r->cls[j] = (int)i;
                r->prob[j] = p[i];
                break;
            }
        }
    }
}

static char *join_path(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* ---- pipeline stages ---- */

static tdm_status *stage_decode(void *user, tdm_pipeline_item *it) {
    const app *a = user;
    size_t index = (size_t)(uintptr_t)tdm_pipeline_item_user(it);
    char *path = join_path(a->dir, a->files[index]);
    if (!path) return tdm_status_create(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    unsigned char *rgb = NULL;
    int w = 0, h = 0;
    tdm_status *st = decode_pnm(path, &rgb, &w, &h);
    free(path);
    tdm_tensor *t = NULL;
    if (!st) st = preprocess(a, rgb, w, h, &t);
    free(rgb);
    if (!st) st = tdm_pipeline_item_set_tensor(it, a->in_name, t);
    return st;
}

typedef struct topk_ctx {
    const app *a;
    result *results;
} topk_ctx;

static tdm_status *stage_topk(void *user, tdm_pipeline_item *it) {
    topk_ctx *c = user;
    size_t index = (size_t)(uintptr_t)tdm_pipeline_item_user(it);
    tdm_tensor *scores = tdm_pipeline_item_tensor(it, c->a->out_name);
    if (!scores || tdm_tensor_dtype(scores) != TDM_FLOAT)
        return tdm_status_create(TDM_ERR_INVALID_MODEL, "the model's output '%s' is not float32", c->a->out_name);
    topk(scores, c->a->top, &c->results[index]);
    return NULL;
}

static void print_result(const app *a, size_t i, const result *r, const tdm_status *st) {
    if (st) {
        printf("%s error: %s\n", a->files[i], tdm_status_message(st));
        return;
    }
    printf("%s top1=%d score=%.4f top%d=", a->files[i], r->cls[0], r->prob[0], a->top);
    for (int j = 0; j < a->top; j++) printf("%s%d", j ? "," : "", r->cls[j]);
    printf("\n");
}

/* ---- the two ways of running ---- */

static tdm_status *run_sequential(app *a, int *errors) {
    double t0 = now_s(), t_dec = 0, t_run = 0, t_top = 0;
    for (size_t i = 0; i < a->n_files; i++) {
        double s0 = now_s();
        char *path = join_path(a->dir, a->files[i]);
        unsigned char *rgb = NULL;
        int w = 0, h = 0;
        tdm_tensor *x = NULL, *y = NULL;
        tdm_status *st = path ? decode_pnm(path, &rgb, &w, &h) : tdm_status_create(TDM_ERR_OUT_OF_MEMORY, "out of memory");
        if (!st) st = preprocess(a, rgb, w, h, &x);
        free(path);
        free(rgb);
        double s1 = now_s();
        if (!st) st = tdm_session_run(a->session, 1, &a->in_name, (const tdm_tensor *const *)&x, 1, &a->out_name, &y);
        double s2 = now_s();
        result r;
        if (!st) topk(y, a->top, &r);
        t_dec += s1 - s0;
        t_run += s2 - s1;
        t_top += now_s() - s2;
        print_result(a, i, &r, st);
        if (st) (*errors)++;
        tdm_status_free(st);
        tdm_tensor_free(x);
        tdm_tensor_free(y);
    }
    double wall = now_s() - t0;
    fprintf(stderr, "sequential: %zu images in %.3f s, %.1f images/s (decode+pre %.1f ms, model %.1f ms, "
            "top-k %.1f ms per image)\n", a->n_files, wall, (double)a->n_files / wall,
            1e3 * t_dec / (double)a->n_files, 1e3 * t_run / (double)a->n_files, 1e3 * t_top / (double)a->n_files);
    return NULL;
}

typedef struct feeder {
    tdm_pipeline *p;
    size_t n;
    tdm_status *st;
} feeder;

static void *feed(void *arg) {
    feeder *f = arg;
    for (size_t i = 0; i < f->n && !f->st; i++) {
        tdm_pipeline_item *it = NULL;
        f->st = tdm_pipeline_item_create(f->p, (void *)(uintptr_t)i, &it);
        if (!f->st) f->st = tdm_pipeline_submit(f->p, it, -1, NULL);
        if (f->st) tdm_pipeline_item_free(it);
    }
    tdm_pipeline_close(f->p);
    return NULL;
}

static tdm_status *run_pipeline(app *a, int workers, int *errors) {
    result *results = calloc(a->n_files ? a->n_files : 1, sizeof *results);
    if (!results) return tdm_status_create(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    topk_ctx tc = {a, results};
    tdm_pipeline *p = NULL;
    tdm_pipeline_options po = {TDM_API_VERSION, 2 * workers, NULL, NULL};
    double t0 = now_s();
    tdm_status *st = tdm_pipeline_create(a->env, &po, &p);
    if (!st) st = tdm_pipeline_add_callback_stage(p, "decode+resize+normalize", workers, stage_decode, a);
    /* two requests in flight: a throughput-mode session has several devices to keep busy */
    if (!st) st = tdm_pipeline_add_model_stage(p, "model", 2, a->session);
    if (!st) st = tdm_pipeline_add_callback_stage(p, "top-k", 1, stage_topk, &tc);
    if (!st) st = tdm_pipeline_start(p);
    pthread_t th;
    feeder f = {p, a->n_files, NULL};
    if (!st && pthread_create(&th, NULL, feed, &f) != 0) st = tdm_status_create(TDM_ERR_RUNTIME, "cannot start a thread");
    else if (!st) {
        for (;;) {
            tdm_pipeline_item *it = NULL;
            if ((st = tdm_pipeline_receive(p, -1, &it)) || !it) break;
            size_t i = (size_t)(uintptr_t)tdm_pipeline_item_user(it);
            print_result(a, i, &results[i], tdm_pipeline_item_status(it));
            if (tdm_pipeline_item_status(it)) (*errors)++;
            tdm_pipeline_item_free(it);
        }
        if (st) tdm_pipeline_cancel(p);
        pthread_join(th, NULL);
        if (!st) st = f.st;
        else tdm_status_free(f.st);
    }
    double wall = now_s() - t0;
    if (!st) {
        fprintf(stderr, "pipeline: %zu images in %.3f s, %.1f images/s\n", a->n_files, wall,
                (double)a->n_files / wall);
        fprintf(stderr, "%-24s %7s %7s %10s %6s %12s %9s\n", "stage", "workers", "items", "busy ms", "util",
                "queue wait", "items/s");
        for (size_t k = 0; k < tdm_pipeline_stage_count(p); k++) {
            tdm_stage_stats ss;
            if (tdm_pipeline_stage_stats(p, k, &ss)) continue;
            fprintf(stderr, "%-24s %7d %7lld %10.1f %5.0f%% %9.2f ms %9.1f\n", ss.name, ss.workers,
                    (long long)ss.items, ss.busy_ms, 100 * ss.utilisation, ss.queue_wait_ms, ss.items_per_s);
        }
    }
    tdm_pipeline_free(p);
    free(results);
    return st;
}

/* ---- test images ---- */

static int make_images(const char *dir, int n, int w, int h) {
    for (int i = 0; i < n; i++) {
        char path[4096];
        bool gray = i % 4 == 3;
        snprintf(path, sizeof path, "%s/img%03d.%s", dir, i, gray ? "pgm" : "ppm");
        FILE *f = fopen(path, "wb");
        if (!f) {
            fprintf(stderr, "%s: %s\n", path, strerror(errno));
            return 1;
        }
        int iw = w + 7 * i, ih = h + 3 * i; /* different sizes */
        fprintf(f, "P%c\n# tandem test image %d\n%d %d\n255\n", gray ? '5' : '6', i, iw, ih);
        for (int y = 0; y < ih; y++)
            for (int x = 0; x < iw; x++) {
                unsigned char px[3] = {(unsigned char)((x * (i + 1) + y) & 255),
                                       (unsigned char)((y * (i + 2) ^ x) & 255),
                                       (unsigned char)(((x + y) * (3 + i)) & 255)};
                fwrite(px, 1, gray ? 1 : 3, f);
            }
        if (fclose(f)) {
            fprintf(stderr, "%s: write failed\n", path);
            return 1;
        }
    }
    return 0;
}

static int by_name(const void *x, const void *y) { return strcmp(*(char *const *)x, *(char *const *)y); }

static int list_images(app *a) {
    DIR *d = opendir(a->dir);
    if (!d) {
        fprintf(stderr, "%s: %s\n", a->dir, strerror(errno));
        return 1;
    }
    size_t cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 5 || (strcmp(e->d_name + len - 4, ".ppm") && strcmp(e->d_name + len - 4, ".pgm"))) continue;
        if (a->n_files == cap) {
            cap = cap ? cap * 2 : 64;
            char **nf = realloc(a->files, cap * sizeof *nf);
            if (!nf) break;
            a->files = nf;
        }
        if (!(a->files[a->n_files] = strdup(e->d_name))) break;
        a->n_files++;
    }
    closedir(d);
    qsort(a->files, a->n_files, sizeof *a->files, by_name);
    return 0;
}

static int usage(void) {
    fprintf(stderr, "usage: classify_folder DIR [--model M.onnx] [--devices LIST] [--mode latency|throughput|pipeline]\n"
                    "                           [--workers N] [--top K] [--sequential]\n"
                    "       classify_folder --make-images DIR N [WIDTH HEIGHT]\n");
    return 2;
}

int main(int argc, char **argv) {
    if (argc >= 4 && !strcmp(argv[1], "--make-images")) {
        int n = atoi(argv[3]), w = argc > 4 ? atoi(argv[4]) : 96, h = argc > 5 ? atoi(argv[5]) : 80;
        if (n < 1 || n > 100000 || w < 1 || h < 1 || w > 8192 || h > 8192) return usage();
        return make_images(argv[2], n, w, h);
    }
    app a = {0};
    const char *model = CLASSIFY_DEFAULT_MODEL, *devices = "cpu", *mode = "latency";
    int workers = 4, sequential = 0;
    a.top = 3;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--model") && v) model = argv[++i];
        else if (!strcmp(argv[i], "--devices") && v) devices = argv[++i];
        else if (!strcmp(argv[i], "--mode") && v) mode = argv[++i];
        else if (!strcmp(argv[i], "--workers") && v) workers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--top") && v) a.top = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sequential")) sequential = 1;
        else if (argv[i][0] != '-' && !a.dir) a.dir = argv[i];
        else return usage();
    }
    if (!a.dir || workers < 1 || workers > 64 || a.top < 1 || a.top > MAX_TOP) return usage();
    if (list_images(&a)) return 1;
    tdm_session_options so;
    memset(&so, 0, sizeof so);
    so.api_version = TDM_API_VERSION;
    so.devices = devices;
    so.opt_level = 1;
    so.mode = !strcmp(mode, "throughput") ? TDM_MODE_THROUGHPUT : !strcmp(mode, "pipeline") ? TDM_MODE_PIPELINE
                                                                                             : TDM_MODE_LATENCY;
    tdm_value_desc in, out;
    int errors = 0;
    tdm_status *st = tdm_env_create(NULL, &a.env);
    if (!st) st = tdm_session_create(a.env, model, &so, &a.session);
    if (!st) st = tdm_model_input(tdm_session_model(a.session), 0, &in);
    if (!st) st = tdm_model_output(tdm_session_model(a.session), 0, &out);
    if (!st && (in.rank != 4 || in.dims[1] != 3 || in.dims[2] < 1 || in.dims[3] < 1 || in.dtype != TDM_FLOAT))
        st = tdm_status_create(TDM_ERR_INVALID_MODEL, "the model's input '%s' is not a float32 [N, 3, H, W] image",
                               in.name);
    if (!st) {
        a.in_name = in.name;
        a.out_name = out.name;
        a.H = (int)in.dims[2];
        a.W = (int)in.dims[3];
        st = sequential ? run_sequential(&a, &errors) : run_pipeline(&a, workers, &errors);
    }
    int rc = 0;
    if (st) {
        fprintf(stderr, "classify_folder: %s\n", tdm_status_message(st));
        tdm_status_free(st);
        rc = 1;
    }
    tdm_session_free(a.session);
    tdm_env_free(a.env);
    for (size_t i = 0; i < a.n_files; i++) free(a.files[i]);
    free(a.files);
    return rc ? rc : errors ? 3 : 0;
}
