/* cli_run_ckpt.c - dfg run's checkpoints: every PARAM and STATE (policy, reference model,
 * optimizer moments, RNG counters, ...; not a LoRA plan's frozen base) in DIR/checkpoint.safetensors, with the steps done and the
 * seed in the metadata, written atomically (dfg_st_write: temp file, fsync, rename, fsync of the
 * directory), so that a checkpoint file is always a whole one: a run killed while writing leaves
 * the previous checkpoint and a hidden temp file that --resume never reads.
 *
 * The CLI writes the file itself (rather than dfg_runtime_save_safetensors) to record the seed:
 * host data stages draw from (seed, step), so a resumed run continues the same stream only with
 * the seed of the original run, and --resume takes it from the checkpoint. */
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../graph/ir.h"
#include "cli.h"

#define CMD "run"
#define CKPT_LOCK ".dfg-run.lock"

int cli_st_save(dfg_runtime *rt, const char *path, const char *const *file_names, const dfg_tensor *const *tensors,
                int n, const char *const *meta_kv, int n_meta, char *err, size_t err_len) {
    size_t total = 1;
    for (int i = 0; i < n; i++) total += dfg_tensor_bytes(tensors[i]);
    dfg_st_tensor *ts = calloc((size_t)(n ? n : 1), sizeof(*ts));
    char *host = malloc(total), why[1024] = "";
    if (!ts || !host) snprintf(why, sizeof(why), "%s: out of memory (%zu bytes) gathering the tensors", path, total);
    size_t off = 0;
    for (int i = 0; i < n && !why[0]; i++) {
        const dfg_tensor *t = tensors[i];
        size_t bytes = dfg_tensor_bytes(t);
        if (dfg_runtime_read(rt, t->name, host + off, bytes))
            snprintf(why, sizeof(why), "%s: reading '%s': %s", path, t->name, dfg_runtime_error(rt));
        ts[i] = (dfg_st_tensor){.name = file_names[i], .dtype = t->dtype, .shape = t->shape, .data = host + off,
                                .bytes = bytes};
        off += bytes;
    }
    if (!why[0] && dfg_st_write(path, ts, n, meta_kv, n_meta, why, sizeof(why)) && !why[0])
        snprintf(why, sizeof(why), "%s: not written", path);
    free(ts);
    free(host);
    if (!why[0]) return CLI_OK;
    if (!err) return cli_error(CMD, CLI_FAILED, "%s", why);
    snprintf(err, err_len, "%s", why);
    return CLI_FAILED;
}

/* A LoRA plan's frozen base weights stay out: they are the --weights the run started from (a
 * resumed run loads them the same way), so a checkpoint holds the adapters and their state. */
static bool ckpt_saved(const dfg_tensor *t) {
    return (t->kind == DFG_PARAM || t->kind == DFG_STATE) && t->role != DFG_ROLE_BASE_MODEL;
}

/* mkdir -p */
static int make_dirs(const char *dir) {
    char path[4096];
    if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path))
        return cli_error(CMD, CLI_USAGE, "checkpoint directory name too long: %s", dir);
    for (char *s = path + 1;; s++) {
        bool end = *s == '\0';
        if (*s == '/' || end) {
            *s = '\0';
            struct stat st;
            if (mkdir(path, 0777) != 0 && errno != EEXIST)
                return cli_error(CMD, CLI_FAILED, "cannot create the checkpoint directory %s: %s", path, strerror(errno));
            if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
                return cli_error(CMD, CLI_USAGE, "checkpoint directory %s: %s is not a directory", dir, path);
            if (end) break;
            *s = '/';
        }
    }
    return CLI_OK;
}

/* dfg_st_write's temp files for the checkpoint: "." CLI_CKPT_FILE "." and six mkstemp characters */
static bool is_partial_checkpoint(const char *name) {
    const char *prefix = "." CLI_CKPT_FILE ".";
    return !strncmp(name, prefix, strlen(prefix)) && strlen(name) == strlen(prefix) + 6;
}

