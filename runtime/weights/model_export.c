/* model_export.c - a trained policy written back as a Hugging Face model directory that
 * transformers' from_pretrained loads: config.json, and the parameters under their Hugging Face
 * names in model.safetensors, or in shards model-0000i-of-0000n.safetensors with
 * model.safetensors.index.json when they exceed the shard size (as save_pretrained writes them).
 *
 * config.json is the source model's (the setting "model" names the directory the program was
 * compiled from), so everything dfg does not read (token ids, generation defaults) survives, with
 * the model settings the plan was built with and torch_dtype set to the saved dtype; a model made
 * from settings alone gets one written from the plan's settings. The source directory's
 * generation and tokenizer files (source_files) are copied, so that the directory is a whole model
 * for transformers, vLLM and TGI; its weights and index never are (those are dfg's). Every file is
 * written atomically (temp file, fsync, rename); the index, the copies and config.json last, so a
 * directory with an index is complete. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../formats/fileio.h"
#include "weights_internal.h"

#define EXPORT_MAX_CONFIG (4u << 20) /* a source config.json larger than this is not copied */
#define EXPORT_MAX_KEYS 64

static const dfg_program *prog(const dfg_runtime *rt) { return dfg_runtime_program(rt); }

/* Sets o[key] to the setting `from` as the key's kind reads it (replacing what o held). */
static void set_value(cJSON *o, const dfg_runtime *rt, const dfg_arch_key *k, const char *from) {
    cJSON_DeleteItemFromObjectCaseSensitive(o, k->key);
    if (k->kind == DFG_ARCH_KEY_BOOL) cJSON_AddBoolToObject(o, k->key, dfg_program_bool(prog(rt), from));
    else if (k->kind == DFG_ARCH_KEY_FLOAT) cJSON_AddNumberToObject(o, k->key, dfg_program_float(prog(rt), from));
    else cJSON_AddNumberToObject(o, k->key, (double)dfg_program_int(prog(rt), from));
}

/* The model settings the plan was built with (the architecture table's keys), over whatever o
 * says: the saved weights have the plan's shapes, also when a --set changed a size of the source
 * model. A key that is null for "derived" (GPT-2's n_inner) is written only when set to a size;
 * an export-only key (GPT-2's n_ctx) only where o lacks it. */
static void set_model_keys(cJSON *o, const dfg_runtime *rt, const dfg_arch_info *a) {
    const dfg_arch_key *keys[EXPORT_MAX_KEYS];
    int n = dfg_arch_config_keys(a->arch, keys, EXPORT_MAX_KEYS);
    for (int i = 0; i < n; i++) {
        const dfg_arch_key *k = keys[i];
        const char *from = k->from ? k->from : k->key;
        if (!k->field && !k->from) continue; /* token ids: the source's own */
        if (!dfg_program_has(prog(rt), from) || (k->from && cJSON_GetObjectItemCaseSensitive(o, k->key))) continue;
        if (k->null_skips && k->kind == DFG_ARCH_KEY_INT && dfg_program_int(prog(rt), from) <= 0) continue;
        set_value(o, rt, k, from);
    }
}

/* config.json from the plan's settings alone (a model made without a directory): the class, its
 * model_type and what the table says such a config holds besides the model's sizes */
static cJSON *config_from_settings(const dfg_arch_info *a) {
    cJSON *o = cJSON_CreateObject(), *extra = cJSON_Parse(a->config_extra);
    if (!o || !extra) return cJSON_Delete(o), cJSON_Delete(extra), NULL;
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "architectures"), cJSON_CreateString(a->hf_class));
    cJSON_AddStringToObject(o, "model_type", a->model_type);
    while (extra->child) {
        const char *key = extra->child->string;
        cJSON_AddItemToObject(o, key, cJSON_DetachItemViaPointer(extra, extra->child));
    }
    cJSON_Delete(extra);
    return o;
}

/* The source directory's config.json, when the program was compiled from one */
static cJSON *source_config(const dfg_runtime *rt) {
    const char *dir = dfg_program_str(prog(rt), "model");
    if (!*dir) return NULL;
    char path[4096], *text = NULL;
    size_t n = 0;
    snprintf(path, sizeof(path), "%s/config.json", dir);
    if (dfg_file_read(path, NULL, EXPORT_MAX_CONFIG, "a config.json", &text, &n, NULL, 0)) return NULL;
    cJSON *o = cJSON_ParseWithLength(text, n);
    free(text);
    if (o && !cJSON_IsObject(o)) cJSON_Delete(o), o = NULL;
    return o;
}

/* Writes text to path atomically (runtime/formats/fileio.h). */
dfg_status dfg_wt_write_text(dfg_runtime *rt, const char *path, const char *text) {
    char err[1024];
    dfg_status s = dfg_file_write(path, text, strlen(text), err, sizeof(err));
    return s ? dfg_wt_fail(rt, s, false, "save: %s", err) : DFG_OK;
}

