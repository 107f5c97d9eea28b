/* Fuzz target: the binary tensor data extension of tandem serve: the
 * Inference-Header-Content-Length header (sv_infer_header_len), the split of the body into
 * the JSON header and the binary sections (binary_data_size of each input, in input order)
 * and the 4-byte length prefixes of BYTES elements (sv_infer_parse in src/serve/infer.c).
 * Input: one byte picking the model configuration (fuzz_serve.h), then the header's value
 * up to the first '\n' (an empty line: no header), then the body: the JSON header followed
 * by the binary data. */
#include "fuzz_serve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t *nl = memchr(data + 1, '\n', size - 1);
    if (!nl) return 0;
    size_t hlen = (size_t)(nl - (data + 1));
    char *value = NULL;
    if (hlen) {
        value = malloc(hlen + 1);
        if (!value) abort();
        memcpy(value, data + 1, hlen);
        value[hlen] = 0;
    }
    int64_t header_len = -1;
    sv_error *e = sv_infer_header_len(value, &header_len);
    free(value);
    if (e) {
        fzs_check_error(e);
        return 0;
    }
    const uint8_t *body = nl + 1;
    fzs_parse(data[0], body, size - (size_t)(body - data), header_len);
    return 0;
}
