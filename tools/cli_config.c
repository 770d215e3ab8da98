/* cli_config.c - dfg compile --config FILE: a TRL GRPOConfig (JSON or YAML, cli_config_read.c)
 * turned into dfg's settings through the table of TRL's fields (trl_fields.def). Every field of
 * the file is one of the table's rows or refused by name; a row either gives a dfg setting, is
 * converted (TRL's batch counts completions a process, dfg's prompts a step), is a dfg run
 * option, changes nothing dfg trains, or is accepted only at TRL's default. The settings a file
 * gives are appended to the --set list in the table's order, so a file and the --set line that
 * says the same make the same plan, byte for byte. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "cli_config.h"

typedef enum { HOW_SAME, HOW_AS, HOW_CONVERT, HOW_RUN, HOW_INERT, HOW_DEFAULT } trl_how;

typedef struct {
    const char *name;
    trl_how how;
    const char *trl_default, *dfg, *why;
} trl_field;

static const trl_field rows[] = {
#define DFG_TRL_FIELD(name, how, trl_default, dfg, why) {#name, HOW_##how, trl_default, dfg, why},
#include "trl_fields.def"
#undef DFG_TRL_FIELD
};
enum { N_ROWS = sizeof(rows) / sizeof(rows[0]) };

/* The settings files gave, kept reachable for the process's life (the --set list points at them). */
static char *owned[CLI_MAX_SETS];
static int n_owned;

typedef struct {
    const char *cmd, *path;
    const cfg_field *given[N_ROWS]; /* the file's field of each row; NULL when absent */
    const char **sets;
    int *n_sets, max, first_own;    /* sets[first_own..) are this file's */
    const char *own_field[CLI_MAX_SETS];
    char run[2048];                 /* dfg run's options, " --max-steps 500 ..." */
} config_ctx;

static int row_index(const char *name) {
    for (int r = 0; r < N_ROWS; r++)
        if (!strcmp(rows[r].name, name)) return r;
    return -1;
}

static const cfg_field *given(const config_ctx *c, const char *name) {
    int r = row_index(name);
    return r < 0 ? NULL : c->given[r];
}

