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
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "runtime_internal.h"

#define EXPORT_MAX_CONFIG (4u << 20) /* a source config.json larger than this is not copied */

static const char *setting(const dfg_runtime *rt, const char *key) { return dfg_program_setting(rt->p, key); }

static const char *const gpt2_keys[] = {"n_layer", "n_head", "n_embd", "vocab_size", "n_positions", "layer_norm_epsilon"};
static const char *const llama_keys[] = {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                                         "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings",
                                         "rms_norm_eps", "rope_theta", "tie_word_embeddings", "attention_bias"};

/* Sets o[key] to settings[key] as a JSON number or boolean (replacing what o held). */
static void set_number(cJSON *o, const dfg_runtime *rt, const char *key) {
    const char *v = setting(rt, key);
    if (!v) return;
    cJSON_DeleteItemFromObjectCaseSensitive(o, key);
    if (!strcmp(v, "true") || !strcmp(v, "false")) cJSON_AddBoolToObject(o, key, !strcmp(v, "true"));
    else cJSON_AddNumberToObject(o, key, strtod(v, NULL));
}

/* The model settings the plan was built with, over whatever o says: the saved weights have the
 * plan's shapes, also when a --set changed a size of the source model. */
static void set_model_keys(cJSON *o, const dfg_runtime *rt, bool gpt2) {
    const char *const *keys = gpt2 ? gpt2_keys : llama_keys;
    size_t n = gpt2 ? sizeof(gpt2_keys) / sizeof(gpt2_keys[0]) : sizeof(llama_keys) / sizeof(llama_keys[0]);
    for (size_t i = 0; i < n; i++) set_number(o, rt, keys[i]);
    const char *inner = setting(rt, "n_inner");
    if (gpt2 && inner && strtol(inner, NULL, 10) > 0) set_number(o, rt, "n_inner");
}

/* config.json from the plan's settings alone (a model made without a directory) */
static cJSON *config_from_settings(const dfg_runtime *rt, const char *type, const char *arch) {
    cJSON *o = cJSON_CreateObject();
    cJSON *a = cJSON_AddArrayToObject(o, "architectures");
    cJSON_AddItemToArray(a, cJSON_CreateString(arch));
    cJSON_AddStringToObject(o, "model_type", type);
    if (!strcmp(type, "gpt2")) {
        cJSON_AddNullToObject(o, "n_inner");
        const char *np = setting(rt, "n_positions");
        cJSON_AddNumberToObject(o, "n_ctx", strtod(np ? np : "1024", NULL));
        cJSON_AddStringToObject(o, "activation_function", "gelu_new");
        /* dfg's GPT-2 has no dropout: a model loaded for more training should not grow one */
        cJSON_AddNumberToObject(o, "resid_pdrop", 0.0), cJSON_AddNumberToObject(o, "embd_pdrop", 0.0);
        cJSON_AddNumberToObject(o, "attn_pdrop", 0.0);
        cJSON_AddBoolToObject(o, "tie_word_embeddings", true);
    } else {
        cJSON_AddStringToObject(o, "hidden_act", "silu");
        cJSON_AddNumberToObject(o, "attention_dropout", 0.0);
    }
    return o;
}

/* The source directory's config.json, when the program was compiled from one */
static cJSON *source_config(const dfg_runtime *rt) {
    const char *dir = setting(rt, "model");
    if (!dir || !*dir) return NULL;
    char path[4096];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *text = malloc(EXPORT_MAX_CONFIG + 1);
    size_t n = text ? fread(text, 1, EXPORT_MAX_CONFIG + 1, f) : 0;
    fclose(f);
    cJSON *o = n > 0 && n <= EXPORT_MAX_CONFIG ? cJSON_ParseWithLength(text, n) : NULL;
    free(text);
    if (o && !cJSON_IsObject(o)) cJSON_Delete(o), o = NULL;
    return o;
}

/* Writes text to path atomically (temp file in the same directory, fsync, rename). */
dfg_status dfg_rt_write_text(dfg_runtime *rt, const char *path, const char *text) {
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    bool ok = f && fwrite(text, 1, strlen(text), f) == strlen(text) && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (f && fclose(f)) ok = false;
    if (ok && rename(tmp, path)) ok = false;
    if (!ok) {
        remove(tmp);
        return dfg_rt_fail(rt, DFG_ERR_IO, false, "save: cannot write %s", path);
    }
    return DFG_OK;
}

