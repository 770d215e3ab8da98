/* cli_run.c - `dfg run P.dfg [--steps N] [--weights W] [--save OUT] [--seed S] [--threads N]
 * [--every K] [--quiet] [--checkpoint-dir D] [--save-every K] [--resume D] [--rollouts R] [--dump OUT]
 * [--metrics FILE.jsonl]`.
 *
 * Loads a plan and compiles it with the options it records (so the run uses the memory plan
 * that dfg compile and dfg inspect reported), loads the pipeline's embedded shared object for
 * its host stages, creates the runtime, optionally loads weights or resumes a checkpoint, runs
 * N steps printing one line of metrics per step, and writes checkpoints, parameters and dumps.
 * Checkpoints and resuming: cli_run_ckpt.c; fixed rollouts and dumps: cli_run_rollouts.c. */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../graph/ir.h"
#include "cli.h"
#include "cli_run.h"
#include "cli_run_eval.h"

#define CMD "run"

/* dlopen needs a file: the embedded shared object goes to a private temp file that is removed
 * at once (the mapping stays valid). */
static int open_host_lib(const run_args *r, const dfg_plan_info *info, void **lib) {
    *lib = NULL;
    if (!info->host_lib) return CLI_OK;
    char dir[4096], so[4200];
    if (!cli_make_tempdir(CMD, dir, sizeof(dir))) return CLI_FAILED;
    snprintf(so, sizeof(so), "%s/pipeline.so", dir);
    int rc = CLI_OK;
    if (!cli_write_file(CMD, so, info->host_lib, info->host_lib_size)) rc = CLI_FAILED;
    else if (!(*lib = dlopen(so, RTLD_NOW | RTLD_LOCAL)))
        rc = cli_error(CMD, CLI_USAGE, "%s: cannot load the pipeline's embedded code: %s", r->plan, dlerror());
    cli_remove_temp(dir, "pipeline.so");
    return rc;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------------------------------------------------------- interrupts
 * The one piece of process-wide state: a signal handler can only talk through a static flag.
 * The first SIGINT (or SIGTERM) asks the run to stop after the current step and checkpoint; a
 * second one kills the process at once with the default action (the checkpoint file on disk is
 * then the previous whole one: files are only ever renamed into place). */
static volatile sig_atomic_t interrupted;
static bool quiet_interrupts; /* a data-parallel rank other than 0: rank 0 says it */

static void on_interrupt(int sig) {
    static const char first[] = "dfg run: interrupted: stopping after this step (interrupt again to stop at once)\n";
    static const char again[] = "dfg run: interrupted again: stopping now, without saving\n";
    if (interrupted) {
        ssize_t w = write(STDERR_FILENO, again, sizeof(again) - 1);
        (void)w;
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    interrupted = sig;
    if (quiet_interrupts) return;
    ssize_t w = write(STDERR_FILENO, first, sizeof(first) - 1);
    (void)w;
}

/* In a data-parallel run SIGTERM keeps its default action: it is how the launcher stops the ranks
 * after one of them failed (and after a Ctrl-C at mpirun), and a rank cannot finish a step whose
 * collectives miss a peer (the last checkpoint written stays whole). SIGUSR1, which mpirun
 * forwards to every rank, asks them to stop after the same step with a checkpoint. */
static void catch_interrupts(bool on, bool data_parallel) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on ? on_interrupt : SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(data_parallel ? SIGUSR1 : SIGTERM, &sa, NULL);
}

/* ---------------------------------------------------------------- a run */
typedef struct {
    const run_args *a;
    dfg_runtime *rt;
    uint64_t seed;
    cli_base base;        /* a LoRA plan's frozen base, recorded in checkpoints */
    const char *ckpt_dir; /* NULL: no checkpoints */
    int64_t last_saved;   /* step of the last checkpoint written; -1: none */
    int64_t on_disk;      /* step ckpt_dir's checkpoint holds (written, or resumed from there); -1: none */
    int64_t unsaved;      /* step of the last save that failed (a full disk, say) and has not succeeded since; 0: none */
    char save_error[1280]; /* why it failed */
    cli_rollouts *rollouts;
    FILE *jsonl;
    float *mask; /* host copy of "completion_mask" for tok/s; NULL when the program has none */
    int64_t mask_n;
    double tokens; /* completion tokens over the run */
    /* what the next printed line averages: the steps since the previous line */
    double *sum;          /* [metric count] */
    int64_t *n_sum;       /* [metric count] steps that updated the metric with a value */
    int64_t *n_none;      /* [metric count] steps that updated a nullable metric without one (NaN) */
    double sum_ms, sum_tokens, sum_host_ms; /* host_ms: a device backend's host share */
    int64_t n_summed;
    cli_guard *guard;     /* with checkpoints: the last good state's counters */
    double reward_ms;     /* the reward stage's time over the run, and the steps that ran it */
    int64_t n_reward;
    cli_progress progress;
    cli_eval *eval;       /* the plan's evaluation on its eval_dataset (cli_run_eval.c), or NULL */
    int rank;             /* of a data-parallel run: rank 0 alone writes checkpoints, metrics and files */
    int agreed_stop;      /* data parallel: the signal every rank stops for, after the step the ranks agreed on */
    int64_t first;        /* the step counter when this run began (a resumed run's checkpoint step) */
    bool params_lost;     /* a step failed part way through its update: the parameters are no step's */
    int64_t params_step;  /* after a failure: the step whose parameters the runtime holds */
    const char *params_doubt; /* ... and what is known of them: "the last good one", "not known to be good" */
} run_state;

/* The signal the run stops for; 0 while it goes on. A data-parallel run acts only on what the ranks
 * agreed after a step: a signal that reaches one rank between the agreement and the next step
 * must not stop that rank alone (its peers would wait in the next step's collectives). */
static int stop_signal(const run_state *s) {
    return dfg_dist_size(s->a->dist) > 1 ? s->agreed_stop : interrupted;
}

static void print_header(const run_args *r, const dfg_program *p, dfg_runtime *rt, uint64_t seed) {
    char sb[32], pb[96];
    cli_say("%s: program '%s', %d stage%s, %s, arena %s, seed %" PRIu64, r->plan, p->name, p->n_stages,
           p->n_stages == 1 ? "" : "s", cli_params_str(p, pb, sizeof(pb)),
           dfg_bytes_str((double)dfg_runtime_arena_bytes(rt), sb, sizeof(sb)), seed);
    if (r->target == DFG_TARGET_CPU) {
        int threads = dfg_runtime_threads(rt);
        cli_say(", %d thread%s\n", threads, threads == 1 ? "" : "s");
    } else {
        size_t dev = dfg_runtime_device_bytes(rt), ws = dfg_runtime_workspace_bytes(rt);
        char db[32], wb[32];
        cli_say(", %s backend on %s%s\n", dfg_runtime_backend(rt), dfg_runtime_device(rt),
                r->eager ? ", eager launches" : ", stages replayed as graphs");
        cli_say("device memory: %zu bytes allocated (%s) = the planned arena %zu + kernel and GEMM workspace %zu (%s)\n",
                dev, dfg_bytes_str((double)dev, db, sizeof(db)), dev - ws, ws, dfg_bytes_str((double)ws, wb, sizeof(wb)));
    }
    const dfg_report *rep = dfg_program_report(p);
    if (rep && rep->world > 1) {
        char cb[32];
        cli_say("data parallel: %d ranks (rank 0 prints; tok/s counts every rank's tokens), each sending %s per step "
                "through %d collectives; a collective waits at most %.0f s\n", dfg_dist_size(r->dist),
                dfg_bytes_str(rep->comm_ring_bytes, cb, sizeof(cb)), rep->n_collectives, r->collective_timeout);
    }
}

/* Planned against used, on the host: the arena is one allocation whose pages the steps touch,
 * so the peak resident memory over the run is what the process had before it, the arena, and
 * what the plan does not cover (kernel scratch, BLAS buffers, host stages' buffers, and on an
 * emulated GPU its workspace and staging). The run's share can be below the arena: pages of the
 * arena no stage of these steps wrote (a warm-up's, a reference model's never read) are never
 * resident, and memory freed after the "before" reading (the plan's own compile) is counted
 * there but not after. That is said as it is, never as a negative "other". */
static void print_host_memory(run_state *s, size_t before) {
    size_t now, peak;
    if (s->a->target == DFG_TARGET_CUDA && !s->a->emulate_gpu) return; /* the arena is on the device */
    if (!cli_rss(&now, &peak)) return;
    size_t arena = dfg_runtime_arena_bytes(s->rt), run = peak > before ? peak - before : 0;
    char a[32], b[32], c[32], d[32];
    cli_say("host memory: peak RSS %zu (%s) = %zu before the runtime (%s) + %zu for the run (%s)", peak,
            dfg_bytes_str((double)peak, a, sizeof(a)), before, dfg_bytes_str((double)before, b, sizeof(b)), run,
            dfg_bytes_str((double)run, c, sizeof(c)));
    if (run >= arena)
        cli_say(": the arena %zu (%s) + %zu other (%s: kernel scratch, BLAS and host-stage buffers)\n", arena,
                dfg_bytes_str((double)arena, c, sizeof(c)), run - arena, dfg_bytes_str((double)(run - arena), d, sizeof(d)));
    else
        cli_say(", less than the arena %zu (%s): %s of its pages were never touched by these steps\n", arena,
                dfg_bytes_str((double)arena, c, sizeof(c)), dfg_bytes_str((double)(arena - run), d, sizeof(d)));
}

/* The completion tokens of the step just run (the sum of the completion mask); -1 without one. */
static double completion_tokens(run_state *s) {
    if (!s->mask || dfg_runtime_read(s->rt, "completion_mask", s->mask, sizeof(float) * (size_t)s->mask_n)) return -1;
    double sum = 0;
    for (int64_t i = 0; i < s->mask_n; i++) sum += s->mask[i];
    return sum;
}

/* Adds the step just run to the sums the next printed line averages. */
static void add_to_interval(run_state *s, double ms, double tokens) {
    for (int i = 0; i < dfg_runtime_metric_count(s->rt); i++)
        if (dfg_runtime_metric_updated(s->rt, i)) {
            double v = (double)dfg_runtime_metric_value(s->rt, i);
            if (isnan(v) && dfg_runtime_metric_nullable(s->rt, i)) { /* no value this step (TRL's NaN) */
                s->n_none[i]++;
                continue;
            }
            s->sum[i] += v;
            s->n_sum[i]++;
        }
    s->sum_ms += ms;
    double host = dfg_runtime_host_ms(s->rt);
    if (host >= 0) s->sum_host_ms += host;
    s->sum_tokens += tokens >= 0 ? tokens : 0;
    s->n_summed++;
}

/* One line: the metrics, the step time and tok/s as means over the steps since the previous
 * line (with --every 1, the step's own values), so a sparse log still shows the trend, not one
 * noisy step. A metric's mean is over the steps that ran its stage; one that none of them did
 * (a warm-up's loss after the warm-up) is left out; a nullable one that had no value in any of
 * them (a reward function that applied to no row) shows "n/a". Resets the sums. */
static void print_interval(run_state *s, int64_t step, int width) {
    double n = (double)(s->n_summed > 0 ? s->n_summed : 1);
    printf("step %*" PRId64, width, step);
    for (int i = 0; i < dfg_runtime_metric_count(s->rt); i++) {
        if (s->n_sum[i] > 0) printf("  %s %.5g", dfg_runtime_metric_name(s->rt, i), s->sum[i] / (double)s->n_sum[i]);
        else if (s->n_none[i] > 0) printf("  %s n/a", dfg_runtime_metric_name(s->rt, i));
        s->sum[i] = 0;
        s->n_sum[i] = s->n_none[i] = 0;
    }
    printf("  %.1f ms", s->sum_ms / n);
    if (dfg_runtime_host_ms(s->rt) >= 0) printf(" (host %.1f ms)", s->sum_host_ms / n);
    if (s->mask) printf("  %.0f tok/s", s->sum_ms > 0 ? s->sum_tokens / (s->sum_ms * 1e-3) : 0.0);
    printf("\n");
    fflush(stdout);
    s->sum_ms = s->sum_tokens = s->sum_host_ms = 0;
    s->n_summed = 0;
}

/* A number as JSON: a float metric with the 9 digits that give it back exactly (cJSON would
 * print the double's 17), fixed decimals for times; null when not finite. */
static bool add_number(cJSON *o, const char *key, double v, const char *fmt) {
    char buf[64];
    if (!isfinite(v)) return cJSON_AddNullToObject(o, key) != NULL;
    snprintf(buf, sizeof(buf), fmt, v);
    return cJSON_AddRawToObject(o, key, buf) != NULL;
}

/* One line of --metrics: {"step":3,"loss":..,...,"ms":..,"tokens_per_s":..,"arena_bytes":..};
 * a metric is null when the step did not run its stage, tokens_per_s when the program has no
 * completion mask. A metric named like one of the
 * line's own keys is written as "metric.<name>". */
static int write_jsonl(run_state *s, int64_t step, double ms, double tokens) {
    static const char *const own[] = {"step", "ms", "host_ms", "reward_ms", "tokens_per_s", "arena_bytes"};
    cJSON *o = cJSON_CreateObject();
    bool ok = o && add_number(o, "step", (double)step, "%.0f");
    for (int i = 0; ok && i < dfg_runtime_metric_count(s->rt); i++) {
        const char *name = dfg_runtime_metric_name(s->rt, i);
        char key[256];
        bool clash = false;
        for (size_t k = 0; k < sizeof(own) / sizeof(own[0]); k++) clash = clash || !strcmp(name, own[k]);
        snprintf(key, sizeof(key), "%s%s", clash ? "metric." : "", name);
        /* null: the step did not run the metric's stage */
        double v = dfg_runtime_metric_updated(s->rt, i) ? (double)dfg_runtime_metric_value(s->rt, i) : NAN;
        ok = add_number(o, key, v, "%.9g");
    }
    ok = ok && add_number(o, "ms", ms, "%.3f");
    if (dfg_runtime_host_ms(s->rt) >= 0) ok = ok && add_number(o, "host_ms", dfg_runtime_host_ms(s->rt), "%.3f");
    if (s->a->reward_cmd || s->a->reward_lib) /* the external reward's share of the step */
        ok = ok && add_number(o, "reward_ms", dfg_runtime_stage_ms(s->rt, "reward"), "%.3f");
    ok = ok && add_number(o, "tokens_per_s", tokens >= 0 && ms > 0 ? tokens / (ms * 1e-3) : NAN, "%.1f");
    ok = ok && add_number(o, "arena_bytes", (double)dfg_runtime_arena_bytes(s->rt), "%.0f");
    /* which stages ran, how often (a length bucket's stage, how far decode went) and for how
     * long (on a device: the host's time to launch them, device time only where it waited) */
    cJSON *runs = ok ? cJSON_AddObjectToObject(o, "stage_runs") : NULL, *times = NULL;
    ok = ok && runs && (times = cJSON_AddObjectToObject(o, "stage_ms"));
    for (int i = 0; ok && i < dfg_runtime_stage_count(s->rt); i++) {
        const char *name = dfg_runtime_stage_name(s->rt, i);
        if (dfg_runtime_stage_runs(s->rt, i) <= 0) continue;
        ok = cJSON_AddNumberToObject(runs, name, dfg_runtime_stage_runs(s->rt, i)) != NULL &&
             add_number(times, name, dfg_runtime_stage_ms(s->rt, name), "%.3f");
    }
    char *line = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!line) return cli_error(CMD, CLI_FAILED, "%s: out of memory", s->a->metrics);
    /* flushed per line: a killed run keeps the lines of the steps it finished */
    bool written = fprintf(s->jsonl, "%s\n", line) >= 0 && fflush(s->jsonl) == 0;
    cJSON_free(line);
    return written ? CLI_OK : cli_error(CMD, CLI_FAILED, "cannot write %s: %s", s->a->metrics, strerror(errno));
}

