/* kiln.c — the command line. Each command is a row in kiln_commands: its name, a one-line
 * summary, its usage text and the function that runs it. Exit codes: 0 success, 1 an error
 * in the user's model or data, 2 a usage error. What the other command files (kiln_train.c)
 * share with this one is declared in kiln_tools.h. */
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cg.h"
#include "fe.h"
#include "passes.h"
#include "runtime.h"
#include "kiln_tools.h"

typedef struct {
  const char *name;
  const char *summary;
  const char *usage;
  int (*run)(int argc, char **argv);
} kiln_command;

static int kiln_check_main(int argc, char **argv);
static int kiln_passes_main(int argc, char **argv);
static int kiln_help_main(int argc, char **argv);
static int kiln_compile_main(int argc, char **argv);
static int kiln_run_main(int argc, char **argv);

static const kiln_command kiln_commands[] = {
  {"check", "parse a model, infer shapes, print each node's op, shapes, parameters and FLOPs",
   "usage: kiln check FILE [-D dim=N|dim=LO..HI]... [--model NAME] [--print]\n"
   "\n"
   "Parses FILE, lowers every model in it (or only --model NAME) to the graph IR, infers all\n"
   "shapes, parameters included, and prints a table: node, op, output shape, the parameters\n"
   "it introduces with their sizes, and its FLOPs, then totals. Exits 1 on any error.\n"
   "\n"
   "  -D dim=N       rebind a dim declared in FILE (repeatable), e.g. -D batch=1; or bound it,\n"
   "                 -D batch=1..64: one model for every extent up to 64, planned at 64\n"
   "  --model NAME   check only this model\n"
   "  --print        print the lowered graph as .kiln text instead of the table\n"
   "                 (every parameter declared, every attribute explicit; it parses back\n"
   "                 to the same graph)\n",
   kiln_check_main},
  {"passes", "run the optimisation passes; print the graph after any pass, stats, DOT, fusion decisions",
   "usage: kiln passes FILE [-D dim=N|dim=LO..HI]... [--model NAME] [--mode predict|train]\n"
   "                   [--print-after PASS|all] [--dot|--dot-full OUT.dot] [--stats] [--explain]\n"
   "                   [--html REPORT.html [--profile TRACE.json]] [--disable PASS]...\n"
   "\n"
   "Compiles the model's predict or train_step graph (default: train_step when the model has a\n"
   "train statement) through the pass pipeline and shows what each pass did.\n"
   "\n"
   "  --print-after P  print the graph after pass P (or after every pass: all)\n"
   "  --stats          per pass: nodes, fused groups, in-place pairs, bytes freed by pruning, time;\n"
   "                   then naive bytes, planned arena bytes, their ratio, and every buffer's\n"
   "                   offset, size and lifetime\n"
   "  --dot OUT.dot    write the final graph for graphviz, each fused group as one node listing\n"
   "                   its ops: dot -Tsvg OUT.dot -o graph.svg\n"
   "  --dot-full OUT.dot  the same with every member of a fused group as its own node\n"
   "  --explain        list the fusion decisions and their reasons\n"
   "  --html OUT.html  a compile report in one self-contained page: the pass table, the graph\n"
   "                   (SVG: fused groups and epilogues outlined, each node's shapes on hover)\n"
   "                   and the memory plan as a timeline of the arena's buffers\n"
   "  --profile TRACE.json  with --html: colour each node by its share of the time in a trace\n"
   "                   of `kiln run --profile` (or KILN_PROFILE) of the same model and mode\n"
   "  --disable P      switch an optional pass off (simplify, samples, prune, inplace, epilogue, fusion,\n"
   "                   layout, plan)\n"
   "\n"
   "passes, in order: infer select simplify samples backward prune optimizer inplace epilogue fusion layout plan\n",
   kiln_passes_main},
  {"compile", "build a model into a self-contained shared object and its C header",
   "usage: kiln compile FILE [-o LIB.so] [-D dim=N|dim=LO..HI]... [--model NAME] [-O0|-O1|-O2|-O3]\n"
   "                    [--emit ll|obj|c-header|ptx|cu] [--cpu CPU] [--features F]\n"
   "                    [--target cpu|cuda] [--gpu-arch sm_XX] [--disable PASS]... [--jobs N]\n"
   "\n"
   "Compiles the model's predict graph (and its train_step graph when it has a train statement)\n"
   "through the passes and the LLVM back end, and links the result with the Kiln runtime and\n"
   "kernels into LIB.so (default libNAME.so), which needs only libc, libm, pthreads and the\n"
   "BLAS, and writes NAME.h beside it: NAME_create/destroy/load/save/predict/train_step/\n"
   "set_lr/error and a NAME_<TENSOR>_SIZE constant per input and output.\n"
   "\n"
   "  -o PATH          the output file (with --emit: the .ll, .o, .h, .ptx or .cu itself)\n"
   "  -D dim=N         rebind a dim declared in FILE (repeatable), e.g. -D batch=1; or bound it,\n"
   "                   -D batch=1..64: one model for every extent up to 64, planned at 64\n"
   "  --model NAME     the model to compile (needed when FILE holds several)\n"
   "  -O0..-O3         LLVM optimisation level (default -O2)\n"
   "  --emit KIND      ll: LLVM IR text; obj: the object file (with the weights of an ONNX\n"
   "                   model; the .ll refers to them as kiln_weights); c-header: only NAME.h;\n"
   "                   ptx: the GPU module of a CUDA model (implies --target cuda); cu: its\n"
   "                   CUDA C, as given to NVRTC\n"
   "  --cpu CPU        target CPU (default: this host's), e.g. x86-64-v3, skylake\n"
   "  --features F     target features, e.g. +avx2,+fma (default: this host's)\n"
   "  --target T       cpu (default), or cuda: the same ABI with the work on an NVIDIA GPU (the\n"
   "                   .so opens the CUDA driver, cuBLAS and cuDNN when a model is created)\n"
   "  --gpu-arch A     cuda: the PTX's architecture (default sm_80; the driver compiles it for\n"
   "                   the GPU it finds, newer ones included)\n"
   "  --disable P      switch an optional pass off, as kiln passes --disable does (to time or\n"
   "                   compare what it changes)\n"
   "  --jobs N         threads writing the .so's code, at most one per fused group (default:\n"
   "                   every core for a graph of more than 4,096 fused members, else 1)\n"
   "  --train \"LOSS OPT(...)\", --trainable P, --freeze P\n"
   "                   an .onnx model's train_step, as kiln import takes them\n"
   "\n"
   "The archives linked in come from the build tree, or from $KILN_LIB_DIR (a folder holding\n"
   "libkiln_runtime.a and libkiln_kernels.a); $CC is the linker driver (default cc, with\n"
   "-fuse-ld=lld when ld.lld is on $PATH: it copies a large model's weights much faster).\n",
   kiln_compile_main},
  {"run", "run predict on .npy inputs: a compiled LIB.so, or a .kiln or .onnx file JIT-compiled",
   "usage: kiln run LIB.so|FILE.kiln|FILE.onnx --input NAME=X.npy... [--output NAME=Y.npy]...\n"
   "                [--weights W.safetensors] [--seed N] [-D dim=N]... [--model NAME] [-O0..-O3]\n"
   "                [--repeat N] [--profile TRACE.json]\n"
   "\n"
   "Loads a shared object made by kiln compile (through its kiln_model descriptor) or\n"
   "JIT-compiles a .kiln or .onnx model in memory (an ONNX model starts from its own weights),\n"
   "creates the model, and runs predict once. Every input predict reads must be given, with\n"
   "the declared dtype and shape; outputs go to the --output files, or without --output each\n"
   "output's name, shape and first values are printed.\n"
   "\n"
   "  --input NAME=X.npy    an input of predict (repeatable)\n"
   "  --output NAME=Y.npy   write an output of predict (repeatable)\n"
   "  --weights W           load every parameter and aux state from a safetensors file\n"
   "  --seed N              initialise the weights from their initializers with seed N (default 0)\n"
   "  --repeat N            call predict N times (default 1), for --profile or perf\n"
   "  --profile TRACE.json  time every step of every call: a Chrome trace-event file (chrome://tracing,\n"
   "                        Perfetto) and a table of the steps that took the most time on stderr;\n"
   "                        KILN_PROFILE=TRACE.json does the same for any program that runs a model\n"
   "  -D, --model, -O, --disable  as for kiln compile (.kiln and .onnx files only)\n",
   kiln_run_main},
  {"train", "JIT-compile a model and train it on .npy/.npz arrays or an MNIST-layout data set",
   "usage: kiln train FILE.kiln --data NAME=X.npy[,NAME=Y.npy...] [--val NAME=...|--val-split F]\n"
   "                  [--epochs N] [--save W.safetensors] [--log RUN.jsonl] [--lr X] [--seed N]\n"
   "                  [--checkpoint DIR [--every N]] [--resume DIR] [--max-steps N]\n"
   "                  [--limit N] [-D dim=N]... [--model NAME] [--distributed]\n"
   "       kiln train FILE.kiln --data DIR ...       (an MNIST-layout IDX data set)\n"
   "       kiln train FILE.onnx --train \"LOSS OPT(...)\" [--trainable P] [--freeze P] --data ...\n"
   "\n"
   "JIT-compiles the model (as kiln run FILE.kiln does), creates it with --seed, and trains it\n"
   "for N epochs in batches shuffled with --seed, with a progress bar on stderr. A loader thread\n"
   "gathers each batch while the step before it runs. The last short batch of each epoch is\n"
   "dropped, unless the batch is a bounded dim (-D batch=1..64 or `dim batch = 1..64`), which\n"
   "runs it at its own size. After each epoch it prints the training loss and, when examples are\n"
   "held out, their loss (predict's, with the loss as one more output: dropout off, batch_norm on\n"
   "its running statistics; a padded last batch is left out of it) and, for a classifier, the\n"
   "accuracy over all of them. A classifier takes one i32 label input [batch], and predict's\n"
   "first output, f32[batch, classes], holds the class scores (argmax = the prediction).\n"
   "\n"
   "Arrays: each train_step input is fed by the array of its name, whose first axis runs over\n"
   "the examples and whose other axes are the input's own (f32 from float32 or float64 data, i32\n"
   "from int32 or int64; 8-byte values that do not fit are refused). .npy files are memory-mapped\n"
   "and read a batch at a time. Y.npz gives each of its arrays under its own name; NAME=Y.npz\n"
   "its array NAME; NAME=Y.npz:KEY its array KEY (numpy.savez and savez_compressed). Names,\n"
   "dtypes, shapes, lengths and labels are checked before the first step.\n"
   "\n"
   "DIR holds IDX files in the MNIST layout, plain or gzipped (.gz):\n"
   "  train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte\n"
   "Pixels are scaled to [0,1], then standardised with the training images' mean and deviation;\n"
   "the t10k files are held out. The model takes one f32 image tensor [batch, ...] with rows*cols\n"
   "values per image and one i32 label tensor [batch].\n"
   "\n"
   "  --data SPEC     the training examples (required): arrays as above, or an IDX directory\n"
   "  --val SPEC      held-out arrays, evaluated after each epoch\n"
   "  --val-split F   hold out the fraction F of the training examples instead (drawn with --seed)\n"
   "  --epochs N      passes over the training examples (default 1)\n"
   "  --save W        write the weights at the end, as safetensors (kiln run --weights reads them)\n"
   "  --log RUN.jsonl one JSON object per line: each step (step, epoch, loss, lr, images_per_s)\n"
   "                  and each epoch (train_loss, seconds, val_loss, val_accuracy, val_examples)\n"
   "  --checkpoint DIR  after each epoch (and each N steps with --every N) DIR/train.json and\n"
   "                  the model's whole state (NAME_save_state: weights, optimizer state, step,\n"
   "                  schedule, seed) in DIR/state-STEP.safetensors, the older one removed\n"
   "  --resume DIR    continue from DIR's checkpoint, to --epochs in all: the same bits as a run\n"
   "                  that never stopped (--log is added to, not rewritten)\n"
   "  --max-steps N   stop after N steps in all (with --checkpoint, a checkpoint there)\n"
   "  --lr X          the learning rate, instead of the model's\n"
   "  --seed N        the weights' initialisation, the shuffling and --val-split (default 0)\n"
   "  --limit N       only the first N training (and N test) examples (quick runs)\n"
   "  --train \"LOSS OPT(...)\"  an .onnx model's loss and the rest of its train statement, e.g.\n"
   "                  \"softmax_cross_entropy adamw(lr=1e-3) schedule cosine(total=5000) clip_norm=1.0\"\n"
   "                  (kiln import --help: the label input it adds, --trainable, --freeze); the\n"
   "                  model starts from the ONNX weights\n"
   "  --distributed   one rank of a data-parallel job: mpirun -np N kiln train ... --distributed.\n"
   "                  Each rank trains at the model's batch on its own part of each step's N\n"
   "                  batches (the r-th of the shuffle's next N), gradients summed by MPI\n"
   "                  (libkiln_mpi): the steps of one process at N times the batch. Rank 0's\n"
   "                  weights start every rank; rank 0 alone prints, logs, checkpoints and\n"
   "                  saves; the images/s shown are the job's; a failing rank stops the job\n"
   "  -D, --model     as for kiln compile\n",
   kiln_train_main},
  {"repl", "an interactive session: .kiln statements on lazy arrays, computed when shown",
   "usage: kiln repl [SCRIPT]    or    kiln repl < SCRIPT\n"
   "\n"
   "Reads .kiln statements and :commands (:help lists them). Statements are recorded on lazy\n"
   "arrays and computed (JIT-compiled, cached by structure) when a value is shown. With a\n"
   "terminal: line editing and history (~/.kiln_history). Given a SCRIPT, or without a terminal\n"
   "on stdin, it runs the script: no prompts, and the exit status is 1 when any statement\n"
   "failed (the rest still run).\n"
   "docs/repl.md has a session.\n",
   kiln_repl_main},
  {"import", "ONNX to readable .kiln text and NAME.safetensors; every unsupported op listed at once",
   kiln_import_usage, kiln_import_main},
  {"help", "show help for a command", "usage: kiln help [COMMAND]\n", kiln_help_main},
};
enum { KILN_NCOMMANDS = sizeof kiln_commands / sizeof *kiln_commands };