static dfg_status write_config(dfg_runtime *rt, const char *dir, dfg_dtype dt) {
    const char *type = setting(rt, "model_type");
    if (!type) type = "gpt2";
    static const char *const types[][2] = {{"gpt2", "GPT2LMHeadModel"}, {"llama", "LlamaForCausalLM"},
                                           {"qwen2", "Qwen2ForCausalLM"}, {"qwen3", "Qwen3ForCausalLM"}};
    const char *arch = NULL;
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (!strcmp(type, types[i][0])) arch = types[i][1];
    if (!arch) return dfg_rt_fail(rt, DFG_ERR_ARG, false, "save: model_type '%s' has no Hugging Face architecture", type);
    cJSON *o = source_config(rt);
    if (!o) o = config_from_settings(rt, type, arch);
    if (!o) return dfg_rt_fail(rt, DFG_ERR_NOMEM, false, "save: out of memory");
    set_model_keys(o, rt, !strcmp(type, "gpt2"));
    cJSON_DeleteItemFromObjectCaseSensitive(o, "torch_dtype");
    cJSON_AddStringToObject(o, "torch_dtype", dt == DFG_BF16 ? "bfloat16" : dt == DFG_F16 ? "float16" : "float32");
    char *text = cJSON_Print(o), path[4096];
    cJSON_Delete(o);
    if (!text) return dfg_rt_fail(rt, DFG_ERR_NOMEM, false, "save: out of memory");
    snprintf(path, sizeof(path), "%s/config.json", dir);
    dfg_status s = dfg_rt_write_text(rt, path, text);
    free(text);
    return s;
}

/* The files of a model directory besides config.json and the weights that loaders read:
 * generation defaults (GenerationConfig) and the tokenizer, by the names of transformers 4.40's
 * tokenization_utils_base.py and of the tokenizers of dfg's architectures (VOCAB_FILES_NAMES). */
static const char *const source_files[] = {
    "generation_config.json",  /* eos/bos ids, sampling defaults */
    "tokenizer.json",          /* the fast tokenizer, whole */
    "tokenizer_config.json",   /* the tokenizer's class, special tokens, chat template */
    "special_tokens_map.json", /* older tokenizers' special tokens */
    "added_tokens.json",       /* tokens added to a slow tokenizer's vocabulary */
    "vocab.json", "merges.txt", /* GPT-2's and Qwen2's (Qwen3's) byte-level BPE */
    "tokenizer.model",          /* Llama's sentencepiece model */
    "chat_template.jinja",      /* transformers >= 4.47 takes it over tokenizer_config.json's */
    "chat_template.json",       /* a processor's chat template */
};

/* Copies src to dst atomically (temp file next to dst, fsync, rename). src may be a symbolic
 * link (a Hugging Face cache links each file to its blob), but only to a regular file. */
