/* cli_util.c - option parsing, strict numbers, temporary files and messages for the dfg tool. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../graph/ir.h"
#include "../passes/plan.h"
#include "../runtime/formats/fileio.h"
#include "cli.h"

int cli_error(const char *cmd, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout); /* a line begun on stdout (cli_say without its newline yet) goes out first */
    fprintf(stderr, "dfg %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

/* "--steps, --seed, -o" */
static void list_options(const cli_option *o, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = '\0';
    for (; o->name && used < len; o++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? ", " : "", o->name);
}

cli_arg_kind cli_next(cli_args *a, const char **opt, const char **value) {
    *opt = NULL;
    *value = NULL;
    if (a->i >= a->argc) return CLI_ARG_END;
    const char *arg = a->argv[a->i++];
    if (a->only_positional || arg[0] != '-' || !strcmp(arg, "-")) {
        *value = arg;
        return CLI_ARG_POSITIONAL;
    }
    if (!strcmp(arg, "--")) {
        a->only_positional = true;
        return cli_next(a, opt, value);
    }
    const char *eq = strchr(arg, '=');
    size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
    for (const cli_option *o = a->options; o->name; o++) {
        if (strlen(o->name) != name_len || strncmp(o->name, arg, name_len)) continue;
        *opt = o->name;
        if (!o->has_value) {
            if (eq) return cli_error(a->cmd, CLI_USAGE, "option %s takes no value", o->name), CLI_ARG_ERROR;
            return CLI_ARG_OPTION;
        }
        if (eq) *value = eq + 1;
        else if (a->i < a->argc) *value = a->argv[a->i++];
        else return cli_error(a->cmd, CLI_USAGE, "option %s needs a value", o->name), CLI_ARG_ERROR;
        return CLI_ARG_OPTION;
    }
    char valid[512];
    list_options(a->options, valid, sizeof(valid));
    cli_error(a->cmd, CLI_USAGE, "unknown option '%s' (valid: %s)", arg, valid);
    return CLI_ARG_ERROR;
}

bool cli_parse_i64(const char *cmd, const char *what, const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long v = (*s && (*s == '-' || *s == '+' || (*s >= '0' && *s <= '9'))) ? strtoll(s, &end, 10) : 0;
    if (!end || *end || errno || v < lo || v > hi) {
        cli_error(cmd, CLI_USAGE, "%s must be an integer in %lld..%lld, got '%s'", what, (long long)lo, (long long)hi, s);
        return false;
    }
    *out = (int64_t)v;
    return true;
}

bool cli_make_tempdir(const char *cmd, char *dir, size_t len) {
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    snprintf(dir, len, "%s/dfg-%s-XXXXXX", base, cmd);
    if (mkdtemp(dir)) return true;
    cli_error(cmd, CLI_FAILED, "cannot create a temporary directory in %s: %s", base, strerror(errno));
    return false;
}

void cli_remove_temp(const char *dir, const char *name) {
    if (!dir || !dir[0]) return;
    if (name) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        unlink(path);
    }
    rmdir(dir);
}

/* fileio.h's reader and writer: no limit a metrics file or a pipeline's code could reach */
bool cli_read_file(const char *cmd, const char *path, void **out, size_t *n) {
    char err[1024], *text = NULL;
    if (dfg_file_read(path, NULL, SIZE_MAX / 2, NULL, &text, n, err, sizeof(err)))
        return cli_error(cmd, CLI_FAILED, "%s", err), false;
    *out = text;
    return true;
}

bool cli_write_file(const char *cmd, const char *path, const void *data, size_t n) {
    char err[1024];
    if (dfg_file_write(path, data, n, err, sizeof(err))) return cli_error(cmd, CLI_FAILED, "%s", err), false;
    return true;
}

int cli_compile_plan(const char *cmd, const char *label, dfg_program **p, dfg_plan_info *info) {
    char err[1024];
    dfg_status st = dfg_plan_compile(*p, info, label, err, sizeof(err));
    if (!st) return CLI_OK;
    /* a budget remat cannot meet, or a plan this dfg does not reproduce, is bad input (exit 2) */
    int rc = cli_error(cmd, st == DFG_ERR_NOMEM ? CLI_FAILED : CLI_USAGE, "%s", err);
    dfg_program_free(*p);
    dfg_plan_info_free(info);
    *p = NULL;
    return rc;
}

int cli_load_plan(const char *cmd, const char *path, dfg_program **p, dfg_plan_info *info) {
    char err[1024];
    if (dfg_plan_load(path, p, info, err, sizeof(err))) return cli_error(cmd, CLI_USAGE, "%s", err);
    return cli_compile_plan(cmd, path, p, info);
}

