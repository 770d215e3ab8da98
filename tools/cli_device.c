/* cli_device.c - the devices dfg inspect --device and dfg fit predict a step on: peak FLOP/s and
 * memory bandwidth. The GPUs' figures are NVIDIA's datasheets'; the CPU's are measured on this
 * machine at first use and cached. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#include "../ops/dfg_ops.h"
#include "cli_device.h"

/* Dense figures (the datasheets' tensor-core numbers marked "with sparsity" are twice these):
 * bf16 on tensor cores, f32 on CUDA cores (dfg's f32 GEMMs use no TF32), HBM/GDDR bandwidth.
 *   H100 SXM5 80GB: NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100):
 *     BF16 Tensor Core 1,979 TFLOPS sparse -> 989.5 dense, FP32 67 TFLOPS, 3.35 TB/s.
 *   H200 SXM 141GB: NVIDIA H200 datasheet (nvidia.com/en-us/data-center/h200): BF16 1,979 TFLOPS
 *     sparse -> 989.5 dense, FP32 67 TFLOPS, 4.8 TB/s.
 *   A100 80GB SXM: NVIDIA A100 datasheet (nvidia.com/en-us/data-center/a100): BF16 Tensor Core
 *     312 TFLOPS dense (624 sparse), FP32 19.5 TFLOPS, 2,039 GB/s.
 *   L40S: NVIDIA L40S datasheet (nvidia.com/en-us/data-center/l40s): BF16 Tensor Core 362.05
 *     TFLOPS dense (733 sparse), FP32 91.6 TFLOPS, 864 GB/s.
 * The time of a kernel run beyond its roofline (launch, ramp-up and drain: what a small kernel
 * costs whatever its work) is not a datasheet figure. 3 us is measured, on one H100 only: the
 * GPT-2 124M GRPO step of tools/bench/results/2026-11-24-h100-run2-gpt2-124m-cuda.md took 79.8 ms
 * (full) where the roofline of its 18,325 kernel runs says 21.7 ms, 3.2 us a kernel beyond it;
 * its `fixed` mode, 20.8 ms against 12.2 ms over 1,744 kernel runs, 4.9 us (docs/benchmarks.md). */
#define GPU_KERNEL_S 3e-6
static const cli_device gpus[] = {
    {"h100", "NVIDIA H100 SXM5 80GB (datasheet)", DFG_TARGET_CUDA, 989.5e12, 67e12, 3.35e12, GPU_KERNEL_S},
    {"h200", "NVIDIA H200 SXM 141GB (datasheet)", DFG_TARGET_CUDA, 989.5e12, 67e12, 4.8e12, GPU_KERNEL_S},
    {"a100", "NVIDIA A100 80GB SXM (datasheet)", DFG_TARGET_CUDA, 312e12, 19.5e12, 2.039e12, GPU_KERNEL_S},
    {"l40s", "NVIDIA L40S (datasheet)", DFG_TARGET_CUDA, 362.05e12, 91.6e12, 864e9, GPU_KERNEL_S},
};
#define N_GPUS (sizeof(gpus) / sizeof(gpus[0]))

const char *cli_device_names(void) { return "h100|h200|a100|l40s|cpu"; }

const char *cli_device_default(dfg_target target) { return target == DFG_TARGET_CUDA ? "h100" : "cpu"; }

/* ---------------------------------------------------------------- the CPU, measured */
#define GEMM_N 1024                   /* 2.1 GFLOP a call: tens of ms on a few cores */
#define COPY_BYTES ((size_t)64 << 20) /* over any last-level cache */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The best of a few sgemm calls on OpenBLAS's threads (the first one warms it up, untimed). */
static double measure_sgemm(void) {
    size_t n = GEMM_N;
    float *a = malloc(n * n * sizeof(float)), *b = malloc(n * n * sizeof(float)), *c = malloc(n * n * sizeof(float));
    double best = 0;
    if (a && b && c) {
        for (size_t i = 0; i < n * n; i++) a[i] = (float)(i % 7) * 0.25f, b[i] = (float)(i % 5) * 0.5f;
        for (int k = 0; k < 4; k++) {
            double t0 = now_s();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, a, (int)n, b, (int)n, 0.0f,
                        c, (int)n);
            double f = 2.0 * (double)n * (double)n * (double)n / (now_s() - t0);
            if (k > 0 && f > best) best = f;
        }
    }
    free(a), free(b), free(c);
    return best;
}

