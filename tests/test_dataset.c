/* test_dataset.c - prompt datasets (runtime/host/dataset.c, dfg_dataset.h): JSONL files of prompts as
 * token ids. Good files give exactly their ids, their other fields as compact JSON text and their
 * line numbers (blank lines counted, CRLF endings, a byte order mark), read from a file and from
 * a buffer alike; every refused file gives its status and exactly one line naming the file and
 * the line; the epoch order visits every row once per epoch, depends only on (seed, epoch) by the
 * documented recipe and is the identity without shuffling; the hash follows the rows' content. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dfg.h"
#include "runtime/host/dataset.h"
#include "testutil.h"

#define LABEL "data.jsonl"

static char err[1024];

static dfg_dataset *from_text(const char *text, size_t n, int64_t vocab) {
    dfg_dataset *ds = (dfg_dataset *)1;
    dfg_status s = dfg_dataset_from_text(text, n, LABEL, vocab, &ds, err, sizeof(err));
    CHECK(s == DFG_OK && ds, "refused: %s (%s)", err, dfg_status_name(s));
    CHECK(!err[0], "a message after success: %s", err);
    return s == DFG_OK ? ds : NULL;
}

static void check_prompt(const dfg_dataset *ds, int64_t row, const int32_t *want, int64_t n, const char *fields,
                         int64_t line) {
    int64_t len = -1;
    const int32_t *ids = dfg_dataset_prompt(ds, row, &len);
    CHECK(ids && len == n, "row %lld: %lld ids, want %lld", (long long)row, (long long)len, (long long)n);
    for (int64_t i = 0; ids && len == n && i < n; i++)
        CHECK(ids[i] == want[i], "row %lld id %lld: %d, want %d", (long long)row, (long long)i, ids[i], want[i]);
    const char *f = dfg_dataset_fields(ds, row);
    CHECK(f && !strcmp(f, fields), "row %lld fields: %s, want %s", (long long)row, f ? f : "NULL", fields);
    CHECK(dfg_dataset_line(ds, row) == line, "row %lld: line %lld, want %lld", (long long)row,
          (long long)dfg_dataset_line(ds, row), (long long)line);
}

/* ---------------------------------------------------------------- good files */

/* rows on lines 1, 4 (CRLF) and 5 (no final newline); lines 2 and 3 blank */
static const char good[] = "{\"prompt_ids\": [5, 9, 3, 14], \"answer\": \"395\", \"id\": 17}\n"
                           "\n"
                           "  \t\r\n"
                           "{\"id\":2,\"prompt_ids\":[1]}\r\n"
                           "{\"prompt_ids\":[7,8]}";

static void check_good(const dfg_dataset *ds, const char *how) {
    if (!ds) return;
    CHECK(dfg_dataset_rows(ds) == 3, "%s: %lld rows", how, (long long)dfg_dataset_rows(ds));
    CHECK(dfg_dataset_max_prompt_len(ds) == 4, "%s: max prompt %lld", how, (long long)dfg_dataset_max_prompt_len(ds));
    check_prompt(ds, 0, (const int32_t[]){5, 9, 3, 14}, 4, "{\"answer\":\"395\",\"id\":17}", 1);
    check_prompt(ds, 1, (const int32_t[]){1}, 1, "{\"id\":2}", 4);
    check_prompt(ds, 2, (const int32_t[]){7, 8}, 2, "{}", 5);
}