/* "FILE:LINE: message" as dfg compile's one line; CLI_USAGE. */
static int refuse(const config_ctx *c, const cfg_field *f, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int refuse(const config_ctx *c, const cfg_field *f, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (f) return cli_error(c->cmd, CLI_USAGE, "%s:%d: %s", c->path, f->line, msg);
    return cli_error(c->cmd, CLI_USAGE, "%s: %s", c->path, msg);
}

static bool is_number(const char *s, double *v) {
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    return *s && !*end && !errno;
}

/* Two values' texts say the same (numbers compared as numbers: 1e-6 is 0.000001). */
static bool same_text(const char *a, const char *b) {
    double x, y;
    if (is_number(a, &x) && is_number(b, &y)) return x == y;
    return !strcmp(a, b);
}

/* The field's value as dfg's --set text: a scalar's text, a list's items joined by ','. */
static bool value_text(const cfg_field *f, char *out, size_t len) {
    if (f->kind != CFG_LIST) return snprintf(out, len, "%s", f->value.text) < (int)len;
    size_t used = 0;
    out[0] = '\0';
    for (int k = 0; k < f->n_items; k++) {
        int w = snprintf(out + used, len - used, "%s%s", k ? "," : "", f->items[k].text);
        if (w < 0 || (size_t)w >= len - used) return false;
        used += (size_t)w;
    }
    return true;
}

/* Whether the field holds TRL's default (def as trl_fields.def writes it). */
static bool at_default(const cfg_field *f, const char *def) {
    if (!strcmp(def, "null")) return f->kind == CFG_NULL;
    if (!strcmp(def, "[]")) return f->kind == CFG_LIST && f->n_items == 0;
    if (f->kind == CFG_LIST || f->kind == CFG_MAP || f->kind == CFG_NULL) return false;
    return same_text(f->value.text, def);
}

/* Appends key=value for the file's field `field`: an earlier --set of the key with another value,
 * or another field of the file giving the key another value, is refused. */
static int emit(config_ctx *c, const cfg_field *f, const char *key, const char *value) {
    size_t kl = strlen(key);
    for (int i = 0; i < *c->n_sets; i++) {
        const char *kv = c->sets[i];
        if (strncmp(kv, key, kl) || kv[kl] != '=') continue;
        if (same_text(kv + kl + 1, value)) return CLI_OK;
        if (i < c->first_own)
            return refuse(c, f, "'%s' gives %s=%s, but --set %s before --config says otherwise (a --set after --config "
                          "overrides the file)", f->key, key, value, kv);
        return refuse(c, f, "'%s' gives %s=%s, but '%s' gives %s", f->key, key, value, c->own_field[i], kv);
    }
    if (*c->n_sets >= c->max || n_owned >= CLI_MAX_SETS) return refuse(c, f, "more than %d settings", c->max);
    size_t n = kl + strlen(value) + 2;
    char *kv = malloc(n);
    if (!kv) return cli_error(c->cmd, CLI_FAILED, "out of memory");
    snprintf(kv, n, "%s=%s", key, value);
    owned[n_owned++] = kv;
    c->own_field[*c->n_sets] = f->key;
    c->sets[(*c->n_sets)++] = kv;
    return CLI_OK;
}

/* The field's value into the dfg setting `key`; null is dfg's default, which the table's docs
 * say is TRL's None, for a row whose TRL default is null. */
static int emit_value(config_ctx *c, const cfg_field *f, const char *key, const char *trl_default) {
    char v[4096];
    if (f->kind == CFG_MAP) return refuse(c, f, "'%s' takes a plain value or a list, not a mapping", f->key);
    if (f->kind == CFG_NULL) {
        if (!strcmp(trl_default, "null")) return CLI_OK;
        return refuse(c, f, "'%s' cannot be null (TRL's default is %s)", f->key, trl_default);
    }
    if (!value_text(f, v, sizeof(v))) return refuse(c, f, "the value of '%s' is too long", f->key);
    return emit(c, f, key, v);
}

/* A field that must be a whole number (*v); a ratio or text is refused. */
static bool whole(const cfg_field *f, long long *v) {
    double d;
    if (f->kind != CFG_NUMBER || !is_number(f->value.text, &d) || d != (double)(long long)d) return false;
    *v = (long long)d;
    return true;
}

static long long whole_or(const config_ctx *c, const char *name, long long def, int *rc) {
    const cfg_field *f = given(c, name);
    long long v = def;
    if (f && f->kind != CFG_NULL && !whole(f, &v))
        *rc = refuse(c, f, "'%s' must be a whole number, got %s", name, cfg_kind_name(f->kind));
    return v;
}

/* world_size from a --set before --config (dfg's data-parallel ranks; TRL's processes). */
static long long world_size(const config_ctx *c) {
    for (int i = 0; i < c->first_own; i++)
        if (!strncmp(c->sets[i], "world_size=", 11)) return strtoll(c->sets[i] + 11, NULL, 10);
    return 1;
}

/* TRL's batch: generation_batch_size = per_device_train_batch_size x processes x steps_per_generation
 * completions; steps_per_generation defaults to gradient_accumulation_steps, the one case dfg has
 * (one generation a step, its completions split into gradient_accumulation_steps micro-batches).
 * Converted when the file says anything about the batch. */
static int convert_batch(config_ctx *c, const cfg_field *f) {
    static const char *const batch[] = {"per_device_train_batch_size", "gradient_accumulation_steps", "num_generations",
                                        "generation_batch_size", "steps_per_generation"};
    const cfg_field *any = NULL;
    for (size_t k = 0; k < 5 && !any; k++) any = given(c, batch[k]);
    if (!any) return CLI_OK;
    int rc = CLI_OK;
    long long b = whole_or(c, "per_device_train_batch_size", 8, &rc), gas = whole_or(c, "gradient_accumulation_steps", 1, &rc);
    long long g = whole_or(c, "num_generations", 8, &rc), spg = whole_or(c, "steps_per_generation", gas, &rc);
    long long ws = world_size(c), gen = b * ws * gas;
    long long gbs = whole_or(c, "generation_batch_size", gen, &rc);
    if (rc) return rc;
    if (b < 1 || gas < 1 || g < 2 || ws < 1) return CLI_OK; /* dfg's settings say what is out of range */
    const cfg_field *s = given(c, "steps_per_generation"), *gb = given(c, "generation_batch_size");
    if (spg != gas)
        return refuse(c, s, "dfg does not support 'steps_per_generation' %lld yet: it generates once a step, as TRL with "
                      "steps_per_generation = gradient_accumulation_steps (%lld)", spg, gas);
    if (gbs != gen)
        return refuse(c, gb, "dfg does not support 'generation_batch_size' %lld yet: it generates one step's batch, "
                      "per_device_train_batch_size x gradient_accumulation_steps x world_size = %lld", gbs, gen);
    if (gen % g)
        return refuse(c, any, "TRL's batch of %lld completions (per_device_train_batch_size %lld x gradient_accumulation_steps "
                      "%lld x world_size %lld) is not whole groups of num_generations %lld", gen, b, gas, ws, g);
    char v[32];
    snprintf(v, sizeof(v), "%lld", gen / g);
    return emit(c, f ? f : any, "prompts_per_step", v);
}

static int convert_scale_rewards(config_ctx *c, const cfg_field *f) {
    if (f->kind == CFG_BOOL) return emit(c, f, "scale_rewards", !strcmp(f->value.text, "true") ? "group" : "none");
    return emit_value(c, f, "scale_rewards", "group");
}

static int convert_clip_max(config_ctx *c, const cfg_field *f) {
    if (f->kind == CFG_NULL) return emit(c, f, "vllm_importance_sampling_clip_max", "0"); /* dfg's 0 is TRL's None */
    return emit_value(c, f, "vllm_importance_sampling_clip_max", "3");
}

/* A count of TRL's steps (updates) as dfg's steps of num_iterations updates each. */
static int per_step(config_ctx *c, const cfg_field *f, long long *v) {
    int rc = CLI_OK;
    long long mu = whole_or(c, "num_iterations", 1, &rc);
    if (rc) return rc;
    if (!whole(f, v)) return refuse(c, f, "dfg does not support '%s' %s yet: give whole steps", f->key, f->value.text ? f->value.text : cfg_kind_name(f->kind));
    if (mu > 1 && *v > 0 && *v % mu)
        return refuse(c, f, "'%s' %lld is not whole dfg steps: TRL counts updates, and a dfg step makes num_iterations (%lld)",
                      f->key, *v, mu);
    if (mu > 1 && *v > 0) *v /= mu;
    return CLI_OK;
}

static int convert_steps(config_ctx *c, const cfg_field *f, const char *key) {
    long long v;
    char text[32];
    int rc = per_step(c, f, &v);
    if (rc) return rc;
    snprintf(text, sizeof(text), "%lld", v);
    return emit(c, f, key, text);
}

static int convert_epochs(config_ctx *c, const cfg_field *f) {
    const cfg_field *m = given(c, "max_steps");
    long long steps = -1;
    if (m && !whole(m, &steps)) return CLI_OK; /* max_steps's conversion refuses it */
    if (steps > 0) return CLI_OK;
    return refuse(c, f, "dfg does not support 'num_train_epochs' yet: it counts steps; give max_steps (dfg run --max-steps)");
}

static int convert_optim(config_ctx *c, const cfg_field *f) {
    static const char *const adamw[] = {"adamw_torch", "adamw_torch_fused", "adamw_hf"};
    for (size_t k = 0; k < 3; k++)
        if (f->kind == CFG_STRING && !strcmp(f->value.text, adamw[k])) return CLI_OK;
    return refuse(c, f, "dfg does not support 'optim' %s yet: its optimizer is AdamW (adamw_torch)",
                  f->kind == CFG_STRING ? f->value.text : cfg_kind_name(f->kind));
}

static int convert_save_strategy(config_ctx *c, const cfg_field *f) {
    if (f->kind == CFG_STRING && (!strcmp(f->value.text, "steps") || !strcmp(f->value.text, "no"))) return CLI_OK;
    return refuse(c, f, "dfg does not support 'save_strategy' %s yet: it checkpoints every save_steps steps or not at all",
                  f->kind == CFG_STRING ? f->value.text : cfg_kind_name(f->kind));
}

static int convert_bf16(config_ctx *c, const cfg_field *f) {
    if (f->kind == CFG_BOOL && !strcmp(f->value.text, "false")) return emit(c, f, "torch_dtype", "float32");
    if (f->kind == CFG_BOOL || f->kind == CFG_NULL) return CLI_OK; /* TRL's mixed bf16: dfg's default for the target */
    return refuse(c, f, "'bf16' is true, false or null, got %s", cfg_kind_name(f->kind));
}

static int convert_dtype(config_ctx *c, const cfg_field *f) {
    const char *v = f->kind == CFG_STRING ? f->value.text : f->kind == CFG_NULL ? "auto" : "";
    if (!strcmp(v, "bfloat16") || !strcmp(v, "bf16")) return emit(c, f, "torch_dtype", "bfloat16");
    if (!strcmp(v, "float32") || !strcmp(v, "auto")) return CLI_OK; /* TRL loads float32 and computes in bf16 (bf16) */
    return refuse(c, f, "dfg does not support '%s' %s yet: bfloat16 or float32", f->key, *v ? v : cfg_kind_name(f->kind));
}

/* A local path for model_name_or_path (a directory) or dataset_name (a file). */
static int convert_path(config_ctx *c, const cfg_field *f, const char *key, bool dir) {
    struct stat st;
    if (f->kind == CFG_NULL) return CLI_OK;
    if (f->kind != CFG_STRING || stat(f->value.text, &st) || (dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)))
        return refuse(c, f, "dfg does not support '%s' %s yet: it reads a local %s (download it first)", f->key,
                      f->kind == CFG_STRING ? f->value.text : cfg_kind_name(f->kind),
                      dir ? "model directory" : "JSONL file (docs/rewards.md)");
    return emit(c, f, key, f->value.text);
}