static void kiln_usage(FILE *out) {
  fprintf(out, "usage: kiln COMMAND [ARGS]\n\nKiln compiles neural-network models written in the .kiln language.\n\ncommands:\n");
  for (int i = 0; i < KILN_NCOMMANDS; i++) fprintf(out, "  %-8s %s\n", kiln_commands[i].name, kiln_commands[i].summary);
  fprintf(out, "\n'kiln COMMAND --help' describes a command; 'kiln --version' prints the version. The\n"
               "language, the operators and the generated C ABI are documented in docs/ of the Kiln\n"
               "source tree.\n");
}

static const kiln_command *kiln_find_command(const char *name) {
  for (int i = 0; i < KILN_NCOMMANDS; i++)
    if (strcmp(kiln_commands[i].name, name) == 0) return &kiln_commands[i];
  return NULL;
}

static int kiln_help_main(int argc, char **argv) {
  const kiln_command *c = argc > 1 ? kiln_find_command(argv[1]) : NULL;
  if (argc > 1 && !c) return fprintf(stderr, "kiln help: unknown command '%s'\n", argv[1]), 2;
  if (c) fputs(c->usage, stdout);
  else kiln_usage(stdout);
  return 0;
}

static bool kiln_wants_help(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return true;
  return false;
}

/* An integer that ends at `stop` (a NUL, or the ".." of a range). */
static bool kiln_parse_int(const char *s, const char *stop, long long *v) {
  char *end = NULL;
  *v = strtoll(s, &end, 10);
  return s != stop && end == stop;
}

