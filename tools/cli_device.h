/* cli_device.h - predicted step time before the run: a roofline of the op cost table (ops.def's
 * cost column: FLOPs, bytes read, bytes written per kernel run) against a named device's peak
 * FLOP/s and memory bandwidth (cli_device.c: the GPU table from NVIDIA's datasheets, the CPU
 * measured), per stage and per step (cli_device_predict.c). dfg inspect --device prints it and
 * dfg fit ranks its candidates with it. */
#ifndef DFG_CLI_DEVICE_H
#define DFG_CLI_DEVICE_H

#include <stdbool.h>
#include <stddef.h>

#include "../graph/ir.h"
#include "cli.h"

/* The CPU's rates by shape and size, measured through dfg's own kernels (cli_device.c): a GEMM's
 * FLOP/s depends on its M, N and K (OpenBLAS runs a 64 x 64 product far below a 1024^3 one), an
 * elementwise kernel's bytes per second on whether its bytes fit in cache and whether it runs on
 * one thread (dfg's kernels split work over the threads above a size). Between the points the
 * rates are interpolated in log space; outside the grid they are the nearest edge's. */
#define CLI_GRID_M 4  /* GEMM rows: 1, 8, 64, 512 */
#define CLI_GRID_NK 3 /* GEMM columns and depth: 64, 256, 1024 */
extern const double cli_grid_m[CLI_GRID_M], cli_grid_nk[CLI_GRID_NK];
/* bytes one elementwise kernel run moves (read + written) at the two bandwidth points: in a
 * core's cache, and far over any last-level cache */
extern const double cli_copy_bytes[2];
/* dfg's elementwise kernels run on one thread below this many bytes moved (ops/cpu/elementwise.c:
 * 32768 f32 elements read and written) */
#define CLI_ONE_THREAD_BYTES (2.0 * 4.0 * 32768.0)
typedef struct {
    int threads;                                           /* the run's threads they were measured on */
    double gemm[2][CLI_GRID_M][CLI_GRID_NK][CLI_GRID_NK]; /* FLOP/s [threads: the run's, one][m][n][k] */
    double copy[2][2];                                     /* bytes/s [threads: the run's, one][in cache, not] */
    /* FLOP/s of the kernels that are not GEMMs, by the cost column's FLOPs: [transcendental (exp,
     * tanh: dfg's gelu measured), the rest (arithmetic and row reductions: layernorm measured)]
     * [threads: the run's, one] */
    double vector[2][2];
    /* bytes/s of dfg's AdamW kernel (four arrays in, three out: the copy's one and one streams
     * slower per byte) far over any cache [threads: the run's, one] */
    double update[2];
} cli_cpu_rates;

/* FLOP/s of an (M, N, K) GEMM on the run's threads (one_thread: on one, as attention's per-head
 * GEMMs inside a parallel loop run), log-space interpolation of the grid, clamped to its edges. */
double cli_gemm_rate(const cli_cpu_rates *r, bool one_thread, double M, double N, double K);
/* bytes/s of an elementwise kernel run moving `bytes`: one thread's below CLI_ONE_THREAD_BYTES,
 * the run's threads' above, interpolated in log(bytes) between the two copy points, clamped. */
double cli_copy_rate(const cli_cpu_rates *r, double bytes);
/* FLOP/s of a kernel that is not a GEMM moving `bytes` (transcendental: its FLOPs are mostly
 * exp, tanh, log): one thread's below CLI_ONE_THREAD_BYTES. */
double cli_vector_rate(const cli_cpu_rates *r, bool transcendental, double bytes);
/* bytes/s of an AdamW update of one parameter of `elements` elements: one thread's up to
 * CLI_ADAMW_ONE_THREAD (ops/cpu/state.c runs smaller parameters on one), the run's threads' above */
double cli_update_rate(const cli_cpu_rates *r, double elements);
#define CLI_ADAMW_ONE_THREAD 65536.0
/* bytes the gelu and layernorm that measure cli_cpu_rates.vector move: in cache, split over the threads */
#define CLI_VECTOR_BYTES (1024.0 * 1024.0)

typedef struct {
    char name[16];       /* "h100", "cpu" */
    char label[320];     /* "NVIDIA H100 SXM5 80GB (datasheet)", "AMD EPYC, 2 threads (measured: ...)" */
    dfg_target target;   /* the plans it runs: cuda for the GPUs */
    double bf16_flops;   /* dense tensor-core FLOP/s for bf16/f16 GEMMs (the CPU: its f32 figure) */
    double f32_flops;    /* f32 FLOP/s without tensor cores (no TF32): f32 GEMMs and every other op */
    double bandwidth;    /* memory bytes per second (read + written) */
    double kernel_s;     /* a kernel run's time beyond its roofline: launch, dispatch, fork and join */
    bool shaped;         /* the measured CPU: GEMMs at `rates` by shape, bytes by size (else the peaks above) */
    cli_cpu_rates rates; /* with shaped */
} cli_device;

