/* gpt2_dump.c - the dfg side of the golden test against PyTorch (tests/golden/gpt2_golden.py).
 *
 *   gpt2_dump WORKDIR
 *
 * Reads WORKDIR/weights.safetensors (a GPT-2 checkpoint with HF names; its metadata holds
 * n_layer, n_head, n_embd, vocab_size, block_size) and WORKDIR/batch.safetensors (tokens (B, T)
 * i32, targets (B, T) i32, mask (B, T) f32), runs one step of
 *
 *   loss = -mean_b [ sum_t mask * log_softmax(logits)[target] / max(sum_t mask, 1) ]
 *
 * with its backward pass, and writes "logits", "loss" and "grad.<param>" for every parameter to
 * WORKDIR/dfg_out.safetensors. Any failure prints one line and exits 1.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dfg.h"
#include "dfg_nn.h"
#include "dfg_runtime.h"
#include "safetensors.h"

#define GOLDEN_DRIVER "gpt2_dump"
#include "golden_dump.h"

#define MAX_OUT (2 + 4 + DFG_MODEL_PARAMS_PER_BLOCK * DFG_MODEL_MAX_LAYERS)

/* A positive integer from the weights' metadata; 0 when absent or malformed. */
static int meta_int(const dfg_safetensors *st, const char *key) {
    const char *s = dfg_st_metadata(st, key);
    if (!s || !*s) return 0;
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v <= 0 || v > 1000000) return 0;
    return (int)v;
}

/* The batch tensor `name`: dtype dt, rank 2, and (when *B > 0) shape (*B, *T). */
static const dfg_st_tensor *batch_tensor(const dfg_safetensors *st, const char *name, dfg_dtype dt, int64_t *B,
                                         int64_t *T) {
    const dfg_st_tensor *t = dfg_st_find(st, name);
    char sb[96];
    if (!t) {
        fail("batch.safetensors has no tensor '%s'", name);
        return NULL;
    }
    if (t->dtype != dt || t->shape.rank != 2) {
        fail("batch tensor '%s' is %s %s, expected a 2-D %s", name, t->dtype_name, dfg_shape_str(t->shape, sb, sizeof(sb)),
             dfg_dtype_name(dt));
        return NULL;
    }
    if (*B == 0) *B = t->shape.d[0], *T = t->shape.d[1];
    if (t->shape.d[0] != *B || t->shape.d[1] != *T) {
        fail("batch tensor '%s' has shape %s, expected (%lld,%lld)", name, dfg_shape_str(t->shape, sb, sizeof(sb)),
             (long long)*B, (long long)*T);
        return NULL;
    }
    return t;
}

typedef struct {
    dfg_program *p;
    dfg_model m;
    char *names[MAX_OUT]; /* output names, in output order */
    int n_out;
} model;

/* Builds the program: GPT-2 logits, the masked mean log-prob loss and its gradients. */
static int build(model *md, dfg_model_config cfg, int64_t B, int64_t T) {
    dfg_program *p = md->p = dfg_program_new("gpt2_golden");
    if (!p) return fail("out of memory");
    if (dfg_model_params(p, "", cfg, &md->m)) return fail("dfg_model_params: %s", dfg_program_error(p));
    dfg_graph *g = dfg_graph_new(p, "golden");
    dfg_tensor *tokens = dfg_input(g, "tokens", DFG_I32, DFG_SHAPE(B, T));
    dfg_tensor *targets = dfg_input(g, "targets", DFG_I32, DFG_SHAPE(B, T));
    dfg_tensor *mask = dfg_input(g, "mask", DFG_F32, DFG_SHAPE(B, T));

    dfg_tensor *logits = dfg_model_logits(g, &md->m, tokens);             /* (B, T, V) */
    dfg_tensor *lp = dfg_take(g, dfg_log_softmax(g, logits), targets);   /* (B, T) */
    dfg_tensor *num = dfg_masked_sum(g, lp, mask, 1);                    /* (B) */
    dfg_tensor *den = dfg_maximum(g, dfg_sum(g, mask, 1), dfg_fill(g, DFG_F32, DFG_SCALAR, 1.0f)); /* (B) */
    dfg_tensor *loss = dfg_neg(g, dfg_mean(g, dfg_div(g, num, den), 0)); /* () */

    dfg_tensor *grads[4 + DFG_MODEL_PARAMS_PER_BLOCK * DFG_MODEL_MAX_LAYERS] = {0};
    if (dfg_graph_status(g)) return fail("building the forward graph: %s", dfg_graph_error(g));
    if (dfg_backward(g, loss, md->m.params, md->m.n_params, grads))
        return fail("dfg_backward: %s", dfg_graph_error(g));

    dfg_output(g, logits, "logits");
    dfg_output(g, loss, "loss");
    md->names[md->n_out++] = "logits";
    md->names[md->n_out++] = "loss";
    for (int i = 0; i < md->m.n_params; i++) {
        const char *pn = dfg_tensor_name(md->m.params[i]);
        size_t len = strlen("grad.") + strlen(pn) + 1;
        char *nm = malloc(len);
        if (!nm) return fail("out of memory");
        snprintf(nm, len, "grad.%s", pn);
        md->names[md->n_out++] = nm;
        dfg_output(g, grads[i], nm);
    }
    if (dfg_graph_status(g)) return fail("building the graph: %s", dfg_graph_error(g));
    if (dfg_stage_graph(p, g, 1)) return fail("dfg_stage_graph: %s", dfg_program_error(p));
    return 0;
}

