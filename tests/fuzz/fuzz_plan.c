/* fuzz_plan.c - libFuzzer entry point for the plan-file loader (runtime/formats/planfile_read.c and
 * planfile_build.c) and, behind it, the compiler.
 *
 * Every input is tried twice: as it is, and as a repaired copy whose magic, version, section
 * lengths (clamped to the bytes present; the last section takes the rest) and section CRCs are
 * made right. Random mutations of the raw bytes almost always die at a checksum; the repaired
 * copy takes them to the payload parsers (settings, tensors, graphs, stages, plan) and to the rebuild
 * through the public builders. For each of the two, one of these must hold, or the harness
 * aborts (which the fuzzer reports as a crash):
 *   - refused: status DFG_ERR_FORMAT or DFG_ERR_NOMEM, *out NULL, info zeroed, and a one-line
 *     message "fuzz.dfg: ...";
 *   - accepted: a program without error, info within the format's ranges; it serialises again,
 *     the bytes load again and serialise to the same bytes (a fixpoint); then it is verified
 *     and compiled with dfg_plan_options(info) (and verify after every pass). The program
 *     verify refuses, and a compile that fails, must fail with a one-line message (unless a name
 *     in the program holds a line break: the compiler quotes names as they are), and a compile
 *     may only fail for the budget (DFG_ERR_ARG), memory, or remat's recorded decisions that do
 *     not fit the program (DFG_ERR_FORMAT): an internal error (DFG_ERR_STATE: a pass broke an
 *     invariant) aborts. A compiled plan must pass the planner's independent
 *     property checks (tests/planner_props.h: no two live tensors share bytes, lower bound <=
 *     arena <= naive, ...) and fit the memory budget; then it must equal the file's recorded
 *     plan (section 'plan') or dfg_plan_check refuses it with DFG_ERR_FORMAT and one line.
 * Programs above FUZZ_MAX_NODES nodes or FUZZ_MAX_TENSORS tensors are loaded and round-tripped
 * but not compiled, to keep an execution in the milliseconds (the seeds have < 100 nodes; the
 * fuzzer's inputs stay near the seeds' size).
 *
 * Built with -DDFG_LIBFUZZER, a custom mutator also mutates the payload of one section at a
 * time (lengths and CRC fixed), so insertions and deletions inside a section keep the file's
 * framing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_target.h"
#include "runtime/formats/planfile.h"
#include "tests/planner_props.h"

#define FUZZ_MAX_NODES 1024
#define FUZZ_MAX_TENSORS 4096
#define FUZZ_LABEL "fuzz.dfg"

int dfg_test_failures; /* planner_props.h's CHECKs count here (testutil.c is not linked) */

static void fuzz_fail(const char *why, const char *detail) {
    fprintf(stderr, "fuzz_plan: invariant violated: %s%s%s\n", why, detail ? ": " : "", detail ? detail : "");
    abort();
}

/* ---------------------------------------------------------------- the container */
#define HEADER_BYTES 16u
#define SECTION_HEADER_BYTES 16u
#define MAX_SECTIONS 16

typedef struct {
    size_t at;  /* offset of the section's header */
    size_t len; /* payload bytes, clamped to what the input holds */
} section;

static uint64_t rd_le(const uint8_t *b, int k) {
    uint64_t v = 0;
    for (int i = 0; i < k; i++) v |= (uint64_t)b[i] << (8 * i);
    return v;
}
static void wr_le(uint8_t *b, uint64_t v, int k) {
    for (int i = 0; i < k; i++) b[i] = (uint8_t)(v >> (8 * i));
}

/* The sections as the header declares them, as far as their headers fit; lengths clamped to
 * the bytes present and the last declared section's taken to the end. */
static int sections_of(const uint8_t *b, size_t n, section *out) {
    if (n < HEADER_BYTES) return 0;
    uint32_t count = (uint32_t)rd_le(b + 12, 4);
    int k = 0;
    size_t off = HEADER_BYTES;
    for (uint32_t i = 0; i < count && k < MAX_SECTIONS && n - off >= SECTION_HEADER_BYTES; i++) {
        uint64_t len = rd_le(b + off + 4, 8), left = n - off - SECTION_HEADER_BYTES;
        if (len > left || i + 1 == count) len = left;
        out[k++] = (section){off, (size_t)len};
        off += SECTION_HEADER_BYTES + (size_t)len;
    }
    return k;
}

static void fix_section(uint8_t *b, section s) {
    wr_le(b + s.at + 4, s.len, 8);
    wr_le(b + s.at + 12, dfg_plan_crc32(b + s.at + SECTION_HEADER_BYTES, s.len), 4);
}

/* A malloc'd copy with the magic, version, lengths and CRCs repaired; NULL when the input is too
 * short to hold a header or already is what the repair would give. */