static void test_good_files(void) {
    dfg_dataset *a = from_text(good, strlen(good), 15);
    check_good(a, "text");
    char *path = dfg_test_tmp_path("good.jsonl");
    dfg_test_write_file(path, good, strlen(good));
    dfg_dataset *b = NULL;
    dfg_status s = dfg_dataset_open(path, 15, &b, err, sizeof(err));
    CHECK(s == DFG_OK && b, "open: %s", err);
    check_good(b, "file");
    CHECK(dfg_dataset_hash(a) == dfg_dataset_hash(b), "the file and the text hash differently");

    /* outside the rows */
    int64_t len = 7;
    CHECK(!dfg_dataset_prompt(a, -1, &len) && len == 0, "row -1 has a prompt");
    CHECK(!dfg_dataset_prompt(a, 3, NULL), "row 3 has a prompt");
    CHECK(!dfg_dataset_fields(a, 3) && !dfg_dataset_fields(a, -1), "a row outside has fields");
    CHECK(dfg_dataset_line(a, 3) == -1 && dfg_dataset_line(a, -1) == -1, "a row outside has a line");
    CHECK(dfg_dataset_rows(NULL) == 0 && dfg_dataset_max_prompt_len(NULL) == 0 && dfg_dataset_hash(NULL) == 0,
          "NULL has content");
    dfg_dataset_free(a);
    dfg_dataset_free(b);
    dfg_dataset_free(NULL);

    /* integral numbers are ids; the last id of the vocabulary; a byte order mark; nested fields
     * printed compact, control characters escaped, UTF-8 kept */
    const char more[] = "\xEF\xBB\xBF{ \"prompt_ids\" : [ 1.0 , 1e2, 0, 99, -0 ] ,\n"
                        "\"meta\": {\"a\": [1, 2.5, {\"b\": null}], \"s\": \"\xC3\xA9\\n\\u00e9\", \"t\": true}}\n";
    /* (the first line is not a whole object: the newline ends it) */
    dfg_dataset *c = NULL;
    s = dfg_dataset_from_text(more, strlen(more), LABEL, 100, &c, err, sizeof(err));
    CHECK(s == DFG_ERR_FORMAT && strstr(err, LABEL ":1: not valid JSON"), "a split object: %s", err);
    const char more1[] = "\xEF\xBB\xBF{ \"prompt_ids\" : [ 1.0 , 1e2, 0, 99, -0 ] , "
                         "\"meta\": {\"a\": [1, 2.5, {\"b\": null}], \"s\": \"\xC3\xA9\\n\\u00e9\", \"t\": true}}\n";
    c = from_text(more1, strlen(more1), 101);
    if (c) {
        check_prompt(c, 0, (const int32_t[]){1, 100, 0, 99, 0}, 5,
                     "{\"meta\":{\"a\":[1,2.5,{\"b\":null}],\"s\":\"\xC3\xA9\\n\xC3\xA9\",\"t\":true}}", 1);
        dfg_dataset_free(c);
    }

    /* a byte order mark alone: line 1 is blank */
    c = from_text("\xEF\xBB\xBF \r\n{\"prompt_ids\": [3]}", 25, 0);
    CHECK(dfg_dataset_rows(c) == 1 && dfg_dataset_line(c, 0) == 2, "a BOM line: %lld rows", (long long)dfg_dataset_rows(c));
    dfg_dataset_free(c);

    /* a long line through the file reader: 100k ids */
    size_t n_ids = 100000, cap = n_ids * 8 + 64, at = 0;
    char *big = malloc(cap);
    at += (size_t)snprintf(big + at, cap - at, "{\"x\": 1}\r\n{\"prompt_ids\": [");
    for (size_t i = 0; i < n_ids; i++) at += (size_t)snprintf(big + at, cap - at, i ? ",%zu" : "%zu", i % 50000);
    at += (size_t)snprintf(big + at, cap - at, "], \"n\": 3}\n");
    dfg_test_write_file(path, big, at);
    s = dfg_dataset_open(path, 0, &b, err, sizeof(err));
    char want[512];
    snprintf(want, sizeof(want), "%s:1: no \"prompt_ids\" (each line is one object with it: the prompt's token ids)", path);
    CHECK(s == DFG_ERR_FORMAT && !b && !strcmp(err, want), "got '%s', want '%s'", err, want);
    memset(big, ' ', 8); /* the first line blank now ("        \r"): the row is on line 2 */
    dfg_test_write_file(path, big, at);
    s = dfg_dataset_open(path, 50000, &b, err, sizeof(err));
    CHECK(s == DFG_OK && b, "100k ids: %s", err);
    if (b) {
        int64_t n = 0;
        const int32_t *ids = dfg_dataset_prompt(b, 0, &n);
        CHECK(n == (int64_t)n_ids && dfg_dataset_max_prompt_len(b) == (int64_t)n_ids, "%lld ids", (long long)n);
        bool same = ids != NULL;
        for (size_t i = 0; same && i < n_ids; i++) same = ids[i] == (int32_t)(i % 50000);
        CHECK(same, "the 100k ids differ");
        CHECK(!strcmp(dfg_dataset_fields(b, 0), "{\"n\":3}") && dfg_dataset_line(b, 0) == 2, "fields %s line %lld",
              dfg_dataset_fields(b, 0), (long long)dfg_dataset_line(b, 0));
        dfg_dataset_free(b);
    }
    free(big);
    unlink(path);
}

