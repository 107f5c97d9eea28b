/* The OpenAI endpoints' completion text (src/serve/openai_text.c): stop strings, the stream's
 * held-back bytes and the logprob tokens, against the plain definitions computed here the slow
 * way (openai_text.h states them), on hand-made cases and on 20,000 random ones over a small
 * alphabet (so that stop strings match, overlap and straddle pieces; NUL and UTF-8 bytes
 * included). Out of memory (realloc failing, through the linker's --wrap) leaves the text as
 * it was. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "openai_text_check.h"

/* realloc of openai_text.c and sv_buf fails while fail_realloc is set */
static int fail_realloc;
void *__real_realloc(void *p, size_t n);
void *__wrap_realloc(void *p, size_t n) {
    return fail_realloc ? NULL : __real_realloc(p, n);
}

static void check_case(const piece *ps, size_t n, int n_stop, const char *const *stop,
                       const size_t *stop_len) {
    const char *fail = oa_text_check(ps, n, n_stop, stop, stop_len);
    if (fail) fail_msg("%s", fail);
}

#define P(s) {s, sizeof s - 1}

static void test_cases(void **state) {
    (void)state;
    /* a stop string across three pieces, held back while it may still come */
    const piece a[] = {P("Hello"), P(" wor"), P("ld, "), P("END"), P("tail")};
    const char *s1[] = {"world", "ENDx"};
    const size_t l1[] = {5, 4};
    check_case(a, 5, 2, s1, l1);
    /* a short stop completed before a longer one that starts earlier: the short one cuts */
    const piece b[] = {P("ab"), P("c"), P("d")};
    const char *s2[] = {"abcd", "c"};
    const size_t l2[] = {4, 1};
    check_case(b, 3, 2, s2, l2);
    /* two completed by one piece: the earlier start wins */
    const piece c[] = {P("xx"), P("yz q")};
    const char *s3[] = {"z q", "xyz"};
    const size_t l3[] = {3, 3};
    check_case(c, 2, 2, s3, l3);
    /* NUL bytes in the text and in a stop string; empty pieces (a character's first bytes) */
    const piece d[] = {P("a\0"), P(""), P("\0b"), P(""), P("\xC3"), P("\xA9!")};
    const char *s4[] = {"\0\0b"};
    const size_t l4[] = {3};
    check_case(d, 6, 1, s4, l4);
    /* a held-back start that turns out not to be one goes out with the next piece */
    const piece e[] = {P("te"), P("st"), P("ing"), P("!")};
    const char *s5[] = {"tests", "ingo"};
    const size_t l5[] = {5, 4};
    check_case(e, 4, 2, s5, l5);
    /* no stop strings: everything goes out at once */
    check_case(e, 4, 0, NULL, NULL);
    /* a stop string at the very start */
    const char *s6[] = {"te"};
    const size_t l6[] = {2};
    check_case(e, 4, 1, s6, l6);
}

static void test_random(void **state) {
    (void)state;
    static const char alphabet[] = {'a', 'b', 'a', 'b', 'c', 0, '\xC3', '\xA9'};
    uint64_t rng = 0x9E3779B97F4A7C15ull;
#define NEXT() (rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17, rng)
    for (int it = 0; it < 20000; it++) {
        char stop_buf[OA_MAX_STOP][8], piece_buf[64][6];
        const char *stop[OA_MAX_STOP];
        size_t stop_len[OA_MAX_STOP];
        int n_stop = (int)(NEXT() % 4);
        for (int k = 0; k < n_stop; k++) {
            stop_len[k] = 1 + NEXT() % 5;
            for (size_t j = 0; j < stop_len[k]; j++) stop_buf[k][j] = alphabet[NEXT() % sizeof alphabet];
            stop[k] = stop_buf[k];
        }
        piece ps[64];
        size_t n = 1 + NEXT() % 64;
        for (size_t i = 0; i < n; i++) {
            ps[i].n = NEXT() % 6;
            for (size_t j = 0; j < ps[i].n; j++) piece_buf[i][j] = alphabet[NEXT() % sizeof alphabet];
            ps[i].s = piece_buf[i];
        }
        check_case(ps, n, n_stop, stop, stop_len);
    }
#undef NEXT
}

/* Bad stop strings are refused; a flush (bytes with no token) can complete a stop string. */
static void test_init_and_flush(void **state) {
    (void)state;
    oa_text t;
    const char *bad[] = {"ok", ""};
    const size_t bad_len[] = {2, 0};
    assert_false(oa_text_init(&t, 2, bad, bad_len));
    assert_int_equal(t.n_stop, 0);
    oa_text_free(&t);
    const char *many[OA_MAX_STOP + 1];
    size_t many_len[OA_MAX_STOP + 1];
    for (int i = 0; i <= OA_MAX_STOP; i++) many[i] = "x", many_len[i] = 1;
    assert_false(oa_text_init(&t, OA_MAX_STOP + 1, many, many_len));
    const char *stop[] = {"\xEF\xBF\xBD"};
    const size_t stop_len[] = {3};
    assert_true(oa_text_init(&t, 1, stop, stop_len));
    oa_tok tok = {.id = 7};
    assert_int_equal(oa_text_add(&t, "ok", 2, &tok), OA_TEXT_MORE);
    assert_int_equal(oa_text_add(&t, "", 0, &tok), OA_TEXT_MORE); /* a character's first byte */
    assert_int_equal(oa_text_add(&t, "\xEF\xBF\xBD", 3, NULL), OA_TEXT_STOP); /* the flush */
    assert_int_equal(t.text.len, 2);
    assert_int_equal(t.n_toks, 1); /* the second token's bytes were the stop string's */
    oa_text_free(&t);
}

/* realloc failing: OOM, and the text and tokens stay as they were; it works again after. */
static void test_out_of_memory(void **state) {
    (void)state;
    oa_text t;
    const char *stop[] = {"zz"};
    const size_t stop_len[] = {2};
    assert_true(oa_text_init(&t, 1, stop, stop_len));
    oa_tok tok = {.id = 1};
    assert_int_equal(oa_text_add(&t, "abc", 3, &tok), OA_TEXT_MORE);
    char big[300];
    memset(big, 'q', sizeof big);
    fail_realloc = 1;
    assert_int_equal(oa_text_add(&t, big, sizeof big, &tok), OA_TEXT_OOM); /* past the buffer */
    fail_realloc = 0;
    assert_int_equal(t.text.len, 3);
    assert_memory_equal(t.text.p, "abc", 4);
    assert_int_equal(t.n_toks, 1);
    for (int i = 0; i < 63; i++) assert_int_equal(oa_text_add(&t, "", 0, &tok), OA_TEXT_MORE);
    fail_realloc = 1; /* the token array is full (64) */
    assert_int_equal(oa_text_add(&t, "d", 1, &tok), OA_TEXT_OOM);
    fail_realloc = 0;
    assert_int_equal(t.n_toks, 64);
    assert_int_equal(t.text.len, 3);
    assert_int_equal(oa_text_add(&t, big, sizeof big, &tok), OA_TEXT_MORE);
    assert_int_equal(oa_text_add(&t, "zz", 2, &tok), OA_TEXT_STOP);
    assert_int_equal(t.text.len, 3 + sizeof big);
    assert_int_equal(t.n_toks, 65);
    oa_text_free(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_init_and_flush),
        cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