static uint8_t *repaired(const uint8_t *data, size_t size) {
    if (size < HEADER_BYTES) return NULL;
    uint8_t *b = malloc(size);
    if (!b) return NULL;
    memcpy(b, data, size);
    memcpy(b, DFG_PLAN_MAGIC, 8); /* with its NUL */
    wr_le(b + 8, DFG_PLAN_VERSION, 4);
    section s[MAX_SECTIONS];
    int k = sections_of(b, size, s);
    for (int i = 0; i < k; i++) fix_section(b, s[i]);
    if (!memcmp(b, data, size)) {
        free(b);
        return NULL;
    }
    return b;
}

/* ---------------------------------------------------------------- checks */
static bool info_is_zero(const dfg_plan_info *i) { /* field by field: padding may differ */
    return i->target == 0 && !i->source[0] && !i->dfg_version[0] && i->align == 0 &&
           !i->no_reuse && !i->keep_order && !i->no_fuse && !i->memory_min && i->memory_budget == 0 && !i->host_lib &&
           !i->host_lib_size &&
           !i->plan;
}

static void check_refusal(dfg_status s, const dfg_program *p, const dfg_plan_info *info, const char *err) {
    if (p) fuzz_fail("*out not NULL after a refusal", err);
    if (s != DFG_ERR_FORMAT && s != DFG_ERR_NOMEM) fuzz_fail("unexpected status", dfg_status_name(s));
    if (!info_is_zero(info)) fuzz_fail("info not zeroed after a refusal", err);
    if (strncmp(err, FUZZ_LABEL ": ", strlen(FUZZ_LABEL) + 2) || !err[strlen(FUZZ_LABEL) + 2] || strchr(err, '\n'))
        fuzz_fail("message not one line naming the file", err);
}

static void check_info(const dfg_plan_info *info) {
    if ((unsigned)info->target >= DFG_TARGET_COUNT) fuzz_fail("target out of range", NULL);
    if (info->align > ((size_t)1 << 20) || (info->align & (info->align - 1))) fuzz_fail("alignment", NULL);
    if (info->memory_budget < 0) fuzz_fail("negative memory budget", NULL);
    if (!info->host_lib != !info->host_lib_size) fuzz_fail("host library bytes and size disagree", NULL);
    if (info->host_lib && memcmp(info->host_lib, "\x7f" "ELF", 4)) fuzz_fail("host library is not ELF", NULL);
    if (!memchr(info->source, 0, sizeof(info->source)) || !memchr(info->dfg_version, 0, sizeof(info->dfg_version)))
        fuzz_fail("info strings not terminated", NULL);
    if (!info->plan) fuzz_fail("a loaded plan without its memory plan", NULL);
}

/* Saves p again, loads the bytes, saves that: both saves must succeed and agree. */
static void check_round_trip(const dfg_program *p, const dfg_plan_info *info) {
    char err[512];
    void *b1 = NULL, *b2 = NULL;
    size_t n1 = 0, n2 = 0;
    if (dfg_plan_serialize(p, info, &b1, &n1, err, sizeof(err))) fuzz_fail("a loaded program does not save", err);
    dfg_program *q = NULL;
    dfg_plan_info qi;
    if (dfg_plan_parse(b1, n1, FUZZ_LABEL, &q, &qi, err, sizeof(err))) fuzz_fail("a saved program does not load", err);
    if (dfg_plan_serialize(q, &qi, &b2, &n2, err, sizeof(err))) fuzz_fail("a reloaded program does not save", err);
    if (n1 != n2 || memcmp(b1, b2, n1)) fuzz_fail("save(load(save(x))) differs from save(x)", NULL);
    dfg_program_free(q);
    dfg_plan_info_free(&qi);
    free(b1);
    free(b2);
}

static bool has_line_break(const char *s) { return s && strpbrk(s, "\n\r"); }

/* Whether a name in p holds a line break: the compiler's messages quote names as they are. */
static bool names_break_lines(const dfg_program *p) {
    for (int i = 0; i < p->n_tensors; i++) {
        const dfg_tensor *t = p->tensors[i];
        if (has_line_break(t->name) || has_line_break(t->scope_first) || has_line_break(t->scope_last)) return true;
    }
    for (int g = 0; g < p->n_graphs; g++) {
        if (has_line_break(p->graphs[g]->name)) return true;
        for (int i = 0; i < p->graphs[g]->n_nodes; i++)
            if (has_line_break(p->graphs[g]->nodes[i]->name)) return true;
    }
    for (int s = 0; s < p->n_stages; s++)
        if (has_line_break(p->stages[s].name) || has_line_break(p->stages[s].symbol)) return true;
    return has_line_break(p->name);
}

/* A compile error: one line, unless it quotes a name that breaks lines. */
static void check_message(const dfg_program *p, const char *what) {
    const char *msg = dfg_program_error(p);
    if (!msg[0] || (has_line_break(msg) && !names_break_lines(p))) fuzz_fail(what, msg);
}

static int node_count(const dfg_program *p) {
    int n = 0;
    for (int g = 0; g < p->n_graphs; g++) n += p->graphs[g]->n_nodes;
    return n;
}

