/* task_tensor.h - shared by the examples' host-stage helpers (tasks.c, grpo_data.c): a program
 * tensor by name, checked. */
#ifndef DFG_TASK_TENSOR_H
#define DFG_TASK_TENSOR_H

#include <stdbool.h>
#include <stdint.h>

#include "dfg_runtime.h"

/* Looks up `name` and checks its dtype, rank and the dims given (d[i] < 0: any, named by
 * letters[i] in the message). An optional tensor that is absent gives DFG_OK and out->data
 * NULL; everything else that does not fit fails the stage naming the tensor. */
dfg_status dfg_task_tensor(dfg_host_ctx *ctx, const char *name, dfg_dtype dt, int rank, const int64_t *d,
                          const char *letters, bool optional, dfg_buffer *out);

#endif
