/* declare.c - a pipeline's declarations about its program (dfg_graph.h): host state, what a
 * fixed rollout replaces, which rows share a prompt, what --dump writes, what dfg fit may vary. They are checked here
 * against the program; stage names are checked when the program is compiled (passes/verify.c),
 * since stages may be added after the declaration. */
#include <stdlib.h>
#include <string.h>

#include "ir.h"

static bool owned(const dfg_program *p, const dfg_tensor *t) {
    return t && t->id >= 0 && t->id < p->n_tensors && p->tensors[t->id] == t;
}

static bool symbol_ok(const char *s) {
    if (!s || !*s || strlen(s) > 200) return false;
    for (const char *c = s; *c; c++)
        if (!(*c == '_' || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (c != s && *c >= '0' && *c <= '9')))
            return false;
    return true;
}

dfg_status dfg_host_state(dfg_program *p, const char *init_symbol, const char *release_symbol) {
    if (!p) return DFG_ERR_ARG;
    if (p->status || dfg_program_sealed(p, "host_state")) return p->status;
    if (!symbol_ok(init_symbol) || (release_symbol && !symbol_ok(release_symbol)))
        return dfg_program_err(p, DFG_ERR_ARG, "host_state: '%s' and '%s' must be C function names",
                               init_symbol ? init_symbol : "(null)", release_symbol ? release_symbol : "(none)");
    if (p->decl.host_init) return dfg_program_err(p, DFG_ERR_ARG, "host_state: declared twice");
    p->decl.host_init = dfg_program_strdup(p, init_symbol);
    p->decl.host_release = release_symbol ? dfg_program_strdup(p, release_symbol) : NULL;
    if (!p->decl.host_init || (release_symbol && !p->decl.host_release))
        return dfg_program_err(p, DFG_ERR_NOMEM, "host_state: out of memory");
    return DFG_OK;
}

dfg_status dfg_declare_rollout(dfg_program *p, const char *const *stages, int n_stages, dfg_tensor *const *tensors,
                               int n_tensors) {
    if (!p) return DFG_ERR_ARG;
    if (p->status || dfg_program_sealed(p, "declare_rollout")) return p->status;
    if (p->decl.n_rollout_tensors) return dfg_program_err(p, DFG_ERR_ARG, "declare_rollout: declared twice");
    if (n_stages < 1 || n_stages > 64 || !stages || n_tensors < 1 || n_tensors > 64 || !tensors)
        return dfg_program_err(p, DFG_ERR_ARG, "declare_rollout: needs 1 to 64 stages and 1 to 64 tensors");
    char **names = dfg_arena_alloc(&p->arena, sizeof(*names) * (size_t)n_stages);
    dfg_tensor **ts = dfg_arena_alloc(&p->arena, sizeof(*ts) * (size_t)n_tensors);
    if (!names || !ts) return dfg_program_err(p, DFG_ERR_NOMEM, "declare_rollout: out of memory");
    for (int i = 0; i < n_stages; i++) {
        if (!stages[i] || !*stages[i] || strlen(stages[i]) > 200)
            return dfg_program_err(p, DFG_ERR_ARG, "declare_rollout: stage name #%d is empty or too long", i);
        if (!(names[i] = dfg_program_strdup(p, stages[i])))
            return dfg_program_err(p, DFG_ERR_NOMEM, "declare_rollout: out of memory");
    }
    for (int i = 0; i < n_tensors; i++) {
        const dfg_tensor *t = tensors[i];
        if (!owned(p, t) || t->kind != DFG_STATE || t->scope_first)
            return dfg_program_err(p, DFG_ERR_ARG,
                                   "declare_rollout: tensor #%d '%s' must be a STATE of this program that lives for "
                                   "the whole step (no scope)",
                                   i, t && owned(p, t) ? t->name : "?");
        for (int j = 0; j < i; j++)
            if (ts[j] == t) return dfg_program_err(p, DFG_ERR_ARG, "declare_rollout: '%s' is named twice", t->name);
        ts[i] = tensors[i];
    }
    p->decl.rollout_stages = names;
    p->decl.n_rollout_stages = n_stages;
    p->decl.rollout_tensors = ts;
    p->decl.n_rollout_tensors = n_tensors;
    return DFG_OK;
}