/* Verifies and compiles p as dfg run would; checks the plan it gives. */
static void check_compile(dfg_program *p, const dfg_plan_info *info) {
    if (node_count(p) > FUZZ_MAX_NODES || p->n_tensors > FUZZ_MAX_TENSORS) return;
    dfg_options opt = dfg_plan_options(info);
    opt.verify_each = true;
    /* the program as loaded: what verify refuses here is the file's fault, not a pass's */
    if (dfg_pass_verify(p, &opt)) return check_message(p, "verify's message");
    dfg_status st = dfg_compile(p, &opt);
    if (st) {
        check_message(p, "compile's message");
        /* DFG_ERR_FORMAT: remat's recorded decisions (plan format 12), replayed by the compile,
         * do not fit the program: the file's fault, refused in one line like any other */
        if (st != DFG_ERR_ARG && st != DFG_ERR_NOMEM && st != DFG_ERR_FORMAT)
            fuzz_fail("compile failed inside a pass", dfg_program_error(p));
        return;
    }
    const dfg_report *rep = dfg_program_report(p);
    if (!rep) fuzz_fail("compiled without a report", NULL);
    if (!opt.memory_min && opt.memory_budget > 0 && (int64_t)rep->arena_bytes > opt.memory_budget) fuzz_fail("plan over the budget", NULL);
    if (pp_check(p, "fuzz_plan", NULL)) fuzz_fail("the plan breaks the planner's properties (above)", NULL);
    /* the file's recorded plan is this one, or the file is refused in one line */
    char err[1024];
    st = dfg_plan_check(p, info, FUZZ_LABEL, err, sizeof(err));
    if (st && (st != DFG_ERR_FORMAT || strncmp(err, FUZZ_LABEL ": ", strlen(FUZZ_LABEL) + 2) || strchr(err, '\n')))
        fuzz_fail("a plan check refusal is not one line naming the file", err);
}

/* Loads one input and checks the outcome (deep: the round trip and the compile too); true when
 * it was accepted. */
static bool fuzz_plan_one(const uint8_t *data, size_t size, bool deep) {
    dfg_program *p = (dfg_program *)&size; /* the loader must reset it */
    dfg_plan_info info;
    memset(&info, 0xA5, sizeof(info)); /* and zero this */
    char err[1024];
    err[0] = '\0';
    dfg_status s = dfg_plan_parse(data, size, FUZZ_LABEL, &p, &info, err, sizeof(err));
    if (s) {
        check_refusal(s, p, &info, err);
        return false;
    }
    if (!p) fuzz_fail("DFG_OK without a program", NULL);
    if (dfg_program_status(p)) fuzz_fail("a loaded program has an error", dfg_program_error(p));
    if (dfg_is_compiled(p)) fuzz_fail("a loaded program is compiled", NULL);
    check_info(&info);
    if (deep) {
        check_round_trip(p, &info);
        check_compile(p, &info);
    }
    dfg_program_free(p);
    dfg_plan_info_free(&info);
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_plan_one(data, size, true);
    uint8_t *fixed = repaired(data, size);
    if (fixed) {
        fuzz_plan_one(fixed, size, true);
        free(fixed);
    }
    return 0;
}

static bool fuzz_plan_accepts(const uint8_t *data, size_t size) {
    if (fuzz_plan_one(data, size, false)) return true;
    uint8_t *fixed = repaired(data, size);
    bool ok = fixed && fuzz_plan_one(fixed, size, false);
    free(fixed);
    return ok;
}

/* Bytes the replay's mutations write over random ones: small counts, kinds and flags, the
 * ends of the u8/u32 ranges, and characters of names. No fixed integer field: the header's
 * are repaired anyway, the payloads' move with the names. */
static const char plan_tokens[] = "\x00\x01\x02\x03\x04\x05\x06\x07\x7f\x80\xfe\xff.-_0aA";
const fuzz_target fuzz_this_target = {"fuzz_plan", plan_tokens, sizeof(plan_tokens) - 1, -1, 0, fuzz_plan_accepts};

/* ---------------------------------------------------------------- libFuzzer's custom mutator */
#ifdef DFG_LIBFUZZER
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed);

/* Three times in four: libFuzzer's own mutations of one section's payload, with the section's
 * length and CRC fixed afterwards; otherwise (or when no section is there) of the whole input. */
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
    section s[MAX_SECTIONS];
    int k = sections_of(data, size, s);
    if (k == 0 || seed % 4 == 0) return LLVMFuzzerMutate(data, size, max_size);
    section t = s[(seed / 4) % (unsigned)k];
    size_t start = t.at + SECTION_HEADER_BYTES, rest = size - start - t.len;
    size_t room = max_size - (size - t.len); /* the most bytes the payload may grow to */
    uint8_t *pay = room ? malloc(room) : NULL;
    if (!pay) return LLVMFuzzerMutate(data, size, max_size);
    memcpy(pay, data + start, t.len);
    size_t len = LLVMFuzzerMutate(pay, t.len, room);
    memmove(data + start + len, data + start + t.len, rest);
    memcpy(data + start, pay, len);
    free(pay);
    t.len = len;
    fix_section(data, t);
    return start + len + rest;
}
#endif
