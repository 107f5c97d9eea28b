/* core/hash.h against FNV-1a's published 64-bit test vectors (offset basis
 * 0xcbf29ce484222325: "" -> the basis, "a" -> 0xaf63dc4c8601ec8c, "foobar" ->
 * 0x85944171f73967e8), and tandem's own start value against values computed outside tandem
 * (Python, the same FNV-1a loop), since cache files on disk are named with it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/hash.h"

#define FNV_BASIS 0xcbf29ce484222325ull

static void test_published_vectors(void **state) {
    (void)state;
    assert_true(tdm_hash_str(FNV_BASIS, "") == FNV_BASIS);
    assert_true(tdm_hash_str(FNV_BASIS, "a") == 0xaf63dc4c8601ec8cull);
    assert_true(tdm_hash_str(FNV_BASIS, "foobar") == 0x85944171f73967e8ull);
    assert_true(tdm_hash_bytes(FNV_BASIS, "foobar", 6) == 0x85944171f73967e8ull);
    /* in two pieces: the hash of the first is the start of the second */
    assert_true(tdm_hash_bytes(tdm_hash_bytes(FNV_BASIS, "foo", 3), "bar", 3) ==
                0x85944171f73967e8ull);
}

static void test_tandem_start_value(void **state) {
    (void)state;
    assert_true(tdm_hash_str(TDM_HASH_INIT, "") == 1469598103934665603ull);
    assert_true(tdm_hash_str(TDM_HASH_INIT, "cpu") == 0xcf78a9510363b87full);
    /* words are one step each, not their bytes */
    uint64_t h = tdm_hash_u64(tdm_hash_u64(TDM_HASH_INIT, 3), (1ull << 63) + 5);
    assert_true(h == 0x1a5ee600c54017ffull);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_published_vectors),
        cmocka_unit_test(test_tandem_start_value),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
