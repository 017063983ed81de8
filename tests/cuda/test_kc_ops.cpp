/* test_kc_ops.cpp — the GPU library kernels (kernels/cuda/kc_ops.cu through their host halves
 * in runtime/cuda/rtc_ops_lib.c) against the CPU kernels (kernels/k_*.c), on the host: each
 * case builds random inputs, runs k_<op>_forward/backward and rtc_<op>_* on copies, and
 * compares every output and every input (aux updates, in-place writes). Moves, maxima and
 * dropout masks must be the same bits; anything with a sum may differ by its summation
 * order (the CPU folds in vector lanes, the GPU thread sequentially), so those compare to a
 * relative 2e-5 plus an absolute 2e-6. */
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "kc_host.h"

extern "C" {
#include "rtc_ops_lib.h"
#define K_OP(op) int k_##op##_forward(const k_call *c); int k_##op##_backward(const k_call *c);
K_OP(softmax) K_OP(log_softmax) K_OP(softmax_cross_entropy) K_OP(pooling) K_OP(batch_norm)
K_OP(layer_norm) K_OP(embedding) K_OP(dropout) K_OP(reshape) K_OP(flatten) K_OP(expand_dims)
K_OP(squeeze) K_OP(transpose) K_OP(broadcast_to) K_OP(slice) K_OP(concat) K_OP(sum) K_OP(mean)
K_OP(max) K_OP(min) K_OP(prod) K_OP(logsumexp) K_OP(norm) K_OP(pad)
#undef K_OP
size_t k_prod_temp_bytes(const k_shape *args, const void *param);
size_t k_logsumexp_temp_bytes(const k_shape *args, const void *param);
void k_sgd_update(float *w, const float *g, float *mom, int64_t n, float lr, const k_sgd_param *p);
void k_adam_update(float *w, const float *g, float *m, float *v, int64_t n, float lr, const k_adam_param *p,
                   int64_t step, int decoupled);
}

static int g_fail, g_cases;
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static uint32_t rnd32() {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (uint32_t)(g_rng >> 16);
}
static float rndf(float lo, float hi) { return lo + (hi - lo) * (float)(rnd32() & 0xffffff) / 16777216.0f; }

static k_shape S(std::initializer_list<int64_t> d) {
  k_shape s = {0, {0}};
  for (int64_t v : d) s.d[s.rank++] = v;
  return s;
}

/* One tensor slot: 4-byte words (f32 or i32 bits); absent: the slot's data is NULL. */
struct Slot {
  k_shape shape;
  k_dtype dt = K_F32;
  std::vector<uint32_t> w;
  bool present = true;
};

static Slot F(k_shape s, float lo = -2.0f, float hi = 2.0f, float quant = 0.0f) {
  Slot t;
  t.shape = s;
  t.w.resize((size_t)k_shape_numel(&s));
  for (auto &x : t.w) {
    float v = rndf(lo, hi);
    if (quant > 0) v = std::floor(v / quant) * quant;    /* ties, for max and argmax */
    memcpy(&x, &v, 4);
  }
  return t;
}
static Slot I(k_shape s, int32_t lo, int32_t hi) {
  Slot t;
  t.shape = s;
  t.dt = K_I32;
  t.w.resize((size_t)k_shape_numel(&s));
  for (auto &x : t.w) x = (uint32_t)(lo + (int32_t)(rnd32() % (uint32_t)(hi - lo)));
  return t;
}
static Slot Absent(k_shape s) {
  Slot t;
  t.shape = s;
  t.present = false;
  return t;
}

struct Case {
  std::string name;
  k_fn cpu;
  rtc_op_fn gpu;
  const void *param;
  std::vector<Slot> in, out;
  std::vector<k_req> req;
  int is_train = 0;
  uint64_t seed = 0, ctr = 0;
  std::vector<std::pair<int, int>> alias;   /* (out j, in i): out j is in i's buffer */
  bool exact = false;
  size_t temp = 0;                          /* bytes of the CPU kernel's workspace */
  Case(std::string n, k_fn c, rtc_op_fn g, const void *p = nullptr) : name(n), cpu(c), gpu(g), param(p) {}
};

static bool close_enough(uint32_t a, uint32_t b, bool exact) {
  if (a == b) return true;
  if (exact) return false;
  float x, y;
  memcpy(&x, &a, 4);
  memcpy(&y, &b, 4);
  if (std::isnan(x) && std::isnan(y)) return true;
  if (std::isinf(x) || std::isinf(y)) return x == y;
  return std::fabs(x - y) <= 2e-5f * (std::fabs(x) + std::fabs(y)) + 2e-6f;
}

static void compare(const Case &cs, const char *what, int j, const std::vector<uint32_t> &a,
                    const std::vector<uint32_t> &b) {
  for (size_t i = 0; i < a.size(); i++)
    if (!close_enough(a[i], b[i], cs.exact)) {
      float x, y;
      memcpy(&x, &a[i], 4);
      memcpy(&y, &b[i], 4);
      printf("FAIL %s: %s[%d] element %zu: cpu %.9g (0x%08x) gpu %.9g (0x%08x)\n", cs.name.c_str(), what, j, i,
             (double)x, a[i], (double)y, b[i]);
      g_fail++;
      return;
    }
}

/* Buffers of one run: the inputs and outputs, outputs aliased onto inputs where asked. */
struct Run {
  std::vector<std::vector<uint32_t>> in, out;
  std::vector<void *> pin, pout;
  Run(const Case &cs) : in(cs.in.size()), out(cs.out.size()), pin(cs.in.size()), pout(cs.out.size()) {
    for (size_t i = 0; i < cs.in.size(); i++) {
      in[i] = cs.in[i].w;
      pin[i] = cs.in[i].present ? in[i].data() : nullptr;
    }
    for (size_t j = 0; j < cs.out.size(); j++) {
      out[j] = cs.out[j].w;
      pout[j] = cs.req[j] == kNullOp ? nullptr : out[j].data();
    }
    for (auto &al : cs.alias) pout[al.first] = pin[al.second];
  }
};

