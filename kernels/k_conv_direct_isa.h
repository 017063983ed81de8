/* k_conv_direct_isa.h — the register-blocked inner loops of the direct convolution for one
 * vector width. Not a normal header: k_conv_direct_generic.c, _avx2.c and _avx512.c include it
 * once per width, inside `#pragma GCC target(...)`, after defining
 *   K_CD_V      floats per vector (16 for AVX-512, 8 for AVX2 and the portable build; a
 *               portable 16 for layers compiled blocked at 16 running without AVX-512),
 *   K_CD_SFX    the suffix of every function defined here (avx512, avx2, generic), and
 *   K_CD_NAME   the same as a string,
 *   K_CD_FT, K_CD_F1, K_CD_BT  the most output positions of a forward tile holding two
 *               output-channel vectors, of one holding one, and of a data-gradient tile
 *               (chosen so the accumulators fit the target's vector registers), with
 *   K_CD_CASES_FT(X), ..._F1, ..._BT, ..._V  X(1) ... X(that maximum), one per tile width,
 * so each width gets its own copy compiled for its target (the header undefines them at its
 * end). GCC vector extensions, not
 * intrinsics: the same source serves every width.
 *
 * Blocked layouts (k_cd_geom in k_conv_direct_impl.h names the sizes):
 *   xb  [N][Cb][Hp][Wp][V]   input, zero-padded by ph/pw at the start and phe/pwe at the end,
 *                            channel c of block cb
 *   yb  [N][Fb][OH][OW][V]   output (or output gradient)
 *   wf  [Fb][Cb][kh][kw][V c][V f]   weights for the forward pass (and the weight gradient)
 *   wd  [Cb][Fb][kh][kw][V f][V c]   weights for the data gradient
 * Channels past C (or F) in the last block are never read as inputs to a sum: loops over
 * input channels stop at the real count, and output lanes past F are dropped on conversion.
 *
 * The tile functions take their sizes (T positions, NF vectors, stride SW) as arguments but
 * are always inlined into callers that pass constants, so the accumulators live in registers
 * and every load has a constant displacement; SW = 0 means "stride from g". */

#define KCD_CAT2(a, b) a##_##b
#define KCD_CAT(a, b) KCD_CAT2(a, b)
#define KCD(name) KCD_CAT(name, K_CD_SFX)
#define KCD_INLINE static inline __attribute__((always_inline))

typedef float KCD(vec) __attribute__((vector_size(K_CD_V * sizeof(float))));
#define VEC KCD(vec)
typedef int KCD(ivec) __attribute__((vector_size(K_CD_V * sizeof(int))));

KCD_INLINE VEC KCD(ld)(const float *p) {
  VEC v;
  memcpy(&v, p, sizeof v);
  return v;
}

KCD_INLINE void KCD(st)(float *p, VEC v) { memcpy(p, &v, sizeof v); }

/* s in every lane. Not `(VEC){0} + s`: without -ffast-math that is an add (0 + -0 is +0), so
 * gcc emitted an addss and a register broadcast before each multiply; a shuffle of lane 0 is
 * a plain broadcast, which AVX-512 folds into the multiply as a memory operand. */
KCD_INLINE VEC KCD(bc)(float s) { return __builtin_shuffle((VEC){s}, (KCD(ivec)){0}); }

/* The first n lanes of p (n < V allowed: a bias past F reads as zero). */
static VEC KCD(ld_part)(const float *p, int64_t n) {
  VEC v = {0};
  for (int64_t i = 0; i < n && i < K_CD_V; i++) v[i] = p[i];
  return v;
}

/* ---- layout conversion ------------------------------------------------------------------ */

#if K_CD_V == 16
#define KCD_ROUNDS 4
#define KCD_LO {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23}
#define KCD_HI {8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31}
#else
#define KCD_ROUNDS 3
#define KCD_LO {0, 8, 1, 9, 2, 10, 3, 11}
#define KCD_HI {4, 12, 5, 13, 6, 14, 7, 15}
#endif

/* Transposes the V x V matrix whose rows are r[0..V). Each round interleaves row i with row
 * i + V/2 into rows 2i and 2i+1, which rotates the bits of (row, column) left by one; log2(V)
 * rounds rotate them by half, which swaps row and column. */
KCD_INLINE void KCD(transpose)(VEC *r) {
  const KCD(ivec) lo = KCD_LO, hi = KCD_HI;
  for (int round = 0; round < KCD_ROUNDS; round++) {
    VEC t[K_CD_V];
#pragma GCC unroll 16
    for (int i = 0; i < K_CD_V / 2; i++) {
      t[2 * i] = __builtin_shuffle(r[i], r[i + K_CD_V / 2], lo);
      t[2 * i + 1] = __builtin_shuffle(r[i], r[i + K_CD_V / 2], hi);
    }
#pragma GCC unroll 16
    for (int i = 0; i < K_CD_V; i++) r[i] = t[i];
  }
}

/* The blocked offsets of plane positions q0 .. q0+m (rows W long, stored drs floats apart):
 * one division per group of V positions, not one per position (a 64-bit division costs more
 * than the transpose it feeds). */
KCD_INLINE void KCD(offsets)(int64_t q0, int64_t m, int64_t W, int64_t drs, int64_t *off) {
  int64_t h = q0 / W, w = q0 % W;
  for (int64_t j = 0; j < m; j++) {
    off[j] = h * drs + w * K_CD_V;
    if (++w == W) w = 0, h++;
  }
}

/* dst[pos(q)] lane c = src[c*ld + q] for positions q < len and channels c < cn (lanes past cn
 * are zero): V positions at a time through a register transpose, whatever rows they span,
 * since the source plane is contiguous; a last part-filled group as well. */
static void KCD(pack_rows)(const float *src, int64_t ld, int64_t cn, int64_t len, int64_t W,
                           int64_t drs, float *dst) {
  for (int64_t q = 0; q < len; q += K_CD_V) {
    int64_t m = len - q < K_CD_V ? len - q : K_CD_V;
    VEC r[K_CD_V];
    int64_t off[K_CD_V];
    KCD(offsets)(q, m, W, drs, off);
#pragma GCC unroll 16
    for (int64_t c = 0; c < K_CD_V; c++)
      r[c] = c >= cn ? (VEC){0} : m == K_CD_V ? KCD(ld)(src + c * ld + q) : KCD(ld_part)(src + c * ld + q, m);
    KCD(transpose)(r);
    for (int64_t j = 0; j < m; j++) KCD(st)(dst + off[j], r[j]);
  }
}