/* ModelConfig's LoRA fields, used only with use_peft (TRL ignores them otherwise), with
 * ModelConfig's defaults where the file leaves one out. */
static int convert_peft(config_ctx *c, const cfg_field *f) {
    static const char *const group[][3] = {{"lora_r", "lora_r", "16"}, {"lora_alpha", "lora_alpha", "32"},
                                           {"lora_dropout", "lora_dropout", "0.05"}, {"lora_target_modules", "lora_target_modules", NULL},
                                           {"use_rslora", "use_rslora", NULL}, {"load_in_4bit", "load_in_4bit", NULL},
                                           {"bnb_4bit_quant_type", "bnb_4bit_quant_type", NULL},
                                           {"use_bnb_nested_quant", "bnb_4bit_use_double_quant", NULL}};
    bool on = f && f->kind == CFG_BOOL && !strcmp(f->value.text, "true");
    if (f && f->kind != CFG_BOOL) return refuse(c, f, "'use_peft' is true or false, got %s", cfg_kind_name(f->kind));
    for (size_t k = 0; k < sizeof(group) / sizeof(group[0]); k++) {
        const cfg_field *g = given(c, group[k][0]);
        int rc = CLI_OK;
        if (!on) {
            if (g && k >= 5 && !at_default(g, rows[row_index(group[k][0])].trl_default))
                return refuse(c, g, "'%s' needs use_peft: true (dfg trains 4-bit bases through LoRA adapters only)", g->key);
            continue;
        }
        if (g) rc = emit_value(c, g, group[k][1], rows[row_index(group[k][0])].trl_default);
        else if (group[k][2]) rc = emit(c, f, group[k][1], group[k][2]);
        if (rc) return rc;
    }
    return CLI_OK;
}

