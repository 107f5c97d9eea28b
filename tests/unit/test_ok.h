/* OK(expr): a cmocka failure, with the status's code and message, when expr (a tdm_status *)
 * is not NULL. Include after <cmocka.h> and tandem/tandem.h. */
#ifndef TDM_TEST_OK_H
#define TDM_TEST_OK_H

#include <stdio.h>

#define OK(expr)                                                                         \
    do {                                                                                 \
        tdm_status *st_ = (expr);                                                        \
        if (st_) {                                                                       \
            fprintf(stderr, "%s:%d: %s: [%s] %s\n", __FILE__, __LINE__, #expr,           \
                    tdm_code_name(tdm_status_code(st_)), tdm_status_message(st_));       \
            tdm_status_free(st_);                                                        \
            fail();                                                                      \
        }                                                                                \
    } while (0)

#endif