dfg_status dfg_wt_write_json(dfg_runtime *rt, const char *dir, const char *name, const cJSON *o) {
    char *text = cJSON_Print(o), path[4200];
    if (!text) return dfg_wt_fail(rt, DFG_ERR_NOMEM, false, "save: out of memory");
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    dfg_status s = dfg_wt_write_text(rt, path, text);
    free(text);
    return s;
}

static dfg_status write_config(dfg_runtime *rt, const char *dir, dfg_dtype dt) {
    const char *type = dfg_program_str(prog(rt), "model_type");
    const dfg_arch_info *a = dfg_arch_find(type, false);
    if (!a) return dfg_wt_fail(rt, DFG_ERR_ARG, false, "save: model_type '%s' has no Hugging Face architecture", type);
    cJSON *o = source_config(rt);
    if (!o) o = config_from_settings(a);
    if (!o) return dfg_wt_fail(rt, DFG_ERR_NOMEM, false, "save: out of memory");
    set_model_keys(o, rt, a);
    cJSON_DeleteItemFromObjectCaseSensitive(o, "torch_dtype");
    cJSON_AddStringToObject(o, "torch_dtype", dt == DFG_BF16 ? "bfloat16" : dt == DFG_F16 ? "float16" : "float32");
    dfg_status s = dfg_wt_write_json(rt, dir, "config.json", o);
    cJSON_Delete(o);
    return s;
}

/* The files of a model directory besides config.json and the weights that loaders read:
 * generation defaults (GenerationConfig) and the tokenizer, by the names of transformers 4.40's
 * tokenization_utils_base.py and of the tokenizers of dfg's architectures (VOCAB_FILES_NAMES). */
typedef struct {
    const char *name;
    bool tokenizer; /* an adapter directory has it too (a trainer's save_model writes the tokenizer) */
} export_file;
static const export_file source_files[] = {
    {"generation_config.json", false}, /* eos/bos ids, sampling defaults */
    {"tokenizer.json", true},          /* the fast tokenizer, whole */
    {"tokenizer_config.json", true},   /* the tokenizer's class, special tokens, chat template */
    {"special_tokens_map.json", true}, /* older tokenizers' special tokens */
    {"added_tokens.json", true},       /* tokens added to a slow tokenizer's vocabulary */
    {"vocab.json", true},              /* GPT-2's and Qwen2's (Qwen3's) byte-level BPE */
    {"merges.txt", true},
    {"tokenizer.model", true},         /* Llama's sentencepiece model */
    {"chat_template.jinja", true},     /* transformers >= 4.47 takes it over tokenizer_config.json's */
    {"chat_template.json", true},      /* a processor's chat template */
};
#define N_SOURCE_FILES (sizeof(source_files) / sizeof(source_files[0]))

/* The source model directory (the setting "model") when it is one, and not dir itself. */
static const char *source_dir(const dfg_program *p, const char *dir) {
    const char *from = dfg_program_str(p, "model");
    struct stat a, b;
    if (!*from || stat(from, &a) || !S_ISDIR(a.st_mode)) return NULL;
    if (dir && stat(dir, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) return NULL; /* saved into the source */
    return from;
}

static bool source_has(const char *from, const char *name) {
    char src[4096];
    struct stat sb;
    snprintf(src, sizeof(src), "%s/%s", from, name);
    return !(lstat(src, &sb) && errno == ENOENT);
}

const char *dfg_weights_copied_files(const dfg_program *p, bool adapter, char *buf, size_t len) {
    if (!buf || !len) return "";
    buf[0] = '\0';
    const char *from = p ? source_dir(p, NULL) : NULL;
    for (size_t i = 0, used = 0; from && i < N_SOURCE_FILES; i++)
        if ((!adapter || source_files[i].tokenizer) && source_has(from, source_files[i].name) && used < len)
            used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? ", " : "", source_files[i].name);
    return buf;
}

/* Copies the files from the source directory into dir, replacing what an earlier save left; one
 * the source lacks is removed from dir, for it would belong to another model. A model made from
 * settings alone, or whose directory is gone, has nothing to copy and dir keeps what it holds.
 * Stops at the first failed copy. */
dfg_status dfg_wt_copy_source_files(dfg_runtime *rt, const char *dir, bool adapter) {
    const char *from = source_dir(dfg_runtime_program(rt), dir);
    char src[4096], dst[4096], err[1024];
    for (size_t i = 0; from && i < N_SOURCE_FILES; i++) {
        if (adapter && !source_files[i].tokenizer) continue;
        snprintf(src, sizeof(src), "%s/%s", from, source_files[i].name);
        snprintf(dst, sizeof(dst), "%s/%s", dir, source_files[i].name);
        if (!source_has(from, source_files[i].name)) {
            unlink(dst); /* not a directory: unlink refuses one */
            continue;
        }
        dfg_status s = dfg_file_copy(src, dst, err, sizeof(err));
        if (s) return dfg_wt_fail(rt, s, false, "save: %s", err);
    }
    return DFG_OK;
}

