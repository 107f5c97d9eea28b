/* Fuzz target: the KServe v2 JSON inference request parser of tandem serve
 * (sv_infer_parse in src/serve/infer.c, the function the server's POST .../infer calls),
 * without the binary data extension. Input: one byte picking the model configuration
 * (fuzz_serve.h; '0'..'3' in the seeds), then the request body. An accepted request is
 * checked against its configuration and answered (sv_infer_respond); a rejected one must
 * come back as a 4xx/5xx error with a message. */
#include "fuzz_serve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    fzs_parse(data[0], data + 1, size - 1, -1);
    return 0;
}