typedef struct {
    char *dst;
    const char *src;
    size_t n;
} copy_part;

static void *copy_thread(void *arg) {
    copy_part *c = arg;
    memcpy(c->dst, c->src, c->n);
    return NULL;
}

/* Bytes read + written per second by a copy split over `threads` threads (as dfg's OpenMP
 * kernels split theirs), the best of a few. */
static double measure_copy(int threads) {
    char *src = malloc(COPY_BYTES), *dst = malloc(COPY_BYTES);
    double best = 0;
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    if (src && dst) {
        memset(src, 1, COPY_BYTES), memset(dst, 0, COPY_BYTES); /* pages mapped before timing */
        for (int k = 0; k < 5; k++) {
            pthread_t tid[64];
            bool started[64] = {false};
            copy_part part[64];
            size_t each = COPY_BYTES / (size_t)threads;
            double t0 = now_s();
            for (int i = 0; i < threads; i++) {
                size_t at = (size_t)i * each;
                part[i] = (copy_part){dst + at, src + at, i == threads - 1 ? COPY_BYTES - at : each};
            }
            for (int i = 1; i < threads; i++) started[i] = !pthread_create(&tid[i], NULL, copy_thread, &part[i]);
            copy_thread(&part[0]);
            for (int i = 1; i < threads; i++) {
                if (started[i]) pthread_join(tid[i], NULL);
                else copy_thread(&part[i]); /* no thread: this one copies its part */
            }
            double bw = 2.0 * (double)COPY_BYTES / (now_s() - t0);
            if (k > 0 && bw > best) best = bw;
        }
    }
    free(src), free(dst);
    return best;
}

/* dfg's own time per kernel run beyond its work on this CPU: a compiled program of a chain of
 * affine ops on 16 floats, run on `threads` threads (dfg's dispatch, OpenMP's fork and join). */
#define CHAIN 256
static double measure_kernel_time(int threads) {
    dfg_program *p = dfg_program_new("kernel_time");
    dfg_graph *g = p ? dfg_graph_new(p, "chain") : NULL;
    dfg_tensor *x = g ? dfg_input(g, "x", DFG_F32, DFG_SHAPE(16)) : NULL;
    for (int i = 0; x && i < CHAIN; i++) x = dfg_scale(g, x, i % 2 ? 0.5f : 2.0f);
    dfg_runtime *rt = NULL;
    double best = 0;
    dfg_options o = dfg_options_default(DFG_TARGET_CPU);
    dfg_run_options ro = dfg_run_options_default();
    ro.n_threads = threads;
    if (x && dfg_output(g, x, "y") && !dfg_stage_graph(p, g, 1) && !dfg_compile(p, &o) && !dfg_runtime_create(p, &ro, &rt)) {
        float v[16] = {0};
        int nodes = p->stages[0].graph->n_nodes;
        for (int k = 0; k < 8 && !dfg_runtime_write(rt, "x", v, sizeof(v)); k++) {
            double t0 = now_s();
            if (dfg_runtime_step(rt)) break;
            double each = (now_s() - t0) / (nodes > 0 ? nodes : 1);
            if (k > 0 && (best == 0 || each < best)) best = each; /* the first run warms up */
        }
    }
    dfg_runtime_free(rt);
    dfg_program_free(p);
    return best;
}

/* This CPU's model name (/proc/cpuinfo), for the cache's key. */
static void cpu_model(char *buf, size_t len) {
    snprintf(buf, len, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof(line), f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) || !colon) continue;
        colon += 1 + (colon[1] == ' ');
        colon[strcspn(colon, "\n")] = '\0';
        snprintf(buf, len, "%s", colon);
        break;
    }
    if (f) fclose(f);
}

/* $XDG_CACHE_HOME/dfg/cpu-roofline, else ~/.cache/dfg/cpu-roofline, its directories made (a
 * failure shows as a cache that is not written: measured again next time). false: no home. */
static bool cache_path(char *buf, size_t len) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char base[4096], dir[4200];
    if (xdg && xdg[0]) snprintf(base, sizeof(base), "%s", xdg);
    else if (home && home[0]) snprintf(base, sizeof(base), "%s/.cache", home);
    else return false;
    snprintf(dir, sizeof(dir), "%s/dfg", base);
    mkdir(base, 0755), mkdir(dir, 0755);
    return snprintf(buf, len, "%s/cpu-roofline", dir) < (int)len;
}