/* ---------------------------------------------------------------- refusals */

/* text is refused with status `want` and a message containing `part` (the whole message when
 * exact), one line starting with the label. */
static void refused(const char *text, size_t n, int64_t vocab, dfg_status want, const char *part, bool exact) {
    dfg_dataset *ds = (dfg_dataset *)1;
    dfg_status s = dfg_dataset_from_text(text, n, LABEL, vocab, &ds, err, sizeof(err));
    CHECK(s == want, "'%s': status %s, want %s (%s)", part, dfg_status_name(s), dfg_status_name(want), err);
    CHECK(ds == NULL, "'%s': *out not NULL after a refusal", part);
    CHECK(exact ? !strcmp(err, part) : strstr(err, part) != NULL, "got '%s', want '%s'", err, part);
    CHECK(!strncmp(err, LABEL ":", strlen(LABEL ":")) && !strchr(err, '\n'), "not one line naming the file: '%s'", err);
    if (s == DFG_OK) dfg_dataset_free(ds);
}
#define REFUSED(text, vocab, part) refused(text, sizeof(text) - 1, vocab, DFG_ERR_FORMAT, part, false)
#define REFUSED_EXACTLY(text, vocab, msg) refused(text, sizeof(text) - 1, vocab, DFG_ERR_FORMAT, msg, true)

