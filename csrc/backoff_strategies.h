/*
** backoff_strategies.h -- internal to the engine (backoff.c): the raw
** delays of the Perl family's strategies (API.md section 2), before
** jitter and limits.  Inlined into the pipeline (PIPELINE).
*/

#ifndef BACKOFF_STRATEGIES_H
#define BACKOFF_STRATEGIES_H

#include <math.h>

#include "backoff_types.h"
#include "backoff_math.h"

static int is_increase_decrease(int s) {
  return s == BACKOFF_LILD || s == BACKOFF_LIMD ||
         s == BACKOFF_MILD || s == BACKOFF_MIMD;
}

/* initial * base ** (n-1); initial is finite, so fin() first keeps
   0 * inf (NaN) out.  Base 2 (the default) is a power of two: built
   exactly from its bits, as pow would return it, at a fraction of pow's
   cost; past 2^1023 pow gives inf, which fin makes DBL_MAX. */
PIPELINE double exponential(double initial, double base, uint64_t n) {
  if (base == 2)   /* pow(2, n-1) overflows past 1023 */
    return fin(initial * (n <= 1024 ? pow2(n - 1) : DBL_MAX));
  return fin(initial * fin(pow(base, (double)(n - 1))));
}

/* min(cap, U(base, prev * multiplier)), prev starting at base (the AWS
   article's formula, which pins at the cap); with cap_then_jitter
   U(base, min(cap, prev * multiplier)) (Polly.Contrib's
   AwsDecorrelatedJitterBackoff), which never does */
PIPELINE double decorrelated(backoff_t *b, int general) {
  const backoff_config *c = &b->cfg;
  double base = c->p.decorrelated.initial_delay;
  double tmp = b->has_seq ? b->seq_a : base;
  tmp = fin(tmp * c->p.decorrelated.multiplier);
  if (general && c->cap_then_jitter) {     /* (never on the hot path) */
    if (tmp > c->max_delay) tmp = c->max_delay;
    /* the contrib's Uniform(a, b) draws nothing when a == b (a minimum
       of 0, or equal to the maximum): a replay of its draws must not
       run out */
    if (tmp != base) tmp = between_(b, base, tmp, general);
  } else {
    tmp = between_(b, base, tmp, general);
  }
  if (tmp > c->max_delay) tmp = c->max_delay;
  b->seq_a = tmp;
  b->has_seq = 1;
  return tmp;
}

/* D(n) of a fibonacci-like sequence D1 = D2 = first, in seq_a/seq_b;
   n counts from 1 and goes up by one (attempts) */
PIPELINE double fibonacci_next(backoff_t *b, uint64_t n, double first1,
                                    double first2) {
  double tmp;
  if (n <= 1) {
    b->seq_a = 0;
    b->seq_b = first1;
  } else if (n == 2) {
    b->seq_a = first1;
    b->seq_b = first2;
  } else {
    tmp = b->seq_b;
    b->seq_b = fin(b->seq_a + b->seq_b);
    b->seq_a = tmp;
  }
  return b->seq_b;
}

/* the n-th consecutive failure of the Perl family, n >= 1 */
PIPELINE double raw_failure(backoff_t *b, uint64_t n, int general) {
  const backoff_config *c = &b->cfg;
  const backoff_params *p = &c->p;
  switch (c->strategy) {
    case BACKOFF_CONSTANT:
      return p->constant.delay;
    case BACKOFF_LINEAR:
      return fin(p->linear.initial_delay +
                 fin((double)(n - 1) * p->linear.delay_increment));
    case BACKOFF_EXPONENTIAL:
    case BACKOFF_RETRY_TIMEOUTS:
      return exponential(p->exponential.initial_delay,
                         p->exponential.exponent_base, n);
    case BACKOFF_FIBONACCI:
      /* seq_a = D(n-1), seq_b = D(n), the raw (unclamped) values */
      return fibonacci_next(b, n, p->fibonacci.initial_delay1,
                            p->fibonacci.initial_delay2);
    case BACKOFF_LILD:   /* same place as limd's */
    case BACKOFF_LIMD:
      return b->has_seq ? fin(b->seq_a + p->lild.delay_increment_on_failure)
                        : p->lild.initial_delay;
    case BACKOFF_MILD:   /* same place as mimd's */
    case BACKOFF_MIMD:
      return b->has_seq ? fin(b->seq_a * p->mild.delay_multiple_on_failure)
                        : p->mild.initial_delay;
    case BACKOFF_DECORRELATED:
      return decorrelated(b, general);
    default:
#if defined(__GNUC__)
      /* the systems never come here (backoff_systems.h): telling the
         compiler spares the switch a range check */
      __builtin_unreachable();
#else
      return 0;
#endif
  }
}

static double raw_success(backoff_t *b) {
  const backoff_params *p = &b->cfg.p;
  switch (b->cfg.strategy) {
    case BACKOFF_LILD:   /* same place as mild's */
    case BACKOFF_MILD:
      return b->has_seq ? fin(b->seq_a + p->lild.delay_increment_on_success)
                        : p->lild.initial_delay;
    case BACKOFF_LIMD:   /* same place as mimd's */
    case BACKOFF_MIMD:
      return b->has_seq ? fin(b->seq_a * p->limd.delay_multiple_on_success)
                        : p->limd.initial_delay;
    case BACKOFF_DECORRELATED:
      b->has_seq = 0;  /* prev returns to initial_delay */
      return p->decorrelated.delay_on_success;
    default:
      if (b->cfg.strategy >= BACKOFF_FIRST_SYSTEM) {
        /* the systems: back to the first interval (Google's, cenkalti's),
           V2's and AWS's memory forgotten; no delay of their own */
        b->has_seq = 0;
        return 0;
      }
      /* delay_on_success sits at the same place in the others */
      return p->linear.delay_on_success;
  }
}

#endif
