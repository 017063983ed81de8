/* k_parallel.h — the one way a kernel splits its work across threads. Kernels are the lowest
 * layer, so the parallel loop lives here and the runtime sizes it.
 *
 * Work [0, n) is cut into chunks of `grain` items (the last may be shorter). The chunks depend
 * only on n and grain, never on the thread count: a kernel that reduces within each chunk and
 * then combines the chunk results in chunk order gets the same bits with any number of
 * threads.
 *
 * Behind it sits one process-wide pool of k_parallel_threads() - 1 workers (the calling thread
 * is the last one), created on the first loop that has more than one chunk. Idle workers poll
 * for the next loop for 0.2 ms (waking a sleeping thread costs tens of microseconds, a short
 * loop's length), then sleep on a condition variable. The pool serves one loop at a time: a loop started while another
 * thread's loop holds it, and any loop started from inside a chunk, runs on its own calling
 * thread, so concurrent callers never wait for each other and nothing can deadlock. The
 * workers stop when the object holding this code is unloaded (dlclose) or the process exits;
 * loops after that run on the caller. */
#ifndef KILN_K_PARALLEL_H
#define KILN_K_PARALLEL_H

#include <stdint.h>

/* Does items [lo, hi) of the work; ctx is the kernel's own argument block. */
typedef void (*k_range_fn)(void *ctx, int64_t lo, int64_t hi);

/* Number of chunks k_parallel_for makes of n items with this grain (grain < 1 counts as 1). */
static inline int64_t k_parallel_chunks(int64_t n, int64_t grain) {
  if (grain < 1) grain = 1;
  return n <= 0 ? 0 : (n + grain - 1) / grain;
}

/* Calls fn once per chunk, [c*grain, min(n, (c+1)*grain)), and returns when every chunk is
 * done. Chunks run in any order and on any thread; each thread starts on its own contiguous
 * share of them, the same share in every loop (the caller the first), so two loops that cut
 * the same memory alike mostly keep each part of it on one core. Safe to call from inside a chunk (the
 * nested loop then runs on the calling thread) and from several threads at once. */
void k_parallel_for(int64_t n, int64_t grain, k_range_fn fn, void *ctx);

/* 1 inside a chunk of a loop of more than one chunk (whichever thread runs it), where a
 * nested loop runs on its caller: a kernel may then choose a coarser split, and since this
 * does not depend on the thread count, neither do its bits. */
int k_parallel_nested(void);

/* The threads k_parallel_for may use, the caller's included: KILN_NUM_THREADS when it is set
 * and valid, else the CPUs this process may run on. Read once, at the first use (or set by
 * k_parallel_set_threads). Each shared object that links the kernels (every generated model
 * .so) has its own pool of this size. */
int k_parallel_threads(void);

/* KILN_NUM_THREADS parsed strictly (a whole number in 1..1024), 0 when unset; an invalid value
 * is reported on stderr once per call and reads as 0. The one parse of the variable: the
 * runtime sizes its engine with it too. */
int k_parallel_env_threads(void);

/* How many parts to cut each of `tasks` tasks of `rows` rows into when a loop has fewer than 4
 * tasks a thread (batch 1: a layer with few channel blocks keeps one thread busy): enough for
 * 4 a thread, each part at least min_work of row_work a row, at most one row a part; 1 with one
 * thread. The caller's tasks must compute each row alone, so the cut changes no bit. */
static inline int64_t k_parallel_row_parts(int64_t tasks, int64_t rows, int64_t row_work, int64_t min_work) {
  int64_t threads = k_parallel_threads();
  if (threads < 2 || tasks <= 0 || tasks >= 4 * threads) return 1;
  int64_t want = (4 * threads + tasks - 1) / tasks, most = rows * row_work / min_work;
  if (want > most) want = most;
  if (want > rows) want = rows;
  return want > 1 ? want : 1;
}

/* Parts to cut each of a loop's tasks' rows into so that the loop can run row-major: every
 * part a thread's band of rows (part-major task order, with k_parallel_for's homes each thread
 * then takes the same rows of every layer, and reads mostly what it wrote itself), when the
 * batch (`samples`) is smaller than the thread count; `parts` rounded up to a multiple of the
 * threads, at most `rows`. 0 when the loop should keep its own order (one thread, a batch that
 * covers the threads, or KILN_ROW_MAJOR=0). */
int64_t k_parallel_row_major(int64_t samples, int64_t rows, int64_t parts);

/* The CPUs this process may run on (sched_getaffinity), at least 1. */
int k_parallel_cpu_count(void);

/* Resizes the pool to n threads (n < 1: back to the default above): waits for the loop in
 * flight, stops the workers, and the next loop starts n - 1 new ones. For tests and tools
 * that compare thread counts in one process; results do not depend on it. */
void k_parallel_set_threads(int n);

/* Background work for the pool's idle moments: a worker polling for the next loop, and a
 * loop's caller polling for the workers to finish their chunks, call piece(ctx) between their
 * polls. A piece is small (a few microseconds: a thread inside one joins the next loop, or
 * returns from its loop, that much later) and returns 0 once nothing is left; pieces may run
 * on several threads at once. At most one background job at a time; `bg` stays the poster's
 * and must live until withdrawn. Nothing runs pieces outside the pool's waits, threads that
 * sleep run none, and with one thread there are no waits: the poster does what is left itself
 * after withdrawing. (kiln train gathers the next batch this way, in the gaps a short step
 * leaves between its loops, on a machine with no core free for a loader thread.) */
typedef struct {
  int (*piece)(void *ctx);
  void *ctx;
} k_background;
void k_parallel_background_post(const k_background *bg);

/* Withdraws the posted background job, and returns once no worker runs a piece of it. */
void k_parallel_background_withdraw(void);

#endif
