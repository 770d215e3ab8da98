/* adapter_card.c - the README.md model card of an adapter directory, as PEFT's save_pretrained
 * leaves one (PeftModel.create_or_update_model_card): YAML front matter with library_name peft
 * and the base model, how the adapter was trained, the bitsandbytes quantisation a QLoRA base
 * used, and the framework. The Hugging Face Hub reads the front matter to list the adapter under
 * its base model. An earlier card in the directory is replaced: it described other weights. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weights_internal.h"

#define CARD_MAX (16u << 10)

/* s as a YAML double-quoted scalar (JSON's escapes are YAML's), cut to fit */
static void card_quoted(char *out, size_t len, const char *s) {
    size_t at = 0;
    if (len < 4) return;
    out[at++] = '"';
    for (; *s && at + 4 < len; s++) {
        if (*s == '"' || *s == '\\') out[at++] = '\\';
        out[at++] = (unsigned char)*s < 0x20 ? '?' : *s;
    }
    out[at++] = '"';
    out[at] = '\0';
}

/* What the plan stores its frozen linears as: 0 none in 4 bits, 1 NF4, 2 NF4 double-quantised. */
static int card_quantised(const dfg_program *p) {
    int q = 0;
    for (int i = 0; i < p->n_tensors; i++) {
        const dfg_tensor *t = p->tensors[i];
        if (dfg_wt_nf4_packed(t) && !q) q = 1;
        if (t->role == DFG_ROLE_BASE_MODEL && strstr(t->name, ".absmax_q")) q = 2;
    }
    return q;
}

dfg_status dfg_wt_write_adapter_card(dfg_runtime *rt, const char *dir) {
    const dfg_program *p = dfg_runtime_program(rt);
    const dfg_arch_info *a = dfg_wt_arch(p);
    const char *base = dfg_program_str(p, "model");
    char *text = malloc(CARD_MAX), quoted[1100], path[4200];
    if (!text) return dfg_wt_fail(rt, DFG_ERR_NOMEM, false, "save: out of memory");
    size_t n = 0;
#define CARD(...) (n += (size_t)snprintf(text + n, n < CARD_MAX ? CARD_MAX - n : 0, __VA_ARGS__))
    CARD("---\nlibrary_name: peft\n");
    if (*base) card_quoted(quoted, sizeof(quoted), base), CARD("base_model: %s\n", quoted);
    CARD("---\n\n# LoRA adapter for %s\n\n", *base ? base : a->hf_class);
    CARD("A LoRA adapter of a %s model (%s), trained with dfg for %lld step%s. Its rank, alpha and "
         "target modules are in adapter_config.json; the tokenizer files beside it are the base "
         "model's.\n\n",
         a->hf_class, a->model_type, (long long)dfg_runtime_steps_done(rt), dfg_runtime_steps_done(rt) == 1 ? "" : "s");
    CARD("## How to use\n\n```python\nfrom peft import AutoPeftModelForCausalLM\nfrom transformers import "
         "AutoTokenizer\n\nmodel = AutoPeftModelForCausalLM.from_pretrained(\"<this directory>\")\n"
         "tokenizer = AutoTokenizer.from_pretrained(\"<this directory>\")\n```\n\n");
    int q = card_quantised(p);
    if (q) {
        CARD("## Training procedure\n\nThe following `bitsandbytes` quantization config was used during training:\n");
        CARD("- load_in_4bit: True\n- bnb_4bit_quant_type: nf4\n- bnb_4bit_use_double_quant: %s\n\n",
             q == 2 ? "True" : "False");
    }
    CARD("### Framework versions\n\n- dfg %s (PEFT's adapter format)\n", DFG_VERSION_STRING);
#undef CARD
    dfg_status s = DFG_OK;
    if (n >= CARD_MAX) s = dfg_wt_fail(rt, DFG_ERR_ARG, false, "save: the model card is longer than %u bytes", CARD_MAX);
    snprintf(path, sizeof(path), "%s/README.md", dir);
    if (!s) s = dfg_wt_write_text(rt, path, text);
    free(text);
    return s;
}