/* Writes the run's checkpoint after the step just run. A write that fails (a full disk, say)
 * leaves the checkpoint on disk whole (a save replaces it only by a rename): the failure is kept
 * in s->unsaved and s->save_error for the caller to report, and returned. */
static int checkpoint(run_state *s, bool announce) {
    char path[4400];
    int64_t step = dfg_runtime_steps_done(s->rt);
    if (s->rank > 0) { /* rank 0 writes the run's checkpoint: the ranks hold one state */
        s->last_saved = step;
        return CLI_OK;
    }
    double t0 = now_s();
    if (cli_ckpt_save(s->rt, s->ckpt_dir, NULL, s->seed, &s->base, path, sizeof(path), s->save_error, sizeof(s->save_error))) {
        s->unsaved = step;
        return CLI_FAILED;
    }
    s->last_saved = s->on_disk = step;
    s->unsaved = 0;
    if (announce) cli_say("checkpoint: step %" PRId64 " saved to %s (%.1f ms)\n", step, path, 1e3 * (now_s() - t0));
    return CLI_OK;
}

/* "continue with: dfg run P.dfg --resume D --weights W --steps 3 ..." from the checkpoint resume,
 * which holds step `at`: a command that works as given (cli_run_hint.c). */
static char *continue_hint(const run_state *s, const char *resume, int64_t at, char *buf, size_t len) {
    char cmd[6000];
    cli_run_resume_command(s->a, dfg_runtime_program(s->rt), resume, at - s->first, false, cmd, sizeof(cmd));
    snprintf(buf, len, "continue with: %s", cmd);
    return buf;
}