/* "-D batch=1" or "-Dbatch=1", or a range "-D batch=1..64", into defs (fe.h: lo 0 is a
 * fixed value); false (with a message) when malformed. */
static bool kiln_parse_define(const char *arg, fe_define *out) {
  const char *eq = strchr(arg, '=');
  if (!eq || eq == arg) return fprintf(stderr, "kiln: -D expects NAME=N or NAME=LO..HI, got '%s'\n", arg), false;
  const char *dots = strstr(eq + 1, ".."), *hi = dots ? dots + 2 : eq + 1;
  long long lo = 0, v;
  if ((dots && !kiln_parse_int(eq + 1, dots, &lo)) || !kiln_parse_int(hi, hi + strlen(hi), &v))
    return fprintf(stderr, "kiln: -D %s: '%s' is not an integer or a range LO..HI\n", arg, eq + 1), false;
  if (dots && lo < 1) return fprintf(stderr, "kiln: -D %s: the lower bound must be at least 1\n", arg), false;
  char *name = malloc((size_t)(eq - arg) + 1);
  if (!name) return false;
  memcpy(name, arg, (size_t)(eq - arg));
  name[eq - arg] = 0;
  *out = (fe_define){name, v, lo};
  return true;
}

static int kiln_opt_define(kiln_opts *o, const char *v) {
  if (!v) return fprintf(stderr, "kiln %s: -D needs NAME=N or NAME=LO..HI\n", o->cmd), 2;
  if (o->ndefs == 64 || !kiln_parse_define(v, &o->defs[o->ndefs])) return 2;
  o->ndefs++;
  return 0;
}

static int kiln_opt_pass(const kiln_opts *o, const char *flag, const char *v, bool allow_all, bool optional_only) {
  if (!v) return fprintf(stderr, "kiln %s: %s needs a pass name\n", o->cmd, flag), -2;
  if (allow_all && strcmp(v, "all") == 0) return PASS_COUNT;
  int id = pass_lookup(v);
  if (id >= 0 && (!optional_only || pass_table[id].optional)) return id;
  fprintf(stderr, "kiln %s: %s: '%s' is not %s pass; the passes are", o->cmd, flag, v, optional_only ? "an optional" : "a");
  for (int i = 0; i < PASS_COUNT; i++)
    if (!optional_only || pass_table[i].optional) fprintf(stderr, " %s", pass_table[i].name);
  fputc('\n', stderr);
  return -2;
}

/* --disable PASS (passes, compile, run): an optional pass switched off, as the differential
 * tests do, to see or time what it changes. */
static int kiln_opt_disable(kiln_opts *o, const char *a, const char *v, int *i) {
  int id = kiln_opt_pass(o, a, v, false, true);
  if (id < -1) return 2;
  return o->disabled |= 1u << id, ++*i, 1;
}

/* The options only `kiln passes` takes; returns 1 when `a` was one of them, 2 on error. */
static int kiln_passes_flag(kiln_opts *o, int argc, char **argv, int *i) {
  const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
  int id;
  if (strcmp(a, "--stats") == 0) return o->stats = true, 1;
  if (strcmp(a, "--explain") == 0) return o->explain = true, 1;
  if (strcmp(a, "--dot") == 0 && v) return o->dot = argv[++*i], 1;
  if (strcmp(a, "--dot-full") == 0 && v) return o->dot = argv[++*i], o->dot_full = true, 1;
  if (strcmp(a, "--html") == 0 && v) return o->html = argv[++*i], 1;
  if (strcmp(a, "--profile") == 0 && v) return o->profile = argv[++*i], 1;
  if ((strcmp(a, "--html") == 0 || strcmp(a, "--profile") == 0 || strcmp(a, "--dot") == 0 || strcmp(a, "--dot-full") == 0) && !v)
    return fprintf(stderr, "kiln passes: %s needs a file name\n", a), 2;
  if (strcmp(a, "--mode") == 0 && v && (!strcmp(v, "predict") || !strcmp(v, "train")))
    return o->mode = !strcmp(argv[++*i], "train") ? IR_MODE_TRAIN : IR_MODE_PREDICT, 1;
  if (strcmp(a, "--mode") == 0) return fprintf(stderr, "kiln passes: --mode is predict or train\n"), 2;
  if (strcmp(a, "--print-after") == 0) {
    if ((id = kiln_opt_pass(o, a, v, true, false)) < -1) return 2;
    return o->print_after = id, ++*i, 1;
  }
  if (strcmp(a, "--disable") == 0) return kiln_opt_disable(o, a, v, i);
  return 0;
}

/* A "NAME=PATH" value of --input / --output into the list; 2 with a message when malformed. */
static int kiln_opt_binding(kiln_opts *o, const char *flag, const char *v, const char **list, int *n) {
  const char *eq = v ? strchr(v, '=') : NULL;
  if (!eq || eq == v || !eq[1])
    return fprintf(stderr, "kiln %s: %s expects NAME=FILE.npy, got '%s'\n", o->cmd, flag, v ? v : ""), 2;
  if (*n == 64) return fprintf(stderr, "kiln %s: at most 64 %s options\n", o->cmd, flag), 2;
  list[(*n)++] = v;
  return 1;
}

static int kiln_opt_emit(kiln_opts *o, const char *v) {
  static const char *const kinds[] = {"ll", "obj", "c-header", "ptx", "cu", NULL};
  for (int k = 0; v && kinds[k]; k++)
    if (strcmp(v, kinds[k]) == 0) return o->emit = v, 1;
  return fprintf(stderr, "kiln compile: --emit is ll, obj, c-header, ptx or cu%s%s%s\n", v ? " (got '" : "", v ? v : "",
                 v ? "')" : ""), 2;
}

int kiln_opt_seed(kiln_opts *o, const char *v) {
  char *end = NULL;
  unsigned long long s = v ? strtoull(v, &end, 10) : 0;
  if (!v || !*v || *end || *v == '-') return fprintf(stderr, "kiln %s: --seed expects an unsigned integer\n", o->cmd), 2;
  o->seed = s;
  return 1;
}

/* compile --jobs N: 1 to CG_MAX_JOBS threads. */
static int kiln_opt_jobs(kiln_opts *o, const char *v, int *i) {
  char *end = NULL;
  long j = v ? strtol(v, &end, 10) : 0;
  if (!v || !*v || *end || j < 1 || j > CG_MAX_JOBS)
    return fprintf(stderr, "kiln compile: --jobs expects a number of threads from 1 to %d\n", CG_MAX_JOBS), 2;
  o->jobs = (int)j;
  ++*i;
  return 1;
}

