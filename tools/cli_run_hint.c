/* cli_run_hint.c - the command lines dfg run prints after an interrupt or a failure: the one
 * that continues the run from its checkpoint, and the one that exports the checkpoint to what
 * --save names. Each must work as given, pasted into the same shell in the same directory: so
 * it carries every option the resumed run needs again (a LoRA plan's --weights, the reward, the
 * rollout file, the thread count the checkpoint was written with, ...), each argument quoted
 * for the shell. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../graph/ir.h"
#include "cli_run.h"

const char *cli_program = "dfg";

typedef struct {
    char *buf;
    size_t len, at;
} line_buf;

static void put(line_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(line_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->buf + b->at, b->at < b->len ? b->len - b->at : 0, fmt, ap);
    va_end(ap);
    if (n > 0) b->at += (size_t)n;
    if (b->at >= b->len) b->at = b->len - 1; /* truncated: what fits stays a string */
}

/* An argument as the shell reads it back: bare when it holds only characters the shell takes
 * literally, else in single quotes (a quote inside as '\''). */
static void put_word(line_buf *b, const char *w) {
    static const char plain[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./=:,@%+-";
    if (*w && strspn(w, plain) == strlen(w)) {
        put(b, " %s", w);
        return;
    }
    put(b, " '");
    for (const char *c = w; *c; c++) put(b, *c == '\'' ? "'\\''" : "%c", *c);
    put(b, "'");
}

static void put_opt(line_buf *b, const char *opt, const char *value) {
    if (!value) return;
    put(b, " %s", opt);
    put_word(b, value);
}

static void put_int(line_buf *b, const char *opt, int64_t v) { put(b, " %s %" PRId64, opt, v); }

static bool is_lora(const dfg_program *p) {
    for (int i = 0; i < p->n_tensors; i++)
        if (p->tensors[i]->role == DFG_ROLE_BASE_MODEL) return true;
    return false;
}

void cli_run_resume_command(const run_args *r, const dfg_program *p, const char *resume, int64_t done, bool export,
                            char *buf, size_t len) {
    line_buf b = {.buf = buf, .len = len};
    buf[0] = '\0';
    if (dfg_dist_size(r->dist) > 1) put(&b, "mpirun -n %d", dfg_dist_size(r->dist));
    put_word(&b, cli_program); /* as the user typed it: "dfg", "build/dfg" */
    put(&b, " run");
    put_word(&b, r->plan);
    put_opt(&b, "--resume", resume);
    if (is_lora(p)) put_opt(&b, "--weights", r->weights); /* the frozen base is not in a LoRA checkpoint */
    if (r->threads) put_int(&b, "--threads", r->threads);  /* the checkpoint's, for a bit-exact continuation */
    if (r->emulate_gpu) put(&b, " --emulate-gpu");
    if (r->eager) put(&b, " --eager");
    if (export) {
        put(&b, " --steps 0");
    } else {
        if (r->max_steps >= 0) put_int(&b, "--max-steps", r->max_steps);
        else put_int(&b, "--steps", r->steps - done); /* what this run had left */
        put_opt(&b, "--reward-cmd", r->reward_cmd);
        put_opt(&b, "--reward-lib", r->reward_lib);
        if (r->reward_cmd && r->reward_timeout != 60.0) put(&b, " --reward-timeout %g", r->reward_timeout);
        put_opt(&b, "--env-cmd", r->env_cmd);
        if (r->env_cmd && r->env_timeout != 60.0) put(&b, " --env-timeout %g", r->env_timeout);
        put_opt(&b, "--rollouts", r->rollouts);
        if (r->save_every) put_int(&b, "--save-every", r->save_every);
        if (r->every != 1) put_int(&b, "--every", r->every);
        put_opt(&b, "--metrics", r->metrics);
        put_opt(&b, "--dump", r->dump);
        if (r->quiet) put(&b, " --quiet");
    }
    put_opt(&b, "--save", r->save);
    if (r->save && r->merge) put(&b, " --merge");
    if (r->save && r->max_shard) put_int(&b, "--max-shard-size", r->max_shard);
    if (buf[0] == ' ') /* put_word's separator before the program's name */ memmove(buf, buf + 1, strlen(buf));
}