/* The inverse for the real channels: dst[c*ld + q] (+)= lane c of src[pos(q)], c < cn. */
static void KCD(unpack_rows)(const float *src, int64_t W, int64_t srs, int64_t cn, int64_t len,
                             float *dst, int64_t ld, int add) {
  for (int64_t q = 0; q < len; q += K_CD_V) {
    int64_t m = len - q < K_CD_V ? len - q : K_CD_V;
    VEC r[K_CD_V];
    int64_t off[K_CD_V];
    KCD(offsets)(q, m, W, srs, off);
    for (int64_t j = 0; j < K_CD_V; j++) r[j] = j < m ? KCD(ld)(src + off[j]) : (VEC){0};
    KCD(transpose)(r);
#pragma GCC unroll 16
    for (int64_t c = 0; c < K_CD_V; c++) {   /* constant bound: r stays in registers */
      if (c >= cn) break;
      float *d = dst + c * ld + q;
      if (m == K_CD_V) {
        KCD(st)(d, add ? KCD(ld)(d) + r[c] : r[c]);
      } else {
        for (int64_t j = 0; j < m; j++) d[j] = add ? d[j] + r[c][j] : r[c][j];
      }
    }
  }
}

/* A prologue on n packed positions of one block at x: each lane x a[l] + b[l], then relu when
 * asked as the store's (x < 0 gives +0, anything else keeps its bits). A multiply, then an
 * add, as batch_norm's predict kernel computes them: these files contract multiply-adds into
 * FMAs, which would round once where it rounds twice, so this function does not. */
__attribute__((optimize("fp-contract=off")))
static void KCD(pro_rows)(float *x, int64_t n, const float *a, const float *b, int relu) {
  VEC va = KCD(ld)(a), vb = KCD(ld)(b);
  for (int64_t i = 0; i < n; i++, x += K_CD_V) {
    VEC v = KCD(ld)(x) * va + vb;
    if (relu) v = K_EPI_VRELU(VEC, KCD(ivec), v);
    KCD(st)(x, v);
  }
}

/* ---- forward ---------------------------------------------------------------------------- */

/* v as a k_cd_store leaves it: plus r's vector (r + v when swapped; r NULL: no add), then
 * relu or clip — k_sf_add's, k_sf_relu's and k_sf_clip's arithmetic, each select as a mask
 * (relu: x < 0 gives +0, anything else, NaN and -0 included, keeps x's bits; clip: x < lo
 * gives lo, then > hi gives hi, a NaN kept), so the same bits as the epilogue's pass. */
KCD_INLINE VEC KCD(store_tail)(VEC v, const float *r, const k_cd_store *st) {
  if (r) v = st->swap ? KCD(ld)(r) + v : v + KCD(ld)(r);
  if (st->relu) v = K_EPI_VRELU(VEC, KCD(ivec), v);
  if (st->clip) {
    VEC lo = KCD(bc)(st->lo), hi = KCD(bc)(st->hi);
    v = K_EPI_VCLIP_LO(VEC, KCD(ivec), v, lo);
    v = K_EPI_VCLIP_HI(VEC, KCD(ivec), v, hi);
  }
  return v;
}

/* Output positions [ow0, ow0+T) of row oh, output-channel blocks fb (and fb+1 when NF = 2):
 * acc[t][j] = bias + sum over input blocks, taps and channels of x * w, stored through st.
 * PL = 1 reads a planar input (k_cd_geom.planar): one block whose channels are planes of
 * rows Wp + V long, so a position steps 1 float instead of V and a channel a plane instead of
 * 1; the sum runs in the same order, so the bits are the blocked input's.
 * pf (NULL: none) is the next group of NF output blocks' weights, fetched into L2 while this
 * tile reads its own: a block's first tile otherwise waits on every weight line from memory
 * (a model's weights are read once a call, so they are cold), which the hardware prefetcher
 * does not hide when a block's weights are short (an expansion's 192 input channels: 12 KB).
 * MNASNet's 192 -> 1152 layer on a 7x7 plane, cold weights: 129 -> 105 us. */
KCD_INLINE void KCD(fwd_tile)(const k_cd_geom *g, const float *xn, const float *wf, VEC b0, VEC b1,
                              float *y, const k_cd_store *st, int64_t oh, int64_t ow0, int T, int NF,
                              int SW, int PL, const float *pf) {
  VEC a0[K_CD_F1 > K_CD_FT ? K_CD_F1 : K_CD_FT], a1[K_CD_FT];
  int64_t sw = SW ? SW : g->sw, L = PL ? 1 : K_CD_V, xcs = g->Hp * g->Wp * K_CD_V;
  int64_t xrs = PL ? g->Wp + K_CD_V : g->Wp * K_CD_V, ccs = PL ? k_cd_xplane(g) : 1;
  int64_t wfs = g->Cb * g->kh * g->kw * K_CD_V * K_CD_V, ycs = g->OH * g->OW * K_CD_V;
#pragma GCC unroll 32
  for (int t = 0; t < T; t++) { a0[t] = b0; if (NF > 1) a1[t] = b1; }
  const float *xo = xn + oh * g->sh * xrs + ow0 * sw * L;
  for (int64_t cb = 0; cb < g->Cb; cb++) {
    int64_t cn = g->C - cb * K_CD_V < K_CD_V ? g->C - cb * K_CD_V : K_CD_V;
    for (int64_t ki = 0; ki < g->kh; ki++)
      for (int64_t kj = 0; kj < g->kw; kj++) {
        const float *xp = xo + cb * xcs + ki * g->dh * xrs + kj * g->dw * L;
        int64_t wo = ((cb * g->kh + ki) * g->kw + kj) * K_CD_V * K_CD_V;
        const float *wp = wf + wo;
        for (int64_t c = 0; c < cn; c++) {
          if (pf) {
            __builtin_prefetch(pf + wo + c * K_CD_V, 0, 1);
            if (NF > 1) __builtin_prefetch(pf + wfs + wo + c * K_CD_V, 0, 1);
          }
          VEC w0 = KCD(ld)(wp + c * K_CD_V), w1 = NF > 1 ? KCD(ld)(wp + wfs + c * K_CD_V) : w0;
          const float *xc = xp + c * ccs;   /* one base register, the positions at fixed offsets */
#pragma GCC unroll 32
          for (int t = 0; t < T; t++) {
            VEC xv = KCD(bc)(xc[t * sw * L]);
            a0[t] += xv * w0;
            if (NF > 1) a1[t] += xv * w1;
          }
        }
      }
  }
  float *yo = y + (oh * g->OW + ow0) * K_CD_V;
  if (st) {
    const float *ro = st->res ? st->res + (oh * g->OW + ow0) * K_CD_V : NULL;
#pragma GCC unroll 32
    for (int t = 0; t < T; t++) {
      KCD(st)(yo + t * K_CD_V, KCD(store_tail)(a0[t], ro ? ro + t * K_CD_V : NULL, st));
      if (NF > 1) KCD(st)(yo + ycs + t * K_CD_V, KCD(store_tail)(a1[t], ro ? ro + ycs + t * K_CD_V : NULL, st));
    }
    return;
  }
#pragma GCC unroll 32
  for (int t = 0; t < T; t++) {
    KCD(st)(yo + t * K_CD_V, a0[t]);
    if (NF > 1) KCD(st)(yo + ycs + t * K_CD_V, a1[t]);
  }
}