/* What the checkpoint directory still holds after a save failed: "D/checkpoint.safetensors
 * still holds step 10 (continue with: dfg run P.dfg --resume D ...)". */
static void still_saved(const run_state *s, char *buf, size_t len) {
    char hint[6100];
    if (s->on_disk >= 0)
        snprintf(buf, len, "%s/%s still holds step %" PRId64 " (%s)", s->ckpt_dir, CLI_CKPT_FILE, s->on_disk,
                 continue_hint(s, s->ckpt_dir, s->on_disk, hint, sizeof(hint)));
    else snprintf(buf, len, "no checkpoint of this run is in %s", s->ckpt_dir);
}

/* A periodic save failed: one warning with the step, the reason and what is safe; training goes
 * on, and the next interval (or the end of the run) tries again. */
static void warn_unsaved(run_state *s, int64_t step, int64_t last_step) {
    char kept[12000], next[64] = "at the end of the run";
    still_saved(s, kept, sizeof(kept));
    if (step + s->a->save_every <= last_step) snprintf(next, sizeof(next), "at step %" PRId64, step + s->a->save_every);
    cli_progress_clear(&s->progress);
    fprintf(stderr, "dfg run: warning: step %" PRId64 ": the checkpoint was not saved: %s; %s; training goes on and "
                    "saves again %s\n", step, s->save_error, kept, next);
}

