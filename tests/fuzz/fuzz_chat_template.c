/* Fuzz target: chat templates (tdm_chat_render, src/llm/chat_template*.c). Input: one flags
 * byte (bit 0: start the conversation at its system message or after it, bits 1-2 + 3: how
 * many messages, 0 to 4; bit 4: add_generation_prompt; bit 5: NULL bos_token) and the
 * template text (up to a NUL). Every status must be well formed and never an internal
 * error; a render must be valid UTF-8 (it is made of UTF-8 pieces cut at code points), and
 * hostile templates must end within the limits (loops, output, memory, work, depth). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tandem/tokenizer.h"

static bool valid_utf8(const unsigned char *s, size_t len) {
    for (size_t i = 0; i < len;) {
        unsigned char c = s[i];
        size_t k = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
                 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (!k || i + k > len) return false;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xC0) != 0x80) return false;
        if ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] >= 0xA0) ||
            (c == 0xF0 && s[i + 1] < 0x90) || (c == 0xF4 && s[i + 1] >= 0x90))
            return false;
        i += k;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const tdm_chat_message msgs[] = {
        {"system", "You are a helpful assistant."}, {"user", "  héllo, Привет 👋  "},
        {"assistant", "Hi! \"quoted\" \\ {{ not a tag }}"}, {"user", "bye"}, {"tool", ""}};
    if (size < 1) return 0;
    char *text = malloc(size);
    if (!text) return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = 0;
    unsigned f = data[0];
    size_t n = ((f >> 1) & 3) + ((f >> 3) & 1);
    char *out = NULL;
    tdm_status *st = tdm_chat_render(text, msgs + (f & 1), n, f & 16, (f & 32) ? NULL : "<s>",
                                     "</s>", &out);
    if (st) { /* a known code other than internal, and a message */
        tdm_code c = tdm_status_code(st);
        const char *m = tdm_status_message(st);
        if (c <= TDM_OK || c >= TDM_ERR_INTERNAL || !m || !m[0]) {
            fprintf(stderr, "fuzz: bad status (code %d): %s\n", (int)c, m ? m : "(null)");
            abort();
        }
        if (getenv("TDM_FUZZ_VERBOSE")) fprintf(stderr, "[%d] %s\n", (int)c, m);
        tdm_status_free(st);
    } else {
        if (!out || !valid_utf8((const unsigned char *)out, strlen(out))) {
            fprintf(stderr, "fuzz: the render is not valid UTF-8\n");
            abort();
        }
        tdm_string_free(out);
    }
    free(text);
    return 0;
}