/* Output positions [ow0, ow1) of row oh, cut into tiles of near-equal width (no more than
 * K_CD_FT positions with two vectors, K_CD_F1 with one), each tile width a compile-time
 * constant. The first tile prefetches pf (fwd_tile). */
#define KCD_FWD_CASE(T) case T: KCD(fwd_tile)(g, xn, wf, b0, b1, y, st, oh, ow, T, NF, SW, PL, i ? NULL : pf); break;
KCD_INLINE void KCD(fwd_row)(const k_cd_geom *g, const float *xn, const float *wf, VEC b0, VEC b1,
                             float *y, const k_cd_store *st, int64_t oh, int64_t ow0, int64_t ow1, int NF, int SW,
                             int PL, const float *pf) {
  int64_t tmax = NF > 1 ? K_CD_FT : K_CD_F1;
  int64_t tiles = (ow1 - ow0 + tmax - 1) / tmax;
  for (int64_t i = 0, ow = ow0; i < tiles; i++) {
    int64_t T = (ow1 - ow) / (tiles - i);
    if (NF > 1) switch (T) { K_CD_CASES_FT(KCD_FWD_CASE) }
    else switch (T) { K_CD_CASES_F1(KCD_FWD_CASE) }
    ow += T;
  }
}

/* Rows [oh0, oh1) with the stride along the row a constant (1 or 2; 0 reads it from g) and
 * the input blocked or planar (PL). */
KCD_INLINE void KCD(fwd_rows_of)(const k_cd_geom *g, const float *xn, const float *wf, VEC b0, VEC b1,
                                 float *y, const k_cd_store *st, int NF, int64_t oh0, int64_t oh1, int PL,
                                 const float *pf) {
  int SW = g->sw == 1 ? 1 : g->sw == 2 ? 2 : 0;
  for (int64_t oh = oh0; oh < oh1; oh++, pf = NULL) {
    if (NF > 1) {
      if (SW == 1) KCD(fwd_row)(g, xn, wf, b0, b1, y, st, oh, 0, g->OW, 2, 1, PL, pf);
      else if (SW == 2) KCD(fwd_row)(g, xn, wf, b0, b1, y, st, oh, 0, g->OW, 2, 2, PL, pf);
      else KCD(fwd_row)(g, xn, wf, b0, b1, y, st, oh, 0, g->OW, 2, 0, PL, pf);
    } else {
      if (SW == 1) KCD(fwd_row)(g, xn, wf, b0, b1, y, st, oh, 0, g->OW, 1, 1, PL, pf);
      else if (SW == 2) KCD(fwd_row)(g, xn, wf, b0, b1, y, st, oh, 0, g->OW, 1, 2, PL, pf);
      else KCD(fwd_row)(g, xn, wf, b0, b1, y, st, oh, 0, g->OW, 1, 0, PL, pf);
    }
  }
}

static void KCD(fwd_rows)(const k_cd_geom *g, const float *xn, const float *wf, VEC b0, VEC b1,
                          float *y, const k_cd_store *st, int NF, int64_t oh0, int64_t oh1, const float *pf) {
  /* An unpadded 1x1 stride-1 layer on a plane narrower than two tiles: its input and output
   * positions are one run across rows, so the plane is seen as one row and rows [oh0, oh1) as
   * its positions [oh0 * OW, oh1 * OW), and a tile may span rows. A 7x7 plane went in rows of
   * 7 (14 of the 24 accumulators with two filter blocks, the weights streamed once a row);
   * each output is still bias + the channels in order, so the same bits. (Not planar: its
   * rows are V floats longer than the plane's.) */
  if (g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->Hp == g->OH && g->Wp == g->OW && g->OH > 1 &&
      g->OW < 2 * (NF > 1 ? K_CD_FT : K_CD_F1) && !g->planar) {
    k_cd_geom f = *g;
    f.OW = f.Wp = f.W = g->OH * g->OW;
    f.OH = f.Hp = f.H = 1;
    if (NF > 1) KCD(fwd_row)(&f, xn, wf, b0, b1, y, st, 0, oh0 * g->OW, oh1 * g->OW, 2, 1, 0, pf);
    else KCD(fwd_row)(&f, xn, wf, b0, b1, y, st, 0, oh0 * g->OW, oh1 * g->OW, 1, 1, 0, pf);
    return;
  }
  if (g->planar) KCD(fwd_rows_of)(g, xn, wf, b0, b1, y, st, NF, oh0, oh1, 1, pf);
  else KCD(fwd_rows_of)(g, xn, wf, b0, b1, y, st, NF, oh0, oh1, 0, pf);
}

/* Rows [oh0, oh1) of yb[n][fb .. fb+nf) for nf = 1 or 2, from xb and wf; bias (F floats) may
 * be NULL; st (NULL: none) with its res at this block's first element. Each row is computed
 * alone, so how the rows are split changes no bit. */
static void KCD(fwd_block)(const k_cd_geom *g, const float *xb, const float *wf, const float *bias,
                           float *yb, int64_t n, int64_t fb, int nf, const k_cd_store *st, int64_t oh0, int64_t oh1) {
  VEC b0 = {0}, b1 = {0};
  if (bias) {
    b0 = KCD(ld_part)(bias + fb * K_CD_V, g->F - fb * K_CD_V);
    if (nf > 1) b1 = KCD(ld_part)(bias + (fb + 1) * K_CD_V, g->F - (fb + 1) * K_CD_V);
  }
  const float *xn = xb + n * (g->planar ? g->C * k_cd_xplane(g) : g->Cb * g->Hp * g->Wp * K_CD_V);
  int64_t wbs = g->Cb * g->kh * g->kw * K_CD_V * K_CD_V;   /* one output block's weights */
  const float *w = wf + fb * wbs;
  float *y = yb + (n * g->Fb + fb) * g->OH * g->OW * K_CD_V;
  /* the next group of nf blocks, the one this thread most likely runs next (its home runs
   * the groups in order); none when fewer than nf are left, or when a block's weights are
   * long enough for the hardware prefetcher to follow (and for fetching the next ones whole
   * to push this block's out of L2: ResNet-18's 3x3 layers, 0.99x) */
  const float *pf = g->prefetch && fb + 2 * nf <= g->Fb && wbs * (int64_t)sizeof(float) <= K_CD_PREFETCH_BYTES
                        ? w + nf * wbs : NULL;
  KCD(fwd_rows)(g, xn, w, b0, b1, y, st, nf, oh0, oh1, pf);
}

/* ---- forward, NCHW in and out, few input channels ------------------------------------------ */