/* The CONVERT rows; f is the file's field (NULL when absent: only the batch and use_peft convert
 * then, as TRL's defaults matter to them). */
static int convert(config_ctx *c, const trl_field *row, const cfg_field *f) {
    const char *n = row->name;
    if (!strcmp(n, "per_device_train_batch_size")) return convert_batch(c, f);
    if (!strcmp(n, "use_peft")) return convert_peft(c, f);
    if (!f || !strcmp(n, "generation_batch_size") || !strcmp(n, "steps_per_generation")) return CLI_OK; /* in the batch */
    if (!strncmp(n, "lora_", 5) || !strcmp(n, "use_rslora") || !strcmp(n, "load_in_4bit") || !strcmp(n, "bnb_4bit_quant_type") ||
        !strcmp(n, "use_bnb_nested_quant"))
        return CLI_OK; /* with use_peft */
    if (!strcmp(n, "scale_rewards")) return convert_scale_rewards(c, f);
    if (!strcmp(n, "vllm_importance_sampling_clip_max")) return convert_clip_max(c, f);
    if (!strcmp(n, "num_train_epochs")) return convert_epochs(c, f);
    if (!strcmp(n, "max_steps") || !strcmp(n, "logging_steps")) return convert_steps(c, f, n);
    if (!strcmp(n, "optim")) return convert_optim(c, f);
    if (!strcmp(n, "save_strategy")) return convert_save_strategy(c, f);
    if (!strcmp(n, "bf16")) return convert_bf16(c, f);
    if (!strcmp(n, "dtype") || !strcmp(n, "torch_dtype")) return convert_dtype(c, f);
    if (!strcmp(n, "model_name_or_path")) return convert_path(c, f, "model", true);
    if (!strcmp(n, "dataset_name")) return convert_path(c, f, "dataset", false);
    return refuse(c, f, "'%s': no conversion is written for it (tools/cli_config.c)", n);
}