static void test_refusals(void) {
    /* the contract's examples, exactly */
    char text[2048] = "";
    for (int i = 1; i <= 11; i++) strcat(text, i % 3 ? "{\"prompt_ids\": [1, 2]}\n" : "\n");
    strcat(text, "{\"prompt_ids\": [0, 1, 2, 50257, 3]}\n");
    refused(text, strlen(text), 50257, DFG_ERR_FORMAT,
            LABEL ":12: prompt_ids[3] is 50257, outside the vocabulary (0 .. 50256)", true);
    REFUSED_EXACTLY("{\"prompt_ids\": [1]}\n\n[1, 2]\n", 0,
                    LABEL ":3: not a JSON object (a list; each line is one object with \"prompt_ids\")");
    REFUSED_EXACTLY("{\"prompt_ids\": [1]}\n\n\n\n\n\n{\"prompt\": [1], \"ids\": 2}\n", 0,
                    LABEL ":7: no \"prompt_ids\" (each line is one object with it: the prompt's token ids)");
    /* text and TRL's conversations are for tools/prepare_prompts.py: the line says so, whole */
    REFUSED_EXACTLY("{\"prompt\": [{\"role\": \"user\", \"content\": \"What is 2 + 2? Think step by step, then answer "
                    "with a single number and nothing else.\"}], \"answer\": \"4\"}\n", 0,
                    LABEL ":1: no \"prompt_ids\", but a \"prompt\" that is a conversation (a list of messages): dfg reads "
                          "token ids; tools/prepare_prompts.py tokenizes it with the tokenizer's chat template");
    REFUSED_EXACTLY("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}", 0,
                    LABEL ":1: no \"prompt_ids\", but a \"messages\" that is a conversation (a list of messages): dfg "
                          "reads token ids; tools/prepare_prompts.py tokenizes it with the tokenizer's chat template");
    REFUSED_EXACTLY("{\"prompt\": \"Reverse 123\"}", 0,
                    LABEL ":1: no \"prompt_ids\", but a \"prompt\" that is text: dfg reads token ids; "
                          "tools/prepare_prompts.py tokenizes it");

    /* other values than objects */
    REFUSED("\"text\"\n", 0, LABEL ":1: not a JSON object (\"text\";");
    REFUSED("17\n", 0, LABEL ":1: not a JSON object (17;");
    REFUSED("null", 0, LABEL ":1: not a JSON object (null;");
    /* malformed JSON */
    REFUSED("{\"prompt_ids\": [1,}\n", 0, LABEL ":1: not valid JSON (error near byte ");
    REFUSED_EXACTLY("{\"prompt_ids\": [1]} x\n", 0,
                    LABEL ":1: not valid JSON (text after the end of the value, at byte 20)");
    REFUSED("{\"prompt_ids\": [1]}{\"prompt_ids\": [2]}\n", 0, LABEL ":1: not valid JSON (text after the end");
    REFUSED("{\"prompt_ids\": [1]}\n{\"prompt_ids\": [2]\n", 0, LABEL ":2: not valid JSON");
    /* prompt_ids itself */
    REFUSED_EXACTLY("{\"prompt_ids\": [1], \"a\": 1, \"prompt_ids\": [2]}", 0,
                    LABEL ":1: \"prompt_ids\" appears 2 times (which one counts is ambiguous)");
    REFUSED("{\"prompt_\\u0069ds\": [1], \"prompt_ids\": [2]}", 0, "\"prompt_ids\" appears 2 times"); /* the same key */
    REFUSED_EXACTLY("{\"prompt_ids\": []}", 0, LABEL ":1: \"prompt_ids\" is empty (a prompt needs a token)");
    REFUSED_EXACTLY("{\"prompt_ids\": \"1 2\"}", 0, LABEL ":1: \"prompt_ids\" must be a list of token ids, got \"1 2\"");
    REFUSED("{\"prompt_ids\": {\"0\": 1}}", 0, "must be a list of token ids, got an object");
    REFUSED("{\"prompt_ids\": null}", 0, "must be a list of token ids, got null");
    REFUSED("{\"PROMPT_IDS\": [1]}", 0, LABEL ":1: no \"prompt_ids\" (each line");
    /* the ids */
    REFUSED_EXACTLY("{\"prompt_ids\": [0, 1.5]}", 0, LABEL ":1: prompt_ids[1] is 1.5, not an integer token id");
    REFUSED_EXACTLY("{\"prompt_ids\": [\"5\"]}", 0, LABEL ":1: prompt_ids[0] is \"5\", not an integer token id");
    REFUSED("{\"prompt_ids\": [1, [2]]}", 0, "prompt_ids[1] is a list, not an integer token id");
    REFUSED("{\"prompt_ids\": [true]}", 0, "prompt_ids[0] is true, not an integer token id");
    REFUSED("{\"prompt_ids\": [null]}", 0, "prompt_ids[0] is null, not an integer token id");
    REFUSED("{\"prompt_ids\": [0.1]}", 0, "prompt_ids[0] is 0.1, not an integer token id");
    REFUSED_EXACTLY("{\"prompt_ids\": [-1]}", 100, LABEL ":1: prompt_ids[0] is -1, outside the vocabulary (0 .. 99)");
    REFUSED_EXACTLY("{\"prompt_ids\": [100]}", 100, LABEL ":1: prompt_ids[0] is 100, outside the vocabulary (0 .. 99)");
    REFUSED_EXACTLY("{\"prompt_ids\": [-1]}", 0,
                    LABEL ":1: prompt_ids[0] is -1, outside the token ids of int32 (0 .. 2147483647)");
    REFUSED("{\"prompt_ids\": [2147483648]}", 0, "prompt_ids[0] is 2147483648, outside the token ids of int32");
    REFUSED("{\"prompt_ids\": [1e999]}", 0, "prompt_ids[0] is inf, outside the token ids of int32");
    REFUSED("{\"prompt_ids\": [1e20]}", 0, "prompt_ids[0] is 1e+20, outside");
    /* bytes that are no JSON text */
    refused("{\"p\0rompt_ids\": [1]}", 20, 0, DFG_ERR_FORMAT, LABEL ":1: holds a NUL byte at byte 3", false);
    refused("{\"prompt_ids\": [1]}\n{\"prompt_ids\": [1], \"a\": \"x\0\"}", 49, 0, DFG_ERR_FORMAT,
            LABEL ":2: holds a NUL byte", false);
    REFUSED("{\"prompt_ids\": [1], \"a\": \"x\\u0000y\"}", 0, LABEL ":1: a string holds \\u0000 at byte 27");
    REFUSED_EXACTLY("{\"prompt_ids\": [1], \"a\": \"\xff\"}", 0, LABEL ":1: not UTF-8 (byte 26 is 0xff)");
    REFUSED("{\"prompt_ids\": [1], \"a\": \"\xc0\x80\"}", 0, "not UTF-8 (byte 26 is 0xc0)");     /* overlong NUL */
    REFUSED("{\"prompt_ids\": [1], \"a\": \"\xe0\x80\xaf\"}", 0, "not UTF-8 (a bad sequence at byte 26)"); /* overlong */
    REFUSED("{\"prompt_ids\": [1], \"a\": \"\xed\xa0\x80\"}", 0, "not UTF-8 (a bad sequence at byte 26)"); /* surrogate */
    REFUSED("{\"prompt_ids\": [1], \"a\": \"\xf4\x90\x80\x80\"}", 0, "not UTF-8 (a bad sequence");       /* > U+10FFFF */
    REFUSED("{\"prompt_ids\": [1], \"a\": \"\xc3\"}", 0, "not UTF-8 (a bad sequence at byte 26)");     /* cut short */
    REFUSED("{\"prompt_ids\": [1]} \xe2\x82", 0, "not UTF-8 (a bad sequence at byte 20)");              /* at the end */
    REFUSED_EXACTLY("{\"prompt_ids\":\x01[1]}", 0, LABEL ":1: holds the control byte 0x01 at byte 14");
    REFUSED("{\"prompt_ids\": [1], \"a\": \"\x1b[31m\"}", 0, "holds the control byte 0x1b at byte 26");
    REFUSED("{\"prompt_ids\": [1]}\n\f\n", 0, LABEL ":2: holds the control byte 0x0c at byte 0");
    /* no rows */
    refused("", 0, 0, DFG_ERR_FORMAT, LABEL ": no rows (the file is empty)", true);
    REFUSED_EXACTLY("\n \r\n\t\n", 0, LABEL ": no rows (all its 3 lines are blank)");
    REFUSED_EXACTLY(" ", 0, LABEL ": no rows (its 1 line is blank)");
    /* a line of more JSON values than a line may hold (the object, its list and k ids: k + 2),
     * refused before cJSON builds them; one value fewer is read */
    size_t max = DFG_DATASET_MAX_LINE_VALUES, cap = 2 * max + 32;
    char *many = malloc(cap), want[128];
    for (size_t k = max - 1; k >= max - 2; k--) {
        size_t at = (size_t)snprintf(many, cap, "{\"prompt_ids\": [0");
        for (size_t i = 1; i < k; i++) many[at++] = ',', many[at++] = '1';
        at += (size_t)snprintf(many + at, cap - at, "]}");
        if (k == max - 1) {
            snprintf(want, sizeof(want), LABEL ":1: holds more than %zu JSON values", max);
            refused(many, at, 0, DFG_ERR_FORMAT, want, true);
        } else {
            dfg_dataset *ds = from_text(many, at, 2);
            CHECK(dfg_dataset_rows(ds) == 1 && dfg_dataset_max_prompt_len(ds) == (int64_t)k, "%lld ids",
                  (long long)dfg_dataset_max_prompt_len(ds));
            dfg_dataset_free(ds);
        }
    }
    free(many);

    /* arguments */
    dfg_dataset *ds = (dfg_dataset *)1;
    CHECK(dfg_dataset_from_text("{}", 2, LABEL, -1, &ds, err, sizeof(err)) == DFG_ERR_ARG && !ds &&
              strstr(err, LABEL ": vocab_size is -1"), "vocab -1: %s", err);
    CHECK(dfg_dataset_from_text("{}", 2, LABEL, 0, NULL, err, sizeof(err)) == DFG_ERR_ARG && strstr(err, "out is NULL"),
          "out NULL: %s", err);
    CHECK(dfg_dataset_from_text(NULL, 2, LABEL, 0, &ds, NULL, 0) == DFG_ERR_ARG && !ds, "text NULL");
    CHECK(dfg_dataset_open(NULL, 0, &ds, err, sizeof(err)) == DFG_ERR_ARG && strstr(err, "the path is empty"), "%s", err);
    CHECK(dfg_dataset_open("", 0, &ds, err, sizeof(err)) == DFG_ERR_ARG, "an empty path");
    CHECK(dfg_dataset_open("x.jsonl", -5, &ds, err, sizeof(err)) == DFG_ERR_ARG && !ds, "vocab -5");
}

