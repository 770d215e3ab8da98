/* cli_device.c - the devices dfg inspect --device and dfg fit predict a step on: peak FLOP/s and
 * memory bandwidth. The GPUs' figures are NVIDIA's datasheets'; the CPU's are measured on this
 * machine at first use, by shape and size (cli_cpu_rates), and cached. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <omp.h>

#include "../ops/dfg_ops.h"
#include "../ops/op.h"
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
    {"h100", "NVIDIA H100 SXM5 80GB (datasheet)", DFG_TARGET_CUDA, 989.5e12, 67e12, 3.35e12, GPU_KERNEL_S, false, {0}},
    {"h200", "NVIDIA H200 SXM 141GB (datasheet)", DFG_TARGET_CUDA, 989.5e12, 67e12, 4.8e12, GPU_KERNEL_S, false, {0}},
    {"a100", "NVIDIA A100 80GB SXM (datasheet)", DFG_TARGET_CUDA, 312e12, 19.5e12, 2.039e12, GPU_KERNEL_S, false, {0}},
    {"l40s", "NVIDIA L40S (datasheet)", DFG_TARGET_CUDA, 362.05e12, 91.6e12, 864e9, GPU_KERNEL_S, false, {0}},
};
#define N_GPUS (sizeof(gpus) / sizeof(gpus[0]))

const char *cli_device_names(void) { return "h100|h200|a100|l40s|cpu"; }

const char *cli_device_default(dfg_target target) { return target == DFG_TARGET_CUDA ? "h100" : "cpu"; }

/* ---------------------------------------------------------------- the CPU, measured */
/* Each measurement repeats its run for at least this long, the best of a few such repeats: long
 * enough that the clock's resolution and one preempted run do not count, short enough that the
 * whole grid takes seconds. */
#define TIME_EACH_S 3e-3
#define REPEATS 5

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Seconds one step of rt takes: a warm-up step, then the best of REPEATS repeats of at least
 * TIME_EACH_S each. 0 when a step fails. */
static double seconds_a_step(dfg_runtime *rt) {
    if (dfg_runtime_step(rt)) return 0;
    double best = 0;
    for (int rep = 0; rep < REPEATS; rep++) {
        int runs = 0;
        double t0 = now_s(), spent;
        do {
            if (dfg_runtime_step(rt)) return 0;
            runs++;
            spent = now_s() - t0;
        } while (spent < TIME_EACH_S);
        if (best == 0 || spent / runs < best) best = spent / runs;
    }
    return best;
}

/* A one-stage program's step time on `threads` threads: the graph `build` makes, compiled for
 * the CPU as a plan is, its states (constants: no denormals) made by the runtime. 0 on failure.
 * cost (when not NULL): its nodes' cost columns summed, what a rate is measured against. */
typedef dfg_tensor *(*graph_builder)(dfg_program *p, dfg_graph *g, const int64_t *dims);
static double time_graph(graph_builder build, const int64_t *dims, int threads, int *nodes, dfg_cost *cost) {
    dfg_program *p = dfg_program_new("cpu_rates");
    dfg_graph *g = p ? dfg_graph_new(p, "g") : NULL;
    dfg_tensor *y = g ? build(p, g, dims) : NULL;
    dfg_runtime *rt = NULL;
    dfg_options o = dfg_options_default(DFG_TARGET_CPU);
    dfg_run_options ro = dfg_run_options_default();
    ro.n_threads = threads;
    double s = 0;
    if (y && dfg_output(g, y, "y") && !dfg_stage_graph(p, g, 1) && !dfg_compile(p, &o) && !dfg_runtime_create(p, &ro, &rt)) {
        s = seconds_a_step(rt);
        const dfg_graph *c = p->stages[0].graph;
        if (nodes) *nodes = c->n_nodes;
        for (int k = 0; cost && k < c->n_nodes; k++) {
            dfg_cost one = dfg_ops[c->nodes[k]->op].cost(c->nodes[k]);
            cost->flops += one.flops, cost->bytes_read += one.bytes_read, cost->bytes_written += one.bytes_written;
        }
    }
    dfg_runtime_free(rt);
    dfg_program_free(p);
    return s;
}

static dfg_tensor *matmul_graph(dfg_program *p, dfg_graph *g, const int64_t *mnk) {
    dfg_tensor *a = dfg_state(p, "a", DFG_F32, DFG_SHAPE(mnk[0], mnk[2]), DFG_ROLE_NONE, dfg_init_constant(0.5f));
    dfg_tensor *b = dfg_state(p, "b", DFG_F32, DFG_SHAPE(mnk[2], mnk[1]), DFG_ROLE_NONE, dfg_init_constant(0.25f));
    return a && b ? dfg_matmul(g, a, b, false, false) : NULL;
}