dfg_status dfg_declare_shared_prompts(dfg_program *p, dfg_tensor *tokens, int64_t prompt_len, int64_t group) {
    if (!p) return DFG_ERR_ARG;
    if (p->status || dfg_program_sealed(p, "declare_shared_prompts")) return p->status;
    bool rollout = false;
    for (int i = 0; i < p->decl.n_rollout_tensors; i++) rollout |= p->decl.rollout_tensors[i] == tokens;
    if (!rollout || tokens->dtype != DFG_I32 || tokens->shape.rank != 2)
        return dfg_program_err(p, DFG_ERR_ARG,
                               "declare_shared_prompts: the tokens must be an i32 (N, T) tensor declared by "
                               "dfg_declare_rollout first");
    if (group < 1 || tokens->shape.d[0] % group || prompt_len < 0 || prompt_len > tokens->shape.d[1])
        return dfg_program_err(p, DFG_ERR_ARG,
                               "declare_shared_prompts: groups of %lld rows and %lld prompt columns do not fit '%s' "
                               "(%lld, %lld)",
                               (long long)group, (long long)prompt_len, tokens->name, (long long)tokens->shape.d[0],
                               (long long)tokens->shape.d[1]);
    p->decl.shared_tokens = tokens;
    p->decl.shared_len = prompt_len;
    p->decl.shared_group = group;
    return DFG_OK;
}

dfg_status dfg_declare_rollout_prompt(dfg_program *p, dfg_tensor *tokens, int64_t prompt_len) {
    if (!p) return DFG_ERR_ARG;
    if (p->status || dfg_program_sealed(p, "declare_rollout_prompt")) return p->status;
    bool rollout = false;
    for (int i = 0; i < p->decl.n_rollout_tensors; i++) rollout |= p->decl.rollout_tensors[i] == tokens;
    if (!rollout || tokens->dtype != DFG_I32 || tokens->shape.rank != 2)
        return dfg_program_err(p, DFG_ERR_ARG, "declare_rollout_prompt: the tokens must be an i32 (N, T) tensor declared "
                                               "by dfg_declare_rollout first");
    if (prompt_len < 1 || prompt_len > tokens->shape.d[1])
        return dfg_program_err(p, DFG_ERR_ARG, "declare_rollout_prompt: %lld prompt columns do not fit '%s' (%lld, %lld)",
                               (long long)prompt_len, tokens->name, (long long)tokens->shape.d[0],
                               (long long)tokens->shape.d[1]);
    p->decl.prompt_tokens = tokens;
    p->decl.prompt_len = prompt_len;
    return DFG_OK;
}

dfg_status dfg_declare_rollouts_only(dfg_program *p, const char *why) {
    if (!p) return DFG_ERR_ARG;
    if (p->status || dfg_program_sealed(p, "declare_rollouts_only")) return p->status;
    if (!p->decl.n_rollout_tensors)
        return dfg_program_err(p, DFG_ERR_ARG, "declare_rollouts_only: declare the rollout first (dfg_declare_rollout)");
    if (!why || !*why || strlen(why) > 1000 || strchr(why, '\n'))
        return dfg_program_err(p, DFG_ERR_ARG, "declare_rollouts_only: the reason must be one line of 1 to 1000 characters");
    if (p->decl.rollouts_only) return dfg_program_err(p, DFG_ERR_ARG, "declare_rollouts_only: declared twice");
    if (!(p->decl.rollouts_only = dfg_program_strdup(p, why)))
        return dfg_program_err(p, DFG_ERR_NOMEM, "declare_rollouts_only: out of memory");
    return DFG_OK;
}

const char *dfg_program_rollouts_only(const dfg_program *p) { return p ? p->decl.rollouts_only : NULL; }

dfg_status dfg_declare_batch_invariant(dfg_program *p) {
    if (!p) return DFG_ERR_ARG;
    if (p->status || dfg_program_sealed(p, "declare_batch_invariant")) return p->status;
    p->decl.batch_invariant = true;
    return DFG_OK;
}

bool dfg_program_batch_invariant(const dfg_program *p) { return p && p->decl.batch_invariant; }

/* A dump name becomes a safetensors key: printable, no quotes or backslashes. */
static bool dump_name_ok(const char *s) {
    if (!s || !*s || strlen(s) > 200) return false;
    for (const char *c = s; *c; c++)
        if (*c < 0x21 || *c > 0x7e || *c == '"' || *c == '\\') return false;
    return true;
}