static void run_case(const Case &cs) {
  Run a(cs), b(cs);
  char err[256] = "";
  std::vector<k_tensor> kin, kout;
  for (size_t i = 0; i < cs.in.size(); i++) kin.push_back({a.pin[i], cs.in[i].shape, cs.in[i].dt});
  for (size_t j = 0; j < cs.out.size(); j++) kout.push_back({a.pout[j], cs.out[j].shape, cs.out[j].dt});
  k_call kc;
  memset(&kc, 0, sizeof kc);
  kc.in = kin.data();
  kc.nin = (int)kin.size();
  kc.out = kout.data();
  kc.nout = (int)kout.size();
  kc.req = cs.req.data();
  kc.param = cs.param;
  kc.seed = cs.seed;
  kc.counter = cs.ctr;
  kc.is_train = cs.is_train;
  kc.err = err;
  kc.err_len = sizeof err;
  std::vector<uint32_t> temp((cs.temp + 3) / 4 + 1, 0xffffffffu);   /* NaN-filled: no reliance on it */
  kc.temp = cs.temp ? temp.data() : nullptr;
  kc.temp_bytes = cs.temp;
  int rc_cpu = cs.cpu(&kc);

  std::vector<k_shape> ish, osh;
  std::vector<k_dtype> idt;
  for (auto &s : cs.in) ish.push_back(s.shape), idt.push_back(s.dt);
  for (auto &s : cs.out) osh.push_back(s.shape);
  rt_step st;
  memset(&st, 0, sizeof st);
  st.param = cs.param;
  kc_live live;   /* the call's values as the runtime writes them (dropout's seed and counter) */
  memset(&live, 0, sizeof live);
  live.seed = cs.seed, live.ctr = cs.ctr;
  rtc_call rc = {&st, cs.param, (int)cs.in.size(), (int)cs.out.size(), b.pin.data(), b.pout.data(), ish.data(),
                 osh.data(), idt.data(), cs.req.data(), cs.is_train, nullptr, nullptr, &live};
  rtc_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  int rc_gpu = cs.gpu(&ctx, &rc);
  g_cases++;
  if (rc_cpu || rc_gpu) {
    printf("FAIL %s: cpu rc %d (%s) gpu rc %d (%s)\n", cs.name.c_str(), rc_cpu, err, rc_gpu, ctx.err);
    g_fail++;
    return;
  }
  for (size_t j = 0; j < cs.out.size(); j++)
    if (cs.req[j] != kNullOp) compare(cs, "out", (int)j, a.out[j], b.out[j]);
  for (size_t i = 0; i < cs.in.size(); i++) compare(cs, "in", (int)i, a.in[i], b.in[i]);
}

static const k_req kReqs[] = {kWriteTo, kAddTo};
static const char *req_name(k_req r) {
  return r == kNullOp ? "null" : r == kWriteTo ? "write" : r == kWriteInplace ? "inplace" : "add";
}
static std::string nm(const char *op, int i, k_req r) {
  return std::string(op) + "#" + std::to_string(i) + "/" + req_name(r);
}

/* ---- softmax family ---- */

static void test_softmax() {
  static k_softmax_param ps[3];
  k_shape shapes[] = {S({4, 37}), S({3, 5, 6}), S({2, 70, 3})};
  int axes[] = {1, 1, 2};
  for (int t = 0; t < 3; t++)
    for (int lg = 0; lg < 2; lg++)
      for (k_req r : kReqs) {
        ps[t].axis = axes[t];
        const char *op = lg ? "log_softmax" : "softmax";
        Case f{nm(op, t, r), lg ? k_log_softmax_forward : k_softmax_forward,
               lg ? rtc_log_softmax_forward : rtc_softmax_forward, &ps[t]};
        f.in = {F(shapes[t], -5, 5)};
        f.out = {F(shapes[t])};
        f.req = {r};
        run_case(f);
        Case b{nm(op, t, r) + "/bwd", lg ? k_log_softmax_backward : k_softmax_backward,
               lg ? rtc_log_softmax_backward : rtc_softmax_backward, &ps[t]};
        b.in = {F(shapes[t]), Absent(shapes[t]), F(shapes[t], 0, 1)};
        b.out = {F(shapes[t])};
        b.req = {r};
        run_case(b);
      }
  ps[0].axis = 1;   /* in place: y onto x, gx onto og */
  Case f{"softmax/inplace", k_softmax_forward, rtc_softmax_forward, &ps[0]};
  f.in = {F(shapes[0], -5, 5)};
  f.out = {F(shapes[0])};
  f.req = {kWriteInplace};
  f.alias = {{0, 0}};
  run_case(f);
  Case b{"log_softmax/bwd/inplace", k_log_softmax_backward, rtc_log_softmax_backward, &ps[0]};
  b.in = {F(shapes[0]), Absent(shapes[0]), F(shapes[0], -3, 0)};
  b.out = {F(shapes[0])};
  b.req = {kWriteInplace};
  b.alias = {{0, 0}};
  run_case(b);
  Case n{"softmax/null", k_softmax_forward, rtc_softmax_forward, &ps[0]};
  n.in = {F(shapes[0])};
  n.out = {F(shapes[0])};
  n.req = {kNullOp};
  run_case(n);
}

static void test_sce() {
  int64_t dims[][2] = {{1, 3}, {8, 10}, {33, 129}};
  for (int t = 0; t < 3; t++)
    for (k_req r : kReqs) {
      k_shape x = S({dims[t][0], dims[t][1]}), l = S({dims[t][0]});
      Case f{nm("sce", t, r), k_softmax_cross_entropy_forward, rtc_softmax_cross_entropy_forward};
      f.in = {F(x, -8, 8), I(l, 0, (int32_t)dims[t][1])};
      f.out = {F(S({}))};
      f.req = {r};
      run_case(f);
      Case b{nm("sce", t, r) + "/bwd", k_softmax_cross_entropy_backward, rtc_softmax_cross_entropy_backward};
      b.in = {F(S({}), 0.5f, 2), F(x, -8, 8), I(l, 0, (int32_t)dims[t][1]), Absent(S({}))};
      b.out = {F(x), Absent(l)};
      b.out[1].dt = K_I32;
      b.req = {r, kNullOp};
      run_case(b);
    }
}