/* The first metric the step updated that is not finite (a nullable one's NaN is "no value");
 * -1 when all are. */
static int nonfinite_metric(dfg_runtime *rt) {
    for (int i = 0; i < dfg_runtime_metric_count(rt); i++) {
        if (!dfg_runtime_metric_updated(rt, i)) continue;
        float v = dfg_runtime_metric_value(rt, i);
        if (!isfinite(v) && !(isnan(v) && dfg_runtime_metric_nullable(rt, i))) return i;
    }
    return -1;
}

/* Without --checkpoint-dir: what a failure leaves (--save is written after the message). */
static const char *nothing_kept(const run_state *s) {
    return s->a->save ? "no checkpoint (no --checkpoint-dir)" : "nothing saved (no --checkpoint-dir, no --save)";
}

/* A step failed before it changed the trained state: on a NaN or Inf (found before any update), or
 * in a stage before the update (the reward program died, say). With checkpoints, saves the last
 * good state (the guard undoes what the failed step changed: counters, gradient buffers), then
 * reports in one line: the reason first, then what was kept. */
static int stop_saving(run_state *s, const char *why) {
    int64_t good = dfg_runtime_steps_done(s->rt);
    char path[4400], kept[12000], hint[6100];
    cli_progress_clear(&s->progress);
    s->params_step = good, s->params_doubt = "the last good one";
    if (!dfg_dist_reports(s->a->dist)) return CLI_FAILED; /* a lower rank reports the collective that timed out */
    if (s->rank > 0) return cli_error(CMD, CLI_FAILED, "%s: rank %d: %s", s->a->plan, s->rank, why);
    if (!s->ckpt_dir) return cli_error(CMD, CLI_FAILED, "%s: %s; %s", s->a->plan, why, nothing_kept(s));
    if (s->guard && cli_guard_restore(s->guard)) return cli_error(CMD, CLI_FAILED, "%s: %s", s->a->plan, why);
    if (cli_ckpt_save(s->rt, s->ckpt_dir, NULL, s->seed, &s->base, path, sizeof(path), s->save_error, sizeof(s->save_error))) {
        still_saved(s, kept, sizeof(kept));
        return cli_error(CMD, CLI_FAILED, "%s: %s; the state after step %" PRId64 " (the last good one) was not saved: "
                         "%s; %s", s->a->plan, why, good, s->save_error, kept);
    }
    s->last_saved = s->on_disk = good;
    return cli_error(CMD, CLI_FAILED, "%s: %s; the state after step %" PRId64 " (the last good one) is saved to %s "
                     "(%s)", s->a->plan, why, good, path, continue_hint(s, s->ckpt_dir, good, hint, sizeof(hint)));
}

/* A metric of the step just run is not finite, but its gradients were: the update was applied,
 * so the state is the step's, and nothing says it is good. It is saved beside the checkpoint
 * (D/checkpoint-step-N.safetensors, what --resume of that file continues), so the last
 * checkpoint, from before the doubt, is not replaced. */
static int stop_after_update(run_state *s, const char *why) {
    int64_t step = dfg_runtime_steps_done(s->rt);
    char path[4400], file[64], kept[12000], hint[6100];
    cli_progress_clear(&s->progress);
    s->params_step = step, s->params_doubt = "not known to be good";
    if (s->rank > 0) return cli_error(CMD, CLI_FAILED, "%s: rank %d: %s", s->a->plan, s->rank, why);
    if (!s->ckpt_dir) return cli_error(CMD, CLI_FAILED, "%s: %s; %s", s->a->plan, why, nothing_kept(s));
    still_saved(s, kept, sizeof(kept));
    snprintf(file, sizeof(file), "checkpoint-step-%" PRId64 ".safetensors", step);
    if (cli_ckpt_save(s->rt, s->ckpt_dir, file, s->seed, &s->base, path, sizeof(path), s->save_error, sizeof(s->save_error)))
        return cli_error(CMD, CLI_FAILED, "%s: %s; the state after step %" PRId64 " was not saved: %s; %s", s->a->plan,
                         why, step, s->save_error, kept);
    return cli_error(CMD, CLI_FAILED, "%s: %s; the state after step %" PRId64 " (not known to be good) is saved to %s "
                     "(%s); %s", s->a->plan, why, step, path, continue_hint(s, path, step, hint, sizeof(hint)), kept);
}

/* Data parallel, after each step: the whole batch's completion tokens (for tok/s), and whether
 * any rank was interrupted, so that every rank stops after the same step (an interrupt reaches the
 * ranks at slightly different times). */
static int agree_after_step(run_state *s, double *tokens) {
    if (dfg_dist_size(s->a->dist) == 1) return CLI_OK;
    int seen = interrupted; /* read once: the flag may change while the ranks agree */
    double v[3] = {*tokens, seen ? 1.0 : 0.0, seen == SIGUSR1 ? 1.0 : 0.0};
    char err[512] = "";
    if (dfg_dist_sum(s->a->dist, v, 3, err, sizeof(err))) {
        cli_progress_clear(&s->progress);
        return dfg_dist_reports(s->a->dist) ? cli_error(CMD, CLI_FAILED, "%s: after step %" PRId64 ": %s", s->a->plan,
                                                        dfg_runtime_steps_done(s->rt), err)
                                            : CLI_FAILED;
    }
    *tokens = *tokens < 0 ? *tokens : v[0];
    if (v[1] > 0) s->agreed_stop = v[2] > 0 ? SIGUSR1 : SIGINT;
    return CLI_OK;
}