/* Removes the shards of an earlier save with another shard count: a directory holds one model. */
static void remove_stale_shards(const char *dir, int n_shards) {
    DIR *d = opendir(dir);
    if (!d) return;
    char path[4096];
    for (struct dirent *e; (e = readdir(d));) {
        int k, of, end = 0;
        if (sscanf(e->d_name, "model-%5d-of-%5d.safetensors%n", &k, &of, &end) == 2 && end > 0 &&
            !e->d_name[end] && strlen(e->d_name) == 32 && (of != n_shards || n_shards == 1)) {
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            remove(path);
        }
    }
    closedir(d);
}

/* Splits ts into shards of at most max_bytes (a larger tensor gets a shard of its own), writes
 * them, then the index naming each tensor's shard. */
static dfg_status write_shards(dfg_runtime *rt, const char *dir, const dfg_st_tensor *ts, int n, size_t max_bytes) {
    int *shard = calloc((size_t)(n ? n : 1), sizeof(*shard)), n_shards = 0;
    if (!shard) return dfg_wt_fail(rt, DFG_ERR_NOMEM, false, "save: out of memory");
    size_t used = 0, total = 0;
    for (int i = 0; i < n; i++) {
        if (i == 0 || (used > 0 && used + ts[i].bytes > max_bytes)) n_shards++, used = 0;
        shard[i] = n_shards - 1, used += ts[i].bytes, total += ts[i].bytes;
    }
    char path[4096], file[64];
    cJSON *index = cJSON_CreateObject(), *map = NULL;
    cJSON *md = cJSON_AddObjectToObject(index, "metadata");
    cJSON_AddNumberToObject(md, "total_size", (double)total);
    map = cJSON_AddObjectToObject(index, "weight_map");
    /* what an earlier save of another size left would contradict this one: loaders take an index
     * over model.safetensors */
    snprintf(path, sizeof(path), "%s/%s", dir, n_shards > 1 ? "model.safetensors" : "model.safetensors.index.json");
    remove(path);
    remove_stale_shards(dir, n_shards);
    dfg_status s = DFG_OK;
    for (int k = 0, first = 0; k < n_shards && !s; k++) {
        int last = first;
        while (last < n && shard[last] == k) last++;
        if (n_shards == 1) snprintf(file, sizeof(file), "model.safetensors");
        else snprintf(file, sizeof(file), "model-%05d-of-%05d.safetensors", k + 1, n_shards);
        snprintf(path, sizeof(path), "%s/%s", dir, file);
        s = dfg_wt_write_tensors(rt, path, ts + first, last - first);
        for (int i = first; i < last; i++) cJSON_AddStringToObject(map, ts[i].name, file);
        first = last;
    }
    if (!s && n_shards > 1) s = dfg_wt_write_json(rt, dir, "model.safetensors.index.json", index);
    cJSON_Delete(index);
    free(shard);
    return s;
}

dfg_status dfg_wt_make_dir(dfg_runtime *rt, const char *dir) {
    if (!dir || !*dir) return dfg_wt_fail(rt, DFG_ERR_ARG, false, "save: directory is empty");
    if (mkdir(dir, 0755) && access(dir, W_OK))
        return dfg_wt_fail(rt, DFG_ERR_IO, false, "save: cannot create or write the directory %s", dir);
    return DFG_OK;
}

dfg_status dfg_wt_write_model_dir(dfg_runtime *rt, const char *dir, const dfg_st_tensor *ts, int n, size_t max_shard_bytes) {
    if (n == 0) return dfg_wt_fail(rt, DFG_ERR_ARG, false, "save: the program has no parameters");
    dfg_status s = write_shards(rt, dir, ts, n, max_shard_bytes ? max_shard_bytes : (size_t)5e9);
    if (!s) {
        /* a failed copy still leaves config.json next to the weights; the save reports the copy */
        dfg_status copied = dfg_wt_copy_source_files(rt, dir, false);
        s = write_config(rt, dir, ts[0].dtype);
        if (!s) s = copied;
    }
    return s;
}

static bool export_param(const dfg_tensor *t, const void *arg) {
    (void)arg;
    return t->kind == DFG_PARAM;
}

dfg_status dfg_runtime_save_model_dir(dfg_runtime *rt, const char *dir, size_t max_shard_bytes) {
    if (!rt) return DFG_ERR_ARG;
    dfg_status s = dfg_wt_make_dir(rt, dir);
    if (s) return s;
    dfg_wt_set set;
    s = dfg_wt_gather(rt, export_param, NULL, &set);
    if (!s) s = dfg_wt_write_model_dir(rt, dir, set.ts, set.n, max_shard_bytes);
    dfg_wt_set_free(&set);
    return s;
}