static void remove_partial_checkpoints(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        if (!is_partial_checkpoint(e->d_name)) continue;
        char path[4400];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        /* the lock held by this process says no other run is writing it */
        if (unlink(path) == 0) cli_say("removed %s, a partial checkpoint a killed run left\n", path);
    }
    closedir(d);
}

int cli_ckpt_prepare(const char *dir, bool resuming, int *lock_fd) {
    *lock_fd = -1;
    int rc = make_dirs(dir);
    if (rc) return rc;
    char path[4400];
    snprintf(path, sizeof(path), "%s/%s", dir, CKPT_LOCK);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return cli_error(CMD, CLI_FAILED, "cannot create %s: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        close(fd);
        return cli_error(CMD, CLI_USAGE, "checkpoint directory %s is in use by another dfg run (%s is locked)", dir,
                         path);
    }
    remove_partial_checkpoints(dir);
    /* a fresh run would replace the checkpoint at its first save: a finished or interrupted
     * run is not lost to a command line that forgot --resume */
    struct stat sb;
    snprintf(path, sizeof(path), "%s/%s", dir, CLI_CKPT_FILE);
    if (!resuming && stat(path, &sb) == 0) {
        close(fd);
        return cli_error(CMD, CLI_USAGE, "%s already holds a checkpoint: continue it with --resume %s, or remove it "
                         "(or pick another --checkpoint-dir) to start over", path, dir);
    }
    *lock_fd = fd;
    return CLI_OK;
}

int cli_ckpt_save(dfg_runtime *rt, const char *dir, const char *file, uint64_t seed, const cli_base *base, char *path,
                  size_t path_len, char *err, size_t err_len) {
    const dfg_program *p = dfg_runtime_program(rt);
    snprintf(path, path_len, "%s/%s", dir, file ? file : CLI_CKPT_FILE);
    const dfg_tensor **ts = calloc((size_t)(p->n_tensors ? p->n_tensors : 1), sizeof(*ts));
    const char **names = calloc((size_t)(p->n_tensors ? p->n_tensors : 1), sizeof(*names));
    if (!ts || !names) {
        free(ts), free(names);
        snprintf(err, err_len, "%s: out of memory", path);
        return CLI_FAILED;
    }
    int n = 0;
    for (int i = 0; i < p->n_tensors; i++) /* program order: the same plan gives the same file */
        if (ckpt_saved(p->tensors[i])) ts[n] = p->tensors[i], names[n++] = p->tensors[i]->name;
    char step[32], sd[32], th[16];
    snprintf(step, sizeof(step), "%" PRId64, dfg_runtime_steps_done(rt));
    snprintf(sd, sizeof(sd), "%" PRIu64, seed);
    snprintf(th, sizeof(th), "%d", dfg_runtime_threads(rt));
    const char *meta[] = {"format", "pt", "producer", "dfg", "dfg.program", p->name, "dfg.step", step, "dfg.seed", sd,
                          "dfg.threads", th, "dfg.base", base ? base->digest : "", "dfg.base_from",
                          base && base->from ? base->from : ""};
    bool has_base = base && base->digest[0];
    int rc = cli_st_save(rt, path, names, (const dfg_tensor *const *)ts, n, meta, has_base ? 8 : 6, err, err_len);
    free(ts);
    free(names);
    return rc;
}

static bool parse_u64(const char *s, uint64_t *out) {
    char *end = NULL;
    if (!s || *s < '0' || *s > '9') return false;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || errno) return false;
    *out = (uint64_t)v;
    return true;
}