/* This run's steps: --steps, or what is left to --max-steps (a total, as TRL's max_steps). */
static int64_t this_runs_steps(const run_state *s, int64_t first) {
    if (s->a->max_steps < 0) return s->a->steps;
    if (first < s->a->max_steps) return s->a->max_steps - first;
    cli_say("the step counter is at %" PRId64 ", at or past --max-steps %" PRId64 ": no steps to run\n", first,
            s->a->max_steps);
    return 0;
}

/* Runs the steps; stops early (CLI_OK) after a step during which an interrupt came. */
static int run_steps(run_state *s) {
    const run_args *a = s->a;
    int64_t first = dfg_runtime_steps_done(s->rt), done = 0, steps = this_runs_steps(s, first);
    if (a->plan_max_steps && first + steps > a->plan_max_steps) /* the schedule's rate is 0 or stays past its end */
        return cli_error(CMD, CLI_USAGE, "%s: %" PRId64 " steps from step %" PRId64 " pass the plan's max_steps %" PRId64
                         " (its learning-rate schedule's length): give --steps %" PRId64 " at most, or compile with a "
                         "larger max_steps", a->plan, steps, first, a->plan_max_steps,
                         a->plan_max_steps > first ? a->plan_max_steps - first : 0);
    int width = snprintf(NULL, 0, "%" PRId64, first + steps);
    double start = now_s();
    s->first = s->params_step = first;
    s->params_doubt = "the last completed one";
    cli_progress_init(&s->progress, s->rt, first, steps, a->quiet);
    int rc0 = steps ? cli_eval_maybe(s->eval, first, true, false, s->jsonl, &s->progress) : CLI_OK; /* eval_on_start */
    if (rc0) return rc0;
    for (int64_t i = 1; i <= steps && !stop_signal(s); i++) {
        int64_t step = first + i;
        int rc = cli_rollouts_write(s->rt, s->rollouts);
        if (!rc && s->guard) rc = cli_guard_keep(s->guard);
        if (rc) return rc;
        double t0 = now_s();
        dfg_status st = dfg_runtime_step(s->rt);
        if (st == DFG_ERR_NUMERIC) return stop_saving(s, dfg_runtime_error(s->rt));
        if (st && dfg_runtime_params_intact(s->rt)) return stop_saving(s, dfg_runtime_error(s->rt));
        if (st) {
            cli_progress_clear(&s->progress);
            s->params_lost = true; /* the update stopped part way */
            if (!dfg_dist_reports(a->dist)) return CLI_FAILED; /* a lower rank reports the collective that timed out */
            return cli_error(CMD, CLI_FAILED, "%s: %s", a->plan, dfg_runtime_error(s->rt));
        }
        double reward_ms = dfg_runtime_stage_ms(s->rt, "reward");
        if (reward_ms >= 0) s->reward_ms += reward_ms, s->n_reward++;
        double ms = 1e3 * (now_s() - t0), tokens = completion_tokens(s);
        if ((rc = agree_after_step(s, &tokens))) return rc;
        bool shown = !a->quiet && (step % a->every == 0 || i == steps || stop_signal(s));
        done = i;
        s->params_step = step;
        if (tokens >= 0) s->tokens += tokens;
        add_to_interval(s, ms, tokens);
        if (s->jsonl && (rc = write_jsonl(s, step, ms, tokens))) return rc;
        int bad = nonfinite_metric(s->rt);
        if (bad >= 0) {
            char why[400];
            snprintf(why, sizeof(why), "step %" PRId64 ": metric '%s' is %g (the step's update was applied: its "
                     "gradients were finite)", step, dfg_runtime_metric_name(s->rt, bad),
                     (double)dfg_runtime_metric_value(s->rt, bad));
            return stop_after_update(s, why);
        }
        if (shown) {
            cli_progress_clear(&s->progress);
            print_interval(s, step, width);
        }
        if ((rc = cli_eval_maybe(s->eval, step, false, false, s->jsonl, &s->progress))) return rc;
        if (s->ckpt_dir && a->save_every && step % a->save_every == 0) {
            if (shown) cli_progress_clear(&s->progress);
            if (checkpoint(s, shown)) warn_unsaved(s, step, first + steps);
        }
        cli_progress_update(&s->progress, step, now_s() - start, tokens >= 0 && ms > 0 ? tokens / (ms * 1e-3) : -1,
                            i == steps);
    }
    cli_progress_clear(&s->progress);
    double total = now_s() - start;
    if (done > 0) {
        cli_say("%" PRId64 " step%s in %.3f s (%.2f ms/step", done, done == 1 ? "" : "s", total, 1e3 * total / (double)done);
        if (s->mask) cli_say(", %.0f tok/s", total > 0 ? s->tokens / total : 0.0);
        cli_say(")\n");
        if ((a->reward_cmd || a->reward_lib) && s->n_reward > 0)
            cli_say("reward %s: %.2f ms per step on average (%.1f%% of the step time)\n", a->reward_cmd ? "program" : "plugin",
                    s->reward_ms / (double)s->n_reward, total > 0 ? 100.0 * 1e-3 * s->reward_ms / total : 0.0);
    }
    return CLI_OK;
}

/* --seed, else the checkpoint's seed when resuming, else the plan's setting "seed" (TRL's name
 * for it), else the runtime's default. */
