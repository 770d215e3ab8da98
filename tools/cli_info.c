/* cli_info.c - `dfg info P.dfg`: what a plan holds, without running it: where it came from,
 * its settings, its stages with node counts, what its pipeline declared for the tools (host
 * state, fixed rollouts, dumps), the persistent tensors' bytes by role, and the
 * memory plan in one line (the program is compiled as dfg run compiles it; dfg inspect has the
 * details). */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "../graph/ir.h"
#include "cli.h"

#define CMD "info"

static void usage(FILE *f) {
    fprintf(f, "usage: dfg info [P.dfg]\n"
               "       dfg info --settings [--markdown]\n"
               "\n"
               "Without a plan: this dfg's version and its backends, each ready or with the reason\n"
               "it cannot run here. With one: the plan's origin, settings, stages (with node counts\n"
               "after dead-code elimination), its persistent tensors' bytes by role, its memory plan\n"
               "(dfg inspect P.dfg shows the plan in detail) and the backend that would run it.\n"
               "  --settings   every setting dfg knows (graph/settings.def): key, type, default,\n"
               "               what it accepts, and what it does, by owner\n"
               "  --markdown   with --settings: as the tables of docs/cli.md\n");
}

/* ---------------------------------------------------------------- backends */

/* Each backend of the registry, probed: ready (with its device) or why not. */
static void print_backends(void) {
    for (int i = 0; i < dfg_backend_count(); i++) {
        char msg[1200];
        dfg_status st = dfg_backend_probe(i, msg, sizeof(msg));
        printf("%-9s %-9s %s: %s\n          %-9s %s\n", i ? "" : "backends", dfg_backend_name(i), st ? "not here" : "ready",
               msg, "", dfg_backend_about(i));
    }
}

/* ---------------------------------------------------------------- dfg info --settings */

static const char *spec_default(const dfg_setting_spec *s) {
    return s->def ? (s->def[0] ? s->def : "(none)") : "(see doc)";
}

static void print_settings_table(bool markdown) {
    static const char *const owner_title[DFG_SETTING_OWNER_COUNT] = {
        "the engine", "the model (config.json's names)", "prompts, datasets and rewards",
        "GRPO (examples/grpo/grpo.c; TRL's names)", "the optimizer (TrainingArguments' names)", "LoRA and QLoRA (PEFT's and bitsandbytes' names)"};
    char acc[512];
    if (!markdown) printf("settings dfg knows (graph/settings.def), by owner: key, type, default, accepted values, meaning\n");
    for (int o = 0; o < DFG_SETTING_OWNER_COUNT; o++) {
        if (markdown) printf("\n**%s** (owner `%s`)\n\n| key | type | default | accepts | meaning |\n|---|---|---|---|---|\n",
                             owner_title[o], dfg_setting_owner_name((dfg_setting_owner)o));
        else printf("\n%s (%s)\n", owner_title[o], dfg_setting_owner_name((dfg_setting_owner)o));
        for (int i = 0; i < dfg_setting_spec_count(); i++) {
            const dfg_setting_spec *s = dfg_setting_spec_at(i);
            if ((int)s->owner != o) continue;
            dfg_setting_accepted(s, acc, sizeof(acc));
            if (markdown)
                printf("| `%s` | %s | `%s` | %s | %s |\n", s->key, dfg_setting_type_name(s->type), spec_default(s), acc, s->doc);
            else
                printf("  %-28s %-6s %-10s %s\n  %-28s %s\n", s->key, dfg_setting_type_name(s->type), spec_default(s), acc, "",
                       s->doc);
        }
    }
}