/* The cache holds one line: "<threads>\t<f32 FLOP/s>\t<bytes/s>\t<s a kernel>\t<model>". */
static bool read_cache(const char *path, const char *model, int threads, cli_device *d) {
    FILE *f = fopen(path, "r");
    char line[512], name[400];
    int t = 0;
    bool ok = f && fgets(line, sizeof(line), f) &&
              sscanf(line, "%d\t%lf\t%lf\t%lf\t%399[^\n]", &t, &d->f32_flops, &d->bandwidth, &d->kernel_s, name) == 5 &&
              t == threads && !strcmp(name, model) && d->f32_flops > 0 && d->bandwidth > 0 && d->kernel_s >= 0;
    if (f) fclose(f);
    return ok;
}

static void write_cache(const char *path, const char *model, int threads, const cli_device *d) {
    char tmp[4500];
    snprintf(tmp, sizeof(tmp), "%s.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return; /* no cache: measured again next time */
    bool ok = fprintf(f, "%d\t%.6g\t%.6g\t%.6g\t%s\n", threads, d->f32_flops, d->bandwidth, d->kernel_s, model) > 0;
    if (fclose(f) || !ok || rename(tmp, path)) remove(tmp);
}

static bool cpu_device(const char *cmd, cli_device *d) {
    *d = (cli_device){.name = "cpu", .target = DFG_TARGET_CPU};
    const char *fixed = getenv("DFG_CPU_ROOFLINE");
    if (fixed && fixed[0]) { /* fixed figures: tests, or a machine measured elsewhere */
        char *end;
        d->f32_flops = strtod(fixed, &end);
        d->bandwidth = *end == ',' ? strtod(end + 1, &end) : 0;
        d->kernel_s = *end == ',' ? strtod(end + 1, &end) : 0;
        if (*end || !(d->f32_flops > 0) || !(d->bandwidth > 0) || !(d->kernel_s >= 0)) {
            fprintf(stderr, "dfg %s: DFG_CPU_ROOFLINE='%s' is not F32_FLOPS,BYTES_PER_S[,SECONDS_A_KERNEL] (positive "
                            "numbers, e.g. 1e11,2e10,4e-6)\n", cmd, fixed);
            return false;
        }
        d->bf16_flops = d->f32_flops;
        snprintf(d->label, sizeof(d->label), "this CPU (figures from DFG_CPU_ROOFLINE)");
        return true;
    }
    char model[400], path[4400];
    int threads = openblas_get_num_threads();
    cpu_model(model, sizeof(model));
    path[0] = '\0';
    bool cached = cache_path(path, sizeof(path)) && read_cache(path, model, threads, d);
    if (!cached) {
        d->f32_flops = measure_sgemm();
        d->bandwidth = measure_copy(threads);
        d->kernel_s = measure_kernel_time(threads);
        if (!(d->f32_flops > 0) || !(d->bandwidth > 0) || !(d->kernel_s > 0)) {
            fprintf(stderr, "dfg %s: measuring this CPU failed (out of memory for its %zu MiB buffers)\n", cmd,
                    (size_t)(2 * COPY_BYTES >> 20));
            return false;
        }
        if (path[0]) write_cache(path, model, threads, d);
    }
    d->bf16_flops = d->f32_flops; /* the CPU kernels compute in f32 */
    snprintf(d->label, sizeof(d->label), "%.60s, %d thread%s (measured: sgemm %d^3, %d MiB copy, %d-op chain%s)", model,
             threads, threads == 1 ? "" : "s", GEMM_N, (int)(COPY_BYTES >> 20), CHAIN, cached ? ", cached" : "");
    return true;
}

bool cli_device_named(const char *cmd, const char *name, cli_device *out) {
    for (size_t i = 0; i < N_GPUS; i++)
        if (!strcmp(name, gpus[i].name)) {
            *out = gpus[i];
            return true;
        }
    if (!strcmp(name, "cpu")) return cpu_device(cmd, out);
    fprintf(stderr, "dfg %s: unknown device '%s' (devices: %s)\n", cmd, name, cli_device_names());
    return false;
}
