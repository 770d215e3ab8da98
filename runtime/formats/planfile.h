/* planfile.h - saving a program to a plan file (P.dfg, written by `dfg compile`) and loading it
 * back (`dfg run`, `dfg info`, `dfg inspect`, `dfg dot`).
 *
 * A plan file holds what the pipeline built: settings, every tensor (with its flags and scope),
 * every graph's nodes, the stages, the compile target and options, and the pipeline's shared
 * object when the program has host stages. Loading never
 * trusts the file: the header, every section's length and CRC are checked against the file's
 * size before a payload is read, every count and length is capped and checked against the
 * bytes that remain, and the program is REBUILT through the public construction calls
 * (dfg_param, dfg_input, dfg_graph_new, dfg_node_add with the stored attributes, dfg_output,
 * dfg_stage_graph, ...) so every shape rule re-validates the file's contents. A file that fails
 * any check is refused with one line naming the file and the problem; nothing crashes, hangs or
 * allocates more than a small multiple of the file's size.
 *
 * ---------------------------------------------------------------- format, version 12
 * Integers are little-endian. str = u32 byte length + the bytes (no NUL; names <= 4096 bytes,
 * setting values <= 1 MiB). f32 = the IEEE-754 bits as a u32.
 *
 *   header    "DFGPLAN\0" (8 bytes) | u32 format version (12) | u32 section count
 *   section   u32 kind | u64 payload length | u32 CRC-32 of the payload (IEEE 802.3, as zlib's
 *             crc32) | payload
 *
 * Sections appear at most once each; all but hostlib are required; nothing follows the last.
 *   1 info      u32 target | str program name | str source file | i64 compile time (unix
 *               seconds) | str dfg version of the writer | u32 sizeof(dfg_attrs) | u32 op count
 *               | u32 alignment (0: the target's) | u32 compile flags (1 no_reuse, 2 keep_order,
 *               4 no_fuse, 8 memory_min) | i64 memory budget in bytes (0: none; never negative)
 *   2 settings  u32 n | n x (str key | str value | u8 used)
 *   3 tensors   u32 n | n x tensor, in tensor-id order (ids are 0 .. n-1), temporaries included
 *     tensor    u8 kind | u8 dtype | u8 role | u8 flags (1 dfg_output, 2 parameter gradient
 *               from dfg_backward, 4 a metric that may have no value: dfg_metric_nullable) | u8 rank | rank x i64 dim | str name | STATE, INPUT: str
 *               scope's first stage, str its last stage (both empty: no scope) | PARAM, STATE:
 *               u8 init kind, f32 a, f32 b, u32 ref of the tensor it starts as a copy of
 *               (dfg_init_from) | CONST: u64 byte count, the data (numel x dtype size bytes) |
 *               u32 ref of the tensor it is a gradient of (set by dfg_backward)
 *   4 graphs    u32 n | n x (str name | u32 node count | nodes, in build order)
 *     node      u32 op id | str op name | str node name | u8 flags (1 added by dfg_backward) |
 *               u32 the forward node it differentiates (its index in the graph + 1; 0: none) |
 *               u32 n_in | n_in x u32 input tensor id | u32 n_out | u32 id of the first output
 *               (the outputs are consecutive ids) | the node's dfg_attrs, raw (sizeof(dfg_attrs)
 *               bytes, as info says)
 *   A ref is a tensor id + 1, 0 for none.
 *   5 stages    u32 n | n x (u8 kind (0 graph, 1 host) | str name | graph: u32 graph index,
 *               u32 repeat | host: str function symbol | i64 first step | i64 last step (-1: no end)
 *               | u32 ref of the flag that ends its runs (dfg_stage_until; 0: none) | u32 ref of
 *               the value it runs on (dfg_stage_when; 0: none) | f64 low end | f64 high end | u32
 *               ref of its run count (dfg_stage_runs; 0: none) | u32 the first stage of the loop
 *               it ends + 1 (dfg_stage_loop; 0: none) | u32 the loop's most returns | u32 ref of
 *               the loop's end flag)
 *   6 hostlib   the pipeline's shared object, byte for byte
 *   7 plan      what dfg compile planned: the schedule and the memory plan of the COMPILED
 *               program (compiling adds tensors for fused and recomputed nodes, so its tensor ids
 *               run past the tensors section's) |
 *               u64 arena bytes | u32 alignment | u32 timeline steps | u32 compiled tensor count |
 *               u32 graph count (as section 4) | per graph: u32 node count | nodes in schedule
 *               order, each u32 op id | str node name |
 *               u32 buffer count | per buffer (a range of the arena: a tensor's storage shared
 *               by its views, versions and in-place outputs): u32 owner tensor id | u64 offset |
 *               u64 size | i32 first, i32 last timeline step it is live (-1, -1: never) |
 *               per compiled tensor: u32 its buffer's index + 1 (0: no bytes) | u64 its bytes |
 *               u8 1 when remat ran (a memory budget or memory_min), then its decisions
 *               (passes/plan.h, dfg_remat_log): i32 rounds | i32 batched rounds | u32 n | n x copy,
 *               in the order made (each one's outputs take the next tensor ids) | u32 n | n x
 *               redirect | u32 graph count | per graph: u32 n | n x u32 node, its order as remat
 *               left it. A node is named by the id of its first output.
 *     copy      u32 graph | u32 node copied | u32 node it must follow + 1 (0: none) | u32 n_in |
 *               n_in x u32 tensor id it reads
 *     redirect  u32 reading node | u32 input slot | u32 tensor id it reads instead (a copy's)
 *   8 declarations  what the pipeline declared (graph/declare.c): str host init symbol | str host
 *               release symbol ("": none) | u32 n | n x str rollout stage | u32 n | n x u32 ref of
 *               a rollout tensor | u32 ref of the shared-prompt tokens | i64 shared prompt length
 *               | i64 group | u32 n | n x (str dump name | u32 ref) | str why the plan trains only
 *               on rollout files ("": it makes its own) | u8 numerics (0: the backend's fastest
 *               kernels, 1: batch-invariant ones, dfg_declare_batch_invariant) | u32 ref of the
 *               rollout tokens whose prompt width is declared (0: none) | i64 that width
 *               (dfg_declare_rollout_prompt)
 *
 * Version 1 (dfg 0.1.0 before the compiler) lacked the gradient flag, node flags, scopes and
 * compile options; version 2 lacked the memory budget and no_fuse; version 3 lacked the stages'
 * step ranges; version 4 lacked the plan section; version 5 stored attributes raw; version 6
 * lacked the entropy ops; version 7 lacked nullable metrics and rollouts-only plans; version 8
 * lacked stages that end early, run on a condition or a count of times (dfg_stage_until,
 * dfg_stage_when, dfg_stage_runs); version 9 lacked batch-invariant plans; version 10 lacked the base_model role (LoRA's frozen
 * base weights) and NF4 dequantisation; version 11 lacked remat's decisions, so every load
 * searched for them again. Their files are refused with a request to
 * re-run dfg compile rather than read: a lost scope or budget would silently give a different
 * memory plan than the pipeline (or its dfg compile line) asks for, and a plan file is rebuilt
 * from its pipeline in seconds.
 *
 * Sections 1-5 hold the program AS BUILT, before dfg_compile (which removes dead nodes, fuses,
 * recomputes and reorders): saving a compiled program is refused. The plan section holds what
 * compiling it gave, and loading checks the two against each other:
 *   - on its own, before anything is built: ids and counts in range, op ids known, offsets
 *     aligned and every buffer inside the arena, no two buffers that are live at the same step
 *     sharing a byte, every tensor inside its buffer, the bytes of every stored tensor equal to
 *     what its shape and dtype take;
 *   - after the program is rebuilt and compiled with dfg_plan_options(info) (dfg_plan_compile:
 *     every pass runs, but remat makes the recorded copies instead of searching for them):
 *     this dfg's schedule and memory plan must equal the file's, node for node and byte for
 *     byte. A file from a dfg whose compiler plans differently is refused (re-run dfg compile)
 *     instead of running with a memory plan other than the one dfg compile and dfg inspect
 *     reported.
 *
 * Rebuilding walks tensor ids in order: a persistent tensor is created by its constructor, and
 * the first output of a node adds that node (the next one of its graph), whose outputs must get
 * exactly the recorded ids, dtypes and shapes. Op ids are checked against the recorded op names,
 * so a dfg whose op table changed refuses old plans instead of misreading them. Attributes are
 * the in-memory struct (little-endian hosts, the layout of this build: sizeof is checked);
 * changing dfg_attrs' layout requires a new format version. */
