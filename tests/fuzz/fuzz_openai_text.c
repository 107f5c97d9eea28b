/* Fuzz target: the OpenAI endpoints' completion text (src/serve/openai_text.c: stop strings,
 * the stream's held-back bytes, the logprob tokens), checked at every piece against the slow
 * reference that test_openai_text uses (tests/unit/openai_text_check.h). Input: one byte, the
 * number of stop strings (modulo OA_MAX_STOP + 1), then fields apart by 0xFF bytes: the stop
 * strings, then the pieces (one token each; empty ones too). Stop strings the server would
 * refuse (empty, too long) end the input; a difference from the reference aborts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/openai_text_check.h"

#define MAX_PIECES 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int n_stop = data[0] % (OA_MAX_STOP + 1);
    const char *stop[OA_MAX_STOP];
    size_t stop_len[OA_MAX_STOP];
    static piece ps[MAX_PIECES];
    size_t n = 0;
    int k = 0;
    const char *p = (const char *)data + 1, *end = (const char *)data + size;
    while (p <= end && n < MAX_PIECES) {
        const char *sep = memchr(p, 0xFF, (size_t)(end - p));
        const char *field_end = sep ? sep : end;
        if (k < n_stop) {
            stop[k] = p;
            stop_len[k++] = (size_t)(field_end - p);
        } else {
            ps[n].s = p;
            ps[n++].n = (size_t)(field_end - p);
        }
        if (!sep) break;
        p = sep + 1;
    }
    if (k < n_stop) return 0;
    const char *fail = oa_text_check(ps, n, n_stop, stop, stop_len);
    if (fail && strcmp(fail, "init") != 0) {
        fprintf(stderr, "fuzz_openai_text: %s (%d stop strings, %zu pieces)\n", fail, n_stop, n);
        abort();
    }
    if (fail) { /* refused only where the server's parser refuses */
        bool bad = false;
        for (int i = 0; i < n_stop; i++) bad |= !stop_len[i] || stop_len[i] > OA_MAX_STOP_LEN;
        if (!bad) abort();
    }
    return 0;
}