/* ---- layout ops ---- */

static void test_copies() {
  struct { const char *name; k_fn cf, cb; rtc_op_fn gf, gb; } ops[] = {
      {"reshape", k_reshape_forward, k_reshape_backward, rtc_reshape_forward, rtc_reshape_backward},
      {"flatten", k_flatten_forward, k_flatten_backward, rtc_flatten_forward, rtc_flatten_backward},
      {"expand_dims", k_expand_dims_forward, k_expand_dims_backward, rtc_expand_dims_forward, rtc_expand_dims_backward},
      {"squeeze", k_squeeze_forward, k_squeeze_backward, rtc_squeeze_forward, rtc_squeeze_backward}};
  k_shape x = S({2, 3, 4}), y = S({6, 4});
  static k_reshape_param rp = {{2, {6, 4}}};
  for (auto &o : ops)
    for (k_req r : {kWriteTo, kAddTo, kWriteInplace}) {
      Case f{nm(o.name, 0, r), o.cf, o.gf, &rp};
      f.in = {F(x)};
      f.out = {F(y)};
      f.req = {r};
      if (r == kWriteInplace) f.alias = {{0, 0}};
      f.exact = true;
      run_case(f);
      Case b{nm(o.name, 0, r) + "/bwd", o.cb, o.gb, &rp};
      b.in = {F(y), Absent(x), Absent(y)};
      b.out = {F(x)};
      b.req = {r};
      if (r == kWriteInplace) b.alias = {{0, 0}};
      b.exact = true;
      run_case(b);
    }
  Case i{"reshape/i32", k_reshape_forward, rtc_reshape_forward, &rp};   /* bits, not floats */
  i.in = {I(x, -1000000, 1000000)};
  i.out = {I(y, 0, 1)};
  i.req = {kWriteTo};
  i.exact = true;
  run_case(i);
}

static void test_transpose() {
  static k_transpose_param ps[] = {{{2, {1, 0}}}, {{3, {0, 2, 1}}}, {{4, {0, 2, 1, 3}}}, {{4, {3, 1, 0, 2}}}};
  k_shape xs[] = {S({5, 7}), S({2, 3, 17}), S({2, 3, 4, 5}), S({3, 1, 4, 6})};
  for (int t = 0; t < 4; t++)
    for (k_req r : kReqs) {
      k_shape y = xs[t];
      for (int k = 0; k < y.rank; k++) y.d[k] = xs[t].d[ps[t].axes.v[k]];
      Case f{nm("transpose", t, r), k_transpose_forward, rtc_transpose_forward, &ps[t]};
      f.in = {F(xs[t])};
      f.out = {F(y)};
      f.req = {r};
      f.exact = true;
      run_case(f);
      Case b{nm("transpose", t, r) + "/bwd", k_transpose_backward, rtc_transpose_backward, &ps[t]};
      b.in = {F(y), Absent(xs[t]), Absent(y)};
      b.out = {F(xs[t])};
      b.req = {r};
      b.exact = true;
      run_case(b);
    }
}

static void test_broadcast_to() {
  static k_broadcast_to_param ps[3];
  k_shape xs[] = {S({3, 1}), S({4}), S({2, 1, 5, 1})}, ys[] = {S({3, 6}), S({2, 3, 4}), S({2, 3, 5, 4})};
  for (int t = 0; t < 3; t++)
    for (k_req r : kReqs) {
      ps[t].shape.n = ys[t].rank;
      for (int k = 0; k < ys[t].rank; k++) ps[t].shape.v[k] = ys[t].d[k];
      Case f{nm("broadcast_to", t, r), k_broadcast_to_forward, rtc_broadcast_to_forward, &ps[t]};
      f.in = {F(xs[t])};
      f.out = {F(ys[t])};
      f.req = {r};
      f.exact = r != kAddTo;
      run_case(f);
      Case b{nm("broadcast_to", t, r) + "/bwd", k_broadcast_to_backward, rtc_broadcast_to_backward, &ps[t]};
      b.in = {F(ys[t]), Absent(xs[t]), Absent(ys[t])};
      b.out = {F(xs[t])};
      b.req = {r};
      run_case(b);
    }
}

static void test_slice() {
  static k_slice_param ps[] = {{1, 2, 9, 1}, {0, 1, 5, 2}, {2, 0, 7, -3}, {1, 0, 4, -1}};
  k_shape xs[] = {S({3, 10, 2}), S({6, 4}), S({2, 3, 7}), S({2, 4, 3})};
  for (int t = 0; t < 4; t++)
    for (k_req r : kReqs) {
      const k_slice_param &p = ps[t];
      int64_t as = p.step > 0 ? p.step : -p.step, n = (p.end - p.begin + as - 1) / as;
      k_shape y = xs[t];
      y.d[p.axis] = n;
      Case f{nm("slice", t, r), k_slice_forward, rtc_slice_forward, &ps[t]};
      f.in = {F(xs[t])};
      f.out = {F(y)};
      f.req = {r};
      f.exact = true;
      run_case(f);
      Case b{nm("slice", t, r) + "/bwd", k_slice_backward, rtc_slice_backward, &ps[t]};
      b.in = {F(y), Absent(xs[t]), Absent(y)};
      b.out = {F(xs[t])};
      b.req = {r};
      b.exact = true;
      run_case(b);
    }
}