static void print_origin(const char *path, const dfg_program *p, const dfg_plan_info *info) {
    /* a plan holds no timestamp (the same pipeline always gives the same bytes): the file's own
     * modification time says when it was written */
    char when[64] = "?", sb[32];
    struct stat fs;
    struct tm tm;
    if (stat(path, &fs) == 0 && gmtime_r(&fs.st_mtime, &tm)) strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
    printf("plan      %s (format %u, written by dfg %s)\n", path, DFG_PLAN_VERSION, info->dfg_version);
    printf("program   %s, target %s", p->name, dfg_target_name(info->target));
    if (info->align) printf(", alignment %zu", info->align);
    if (info->no_reuse) printf(", no reuse");
    if (info->keep_order) printf(", build order kept");
    if (info->no_fuse) printf(", no fusion");
    if (info->memory_budget > 0) printf(", memory budget %s", dfg_bytes_str((double)info->memory_budget, sb, sizeof(sb)));
    if (info->memory_min) printf(", the least arena (dfg fit --min)");
    printf("\n");
    printf("source    %s, written %s\n", info->source, when);
    if (info->host_lib) printf("host code %s embedded\n", dfg_bytes_str((double)info->host_lib_size, sb, sizeof(sb)));
}

static void print_settings(const dfg_program *p) {
    printf("settings ");
    if (!p->n_settings) printf(" (none)");
    for (int i = 0; i < p->n_settings; i++) printf(" %s=%s", p->settings[i].key, p->settings[i].value);
    printf("\n");
}

static void print_stages(const dfg_program *p) {
    int width = 12, digits = p->n_stages >= 10 ? 2 : 1; /* the names and numbers in one column */
    for (int s = 0; s < p->n_stages; s++)
        if ((int)strlen(p->stages[s].name) > width) width = (int)strlen(p->stages[s].name);
    for (int s = 0; s < p->n_stages; s++) {
        const dfg_stage *st = &p->stages[s];
        printf("%-9s %*d. %-*s ", s ? "" : "stages", digits, s + 1, width, st->name);
        if (st->kind == DFG_STAGE_HOST) {
            printf("host function %s\n", st->symbol);
            continue;
        }
        printf("graph '%s', %d nodes", st->graph->name, st->graph->n_nodes);
        if (st->repeat > 1) printf(", runs %s%d times", st->until || st->runs ? "at most " : "", st->repeat);
        if (st->until) printf(", until '%s' is set", st->until->name);
        if (st->runs) printf(", '%s' times", st->runs->name);
        if (st->when) printf(", when '%s' is in (%.10g, %.10g]", st->when->name, st->when_lo, st->when_hi);
        if (st->first_step > 0 || st->last_step >= 0) {
            printf(", in steps %lld..", (long long)st->first_step + 1);
            if (st->last_step >= 0) printf("%lld", (long long)st->last_step + 1);
        }
        printf("\n");
    }
}

/* What the pipeline declared for the tools (dfg_graph.h's declarations). */
static void print_declarations(const dfg_program *p) {
    const dfg_declarations *d = &p->decl;
    if (d->host_init)
        printf("host      state from %s()%s%s%s, read once per run\n", d->host_init, d->host_release ? ", released by " : "",
               d->host_release ? d->host_release : "", d->host_release ? "()" : "");
    if (d->n_rollout_tensors) {
        printf("rollouts  dfg run --rollouts sets");
        for (int i = 0; i < d->n_rollout_tensors; i++) printf("%s %s", i ? "," : "", d->rollout_tensors[i]->name);
        printf(" and skips stages");
        for (int i = 0; i < d->n_rollout_stages; i++) printf("%s %s", i ? "," : "", d->rollout_stages[i]);
        printf("\n");
        if (d->prompt_tokens)
            printf("          the first %lld columns of %s are the prompt\n", (long long)d->prompt_len, d->prompt_tokens->name);
    }
    if (d->batch_invariant)
        printf("numerics  batch-invariant: each row's forward matmul, attention and log-prob in one order of its own "
               "(ops/cpu/invariant.c, ops/cuda/invariant.cu; decode's log-probs equal training's bit for bit)\n");
    if (d->shared_tokens)
        printf("          groups of %lld rows of %s share their first %lld tokens (one prompt per group)\n",
               (long long)d->shared_group, d->shared_tokens->name, (long long)d->shared_len);
    if (d->n_dumps) {
        printf("dump      dfg run --dump writes every parameter and");
        for (int i = 0; i < d->n_dumps; i++)
            printf("%s %s%s%s%s", i ? "," : "", d->dumps[i].name, strcmp(d->dumps[i].name, d->dumps[i].t->name) ? " (" : "",
                   strcmp(d->dumps[i].name, d->dumps[i].t->name) ? d->dumps[i].t->name : "",
                   strcmp(d->dumps[i].name, d->dumps[i].t->name) ? ")" : "");
        printf("\n");
    }
}