char *cli_memory_summary(const dfg_report *r, char *buf, size_t len) {
    char a[32], lb[32], nv[32];
    double ratio = r->lower_bound_bytes ? (double)r->arena_bytes / (double)r->lower_bound_bytes : 1.0;
    double saved = r->naive_bytes ? 100.0 * (1.0 - (double)r->arena_bytes / (double)r->naive_bytes) : 0.0;
    snprintf(buf, len, "arena %s, lower bound %s (x%.2f), naive %s (planning saves %.0f%%)",
             dfg_bytes_str((double)r->arena_bytes, a, sizeof(a)), dfg_bytes_str((double)r->lower_bound_bytes, lb, sizeof(lb)),
             ratio, dfg_bytes_str((double)r->naive_bytes, nv, sizeof(nv)), saved);
    return buf;
}

const char *const cli_fused_kinds[3] = {"logprob", "linear_logprob", "bias_gelu"};

char *cli_fused_str(const dfg_report *r, char *buf, size_t len) {
    size_t at = 0;
    buf[0] = '\0';
    for (int k = 0; k < 3; k++)
        if (r->fused[k] && at < len)
            at += (size_t)snprintf(buf + at, len - at, "%s%d %s", at ? ", " : "", r->fused[k], cli_fused_kinds[k]);
    if (!at) snprintf(buf, len, "none");
    return buf;
}

/* "5.77e10": three digits, as the FLOP counts of a step are read, without printf's "e+10" */
static char *sci_str(double x, char *buf, size_t len) {
    int e = 0;
    while (x >= 10.0) x /= 10.0, e++;
    while (x > 0 && x < 1.0) x *= 10.0, e--;
    if (x >= 9.995) x /= 10.0, e++; /* it would print as "10.00" */
    if (e == 0) snprintf(buf, len, "%.3g", x);
    else snprintf(buf, len, "%.2fe%d", x, e);
    return buf;
}

char *cli_remat_str(const dfg_report *r, int64_t budget, char *buf, size_t len) {
    char f[32];
    if (r->recomputed_nodes)
        snprintf(buf, len, "%d node%s, +%.1f%% flops (%s)", r->recomputed_nodes, r->recomputed_nodes == 1 ? "" : "s",
                 r->flops > 0 ? 100.0 * r->extra_flops / r->flops : 0.0, sci_str(r->extra_flops, f, sizeof(f)));
    else snprintf(buf, len, "%s", budget > 0 ? "none" : "no budget");
    return buf;
}

bool cli_quiet;

void cli_say(const char *fmt, ...) {
    if (cli_quiet) return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
}

/* "VmRSS:     1234 kB" */
static bool status_kb(const char *text, const char *key, size_t *bytes) {
    const char *at = strstr(text, key);
    unsigned long long kb;
    if (!at || sscanf(at + strlen(key), " %llu kB", &kb) != 1) return false;
    *bytes = (size_t)kb * 1024;
    return true;
}

bool cli_rss(size_t *now, size_t *peak) {
    char text[4096];
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return false;
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    return status_kb(text, "VmRSS:", now) && status_kb(text, "VmHWM:", peak);
}

/* Writing 5 to clear_refs resets VmHWM to the current RSS (Linux 4.0 and later). */
void cli_rss_reset_peak(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return;
    fputs("5", f);
    fclose(f);
}

static const char *count_unit(double n, double *v) {
    if (n >= 1e9) return *v = n / 1e9, "B";
    if (n >= 1e6 || n < 1e3) return *v = n / 1e6, "M";
    return *v = n / 1e3, "k";
}

char *cli_params_str(const dfg_program *p, char *buf, size_t len) {
    int64_t trained = 0, base = 0;
    for (int i = 0; i < p->n_tensors; i++) {
        const dfg_tensor *t = p->tensors[i];
        if (t->kind == DFG_PARAM) trained += dfg_shape_numel(t->shape);
    }
    base = dfg_base_params(p); /* the weights' own counts: an NF4 weight's elements, not its packed bytes */
    double a, b;
    const char *ua = count_unit((double)trained, &a), *ub = count_unit((double)base, &b);
    if (base) snprintf(buf, len, "%.3g %s trained parameters (LoRA adapters) on a %.3g %s base", a, ua, b, ub);
    else snprintf(buf, len, "%.3g %s parameters", (double)trained / (trained >= 1000000000 ? 1e9 : 1e6),
                  trained >= 1000000000 ? "B" : "M");
    return buf;
}