/* Rows [oh0, oh1) of one sample's output y [F][OH][OW] (NCHW), from xp, its input zero-padded
 * as xb would be but not blocked: [C][Hp][Wp + V], V floats past each row's padding so that a
 * part-filled last tile loads whole vectors (k_conv_direct.c's k_cd_nchw says when this runs:
 * stride 1 along the row, one input block). Each vector holds V neighbouring output positions
 * of one output channel, and a whole output block (V channels) is held in registers, so neither
 * the input nor the output is converted to the blocked layout, which for 3 input channels in a
 * V-lane block cost more than the products. Every output value is summed as fwd_tile sums it
 * — the bias (0 without), then taps (ki, kj) and channels c in that order, each one
 * multiply-add of the same input and weight (wf, the forward packing; a padded position as
 * its zero) — so the bits are the blocked path's. kAddTo adds the sum as unpack_rows does. */
static void KCD(fwd_nchw_rows)(const k_cd_geom *g, const float *xp, const float *wf, const float *bias, float *y,
                               int64_t oh0, int64_t oh1, int add) {
  int64_t Wr = g->Wp + K_CD_V, xcs = g->Hp * Wr, taps = g->kh * g->kw, plane = g->OH * g->OW;
  for (int64_t oh = oh0; oh < oh1; oh++)
    for (int64_t fb = 0; fb < g->Fb; fb++) {
      const float *wb = wf + fb * g->Cb * taps * K_CD_V * K_CD_V;
      int64_t nf = g->F - fb * K_CD_V < K_CD_V ? g->F - fb * K_CD_V : K_CD_V;
      for (int64_t ow0 = 0; ow0 < g->OW; ow0 += K_CD_V) {
        VEC acc[K_CD_V];
#pragma GCC unroll 16
        for (int j = 0; j < K_CD_V; j++) acc[j] = KCD(bc)(bias && j < nf ? bias[fb * K_CD_V + j] : 0.0f);
        for (int64_t ki = 0; ki < g->kh; ki++)
          for (int64_t kj = 0; kj < g->kw; kj++) {
            const float *wp = wb + (ki * g->kw + kj) * K_CD_V * K_CD_V;
            const float *xr = xp + (oh * g->sh + ki * g->dh) * Wr + ow0 + kj * g->dw;
            for (int64_t c = 0; c < g->C; c++) {
              VEC xv = KCD(ld)(xr + c * xcs);
              const float *wc = wp + c * K_CD_V;
#pragma GCC unroll 16
              for (int j = 0; j < K_CD_V; j++) acc[j] += xv * KCD(bc)(wc[j]);
            }
          }
        int64_t m = g->OW - ow0 < K_CD_V ? g->OW - ow0 : K_CD_V;
        float *d = y + fb * K_CD_V * plane + oh * g->OW + ow0;
        if (m == K_CD_V && nf == K_CD_V && !add) {   /* the common case, acc kept in registers */
#pragma GCC unroll 16
          for (int j = 0; j < K_CD_V; j++) KCD(st)(d + j * plane, acc[j]);
          continue;
        }
        for (int64_t j = 0; j < nf; j++) {
          if (m == K_CD_V) KCD(st)(d + j * plane, add ? KCD(ld)(d + j * plane) + acc[j] : acc[j]);
          else
            for (int64_t i = 0; i < m; i++) d[j * plane + i] = add ? d[j * plane + i] + acc[j][i] : acc[j][i];
        }
      }
    }
}

/* ---- forward, Winograd F(2x2, 3x3) ------------------------------------------------------- */

/* A 3x3 stride-1 convolution whose output has even height and width, as Lavin and Gray's
 * minimal filtering: each 2x2 output tile is A^T [(G g G^T) . (B^T d B)] A over the 4x4 input
 * patch d, so the 36 multiply-adds a tile costs per input and output channel become 16 (the
 * elementwise product, summed over input channels as a small GEMM per transformed tap) plus
 * transforms that are only adds. The weights arrive transformed, wu [Fb][Cb][16][V c][V f]
 * (k_conv_direct.c packs them, once per weight change in predict). Tiles are numbered row
 * by row; a group of T of them is transformed into vt [Cb][16][T][V], multiplied into
 * m [16][T][NF][V] with the accumulators of one tap in registers (the register tiling of
 * fwd_tile, with tiles in place of positions), then transformed back and stored through st.
 * The transforms use the F(2, 3) points 0, 1, -1 and infinity, so their coefficients are 0, 1
 * and 1/2 and add no rounding beyond the adds themselves. */
#define KCD_WINO_TMAX (K_CD_F1 > 2 * K_CD_FT ? K_CD_F1 : 2 * K_CD_FT)

/* The 4x4 input patch at row y0, column x0 of one block (rows xrs floats apart) of an input
 * XH x XW, zero outside it: the padding the block supplies itself when it reads a blocked
 * input in place (g->vph, g->vpw). */
KCD_INLINE void KCD(wino_patch)(const float *xc, int64_t xrs, int64_t XH, int64_t XW, int64_t y0, int64_t x0,
                                VEC d[4][4]) {
  if (y0 >= 0 && x0 >= 0 && y0 + 4 <= XH && x0 + 4 <= XW) {
    const float *p = xc + y0 * xrs + x0 * K_CD_V;
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
      for (int j = 0; j < 4; j++) d[r][j] = KCD(ld)(p + r * xrs + j * K_CD_V);
    return;
  }
  for (int r = 0; r < 4; r++)
    for (int j = 0; j < 4; j++) {
      int64_t y = y0 + r, x = x0 + j;
      d[r][j] = y >= 0 && y < XH && x >= 0 && x < XW ? KCD(ld)(xc + y * xrs + x * K_CD_V) : (VEC){0};
    }
}

/* vt for tiles [t0, t0 + T) of every input block of sample xn: B^T d B, rows then columns,
 * with B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]. Lanes past C carry whatever the input
 * holds there; the product never sums them. */
KCD_INLINE void KCD(wino_in)(const k_cd_geom *g, const float *xn, float *vt, int64_t t0, int T) {
  int64_t tw = g->OW / 2, XH = k_cd_xrows(g), XW = k_cd_xcols(g);
  int64_t xcs = XH * XW * K_CD_V, xrs = XW * K_CD_V;
  for (int64_t cb = 0; cb < g->Cb; cb++)
    for (int t = 0; t < T; t++) {
      int64_t i = t0 + t;
      VEC d[4][4], r[4][4];
      KCD(wino_patch)(xn + cb * xcs, xrs, XH, XW, 2 * (i / tw) - g->vph, 2 * (i % tw) - g->vpw, d);
#pragma GCC unroll 4
      for (int j = 0; j < 4; j++) {
        VEC d0 = d[0][j], d1 = d[1][j], d2 = d[2][j], d3 = d[3][j];
        r[0][j] = d0 - d2; r[1][j] = d1 + d2; r[2][j] = d2 - d1; r[3][j] = d1 - d3;
      }
      float *o = vt + cb * 16 * T * K_CD_V + t * K_CD_V;
#pragma GCC unroll 4
      for (int a = 0; a < 4; a++) {
        KCD(st)(o + (a * 4 + 0) * T * K_CD_V, r[a][0] - r[a][2]);
        KCD(st)(o + (a * 4 + 1) * T * K_CD_V, r[a][1] + r[a][2]);
        KCD(st)(o + (a * 4 + 2) * T * K_CD_V, r[a][2] - r[a][1]);
        KCD(st)(o + (a * 4 + 3) * T * K_CD_V, r[a][1] - r[a][3]);
      }
    }
}