/* The string-valued options of compile and run: where each one's value goes, or NULL. */
static const char **kiln_build_slot(kiln_opts *o, const char *a) {
  bool compile = strcmp(o->cmd, "compile") == 0;
  if (compile && strcmp(a, "-o") == 0) return &o->out;
  if (compile && strcmp(a, "--cpu") == 0) return &o->cpu;
  if (compile && strcmp(a, "--features") == 0) return &o->features;
  if (compile && strcmp(a, "--target") == 0) return &o->target;
  if (compile && strcmp(a, "--gpu-arch") == 0) return &o->gpu_arch;
  if (!compile && strcmp(a, "--weights") == 0) return &o->weights;
  if (!compile && strcmp(a, "--profile") == 0) return &o->profile;
  return NULL;
}

static int kiln_opt_repeat(kiln_opts *o, const char *v) {
  char *end;
  long n = strtol(v, &end, 10);
  if (*end || n < 1 || n > 1000000000L) return fprintf(stderr, "kiln run: --repeat wants a count from 1 up, not '%s'\n", v), 2;
  return o->repeat = n, 1;
}

/* The options of `kiln compile` and `kiln run`; 1 when `a` was one of them, 2 on error. */
static int kiln_build_flag(kiln_opts *o, int argc, char **argv, int *i) {
  const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
  bool compile = strcmp(o->cmd, "compile") == 0;
  if (strlen(a) == 3 && a[0] == '-' && a[1] == 'O' && a[2] >= '0' && a[2] <= '3') return o->opt_level = a[2] - '0', 1;
  if (strncmp(a, "-O", 2) == 0) return fprintf(stderr, "kiln %s: optimisation levels are -O0 to -O3\n", o->cmd), 2;
  if (strcmp(a, "--disable") == 0) return kiln_opt_disable(o, a, v, i);
  if (compile && strcmp(a, "--jobs") == 0) return kiln_opt_jobs(o, v, i);
  const char **slot = kiln_build_slot(o, a);
  bool other = compile ? strcmp(a, "--emit") == 0
                       : !strcmp(a, "--input") || !strcmp(a, "--output") || !strcmp(a, "--seed") || !strcmp(a, "--repeat");
  if (!slot && !other) return 0;
  if (!v) return fprintf(stderr, "kiln %s: %s needs a value\n", o->cmd, a), 2;
  ++*i;
  if (slot && slot == &o->target && strcmp(v, "cpu") != 0 && strcmp(v, "cuda") != 0)
    return fprintf(stderr, "kiln compile: --target is cpu or cuda (got '%s')\n", v), 2;
  if (slot) return *slot = v, 1;
  if (strcmp(a, "--emit") == 0) return kiln_opt_emit(o, v);
  if (strcmp(a, "--seed") == 0) return kiln_opt_seed(o, v);
  if (strcmp(a, "--repeat") == 0) return kiln_opt_repeat(o, v);
  if (strcmp(a, "--input") == 0) return kiln_opt_binding(o, a, v, o->inputs, &o->ninputs);
  return kiln_opt_binding(o, a, v, o->outputs, &o->noutputs);
}

int kiln_args(int argc, char **argv, kiln_opts *o) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int r = strcmp(o->cmd, "passes") == 0 ? kiln_passes_flag(o, argc, argv, &i)
            : strcmp(o->cmd, "compile") == 0 || strcmp(o->cmd, "run") == 0 ? kiln_build_flag(o, argc, argv, &i)
            : strcmp(o->cmd, "train") == 0 ? kiln_train_flag(o, argc, argv, &i)
            : strcmp(o->cmd, "import") == 0 ? kiln_import_flag(o, argc, argv, &i) : 0;
    if (!r) r = kiln_onnx_flag(o, argc, argv, &i);
    if (r == 2) return 2;
    if (r == 1) continue;
    if (strncmp(a, "-D", 2) == 0) {
      if (kiln_opt_define(o, a[2] ? a + 2 : (i + 1 < argc ? argv[++i] : NULL))) return 2;
    } else if (strcmp(a, "--model") == 0 && i + 1 < argc) {
      o->model = argv[++i];
    } else if (strcmp(a, "--print") == 0 && strcmp(o->cmd, "check") == 0) {
      o->print = true;
    } else if (a[0] == '-' && a[1]) {
      return fprintf(stderr, "kiln %s: unknown option '%s' (see kiln %s --help)\n", o->cmd, a, o->cmd), 2;
    } else if (o->file) {
      return fprintf(stderr, "kiln %s: one FILE at a time ('%s' and '%s' given)\n", o->cmd, o->file, a), 2;
    } else {
      o->file = a;
    }
  }
  if (!o->file) return fprintf(stderr, "kiln %s: no FILE given (see kiln %s --help)\n", o->cmd, o->cmd), 2;
  if ((o->train || o->nweight_rules) && !onnx_is_onnx_path(o->file))
    return fprintf(stderr, "kiln %s: --train, --trainable and --freeze apply to .onnx models; %s has its own train statement\n",
                   o->cmd, o->file), 2;
  return 0;
}

/* "bounded dims: batch = 1..64 (planned at 64), seq = 1..256 (planned at 256)" after the
 * table of kiln check and the statistics of kiln passes; nothing for a model without any. */
static void kiln_print_bdims(const ir_graph *g, const char *before, FILE *out) {
  for (int d = 0; d < g->nbdims; d++)
    fprintf(out, "%s%s = %lld..%lld (planned at %lld)", d ? ", " : before, g->bdims[d].name,
            (long long)g->bdims[d].lo, (long long)g->bdims[d].hi, (long long)g->bdims[d].hi);
  if (g->nbdims) fputc('\n', out);
}

static void kiln_check_graph(ir_graph *g, const kiln_opts *o, ir_diag *d) {
  (void)d;
  if (o->print) ir_print(g, stdout);
  else ir_print_summary(g, stdout), kiln_print_bdims(g, "bounded dims: ", stdout);
}

static int kiln_write_dot(const ir_graph *g, const kiln_opts *o, ir_diag *d) {
  const char *path = o->dot;
  FILE *f = fopen(path, "w");
  if (!f) return ir_error(d, (ir_loc){0}, "cannot write '%s'", path), 1;
  pass_write_dot(g, o->dot_full, NULL, f);
  if (fclose(f)) return ir_error(d, (ir_loc){0}, "cannot write '%s'", path), 1;
  return 0;
}

static int kiln_write_text(const char *text, const char *path, ir_diag *d);

/* --html: the compile report, written whole or not at all. */
static int kiln_write_report(const ir_graph *g, const pass_ctx *cx, const kiln_opts *o, ir_diag *d) {
  char *html = kiln_report_html(g, cx, o->profile, d);
  int rc = html ? kiln_write_text(html, o->html, d) : 1;
  if (!rc) fprintf(stderr, "wrote %s\n", o->html);
  free(html);
  return rc;
}