/* Persistent tensors counted and summed by role; those without a role (inputs, constants) by
 * kind, so every byte the program keeps between steps shows up on some line. */
static void print_memory(const dfg_program *p) {
    enum { N_GROUPS = DFG_ROLE_COUNT + DFG_KIND_COUNT };
    int count[N_GROUPS] = {0};
    double bytes[N_GROUPS] = {0}, total = 0;
    int64_t temps = 0;
    for (int i = 0; i < p->n_tensors; i++) {
        const dfg_tensor *t = p->tensors[i];
        if (t->kind == DFG_TEMP) {
            temps++;
            continue;
        }
        int group = t->role != DFG_ROLE_NONE ? (int)t->role : DFG_ROLE_COUNT + (int)t->kind;
        count[group]++;
        bytes[group] += (double)dfg_tensor_bytes(t);
        total += (double)dfg_tensor_bytes(t);
    }
    char sb[32];
    printf("tensors   %d in all: %lld temporaries; persistent ones hold %s:\n", p->n_tensors, (long long)temps,
           dfg_bytes_str(total, sb, sizeof(sb)));
    for (int g = 0; g < N_GROUPS; g++) {
        if (!count[g]) continue;
        const char *name = g < DFG_ROLE_COUNT ? dfg_role_name((dfg_role)g) : dfg_kind_name((dfg_kind)(g - DFG_ROLE_COUNT));
        printf("          %-10s %5d tensor%s %12s\n", name, count[g], count[g] == 1 ? " " : "s",
               dfg_bytes_str(bytes[g], sb, sizeof(sb)));
    }
}

int cli_info(int argc, char **argv) {
    static const cli_option opts[] = {{"--help", false}, {"-h", false}, {"--settings", false}, {"--markdown", false}, {NULL, false}};
    cli_args a = {.cmd = CMD, .options = opts, .argc = argc, .argv = argv, .i = 1};
    const char *opt, *val, *path = NULL;
    bool settings = false, markdown = false;
    for (cli_arg_kind k; (k = cli_next(&a, &opt, &val)) != CLI_ARG_END;) {
        if (k == CLI_ARG_ERROR) return CLI_USAGE;
        if (k == CLI_ARG_OPTION && !strcmp(opt, "--settings")) settings = true;
        else if (k == CLI_ARG_OPTION && !strcmp(opt, "--markdown")) markdown = true;
        else if (k == CLI_ARG_OPTION) {
            usage(stdout);
            return CLI_OK;
        } else if (path) return cli_error(CMD, CLI_USAGE, "one plan file at a time (got '%s' and '%s')", path, val);
        else path = val;
    }
    if (markdown && !settings) return cli_error(CMD, CLI_USAGE, "--markdown goes with --settings");
    if (settings && path) return cli_error(CMD, CLI_USAGE, "--settings lists the settings table; it takes no plan file");
    if (settings) {
        print_settings_table(markdown);
        return CLI_OK;
    }
    if (!path) {
        printf("dfg       %s; dfg info P.dfg describes a plan, dfg info --settings every setting\n", DFG_VERSION_STRING);
        print_backends();
        return CLI_OK;
    }
    dfg_program *p = NULL;
    dfg_plan_info info;
    int rc = cli_load_plan(CMD, path, &p, &info);
    if (rc) return rc;
    char line[512];
    print_origin(path, p, &info);
    print_settings(p);
    print_stages(p);
    print_declarations(p);
    print_memory(p);
    printf("memory    %s\n", cli_memory_summary(dfg_program_report(p), line, sizeof(line)));
    /* cli_load_plan refuses a file whose recorded plan this dfg does not reproduce */
    printf("          the file's recorded schedule and memory plan match this dfg's compile, node for node and byte for byte\n");
    dfg_program_free(p);
    dfg_plan_info_free(&info);
    return CLI_OK;
}