static void test_concat() {
  static k_concat_param ps[] = {{0}, {1}, {2}};
  for (int t = 0; t < 3; t++)
    for (k_req r : kReqs) {
      k_shape a = S({2, 3, 4}), b2 = a, c = a, y = a;
      b2.d[t] = 1;
      c.d[t] = 5;
      y.d[t] = a.d[t] + 1 + 5;
      Case f{nm("concat", t, r), k_concat_forward, rtc_concat_forward, &ps[t]};
      f.in = {F(a), F(b2), F(c)};
      f.out = {F(y)};
      f.req = {r};
      f.exact = true;
      run_case(f);
      Case b{nm("concat", t, r) + "/bwd", k_concat_backward, rtc_concat_backward, &ps[t]};
      b.in = {F(y), Absent(a), Absent(b2), Absent(c), Absent(y)};
      b.out = {F(a), F(b2), F(c)};
      b.req = {r, kNullOp, r == kAddTo ? kWriteTo : kAddTo};
      b.exact = true;
      run_case(b);
    }
}

/* ---- reductions ---- */

static k_shape reduced(const k_shape &x, const k_reduce_param &p) {
  k_shape y = {0, {0}};
  for (int i = 0; i < x.rank; i++) {
    bool red = false;
    for (int k = 0; k < p.axis.n; k++) red |= p.axis.v[k] == i;
    if (!red) y.d[y.rank++] = x.d[i];
    else if (p.keepdims) y.d[y.rank++] = 1;
  }
  return y;
}

static void test_reduce() {
  static k_reduce_param ps[] = {{{1, {1}}, 0, 0}, {{2, {0, 2}}, 1, 0}, {{3, {0, 1, 2}}, 0, 0}, {{1, {2}}, 1, 0},
                                {{2, {1, 3}}, 0, 0}};
  k_shape xs[] = {S({4, 9, 3}), S({3, 5, 7}), S({2, 3, 4}), S({5, 2, 33}), S({2, 3, 4, 5})};
  struct { const char *name; k_fn cf, cb; rtc_op_fn gf, gb; } ops[] = {
      {"sum", k_sum_forward, k_sum_backward, rtc_sum_forward, rtc_sum_backward},
      {"mean", k_mean_forward, k_mean_backward, rtc_mean_forward, rtc_mean_backward},
      {"max", k_max_forward, k_max_backward, rtc_max_forward, rtc_max_backward}};
  for (auto &o : ops)
    for (int t = 0; t < 5; t++)
      for (k_req r : kReqs) {
        bool is_max = o.cf == k_max_forward;
        k_shape y = reduced(xs[t], ps[t]);
        Slot x = F(xs[t], -2, 2, is_max ? 0.5f : 0.0f);
        Case f{nm(o.name, t, r), o.cf, o.gf, &ps[t]};
        f.in = {x};
        f.out = {F(y)};
        f.req = {r};
        f.exact = is_max && r == kWriteTo;
        run_case(f);
        Case b{nm(o.name, t, r) + "/bwd", o.cb, o.gb, &ps[t]};
        Slot yv = F(y);
        if (is_max) {     /* y must be x's max, so that the ties count */
          k_tensor ti = {x.w.data(), x.shape, K_F32}, to = {yv.w.data(), y, K_F32};
          k_req w = kWriteTo;
          k_call kc;
          memset(&kc, 0, sizeof kc);
          kc.in = &ti, kc.nin = 1, kc.out = &to, kc.nout = 1, kc.req = &w, kc.param = &ps[t];
          k_max_forward(&kc);
          b.in = {F(y), x, yv};
        } else {
          b.in = {F(y), Absent(xs[t]), Absent(y)};
        }
        b.out = {F(xs[t])};
        b.req = {r};
        run_case(b);
      }
}

/* ---- min, prod, logsumexp, norm ---- */

/* The flat indices of x in each group of the reduction, groups in output order, each in
 * row-major order. */
static std::vector<std::vector<int64_t>> groups_of(const k_shape &x, const k_reduce_param &p) {
  k_shape keep = x;
  for (int k = 0; k < p.axis.n; k++) keep.d[p.axis.v[k]] = 1;
  std::vector<std::vector<int64_t>> g((size_t)k_shape_numel(&keep));
  for (int64_t i = 0; i < k_shape_numel(&x); i++) {
    int64_t q = i, gi = 0, st = 1;
    for (int a = x.rank - 1; a >= 0; a--) {
      int64_t c = q % x.d[a];
      q /= x.d[a];
      gi += (keep.d[a] == 1 ? 0 : c) * st;
      st *= keep.d[a];
    }
    g[(size_t)gi].push_back(i);
  }
  return g;
}

static void set_f(Slot &t, int64_t i, float v) { memcpy(&t.w[(size_t)i], &v, 4); }

/* Zeros planted per group, cycling: one, two, none, the whole group. */
static void plant_zeros(Slot &x, const k_reduce_param &p, int shift) {
  auto g = groups_of(x.shape, p);
  for (size_t k = 0; k < g.size(); k++) {
    int pat = (int)((k + (size_t)shift) % 4);
    size_t nz = pat == 0 ? 1 : pat == 1 ? 2 : pat == 2 ? 0 : g[k].size();
    for (size_t j = 0; j < nz && j < g[k].size(); j++) set_f(x, g[k][(j * 7 + k) % g[k].size()], 0.0f);
  }
}

/* Values of magnitude [0.5, 1.5) with either sign: products of dozens stay finite. */
static Slot signed_mag(k_shape s) {
  Slot t = F(s, 0.5f, 1.5f);
  for (auto &w : t.w)
    if (rnd32() & 1) w ^= 0x80000000u;
  return t;
}

static Slot cpu_forward(k_fn f, const void *param, const Slot &x, k_shape y, size_t temp) {
  Slot out = F(y);
  std::vector<uint32_t> tmp(temp / 4 + 1);
  k_tensor ti = {(void *)x.w.data(), x.shape, K_F32}, to = {out.w.data(), y, K_F32};
  k_req w = kWriteTo;
  char err[128];
  k_call kc;
  memset(&kc, 0, sizeof kc);
  kc.in = &ti, kc.nin = 1, kc.out = &to, kc.nout = 1, kc.req = &w, kc.param = param;
  kc.temp = tmp.data(), kc.temp_bytes = temp, kc.err = err, kc.err_len = sizeof err;
  if (f(&kc)) printf("  cpu forward failed: %s\n", err);
  return out;
}