/* The device called `name` ("h100", "h200", "a100", "l40s", "cpu"); false with one line on stderr
 * naming the devices when there is none. `cpu` is measured at first use on the threads dfg run
 * would use (OMP_NUM_THREADS, else every core), through dfg's own kernels: a matmul at each
 * point of the grid above on those threads and on one, an elementwise op at the two sizes on
 * both, gelu, layernorm and AdamW, and the time a kernel run on a chain of tiny ops; a few seconds, cached in
 * $XDG_CACHE_HOME/dfg (or ~/.cache/dfg), one entry: another CPU model or thread count measures
 * again. DFG_CPU_RATES=FILE reads the rates from FILE (the cache's format, any CPU and thread
 * count: tests, or a machine measured elsewhere). DFG_CPU_ROOFLINE="F32_FLOPS,BYTES_PER_S[,SECONDS_A_KERNEL]"
 * gives fixed peaks instead (no measurement, no cache, not shaped). */
bool cli_device_named(const char *cmd, const char *name, cli_device *out);
/* The device a plan of `target` is predicted on when none is named: cuda h100, cpu cpu. */
const char *cli_device_default(dfg_target target);
/* "h100|h200|a100|l40s|cpu" */
const char *cli_device_names(void);

/* One graph stage's predicted run: each node's max(FLOPs / peak, bytes / bandwidth) and the
 * device's time a kernel run, summed. */
typedef struct {
    double s;                 /* predicted seconds of one run: roofline_s + kernels x kernel_s */
    double roofline_s;        /* the sum of each node's max(compute, memory) alone */
    double compute_s, memory_s; /* the sums of each node's compute and memory time */
    double compute_bound_s;   /* the share of s from nodes whose compute time is the larger */
    double flops, bytes;      /* one run's, recomputed copies included */
    int kernels;              /* nodes: kernel runs per run */
} cli_stage_time;

/* One run of a graph stage on device d (a host stage: zeros). */
cli_stage_time cli_stage_time_of(const dfg_stage *st, const cli_device *d);
/* "compute" or "memory": which bound holds for most of the stage's time. */
const char *cli_stage_bound(const cli_stage_time *t);

/* A step's prediction: each stage's runs (worst case, or a run's mean counts), and the step. */
typedef struct {
    cli_stage_time *stage;  /* [n_stages], one run each */
    double *runs;           /* [n_stages]: runs per step the step figure counts */
    bool *counted;          /* [n_stages]: in the step figure (of variants gated on one value, the dearest interval's) */
    double step_s, roofline_step_s; /* the counted stages at their runs; the roofline alone */
    bool from_metrics;      /* runs are a run's mean counts (cli_step_runs_from_metrics) */
} cli_step_time;

/* Worst case: every graph stage at its most runs (repeat), and of the stages gated on one value
 * (dfg_stage_when: length buckets, the decode tail) one interval's, the dearest. runs_per_step
 * (optional, [n_stages]) gives measured counts instead: every stage counted at them. false when
 * out of memory. Free with cli_step_time_free. */
bool cli_step_time_of(const dfg_program *p, const cli_device *d, const double *runs_per_step, cli_step_time *out);
void cli_step_time_free(cli_step_time *t);
/* The mean stage_runs per step over the lines of a `dfg run --metrics FILE` (0 for a stage a
 * line lacks) into runs[n_stages]; false with a message naming the file. */
bool cli_step_runs_from_metrics(const char *cmd, const char *path, const dfg_program *p, double *runs);


/* dfg fit's ranking (cli_fit_cost.c): the worst case's FLOPs, remat's extra FLOPs and predicted seconds on d. */
cli_step_cost cli_fit_step_cost_on(const dfg_program *p, const cli_device *d);

/* dfg inspect --device (cli_device_report.c): the table, and the JSON report's "prediction" object
 * (metrics: the --runs file the counts came from, or NULL). */
struct cJSON;
void cli_print_prediction(const dfg_program *p, const cli_device *d, const cli_step_time *t, const char *metrics);
struct cJSON *cli_prediction_json(const dfg_program *p, const cli_device *d, const cli_step_time *t, const char *metrics);

#endif