/* m[ab] for one transformed tap ab: the sum over input channels of vt * wu, T tiles times NF
 * output vectors in registers. */
KCD_INLINE void KCD(wino_mul)(const k_cd_geom *g, const float *vt, const float *wu, float *m, int ab,
                              int T, int NF) {
  VEC a0[KCD_WINO_TMAX], a1[K_CD_FT];
  int64_t wfs = g->Cb * 16 * K_CD_V * K_CD_V;
#pragma GCC unroll 32
  for (int t = 0; t < T; t++) { a0[t] = (VEC){0}; if (NF > 1) a1[t] = (VEC){0}; }
  for (int64_t cb = 0; cb < g->Cb; cb++) {
    int64_t cn = g->C - cb * K_CD_V < K_CD_V ? g->C - cb * K_CD_V : K_CD_V;
    const float *vp = vt + (cb * 16 + ab) * T * K_CD_V;
    const float *wp = wu + (cb * 16 + ab) * K_CD_V * K_CD_V;
    for (int64_t c = 0; c < cn; c++) {
      VEC w0 = KCD(ld)(wp + c * K_CD_V), w1 = NF > 1 ? KCD(ld)(wp + wfs + c * K_CD_V) : w0;
      const float *xc = vp + c;
#pragma GCC unroll 32
      for (int t = 0; t < T; t++) {
        VEC xv = KCD(bc)(xc[t * K_CD_V]);
        a0[t] += xv * w0;
        if (NF > 1) a1[t] += xv * w1;
      }
    }
  }
  float *mo = m + ab * T * NF * K_CD_V;
#pragma GCC unroll 32
  for (int t = 0; t < T; t++) {
    KCD(st)(mo + t * NF * K_CD_V, a0[t]);
    if (NF > 1) KCD(st)(mo + (t * NF + 1) * K_CD_V, a1[t]);
  }
}

/* Output tile t0 + t, vector j: A^T m A + bias, A^T = [1 1 1 0; 0 1 -1 -1], stored through
 * st at the tile's four positions. */
KCD_INLINE void KCD(wino_out)(const k_cd_geom *g, const float *m, VEC bias, float *y, const k_cd_store *st,
                              int64_t t0, int t, int j, int T, int NF) {
  int64_t tw = g->OW / 2, i = t0 + t, ycs = g->OH * g->OW * K_CD_V;
  VEC s[2][4];
  const float *mt = m + (t * NF + j) * K_CD_V;
  int64_t abs = T * NF * K_CD_V;
#pragma GCC unroll 4
  for (int b = 0; b < 4; b++) {
    VEC q0 = KCD(ld)(mt + b * abs), q1 = KCD(ld)(mt + (4 + b) * abs);
    VEC q2 = KCD(ld)(mt + (8 + b) * abs), q3 = KCD(ld)(mt + (12 + b) * abs);
    s[0][b] = q0 + q1 + q2;
    s[1][b] = q1 - q2 - q3;
  }
  int64_t at = j * ycs + (2 * (i / tw) * g->OW + 2 * (i % tw)) * K_CD_V;
#pragma GCC unroll 2
  for (int a = 0; a < 2; a++) {
    VEC o[2] = {s[a][0] + s[a][1] + s[a][2] + bias, s[a][1] - s[a][2] - s[a][3] + bias};
#pragma GCC unroll 2
    for (int b = 0; b < 2; b++) {
      int64_t off = at + (a * g->OW + b) * K_CD_V;
      VEC v = st ? KCD(store_tail)(o[b], st->res ? st->res + off : NULL, st) : o[b];
      KCD(st)(y + off, v);
    }
  }
}

KCD_INLINE void KCD(wino_group)(const k_cd_geom *g, const float *xn, const float *wu, VEC b0, VEC b1,
                                float *y, const k_cd_store *st, int64_t t0, int T, int NF) {
  float vt[K_CD_WINO_VT] __attribute__((aligned(64)));
  float m[16 * KCD_WINO_TMAX * K_CD_V] __attribute__((aligned(64)));
  KCD(wino_in)(g, xn, vt, t0, T);
  for (int ab = 0; ab < 16; ab++) KCD(wino_mul)(g, vt, wu, m, ab, T, NF);
  for (int t = 0; t < T; t++) {
    KCD(wino_out)(g, m, b0, y, st, t0, t, 0, T, NF);
    if (NF > 1) KCD(wino_out)(g, m, b1, y, st, t0, t, 1, T, NF);
  }
}

/* The tiles in groups of near-equal size, each size a compile-time constant, no more than
 * the register tiling allows nor vt holds. */
#define KCD_WINO_CASE(T) case T: KCD(wino_group)(g, xn, wu, b0, b1, y, st, t0, T, NF); break;
KCD_INLINE void KCD(wino_tiles)(const k_cd_geom *g, const float *xn, const float *wu, VEC b0, VEC b1,
                                float *y, const k_cd_store *st, int NF, int64_t tlo, int64_t thi) {
  int64_t tmax = NF > 1 ? K_CD_FT : K_CD_F1, fit = K_CD_WINO_VT / (g->Cb * 16 * K_CD_V);
  if (tmax > fit) tmax = fit > 0 ? fit : 1;   /* k_cd_wino keeps fit >= 4 */
  int64_t ntiles = thi - tlo, groups = (ntiles + tmax - 1) / tmax;
  for (int64_t i = 0, t0 = tlo; i < groups; i++) {
    int64_t T = (thi - t0) / (groups - i);
    if (NF > 1) switch (T) { K_CD_CASES_FT(KCD_WINO_CASE) }
    else switch (T) { K_CD_CASES_F1(KCD_WINO_CASE) }
    t0 += T;
  }
}

/* fwd_block's contract on the Winograd path (k_cd_wino in k_conv_direct.c says when it runs):
 * wf is the transformed weights; rows [oh0, oh1) are whole rows of 2 x 2 tiles (oh0 and oh1
 * even: k_cd_task_fwd splits in pairs of rows). Each tile is summed alone, in an order fixed by
 * the shapes, so how the tiles are grouped or the rows split changes no bit. */