/* Bits where the CPU folds in our order: its column form (innermost axis kept) walks the
 * reduced positions in row-major order, as the GPU's thread does; with the innermost axis
 * reduced it folds in K_LANES lanes, so sums and products differ by their order (2e-5
 * relative). min, the gradients from a given y (logsumexp, norm, min) and every move are bits. */
static void test_reduce_more() {
  static k_reduce_param ps[] = {{{1, {1}}, 0, 0},       {{2, {0, 2}}, 1, 0}, {{3, {0, 1, 2}}, 0, 0},
                                {{1, {2}}, 1, 0},       {{2, {1, 3}}, 0, 0}, {{1, {0}}, 1, 0},
                                {{2, {0, 1}}, 1, 0},    {{1, {1}}, 0, 0}};
  k_shape xs[] = {S({4, 9, 3}), S({3, 5, 7}), S({2, 3, 4}), S({5, 2, 33}), S({2, 3, 4, 5}), S({6, 5}),
                  S({3, 4, 2}), S({2, 1, 3})};
  const int nt = (int)(sizeof xs / sizeof xs[0]);
  enum { MIN, PROD, LSE, L1, L2, NOPS };
  static k_reduce_param pp[NOPS][sizeof ps / sizeof ps[0]];
  const char *names[] = {"min", "prod", "logsumexp", "norm1", "norm2"};
  k_fn cf[] = {k_min_forward, k_prod_forward, k_logsumexp_forward, k_norm_forward, k_norm_forward};
  k_fn cb[] = {k_min_backward, k_prod_backward, k_logsumexp_backward, k_norm_backward, k_norm_backward};
  rtc_op_fn gf[] = {rtc_min_forward, rtc_prod_forward, rtc_logsumexp_forward, rtc_norm_forward, rtc_norm_forward};
  rtc_op_fn gb[] = {rtc_min_backward, rtc_prod_backward, rtc_logsumexp_backward, rtc_norm_backward,
                    rtc_norm_backward};
  for (int o = 0; o < NOPS; o++)
    for (int t = 0; t < nt; t++) {
      k_reduce_param *p = &pp[o][t];
      *p = ps[t];
      p->ord = o == L1 ? 1 : o == L2 ? 2 : 0;
      k_shape y = reduced(xs[t], *p);
      bool cols = true;     /* the innermost axis kept: the CPU's order is ours */
      for (int k = 0; k < p->axis.n; k++) cols &= p->axis.v[k] != xs[t].rank - 1;
      size_t temp = o == PROD ? k_prod_temp_bytes(&xs[t], p) : o == LSE ? k_logsumexp_temp_bytes(&xs[t], p) : 0;
      for (int v = 0; v < 2; v++) {   /* v 1: zeros planted (prod, norm), -inf / +inf (logsumexp) */
        Slot x = o == PROD ? signed_mag(xs[t]) : F(xs[t], o == LSE ? -8.0f : -2.0f, o == LSE ? 8.0f : 2.0f,
                                                       o == MIN ? 0.5f : 0.0f);
        if (v && (o == PROD || o == L1 || o == L2)) plant_zeros(x, *p, t);
        if (v && o == LSE) {
          auto g = groups_of(x.shape, *p);
          for (size_t k = 0; k < g.size(); k++) {
            if (k % 3 == 0) set_f(x, g[k][g[k].size() / 2], INFINITY);
            if (k % 3 == 1)
              for (int64_t i : g[k]) set_f(x, i, -INFINITY);
          }
        }
        if (v && o == MIN) set_f(x, 0, NAN);
        Slot yv = cpu_forward(cf[o], p, x, y, temp);
        std::string base = std::string(names[o]) + "#" + std::to_string(t) + (v ? "/special" : "");
        for (k_req r : {kWriteTo, kAddTo, kWriteInplace, kNullOp}) {
          Case f{base + "/" + req_name(r), cf[o], gf[o], p};
          f.in = {x};
          f.out = {F(y)};
          f.req = {r};
          f.temp = temp;
          f.exact = o == MIN || cols;
          run_case(f);
          if (o == LSE && v) continue;   /* exp(inf - inf): NaN gradients on both, nothing to learn */
          Case b{base + "/" + req_name(r) + "/bwd", cb[o], gb[o], p};
          b.in = {F(y), x, yv};
          b.out = {F(xs[t])};
          b.req = {r};
          b.temp = temp;
          b.exact = o != PROD || cols;
          run_case(b);
        }
        /* gx onto x, as a plan may place it */
        Case ip{base + "/inplace/bwd", cb[o], gb[o], p};
        ip.in = {F(y), x, yv};
        ip.out = {F(xs[t])};
        ip.req = {kWriteInplace};
        ip.alias = {{0, 1}};
        ip.temp = temp;
        ip.exact = o != PROD || cols;
        if (!(o == LSE && v)) run_case(ip);
      }
    }
}

/* ---- pad ---- */