#ifndef DFG_PLANFILE_H
#define DFG_PLANFILE_H

#include <stddef.h>
#include <stdint.h>

#include "../../passes/dfg_passes.h"

#define DFG_PLAN_MAGIC "DFGPLAN"   /* plus its NUL: 8 bytes */
#define DFG_PLAN_VERSION 13u

typedef enum {
    DFG_PLAN_SEC_INFO = 1,
    DFG_PLAN_SEC_SETTINGS,
    DFG_PLAN_SEC_TENSORS,
    DFG_PLAN_SEC_GRAPHS,
    DFG_PLAN_SEC_STAGES,
    DFG_PLAN_SEC_HOSTLIB,
    DFG_PLAN_SEC_PLAN,
    DFG_PLAN_SEC_DECLARATIONS,
    DFG_PLAN_SEC_END /* one past the last kind */
} dfg_plan_section;

/* The schedule and memory plan a plan file records (section 7); planfile_internal.h. */
typedef struct dfg_plan_record dfg_plan_record;

/* What a plan records besides the program. */
typedef struct {
    dfg_target target;
    char source[512];      /* the pipeline file given to dfg compile */
    char dfg_version[32];  /* load: the writer's DFG_VERSION_STRING (save writes this build's) */
    /* dfg_options that change the plan, besides the target (verify_each only checks) */
    size_t align;          /* 0: the target's */
    bool no_reuse, keep_order, no_fuse;
    int64_t memory_budget; /* bytes the arena may take, remat recomputing to fit (0: no limit) */
    bool memory_min;       /* the smallest arena remat reaches (dfg fit --min); the budget is then ignored */
    /* The pipeline's shared object (host-stage functions), or NULL. Save only reads it; load
     * returns a malloc'd copy that dfg_plan_info_free releases. */
    void *host_lib;
    size_t host_lib_size;
    /* The recorded schedule and memory plan. Save: NULL makes the writer compile a copy of the
     * program with dfg_plan_options(info) and record that (a program that does not compile is
     * not saved); non-NULL (from a load) is written as it is. Load: the file's, checked on its
     * own; dfg_plan_info_free releases it. */
    dfg_plan_record *plan;
    /* Save with plan NULL: where the compile of the copy adds its pass times (dfg compile
     * --time-passes), or NULL. Not written to the file. */
    dfg_pass_times *times;
} dfg_plan_info;

