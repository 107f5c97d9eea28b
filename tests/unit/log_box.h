/* Test helper: keeps a session's log lines for tests that check what was logged.
 * Use: log_box box = {PTHREAD_MUTEX_INITIALIZER, "", 0}; pass keep_log and &box as the
 * environment's log callback; logged(&box, "text") says whether a line contained "text". */
#ifndef TDM_TEST_LOG_BOX_H
#define TDM_TEST_LOG_BOX_H

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "tandem/tandem.h"

typedef struct log_box {
    pthread_mutex_t mu;
    char text[65536];
    size_t len;
} log_box;

static void keep_log(void *user, tdm_log_level level, const char *msg) {
    (void)level;
    log_box *b = user;
    pthread_mutex_lock(&b->mu);
    int n = snprintf(b->text + b->len, sizeof b->text - b->len, "%s\n", msg);
    if (n > 0 && b->len + (size_t)n < sizeof b->text) b->len += (size_t)n;
    pthread_mutex_unlock(&b->mu);
}

static bool logged(log_box *b, const char *what) {
    pthread_mutex_lock(&b->mu);
    bool r = strstr(b->text, what) != NULL;
    pthread_mutex_unlock(&b->mu);
    return r;
}

#endif
