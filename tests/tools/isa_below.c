/* Runs a command with TANDEM_CPU_ISA set one level below this machine's best, for the test
 * suite's *_isa_below entries: isa_below COMMAND [ARGS...].
 *
 * "Below" is the next float32 vector width: the AVX-512 levels (VNNI, BF16 and AMX add int8
 * and bfloat16 instructions that float32 kernels do not use) -> avx2, avx2 -> sse41, sse41 ->
 * portable. A machine at the portable level has nothing below: exit 77 (skipped). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "backends/cpu/cpu_isa.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: isa_below COMMAND [ARGS...]\n");
        return 2;
    }
    tdm_cpu_isa best = tdm_cpu_isa_detect(), below;
    if (best >= TDM_ISA_AVX512_CORE) below = TDM_ISA_AVX2;
    else if (best == TDM_ISA_AVX2) below = TDM_ISA_SSE41;
    else if (best == TDM_ISA_SSE41) below = TDM_ISA_PORTABLE;
    else {
        printf("SKIPPED: this machine's level is %s, nothing below it\n", tdm_cpu_isa_name(best));
        return 77;
    }
    printf("isa_below: machine %s, running with TANDEM_CPU_ISA=%s\n", tdm_cpu_isa_name(best),
           tdm_cpu_isa_name(below));
    fflush(stdout);
    if (setenv("TANDEM_CPU_ISA", tdm_cpu_isa_name(below), 1) != 0) return 2;
    execvp(argv[1], argv + 1);
    perror(argv[1]);
    return 2;
}