static int pick_seed(const run_args *a, const dfg_program *p, bool ckpt_has_seed, uint64_t ckpt_seed, uint64_t *seed) {
    *seed = (uint64_t)a->seed;
    if (a->seed_given) {
        if (a->resume && ckpt_has_seed && ckpt_seed != *seed)
            fprintf(stderr, "dfg run: warning: --seed %" PRIu64 " is not the checkpoint's seed %" PRIu64
                            "; data and sampling streams will differ from the original run's\n", *seed, ckpt_seed);
        return CLI_OK;
    }
    if (a->resume && ckpt_has_seed) {
        *seed = ckpt_seed;
        return CLI_OK;
    }
    if (!dfg_program_has(p, "seed")) return CLI_OK; /* a plan without the setting */
    int64_t s = dfg_program_int(p, "seed");
    if (s < 0) return cli_error(CMD, CLI_USAGE, "%s: the plan's setting seed is %" PRId64 ", not a seed (0 or more)",
                                a->plan, s);
    *seed = (uint64_t)s;
    return CLI_OK;
}

/* The checkpoint directory: --checkpoint-dir, else the directory --resume names. */
static const char *checkpoint_dir(const run_args *a) {
    struct stat st;
    if (a->ckpt_dir) return a->ckpt_dir;
    if (a->resume && stat(a->resume, &st) == 0 && S_ISDIR(st.st_mode)) return a->resume;
    return NULL;
}

/* Is the checkpoint file at path dir's own (so that a failed save leaves it there)? */
static bool in_checkpoint_dir(const char *dir, const char *path) {
    char own[4400], a[PATH_MAX], b[PATH_MAX];
    snprintf(own, sizeof(own), "%s/%s", dir, CLI_CKPT_FILE);
    return realpath(own, a) && realpath(path, b) && !strcmp(a, b);
}

/* Everything before the first step: checkpoint or weights, rollouts, the metrics file. */
static int prepare(run_state *s, const dfg_safetensors *ckpt, const char *ckpt_path, int64_t ckpt_step) {
    const run_args *a = s->a;
    int rc = CLI_OK, n_loaded = 0;
    if (a->weights) {
        if (dfg_runtime_load_safetensors(s->rt, a->weights, true, &n_loaded))
            return cli_error(CMD, CLI_USAGE, "%s", dfg_runtime_error(s->rt));
        cli_say("loaded %d tensors from %s\n", n_loaded, a->weights);
    }
    if (a->adapter) {
        if (dfg_runtime_load_adapter(s->rt, a->adapter, &n_loaded))
            return cli_error(CMD, CLI_USAGE, "%s", dfg_runtime_error(s->rt));
        cli_say("loaded the adapter from %s (%d tensors)\n", a->adapter, n_loaded);
    }
    /* the base the adapters train on (none without --weights: a checkpoint then refuses to resume
     * for want of the base, below) */
    if (a->weights && dfg_weights_base_digest(s->rt, s->base.digest, sizeof(s->base.digest)))
        return cli_error(CMD, CLI_FAILED, "%s", dfg_runtime_error(s->rt));
    s->base.from = a->weights;
    if (ckpt) {
        if (dfg_weights_check_base(s->rt, dfg_st_metadata(ckpt, "dfg.base"), dfg_st_metadata(ckpt, "dfg.base_from"),
                                   ckpt_path, a->weights))
            return cli_error(CMD, CLI_USAGE, "--resume: %s", dfg_runtime_error(s->rt));
        if ((rc = cli_ckpt_restore(s->rt, ckpt, ckpt_path, ckpt_step))) return rc;
        cli_say("resumed from %s: step %" PRId64 ", %d tensors\n", ckpt_path, ckpt_step, dfg_st_count(ckpt));
        s->last_saved = ckpt_step;
        if (s->ckpt_dir && in_checkpoint_dir(s->ckpt_dir, ckpt_path)) s->on_disk = ckpt_step;
    }
    if (s->rollouts && (rc = cli_rollouts_apply(s->rt, s->rollouts))) return rc;
    if (dfg_runtime_broadcast_state(s->rt)) /* every rank starts from rank 0's state, as DDP does */
        return cli_error(CMD, CLI_FAILED, "%s", dfg_runtime_error(s->rt));
    s->sum = calloc((size_t)dfg_runtime_metric_count(s->rt) + 1, sizeof(double));
    s->n_sum = calloc((size_t)dfg_runtime_metric_count(s->rt) + 1, sizeof(int64_t));
    s->n_none = calloc((size_t)dfg_runtime_metric_count(s->rt) + 1, sizeof(int64_t));
    if (!s->sum || !s->n_sum || !s->n_none)
        return cli_error(CMD, CLI_FAILED, "out of memory");
    if (a->metrics && !(s->jsonl = fopen(a->metrics, a->resume ? "a" : "w")))
        return cli_error(CMD, CLI_FAILED, "cannot create %s: %s", a->metrics, strerror(errno));
    const dfg_tensor *mask = dfg_find(dfg_runtime_program(s->rt), "completion_mask");
    if (mask && mask->dtype == DFG_F32 && (mask->kind == DFG_STATE || mask->kind == DFG_INPUT)) {
        s->mask_n = dfg_shape_numel(mask->shape);
        if (!(s->mask = malloc(sizeof(float) * (size_t)(s->mask_n ? s->mask_n : 1))))
            return cli_error(CMD, CLI_FAILED, "out of memory");
    }
    return CLI_OK;
}

/* A LoRA plan: frozen base weights (role base_model), adapters as the PARAMs. */
static bool is_lora(const dfg_program *p) {
    for (int i = 0; i < p->n_tensors; i++)
        if (p->tensors[i]->role == DFG_ROLE_BASE_MODEL) return true;
    return false;
}

/* Writes --save from the parameters the runtime holds: a LoRA plan's adapter (DIR/) or adapters
 * (FILE.safetensors), the policy merged into its base (--merge), a model directory, or one file.
 * The reason of a failure goes to stderr; with say, success is said on stdout. */