static void test_file_refusals(void) {
    dfg_dataset *ds = (dfg_dataset *)1;
    char want[600];
    char *missing = dfg_test_tmp_path("missing.jsonl");
    CHECK(dfg_dataset_open(missing, 0, &ds, err, sizeof(err)) == DFG_ERR_IO && !ds, "missing: %s", err);
    snprintf(want, sizeof(want), "%s: cannot open: %s", missing, strerror(ENOENT));
    CHECK(!strcmp(err, want), "got '%s', want '%s'", err, want);
    ds = (dfg_dataset *)1;
    CHECK(dfg_dataset_open(dfg_test_tmpdir(), 0, &ds, err, sizeof(err)) == DFG_ERR_IO && !ds, "a directory");
    snprintf(want, sizeof(want), "%s: not a regular file", dfg_test_tmpdir());
    CHECK(!strcmp(err, want), "got '%s', want '%s'", err, want);

    /* a refusal in a file names its line: CRLF and blank lines counted */
    char *path = dfg_test_tmp_path("bad.jsonl");
    const char bad[] = "{\"prompt_ids\": [1]}\r\n\r\n\r\n{\"prompt_ids\": [1], \"prompt_ids\": [2]}\r\n";
    dfg_test_write_file(path, bad, sizeof(bad) - 1);
    CHECK(dfg_dataset_open(path, 0, &ds, err, sizeof(err)) == DFG_ERR_FORMAT && !ds, "dup in a file");
    snprintf(want, sizeof(want), "%s:4: \"prompt_ids\" appears 2 times (which one counts is ambiguous)", path);
    CHECK(!strcmp(err, want), "got '%s', want '%s'", err, want);
    /* a NUL byte in a file (getline keeps it) */
    dfg_test_write_file(path, "{\"prompt_ids\": [1]}\n{\"prompt_ids\": [1\0]}\n", 42);
    CHECK(dfg_dataset_open(path, 0, &ds, err, sizeof(err)) == DFG_ERR_FORMAT &&
              strstr(err, ":2: holds a NUL byte at byte 17"),
          "NUL in a file: %s", err);
    dfg_test_write_file(path, "\n\n", 2);
    CHECK(dfg_dataset_open(path, 0, &ds, err, sizeof(err)) == DFG_ERR_FORMAT &&
              strstr(err, ": no rows (all its 2 lines are blank)"),
          "blank file: %s", err);

    /* over 4 GiB: refused from its size before a byte is read (a sparse file) */
    int fd = open(path, O_WRONLY | O_TRUNC);
    bool sparse = fd >= 0 && ftruncate(fd, (off_t)DFG_DATASET_MAX_BYTES + 1) == 0;
    if (fd >= 0) close(fd);
    if (sparse) {
        CHECK(dfg_dataset_open(path, 0, &ds, err, sizeof(err)) == DFG_ERR_FORMAT && !ds, "4 GiB + 1: %s", err);
        snprintf(want, sizeof(want), "%s: 4294967297 bytes, more than the 4294967296-byte limit of a prompt dataset", path);
        CHECK(!strcmp(err, want), "got '%s', want '%s'", err, want);
    } else {
        printf("test_dataset: no sparse 4 GiB file here (%s); the size limit is not checked\n", strerror(errno));
    }
    unlink(path);
}

