/* cli_run_args.c - dfg run's command line: its usage text and the parsing of its options. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli_run.h"

#define CMD "run"

static void usage(FILE *f) {
    fprintf(f, "usage: dfg run P.dfg [--steps N | --max-steps N] [--weights W.safetensors|DIR] [--adapter DIR]\n"
               "                     [--save OUT.safetensors|DIR/ [--merge]]\n"
               "                     [--seed S] [--threads N] [--every K] [--quiet] [--metrics FILE.jsonl]\n"
               "                     [--checkpoint-dir D] [--save-every K] [--resume D] [--eval-only]\n"
               "                     [--rollouts R.safetensors] [--dump OUT.safetensors] [--emulate-gpu] [--eager]\n"
               "                     [--reward-cmd CMD [--reward-timeout S] | --reward-lib LIB.so]\n"
               "                     [--env-cmd CMD [--env-timeout S]]\n"
               "\n"
               "Runs a plan made by dfg compile: N steps, each running every stage once, and prints\n"
               "the program's metrics after each step.\n"
               "\n"
               "  --steps N      steps to run (default 1; 0 only initialises, loads and saves); with\n"
               "                 --resume, N more steps after the checkpoint's\n"
               "  --max-steps N  run until the step counter reaches N (TRL's max_steps, a total): a run\n"
               "                 resumed at step 30 with --max-steps 50 runs 20; at or past N it runs none\n"
               "  --weights W    load parameters from a safetensors file, or a model directory holding\n"
               "                 model.safetensors or model.safetensors.index.json and its shards (every\n"
               "                 parameter must be there; f32, bf16 or f16, converted to the plan's dtypes)\n"
               "  --save OUT     after the last step (or a step that failed: the last good step's), write\n"
               "                 the parameters: OUT.safetensors is one safetensors file; DIR/ (ending in '/',\n"
               "                 or an existing directory) a Hugging Face model directory that transformers\n"
               "                 loads: config.json and model.safetensors, in shards with\n"
               "                 model.safetensors.index.json above --max-shard-size (5GB); any other name\n"
               "                 is refused\n"
               "LoRA plans (compiled with --set lora_r=R; docs/lora.md):\n"
               "  --weights DIR  the base model (every base weight must be there; load_in_4bit plans\n"
               "                 quantise it to NF4 as it loads); the adapters start as PEFT's do\n"
               "  --adapter DIR  start from a PEFT adapter (adapter_config.json, adapter_model.safetensors):\n"
               "                 its r, alpha and target modules must be the plan's\n"
               "  --save DIR/    write the trained adapter as PEFT's save_pretrained does (what\n"
               "                 PeftModel.from_pretrained loads); --save OUT.safetensors the adapters alone\n"
               "  --merge        with --save DIR/: the base with the adapters merged into its weights, a\n"
               "                 Hugging Face model directory (merge_and_unload)\n"
               "  --resume D     with --weights DIR: a LoRA checkpoint holds the adapters and their\n"
               "                 optimizer state, not the base\n"
               "  --seed S       seed of parameter initialisation, RNG streams and host stages (default:\n"
               "                 the checkpoint's with --resume, else the plan's setting 'seed', else 1234)\n"
               "  --threads N    CPU threads (default: all cores)\n"
               "  --emulate-gpu  run a plan compiled for cuda on the CPU, through the CUDA backend's own\n"
               "                 code: its kernels under the SIMT emulator, GEMMs by an interpreter of\n"
               "                 cuBLAS's semantics, stages captured as graphs and replayed (slow, exact:\n"
               "                 to check a GPU plan before paying for GPU time; one thread unless\n"
               "                 --threads says otherwise)\n"
               "  --eager        cuda plans: launch node by node instead of replaying each stage's graph\n"
               "  --every K      print a line every K steps (and after the last): each metric's mean\n"
               "                 over those K steps; default 1. On a terminal a progress line (step,\n"
               "                 reward, loss, kl, tok/s, arena, ETA) is redrawn on stderr in between\n"
               "  -q, --quiet    print nothing but errors (and the --metrics file)\n"
               "  --metrics F    write one JSON object per step to F (step, every metric, ms, tokens_per_s,\n"
               "                 arena_bytes; stage_runs and stage_ms: how often each stage ran and its\n"
               "                 time); appended to with --resume, else replaced\n"
               "\n"
               "checkpoints (every PARAM and STATE: weights, reference model, optimizer moments, RNG\n"
               "counters, with the step and the seed; written atomically to D/" CLI_CKPT_FILE "):\n"
               "  --checkpoint-dir D  write a checkpoint at the end, on an interrupt, and every K steps\n"
               "                      with --save-every K (created when missing)\n"
               "  --save-every K      checkpoint after every step whose number is a multiple of K\n"
               "  --resume D          continue the run checkpointed in D (a directory, or a checkpoint\n"
               "                      file): loads everything, sets the step counter; D is also the\n"
               "                      checkpoint directory unless --checkpoint-dir says otherwise\n"
               "  Ctrl-C (SIGINT) stops after the current step, writes the checkpoint and exits 130; a\n"
               "  second Ctrl-C stops at once (the last checkpoint stays whole).\n"
               "\n"
               "rewards from outside the plan (plans compiled with reward=external; docs/rewards.md):\n"
               "  --reward-cmd CMD    start CMD (/bin/sh -c) once and score every step's rollout through it\n"
               "                      in JSON lines on its stdin and stdout (tools/reward_server.py runs\n"
               "                      TRL-style Python reward functions that way)\n"
               "  --reward-timeout S  seconds the program may take to answer a step (default 60); past it\n"
               "                      the program is killed and the run stops\n"
               "  --reward-lib LIB    a shared object exporting dfg_reward_funcs and dfg_reward_score\n"
               "                      (runtime/host/dfg_reward.h), called in-process\n"
               "  The program or plugin declares its functions' names first; they must be the plan's\n"
               "  reward_funcs, in order (dfg compile prints them). reward_server.py takes --funcs, else\n"
               "  the module's REWARD_FUNCS, else its functions named reward_*; `reward_server.py --list`\n"
               "  prints the --set reward_funcs=... to compile with and the --reward-cmd to run with (the\n"
               "  Python that ran it). A value of null (Python: None or NaN) means \"does not apply\".\n"
               "  A reward that fails (the program dies, hangs, answers a malformed or short line) stops\n"
               "  the run with one line naming the step, the row and the reason; the step never reached\n"
               "  the optimizer, and with --checkpoint-dir the state before it is saved (--resume redoes it).\n"
               "\n"
               "tools and environments (plans compiled with --set tools=...; docs/agents.md):\n"
               "  --env-cmd CMD       start CMD (/bin/sh -c) once: the program that runs the policy's tool\n"
               "                      calls and answers the tokens that follow them, in JSON lines on its\n"
               "                      stdin and stdout (tools/env_server.py hosts TRL-style tools or an\n"
               "                      environment class; its --list prints the --set tools=... and this line)\n"
               "  --env-timeout S     seconds the program may take to start or to answer a request\n"
               "                      (default 60); past it the program is killed and the run stops\n"
               "  The program's tools must be the plan's setting tools, in order.\n"
               "\n"
               "fixed rollouts (plans whose pipeline allows it, e.g. examples/grpo/grpo.c):\n"
               "  --rollouts R   skip the stages that make rollouts and train on R's tensors (GRPO:\n"
               "                 tokens i32 (N,T), completion_mask f32 (N,T), rewards f32 (N)), every step\n"
               "  --dump OUT     after the last step, write the values the plan names (GRPO: logp,\n"
               "                 ref_logp, advantages, loss, grad_norm) and every parameter to OUT\n"
               "\n"
               "evaluation (a plan compiled with eval_dataset; docs/cli.md): with eval_strategy=steps every\n"
               "eval_steps steps the eval rows are rolled out without training and an \"eval N:\" line (and a\n"
               "--metrics line) gives eval_reward, eval_rewards/NAME/mean, ... as TRL logs them\n"
               "  --eval-only    evaluate once on the loaded state (--weights, --resume) and stop\n"
               "\n"
               "NaN or Inf: gradients that are not finite stop the run in clip_grad_norm, before any\n"
               "update, naming the step and the gradient; with --checkpoint-dir the last good state is\n"
               "saved first (resume it with a lower learning rate, say). A metric that is not finite\n"
               "after a step stops the run the same way (that step's update was applied). Exit code 1.\n"
               "\n"
               "tok/s (shown when the program has a 'completion_mask'): completion tokens of the step\n"
               "(the mask's sum: generated tokens up to and including each EOS) per second of the step.\n"
               "exit codes: 0 ok, 1 failed while running, 2 usage error or bad input, 130 interrupted\n"
               "(SIGINT; 143 for SIGTERM, handled the same way)\n"
               "\n"
               "data parallel: mpirun -n W dfg run P.dfg ... runs a plan compiled with --set world_size=W on W\n"
               "processes (one per device), each on its share of every batch; gradients are averaged, so a step\n"
               "is the step of one process on the whole batch. Rank 0 prints, writes metrics and checkpoints\n"
               "(--resume with the same W); every rank starts from rank 0's state.\n"
               "  --collective-timeout S  a rank waits at most S seconds (default 600) for the others in a\n"
               "                 collective, then the run stops, naming the rank that did not arrive\n"
               "  kill -USR1 <mpirun's pid> stops every rank after the same step, with a checkpoint (exit 138);\n"
               "  Ctrl-C at mpirun stops the ranks at once (the last checkpoint stays whole)\n");
}

/* --save names one of two things, never a guess: DIR/ (or a directory that exists) is a
 * directory, NAME.safetensors one file; "out" alone, meant as either, is refused. */