dfg_status dfg_declare_dump(dfg_program *p, const char *name, dfg_tensor *t) {
    if (!p) return DFG_ERR_ARG;
    if (p->status || dfg_program_sealed(p, "declare_dump")) return p->status;
    if (!dump_name_ok(name))
        return dfg_program_err(p, DFG_ERR_ARG, "declare_dump: the name must be 1 to 200 printable characters without "
                                               "spaces or quotes");
    if (!owned(p, t) || t->kind == DFG_TEMP || t->kind == DFG_PARAM)
        return dfg_program_err(p, DFG_ERR_ARG, "declare_dump '%s': needs a persistent tensor of this program that is "
                                               "not a PARAM (every PARAM is dumped anyway)", name);
    const dfg_tensor *clash = dfg_find(p, name);
    if (clash && clash->kind == DFG_PARAM)
        return dfg_program_err(p, DFG_ERR_ARG, "declare_dump: '%s' is the name of a PARAM", name);
    for (int i = 0; i < p->decl.n_dumps; i++)
        if (!strcmp(p->decl.dumps[i].name, name))
            return dfg_program_err(p, DFG_ERR_ARG, "declare_dump: '%s' is declared twice", name);
    if (p->decl.n_dumps == p->decl.cap_dumps) {
        int nc = p->decl.cap_dumps ? 2 * p->decl.cap_dumps : 16;
        dfg_dump_decl *d = realloc(p->decl.dumps, sizeof(*d) * (size_t)nc);
        if (!d) return dfg_program_err(p, DFG_ERR_NOMEM, "declare_dump: out of memory");
        p->decl.dumps = d;
        p->decl.cap_dumps = nc;
    }
    char *copy = dfg_program_strdup(p, name);
    if (!copy) return dfg_program_err(p, DFG_ERR_NOMEM, "declare_dump: out of memory");
    p->decl.dumps[p->decl.n_dumps++] = (dfg_dump_decl){copy, t};
    return DFG_OK;
}

dfg_status dfg_declare_fit_knob(dfg_program *p, const char *setting, const int64_t *values, int n_values,
                                bool keeps_math) {
    if (!p) return DFG_ERR_ARG;
    if (p->status || dfg_program_sealed(p, "declare_fit_knob")) return p->status;
    if (!setting || !dfg_program_has(p, setting))
        return dfg_program_err(p, DFG_ERR_ARG, "declare_fit_knob: '%s' is not a setting of this program (read it with "
                                               "dfg_setting_int first)", setting ? setting : "(null)");
    if (!values || n_values < 1 || n_values > DFG_MAX_FIT_VALUES)
        return dfg_program_err(p, DFG_ERR_ARG, "declare_fit_knob '%s': needs 1 to %d values, got %d", setting,
                               DFG_MAX_FIT_VALUES, n_values);
    for (int i = 0; i < p->decl.n_knobs; i++)
        if (!strcmp(p->decl.knobs[i].setting, setting))
            return dfg_program_err(p, DFG_ERR_ARG, "declare_fit_knob: '%s' is declared twice", setting);
    if (p->decl.n_knobs == DFG_MAX_FIT_KNOBS)
        return dfg_program_err(p, DFG_ERR_ARG, "declare_fit_knob: more than %d knobs", DFG_MAX_FIT_KNOBS);
    for (int i = 0; i < n_values; i++)
        for (int j = 0; j < i; j++)
            if (values[i] == values[j])
                return dfg_program_err(p, DFG_ERR_ARG, "declare_fit_knob '%s': the value %lld is listed twice", setting,
                                       (long long)values[i]);
    dfg_fit_knob *k = &p->decl.knobs[p->decl.n_knobs];
    if (!(k->setting = dfg_program_strdup(p, setting))) return dfg_program_err(p, DFG_ERR_NOMEM, "declare_fit_knob: out of memory");
    memcpy(k->values, values, sizeof(*values) * (size_t)n_values);
    k->n_values = n_values;
    k->keeps_math = keeps_math;
    p->decl.n_knobs++;
    return DFG_OK;
}

int dfg_program_fit_knob_count(const dfg_program *p) { return p ? p->decl.n_knobs : 0; }

const dfg_fit_knob *dfg_program_fit_knob(const dfg_program *p, int i) {
    return p && i >= 0 && i < p->decl.n_knobs ? &p->decl.knobs[i] : NULL;
}