static void test_pad() {
  struct Cfg { k_shape x; int mode; float value; int np; int64_t pad[2 * K_MAX_RANK]; };
  Cfg cfgs[] = {
      {S({3, 4, 5}), K_PAD_CONSTANT, 1.5f, 6, {1, 2, 0, 3, 2, 0}},
      {S({4, 6}), K_PAD_CONSTANT, -0.25f, 4, {-1, 2, 3, -2}},          /* negative pads crop */
      {S({2, 3, 7}), K_PAD_CONSTANT, 0.0f, 6, {-3, -2, 1, 0, 0, 2}},
      {S({3, 4, 5}), K_PAD_REFLECT, 0.0f, 6, {2, 1, 3, 0, 1, 2}},
      {S({7}), K_PAD_REFLECT, 0.0f, 2, {3, 6}},
      {S({2, 3, 4, 5}), K_PAD_REFLECT, 0.0f, 8, {4, 0, 1, 3, 0, 2, 1, 1}},
      {S({2, 3, 4, 5}), K_PAD_REPLICATE, 0.0f, 8, {4, 1, 0, 2, 3, 3, 1, 0}},
      {S({2, 5, 3}), K_PAD_REPLICATE, 0.0f, 6, {0, 0, 2, 3, 0, 0}},
      {S({1, 2, 1}), K_PAD_REPLICATE, 0.0f, 6, {3, 2, 0, 1, 4, 0}},    /* size-1 axes: all one element */
      {S({2, 2, 3}), K_PAD_REFLECT, 0.0f, 6, {2, 2, 1, 1, 0, 1}},
  };
  const int nc = (int)(sizeof cfgs / sizeof cfgs[0]);
  static k_pad_param ps[sizeof cfgs / sizeof cfgs[0]];
  const char *modes[] = {"constant", "reflect", "replicate"};
  for (int t = 0; t < nc; t++) {
    Cfg &g = cfgs[t];
    k_pad_param &p = ps[t];
    memset(&p, 0, sizeof p);
    p.mode = g.mode;
    p.value = g.value;
    p.pad.n = 2 * g.x.rank;
    for (int i = 0; i < g.np; i++) p.pad.v[i] = g.pad[i];
    k_shape y = g.x;
    for (int a = 0; a < g.x.rank; a++) y.d[a] += p.pad.v[2 * (g.x.rank - 1 - a)] + p.pad.v[2 * (g.x.rank - 1 - a) + 1];
    for (k_req r : {kWriteTo, kAddTo, kWriteInplace, kNullOp}) {
      std::string name = std::string("pad/") + modes[g.mode] + "#" + std::to_string(t) + "/" + req_name(r);
      Case f{name, k_pad_forward, rtc_pad_forward, &p};
      f.in = {F(g.x)};
      f.out = {F(y)};
      f.req = {r};
      f.exact = true;
      run_case(f);
      Case b{name + "/bwd", k_pad_backward, rtc_pad_backward, &p};
      b.in = {F(y), Absent(g.x), Absent(y)};
      b.out = {F(g.x)};
      b.req = {r};
      b.exact = true;     /* the same adds in the same order: output order */
      run_case(b);
    }
  }
}

/* ---- pooling ---- */

static int64_t pool_out(int64_t n, int64_t k, int64_t s, int64_t p0, int64_t p1, int ceil_mode) {
  int64_t span = n + p0 + p1 - k, o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (o - 1) * s >= n + p0) o--;   /* torch: the last window starts inside */
  return o;
}

static void test_pooling() {
  struct Cfg { int two; int64_t k[2], s[2], pad[4]; int npad, type, global, cip, ceil; k_shape x; };
  Cfg cfgs[] = {
      {1, {2, 2}, {2, 2}, {0, 0}, 2, K_POOL_MAX, 0, 1, 0, S({2, 3, 8, 8})},
      {1, {3, 3}, {2, 2}, {1, 1}, 2, K_POOL_MAX, 0, 1, 0, S({1, 2, 9, 11})},
      {1, {3, 3}, {2, 2}, {1, 1}, 2, K_POOL_AVG, 0, 1, 0, S({1, 2, 9, 11})},
      {1, {3, 3}, {2, 2}, {1, 1}, 2, K_POOL_AVG, 0, 0, 0, S({1, 2, 9, 11})},
      {1, {3, 2}, {2, 3}, {0, 1, 2, 0}, 4, K_POOL_AVG, 0, 0, 1, S({2, 2, 10, 7})},
      {1, {3, 2}, {2, 3}, {0, 1, 2, 0}, 4, K_POOL_AVG, 0, 1, 1, S({2, 2, 10, 7})},
      {1, {3, 3}, {2, 2}, {1, 0, 1, 1}, 4, K_POOL_MAX, 0, 1, 1, S({1, 3, 8, 9})},
      {1, {5, 5}, {1, 1}, {0, 0}, 2, K_POOL_AVG, 1, 1, 0, S({2, 4, 5, 5})},
      {1, {4, 6}, {1, 1}, {0, 0}, 2, K_POOL_MAX, 1, 1, 0, S({2, 4, 4, 6})},
      {0, {3, 0}, {2, 0}, {1}, 1, K_POOL_MAX, 0, 1, 0, S({2, 3, 12})},
      {0, {4, 0}, {3, 0}, {1, 2}, 2, K_POOL_AVG, 0, 0, 1, S({2, 3, 13})},
      {1, {3, 3}, {1, 1}, {1, 1}, 2, K_POOL_MAX, 0, 1, 0, S({1, 1, 6, 40})},
  };
  static k_pool_param ps[sizeof cfgs / sizeof cfgs[0]];
  int t = 0;
  for (Cfg &g : cfgs) {
    k_pool_param &p = ps[t];
    int nk = g.two ? 2 : 1, r = g.x.rank;
    memset(&p, 0, sizeof p);
    p.kernel.n = p.stride.n = nk;
    p.pad.n = g.npad;
    for (int i = 0; i < nk; i++) p.kernel.v[i] = g.k[i], p.stride.v[i] = g.s[i];
    for (int i = 0; i < g.npad; i++) p.pad.v[i] = g.pad[i];
    p.pool_type = g.type;
    p.global_pool = g.global;
    p.count_include_pad = g.cip;
    p.ceil_mode = g.ceil;
    k_shape y = g.x;
    for (int i = 0; i < nk; i++)
      y.d[r - nk + i] = pool_out(g.x.d[r - nk + i], p.kernel.v[i], p.stride.v[i], k_pool_pad_begin(&p, i),
                                 k_pool_pad_end(&p, i), g.ceil);
    for (k_req rq : kReqs) {
      Slot x = F(g.x, -2, 2, 0.25f);    /* ties: the first maximum takes the gradient */
      Case f{nm("pooling", t, rq), k_pooling_forward, rtc_pooling_forward, &p};
      f.in = {x};
      f.out = {F(y)};
      f.req = {rq};
      f.exact = g.type == K_POOL_MAX && rq == kWriteTo;
      run_case(f);
      Case b{nm("pooling", t, rq) + "/bwd", k_pooling_backward, rtc_pooling_backward, &p};
      b.in = {F(y), x, F(y)};
      b.out = {F(g.x)};
      b.req = {rq};
      run_case(b);
    }
    t++;
  }
}