static void kiln_passes_graph(ir_graph *lowered, const kiln_opts *o, ir_diag *d) {
  pass_ctx cx;
  ir_mode mode = o->mode ? o->mode : lowered->has_train ? IR_MODE_TRAIN : IR_MODE_PREDICT;
  pass_ctx_init(&cx, mode, d);
  cx.disabled = o->disabled;
  cx.print_after = o->print_after;
  cx.print_out = stdout;
  ir_graph *g = pass_compile(lowered, &cx);
  if (g && o->stats && lowered->nbdims) {
    pass_print_stats(g, &cx, stdout), kiln_print_bdims(lowered, "\nbounded dims: ", stdout);
    /* what the issue asks --stats to show: which extents get code of their own, and why */
    printf("specialised extents: none; one code serves every extent (the kernels read each call's shapes, the "
           "fused loops take their trip counts from its extents) and measured as fast as fixed-size code\n");
  } else if (g && o->stats) pass_print_stats(g, &cx, stdout);
  for (int i = 0; g && o->explain && i < cx.explain.len; i++) printf("%s\n", IR_VEC_AT(cx.explain, char *, i));
  if (g && o->dot) kiln_write_dot(g, o, d);
  if (g && o->html) kiln_write_report(g, &cx, o, d);
  if (g && o->print_after < 0 && !o->stats && !o->explain && !o->dot && !o->html) ir_print(g, stdout);
  ir_graph_free(g);
  pass_ctx_free(&cx);
}

/* Lowers each chosen model of FILE and hands its graph to `each`. */
/* Commands that build one model at a time say so before building anything. */
static bool kiln_too_many_models(const kiln_opts *o, const fe_file *f) {
  int n = 0;
  for (const fe_model *m = f->models; m; m = m->next) n++;
  if (!o->one_model || o->model || n <= 1) return false;
  fprintf(stderr, "kiln %s: %s holds several models; %s one at a time with --model NAME\n", o->cmd, o->file, o->one_model);
  return true;
}

int kiln_for_models(const kiln_opts *o, void (*each)(ir_graph *, const kiln_opts *, ir_diag *)) {
  if (onnx_is_onnx_path(o->file)) return kiln_for_onnx(o, each);
  ir_diag d;
  ir_diag_init(&d, stderr);
  fe_file *f = fe_parse_file(o->file, &d);
  bool found = false, several = f && !d.errors && kiln_too_many_models(o, f);
  if (f && !d.errors && !several && !fe_check_file(f, o->defs, o->ndefs, &d)) {
    for (fe_model *m = f->models; m; m = m->next) {
      if (o->model && strcmp(o->model, m->name) != 0) continue;
      found = true;
      ir_graph *g = fe_lower_model(f, m, o->defs, o->ndefs, &d);
      if (g) each(g, o, &d);
      if (g && m->next && !o->model) putchar('\n');
      ir_graph_free(g);
    }
    if (!found && o->model) ir_error(&d, (ir_loc){0}, "%s has no model named '%s'", f->path, o->model);
  }
  int rc = several ? 2 : d.errors ? 1 : 0;
  if (d.errors) fprintf(stderr, "%d error%s\n", d.errors, d.errors == 1 ? "" : "s");
  fe_file_free(f);
  ir_diag_free(&d);
  for (int i = 0; i < o->ndefs; i++) free((char *)o->defs[i].name);
  return rc;
}

static int kiln_check_main(int argc, char **argv) {
  kiln_opts o = {.cmd = "check", .print_after = -1};
  int rc = kiln_args(argc, argv, &o);
  return rc ? rc : kiln_for_models(&o, kiln_check_graph);
}

static int kiln_passes_main(int argc, char **argv) {
  kiln_opts o = {.cmd = "passes", .print_after = -1};
  int rc = kiln_args(argc, argv, &o);
  if (!rc && o.profile && !o.html) {
    fprintf(stderr, "kiln passes: --profile colours the --html report; give --html too\n");
    rc = 2;
  }
  if (o.html) o.one_model = "report";   /* one page, one model */
  return rc ? rc : kiln_for_models(&o, kiln_passes_graph);
}

/* ---- kiln compile, kiln run ---- */

double kiln_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A code generator's message as an error of the command. */
static void kiln_cg_error(ir_diag *d, const char *err) { ir_error(d, (ir_loc){0}, "%s", err); }

/* An --emit that only a CUDA model has. */
static bool kiln_gpu_emit(const kiln_opts *o) { return o->emit && (strcmp(o->emit, "ptx") == 0 || strcmp(o->emit, "cu") == 0); }

/* --target cuda, or a CUDA model's --emit. */
static int kiln_target(const kiln_opts *o) {
  return (o->target && strcmp(o->target, "cuda") == 0) || kiln_gpu_emit(o) ? RT_TARGET_CUDA : RT_TARGET_CPU;
}

/* What compile and the JIT build for one model (codegen's one pipeline, cg_build): the
 * compiled graphs, the descriptor and, unless only the header is wanted, the LLVM module
 * holding the fused loops. */
static int kiln_build_model(const ir_graph *lowered, const kiln_opts *o, bool llvm, ir_diag *d, cg_build *b) {
  char err[2048];
  int target = kiln_target(o);
  cg_options co = {.opt_level = o->opt_level, .cpu = o->cpu, .features = o->features, .target = target, .gpu_arch = o->gpu_arch,
                   .jobs = o->jobs, .gpu_source_only = o->emit && strcmp(o->emit, "cu") == 0};
  if (cg_build_graphs(lowered, o->disabled | cg_target_disabled(target), d, b)) return 1;
  if (cg_build_module(b, llvm ? &co : NULL, err, sizeof err)) return kiln_cg_error(d, err), 1;
  return 0;
}

int kiln_free_defs(kiln_opts *o, int rc) {
  for (int i = 0; i < o->ndefs; i++) free((char *)o->defs[i].name);
  o->ndefs = 0;
  return rc;
}

/* The folder of path, with its trailing '/', or "" for a bare file name. */
static void kiln_dir_of(const char *path, char *buf, size_t n) {
  const char *slash = strrchr(path, '/');
  size_t k = slash ? (size_t)(slash - path) + 1 : 0;
  snprintf(buf, n, "%.*s", (int)k, path);
}

static int kiln_write_header(const rt_model_desc *desc, const char *path, ir_diag *d) {
  FILE *f = fopen(path, "w");
  if (!f) return ir_error(d, (ir_loc){0}, "cannot write '%s'", path), 1;
  int rc = cg_write_header(desc, f);
  if (fclose(f) || rc) return ir_error(d, (ir_loc){0}, "cannot write '%s'", path), 1;
  return 0;
}

/* The outputs of one command appear together or not at all. Each is first written under a
 * temporary name in its destination's folder; kiln_outs_commit then renames them all, and if
 * one rename fails it undoes those already done (a replaced file comes back from a hard link
 * kept until the end). */
/* A fresh temporary name beside dest, or NULL with the error reported. */
const char *kiln_outs_add(kiln_outs *s, const char *dest, ir_diag *d) {
  kiln_out *o = &s->o[s->n];
  snprintf(o->dest, sizeof o->dest, "%s", dest);
  snprintf(o->tmp, sizeof o->tmp, "%s.tmpXXXXXX", dest);
  int fd = mkstemp(o->tmp);
  if (fd < 0) return ir_error(d, (ir_loc){0}, "cannot write '%s': %s", dest, strerror(errno)), NULL;
  mode_t um = umask(0);
  umask(um);
  (void)fchmod(fd, 0666 & ~um);   /* as fopen would make it, not mkstemp's 0600 */
  close(fd);
  s->n++;
  return o->tmp;
}

void kiln_outs_discard(kiln_outs *s) {
  for (int i = 0; i < s->n; i++) unlink(s->o[i].tmp);
  s->n = 0;
}

