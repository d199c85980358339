/*
** backoff_math.h -- internal to the core: the numeric helpers of the
** engine and of the configuration kit, and the engine's draws.
**
** Every arithmetic result that could overflow goes through fin(), which
** maps +-inf to +-DBL_MAX: a finite input then never produces inf or
** NaN further down (no inf - inf, no 0 * inf), and fin() is the
** identity on every finite value, so it never changes a normal result.
*/

#ifndef BACKOFF_MATH_H
#define BACKOFF_MATH_H

#include <float.h>
#include <stdint.h>
#include <string.h>

#include "backoff_rng.h"
#include "backoff_types.h"

/* The steps of one operation, inlined into each caller as they were
   when the pipeline had one caller: given a second (the hint's entry),
   GCC put raw_failure, exponential and timeouts out of line, and
   b:failure(ts) paid for the calls (about 15 instructions, 4%). */
#if defined(__GNUC__)
#define PIPELINE static inline __attribute__((always_inline))
#else
#define PIPELINE static inline
#endif

static inline double fin(double x) {
  if (x > DBL_MAX) return DBL_MAX;
  if (x < -DBL_MAX) return -DBL_MAX;
  return x;
}

static inline int is_finite(double x) {
  return x == x && x <= DBL_MAX && x >= -DBL_MAX;
}

/* 2^k for 0 <= k <= 1023, exactly, from the bits of the double */
static inline double pow2(uint64_t k) {
  uint64_t bits = (k + 1023) << 52;
  double d;
  memcpy(&d, &bits, sizeof d);
  return d;
}

/* +0.0 for -0.0, so that nothing returned prints as "-0" */
static inline double unsign_zero(double x) {
  return x == 0 ? 0.0 : x;
}

/* one uniform draw in [0, 1): the object's generator, or the caller's
   source while one is lent (which may also give 1).  general is 0 (a
   constant, folded) on the Perl family's own path, where no source is
   ever lent: an object lent one is off that path (cfg.special) */
static inline double draw_(backoff_t *b, int general) {
  if (general && b->draws != NULL) return b->draws->next(b->draws->ctx);
  return rng_double(&b->rng);
}
#define draw(b) draw_((b), 1)

/* lo + (hi - lo) * U(0, 1): the reference's way of writing d * U(1-f,
   1+f), with lo = d * (1-f) and hi = d * (1+f) */
static inline double between_(backoff_t *b, double lo, double hi,
                              int general) {
  return fin(lo + fin(hi - lo) * draw_(b, general));
}
#define between(b, lo, hi) between_((b), (lo), (hi), 1)

static inline double scatter(backoff_t *b, double d, double f, int general) {
  return between_(b, fin(d * (1 - f)), fin(d * (1 + f)), general);
}

#endif