/* ---- batch_norm, layer_norm ---- */

static void test_batch_norm() {
  /* The last two split their channels' training sums in parts (rtc_bn_parts: over 2048 elements). */
  static k_batch_norm_param ps[] = {{1e-5f, 0.9f, 1, 0}, {1e-3f, 0.1f, 1, 0}, {1e-5f, 0.9f, 2, 0}, {1e-5f, 0.9f, 1, 0},
                                    {1e-5f, 0.9f, 1, 0}};
  k_shape xs[] = {S({4, 3, 5, 5}), S({16, 7}), S({2, 3, 6}), S({8, 3, 24, 24}), S({3000, 5})};
  for (int t = 0; t < 5; t++) {
    int64_t C = xs[t].d[ps[t].axis];
    k_shape c = S({C});
    for (int train = 0; train < 2; train++)
      for (k_req r : kReqs)
        for (int hidden = 0; hidden < 2; hidden++) {
          Case f{nm("batch_norm", t, r) + (train ? "/train" : "/predict") + (hidden ? "" : "/pruned"),
                 k_batch_norm_forward, rtc_batch_norm_forward, &ps[t]};
          f.in = {F(xs[t], -1, 3), F(c), F(c), F(c), F(c, 0.5f, 2)};
          f.out = {F(xs[t]), F(c), F(c)};
          f.req = {r, hidden ? kWriteTo : kNullOp, hidden ? kWriteTo : kNullOp};
          f.is_train = train;
          run_case(f);
        }
    Case ip{nm("batch_norm", t, kWriteInplace) + "/train", k_batch_norm_forward, rtc_batch_norm_forward, &ps[t]};
    ip.in = {F(xs[t], -1, 3), F(c), F(c), F(c), F(c, 0.5f, 2)};
    ip.out = {F(xs[t]), F(c), F(c)};
    ip.req = {kWriteInplace, kWriteTo, kWriteTo};
    ip.alias = {{0, 0}};
    ip.is_train = 1;
    run_case(ip);
    for (k_req r : {kWriteTo, kAddTo, kWriteInplace}) {
      Case b{nm("batch_norm", t, r) + "/bwd", k_batch_norm_backward, rtc_batch_norm_backward, &ps[t]};
      b.in = {F(xs[t]), Absent(c), Absent(c), F(xs[t], -1, 3), F(c), Absent(c), Absent(xs[t]), F(c),
              F(c, 0.5f, 2)};
      b.out = {F(xs[t]), F(c), F(c)};
      b.req = {r, r == kWriteInplace ? kWriteTo : r, r == kAddTo ? kNullOp : r == kWriteTo ? kAddTo : kWriteTo};
      if (r == kWriteInplace) b.alias = {{0, 0}};
      run_case(b);
    }
  }
}

static void test_layer_norm() {
  k_shape xs[] = {S({4, 10}), S({2, 3, 33}), S({5, 1})};
  static k_layer_norm_param ps[] = {{1, 1e-5f}, {2, 1e-5f}, {1, 1e-3f}};
  for (int t = 0; t < 3; t++) {
    k_shape c = S({xs[t].d[xs[t].rank - 1]}), rows = xs[t];
    rows.d[rows.rank - 1] = 1;
    for (k_req r : {kWriteTo, kAddTo, kWriteInplace})
      for (int hidden = 0; hidden < 2; hidden++) {
        Case f{nm("layer_norm", t, r) + (hidden ? "" : "/pruned"), k_layer_norm_forward, rtc_layer_norm_forward,
               &ps[t]};
        f.in = {F(xs[t], -1, 3), F(c), F(c)};
        f.out = {F(xs[t]), F(rows), F(rows)};
        f.req = {r, hidden ? kWriteTo : kNullOp, hidden ? kWriteTo : kNullOp};
        if (r == kWriteInplace) f.alias = {{0, 0}};
        run_case(f);
        Case b{nm("layer_norm", t, r) + "/bwd" + (hidden ? "" : "/nodparams"), k_layer_norm_backward,
               rtc_layer_norm_backward, &ps[t]};
        b.in = {F(xs[t]), Absent(rows), Absent(rows), F(xs[t], -1, 3), F(c), Absent(c), Absent(xs[t]), F(rows),
                F(rows, 0.5f, 2)};
        b.out = {F(xs[t]), F(c), F(c)};
        b.req = {r, hidden ? (r == kAddTo ? kAddTo : kWriteTo) : kNullOp, hidden ? kAddTo : kNullOp};
        if (r == kWriteInplace) b.alias = {{0, 0}};
        run_case(b);
      }
  }
}

/* ---- embedding, dropout ---- */

static void test_embedding() {
  static k_embedding_param ps[] = {{10, 4}, {50, 17}};
  k_shape is[] = {S({6}), S({3, 20})};
  for (int t = 0; t < 2; t++)
    for (k_req r : kReqs) {
      k_shape w = S({ps[t].input_dim, ps[t].output_dim}), y = is[t];
      y.d[y.rank++] = ps[t].output_dim;
      Slot idx = I(is[t], 0, (int32_t)ps[t].input_dim);   /* repeats: the scatter adds them */
      Case f{nm("embedding", t, r), k_embedding_forward, rtc_embedding_forward, &ps[t]};
      f.in = {idx, F(w)};
      f.out = {F(y)};
      f.req = {r};
      f.exact = r == kWriteTo;
      run_case(f);
      Case b{nm("embedding", t, r) + "/bwd", k_embedding_backward, rtc_embedding_backward, &ps[t]};
      b.in = {F(y), idx, Absent(w), Absent(y)};
      b.out = {Absent(is[t]), F(w)};
      b.out[0].dt = K_I32;
      b.req = {kNullOp, r};
      b.exact = true;     /* the same adds in the same order */
      run_case(b);
    }
}

