/* fileio.h - dfg's one whole-file reader and one atomic writer, for every file dfg reads whole
 * (config.json, an index, a safetensors file, a prompt dataset, adapter_config.json) and every
 * file it writes (safetensors, config.json, adapter_config.json, README.md, tokenizer copies).
 *
 * Reading is bounded: a file larger than the caller's limit is refused before anything is
 * allocated, and a FIFO or device is refused without being opened for long. Writing is atomic: a
 * temp file ".<name>.XXXXXX" in the target's directory (rename is atomic only within one
 * filesystem), written, fsynced, renamed over the target, then the directory fsynced, so a reader
 * sees the old file or the new one, never a part. Every file dfg writes gets one mode: 0644 less
 * the process's umask (as open(2) and a shell's redirection give). Messages are one line,
 * "<label>: <what>" (label: the path, unless the caller names the file otherwise). */
#ifndef DFG_FILEIO_H
#define DFG_FILEIO_H

#include <stddef.h>

#include "../../graph/dfg_graph.h"

/* The mode every written file gets, before the umask. */
#define DFG_FILE_MODE 0644

/* Reads the whole regular file at path into *text (NUL-terminated after *len bytes; the caller
 * frees it). A file over max bytes is refused before allocating, naming `what` ("... more than
 * the 4194304-byte limit of a config.json"). label (NULL: path) starts the message in err. */
dfg_status dfg_file_read(const char *path, const char *label, size_t max, const char *what, char **text, size_t *len,
                         char *err, size_t err_len);

/* A file being written atomically: begin, write (any number of times), then commit or abort. */
typedef struct {
    int fd;
    char *path, *tmp, *dir;
} dfg_file_out;

dfg_status dfg_file_begin(dfg_file_out *f, const char *path, char *err, size_t err_len);
dfg_status dfg_file_put(dfg_file_out *f, const void *data, size_t n, char *err, size_t err_len);
/* fsync, rename into place, fsync of the directory; on failure the temp file is removed. Frees f. */
dfg_status dfg_file_commit(dfg_file_out *f, char *err, size_t err_len);
void dfg_file_abort(dfg_file_out *f); /* removes the temp file and frees f; safe after a failed begin */

/* The whole of data written to path atomically (begin, put, commit). */
dfg_status dfg_file_write(const char *path, const void *data, size_t n, char *err, size_t err_len);
/* src (a regular file, or a symbolic link to one: a Hugging Face cache links each file to its
 * blob) copied to dst atomically. */
dfg_status dfg_file_copy(const char *src, const char *dst, char *err, size_t err_len);

#endif