/* Writes p and info to path atomically (temp file in the same directory, fsync, rename).
 * Refuses a program that has an error, is compiled or (info->plan NULL) does not compile; a
 * compile error is returned with its status and the program's message in err. On failure
 * writes one line to err. */
DFG_API dfg_status dfg_plan_save(const dfg_program *p, const dfg_plan_info *info, const char *path, char *err, size_t len);
/* The same bytes in memory: *out is malloc'd (free it), *out_len its size. */
DFG_API dfg_status dfg_plan_serialize(const dfg_program *p, const dfg_plan_info *info, void **out, size_t *out_len, char *err,
                              size_t len);

/* Reads and rebuilds a plan. On success *out is a new program (dfg_program_free it) and *info
 * is filled (dfg_plan_info_free it; info may be NULL). On failure *out is NULL, info is zeroed
 * and err holds one line: "P.dfg: <what is wrong>". */
DFG_API dfg_status dfg_plan_load(const char *path, dfg_program **out, dfg_plan_info *info, char *err, size_t len);
/* As dfg_plan_load on n bytes in memory (tests, fuzzing); label names them in messages. */
DFG_API dfg_status dfg_plan_parse(const void *bytes, size_t n, const char *label, dfg_program **out, dfg_plan_info *info,
                          char *err, size_t len);
DFG_API void dfg_plan_info_free(dfg_plan_info *info);
/* The options to compile a loaded program with: the defaults for info's target with the
 * recorded alignment, flags and memory budget. */
DFG_API dfg_options dfg_plan_options(const dfg_plan_info *info);
/* Compiles a loaded program with dfg_plan_options(info) and checks the result against the
 * file's plan (dfg_plan_check). On failure err holds one line ("<label>: ..."): the compile
 * error with compile's status, or the first difference from the file's plan (DFG_ERR_FORMAT). */
DFG_API dfg_status dfg_plan_compile(dfg_program *p, const dfg_plan_info *info, const char *label, char *err, size_t len);
/* DFG_OK when the compiled program's schedule and memory plan equal info's record. */
DFG_API dfg_status dfg_plan_check(const dfg_program *compiled, const dfg_plan_info *info, const char *label, char *err,
                          size_t len);

/* Helpers shared by the writer, the reader and the tests. */
DFG_API uint32_t dfg_plan_crc32(const void *data, size_t n);
DFG_API const char *dfg_plan_section_name(uint32_t kind); /* "tensors", ...; "?" when unknown */

#endif