static void test_dropout() {
  static k_dropout_param ps[] = {{0.5f}, {0.1f}, {1.0f}, {0.0f}};
  k_shape x = S({3, 41});
  for (int t = 0; t < 4; t++)
    for (int train = 0; train < 2; train++)
      for (k_req r : {kWriteTo, kAddTo, kWriteInplace}) {
        Case f{nm("dropout", t, r) + (train ? "/train" : "/predict"), k_dropout_forward, rtc_dropout_forward,
               &ps[t]};
        f.in = {F(x)};
        f.out = {F(x), F(x)};
        f.req = {r, r == kWriteInplace ? kWriteTo : r};
        if (r == kWriteInplace) f.alias = {{0, 0}};
        f.is_train = train;
        f.seed = 0x1234567890abcdefull + (uint64_t)t;
        f.ctr = (1ull << 63) | (uint64_t)(7 + t) << 32 | 0xdeadbeefu;
        f.exact = true;
        run_case(f);
      }
  Case p{"dropout/mask_pruned", k_dropout_forward, rtc_dropout_forward, &ps[0]};
  p.in = {F(x)};
  p.out = {F(x), Absent(x)};
  p.req = {kWriteTo, kNullOp};
  p.is_train = 1;
  p.seed = 99;
  p.exact = true;
  run_case(p);
  for (k_req r : kReqs) {
    Case b{nm("dropout", 0, r) + "/bwd", k_dropout_backward, rtc_dropout_backward, &ps[0]};
    b.in = {F(x), Absent(x), Absent(x), Absent(x), F(x)};
    b.out = {F(x)};
    b.req = {r};
    b.exact = true;
    run_case(b);
  }
}

/* ---- optimizers ---- */

static bool same_floats(const std::vector<float> &a, const std::vector<float> &b, float tol) {
  for (size_t i = 0; i < a.size(); i++)
    if (!(std::fabs(a[i] - b[i]) <= tol * (std::fabs(a[i]) + std::fabs(b[i])) || a[i] == b[i])) {
      printf("  element %zu: cpu %.9g gpu %.9g\n", i, (double)a[i], (double)b[i]);
      return false;
    }
  return true;
}

static std::vector<float> vec(int64_t n, float lo, float hi) {
  std::vector<float> v((size_t)n);
  for (auto &x : v) x = rndf(lo, hi);
  return v;
}

static void test_optim() {
  int64_t n = 1000;
  k_sgd_param sps[] = {{0.0f, 0.0f, 0}, {0.9f, 0.0f, 0}, {0.0f, 1e-4f, 0}, {0.9f, 5e-4f, 0}, {0.9f, 5e-4f, 1}};
  for (auto &p : sps) {
    std::vector<float> w = vec(n, -1, 1), g = vec(n, -1, 1), m = vec(n, -1, 1), w2 = w, m2 = m;
    rtc_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    kc_live live;
    int32_t skip = 0;
    rtc_sgd_live(&live, 0.1f);
    for (int step = 0; step < 3; step++) {
      k_sgd_update(w.data(), g.data(), p.momentum != 0 ? m.data() : nullptr, n, 0.1f, &p);
      rtc_sgd_update(&ctx, w2.data(), g.data(), p.momentum != 0 ? m2.data() : nullptr, n, &live, &skip, &p);
    }
    skip = 1;   /* a step met bad data: nothing written */
    std::vector<float> w3 = w2, m3 = m2;
    rtc_sgd_update(&ctx, w2.data(), g.data(), p.momentum != 0 ? m2.data() : nullptr, n, &live, &skip, &p);
    g_cases++;
    if (w3 != w2 || m3 != m2) printf("FAIL sgd: an update with the skip word set wrote\n"), g_fail++;
    g_cases++;
    if (!same_floats(w, w2, 0) || !same_floats(m, m2, 0)) {   /* elementwise, one rounding each */
      printf("FAIL sgd momentum %g wd %g nesterov %d\n", (double)p.momentum, (double)p.wd, p.nesterov);
      g_fail++;
    }
  }
  k_adam_param aps[] = {{0.9f, 0.999f, 1e-8f, 0.0f}, {0.8f, 0.99f, 1e-6f, 1e-2f}};
  for (int decoupled = 0; decoupled < 2; decoupled++)
  for (auto &p : aps) {
    std::vector<float> w = vec(n, -1, 1), m(n, 0.0f), v(n, 0.0f), w2 = w, m2 = m, v2 = v;
    rtc_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    int32_t skip = 0;
    for (int64_t step = 1; step <= 4; step++) {
      std::vector<float> g = vec(n, -1, 1);
      kc_live live;
      rtc_adam_live(&live, 1e-3f, &p, step, decoupled);
      k_adam_update(w.data(), g.data(), m.data(), v.data(), n, 1e-3f, &p, step, decoupled);
      rtc_adam_update(&ctx, w2.data(), g.data(), m2.data(), v2.data(), n, &live, &skip, &p, decoupled);
    }
    g_cases++;
    if (!same_floats(w, w2, 0) || !same_floats(m, m2, 0) || !same_floats(v, v2, 0)) {
      printf("FAIL adam%s beta1 %g wd %g\n", decoupled ? "w" : "", (double)p.beta1, (double)p.wd);
      g_fail++;
    }
  }
}

int main() {
  test_sce();
  test_softmax();
  test_copies();
  test_optim();
  test_pooling();
  test_batch_norm();
  test_transpose();
  test_layer_norm();
  test_embedding();
  test_reduce();
  test_reduce_more();
  test_pad();
  test_dropout();
  test_broadcast_to();
  test_slice();
  test_concat();
  printf("%d cases, %d failures\n", g_cases, g_fail);
  return g_fail != 0;
}
