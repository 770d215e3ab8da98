/* grpo_completions.c - TRL's log_completions: every logging_steps steps, the host stage
 * "completions" (after the advantages) writes the step's rows to
 * <the run's folder>/completions/completions_STEP.jsonl, one JSON object a row: the prompt and
 * completion ids (and their text for a built-in task's vocabulary), the reward and the advantage,
 * and with tools the tool_mask and the conversation the environment recorded; and prints
 * num_completions_to_print of them, a line each. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dfg_grpo_tools.h"

static void write_ids(FILE *f, const int32_t *ids, int64_t n) {
    fputc('[', f);
    for (int64_t i = 0; i < n; i++) fprintf(f, "%s%d", i ? "," : "", ids[i]);
    fputc(']', f);
}

/* A built-in task's text of ids as a JSON string ('"' and '\' do not occur in its vocabulary). */
static void write_text(FILE *f, const int32_t *ids, int64_t n) {
    fputc('"', f);
    for (int64_t i = 0; i < n; i++) fputc(dfg_vocab_char(ids[i]), f);
    fputc('"', f);
}

/* <dir>/completions, made when missing */
static dfg_status folder(dfg_host_ctx *ctx, char *path, size_t len) {
    const char *dir = dfg_host_service(ctx, DFG_OUTPUT_DIR_SERVICE);
    snprintf(path, len, "%s/completions", dir ? dir : ".");
    if (mkdir(path, 0777) && errno != EEXIST)
        return dfg_host_fail(ctx, "log_completions: cannot make the folder %s: %s", path, strerror(errno));
    return DFG_OK;
}

typedef struct {
    dfg_buffer tok, mask, start, rew, adv, tool;
} rollout_bufs;

/* The trained batch's tensors: with async_rollouts its copies in the async.* buffers (the rollout
 * tensors hold the next batch by then; grpo_async.c). */
static dfg_status read_rollout(dfg_host_ctx *ctx, const dfg_grpo_config *c, rollout_bufs *b) {
    const char *pre = c->async_rollouts ? "async." : "";
    const char *need[4] = {"tokens", "completion_mask", "rewards", "advantages"};
    dfg_buffer *into[4] = {&b->tok, &b->mask, &b->rew, &b->adv};
    char name[64];
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof(name), "%s%s", i < 3 ? pre : "", need[i]); /* one advantages tensor: the trained batch's */
        if (dfg_host_buffer(ctx, name, into[i])) return dfg_host_fail(ctx, "log_completions: no tensor '%s'", name);
    }
    snprintf(name, sizeof(name), "%sprompt_start", pre);
    if (dfg_host_buffer(ctx, name, &b->start)) b->start.data = NULL;
    if (dfg_host_buffer(ctx, "tool_mask", &b->tool)) b->tool.data = NULL; /* tools: never async */
    return DFG_OK;
}

/* The column after row r's last one the policy or a tool wrote (c->Lp: none). */
static int64_t completion_end(const dfg_grpo_config *c, const rollout_bufs *b, int64_t r) {
    const float *m = (const float *)b->mask.data + r * c->T, *tm = b->tool.data ? (const float *)b->tool.data + r * c->T : NULL;
    int64_t end = c->Lp;
    for (int64_t i = c->Lp; i < c->T; i++)
        if (m[i] != 0.0f || (tm && tm[i] == 0.0f)) end = i + 1;
    return end;
}

/* One row as a JSON object: its prompt (from its start), its completion (every column the
 * completion mask or tool_mask counts: the tools' tokens too), reward, advantage. */
static void write_row(FILE *f, const dfg_grpo_config *c, const rollout_bufs *b, int64_t r, int64_t step, const char *msgs) {
    const int32_t *row = (const int32_t *)b->tok.data + r * c->T;
    const float *tm = b->tool.data ? (const float *)b->tool.data + r * c->T : NULL;
    int64_t s0 = b->start.data ? ((const int32_t *)b->start.data)[r] : 0, end = completion_end(c, b, r);
    fprintf(f, "{\"step\":%lld,\"row\":%lld,\"prompt_ids\":", (long long)step, (long long)r);
    write_ids(f, row + s0, c->Lp - s0);
    fputs(",\"completion_ids\":", f);
    write_ids(f, row + c->Lp, end - c->Lp);
    if (!c->ds) {
        fputs(",\"prompt\":", f), write_text(f, row + s0, c->Lp - s0);
        fputs(",\"completion\":", f), write_text(f, row + c->Lp, end - c->Lp);
    }
    if (tm) {
        fputs(",\"tool_mask\":[", f);
        for (int64_t i = c->Lp; i < end; i++) fprintf(f, "%s%d", i > c->Lp ? "," : "", tm[i] != 0.0f);
        fputc(']', f);
    }
    if (msgs) fprintf(f, ",\"messages\":%s", msgs);
    fprintf(f, ",\"reward\":%.9g,\"advantage\":%.9g}\n", ((const float *)b->rew.data)[r], ((const float *)b->adv.data)[r]);
}

/* One row on the progress output, TRL's table as a line: its reward and advantage, then what
 * the policy wrote (the conversation with tools, a built-in task's text, else the completion's
 * ids; the prompt is in the file). */
static void print_row(const dfg_grpo_config *c, const rollout_bufs *b, int64_t r, int64_t step, const char *msgs) {
    const int32_t *row = (const int32_t *)b->tok.data + r * c->T;
    int64_t end = completion_end(c, b, r);
    printf("completion step %lld row %lld: reward %.6g advantage %.6g: ", (long long)step, (long long)r,
           ((const float *)b->rew.data)[r], ((const float *)b->adv.data)[r]);
    if (msgs) fputs(msgs, stdout);
    else if (!c->ds) write_text(stdout, row + c->Lp, end - c->Lp);
    else write_ids(stdout, row + c->Lp, end - c->Lp);
    fputc('\n', stdout);
}

dfg_status dfg_grpo_log_completions(dfg_host_ctx *ctx, const dfg_grpo_config *c) {
    int64_t step = dfg_host_step(ctx) + 1; /* TRL's global step: 1 after the first update */
    if (step % c->logging_steps) return DFG_OK;
    rollout_bufs b;
    char dir[4096], path[4200];
    dfg_status st = read_rollout(ctx, c, &b);
    if (!st) st = folder(ctx, dir, sizeof(dir));
    if (st) return st;
    snprintf(path, sizeof(path), "%s/completions_%05lld.jsonl", dir, (long long)step);
    FILE *f = fopen(path, "w");
    if (!f) return dfg_host_fail(ctx, "log_completions: cannot write %s: %s", path, strerror(errno));
    const char *const *msgs = c->tools ? dfg_grpo_turns_messages(c->turns) : NULL;
    for (int64_t r = 0; r < c->N; r++) write_row(f, c, &b, r, step, msgs ? msgs[r] : NULL);
    if (fclose(f)) return dfg_host_fail(ctx, "log_completions: writing %s failed: %s", path, strerror(errno));
    int64_t show = c->n_print < 0 || c->n_print > c->N ? c->N : c->n_print;
    for (int64_t r = 0; r < show; r++) print_row(c, &b, r, step, msgs ? msgs[r] : NULL);
    fflush(stdout);
    return DFG_OK;
}