static void KCD(fwd_wino_block)(const k_cd_geom *g, const float *xb, const float *wf, const float *bias,
                                float *yb, int64_t n, int64_t fb, int nf, const k_cd_store *st, int64_t oh0,
                                int64_t oh1) {
  int64_t tlo = oh0 / 2 * (g->OW / 2), thi = oh1 / 2 * (g->OW / 2);
  VEC b0 = {0}, b1 = {0};
  if (bias) {
    b0 = KCD(ld_part)(bias + fb * K_CD_V, g->F - fb * K_CD_V);
    if (nf > 1) b1 = KCD(ld_part)(bias + (fb + 1) * K_CD_V, g->F - (fb + 1) * K_CD_V);
  }
  const float *xn = xb + n * g->Cb * k_cd_xrows(g) * k_cd_xcols(g) * K_CD_V;
  const float *wu = wf + fb * g->Cb * 16 * K_CD_V * K_CD_V;
  float *y = yb + (n * g->Fb + fb) * g->OH * g->OW * K_CD_V;
  if (nf > 1) KCD(wino_tiles)(g, xn, wu, b0, b1, y, st, 2, tlo, thi);
  else KCD(wino_tiles)(g, xn, wu, b0, b1, y, st, 1, tlo, thi);
}

/* ---- backward: data gradient ------------------------------------------------------------ */

/* Scatters output positions [ow0, ow0+T) of row oh into the padded input gradient of input
 * blocks cb (and cb+1 when NC = 2): for each tap, the T input positions it touches are
 * loaded, receive the sum over output channels of dy * w, and are stored back. */
KCD_INLINE void KCD(bwd_data_tile)(const k_cd_geom *g, const float *dyn, const float *wd, float *dx,
                                   int64_t oh, int64_t ow0, int T, int NC, int SW) {
  int64_t sw = SW ? SW : g->sw, xrs = g->Wp * K_CD_V, ycs = g->OH * g->OW * K_CD_V;
  int64_t xcs = g->Hp * g->Wp * K_CD_V, wcs = g->Fb * g->kh * g->kw * K_CD_V * K_CD_V;
  const float *dyo = dyn + (oh * g->OW + ow0) * K_CD_V;
  for (int64_t ki = 0; ki < g->kh; ki++)
    for (int64_t kj = 0; kj < g->kw; kj++) {
      VEC a0[K_CD_BT], a1[K_CD_FT];
      float *dp = dx + (oh * g->sh + ki * g->dh) * xrs + (ow0 * sw + kj * g->dw) * K_CD_V;
#pragma GCC unroll 32
      for (int t = 0; t < T; t++) {
        a0[t] = KCD(ld)(dp + t * sw * K_CD_V);
        if (NC > 1) a1[t] = KCD(ld)(dp + xcs + t * sw * K_CD_V);
      }
      for (int64_t fb = 0; fb < g->Fb; fb++) {
        int64_t fn = g->F - fb * K_CD_V < K_CD_V ? g->F - fb * K_CD_V : K_CD_V;
        const float *dyp = dyo + fb * ycs;
        const float *wp = wd + ((fb * g->kh + ki) * g->kw + kj) * K_CD_V * K_CD_V;
        for (int64_t f = 0; f < fn; f++) {
          VEC w0 = KCD(ld)(wp + f * K_CD_V), w1 = NC > 1 ? KCD(ld)(wp + wcs + f * K_CD_V) : w0;
#pragma GCC unroll 32
          for (int t = 0; t < T; t++) {
            VEC d = KCD(bc)(dyp[t * K_CD_V + f]);
            a0[t] += d * w0;
            if (NC > 1) a1[t] += d * w1;
          }
        }
      }
#pragma GCC unroll 32
      for (int t = 0; t < T; t++) {
        KCD(st)(dp + t * sw * K_CD_V, a0[t]);
        if (NC > 1) KCD(st)(dp + xcs + t * sw * K_CD_V, a1[t]);
      }
    }
}

#define KCD_BWD_CASE(T) case T: KCD(bwd_data_tile)(g, dyn, wd, dx, oh, ow, T, NC, SW); break;
KCD_INLINE void KCD(bwd_data_row)(const k_cd_geom *g, const float *dyn, const float *wd, float *dx,
                                  int64_t oh, int NC, int SW) {
  int64_t tmax = NC > 1 ? K_CD_FT : K_CD_BT;
  int64_t tiles = (g->OW + tmax - 1) / tmax;
  for (int64_t i = 0, ow = 0; i < tiles; i++) {
    int64_t T = (g->OW - ow) / (tiles - i);
    if (NC > 1) switch (T) { K_CD_CASES_FT(KCD_BWD_CASE) }
    else switch (T) { K_CD_CASES_BT(KCD_BWD_CASE) }
    ow += T;
  }
}

static void KCD(bwd_data_rows)(const k_cd_geom *g, const float *dyn, const float *wd, float *dx, int nc) {
  for (int64_t oh = 0; oh < g->OH; oh++) {
    if (nc > 1) {
      if (g->sw == 1) KCD(bwd_data_row)(g, dyn, wd, dx, oh, 2, 1);
      else if (g->sw == 2) KCD(bwd_data_row)(g, dyn, wd, dx, oh, 2, 2);
      else KCD(bwd_data_row)(g, dyn, wd, dx, oh, 2, 0);
    } else {
      if (g->sw == 1) KCD(bwd_data_row)(g, dyn, wd, dx, oh, 1, 1);
      else if (g->sw == 2) KCD(bwd_data_row)(g, dyn, wd, dx, oh, 1, 2);
      else KCD(bwd_data_row)(g, dyn, wd, dx, oh, 1, 0);
    }
  }
}

/* dxb[n][cb .. cb+nc) = the data gradient of one sample and nc = 1 or 2 input-channel blocks
 * (padding included), from dyb and wd. The blocks are owned by the caller's task. */
static void KCD(bwd_data_block)(const k_cd_geom *g, const float *dyb, const float *wd, float *dxb,
                                int64_t n, int64_t cb, int nc) {
  int64_t xsz = g->Hp * g->Wp * K_CD_V;
  float *dx = dxb + (n * g->Cb + cb) * xsz;
  const float *dyn = dyb + n * g->Fb * g->OH * g->OW * K_CD_V;
  const float *w = wd + cb * g->Fb * g->kh * g->kw * K_CD_V * K_CD_V;
  memset(dx, 0, (size_t)(nc * xsz) * sizeof(float));
  KCD(bwd_data_rows)(g, dyn, w, dx, nc);
}

/* ---- backward: weight gradient ---------------------------------------------------------- */

/* dwb[fb][cb][ki][kj] rows c0 .. c0+CN (and the same of block fb+1 when NF = 2) (+)= the sum
 * over samples [0, ns) and output positions of x[c] * dy[f-vector]: CN x NF accumulators. */