/* The RUN rows, as dfg run's options (printed: where a run writes is not the plan's). */
static int run_options(config_ctx *c) {
    const cfg_field *out = given(c, "output_dir"), *every = given(c, "save_steps");
    const cfg_field *resume = given(c, "resume_from_checkpoint"), *strategy = given(c, "save_strategy");
    size_t used = 0;
    long long v = 500;
    if (out && out->kind == CFG_STRING) {
        used += (size_t)snprintf(c->run + used, sizeof(c->run) - used, " --checkpoint-dir %s", out->value.text);
        bool saves = !strategy || (strategy->kind == CFG_STRING && !strcmp(strategy->value.text, "steps"));
        int rc = every ? per_step(c, every, &v) : CLI_OK;
        if (rc) return rc;
        if (saves && v > 0) used += (size_t)snprintf(c->run + used, sizeof(c->run) - used, " --save-every %lld", v);
    } else if (out && out->kind != CFG_NULL) {
        return refuse(c, out, "'output_dir' is a path, got %s", cfg_kind_name(out->kind));
    }
    if (resume && resume->kind == CFG_STRING)
        snprintf(c->run + used, sizeof(c->run) - used, " --resume %s", resume->value.text);
    else if (resume && resume->kind != CFG_NULL)
        return refuse(c, resume, "dfg does not support 'resume_from_checkpoint' %s yet: give the checkpoint's directory",
                      cfg_kind_name(resume->kind));
    return CLI_OK;
}

static int refuse_unknown(const config_ctx *c, const cfg_field *f) {
    int best = 0;
    for (int r = 1; r < N_ROWS; r++)
        if (cli_edit_distance(f->key, rows[r].name) < cli_edit_distance(f->key, rows[best].name)) best = r;
    return refuse(c, f, "'%s' is not a field of TRL's GRPOConfig (the nearest is '%s'; dfg compile --config-fields lists them)",
                  f->key, rows[best].name);
}