/* Keeps a hard link to the file dest replaces, so a later failure can put it back. */
static int kiln_out_keep(kiln_out *o) {
  struct stat st;
  if (lstat(o->dest, &st) != 0) return errno == ENOENT ? 0 : -1;
  if (S_ISDIR(st.st_mode)) return errno = EISDIR, -1;
  snprintf(o->keep, sizeof o->keep, "%s.oldXXXXXX", o->dest);
  int fd = mkstemp(o->keep);
  if (fd < 0) return -1;
  close(fd);
  unlink(o->keep);
  if (link(o->dest, o->keep) != 0) return -1;
  return o->kept = true, 0;
}

static void kiln_outs_undo(kiln_outs *s) {
  for (int i = 0; i < s->n; i++) {
    kiln_out *o = &s->o[i];
    if (o->moved && o->kept) rename(o->keep, o->dest);
    else if (o->moved) unlink(o->dest);
    else if (o->kept) unlink(o->keep);
  }
}

int kiln_outs_commit(kiln_outs *s, ir_diag *d) {
  const char *failed = NULL;
  int err = 0;
  for (int i = 0; i < s->n && !failed; i++)
    if (kiln_out_keep(&s->o[i])) failed = s->o[i].dest, err = errno;
  for (int i = 0; i < s->n && !failed; i++)
    if (rename(s->o[i].tmp, s->o[i].dest) == 0) s->o[i].moved = true;
    else failed = s->o[i].dest, err = errno;
  if (!failed) {
    for (int i = 0; i < s->n; i++)
      if (s->o[i].kept) unlink(s->o[i].keep);
    return s->n = 0, 0;
  }
  ir_error(d, (ir_loc){0}, "cannot write '%s': %s", failed, strerror(err));
  kiln_outs_undo(s);
  kiln_outs_discard(s);
  return 1;
}

/* The archives an installed kiln links models with: PREFIX/LIBDIR/kiln, reached from the
 * executable's own folder (PREFIX/bin), so the prefix can be anywhere; NULL when they are not
 * there (kiln run from the build tree: cg_link.c's compile-time paths). $KILN_LIB_DIR
 * overrides both (cg_link.c). */
static const char *kiln_lib_dir(char *buf, size_t n) {
  char exe[4096], probe[8300];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len <= 0) return NULL;
  exe[len] = 0;
  char *slash = strrchr(exe, '/');
  if (!slash) return NULL;
  *slash = 0;
  snprintf(probe, sizeof probe, "%s/%s", exe, KILN_TOOL_ARCHIVE_REL);
  if (!realpath(probe, exe)) return NULL;   /* PREFIX/lib/kiln, not PREFIX/bin/../lib/kiln */
  snprintf(buf, n, "%s", exe);
  snprintf(probe, sizeof probe, "%s/libkiln_runtime.a", buf);
  return access(probe, R_OK) == 0 ? buf : NULL;
}

/* The objects into temporary files next to nothing the user owns, then linked into so. */
static int kiln_link(cg_build *b, const char *so, ir_diag *d) {
  char err[8192], dir[4200];
  int rc = cg_build_link(b, so, kiln_lib_dir(dir, sizeof dir), err, sizeof err);
  if (rc) kiln_cg_error(d, err);
  return rc;
}

/* By --emit: the .ll, the .o, only the header, or (default) the .so and its header. */
typedef struct { char out[4096], hdr[4096]; } kiln_paths;

/* --emit ptx / cu: the CUDA model's GPU module or its CUDA C, written whole or not at all. */
static int kiln_write_text(const char *text, const char *path, ir_diag *d) {
  kiln_outs outs = {.n = 0};
  const char *tmp = kiln_outs_add(&outs, path, d);
  if (!tmp) return 1;
  FILE *f = fopen(tmp, "w");
  bool ok = f && fputs(text, f) >= 0;
  if (f && fclose(f)) ok = false;
  if (!ok) return ir_error(d, (ir_loc){0}, "cannot write '%s'", path), kiln_outs_discard(&outs), 1;
  return kiln_outs_commit(&outs, d);
}

static int kiln_compile_emit(cg_build *b, const kiln_opts *o, const char *name, ir_diag *d, kiln_paths *p) {
  char err[2048], def[1024];
  const char *emit = o->emit ? o->emit : "so";
  bool header = strcmp(emit, "c-header") == 0, ptx = strcmp(emit, "ptx") == 0, cu = strcmp(emit, "cu") == 0;
  snprintf(def, sizeof def, header ? "%s.h" : strcmp(emit, "ll") == 0 ? "%s.ll" : strcmp(emit, "obj") == 0 ? "%s.o" : ptx ? "%s.ptx" : cu ? "%s.cu" : "lib%s.so", name);
  const char *out = o->out ? o->out : def;
  snprintf(p->out, sizeof p->out, "%s", out);
  if (header) return kiln_write_header(b->desc, out, d);
  if (ptx || cu) return kiln_write_text(ptx ? b->gpu_ptx : b->gpu_src, out, d);
  if (cg_emit_aot(b->llvm, b->desc, err, sizeof err) || cg_optimize(b->llvm, err, sizeof err))
    return kiln_cg_error(d, err), 1;
  if (strcmp(emit, "ll") == 0) return cg_write_ir(b->llvm, out, err, sizeof err) ? kiln_cg_error(d, err), 1 : 0;
  if (strcmp(emit, "obj") == 0) return cg_build_object(b, out, err, sizeof err) ? kiln_cg_error(d, err), 1 : 0;
  char dir[2048];
  kiln_dir_of(out, dir, sizeof dir);
  snprintf(p->hdr, sizeof p->hdr, "%s%s.h", dir, name);
  kiln_outs outs = {.n = 0};
  const char *so_tmp = kiln_outs_add(&outs, out, d), *h_tmp = so_tmp ? kiln_outs_add(&outs, p->hdr, d) : NULL;
  if (!h_tmp || kiln_link(b, so_tmp, d) || kiln_write_header(b->desc, h_tmp, d)) return kiln_outs_discard(&outs), 1;
  return kiln_outs_commit(&outs, d);
}

static void kiln_compile_graph(ir_graph *lowered, const kiln_opts *co, ir_diag *d) {
  const kiln_opts *o = co;
  cg_build b = {0};
  bool header_only = o->emit && strcmp(o->emit, "c-header") == 0;
  kiln_paths p = {"", ""};
  double t0 = kiln_now();
  if (!kiln_build_model(lowered, o, !header_only, d, &b) && !kiln_compile_emit(&b, o, lowered->name, d, &p))
    fprintf(stderr, "compiled %s in %.2f s -> %s%s%s\n", lowered->name, kiln_now() - t0, p.out, *p.hdr ? ", " : "", p.hdr);
  cg_build_free(&b);
}

static int kiln_compile_main(int argc, char **argv) {
  kiln_opts o = {.cmd = "compile", .print_after = -1, .opt_level = 2};
  int rc = kiln_args(argc, argv, &o);
  if (rc) return rc;
  if (o.target && strcmp(o.target, "cpu") == 0 && kiln_gpu_emit(&o))
    return fprintf(stderr, "kiln compile: --emit %s is a CUDA model's; it needs --target cuda\n", o.emit), kiln_free_defs(&o, 2);
  if (o.gpu_arch && kiln_target(&o) != RT_TARGET_CUDA)
    return fprintf(stderr, "kiln compile: --gpu-arch is for --target cuda\n"), kiln_free_defs(&o, 2);
  o.one_model = o.out ? "compile" : NULL;          /* one -o names one shared object */
  return kiln_for_models(&o, kiln_compile_graph);
}

