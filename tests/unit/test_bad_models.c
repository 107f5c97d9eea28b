/* Malformed models: every case in tests/bad_models/CASE/ (made by tools/make_bad_models.py) must
 * be rejected through the public API with the status code and message named in CASE/expect.txt,
 * from the file (tdm_model_load, tdm_session_create) and from memory
 * (tdm_model_load_from_buffer with the case folder as base_dir), without leaking: the
 * environment's allocator hook counts live blocks.
 *
 * Cases that git cannot hold are made here at run time: a hard-linked external data file, and a
 * graph input type nested 100k levels deep (~700 KB of protobuf). External data loaded from a
 * buffer without a base folder must be refused too. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "tandem/tandem.h"

#define BAD_DIR TANDEM_SOURCE_DIR "/tests/bad_models"
#define MIN_CASES 20 /* the directory must not silently shrink */

#include "counting_alloc.h"

typedef struct fixture {
    counter count;
    tdm_env *env;
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    if (!f) return -1;
    tdm_env_options o = {0};
    o.api_version = TDM_API_VERSION;
    o.allocator.alloc = c_alloc;
    o.allocator.free = c_free;
    o.allocator.user = &f->count;
    o.threads = 1;
    tdm_status *st = tdm_env_create(&o, &f->env);
    if (st) {
        fprintf(stderr, "tdm_env_create: %s\n", tdm_status_message(st));
        tdm_status_free(st);
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    tdm_env_free(f->env);
    long live = atomic_load(&f->count.live);
    free(f);
    if (live != 0) {
        fprintf(stderr, "%ld blocks still allocated after tdm_env_free\n", live);
        return -1;
    }
    return 0;
}

/* ---- helpers ---- */

typedef struct expect {
    char code[64];
    char substr[256];
    int session_only; /* tdm_model_load may succeed */
} expect;

static void chomp(char *s) {
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r')) s[--n] = 0;
}

static int read_expect(const char *dir, expect *e) {
    char path[4096], line[512];
    snprintf(path, sizeof path, "%s/expect.txt", dir);
    FILE *fp = fopen(path, "r");
    if (!fp) return -1;
    memset(e, 0, sizeof *e);
    int n = 0;
    while (fgets(line, sizeof line, fp)) {
        chomp(line);
        if (n == 0) snprintf(e->code, sizeof e->code, "%s", line);
        else if (n == 1) snprintf(e->substr, sizeof e->substr, "%s", line);
        else if (n == 2 && strcmp(line, "session") == 0) e->session_only = 1;
        n++;
    }
    fclose(fp);
    return n >= 2 ? 0 : -1;
}

static void *read_all(const char *path, size_t *size) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t r;
    while (buf && (r = fread(buf + n, 1, cap - n, fp)) > 0) {
        n += r;
        if (n == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(fp);
    *size = n;
    return buf;
}

static int write_all(const char *path, const void *data, size_t size) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return -1;
    int ok = fwrite(data, 1, size, fp) == size;
    return (fclose(fp) == 0 && ok) ? 0 : -1;
}

/* Checks a failed call; returns 0 when `st` matches, and prints why not otherwise. Frees st. */
static int check_status(const char *what, const char *name, tdm_status *st, const expect *e) {
    if (!st) {
        fprintf(stderr, "[%s] %s: succeeded, expected [%s] ...%s...\n", name, what, e->code, e->substr);
        return -1;
    }
    const char *code = tdm_code_name(tdm_status_code(st));
    const char *msg = tdm_status_message(st);
    int bad = strcmp(code, e->code) != 0 || strstr(msg, e->substr) == NULL;
    if (bad)
        fprintf(stderr, "[%s] %s: got [%s] %s\n            expected [%s] ...%s...\n", name, what,
                code, msg, e->code, e->substr);
    else if (getenv("TDM_TEST_VERBOSE"))
        printf("  %-28s %-28s [%s] %s\n", name, what, code, msg);
    tdm_status_free(st);
    return bad ? -1 : 0;
}

/* Loads one case every way; returns the number of mismatches. */
static int run_case(fixture *f, const char *name, const char *dir, const expect *e) {
    char path[4096];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    int failures = 0;
    long live0 = atomic_load(&f->count.live);

    tdm_model *m = NULL;
    tdm_status *st = tdm_model_load(f->env, path, &m);
    if (st || !e->session_only) failures += check_status("tdm_model_load", name, st, e) != 0;
    tdm_model_free(m);

    size_t size = 0;
    void *buf = read_all(path, &size);
    if (!buf) {
        fprintf(stderr, "[%s] cannot read %s\n", name, path);
        return failures + 1;
    }
    m = NULL;
    st = tdm_model_load_from_buffer(f->env, buf, size, dir, &m);
    if (st || !e->session_only)
        failures += check_status("tdm_model_load_from_buffer", name, st, e) != 0;
    tdm_model_free(m);
    free(buf);

    tdm_session *s = NULL;
    st = tdm_session_create(f->env, path, NULL, &s);
    failures += check_status("tdm_session_create", name, st, e) != 0;
    if (s) {
        fprintf(stderr, "[%s] tdm_session_create set its out-parameter on failure\n", name);
        tdm_session_free(s);
        failures++;
    }

    long live1 = atomic_load(&f->count.live);
    if (live1 != live0) {
        fprintf(stderr, "[%s] %ld blocks leaked\n", name, live1 - live0);
        failures++;
    }
    return failures;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* ---- tests ---- */

static void test_bad_model_directory(void **state) {
    fixture *f = *state;
    DIR *d = opendir(BAD_DIR);
    if (!d) fail_msg("cannot open %s: %s (run tools/make_bad_models.py)", BAD_DIR, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char dir[2048];
        struct stat sb;
        snprintf(dir, sizeof dir, "%s/%s", BAD_DIR, de->d_name);
        if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 32;
            names = realloc(names, cap * sizeof *names);
            assert_non_null(names);
        }
        names[n++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_names); /* stable order, whatever readdir gives */

    int failures = 0, cases = 0;
    for (size_t i = 0; i < n; i++) {
        char dir[2048];
        snprintf(dir, sizeof dir, "%s/%s", BAD_DIR, names[i]);
        expect e;
        if (read_expect(dir, &e) != 0) {
            fprintf(stderr, "[%s] missing or short expect.txt\n", names[i]);
            failures++;
        } else {
            int fails = run_case(f, names[i], dir, &e);
            printf("%-32s %s\n", names[i], fails ? "FAIL" : "ok");
            failures += fails != 0;
            cases++;
        }
        free(names[i]);
    }
    free(names);
    printf("%d bad-model cases, %d failed\n", cases, failures);
    assert_true(cases >= MIN_CASES);
    assert_int_equal(failures, 0);
}

/* External data needs a base folder; from memory without one it must be refused. */
static void test_buffer_without_base_dir(void **state) {
    fixture *f = *state;
    size_t size = 0;
    void *buf = read_all(BAD_DIR "/external_past_end/model.onnx", &size);
    assert_non_null(buf);
    expect e = {"invalid model", "base folder", 0};
    long live0 = atomic_load(&f->count.live);
    tdm_model *m = NULL;
    assert_int_equal(check_status("load_from_buffer(NULL base)", "no_base_dir",
                                  tdm_model_load_from_buffer(f->env, buf, size, NULL, &m), &e), 0);
    assert_null(m);
    tdm_session *s = NULL;
    assert_int_equal(check_status("session_from_buffer(NULL base)", "no_base_dir",
                                  tdm_session_create_from_buffer(f->env, buf, size, NULL, NULL, &s),
                                  &e), 0);
    assert_null(s);
    assert_int_equal(atomic_load(&f->count.live), live0);
    free(buf);
}

/* A temporary folder removed at the end. */
typedef struct tmpdir {
    char root[256];
    char paths[8][1024];
    int n_paths; /* files and folders to remove, in order */
} tmpdir;

static void tmp_track(tmpdir *t, const char *path) {
    if (t->n_paths < 8) snprintf(t->paths[t->n_paths++], sizeof t->paths[0], "%s", path);
}

static void tmp_cleanup(tmpdir *t) {
    for (int i = t->n_paths - 1; i >= 0; i--)
        if (unlink(t->paths[i]) != 0) rmdir(t->paths[i]);
    rmdir(t->root);
}

/* The external file's folder entry is a hard link to a file elsewhere: refused, while the
 * same model with a plain copy of the file loads. The case model reads [8, 24) of
 * weights.bin, so a 24-byte file is valid. */
static void test_hard_link(void **state) {
    fixture *f = *state;
    size_t size = 0;
    void *model = read_all(BAD_DIR "/external_past_end/model.onnx", &size);
    assert_non_null(model);
    tmpdir t = {0};
    snprintf(t.root, sizeof t.root, "/tmp/tdm_hardlink_XXXXXX");
    assert_non_null(mkdtemp(t.root));
    char outside[600], dir[600], mpath[700], link_path[700];
    snprintf(outside, sizeof outside, "%s/outside.bin", t.root);
    snprintf(dir, sizeof dir, "%s/model", t.root);
    snprintf(mpath, sizeof mpath, "%s/model.onnx", dir);
    snprintf(link_path, sizeof link_path, "%s/weights.bin", dir);
    float data[6] = {1, 2, 3, 4, 5, 6};
    assert_int_equal(write_all(outside, data, sizeof data), 0);
    tmp_track(&t, outside);
    assert_int_equal(mkdir(dir, 0700), 0);
    tmp_track(&t, dir);
    assert_int_equal(write_all(mpath, model, size), 0);
    tmp_track(&t, mpath);
    free(model);

    /* control: a plain file loads */
    assert_int_equal(write_all(link_path, data, sizeof data), 0);
    tdm_model *m = NULL;
    tdm_status *st = tdm_model_load(f->env, mpath, &m);
    if (st) fprintf(stderr, "control load: %s\n", tdm_status_message(st));
    assert_null(st);
    tdm_model_free(m);
    unlink(link_path);

    if (link(outside, link_path) != 0) {
        fprintf(stderr, "hard links are not possible here (%s); skipping\n", strerror(errno));
        tmp_cleanup(&t);
        skip();
    }
    tmp_track(&t, link_path);
    expect e = {"invalid model", "hard links", 0};
    long live0 = atomic_load(&f->count.live);
    m = NULL;
    int r1 = check_status("tdm_model_load", "hard_link", tdm_model_load(f->env, mpath, &m), &e);
    tdm_model_free(m);
    tdm_session *s = NULL;
    int r2 = check_status("tdm_session_create", "hard_link",
                          tdm_session_create(f->env, mpath, NULL, &s), &e);
    tdm_session_free(s);
    long live1 = atomic_load(&f->count.live);
    tmp_cleanup(&t);
    assert_int_equal(r1, 0);
    assert_int_equal(r2, 0);
    assert_int_equal(live1, live0);
}

/* ---- 100k-level protobuf nesting, built back to front ---- */

typedef struct rbuf {
    uint8_t *data;
    size_t cap, pos; /* content is data[pos, cap) */
} rbuf;

static void put_front(rbuf *b, const void *p, size_t n) {
    assert_true(b->pos >= n);
    b->pos -= n;
    memcpy(b->data + b->pos, p, n);
}

static void put_varint_front(rbuf *b, uint64_t v) {
    uint8_t tmp[10];
    size_t n = 0;
    do {
        tmp[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v) tmp[n] |= 0x80;
        n++;
    } while (v);
    put_front(b, tmp, n);
}

/* Wraps everything written so far (from `mark` to the end) as field `field` (length-delimited). */
static void wrap_front(rbuf *b, size_t end_mark, uint32_t field) {
    put_varint_front(b, end_mark - b->pos);
    put_varint_front(b, (uint64_t)field << 3 | 2);
}

static uint8_t *deep_model(int levels, size_t *size) {
    rbuf b = {malloc((size_t)levels * 10 + 256), (size_t)levels * 10 + 256, 0};
    assert_non_null(b.data);
    b.pos = b.cap;
    /* innermost TypeProto { tensor_type { elem_type: FLOAT } } */
    static const uint8_t inner[] = {0x0a, 0x02, 0x08, 0x01};
    put_front(&b, inner, sizeof inner);
    for (int i = 0; i < levels; i++) {
        wrap_front(&b, b.cap, 1); /* Sequence.elem_type */
        wrap_front(&b, b.cap, 4); /* TypeProto.sequence_type */
    }
    wrap_front(&b, b.cap, 2);                             /* ValueInfoProto.type */
    static const uint8_t vi_name[] = {0x0a, 0x01, 'x'};   /* ValueInfoProto.name */
    put_front(&b, vi_name, sizeof vi_name);
    wrap_front(&b, b.cap, 11);                            /* GraphProto.input */
    static const uint8_t g_out[] = {0x62, 0x03, 0x0a, 0x01, 'x'}; /* GraphProto.output */
    put_front(&b, g_out, sizeof g_out);
    wrap_front(&b, b.cap, 7);                             /* ModelProto.graph */
    static const uint8_t head[] = {0x08, 0x08,            /* ir_version 8 */
                                   0x42, 0x02, 0x10, 0x11}; /* opset_import { version 17 } */
    put_front(&b, head, sizeof head);
    *size = b.cap - b.pos;
    memmove(b.data, b.data + b.pos, *size);
    return b.data;
}

static void test_deep_nesting_100k(void **state) {
    fixture *f = *state;
    size_t size = 0;
    uint8_t *bytes = deep_model(100000, &size);
    assert_true(size > 500000);
    expect e = {"limit exceeded", "nested deeper than", 0};
    long live0 = atomic_load(&f->count.live);
    tdm_model *m = NULL;
    assert_int_equal(check_status("load_from_buffer", "deep_100k",
                                  tdm_model_load_from_buffer(f->env, bytes, size, NULL, &m), &e), 0);
    tdm_session *s = NULL;
    assert_int_equal(check_status("session_from_buffer", "deep_100k",
                                  tdm_session_create_from_buffer(f->env, bytes, size, NULL, NULL, &s),
                                  &e), 0);
    /* and from a file */
    tmpdir t = {0};
    snprintf(t.root, sizeof t.root, "/tmp/tdm_deep_XXXXXX");
    assert_non_null(mkdtemp(t.root));
    char path[600];
    snprintf(path, sizeof path, "%s/model.onnx", t.root);
    assert_int_equal(write_all(path, bytes, size), 0);
    tmp_track(&t, path);
    int r = check_status("tdm_model_load", "deep_100k", tdm_model_load(f->env, path, &m), &e);
    r |= check_status("tdm_session_create", "deep_100k", tdm_session_create(f->env, path, NULL, &s),
                      &e);
    tmp_cleanup(&t);
    free(bytes);
    assert_int_equal(r, 0);
    assert_int_equal(atomic_load(&f->count.live), live0);
}

/* The generator above must make a valid model when shallow (so the deep failure is about
 * depth, not framing): 3 levels parse, the sequence-of-sequences input is read, and the load
 * fails only because the output (named, without a type) has no type. */
static void test_deep_generator_sanity(void **state) {
    fixture *f = *state;
    size_t size = 0;
    uint8_t *bytes = deep_model(3, &size);
    expect e = {"invalid model", "'x' has no type information", 0};
    tdm_model *m = NULL;
    assert_int_equal(check_status("load_from_buffer", "deep_3",
                                  tdm_model_load_from_buffer(f->env, bytes, size, NULL, &m), &e), 0);
    free(bytes);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_bad_model_directory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_buffer_without_base_dir, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hard_link, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deep_generator_sanity, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deep_nesting_100k, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