/* One row for the file's field f (NULL: absent, which only conversions act on). */
static int apply_row(config_ctx *c, const trl_field *row, const cfg_field *f) {
    if (row->how == HOW_CONVERT) return convert(c, row, f);
    if (!f) return CLI_OK;
    switch (row->how) {
    case HOW_SAME: return emit_value(c, f, row->name, row->trl_default);
    case HOW_AS: return emit_value(c, f, row->dfg, row->trl_default);
    case HOW_DEFAULT:
        if (at_default(f, row->trl_default)) return CLI_OK;
        return refuse(c, f, "dfg does not support '%s' yet (only TRL's default, %s): %s", f->key,
                      *row->trl_default ? row->trl_default : "\"\"", row->why);
    default: return CLI_OK; /* RUN (run_options), INERT */
    }
}

static int apply_doc(config_ctx *c, const cfg_doc *doc) {
    for (int i = 0; i < doc->n; i++) {
        const cfg_field *f = &doc->fields[i];
        int r = row_index(f->key);
        if (r < 0) return refuse_unknown(c, f);
        for (int k = -1; k < f->n_items; k++) { /* values go into --set and one-line messages */
            const char *t = k < 0 ? f->value.text : f->items[k].text;
            for (; t && *t; t++)
                if ((unsigned char)*t < 0x20) return refuse(c, f, "the value of '%s' holds a control character", f->key);
        }
        c->given[r] = f;
    }
    for (int r = 0; r < N_ROWS; r++) {
        int rc = apply_row(c, &rows[r], c->given[r]);
        if (rc) return rc;
    }
    return run_options(c);
}

/* What the file said, in dfg's words: the --set line that makes the same plan, and the run's options. */
static void print_equivalent(const config_ctx *c) {
    printf("note: %s is", c->path);
    for (int i = c->first_own; i < *c->n_sets; i++) printf(" --set %s", c->sets[i]);
    if (*c->n_sets == c->first_own) printf(" no setting");
    printf("\n");
    if (c->run[0]) printf("note: %s's run options are dfg run's: dfg run PLAN%s\n", c->path, c->run);
}

int cli_config_apply(const char *cmd, const char *path, const char **sets, int *n_sets, int max) {
    static config_ctx c; /* large; one --config a process */
    static bool applied;
    if (applied) return cli_error(cmd, CLI_USAGE, "one --config at a time (got a second, '%s')", path);
    applied = true;
    void *text;
    size_t n;
    if (!cli_read_file(cmd, path, &text, &n)) return CLI_USAGE;
    cfg_doc doc;
    char err[512];
    bool ok = cfg_parse(text, n, &doc, err, sizeof(err));
    free(text);
    if (!ok) return cli_error(cmd, CLI_USAGE, "%s:%s (dfg reads a flat JSON object or YAML mapping of TRL's fields)", path, err);
    c = (config_ctx){.cmd = cmd, .path = path, .sets = sets, .n_sets = n_sets, .max = max, .first_own = *n_sets};
    int rc = apply_doc(&c, &doc);
    if (!rc) print_equivalent(&c);
    cfg_free(&doc);
    return rc;
}

static const char *how_text(const trl_field *r, char *buf, size_t len) {
    switch (r->how) {
    case HOW_SAME: snprintf(buf, len, "`%s`", r->name); break;
    case HOW_AS: snprintf(buf, len, "`%s`", r->dfg); break;
    case HOW_CONVERT: snprintf(buf, len, *r->dfg ? "converted: `%s`" : "checked%s", r->dfg); break;
    case HOW_RUN: snprintf(buf, len, "`dfg run %s`", r->dfg); break;
    case HOW_INERT: snprintf(buf, len, "accepted, no effect"); break;
    case HOW_DEFAULT: snprintf(buf, len, "only TRL's default"); break;
    }
    return buf;
}

void cli_config_print_fields(FILE *f) {
    char how[160];
    fprintf(f, "| TRL field | TRL's default | in dfg | why |\n|---|---|---|---|\n");
    for (int r = 0; r < N_ROWS; r++)
        fprintf(f, "| `%s` | `%s` | %s | %s |\n", rows[r].name, *rows[r].trl_default ? rows[r].trl_default : "\"\"",
                how_text(&rows[r], how, sizeof(how)), rows[r].why);
}