/* ---------------------------------------------------------------- the order of an epoch */

/* A dataset of n one-id rows (row i holds id i). */
static dfg_dataset *rows_of(int n) {
    size_t cap = (size_t)n * 32 + 1, at = 0;
    char *t = malloc(cap);
    for (int i = 0; i < n; i++) at += (size_t)snprintf(t + at, cap - at, "{\"prompt_ids\": [%d]}\n", i);
    dfg_dataset *ds = from_text(t, at, 0);
    free(t);
    return ds;
}

/* The documented recipe, written out: Fisher-Yates from the state seed ^ dfg_host_rand(&epoch),
 * j uniform in 0 .. i by rejecting draws below 2^64 mod (i + 1). */
static void expected_order(int n, uint64_t seed, int64_t epoch, int64_t *p) {
    uint64_t e = (uint64_t)epoch, st = seed ^ dfg_host_rand(&e);
    for (int i = 0; i < n; i++) p[i] = i;
    for (int i = n - 1; i > 0; i--) {
        uint64_t bound = (uint64_t)i + 1, lim = (UINT64_MAX % bound + 1) % bound, x;
        do x = dfg_host_rand(&st);
        while (x < lim);
        int64_t j = (int64_t)(x % bound), t = p[i];
        p[i] = p[j], p[j] = t;
    }
}