/* Copies each output out of the runtime and writes them all to path. */
static int dump(dfg_runtime *rt, const model *md, const char *path) {
    dfg_st_tensor out[MAX_OUT];
    for (int i = 0; i < md->n_out; i++) {
        dfg_buffer b;
        if (dfg_runtime_buffer(rt, md->names[i], &b)) return fail("output '%s': %s", md->names[i], dfg_runtime_error(rt));
        if (b.dtype != DFG_F32) return fail("output '%s' is %s, expected f32", md->names[i], dfg_dtype_name(b.dtype));
        out[i] = (dfg_st_tensor){.name = md->names[i], .dtype = DFG_F32, .dtype_name = "F32", .shape = b.shape,
                                 .data = b.data, .bytes = b.bytes};
    }
    char err[512] = "";
    if (dfg_st_write(path, out, md->n_out, NULL, 0, err, sizeof(err)))
        return fail("writing %s: %s", path, err[0] ? err : "failed");
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) return fail("usage: gpt2_dump WORKDIR (reads weights.safetensors and batch.safetensors there)");
    char wpath[4096], bpath[4096], opath[4096], err[512] = "";
    snprintf(wpath, sizeof(wpath), "%s/weights.safetensors", argv[1]);
    snprintf(bpath, sizeof(bpath), "%s/batch.safetensors", argv[1]);
    snprintf(opath, sizeof(opath), "%s/dfg_out.safetensors", argv[1]);

    /* the model's sizes come from the checkpoint's metadata, written by the python side */
    dfg_safetensors *ws = NULL;
    if (dfg_st_open(wpath, &ws, err, sizeof(err))) return fail("%s", err);
    dfg_model_config cfg = {.n_layer = meta_int(ws, "n_layer"), .n_head = meta_int(ws, "n_head"),
                           .n_embd = meta_int(ws, "n_embd"), .vocab_size = meta_int(ws, "vocab_size"),
                           .block_size = meta_int(ws, "block_size"), .ln_eps = 1e-5f, .dtype = DFG_F32};
    dfg_st_free(ws);
    if (!cfg.n_layer || !cfg.n_head || !cfg.n_embd || !cfg.vocab_size || !cfg.block_size)
        return fail("%s: metadata must hold positive n_layer, n_head, n_embd, vocab_size and block_size", wpath);

    dfg_safetensors *bs = NULL;
    if (dfg_st_open(bpath, &bs, err, sizeof(err))) return fail("%s", err);
    int64_t B = 0, T = 0;
    const dfg_st_tensor *tok = batch_tensor(bs, "tokens", DFG_I32, &B, &T);
    const dfg_st_tensor *tgt = tok ? batch_tensor(bs, "targets", DFG_I32, &B, &T) : NULL;
    const dfg_st_tensor *msk = tgt ? batch_tensor(bs, "mask", DFG_F32, &B, &T) : NULL;
    if (!msk) return 1;

    model md = {0};
    if (build(&md, cfg, B, T)) return 1;
    dfg_run_options opt = dfg_run_options_default();
    dfg_runtime *rt = NULL;
    if (dfg_runtime_create(md.p, &opt, &rt)) return fail("dfg_runtime_create: %s", dfg_runtime_error(rt));

    int n_loaded = 0;
    if (dfg_runtime_load_safetensors(rt, wpath, true, &n_loaded))
        return fail("strict load: %s", dfg_runtime_error(rt));
    if (n_loaded != md.m.n_params)
        return fail("loading %s: %d tensors set, the model has %d parameters", wpath, n_loaded, md.m.n_params);
    if (dfg_runtime_write(rt, "tokens", tok->data, tok->bytes) || dfg_runtime_write(rt, "targets", tgt->data, tgt->bytes) ||
        dfg_runtime_write(rt, "mask", msk->data, msk->bytes))
        return fail("writing the batch: %s", dfg_runtime_error(rt));
    if (dfg_runtime_step(rt)) return fail("dfg_runtime_step: %s", dfg_runtime_error(rt));
    if (dump(rt, &md, opath)) return 1;

    float loss = 0.0f;
    if (dfg_runtime_read(rt, "loss", &loss, sizeof(loss))) return fail("reading the loss: %s", dfg_runtime_error(rt));
    printf("loaded %d parameters, B=%lld T=%lld, loss %.7f, %d tensors written to %s\n", n_loaded, (long long)B,
           (long long)T, loss, md.n_out, opath);

    dfg_runtime_free(rt);
    dfg_st_free(bs);
    for (int i = 2; i < md.n_out; i++) free(md.names[i]);
    dfg_program_free(md.p);
    return 0;
}