static int write_save(run_state *s, bool say) {
    const run_args *a = s->a;
    bool dir = a->save_dir, lora = is_lora(dfg_runtime_program(s->rt)), adapter = dir && lora && !a->merge;
    dfg_status st = adapter   ? dfg_runtime_save_adapter(s->rt, a->save)
                    : a->merge ? dfg_runtime_save_merged(s->rt, a->save, (size_t)a->max_shard)
                    : dir      ? dfg_runtime_save_model_dir(s->rt, a->save, (size_t)a->max_shard)
                               : dfg_runtime_save_safetensors(s->rt, a->save, false);
    if (st) return cli_error(CMD, CLI_FAILED, "--save %s: %s", a->save, dfg_runtime_error(s->rt));
    if (!say) return CLI_OK;
    char copied[256];
    const char *copies = dir ? dfg_weights_copied_files(dfg_runtime_program(s->rt), adapter, copied, sizeof(copied)) : "";
    if (adapter) cli_say("saved the adapter to %s (PEFT's adapter_config.json, adapter_model.safetensors and README.md%s%s)\n",
                         a->save, *copies ? "; copied from the base: " : "", copies);
    else if (a->merge) cli_say("saved the policy merged into its base to %s (a Hugging Face model directory%s%s)\n",
                               a->save, *copies ? "; copied from the source: " : "", copies);
    else if (!dir) cli_say("saved the %s to %s\n", lora ? "adapters" : "parameters", a->save);
    else cli_say("saved the parameters to %s (a Hugging Face model directory%s%s)\n", a->save,
                 *copies ? "; copied from the source: " : "", copies);
    return CLI_OK;
}

/* The last line when --save could not be written: the command that writes it from the
 * checkpoint on disk, which holds step `at`. */
static void export_hint(const run_state *s, int64_t at) {
    char cmd[6000];
    cli_run_resume_command(s->a, dfg_runtime_program(s->rt), s->ckpt_dir, at - s->first, true, cmd, sizeof(cmd));
    cli_error(CMD, 0, "--save %s was not written; export step %" PRId64 " from the checkpoint with: %s", s->a->save, at, cmd);
}

/* A run that stopped on an error (its message printed) still writes --save, from the parameters
 * the runtime holds: the last completed step's (or the step a failure stopped before its update);
 * one line says which. Where the runtime's parameters are no step's (an update stopped part way)
 * or the write fails, the last line is the command that exports the checkpoint on disk. */
static void save_after_failure(run_state *s) {
    if (!s->a->save || s->rank > 0 || !s->rt) return;
    if (!s->params_lost && !write_save(s, false)) {
        cli_error(CMD, 0, "--save: wrote the parameters after step %" PRId64 " (%s) to %s", s->params_step,
                  s->params_doubt, s->a->save);
        return;
    }
    if (s->ckpt_dir && s->on_disk >= 0) export_hint(s, s->on_disk);
    else cli_error(CMD, 0, "--save %s was not written, and no checkpoint of this run is on disk", s->a->save);
}

/* After the last step (or an interrupt): the checkpoint, --save, --dump. */
static int finish(run_state *s) {
    const run_args *a = s->a;
    int64_t step = dfg_runtime_steps_done(s->rt);
    int rc = CLI_OK;
    char path[4400], kept[12000], hint[6100];
    int sig = stop_signal(s);
    /* the last save: a failure (a full disk) is reported, and --save and --dump, which may go to
     * another disk, are still written; the run then fails */
    int save_rc = s->ckpt_dir && s->last_saved != step ? checkpoint(s, !sig) : CLI_OK;
    if (save_rc) {
        still_saved(s, kept, sizeof(kept));
        cli_error(CMD, 0, "%s: step %" PRId64 ": the checkpoint was not saved: %s; %s", a->plan, step, s->save_error, kept);
    }
    if (sig) {
        snprintf(path, sizeof(path), "%s/%s", s->ckpt_dir ? s->ckpt_dir : "", CLI_CKPT_FILE);
        if (s->rank > 0) return 128 + sig; /* rank 0 says it, and wrote the checkpoint */
        if (s->ckpt_dir && !save_rc)
            cli_error(CMD, 0, "interrupted after step %" PRId64 ": checkpoint saved to %s (%s)", step, path,
                      continue_hint(s, s->ckpt_dir, step, hint, sizeof(hint)));
        else if (!s->ckpt_dir) cli_error(CMD, 0, "interrupted after step %" PRId64 ": nothing saved (no --checkpoint-dir)", step);
        else cli_error(CMD, 0, "interrupted after step %" PRId64 ": its checkpoint was not saved (above)", step);
        return 128 + sig;
    }
    if (a->save && write_save(s, true)) {
        if (s->on_disk == step) export_hint(s, step);
        return CLI_FAILED;
    }
    if (a->dump) {
        char st[32], sd[32];
        snprintf(st, sizeof(st), "%" PRId64, step);
        snprintf(sd, sizeof(sd), "%" PRIu64, s->seed);
        const char *meta[] = {"format", "pt", "producer", "dfg", "dfg.step", st, "dfg.seed", sd,
                              "dfg.rollouts", a->rollouts ? a->rollouts : "(generated)"};
        if ((rc = cli_dump_write(s->rt, a->dump, meta, 5))) return rc;
        cli_say("dumped step %" PRId64 " to %s\n", step, a->dump);
    }
    return save_rc;
}