static int check_save(run_args *r) {
    struct stat sb;
    if (!r->save) return CLI_OK;
    size_t n = strlen(r->save), ext = strlen(".safetensors");
    r->save_dir = r->save[n - 1] == '/' || (stat(r->save, &sb) == 0 && S_ISDIR(sb.st_mode));
    if (r->save_dir || (n > ext && !strcmp(r->save + n - ext, ".safetensors"))) return CLI_OK;
    return cli_error(CMD, CLI_USAGE, "--save %s: give DIR/ (ending in '/': a model or adapter directory) or "
                     "FILE.safetensors (one file)", r->save);
}

int cli_run_parse_args(int argc, char **argv, run_args *r) {
    static const cli_option opts[] = {
        {"--steps", true},    {"--weights", true},  {"--save", true},           {"--seed", true},
        {"--threads", true},  {"--every", true},    {"--checkpoint-dir", true}, {"--save-every", true},
        {"--resume", true},   {"--rollouts", true}, {"--dump", true},           {"--metrics", true},
        {"--quiet", false},   {"-q", false},        {"--help", false},          {"-h", false},
        {"--emulate-gpu", false}, {"--eager", false}, {"--max-shard-size", true},
        {"--reward-cmd", true},   {"--reward-lib", true}, {"--reward-timeout", true},
        {"--env-cmd", true},      {"--env-timeout", true},
        {"--collective-timeout", true}, {"--adapter", true}, {"--merge", false}, {"--max-steps", true},
        {"--eval-only", false},
        {NULL, false}};
    cli_args a = {.cmd = CMD, .options = opts, .argc = argc, .argv = argv, .i = 1};
    const char *opt, *val;
    bool steps_given = false;
    *r = (run_args){.steps = 1, .max_steps = -1, .seed = (int64_t)dfg_run_options_default().seed, .every = 1, .reward_timeout = 60.0,
                    .env_timeout = 60.0,
                    .collective_timeout = 600.0};
    for (cli_arg_kind k; (k = cli_next(&a, &opt, &val)) != CLI_ARG_END;) {
        if (k == CLI_ARG_ERROR) return CLI_USAGE;
        bool ok = true;
        if (k == CLI_ARG_POSITIONAL) {
            if (r->plan) return cli_error(CMD, CLI_USAGE, "one plan file at a time (got '%s' and '%s')", r->plan, val);
            r->plan = val;
        } else if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) {
            usage(stdout);
            return -1;
        } else if (!strcmp(opt, "--emulate-gpu")) {
            r->emulate_gpu = true;
        } else if (!strcmp(opt, "--eager")) {
            r->eager = true;
        } else if (!strcmp(opt, "--merge")) {
            r->merge = true;
        } else if (!strcmp(opt, "--eval-only")) {
            r->eval_only = true;
        } else if (!strcmp(opt, "--quiet") || !strcmp(opt, "-q")) {
            r->quiet = true;
        } else if (!strcmp(opt, "--steps")) {
            ok = cli_parse_i64(CMD, "--steps", val, 0, INT64_MAX / 4, &r->steps);
            steps_given = true;
        } else if (!strcmp(opt, "--max-steps")) ok = cli_parse_i64(CMD, "--max-steps", val, 0, INT64_MAX / 4, &r->max_steps);
        else if (!strcmp(opt, "--seed")) {
            ok = cli_parse_i64(CMD, "--seed", val, 0, INT64_MAX, &r->seed);
            r->seed_given = true;
        }
        else if (!strcmp(opt, "--threads")) ok = cli_parse_i64(CMD, "--threads", val, 1, 4096, &r->threads);
        else if (!strcmp(opt, "--every")) ok = cli_parse_i64(CMD, "--every", val, 1, INT64_MAX, &r->every);
        else if (!strcmp(opt, "--save-every")) ok = cli_parse_i64(CMD, "--save-every", val, 1, INT64_MAX, &r->save_every);
        else if (!strcmp(opt, "--reward-timeout")) {
            char *end = NULL;
            r->reward_timeout = strtod(val, &end);
            if (end == val || *end || !(r->reward_timeout > 0) || r->reward_timeout > 1e6)
                return cli_error(CMD, CLI_USAGE, "--reward-timeout must be seconds > 0, got '%s'", val);
        } else if (!strcmp(opt, "--env-timeout")) {
            char *end = NULL;
            r->env_timeout = strtod(val, &end);
            if (end == val || *end || !(r->env_timeout > 0) || r->env_timeout > 1e6)
                return cli_error(CMD, CLI_USAGE, "--env-timeout must be seconds > 0, got '%s'", val);
        } else if (!strcmp(opt, "--collective-timeout")) {
            char *end = NULL;
            r->collective_timeout = strtod(val, &end);
            if (end == val || *end || !(r->collective_timeout > 0) || r->collective_timeout > 1e6)
                return cli_error(CMD, CLI_USAGE, "--collective-timeout must be seconds > 0, got '%s'", val);
        } else if (!strcmp(opt, "--max-shard-size")) {
            if (!dfg_parse_bytes(val, &r->max_shard) || r->max_shard < 1)
                return cli_error(CMD, CLI_USAGE, "--max-shard-size must be a positive size such as 5GB or 500MiB, got '%s'", val);
        } else {
            const char **dst = !strcmp(opt, "--weights") ? &r->weights
                               : !strcmp(opt, "--save") ? &r->save
                               : !strcmp(opt, "--checkpoint-dir") ? &r->ckpt_dir
                               : !strcmp(opt, "--resume") ? &r->resume
                               : !strcmp(opt, "--rollouts") ? &r->rollouts
                               : !strcmp(opt, "--dump") ? &r->dump
                               : !strcmp(opt, "--reward-cmd") ? &r->reward_cmd
                               : !strcmp(opt, "--reward-lib") ? &r->reward_lib
                               : !strcmp(opt, "--env-cmd") ? &r->env_cmd
                               : !strcmp(opt, "--adapter") ? &r->adapter
                                                         : &r->metrics;
            if (!*val) return cli_error(CMD, CLI_USAGE, "%s needs a path, got ''", opt);
            *dst = val;
        }
        if (!ok) return CLI_USAGE;
    }
    if (!r->plan) {
        usage(stderr);
        return cli_error(CMD, CLI_USAGE, "missing the plan file (P.dfg, made by dfg compile)");
    }
    r->steps_given = steps_given;
    if (steps_given && r->max_steps >= 0)
        return cli_error(CMD, CLI_USAGE, "--steps N runs N steps, --max-steps N runs until the step counter is N; give one");
    int rc = check_save(r);
    if (rc) return rc;
    if (r->adapter && r->resume)
        return cli_error(CMD, CLI_USAGE, "--adapter and --resume both set the adapters; give one");
    if (r->merge && (!r->save || !r->save_dir))
        return cli_error(CMD, CLI_USAGE, "--merge writes a LoRA policy merged into its base as a model directory: it "
                         "needs --save DIR/ (ending in '/')");
    if (r->reward_cmd && r->reward_lib)
        return cli_error(CMD, CLI_USAGE, "--reward-cmd and --reward-lib both give the reward; give one");
    if (r->eval_only && (steps_given || r->max_steps >= 0 || r->save || r->dump || r->rollouts || r->save_every))
        return cli_error(CMD, CLI_USAGE, "--eval-only evaluates the loaded state without training: it takes no --steps, "
                         "--max-steps, --save, --dump, --rollouts or --save-every");
    if (r->dump && r->steps == 0)
        return cli_error(CMD, CLI_USAGE, "--dump writes the values of the last step; it needs --steps 1 or more");
    return CLI_OK;
}