KCD_INLINE void KCD(bwd_weight_tap)(const k_cd_geom *g, const float *xb, const float *dyb, float *dw,
                                    int64_t ns, int add, int64_t fb, int64_t cb, int64_t ki, int64_t kj,
                                    int64_t c0, int CN, int NF) {
  VEC a0[K_CD_V], a1[K_CD_V / 2];
  int64_t xrs = g->Wp * K_CD_V, xstep = g->sw * K_CD_V, ycs = g->OH * g->OW * K_CD_V;
  int64_t wfs = g->Cb * g->kh * g->kw * K_CD_V * K_CD_V;
  float *d0 = dw + c0 * K_CD_V, *d1 = d0 + wfs;
#pragma GCC unroll 32
  for (int c = 0; c < CN; c++) {
    a0[c] = add ? KCD(ld)(d0 + c * K_CD_V) : (VEC){0};
    if (NF > 1) a1[c] = add ? KCD(ld)(d1 + c * K_CD_V) : (VEC){0};
  }
  for (int64_t n = 0; n < ns; n++) {
    const float *xn = xb + ((n * g->Cb + cb) * g->Hp + ki * g->dh) * xrs + kj * g->dw * K_CD_V + c0;
    const float *dyn = dyb + (n * g->Fb + fb) * ycs;
    for (int64_t oh = 0; oh < g->OH; oh++) {
      const float *xp = xn + oh * g->sh * xrs, *dyp = dyn + oh * g->OW * K_CD_V;
      for (int64_t ow = 0; ow < g->OW; ow++, xp += xstep, dyp += K_CD_V) {
        VEC e0 = KCD(ld)(dyp), e1 = NF > 1 ? KCD(ld)(dyp + ycs) : e0;
#pragma GCC unroll 32
        for (int c = 0; c < CN; c++) {
          VEC x = KCD(bc)(xp[c]);
          a0[c] += x * e0;
          if (NF > 1) a1[c] += x * e1;
        }
      }
    }
  }
#pragma GCC unroll 32
  for (int c = 0; c < CN; c++) {
    KCD(st)(d0 + c * K_CD_V, a0[c]);
    if (NF > 1) KCD(st)(d1 + c * K_CD_V, a1[c]);
  }
}

#define KCD_BWW_CASE1(CN) case CN: KCD(bwd_weight_tap)(g, xb, dyb, dw, ns, add, fb, cb, ki, kj, 0, CN, 1); break;
#define KCD_BWW_CASE2(CN) case CN: KCD(bwd_weight_tap)(g, xb, dyb, dw, ns, add, fb, cb, ki, kj, c0, CN, 2); break;
/* The weight-gradient blocks of output blocks fb .. fb+nf (nf = 1 or 2), input block cb and
 * tap (ki, kj), summed over samples [0, ns) in a fixed order, onto their old value when add
 * is set: one task owns them, so no reduction across tasks. Two output vectors hold half an
 * input block at a time (V/2 x 2 accumulators); rows past C are written as 0. */
static void KCD(bwd_weight_block)(const k_cd_geom *g, const float *xb, const float *dyb, float *dwb,
                                  int64_t ns, int add, int64_t fb, int nf, int64_t cb, int64_t ki,
                                  int64_t kj) {
  int64_t cn = g->C - cb * K_CD_V < K_CD_V ? g->C - cb * K_CD_V : K_CD_V;
  int64_t wfs = g->Cb * g->kh * g->kw * K_CD_V * K_CD_V;
  float *dw = dwb + (((fb * g->Cb + cb) * g->kh + ki) * g->kw + kj) * K_CD_V * K_CD_V;
  if (!add)
    for (int j = 0; j < nf; j++) memset(dw + j * wfs, 0, K_CD_V * K_CD_V * sizeof(float));
  if (nf == 1) {
    switch (cn) { K_CD_CASES_V(KCD_BWW_CASE1) }
    return;
  }
  for (int64_t c0 = 0; c0 < cn; c0 += K_CD_V / 2) {
    int64_t m = cn - c0 < K_CD_V / 2 ? cn - c0 : K_CD_V / 2;
    switch (m) { K_CD_CASES_HV(KCD_BWW_CASE2) }
  }
}

/* ---- backward: weight gradient, Winograd F(3x3, 2x2) ------------------------------------ */

/* The weight gradient of a 3x3 stride-1 convolution with an even output, as the dual of the
 * forward's F(2x2, 3x3): with A = [1 0; 1 1; 1 -1; 0 -1] (the forward's A^T transposed),
 * each 2x2 tile of dy and the 4x4 input patch under it add (A dy A^T) . (B^T x B) to a 4x4
 * sum m per (output, input) channel, and dW = G^T m G once at the end (k_conv_direct.c,
 * in double). The sum is over every tile of every sample: a GEMM per transformed tap with
 * a long reduction, 16 multiply-adds per tile where the direct loop does 36, and its
 * transforms are adds and sign changes only (the 1/2s of G are all in the final step). A
 * task owns one row a of the 4x4 taps (ab = 4a + b) for its output blocks and input block:
 * row a of B^T x takes two rows of the patch and row a of A dy one or two rows of the tile,
 * so splitting a block's work four ways repeats no transform. m lives in dwb as
 * [Fb][Cb][16][V c][V f]; the tiles run in groups of KCD_WW_T, m's accumulators loaded and
 * stored once per group. */
#define KCD_WW_T 32

/* Row a of B^T d B for the 4x4 patch at xc (rows xrs floats apart): vx[b][t]. */
KCD_INLINE void KCD(ww_x_row)(const float *xc, int64_t xrs, int a, float *vx, int64_t bstride) {
  static const int r1[4] = {0, 1, 2, 1}, r2[4] = {2, 2, 1, 3};
  VEC q[4];
  const float *p1 = xc + r1[a] * xrs, *p2 = xc + r2[a] * xrs;
#pragma GCC unroll 4
  for (int j = 0; j < 4; j++) {
    VEC u = KCD(ld)(p1 + j * K_CD_V), v = KCD(ld)(p2 + j * K_CD_V);
    q[j] = a == 1 ? u + v : u - v;
  }
  KCD(st)(vx, q[0] - q[2]);
  KCD(st)(vx + bstride, q[1] + q[2]);
  KCD(st)(vx + 2 * bstride, q[2] - q[1]);
  KCD(st)(vx + 3 * bstride, q[1] - q[3]);
}