int cli_ckpt_open(const char *resume, dfg_safetensors **st, char *path, size_t path_len, int64_t *step,
                  uint64_t *seed, bool *has_seed) {
    struct stat sb;
    *st = NULL;
    if (stat(resume, &sb) == 0 && S_ISDIR(sb.st_mode)) snprintf(path, path_len, "%s/%s", resume, CLI_CKPT_FILE);
    else snprintf(path, path_len, "%s", resume);
    char err[1024];
    if (stat(path, &sb) != 0 && errno == ENOENT)
        return cli_error(CMD, CLI_USAGE, "--resume %s: no checkpoint there (%s does not exist)", resume, path);
    if (dfg_st_open(path, st, err, sizeof(err))) return cli_error(CMD, CLI_USAGE, "--resume: %s", err);
    uint64_t v = 0;
    const char *s = dfg_st_metadata(*st, "dfg.step");
    if (!parse_u64(s, &v) || v > (uint64_t)INT64_MAX / 2) {
        dfg_st_free(*st);
        *st = NULL;
        return cli_error(CMD, CLI_USAGE, "%s: not a dfg run checkpoint (its metadata has %s dfg.step)", path,
                         s ? "an invalid" : "no");
    }
    *step = (int64_t)v;
    *has_seed = parse_u64(dfg_st_metadata(*st, "dfg.seed"), seed);
    return CLI_OK;
}

/* The checkpoint must be this plan's: each of its tensors a PARAM or STATE with the same dtype
 * and shape, and every PARAM and STATE there (a missing state would silently restart, e.g., the
 * optimizer moments). */
static int ckpt_check(const dfg_program *p, const dfg_safetensors *st, const char *path) {
    char fs[96], ps[96];
    for (int i = 0; i < dfg_st_count(st); i++) {
        const dfg_st_tensor *f = dfg_st_get(st, i);
        const dfg_tensor *t = dfg_find(p, f->name);
        if (!t || !ckpt_saved(t))
            return cli_error(CMD, CLI_USAGE, "%s: tensor '%s' is no param or state of program '%s' (a checkpoint of "
                             "another plan?)", path, f->name, p->name);
        if (f->dtype != t->dtype || f->shape.rank != t->shape.rank ||
            memcmp(f->shape.d, t->shape.d, sizeof(int64_t) * (size_t)t->shape.rank))
            return cli_error(CMD, CLI_USAGE, "%s: tensor '%s' is %s %s in the checkpoint but %s %s in the plan", path,
                             f->name, f->dtype_name, dfg_shape_str(f->shape, fs, sizeof(fs)), dfg_dtype_name(t->dtype),
                             dfg_shape_str(t->shape, ps, sizeof(ps)));
    }
    for (int i = 0; i < p->n_tensors; i++) {
        const dfg_tensor *t = p->tensors[i];
        if (ckpt_saved(t) && !dfg_st_find(st, t->name))
            return cli_error(CMD, CLI_USAGE, "%s: %s '%s' is missing (a checkpoint of another plan?)", path,
                             t->kind == DFG_PARAM ? "param" : "state", t->name);
    }
    return CLI_OK;
}

int cli_ckpt_restore(dfg_runtime *rt, const dfg_safetensors *st, const char *path, int64_t step) {
    const dfg_program *p = dfg_runtime_program(rt);
    int rc = ckpt_check(p, st, path);
    void *host = NULL;
    size_t cap = 0;
    for (int i = 0; i < dfg_st_count(st) && !rc; i++) {
        const dfg_st_tensor *f = dfg_st_get(st, i);
        if (f->bytes > cap) { /* file data need not be aligned: copy before the upload */
            free(host);
            if (!(host = malloc(cap = f->bytes))) rc = cli_error(CMD, CLI_FAILED, "%s: out of memory", path);
        }
        if (!rc && f->bytes) memcpy(host, f->data, f->bytes);
        if (!rc && dfg_runtime_write(rt, f->name, f->bytes ? host : "", f->bytes))
            rc = cli_error(CMD, CLI_FAILED, "%s: loading '%s': %s", path, f->name, dfg_runtime_error(rt));
    }
    free(host);
    if (!rc && dfg_runtime_set_steps_done(rt, step)) rc = cli_error(CMD, CLI_FAILED, "%s: cannot set the step", path);
    uint64_t th = 0;
    if (!rc && parse_u64(dfg_st_metadata(st, "dfg.threads"), &th) && th != (uint64_t)dfg_runtime_threads(rt))
        fprintf(stderr, "dfg run: warning: the checkpoint was written by a run with %" PRIu64 " thread%s, this one has %d: "
                        "OpenBLAS splits its GEMMs by thread count, so the run continues equal to float rounding, not "
                        "bit for bit (--threads %" PRIu64 " for that)\n", th, th == 1 ? "" : "s", dfg_runtime_threads(rt), th);
    return rc;
}