static dfg_tensor *gelu_graph(dfg_program *p, dfg_graph *g, const int64_t *n) {
    dfg_tensor *x = dfg_state(p, "x", DFG_F32, DFG_SHAPE(n[0]), DFG_ROLE_NONE, dfg_init_constant(0.5f));
    return x ? dfg_gelu(g, x) : NULL;
}

static dfg_tensor *layernorm_graph(dfg_program *p, dfg_graph *g, const int64_t *n) {
    int64_t c = 1024;
    dfg_tensor *x = dfg_state(p, "x", DFG_F32, DFG_SHAPE(n[0] / c, c), DFG_ROLE_NONE, dfg_init_constant(0.5f));
    dfg_tensor *w = dfg_state(p, "w", DFG_F32, DFG_SHAPE(c), DFG_ROLE_NONE, dfg_init_constant(1.0f));
    dfg_tensor *b = dfg_state(p, "b", DFG_F32, DFG_SHAPE(c), DFG_ROLE_NONE, dfg_init_constant(0.0f));
    return x && w && b ? dfg_layernorm(g, x, w, b, 1e-5f) : NULL;
}

static dfg_tensor *scale_graph(dfg_program *p, dfg_graph *g, const int64_t *n) {
    dfg_tensor *x = dfg_state(p, "x", DFG_F32, DFG_SHAPE(n[0]), DFG_ROLE_NONE, dfg_init_constant(0.5f));
    return x ? dfg_scale(g, x, 2.0f) : NULL;
}

/* AdamW over one parameter of n[0] elements: the optimizer's update, its own stream count */
static dfg_tensor *adamw_graph(dfg_program *p, dfg_graph *g, const int64_t *n) {
    dfg_tensor *t[4];
    const char *names[4] = {"param", "grad", "m", "v"};
    for (int i = 0; i < 4; i++)
        t[i] = dfg_state(p, names[i], DFG_F32, DFG_SHAPE(n[0]), DFG_ROLE_NONE, dfg_init_constant(i == 3 ? 0.01f : 0.5f));
    dfg_tensor *step = dfg_state(p, "step", DFG_I32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_constant(1.0f));
    dfg_tensor *one = dfg_state(p, "one", DFG_F32, DFG_SHAPE(1), DFG_ROLE_NONE, dfg_init_constant(1.0f));
    if (!t[0] || !t[1] || !t[2] || !t[3] || !step || !one ||
        dfg_adamw(g, &t[0], &t[1], &t[2], &t[3], 1, step, (dfg_adamw_config){1e-9f, 0.9f, 0.999f, 1e-8f, 0.0f}))
        return NULL;
    return dfg_scale(g, one, 1.0f); /* an output for the stage: the update itself writes states */
}

/* dfg's own time a kernel run beyond its work: a chain of affine ops on 16 floats (dispatch,
 * OpenMP's fork and join). */
#define CHAIN 256
static dfg_tensor *chain_graph(dfg_program *p, dfg_graph *g, const int64_t *len) {
    dfg_tensor *x = dfg_state(p, "x", DFG_F32, DFG_SHAPE(16), DFG_ROLE_NONE, dfg_init_constant(0.5f));
    for (int64_t i = 0; x && i < len[0]; i++) x = dfg_scale(g, x, i % 2 ? 0.5f : 2.0f);
    return x;
}

static double measure_kernel_time(int threads) {
    int nodes = 0;
    double s = time_graph(chain_graph, (const int64_t[]){CHAIN}, threads, &nodes, NULL);
    return nodes > 0 ? s / nodes : 0;
}

/* A kernel's own time: the step's less the time a kernel run, at least a quarter of the step (a
 * noisy overhead subtracted from a tiny kernel never makes its rate unbounded). */
static double work_seconds(double step_s, double kernel_s) {
    return step_s - kernel_s > 0.25 * step_s ? step_s - kernel_s : 0.25 * step_s;
}

/* The grid of cli_cpu_rates on the run's threads and on one (kernel_s[t]: the time a kernel run
 * on each); false when a measurement failed. */
