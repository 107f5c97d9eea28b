/* CLBlast SGEMM on the first OpenCL device (GPUs first, as tandem numbers opencl:0), timed
 * the way bench/run_opencl_gemm.py times tandem: per run, upload A, C = A * B (B stays on the
 * device, like an initializer), download C; prints {"n":..,"p50_ms":..,"runs":..} as JSON.
 *
 *   cc -O2 bench/clblast_gemm.c -o clblast_gemm -lclblast -lOpenCL
 *   ./clblast_gemm N SECONDS
 *
 * A bench program only: tandem does not link CLBlast. */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <clblast_c.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static cl_device_id first_device(cl_platform_id *plat) {
    cl_platform_id ps[16];
    cl_uint np = 0;
    if (clGetPlatformIDs(16, ps, &np) != CL_SUCCESS || np == 0) return NULL;
    if (np > 16) np = 16;
    for (int pass = 0; pass < 2; pass++)
        for (cl_uint p = 0; p < np; p++) {
            cl_device_id id;
            cl_uint nd = 0;
            cl_device_type want = pass == 0 ? CL_DEVICE_TYPE_GPU : CL_DEVICE_TYPE_ALL;
            if (clGetDeviceIDs(ps[p], want, 1, &id, &nd) == CL_SUCCESS && nd > 0) {
                *plat = ps[p];
                return id;
            }
        }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: clblast_gemm N SECONDS\n");
        return 2;
    }
    size_t n = (size_t)atol(argv[1]);
    double seconds = atof(argv[2]);
    cl_platform_id plat;
    cl_device_id dev = first_device(&plat);
    if (!dev || n == 0) {
        fprintf(stderr, "clblast_gemm: no OpenCL device\n");
        return 1;
    }
    cl_int err;
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &err);
    size_t bytes = n * n * sizeof(float);
    float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    for (size_t i = 0; i < n * n; i++) {
        a[i] = (float)((int)(i % 2001) - 1000) * 0.001f;
        b[i] = (float)((int)((i * 7) % 2001) - 1000) * 0.001f;
    }
    cl_mem da = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
    cl_mem db = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
    cl_mem dc = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
    clEnqueueWriteBuffer(q, db, CL_TRUE, 0, bytes, b, 0, NULL, NULL);
    size_t cap = 100000, runs = 0;
    double *t = malloc(cap * sizeof *t);
    double start = now();
    for (int r = 0; runs < cap; r++) {
        double t0 = now();
        clEnqueueWriteBuffer(q, da, CL_FALSE, 0, bytes, a, 0, NULL, NULL);
        CLBlastStatusCode s = CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo,
                                           CLBlastTransposeNo, n, n, n, 1.0f, da, 0, n, db, 0, n,
                                           0.0f, dc, 0, n, &q, NULL);
        if (s != CLBlastSuccess) {
            fprintf(stderr, "clblast_gemm: CLBlastSgemm failed (%d)\n", (int)s);
            return 1;
        }
        clEnqueueReadBuffer(q, dc, CL_TRUE, 0, bytes, c, 0, NULL, NULL);
        double dt = now() - t0;
        if (r >= 3) t[runs++] = dt; /* three warm-up runs (kernel compilation, tuning) */
        if (r >= 3 && now() - start > seconds) break;
    }
    qsort(t, runs, sizeof *t, cmp);
    printf("{\"n\": %zu, \"p50_ms\": %.4f, \"runs\": %zu, \"check\": %.6g}\n", n,
           t[runs / 2] * 1e3, runs, (double)c[n * n / 2]);
    clReleaseMemObject(da);
    clReleaseMemObject(db);
    clReleaseMemObject(dc);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    free(a);
    free(b);
    free(c);
    free(t);
    return 0;
}
