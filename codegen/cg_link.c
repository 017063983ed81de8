/* cg_link.c — the system C compiler as linker: model object (+ weights object) + runtime and
 * kernel archives + BLAS, libm, pthreads into a self-contained shared object. The compiler
 * runs through posix_spawn (no shell, so no quoting of paths), its output becomes the error
 * message, and the result is written to a temporary name and renamed, so a failed link
 * leaves nothing. */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cg.h"

extern char **environ;

/* Where the archives are: $KILN_LIB_DIR, else the caller's folder (an installed libkiln's
 * lib/kiln), else the compile-time paths from CMake (the build tree). */
#ifndef KILN_RUNTIME_ARCHIVE
#define KILN_RUNTIME_ARCHIVE "libkiln_runtime.a"
#endif
#ifndef KILN_KERNELS_ARCHIVE
#define KILN_KERNELS_ARCHIVE "libkiln_kernels.a"
#endif
#ifndef KILN_BLAS_LIB
#define KILN_BLAS_LIB "-lopenblas"
#endif

#ifndef KILN_RUNTIME_CUDA_ARCHIVE
#define KILN_RUNTIME_CUDA_ARCHIVE "libkiln_runtime_cuda.a"
#endif
#define CG_MAX_ARGS 48

typedef struct {
  char *argv[CG_MAX_ARGS + 1];
  int argc;
  char *cc_copy;               /* $CC split in place */
  char runtime[4096], kernels[4096], cuda[4096];
  int target;                  /* RT_TARGET_*: CUDA adds the CUDA runtime's archive and libdl */
} cg_link_cmd;

static void cg_arg(cg_link_cmd *c, const char *a) {
  if (c->argc < CG_MAX_ARGS) c->argv[c->argc++] = (char *)a;
  c->argv[c->argc] = NULL;
}

/* Whether an executable file `name` is in one of $PATH's folders. */
static bool cg_on_path(const char *name) {
  const char *path = getenv("PATH");
  char file[4096];
  for (const char *p = path; p && *p;) {
    size_t len = strcspn(p, ":");
    if (len && (size_t)snprintf(file, sizeof file, "%.*s/%s", (int)len, p, name) < sizeof file && access(file, X_OK) == 0)
      return true;
    p += len + (p[len] == ':');
  }
  return false;
}

/* $CC may carry words ("ccache cc", "cc -m64") and is used as it is. The default is cc, with
 * -fuse-ld=lld when ld.lld is on $PATH (where gcc and clang look for it): LLVM's linker
 * copies a model's large weights section (cg_weights.c) several times faster than GNU ld,
 * which took 40% of vgg11_bn's compile (531 MB of weights; bench/README.md). */
static int cg_cc_words(cg_link_cmd *c) {
  const char *cc = getenv("CC");
  bool user = cc && *cc;
  c->cc_copy = strdup(user ? cc : "cc");
  if (!c->cc_copy) return 1;
  for (char *save = NULL, *w = strtok_r(c->cc_copy, " \t", &save); w; w = strtok_r(NULL, " \t", &save))
    cg_arg(c, w);
  if (!user && cg_on_path("ld.lld")) cg_arg(c, "-fuse-ld=lld");
  return c->argc == 0;
}

static void cg_archives(cg_link_cmd *c, const char *lib_dir) {
  const char *dir = getenv("KILN_LIB_DIR");
  if (!dir || !*dir) dir = lib_dir;
  if (dir && *dir) {
    snprintf(c->runtime, sizeof c->runtime, "%s/libkiln_runtime.a", dir);
    snprintf(c->kernels, sizeof c->kernels, "%s/libkiln_kernels.a", dir);
    snprintf(c->cuda, sizeof c->cuda, "%s/libkiln_runtime_cuda.a", dir);
  } else {
    snprintf(c->cuda, sizeof c->cuda, "%s", KILN_RUNTIME_CUDA_ARCHIVE);
    snprintf(c->runtime, sizeof c->runtime, "%s", KILN_RUNTIME_ARCHIVE);
    snprintf(c->kernels, sizeof c->kernels, "%s", KILN_KERNELS_ARCHIVE);
  }
}

/* cc -shared -o TMP OBJ... [WEIGHTS] runtime.a kernels.a BLAS -lm -lpthread: archive members are
 * hidden (--exclude-libs), and the objects export only NAME_* and kiln_model (cg_aot.c gives
 * everything else hidden visibility, as cg_weights.c its symbol); --no-undefined turns a
 * missing kernel into a link error instead of a dlopen failure. */