/* A `kiln run` error on stderr; returns 1. */
static int kiln_run_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int kiln_run_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("kiln run: ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  return 1;
}

/* The tensor of a program's input or output list named `name`: its position, or -1. A .kiln
 * keyword, which no tensor can be named, means the tensor named it plus '_': ONNX's `input`
 * and `output` are `input_` and `output_` in a model from ONNX (frontend/onnx/onnx_names.c),
 * and either name reaches them. */
static int kiln_find_slot(const rt_model_desc *d, const int32_t *list, int n, const char *name, size_t len) {
  char word[64];
  bool keyword = len < sizeof word - 1 && (memcpy(word, name, len), word[len] = 0, fe_is_keyword(word));
  for (int k = 0; k < n; k++) {
    const char *t = d->tensors[list[k]].name;
    if (strlen(t) == len && strncmp(t, name, len) == 0) return k;
    if (keyword && strlen(t) == len + 1 && strncmp(t, name, len) == 0 && t[len] == '_') return k;
  }
  return -1;
}

static void kiln_tensor_str(const rt_tensor_info *t, char *buf, size_t n) {
  ir_type_str((k_dtype)t->dtype, &t->shape, buf, n);
}

/* One --input: NAME=PATH read into arr[slot], checked against the declared dtype and shape. */
static int kiln_read_input(const rt_model_desc *d, const char *spec, rt_npy *arr) {
  const rt_program *p = &d->predict;
  const char *eq = strchr(spec, '=');
  int k = kiln_find_slot(d, p->inputs, p->ninputs, spec, (size_t)(eq - spec));
  char err[1024], want[300], got[300];
  if (k < 0) {
    fprintf(stderr, "kiln run: predict of model '%s' has no input '%.*s'; its inputs are", d->name, (int)(eq - spec), spec);
    for (int i = 0; i < p->ninputs; i++) fprintf(stderr, " %s", d->tensors[p->inputs[i]].name);
    return fputc('\n', stderr), 1;
  }
  const rt_tensor_info *t = &d->tensors[p->inputs[k]];
  if (arr[k].data) return fprintf(stderr, "kiln run: input '%s' given twice\n", t->name), 1;
  if (rt_npy_read(eq + 1, &arr[k], err, sizeof err)) return fprintf(stderr, "kiln run: %s\n", err), 1;
  kiln_tensor_str(t, want, sizeof want);
  rt_tensor_info as = {.dtype = arr[k].dtype, .shape = arr[k].shape};
  kiln_tensor_str(&as, got, sizeof got);
  if (arr[k].dtype != (k_dtype)t->dtype)
    return fprintf(stderr, "kiln run: input '%s' must be %s; %s holds %s (save it with .astype(numpy.%s))\n", t->name,
                   want, eq + 1, got, t->dtype == K_F32 ? "float32" : "int32"), 1;
  if (d->ndims && arr[k].shape.rank == t->shape.rank) return 0;   /* bounded dims: kiln_read_inputs checks the extents */
  if (!ir_shape_eq(&arr[k].shape, &t->shape)) {
    bool batch_only = arr[k].shape.rank == t->shape.rank && t->shape.rank > 0;   /* only axis 0 differs? */
    for (int i = 1; batch_only && i < t->shape.rank; i++) batch_only = arr[k].shape.d[i] == t->shape.d[i];
    fprintf(stderr, "kiln run: input '%s' must be %s; %s holds %s\n", t->name, want, eq + 1, got);
    if (batch_only)
      fprintf(stderr, "kiln run: the model is compiled for %lld along the first axis; compile it again with "
                      "-D DIM=%lld (DIM the model's name for that dim, e.g. batch) for this size\n",
              (long long)t->shape.d[0], (long long)arr[k].shape.d[0]);
    return 1;
  }
  if (arr[k].note[0]) fprintf(stderr, "kiln run: %s: %s\n", eq + 1, arr[k].note);
  return 0;
}

static int kiln_read_inputs(const rt_model_desc *d, const kiln_opts *o, rt_npy *arr) {
  for (int i = 0; i < o->ninputs; i++)
    if (kiln_read_input(d, o->inputs[i], arr)) return 1;
  for (int k = 0; k < d->predict.ninputs; k++) {
    const rt_tensor_info *t = &d->tensors[d->predict.inputs[k]];
    char want[300];
    kiln_tensor_str(t, want, sizeof want);
    if (!arr[k].data) return fprintf(stderr, "kiln run: missing --input %s=FILE.npy (%s)\n", t->name, want), 1;
  }
  return 0;
}

/* Bounded dims: the extents the inputs' shapes give (every dim at its bound without any). */
static int kiln_input_extents(const rt_model_desc *d, const rt_npy *arr, int64_t *ext) {
  k_shape shapes[64];
  char err[1024];
  for (int k = 0; k < d->predict.ninputs && k < 64; k++) shapes[k] = arr[k].shape;
  if (!rt_extents_from_inputs(d, &d->predict, shapes, ext, err, sizeof err)) return 0;
  return fprintf(stderr, "kiln run: %s\n", err), 1;
}

/* Each --output names an output of predict. */
static int kiln_check_outputs(const rt_model_desc *d, const kiln_opts *o) {
  for (int i = 0; i < o->noutputs; i++) {
    const char *spec = o->outputs[i], *eq = strchr(spec, '=');
    if (kiln_find_slot(d, d->predict.outputs, d->predict.noutputs, spec, (size_t)(eq - spec)) >= 0) continue;
    fprintf(stderr, "kiln run: predict of model '%s' has no output '%.*s'; its outputs are", d->name, (int)(eq - spec), spec);
    for (int k = 0; k < d->predict.noutputs; k++) fprintf(stderr, " %s", d->tensors[d->predict.outputs[k]].name);
    return fputc('\n', stderr), 1;
  }
  return 0;
}

static void kiln_print_output(const rt_tensor_info *t, const void *data) {
  char desc[300];
  int64_t n = k_shape_numel(&t->shape);   /* t's shape is the run's (kiln_emit_outputs) */
  kiln_tensor_str(t, desc, sizeof desc);
  printf("%s: %s =", t->name, desc);
  for (int64_t i = 0; i < n && i < 8; i++) {
    if (t->dtype == K_I32) printf(" %d", ((const int32_t *)data)[i]);
    else printf(" %.6g", ((const float *)data)[i]);
  }
  printf(n > 8 ? " ... (%lld values)\n" : "\n", (long long)n);
}

/* Writes the outputs --output names, or prints them all without --output. */
static int kiln_emit_outputs(const rt_model_desc *d, const kiln_opts *o, void *const *outs, const int64_t *ext) {
  char err[1024];
  for (int k = 0; o->noutputs == 0 && k < d->predict.noutputs; k++) {
    rt_tensor_info t = d->tensors[d->predict.outputs[k]];
    t.shape = rt_tensor_shape_at(d, d->predict.outputs[k], ext);
    kiln_print_output(&t, outs[k]);
  }
  for (int i = 0; i < o->noutputs; i++) {   /* each named, kiln_check_outputs made sure */
    const char *spec = o->outputs[i], *eq = strchr(spec, '=');
    int k = kiln_find_slot(d, d->predict.outputs, d->predict.noutputs, spec, (size_t)(eq - spec));
    rt_tensor_info at = d->tensors[d->predict.outputs[k]];
    at.shape = rt_tensor_shape_at(d, d->predict.outputs[k], ext);
    const rt_tensor_info *t = &at;
    if (rt_npy_write(eq + 1, (k_dtype)t->dtype, &t->shape, outs[k], err, sizeof err))
      return fprintf(stderr, "kiln run: %s\n", err), 1;
  }
  return 0;
}

