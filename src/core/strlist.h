/* Comma-separated lists in options ("cpu, cuda:0", "#12,conv5"). */
#ifndef TDM_CORE_STRLIST_H
#define TDM_CORE_STRLIST_H

#include <string.h>

/* The next item of a list being cut up in place, without the spaces around it; empty items
 * are skipped; NULL at the end. Pass the buffer on the first call and NULL after, with the
 * same `save` (as strtok_r). */
static inline char *tdm_list_next(char *buf, char **save) {
    for (char *tok = strtok_r(buf, ",", save); tok; tok = strtok_r(NULL, ",", save)) {
        while (*tok == ' ') tok++;
        size_t len = strlen(tok);
        while (len && tok[len - 1] == ' ') tok[--len] = 0;
        if (len) return tok;
    }
    return NULL;
}

#endif