static void test_order(void) {
    enum { N = 37 };
    dfg_dataset *ds = rows_of(N), *again = rows_of(N);
    if (!ds || !again) return;
    int64_t first[3][N], p[N];
    for (int seed = 1; seed <= 2; seed++)
        for (int64_t epoch = 0; epoch < 5; epoch++) {
            int seen[N] = {0};
            for (int k = 0; k < N; k++) {
                p[k] = dfg_dataset_order(ds, (uint64_t)seed, epoch, k, true);
                CHECK(p[k] >= 0 && p[k] < N, "seed %d epoch %lld draw %d: row %lld", seed, (long long)epoch, k,
                      (long long)p[k]);
                if (p[k] >= 0 && p[k] < N) seen[p[k]]++;
            }
            for (int r = 0; r < N; r++)
                CHECK(seen[r] == 1, "seed %d epoch %lld: row %d drawn %d times", seed, (long long)epoch, r, seen[r]);
            int64_t want[N];
            expected_order(N, (uint64_t)seed, epoch, want);
            CHECK(!memcmp(p, want, sizeof(p)), "seed %d epoch %lld: not the documented recipe's order", seed,
                  (long long)epoch);
            if (seed == 1 && epoch < 2) memcpy(first[epoch], p, sizeof(p));
            if (seed == 2 && epoch == 0) memcpy(first[2], p, sizeof(p));
        }
    CHECK(memcmp(first[0], first[1], sizeof(first[0])), "epochs 0 and 1 give the same order");
    CHECK(memcmp(first[0], first[2], sizeof(first[0])), "seeds 1 and 2 give the same order");
    int fixed = 0;
    for (int k = 0; k < N; k++) fixed += first[0][k] == k;
    CHECK(fixed < 8, "the order of epoch 0 leaves %d of %d rows in place", fixed, N);
    /* the same inputs, the same order: after other epochs, interleaved, and in another dataset */
    for (int k = 0; k < N; k++) {
        CHECK(dfg_dataset_order(ds, 1, 0, k, true) == first[0][k], "epoch 0 draw %d changed", k);
        CHECK(dfg_dataset_order(ds, 1, 1, k, true) == first[1][k], "epoch 1 draw %d changed (interleaved)", k);
        CHECK(dfg_dataset_order(again, 1, 0, k, true) == first[0][k], "another dataset: draw %d differs", k);
    }
    /* without shuffle: file order; outside: -1 */
    for (int k = 0; k < N; k++) CHECK(dfg_dataset_order(ds, 1, 3, k, false) == k, "no shuffle: draw %d", k);
    CHECK(dfg_dataset_order(ds, 1, 0, -1, true) == -1 && dfg_dataset_order(ds, 1, 0, N, true) == -1 &&
              dfg_dataset_order(ds, 1, 0, N, false) == -1 && dfg_dataset_order(ds, 1, -1, 0, true) == -1 &&
              dfg_dataset_order(NULL, 1, 0, 0, true) == -1, "a draw outside is not -1");
    dfg_dataset_free(ds);
    dfg_dataset_free(again);

    /* one row: always row 0 */
    ds = rows_of(1);
    for (int64_t e = 0; ds && e < 4; e++)
        CHECK(dfg_dataset_order(ds, 9, e, 0, true) == 0, "one row, epoch %lld", (long long)e);
    dfg_dataset_free(ds);

    /* every order of 4 rows about equally often over 2400 epochs (100 expected each; a biased
     * draw or a stuck generator leaves some far off) */
    ds = rows_of(4);
    int count[4 * 4 * 4 * 4] = {0};
    for (int64_t e = 0; ds && e < 2400; e++) {
        int code = 0;
        for (int k = 0; k < 4; k++) code = code * 4 + (int)dfg_dataset_order(ds, 12345, e, k, true);
        count[code]++;
    }
    int perms = 0;
    for (int c = 0; c < 256; c++)
        if (count[c]) {
            perms++;
            CHECK(count[c] >= 55 && count[c] <= 145, "order code %d drawn %d times of 2400 (expected 100)", c, count[c]);
        }
    CHECK(perms == 24, "%d of the 24 orders of 4 rows drawn", perms);
    dfg_dataset_free(ds);
}

