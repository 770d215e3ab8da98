/* reward_internal.h - the reward source object (dfg_reward.h), shared by reward_source.c (the
 * handle, plugins) and reward_program.c (a program speaking JSON lines). */
#ifndef DFG_REWARD_INTERNAL_H
#define DFG_REWARD_INTERNAL_H

#include <stdbool.h>

#include "dfg_reward.h"
#include "jsonl_program.h"

typedef enum { DFG_REWARD_PROGRAM, DFG_REWARD_PLUGIN } dfg_reward_kind;

struct dfg_reward_source {
    dfg_reward_kind kind;
    char desc[320];
    int n_funcs;
    char *names[DFG_REWARD_MAX_FUNCS];
    /* a program */
    dfg_jsonl_program prog;
    double timeout_s;
    /* a plugin */
    void *lib;
    dfg_reward_score_fn score;
    /* the requests submitted and not yet collected (dfg_reward_source_submit), oldest first: their
     * rows, their step, and a plugin's values, scored at once */
    struct {
        int64_t n, step;
        float *held;
    } pending[DFG_REWARD_MAX_PENDING];
    int n_pending;
};

/* Takes the function names of a hello line or a plugin: 1 .. DFG_REWARD_MAX_FUNCS distinct names
 * of 1 .. 64 printable characters without ',' or spaces (they are listed in the setting
 * reward_funcs). On failure writes "<what>" into err. */
dfg_status dfg_reward_set_names(dfg_reward_source *s, const char *const *names, int n, char *err, size_t err_len);

/* reward_program.c */
dfg_status dfg_reward_program_start(dfg_reward_source *s, const char *cmd, char *err, size_t err_len);
dfg_status dfg_reward_program_score(dfg_reward_source *s, const dfg_reward_row *rows, int64_t n, int64_t step,
                                    float *out, char *err, size_t err_len);
dfg_status dfg_reward_program_submit(dfg_reward_source *s, const dfg_reward_row *rows, int64_t n, int64_t step, char *err,
                                     size_t err_len);
dfg_status dfg_reward_program_collect(dfg_reward_source *s, int64_t n, int64_t step, float *out, char *err, size_t err_len);
void dfg_reward_program_stop(dfg_reward_source *s);
/* One answer line (n_line bytes, no '\n') for n rows into out (n, F): the checks of docs/rewards.md,
 * each failure one line in err naming the step and the row. The program's untrusted input:
 * tests/fuzz/fuzz_reward_answer.c. */
dfg_status dfg_reward_parse_answer(const dfg_reward_source *s, const char *line, size_t n_line, int64_t n, int64_t step,
                                   float *out, char *err, size_t len);

#endif