static bool measure_rates(cli_cpu_rates *r, const double kernel_s[2]) {
    for (int t = 0; t < 2; t++) {
        int threads = t ? 1 : r->threads;
        for (int i = 0; i < CLI_GRID_M; i++)
            for (int j = 0; j < CLI_GRID_NK; j++)
                for (int k = 0; k < CLI_GRID_NK; k++) {
                    int64_t mnk[3] = {(int64_t)cli_grid_m[i], (int64_t)cli_grid_nk[j], (int64_t)cli_grid_nk[k]};
                    double s = time_graph(matmul_graph, mnk, threads, NULL, NULL);
                    if (!(s > 0)) return false;
                    r->gemm[t][i][j][k] = 2.0 * (double)mnk[0] * (double)mnk[1] * (double)mnk[2] / work_seconds(s, kernel_s[t]);
                }
        for (int c = 0; c < 2; c++) {
            int64_t n = (int64_t)(cli_copy_bytes[c] / 8); /* f32 elements read and written */
            double s = time_graph(scale_graph, &n, threads, NULL, NULL);
            if (!(s > 0)) return false;
            r->copy[t][c] = cli_copy_bytes[c] / work_seconds(s, kernel_s[t]);
        }
        int64_t n = (int64_t)(CLI_VECTOR_BYTES / 8);
        for (int v = 0; v < 2; v++) {
            dfg_cost c = {0};
            double s = time_graph(v ? layernorm_graph : gelu_graph, &n, threads, NULL, &c);
            if (!(s > 0) || !(c.flops > 0)) return false;
            r->vector[v][t] = c.flops / work_seconds(s, kernel_s[t]);
        }
        int64_t ne = (int64_t)(cli_copy_bytes[1] / 28.0); /* elements: 4 floats read and 3 written each */
        dfg_cost cu = {0};
        double su = time_graph(adamw_graph, &ne, threads, NULL, &cu);
        if (!(su > 0)) return false;
        r->update[t] = (cu.bytes_read + cu.bytes_written) / work_seconds(su, kernel_s[t]); /* the bytes the prediction counts */
        if (r->threads == 1) { /* one thread is the run's: measured once */
            memcpy(r->gemm[1], r->gemm[0], sizeof(r->gemm[0])), memcpy(r->copy[1], r->copy[0], sizeof(r->copy[0]));
            r->vector[0][1] = r->vector[0][0], r->vector[1][1] = r->vector[1][0], r->update[1] = r->update[0];
            break;
        }
    }
    return true;
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

/* $XDG_CACHE_HOME/dfg/cpu-rates, else ~/.cache/dfg/cpu-rates, its directories made (a failure
 * shows as a cache that is not written: measured again next time). false: no home. The name is
 * not the earlier single-figure cache's (cpu-roofline), which is left alone. */
static bool cache_path(char *buf, size_t len) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char base[4096], dir[4200];
    if (xdg && xdg[0]) snprintf(base, sizeof(base), "%s", xdg);
    else if (home && home[0]) snprintf(base, sizeof(base), "%s/.cache", home);
    else return false;
    snprintf(dir, sizeof(dir), "%s/dfg", base);
    mkdir(base, 0755), mkdir(dir, 0755);
    return snprintf(buf, len, "%s/cpu-rates", dir) < (int)len;
}

#define N_RATES (2 * CLI_GRID_M * CLI_GRID_NK * CLI_GRID_NK + 4 + 4 + 2)

/* The rates as one flat array (the cache's order): the GEMM grid, the copies, the vector rates,
 * AdamW's. A cache of the earlier layout (without AdamW's) reads as damaged: measured again. */
static double *rate_slot(cli_device *d, int i) {
    int grid = 2 * CLI_GRID_M * CLI_GRID_NK * CLI_GRID_NK;
    if (i < grid) return &d->rates.gemm[0][0][0][0] + i;
    if (i < grid + 4) return &d->rates.copy[0][0] + (i - grid);
    return i < grid + 8 ? &d->rates.vector[0][0] + (i - grid - 4) : &d->rates.update[0] + (i - grid - 8);
}

/* The cache holds one line: "<threads>\t<s a kernel>\t<N_RATES rates>\t<model>". false when
 * the file is missing or damaged, or (model not NULL) for another CPU or thread count. */