static dfg_status copy_file(dfg_runtime *rt, const char *src, const char *dst) {
    /* O_NONBLOCK: opening a FIFO does not wait for a writer; it is refused below */
    int in = open(src, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat sb;
    if (in < 0)
        return dfg_rt_fail(rt, DFG_ERR_IO, false, "save: cannot copy %s: %s", src,
                           errno == ENOENT ? "a symbolic link to nothing" : strerror(errno));
    if (fstat(in, &sb) || !S_ISREG(sb.st_mode)) {
        close(in);
        return dfg_rt_fail(rt, DFG_ERR_IO, false, "save: cannot copy %s: not a regular file", src);
    }
    char tmp[4200], buf[1 << 16];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", dst, (long)getpid());
    int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int err = out < 0 ? errno : 0;
    for (ssize_t n; !err && (n = read(in, buf, sizeof(buf))) != 0;) {
        if (n < 0 && errno != EINTR) err = errno;
        for (ssize_t at = 0, w = 0; !err && at < n; at += w > 0 ? w : 0)
            if ((w = write(out, buf + at, (size_t)(n - at))) <= 0 && !(w < 0 && errno == EINTR))
                err = w < 0 ? errno : EIO;
    }
    if (!err && fsync(out)) err = errno;
    if (out >= 0 && close(out) && !err) err = errno;
    close(in);
    if (!err && rename(tmp, dst)) err = errno;
    if (err) {
        if (out >= 0) remove(tmp);
        return dfg_rt_fail(rt, DFG_ERR_IO, false, "save: cannot copy %s to %s: %s", src, dst, strerror(err));
    }
    return DFG_OK;
}

/* Copies source_files from the source directory (the setting "model") into dir, replacing what
 * an earlier save left; one the source lacks is removed from dir, for it would belong to another
 * model. A model made from settings alone, or whose directory is gone, has nothing to copy and dir
 * keeps what it holds. Stops at the first failed copy. Lists the copies in rt->saved_copies. */
static dfg_status copy_source_files(dfg_runtime *rt, const char *dir) {
    const char *from = setting(rt, "model");
    struct stat a, b;
    if (!from || !*from || stat(from, &a) || !S_ISDIR(a.st_mode)) return DFG_OK;
    if (stat(dir, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) return DFG_OK; /* saved into the source */
    char src[4096], dst[4096];
    for (size_t i = 0; i < sizeof(source_files) / sizeof(source_files[0]); i++) {
        snprintf(src, sizeof(src), "%s/%s", from, source_files[i]);
        snprintf(dst, sizeof(dst), "%s/%s", dir, source_files[i]);
        if (lstat(src, &a) && errno == ENOENT) {
            unlink(dst); /* not a directory: unlink refuses one */
            continue;
        }
        dfg_status s = copy_file(rt, src, dst);
        if (s) return s;
        size_t used = strlen(rt->saved_copies);
        snprintf(rt->saved_copies + used, sizeof(rt->saved_copies) - used, "%s%s", used ? ", " : "", source_files[i]);
    }
    return DFG_OK;
}

/* The files the last dfg_runtime_save_model_dir copied from the source model directory, ", "
 * between them; "" when none (a model made from settings alone). */
const char *dfg_runtime_saved_copies(const dfg_runtime *rt) { return rt ? rt->saved_copies : ""; }

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
    if (!shard) return dfg_rt_fail(rt, DFG_ERR_NOMEM, false, "save: out of memory");
    size_t used = 0, total = 0;
    for (int i = 0; i < n; i++) {
        if (i == 0 || (used > 0 && used + ts[i].bytes > max_bytes)) n_shards++, used = 0;
        shard[i] = n_shards - 1, used += ts[i].bytes, total += ts[i].bytes;
    }
    char step[32], err[1024], path[4096], file[64];
    snprintf(step, sizeof(step), "%" PRId64, rt->step);
    const char *meta[] = {"format", "pt", "producer", "dfg", "dfg.step", step};
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
        s = dfg_st_write(path, ts + first, last - first, meta, 3, err, sizeof(err));
        if (s) dfg_rt_fail(rt, s, false, "%s", err);
        for (int i = first; i < last; i++) cJSON_AddStringToObject(map, ts[i].name, file);
        first = last;
    }
    if (!s && n_shards > 1) {
        char *text = cJSON_Print(index);
        snprintf(path, sizeof(path), "%s/model.safetensors.index.json", dir);
        s = text ? dfg_rt_write_text(rt, path, text) : dfg_rt_fail(rt, DFG_ERR_NOMEM, false, "save: out of memory");
        free(text);
    }
    cJSON_Delete(index);
    free(shard);
    return s;
}

dfg_status dfg_rt_make_dir(dfg_runtime *rt, const char *dir) {
    rt->saved_copies[0] = 0;
    if (!dir || !*dir) return dfg_rt_fail(rt, DFG_ERR_ARG, false, "save: directory is empty");
    if (mkdir(dir, 0755) && access(dir, W_OK))
        return dfg_rt_fail(rt, DFG_ERR_IO, false, "save: cannot create or write the directory %s", dir);
    return DFG_OK;
}

dfg_status dfg_rt_write_model_dir(dfg_runtime *rt, const char *dir, const dfg_st_tensor *ts, int n, size_t max_shard_bytes) {
    if (n == 0) return dfg_rt_fail(rt, DFG_ERR_ARG, false, "save: the program has no parameters");
    dfg_status s = write_shards(rt, dir, ts, n, max_shard_bytes ? max_shard_bytes : (size_t)5e9);
    if (!s) {
        /* a failed copy still leaves config.json next to the weights; the save reports the copy */
        dfg_status copied = copy_source_files(rt, dir);
        s = write_config(rt, dir, ts[0].dtype);
        if (!s) s = copied;
    }
    return s;
}

dfg_status dfg_runtime_save_model_dir(dfg_runtime *rt, const char *dir, size_t max_shard_bytes) {
    if (!rt) return DFG_ERR_ARG;
    dfg_status s = dfg_rt_make_dir(rt, dir);
    if (s) return s;
    dfg_st_tensor *ts = calloc((size_t)(rt->p->n_tensors ? rt->p->n_tensors : 1), sizeof(*ts));
    char *host = NULL;
    int n = 0;
    s = ts ? dfg_rt_gather(rt, false, ts, &n, &host) : dfg_rt_fail(rt, DFG_ERR_NOMEM, false, "save: out of memory");
    if (!s) s = dfg_rt_write_model_dir(rt, dir, ts, n, max_shard_bytes);
    free(ts);
    free(host);
    return s;
}
