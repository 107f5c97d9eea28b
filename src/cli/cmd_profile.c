/* tandem profile: measured time per op on each device; the measurements are stored so that
 * later plans of the same model place nodes by measured rather than predicted times. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void profile_usage(FILE *f) {
    fprintf(f,
            "usage: tandem profile MODEL [--devices LIST] [--runs N] [--warmup N] [--threads N]\n"
            "                      [--shape NAME:d0,d1,...] [--json] [--no-save]\n\n"
            "Runs MODEL on each device of LIST in turn (the CPU only for what a device cannot\n"
            "run), then prints per op type and per op the measured time, its share of the total,\n"
            "achieved GFLOP/s and GB/s against the device's profile, the copies and the critical\n"
            "path. The measured times are stored in the cache folder and used by later plans.\n"
            "  --devices LIST     devices to profile, each in turn (default cpu)\n"
            "  --runs N           measured runs per device (default 10)\n"
            "  --warmup N         unmeasured runs first (default 2)\n"
            "  --threads N        intra-op threads (default: all cores)\n"
            "  --shape NAME:DIMS  shape of input NAME (dynamic dims are 1 otherwise; repeatable)\n"
            "  --json             print one JSON object\n"
            "  --no-save          do not store the measured times in the cache folder\n");
}

int cmd_profile(int argc, char **argv) {
    const char *model = NULL, *devices = "cpu";
    const char *shape_names[64], *shape_dims[64];
    int n_shapes = 0, threads = 0, runs = 10, warmup = 2;
    bool json = false, save = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool v = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            profile_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--devices") && v) devices = argv[++i];
        else if (!strcmp(a, "--runs") && v) runs = atoi(argv[++i]);
        else if (!strcmp(a, "--warmup") && v) warmup = atoi(argv[++i]);
        else if (!strcmp(a, "--threads") && v) threads = atoi(argv[++i]);
        else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--no-save")) save = false;
        else if (!strcmp(a, "--shape") && v && n_shapes < 64) {
            char *c = strrchr(argv[++i], ':');
            if (!c) {
                fprintf(stderr, "tandem profile: --shape expects NAME:d0,d1,...\n");
                return 2;
            }
            *c = 0;
            shape_names[n_shapes] = argv[i];
            shape_dims[n_shapes++] = c + 1;
        } else if (a[0] == '-') {
            fprintf(stderr, "tandem profile: unknown option '%s'\n", a);
            profile_usage(stderr);
            return 2;
        } else if (!model) model = a;
        else {
            fprintf(stderr, "tandem profile: unexpected argument '%s'\n", a);
            return 2;
        }
    }
    if (!model || runs < 1) {
        profile_usage(stderr);
        return 2;
    }
    tdm_env *env = NULL;
    tdm_status *st = tdm_env_create(NULL, &env);
    if (st) return cli_fail(st, "profile");
    char list[512];
    snprintf(list, sizeof list, "%s", devices);
    int rc = 0;
    char *save_ptr = NULL;
    for (char *dev = strtok_r(list, ",", &save_ptr); dev && rc == 0; dev = strtok_r(NULL, ",", &save_ptr)) {
        tdm_session *s = NULL;
        /* the device first, the CPU behind it for what it cannot run */
        char devs[160];
        snprintf(devs, sizeof devs, "%s%s", dev, strcmp(dev, "cpu") ? ",cpu" : "");
        tdm_session_options so = {TDM_API_VERSION, devs, threads, 1, false, dev, NULL, true};
        if ((st = tdm_session_create(env, model, &so, &s))) {
            rc = cli_fail(st, dev);
            break;
        }
        for (int r = 0; r < warmup && rc == 0; r++)
            rc = cli_run_random(env, s, n_shapes, shape_names, shape_dims, 1);
        tdm_session_reset_measurements(s); /* first runs pay for one-time set-up */
        for (int r = 0; r < runs && rc == 0; r++)
            rc = cli_run_random(env, s, n_shapes, shape_names, shape_dims, 1);
        char *text = NULL;
        if (rc == 0 && (st = tdm_session_explain(s, json ? TDM_EXPLAIN_JSON : TDM_EXPLAIN_PROFILE, &text)))
            rc = cli_fail(st, dev);
        if (rc == 0) {
            if (!json) printf("== %s ==\n", dev);
            fputs(text, stdout);
            if (!json) printf("\n");
        }
        tdm_string_free(text);
        if (rc == 0 && save && (st = tdm_session_save_measurements(s))) {
            fprintf(stderr, "tandem: measurements not stored: %s\n", tdm_status_message(st));
            tdm_status_free(st);
        }
        tdm_session_free(s);
    }
    tdm_env_free(env);
    return rc;
}