/* ---------------------------------------------------------------- the last good state
 * A step whose gradients are not finite fails in clip_grad_norm, before any optimizer update, and
 * a step whose host stage fails (a reward program that died) fails before it too, so parameters,
 * masters and moments are still the last good step's. What that step may already have changed:
 * the optimizer's step counters (incremented before the update), the RNG counters and the
 * dataset's position (advanced by the rollout), and the gradient buffers (NaN). The guard keeps
 * the counters (a few bytes) from before each step and puts them back, and zeroes the gradient
 * buffers (zero between steps by construction), so that the checkpoint written next is the last
 * good state, and a resumed run redoes the failed step with the same prompts and samples. */
struct cli_guard {
    dfg_runtime *rt;
    const dfg_tensor **counters;
    int32_t *values; /* [n][CLI_GUARD_MAX] */
    int n;
};
#define CLI_GUARD_MAX 16

/* The optimizer's step counters and the streams' positions (RNG counters, a dataset's position):
 * small i32 states a failed step may have advanced. */
static bool is_counter(const dfg_tensor *t) {
    return t->kind == DFG_STATE && (t->role == DFG_ROLE_OPTIM || t->role == DFG_ROLE_RNG) && t->dtype == DFG_I32 &&
           dfg_shape_numel(t->shape) <= CLI_GUARD_MAX;
}

int cli_guard_create(dfg_runtime *rt, cli_guard **out) {
    const dfg_program *p = dfg_runtime_program(rt);
    cli_guard *g = calloc(1, sizeof(*g));
    if (g) g->counters = calloc((size_t)(p->n_tensors ? p->n_tensors : 1), sizeof(*g->counters));
    if (g) g->values = calloc((size_t)(p->n_tensors ? p->n_tensors : 1) * CLI_GUARD_MAX, sizeof(*g->values));
    if (!g || !g->counters || !g->values) {
        cli_guard_free(g);
        return cli_error(CMD, CLI_FAILED, "out of memory");
    }
    g->rt = rt;
    for (int i = 0; i < p->n_tensors; i++)
        if (is_counter(p->tensors[i])) g->counters[g->n++] = p->tensors[i];
    *out = g;
    return CLI_OK;
}

int cli_guard_keep(cli_guard *g) {
    for (int i = 0; i < g->n; i++)
        if (dfg_runtime_read(g->rt, g->counters[i]->name, &g->values[i * CLI_GUARD_MAX], dfg_tensor_bytes(g->counters[i])))
            return cli_error(CMD, CLI_FAILED, "%s", dfg_runtime_error(g->rt));
    return CLI_OK;
}

int cli_guard_restore(cli_guard *g) {
    const dfg_program *p = dfg_runtime_program(g->rt);
    for (int i = 0; i < g->n; i++)
        if (dfg_runtime_write(g->rt, g->counters[i]->name, &g->values[i * CLI_GUARD_MAX], dfg_tensor_bytes(g->counters[i])))
            return cli_error(CMD, CLI_FAILED, "%s", dfg_runtime_error(g->rt));
    for (int i = 0; i < p->n_tensors; i++) {
        const dfg_tensor *t = p->tensors[i];
        if (t->kind != DFG_STATE || t->role != DFG_ROLE_GRAD) continue;
        size_t bytes = dfg_tensor_bytes(t);
        void *zero = calloc(bytes ? bytes : 1, 1);
        dfg_status st = zero ? dfg_runtime_write(g->rt, t->name, zero, bytes) : DFG_ERR_NOMEM;
        free(zero);
        if (st) return cli_error(CMD, CLI_FAILED, "%s: cannot reset: %s", t->name, dfg_runtime_error(g->rt));
    }
    return CLI_OK;
}

void cli_guard_free(cli_guard *g) {
    if (!g) return;
    free(g->counters);
    free(g->values);
    free(g);
}
