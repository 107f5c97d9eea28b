#include <string.h>

#include "cli.h"

int cmd_devices(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: tandem devices\n\nLists the devices tandem found and, for backends it "
                   "looked for but cannot use, the reason.\n");
            return 0;
        }
        fprintf(stderr, "tandem devices: unknown option '%s'\n", argv[i]);
        return 2;
    }
    tdm_env *env = NULL;
    tdm_status *st = tdm_env_create(NULL, &env);
    if (st) return cli_fail(st, "devices");
    for (size_t i = 0; i < tdm_env_device_count(env); i++)
        printf("%-10s %s\n", tdm_env_device_name(env, i), tdm_env_device_description(env, i));
    for (size_t i = 0; i < tdm_env_unavailable_count(env); i++)
        printf("unavailable: %s\n", tdm_env_unavailable_reason(env, i));
    tdm_env_free(env);
    return 0;
}