static bool read_cache(const char *path, const char *model, int threads, cli_device *d) {
    FILE *f = fopen(path, "r");
    char line[8192];
    bool ok = f && fgets(line, sizeof(line), f);
    if (f) fclose(f);
    char *at = line, *end = line;
    if (ok) d->rates.threads = (int)strtol(at, &end, 10), ok = *end == '\t' && d->rates.threads >= 1;
    ok = ok && (!model || d->rates.threads == threads);
    if (ok) d->kernel_s = strtod(end + 1, &end), ok = *end == '\t' && d->kernel_s >= 0;
    for (int i = 0; ok && i < N_RATES; i++) *rate_slot(d, i) = strtod(end + 1, &end), ok = *end == '\t' && *rate_slot(d, i) > 0;
    at = end + 1;
    if (ok) at[strcspn(at, "\n")] = '\0';
    return ok && (!model || !strcmp(at, model));
}

static void write_cache(const char *path, const char *model, int threads, cli_device *d) {
    char tmp[4500];
    snprintf(tmp, sizeof(tmp), "%s.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return; /* no cache: measured again next time */
    bool ok = fprintf(f, "%d\t%.6g", threads, d->kernel_s) > 0;
    for (int i = 0; i < N_RATES; i++) ok = ok && fprintf(f, "\t%.6g", *rate_slot(d, i)) > 0;
    ok = ok && fprintf(f, "\t%s\n", model) > 0;
    if (fclose(f) || !ok || rename(tmp, path)) remove(tmp);
}

/* DFG_CPU_ROOFLINE's fixed peaks (tests, or a machine measured elsewhere): no shapes. */
static bool fixed_cpu(const char *cmd, const char *fixed, cli_device *d) {
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

static bool cpu_device(const char *cmd, cli_device *d) {
    *d = (cli_device){.name = "cpu", .target = DFG_TARGET_CPU};
    const char *fixed = getenv("DFG_CPU_ROOFLINE");
    if (fixed && fixed[0]) return fixed_cpu(cmd, fixed, d);
    char model[400], path[4400];
    int threads = omp_get_max_threads(); /* what dfg run's runtime takes without --threads */
    cpu_model(model, sizeof(model));
    path[0] = '\0';
    const char *file = getenv("DFG_CPU_RATES"); /* rates measured elsewhere, or made up by a test */
    if (file && file[0] && !read_cache(file, NULL, 0, d)) {
        fprintf(stderr, "dfg %s: DFG_CPU_RATES='%s' is not a CPU rates file (one line: threads, seconds a kernel, %d "
                        "positive rates, a name; tab-separated, as ~/.cache/dfg/cpu-rates)\n", cmd, file, N_RATES);
        return false;
    }
    bool cached = file && file[0];
    if (cached) threads = d->rates.threads, snprintf(model, sizeof(model), "rates from DFG_CPU_RATES");
    else cached = cache_path(path, sizeof(path)) && read_cache(path, model, threads, d);
    d->rates.threads = threads;
    if (!cached) {
        double kernel_s[2] = {measure_kernel_time(threads), threads > 1 ? measure_kernel_time(1) : 0};
        kernel_s[1] = threads > 1 ? kernel_s[1] : kernel_s[0];
        d->kernel_s = kernel_s[0];
        if (!(d->kernel_s > 0) || !measure_rates(&d->rates, kernel_s)) {
            fprintf(stderr, "dfg %s: measuring this CPU failed (out of memory for its %d MiB buffers?)\n", cmd,
                    (int)(cli_copy_bytes[1] / (1 << 20)));
            return false;
        }
        if (path[0]) write_cache(path, model, threads, d);
    }
    double lo = 0, hi = 0; /* the grid's range on the run's threads: the peak is its largest */
    for (int i = 0; i < CLI_GRID_M * CLI_GRID_NK * CLI_GRID_NK; i++) {
        double f = (&d->rates.gemm[0][0][0][0])[i];
        lo = i == 0 || f < lo ? f : lo, hi = f > hi ? f : hi;
    }
    d->shaped = true;
    d->f32_flops = d->bf16_flops = hi; /* the CPU kernels compute in f32 */
    d->bandwidth = d->rates.copy[0][1];
    snprintf(d->label, sizeof(d->label), "%.60s, %d thread%s (measured through dfg's kernels: matmul %.3g-%.3g GFLOP/s "
             "over %d shapes, elementwise %.3g GB/s in cache, %.3g GB/s out, gelu %.3g GFLOP/s, layernorm %.3g%s)", model, threads,
             threads == 1 ? "" : "s", lo * 1e-9, hi * 1e-9, CLI_GRID_M * CLI_GRID_NK * CLI_GRID_NK,
             d->rates.copy[0][0] * 1e-9, d->rates.copy[0][1] * 1e-9, d->rates.vector[0][0] * 1e-9, d->rates.vector[1][0] * 1e-9,
             cached ? ", cached" : "");
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
