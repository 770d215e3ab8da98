/* cli_run_progress.c - the live progress line of `dfg run` on a terminal.
 *
 *   step 1234/3000  41%  reward 0.912  loss 0.104  kl 2.61  20114 tok/s  arena 7.19 MiB  ETA 0:24
 *
 * One line, redrawn in place ("\r" + erase) at most ten times a second, on stderr so that
 * stdout keeps only the step lines (a pipe or a file gets no control characters: the line is
 * drawn only when stderr is a terminal). The values are the last step's; which metrics it shows:
 * reward, loss and kl when the program has them, else its first three. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#define PROGRESS_PERIOD_S 0.1
#define PROGRESS_METRICS 3

void cli_progress_init(cli_progress *pr, dfg_runtime *rt, int64_t first, int64_t total, bool quiet) {
    *pr = (cli_progress){.rt = rt, .first = first, .total = total, .last_draw = -1.0};
    pr->on = !quiet && isatty(STDERR_FILENO);
    static const char *const preferred[PROGRESS_METRICS] = {"reward", "loss", "kl"};
    int n = dfg_runtime_metric_count(rt);
    for (int k = 0; k < PROGRESS_METRICS; k++)
        for (int i = 0; i < n; i++)
            if (!strcmp(dfg_runtime_metric_name(rt, i), preferred[k])) pr->metric[pr->n_metrics++] = i;
    for (int i = 0; pr->n_metrics == 0 && i < n && i < PROGRESS_METRICS; i++) pr->metric[i] = i;
    if (pr->n_metrics == 0) pr->n_metrics = n < PROGRESS_METRICS ? n : PROGRESS_METRICS;
}

/* Wipes the line so that ordinary output can be printed where it was. */
void cli_progress_clear(cli_progress *pr) {
    if (!pr->on || !pr->drawn) return;
    fputs("\r\033[K", stderr);
    fflush(stderr);
    pr->drawn = false;
}

static void format_eta(double s, char *buf, size_t len) {
    long t = s > 0 && s < 1e8 ? (long)(s + 0.5) : 0;
    if (t >= 3600) snprintf(buf, len, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, len, "%ld:%02ld", t / 60, t % 60);
}

/* Redraws after step `step` (done steps since the start: step - first), elapsed seconds since
 * the run's first step, tok_s the last step's tokens/s (< 0: none). Throttled; force draws now. */
void cli_progress_update(cli_progress *pr, int64_t step, double elapsed, double tok_s, bool force) {
    if (!pr->on || (!force && pr->last_draw >= 0 && elapsed - pr->last_draw < PROGRESS_PERIOD_S)) return;
    pr->last_draw = elapsed;
    int64_t done = step - pr->first, end = pr->first + pr->total;
    char line[512], sb[32], eta[32];
    int n = snprintf(line, sizeof(line), "step %" PRId64 "/%" PRId64 " %3d%%", step, end,
                     pr->total > 0 ? (int)(100 * done / pr->total) : 100);
    for (int k = 0; k < pr->n_metrics && n < (int)sizeof(line); k++) {
        int i = pr->metric[k];
        if (dfg_runtime_metric_updated(pr->rt, i))
            n += snprintf(line + n, sizeof(line) - (size_t)n, "  %s %.4g", dfg_runtime_metric_name(pr->rt, i),
                          (double)dfg_runtime_metric_value(pr->rt, i));
    }
    if (tok_s >= 0 && n < (int)sizeof(line)) n += snprintf(line + n, sizeof(line) - (size_t)n, "  %.0f tok/s", tok_s);
    format_eta(done > 0 ? elapsed / (double)done * (double)(pr->total - done) : 0, eta, sizeof(eta));
    if (n < (int)sizeof(line))
        snprintf(line + n, sizeof(line) - (size_t)n, "  arena %s  ETA %s",
                 dfg_bytes_str((double)dfg_runtime_arena_bytes(pr->rt), sb, sizeof(sb)), eta);
    fprintf(stderr, "\r\033[K%s", line);
    fflush(stderr);
    pr->drawn = true;
}