/* Creates the runtime, loads, runs, saves. */
static int execute(const run_args *a, dfg_program *p, void *lib) {
    cli_quiet = a->quiet;
    run_state s = {.a = a, .last_saved = -1, .on_disk = -1, .ckpt_dir = checkpoint_dir(a), .rank = dfg_dist_rank(a->dist)};
    dfg_safetensors *ckpt = NULL;
    char ckpt_path[4400] = "";
    int64_t ckpt_step = 0;
    uint64_t ckpt_seed = 0;
    bool ckpt_has_seed = false;
    int lock = -1, rc = CLI_OK;
    if (a->resume)
        rc = cli_ckpt_open(a->resume, &ckpt, ckpt_path, sizeof(ckpt_path), &ckpt_step, &ckpt_seed, &ckpt_has_seed);
    if (!rc && a->save_every && !s.ckpt_dir) rc = cli_error(CMD, CLI_USAGE, "--save-every needs --checkpoint-dir");
    if (!rc) rc = pick_seed(a, p, ckpt_has_seed, ckpt_seed, &s.seed);
    if (!rc && a->dump) rc = cli_dump_check(p, a->plan);
    if (!rc && a->rollouts) rc = cli_rollouts_load(p, a->plan, a->rollouts, &s.rollouts);
    if (!rc && s.ckpt_dir && s.rank == 0) rc = cli_ckpt_prepare(s.ckpt_dir, a->resume != NULL, &lock);
    dfg_reward_source *reward = NULL; /* the host stages' service DFG_REWARD_SERVICE */
    if (!rc) rc = cli_run_open_reward(a, p, &reward);
    dfg_env_source *env = NULL; /* DFG_ENV_SERVICE: a plan with tools */
    if (!rc) rc = cli_run_open_env(a, p, &env);
    if (!rc) rc = cli_run_check_sources(a, p, reward, env);
    dfg_service services[3];
    int n_services = 0;
    if (reward) services[n_services++] = (dfg_service){DFG_REWARD_SERVICE, reward};
    if (env) services[n_services++] = (dfg_service){DFG_ENV_SERVICE, env};
    /* the run's folder for the pipeline's logs (log_completions): the checkpoints', else here */
    services[n_services++] = (dfg_service){DFG_OUTPUT_DIR_SERVICE, (void *)(s.ckpt_dir ? s.ckpt_dir : ".")};
    dfg_run_options opt = dfg_run_options_default();
    opt.target = a->target;
    opt.emulate_gpu = a->emulate_gpu;
    opt.eager = a->eager;
    opt.seed = s.seed;
    /* the emulator runs kernels on one thread; more would only spin in OpenMP between GEMMs */
    opt.n_threads = (int)(a->threads ? a->threads : a->emulate_gpu ? 1 : 0);
    opt.host_lib = lib;
    opt.services = services;
    opt.n_services = n_services;
    opt.dist = a->dist;
    size_t rss_before = 0, peak = 0;
    cli_rss_reset_peak(); /* the plan's compile may have peaked higher: measure the run alone */
    bool rss = cli_rss(&rss_before, &peak);
    if (!rc && dfg_runtime_create(p, &opt, &s.rt))
        rc = cli_error(CMD, CLI_FAILED, "%s: %s", a->plan, s.rt ? dfg_runtime_error(s.rt) : "out of memory");
    if (!rc) {
        print_header(a, p, s.rt, s.seed);
        rc = prepare(&s, ckpt, ckpt_path, ckpt_step);
    }
    dfg_st_free(ckpt); /* its bytes are in the runtime now */
    if (!rc && s.ckpt_dir) rc = cli_guard_create(s.rt, &s.guard);
    if (!rc) {
        catch_interrupts(true, dfg_dist_size(a->dist) > 1);
        int64_t at = dfg_runtime_steps_done(s.rt); /* --eval-only: evaluate the loaded state once */
        if (!(rc = cli_eval_open(a, s.rt, s.seed, &s.eval)))
            rc = a->eval_only ? cli_eval_maybe(s.eval, at, false, true, s.jsonl, NULL) : run_steps(&s);
        if (rc) save_after_failure(&s);
        if (!rc && rss) print_host_memory(&s, rss_before);
        if (!rc && !a->eval_only) rc = finish(&s);
        catch_interrupts(false, dfg_dist_size(a->dist) > 1);
    }
    dfg_runtime_free(s.rt);
    dfg_reward_source_free(reward); /* ends the programs: after the runtime, whose stages used them */
    dfg_env_source_free(env);
    cli_rollouts_free(s.rollouts);
    free(s.mask);
    free(s.sum);
    cli_guard_free(s.guard);
    cli_eval_free(s.eval);
    free(s.n_sum);
    free(s.n_none);
    if (s.jsonl && fclose(s.jsonl) != 0 && !rc) rc = cli_error(CMD, CLI_FAILED, "cannot write %s", a->metrics);
    if (lock >= 0) close(lock);
    return rc;
}

/* Joins the data-parallel run this process belongs to (a world of one without mpirun). Ranks
 * other than 0 print nothing but their own failures, and write no files: rank 0 writes the run's
 * metrics, checkpoints, saved parameters and dumps. */
static int join_run(run_args *r) {
    char err[512] = "";
    if (dfg_dist_open(&r->dist, r->collective_timeout, err, sizeof(err)))
        return cli_error(CMD, CLI_FAILED, "%s", err[0] ? err : "cannot join the MPI run");
    if (dfg_dist_rank(r->dist) > 0) r->quiet = true, r->metrics = NULL, r->save = NULL, r->dump = NULL, quiet_interrupts = true;
    return CLI_OK;
}

int cli_run(int argc, char **argv) {
    run_args r;
    int rc = cli_run_parse_args(argc, argv, &r);
    if (rc) return rc < 0 ? CLI_OK : rc;
    if ((rc = join_run(&r))) {
        dfg_dist_close(r.dist, rc);
        return rc;
    }
    dfg_program *p = NULL;
    dfg_plan_info info;
    if ((rc = cli_load_plan(CMD, r.plan, &p, &info))) {
        dfg_dist_close(r.dist, rc);
        return rc;
    }
    void *lib = NULL;
    r.target = info.target;
    if (r.emulate_gpu && info.target != DFG_TARGET_CUDA)
        rc = cli_error(CMD, CLI_USAGE, "%s: --emulate-gpu runs plans compiled for cuda; this one is for %s", r.plan,
                       dfg_target_name(info.target));
    if (!rc) rc = cli_run_plan_steps(&r, p);
    if (!rc) rc = cli_run_check_plan(&r, p);
    if (!rc) rc = open_host_lib(&r, &info, &lib);
    if (!rc) rc = execute(&r, p, lib);
    dfg_program_free(p);
    dfg_plan_info_free(&info);
    if (lib) dlclose(lib);
    /* after a failure the other ranks are stopped too; an interrupt stopped every rank after one step */
    dfg_dist_close(r.dist, rc > 128 ? 0 : rc);
    return rc;
}