/* ---------------------------------------------------------------- the hash */

static uint64_t hash_of(const char *text) {
    dfg_dataset *ds = from_text(text, strlen(text), 0);
    uint64_t h = dfg_dataset_hash(ds);
    dfg_dataset_free(ds);
    return h;
}

static uint64_t fnv_le(uint64_t h, uint64_t x, int k) {
    for (int i = 0; i < k; i++) h = (h ^ (uint8_t)(x >> (8 * i))) * 0x100000001b3ull;
    return h;
}

static void test_hash(void) {
    const char *base = "{\"prompt_ids\": [1, 2], \"answer\": \"3\"}\n{\"prompt_ids\": [4]}\n";
    uint64_t h = hash_of(base);
    /* the documented serialisation: per row its id count (8 bytes LE), ids (4 bytes LE), the
     * field text's length (8 bytes LE) and bytes */
    uint64_t want = 0xcbf29ce484222325ull;
    const char *f0 = "{\"answer\":\"3\"}";
    want = fnv_le(want, 2, 8), want = fnv_le(want, 1, 4), want = fnv_le(want, 2, 4), want = fnv_le(want, strlen(f0), 8);
    for (const char *c = f0; *c; c++) want = fnv_le(want, (uint8_t)*c, 1);
    want = fnv_le(want, 1, 8), want = fnv_le(want, 4, 4), want = fnv_le(want, 2, 8);
    want = fnv_le(want, '{', 1), want = fnv_le(want, '}', 1);
    CHECK(h == want, "hash %016llx, want %016llx", (unsigned long long)h, (unsigned long long)want);
    /* the same content: other white space, blank lines, CRLF, 2.0 for 2 */
    CHECK(hash_of("\n{ \"answer\" : \"3\",\"prompt_ids\":[1,2.0]}\r\n\n{\"prompt_ids\":[4]}") == h,
          "the same rows hash differently");
    /* another content */
    const char *other[] = {
        "{\"prompt_ids\": [1, 2], \"answer\": \"4\"}\n{\"prompt_ids\": [4]}\n", /* a field's value */
        "{\"prompt_ids\": [1, 2], \"answer\": \"3\"}\n{\"prompt_ids\": [5]}\n", /* an id */
        "{\"prompt_ids\": [2, 1], \"answer\": \"3\"}\n{\"prompt_ids\": [4]}\n", /* the ids' order */
        "{\"prompt_ids\": [1], \"answer\": \"3\"}\n{\"prompt_ids\": [2, 4]}\n", /* an id moved to the next row */
        "{\"prompt_ids\": [4]}\n{\"prompt_ids\": [1, 2], \"answer\": \"3\"}\n", /* the rows' order */
        "{\"prompt_ids\": [1, 2], \"answer\": \"3\"}\n",                        /* a row less */
        "{\"prompt_ids\": [1, 2], \"answer\": \"3\", \"x\": 0}\n{\"prompt_ids\": [4]}\n", /* a field more */
    };
    for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++)
        CHECK(hash_of(other[i]) != h, "change %zu does not change the hash", i);
}

int main(void) {
    dfg_test_init("test_dataset");
    if (!dfg_test_tmpdir_create("dfg_dataset")) return 1;
    test_good_files();
    test_refusals();
    test_file_refusals();
    test_order();
    test_hash();
    dfg_test_tmpdir_remove();
    return dfg_test_finish();
}