static int cg_build_cmd(cg_link_cmd *c, const char *const *objs, const char *weights, const char *tmp, const char *lib_dir) {
  if (cg_cc_words(c)) return 1;
  cg_archives(c, lib_dir);
  const char *head[] = {"-shared", "-o", tmp};
  for (int i = 0; i < 3; i++) cg_arg(c, head[i]);
  for (int i = 0; objs[i]; i++) cg_arg(c, objs[i]);
  if (weights) cg_arg(c, weights);
  if (c->target == RT_TARGET_CUDA) cg_arg(c, c->cuda), cg_arg(c, "-ldl");
  const char *fixed[] = {c->runtime, c->kernels, KILN_BLAS_LIB, "-lm",
                         "-lpthread", "-Wl,--exclude-libs,ALL", "-Wl,--no-undefined", "-Wl,--as-needed",
#ifdef KILN_SANITIZE
                         KILN_SANITIZE_FLAG,
#endif
                         NULL};
  for (int i = 0; fixed[i]; i++) cg_arg(c, fixed[i]);
  return 0;
}

/* Reads everything the child writes, keeping what fits in err. */
static void cg_drain(int fd, char *err, size_t n) {
  size_t len = 0;
  char buf[4096];
  ssize_t r;
  while ((r = read(fd, buf, sizeof buf)) != 0) {
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) break;
    size_t k = (size_t)r < n - 1 - len ? (size_t)r : n - 1 - len;
    memcpy(err + len, buf, k);
    len += k;
  }
  err[len] = 0;
  while (len && (err[len - 1] == '\n' || err[len - 1] == ' ')) err[--len] = 0;
}

/* Runs argv with stdout and stderr into a pipe; the exit status, or -1. */
static int cg_spawn(char *const *argv, char *out, size_t n) {
  int fds[2];
  if (pipe(fds)) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc) {
    close(fds[0]);
    snprintf(out, n, "cannot run '%s': %s", argv[0], strerror(rc));
    return -1;
  }
  cg_drain(fds[0], out, n);
  close(fds[0]);
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The message for a failed link: the command's first words, then what it printed. */
static void cg_link_error(const cg_link_cmd *c, int status, const char *log, char *err, size_t n) {
  const char *cc = c->argv[0] ? c->argv[0] : "$CC";
  if (status < 0 && *log) snprintf(err, n, "linking failed: %s", log);
  else if (!*c->runtime) snprintf(err, n, "linking failed (%s exited with %d)%s%s", cc, status, *log ? ":\n" : "", log);
  else snprintf(err, n, "linking failed (%s exited with %d; archives %s, %s)%s%s", cc, status,
                c->runtime, c->kernels, *log ? ":\n" : "", log);
}

static int cg_temp_path(const char *so_path, char *tmp, size_t n) {
  if ((size_t)snprintf(tmp, n, "%s.tmpXXXXXX", so_path) >= n) return 1;
  int fd = mkstemp(tmp);
  if (fd < 0) return 1;
  close(fd);
  return 0;
}

/* Builds the command (shared, or relocatable for --emit obj), runs it into a temporary name
 * beside out and renames that into place; mode is the output's permissions. */
static int cg_link_to(const char *const *objs, const char *weights, const char *out, const char *lib_dir, bool shared,
                      mode_t mode, int target, char *err, size_t n) {
  char tmp[4096], log[8192] = "";
  if (cg_temp_path(out, tmp, sizeof tmp))
    return snprintf(err, n, "cannot write '%s': %s", out, strerror(errno)), 1;
  cg_link_cmd c = {.argc = 0, .target = target};
  int rc;
  if (shared) rc = cg_build_cmd(&c, objs, weights, tmp, lib_dir) ? -1 : cg_spawn(c.argv, log, sizeof log);
  else {
    rc = cg_cc_words(&c) ? -1 : 0;
    const char *args[] = {"-r", "-nostdlib", "-o", tmp, objs[0], weights};
    for (int i = 0; !rc && i < 6 && args[i]; i++) cg_arg(&c, args[i]);
    if (!rc) rc = cg_spawn(c.argv, log, sizeof log);
  }
  if (rc != 0) cg_link_error(&c, rc, log, err, n);
  mode_t um = umask(0);
  umask(um);
  if (rc == 0 && chmod(tmp, mode & ~um)) rc = 1, snprintf(err, n, "cannot write '%s': %s", tmp, strerror(errno));
  if (rc == 0 && rename(tmp, out))
    rc = 1, snprintf(err, n, "cannot write '%s': %s", out, strerror(errno));
  if (rc != 0) unlink(tmp);
  free(c.cc_copy);
  return rc != 0;
}

int cg_link_shared(const char *obj, const char *weights, const char *so_path, const char *lib_dir, char *err, size_t n) {
  const char *objs[] = {obj, NULL};
  return cg_link_to(objs, weights, so_path, lib_dir, true, 0777, RT_TARGET_CPU, err, n);
}

int cg_link_shared_parts(const char *const *objs, const char *weights, const char *so_path, const char *lib_dir, int target,
                         char *err, size_t n) {
  return cg_link_to(objs, weights, so_path, lib_dir, true, 0777, target, err, n);
}

int cg_link_relocatable(const char *obj, const char *weights, const char *out, char *err, size_t n) {
  const char *objs[] = {obj, NULL};
  return cg_link_to(objs, weights, out, NULL, false, 0666, RT_TARGET_CPU, err, n);
}
