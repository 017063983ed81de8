/* pass_stats.c — what `kiln passes --stats` prints: per pass the node count, fused groups,
 * in-place pairs, values kept blocked, bytes freed by pruning and time; then the plan's figures (naive bytes,
 * arena bytes, their ratio) and its table of buffers with offsets and lifetimes. */
#include "passes.h"

void pass_print_bytes(FILE *out, int64_t b) {
  if (b >= 1 << 20) fprintf(out, "%.2f MiB", (double)b / (1 << 20));
  else if (b >= 1 << 10) fprintf(out, "%.1f KiB", (double)b / (1 << 10));
  else fprintf(out, "%lld B", (long long)b);
}

static void pass_print_table(const pass_ctx *cx, FILE *out) {
  fprintf(out, "%-10s %7s %6s %8s %8s %14s %9s\n", "pass", "nodes", "fused", "inplace", "blocked", "pruned bytes", "ms");
  for (int i = 0; i < PASS_COUNT; i++) {
    const pass_stats *s = &cx->stats[i];
    if (!s->ran) continue;
    bool off = pass_table[i].optional && (cx->disabled >> i & 1);
    fprintf(out, "%-10s %7d %6d %8d %8d %14lld %9.3f%s\n", pass_table[i].name, s->nodes, s->fused_groups,
            s->inplace_pairs, s->blocked, (long long)s->bytes_freed, s->ms, off ? "  (switched off)" : "");
  }
}

static void pass_print_buffers(const ir_graph *g, const ir_plan *p, FILE *out) {
  fprintf(out, "\n%-40s %12s %12s  %s\n", "buffer", "offset", "bytes", "lifetime (node positions)");
  for (int t = 0; t < ir_ntensors(g); t++) {
    const ir_buffer *b = &p->buf[t];
    if (b->cls != IR_MEM_ARENA) continue;
    fprintf(out, "%-40s %12lld %12lld  [%d, %d]", ir_tensor_at(g, t)->name, (long long)b->offset,
            (long long)b->bytes, b->first, b->last);
    if (b->share >= 0) fprintf(out, "  reuses %s", ir_tensor_at(g, b->share)->name);
    if (b->within >= 0) fprintf(out, "  inside %s at byte %lld", ir_tensor_at(g, b->within)->name, (long long)b->within_at);
    if (b->sample_bytes > 0) fprintf(out, ", samples %lld bytes apart", (long long)b->sample_bytes);
    fputc('\n', out);
  }
  for (int i = 0; i < ir_nnodes(g); i++) {
    if (!p->temp_bytes[i]) continue;
    char label[160];
    snprintf(label, sizeof label, "workspace of %s", ir_node_at(g, i)->name);
    fprintf(out, "%-40s %12lld %12lld  [%d, %d]\n", label, (long long)p->temp_offset[i], (long long)p->temp_bytes[i], i, i);
  }
}

void pass_print_stats(const ir_graph *g, const pass_ctx *cx, FILE *out) {
  fprintf(out, "model %s, %s\n\n", g->name, g->mode == IR_MODE_TRAIN ? "train_step" : "predict");
  pass_print_table(cx, out);
  const ir_plan *p = g->plan;
  if (!p) return;
  fprintf(out, "\nmemory: naive ");
  pass_print_bytes(out, p->naive_bytes);
  fprintf(out, " (every intermediate%s and workspace its own buffer), planned arena ", g->mode == IR_MODE_TRAIN ? ", gradient" : "");
  pass_print_bytes(out, p->arena_bytes);
  fprintf(out, ": %.1f%% of naive\n", p->naive_bytes ? 100.0 * (double)p->arena_bytes / (double)p->naive_bytes : 0.0);
  pass_print_buffers(g, p, out);
}