/* Allocates the outputs, runs predict and hands the results on. */
static int kiln_predict(const rt_model_api *api, rt_model *m, const kiln_opts *o, rt_npy *ins) {
  const rt_model_desc *d = api->desc;
  const void *in_ptrs[64];
  void *outs[64] = {0};
  int64_t ext[K_MAX_BDIMS] = {0};
  int rc = kiln_input_extents(d, ins, ext);
  for (int k = 0; k < d->predict.ninputs; k++) in_ptrs[k] = ins[k].data;
  for (int k = 0; k < d->predict.noutputs && !rc; k++) {
    k_shape sh = rt_tensor_shape_at(d, d->predict.outputs[k], ext);
    int64_t n = k_shape_numel(&sh);
    if (!(outs[k] = calloc((size_t)(n ? n : 1), 4))) rc = kiln_run_error("out of memory\n");
  }
  if (!rc && d->ndims && !api->predict_at) rc = kiln_run_error("model '%s' has bounded dims, which its target does not run\n", d->name);
  for (long i = 0; !rc && i < (o->repeat ? o->repeat : 1); i++)
    if (d->ndims ? api->predict_at(m, ext, in_ptrs, outs) : api->predict(m, in_ptrs, outs))
      rc = kiln_run_error("predict failed: %s\n", api->error(m));
  if (!rc) rc = kiln_emit_outputs(d, o, outs, ext);
  for (int k = 0; k < d->predict.noutputs; k++) free(outs[k]);
  return rc;
}

/* How many parameters start from their initializers (no weights of their own in the model). */
static int kiln_drawn_params(const rt_model_desc *d) {
  int n = 0;
  for (int i = 0; i < d->ntensors; i++) n += d->tensors[i].role == RT_ROLE_PARAM && !d->tensors[i].data;
  return n;
}

/* Creates the model from a descriptor and runs predict once on the --input files. */
static int kiln_run_api(const rt_model_api *api, const kiln_opts *o) {
  const rt_model_desc *d = api->desc;
  if (d->predict.ninputs > 64 || d->predict.noutputs > 64)
    return fprintf(stderr, "kiln run: predict of '%s' takes more than 64 inputs or outputs\n", d->name), 1;
  rt_npy ins[64];
  memset(ins, 0, sizeof ins);
  int rc = kiln_check_outputs(d, o) || kiln_read_inputs(d, o, ins);
  /* The runtime that runs the model (this process's, or the one inside LIB.so) reads it at create. */
  if (!rc && o->profile) setenv("KILN_PROFILE", o->profile, 1);
  rt_model *m = rc ? NULL : api->create(d, o->seed);
  if (!rc && !m && d->target == RT_TARGET_CUDA) rc = kiln_run_error("cannot create model '%s': %s\n", d->name, api->error(NULL));
  if (!rc && !m) rc = kiln_run_error("out of memory creating model '%s'\n", d->name);
  if (!rc && o->weights && api->load(m, o->weights))
    rc = kiln_run_error("%s: %s\n", o->weights, api->error(m));
  int drawn = kiln_drawn_params(d);
  if (!rc && !o->weights && drawn)   /* easy to miss: the outputs then mean nothing trained */
    fprintf(stderr, "kiln run: no --weights: %d parameter%s of '%s' start from %s initializers (seed %llu)\n", drawn,
            drawn == 1 ? "" : "s", d->name, drawn == 1 ? "its" : "their", (unsigned long long)o->seed);
  if (!rc) rc = kiln_predict(api, m, o, ins);
  if (m) api->destroy(m);
  for (int k = 0; k < 64; k++)
    if (ins[k].data) rt_npy_free(&ins[k]);
  return rc;
}

/* A .kiln model JIT-compiled in this process and handed to `use` with the runtime linked into
 * kiln itself (the descriptor's kernel pointers are this process's kernels). */
void kiln_jit_graph(ir_graph *lowered, const kiln_opts *o, ir_diag *d,
                    int (*use)(const rt_model_api *api, const kiln_opts *o)) {
  cg_build b = {0};
  char err[2048];
  if (!kiln_build_model(lowered, o, true, d, &b)) {
    if (cg_build_jit(&b, err, sizeof err)) kiln_cg_error(d, err);
    else {
      rt_model_api api = rt_model_local_api(b.desc);
      if (use(&api, o)) d->errors++;   /* already reported */
    }
  }
  cg_build_free(&b);
}

/* kiln run FILE.kiln: the model JIT-compiled, then predict once. */
static void kiln_run_graph(ir_graph *lowered, const kiln_opts *o, ir_diag *d) { kiln_jit_graph(lowered, o, d, kiln_run_api); }

/* kiln run LIB.so: the generated object through its name-free kiln_model descriptor. */
static int kiln_run_so(const kiln_opts *o) {
  char path[4096];
  snprintf(path, sizeof path, "%s%s", strchr(o->file, '/') ? "" : "./", o->file);
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!h) return fprintf(stderr, "kiln run: cannot load %s: %s\n", o->file, dlerror()), 1;
  const rt_model_api *api = dlsym(h, "kiln_model");
  int rc = 0;
  if (!api) rc = kiln_run_error("%s is not a Kiln model (no kiln_model symbol)\n", o->file);
  else if (!api->abi || strcmp(api->abi, RT_MODEL_ABI) != 0 || !api->desc || !api->desc->abi ||
           strcmp(api->desc->abi, RT_MODEL_ABI) != 0)
    rc = kiln_run_error("%s was built for ABI '%s'; this kiln reads '%s' (recompile it)\n", o->file,
                 api->abi ? api->abi : "?", RT_MODEL_ABI);
  else rc = kiln_run_api(api, o);
  dlclose(h);
  return rc;
}

static int kiln_run_main(int argc, char **argv) {
  kiln_opts o = {.cmd = "run", .print_after = -1, .opt_level = 2};
  int rc = kiln_args(argc, argv, &o);
  if (rc) return rc;
  if (kiln_ends_with(o.file, ".kiln") || onnx_is_onnx_path(o.file)) {
    o.one_model = "run";
    return kiln_for_models(&o, kiln_run_graph);
  }
  if (o.ndefs || o.model)
    return fprintf(stderr, "kiln run: -D and --model apply to .kiln files; %s is already compiled\n", o.file),
           kiln_free_defs(&o, 2);
  return kiln_run_so(&o);
}

int main(int argc, char **argv) {
  if (argc < 2) return kiln_usage(stderr), 2;
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) return kiln_usage(stdout), 0;
  if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) return printf("kiln %s\n", rt_version()), 0;
  const kiln_command *c = kiln_find_command(argv[1]);
  if (!c) {
    const char *names[KILN_NCOMMANDS];
    for (int i = 0; i < KILN_NCOMMANDS; i++) names[i] = kiln_commands[i].name;
    const char *sug = ir_suggest(argv[1], names, KILN_NCOMMANDS);
    fprintf(stderr, "kiln: unknown command '%s'%s%s%s (see kiln --help)\n", argv[1], sug ? "; did you mean '" : "",
            sug ? sug : "", sug ? "'?" : "");
    return 2;
  }
  if (kiln_wants_help(argc - 1, argv + 1)) return fputs(c->usage, stdout), 0;
  return c->run(argc - 1, argv + 1);
}