/* Row a of A e A^T for the 2x2 tile at e (rows ers floats apart): ud[b][t]. */
KCD_INLINE void KCD(ww_dy_row)(const float *e, int64_t ers, int a, float *ud, int64_t bstride) {
  VEC e00 = KCD(ld)(e), e01 = KCD(ld)(e + K_CD_V), e10 = KCD(ld)(e + ers), e11 = KCD(ld)(e + ers + K_CD_V);
  VEC q0 = a == 0 ? e00 : a == 1 ? e00 + e10 : a == 2 ? e00 - e10 : -e10;
  VEC q1 = a == 0 ? e01 : a == 1 ? e01 + e11 : a == 2 ? e01 - e11 : -e11;
  KCD(st)(ud, q0);
  KCD(st)(ud + bstride, q0 + q1);
  KCD(st)(ud + 2 * bstride, q0 - q1);
  KCD(st)(ud + 3 * bstride, -q1);
}

/* m[c][f] += sum over the group's tiles of vx[t][c] * ud[t][f], input channels c0 .. c0+CN
 * (CN <= V), NF output vectors. */
KCD_INLINE void KCD(ww_acc)(float *m0, float *m1, const float *vx, const float *ud, int64_t T, int64_t c0,
                            int CN, int NF) {
  VEC a0[K_CD_V], a1[K_CD_V / 2];
#pragma GCC unroll 32
  for (int c = 0; c < CN; c++) {
    a0[c] = KCD(ld)(m0 + (c0 + c) * K_CD_V);
    if (NF > 1) a1[c] = KCD(ld)(m1 + (c0 + c) * K_CD_V);
  }
  for (int64_t t = 0; t < T; t++) {
    const float *xv = vx + t * K_CD_V + c0;
    VEC e0 = KCD(ld)(ud + t * NF * K_CD_V), e1 = NF > 1 ? KCD(ld)(ud + (t * NF + 1) * K_CD_V) : e0;
#pragma GCC unroll 32
    for (int c = 0; c < CN; c++) {
      VEC x = KCD(bc)(xv[c]);
      a0[c] += x * e0;
      if (NF > 1) a1[c] += x * e1;
    }
  }
#pragma GCC unroll 32
  for (int c = 0; c < CN; c++) {
    KCD(st)(m0 + (c0 + c) * K_CD_V, a0[c]);
    if (NF > 1) KCD(st)(m1 + (c0 + c) * K_CD_V, a1[c]);
  }
}

#define KCD_WW_CASE1(CN) case CN: KCD(ww_acc)(m0, m1, vx + b * KCD_WW_T * K_CD_V, ud + b * KCD_WW_T * nf * K_CD_V, T, 0, CN, 1); break;
#define KCD_WW_CASE2(CN) case CN: KCD(ww_acc)(m0, m1, vx + b * KCD_WW_T * K_CD_V, ud + b * KCD_WW_T * nf * K_CD_V, T, c0, CN, 2); break;
/* Row a of m for output blocks fb .. fb+nf (nf = 1 or 2) and input block cb, summed over
 * the tiles of samples [0, ns) in a fixed order, onto its old value when add is set. Lanes
 * past C sum whatever the padded input holds there; k_conv_direct.c never unpacks them. */
static void KCD(bwd_weight_wino_block)(const k_cd_geom *g, const float *xb, const float *dyb, float *dwb,
                                       int64_t ns, int add, int64_t fb, int nf, int64_t cb, int a) {
  float vx[4 * KCD_WW_T * K_CD_V] __attribute__((aligned(64)));
  float ud[4 * KCD_WW_T * 2 * K_CD_V] __attribute__((aligned(64)));
  int64_t cn = g->C - cb * K_CD_V < K_CD_V ? g->C - cb * K_CD_V : K_CD_V;
  int64_t mfs = g->Cb * 16 * K_CD_V * K_CD_V, xrs = g->Wp * K_CD_V, yrs = g->OW * K_CD_V;
  int64_t tw = g->OW / 2, nt = g->OH / 2 * tw, total = ns * nt;
  float *mrow = dwb + ((fb * g->Cb + cb) * 16 + 4 * a) * K_CD_V * K_CD_V;
  if (!add)
    for (int j = 0; j < nf; j++) memset(mrow + j * mfs, 0, 4 * K_CD_V * K_CD_V * sizeof(float));
  for (int64_t g0 = 0; g0 < total; g0 += KCD_WW_T) {
    int64_t T = total - g0 < KCD_WW_T ? total - g0 : KCD_WW_T;
    for (int64_t t = 0; t < T; t++) {
      int64_t n = (g0 + t) / nt, i = (g0 + t) % nt, ty = i / tw, tx = i % tw;
      KCD(ww_x_row)(xb + ((n * g->Cb + cb) * g->Hp + 2 * ty) * xrs + 2 * tx * K_CD_V, xrs, a, vx + t * K_CD_V,
                    KCD_WW_T * K_CD_V);
      for (int j = 0; j < nf; j++)
        KCD(ww_dy_row)(dyb + ((n * g->Fb + fb + j) * g->OH + 2 * ty) * yrs + 2 * tx * K_CD_V, yrs, a,
                       ud + (t * nf + j) * K_CD_V, KCD_WW_T * nf * K_CD_V);
    }
    for (int b = 0; b < 4; b++) {
      float *m0 = mrow + b * K_CD_V * K_CD_V, *m1 = m0 + mfs;
      if (nf == 1) {
        switch (cn) { K_CD_CASES_V(KCD_WW_CASE1) }
        continue;
      }
      for (int64_t c0 = 0; c0 < cn; c0 += K_CD_V / 2) {
        int64_t m = cn - c0 < K_CD_V / 2 ? cn - c0 : K_CD_V / 2;
        switch (m) { K_CD_CASES_HV(KCD_WW_CASE2) }
      }
    }
  }
}

/* The width's entry in the dispatch table. */
const k_cd_isa KCD(k_cd_isa) = {K_CD_NAME, K_CD_V, KCD(pack_rows), KCD(unpack_rows), KCD(pro_rows),
                                  KCD(fwd_block), KCD(fwd_wino_block), KCD(fwd_nchw_rows), KCD(bwd_data_block),
                                  KCD(bwd_weight_block), KCD(bwd_weight_wino_block)};

#undef VEC
#undef KCD_ROUNDS
#undef KCD_LO
#undef KCD_HI
#undef KCD_FWD_CASE
#undef KCD_WINO_CASE
#undef KCD_WINO_TMAX
#undef KCD_BWD_CASE
#undef KCD_BWW_CASE1
#undef KCD_BWW_CASE2
#undef KCD_WW_CASE1
#undef KCD_WW_CASE2
#undef KCD_WW_T
/* The parameters too, so the next width defines them afresh. */
#undef K_CD_V
#undef K_CD_SFX
#undef K_CD_NAME
#undef K_CD_FT
#undef K_CD_F1
#undef K_CD_BT
#undef K_CD_CASES_FT
#undef K_CD_CASES_F1
#undef K_CD_CASES_BT
#undef K_CD_CASES_V
#undef K_CD_CASES_HV
