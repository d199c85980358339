/*
** backoff_systems.h -- internal to the engine (backoff.c): the delays
** of the systems users port from, computed as each reference computes
** them, so that the same draws give the same sequence:
**
**   google       com.google.api.client.util.ExponentialBackOff (Java)
**   cenkalti     github.com/cenkalti/backoff/v4 ExponentialBackOff (Go)
**   eventsauce   EventSauce BackOff 1.x (PHP)
**   polly        Polly v8's RetryStrategyOptions delays (.NET)
**   decorrelated_v2   Polly.Contrib.WaitAndRetry's
**                DecorrelatedJitterBackoffV2 (.NET)
**   aws          the AWS Architecture Blog's "Exponential Backoff And
**                Jitter" formulas: full, equal, decorrelated
**
** Where a reference works in whole units (Java's int milliseconds, Go's
** int64 nanoseconds), so does its system here, truncating where the
** reference truncates: Google's interval loses its fractions of a
** millisecond at every step, and a port must lose them too.  Where a
** reference works in integers only for its output (EventSauce's
** microseconds, .NET's 100 ns ticks), seconds are kept: the difference
** is below a microsecond.  Deliberately refused: negative delays and
** integer wrap-around (results saturate instead), tries <= 0.
*/

#ifndef BACKOFF_SYSTEMS_H
#define BACKOFF_SYSTEMS_H

#include <math.h>

#include "backoff_types.h"
#include "backoff_math.h"
#include "backoff_strategies.h"

/* the systems that compute their delay whole, jitter and cap included:
   the pipeline's jitter and max_delay steps pass them by */
static inline int jitters_itself(int s) {
  return s == BACKOFF_GOOGLE || s == BACKOFF_CENKALTI ||
         s == BACKOFF_EVENTSAUCE || s == BACKOFF_POLLY ||
         s == BACKOFF_DECORRELATED_V2;
}

/* ----------------------------------------------------------------- */
/* Google's ExponentialBackOff and cenkalti/backoff v4               */
/* ----------------------------------------------------------------- */

#define JAVA_INT_MAX 2147483647.0
#define GO_INT64_MAX 9223372036854775807.0

/* units per second: Java's int milliseconds, Go's Duration nanoseconds */
static inline double units_per_second(int s) {
  return s == BACKOFF_GOOGLE ? 1e3 : 1e9;
}

/* seconds as the whole units the user meant (0.5 s is 500 ms, though
   0.5 * 1000 could round below 500 for other values) */
static inline double whole_units(double seconds, double per_second) {
  return floor(fin(seconds * per_second) + 0.5);
}

/* whole nanoseconds from the start to ts (nanoTime's or time.Sub's) */
static inline double elapsed_ns(const backoff_t *b, double ts) {
  return floor(fin(fin(ts - b->start) * 1e9) + 0.5);
}

/* a double truncated toward zero into [0, limit] ((int) in Java, a
   Duration in Go; both saturate here: no wrap-around) */
static inline double truncate_to(double x, double limit) {
  if (!(x > 0)) return 0;
  if (x >= limit) return limit;
  return floor(x);
}

/* the interval the next failure starts from, in units */
static inline double current_units(const backoff_t *b, double per) {
  return b->has_seq ? b->seq_a
                    : whole_units(b->cfg.p.google.initial_interval, per);
}

/* Google's elapsed-time rule, before anything is drawn: STOP once the
   whole milliseconds since the start exceed max_elapsed_time (kept as
   max_actual_duration; strict, as Java's) */
static inline int google_expired(const backoff_t *b, double ts) {
  double ms = elapsed_ns(b, ts) / 1e6;
  ms = ms < 0 ? ceil(ms) : floor(ms);       /* Java's long division */
  return ms > whole_units(b->cfg.max_actual_duration, 1e3);
}

/*
** One delay of google or cenkalti, in units, and the interval advanced:
** randomized = (int)(cur - d + r * ((cur + d) - (cur - d) + 1)) with
** d = factor * cur (the + 1 is one unit: 1 ms in Java, 1 ns in Go);
** then cur becomes max_interval once cur >= max_interval / multiplier,
** else (int)(cur * multiplier).  One draw every time, even with a
** factor of 0 (both references draw it); Go returns cur as it is then.
*/
static inline double interval_delay(backoff_t *b) {
  const backoff_config *c = &b->cfg;
  int s = c->strategy;
  double per = units_per_second(s);
  double limit = s == BACKOFF_GOOGLE ? JAVA_INT_MAX : GO_INT64_MAX;
  double rf = c->jitter_factor;           /* randomization_factor */
  double m = c->p.google.multiplier;
  double max = whole_units(c->max_delay, per);   /* max_interval */
  double cur = current_units(b, per);
  double r = draw(b), delta, lo, hi, value;
  if (s == BACKOFF_CENKALTI && rf == 0) {
    value = cur;
  } else {
    delta = rf * cur;
    lo = cur - delta;
    hi = cur + delta;
    value = truncate_to(fin(lo + fin(r * fin((hi - lo) + 1))), limit);
  }
  b->seq_a = cur >= max / m ? max : truncate_to(fin(cur * m), limit);
  b->has_seq = 1;
  return value;
}

/* ----------------------------------------------------------------- */
/* EventSauce: min(max_delay, the curve), then the jitter            */
/* ----------------------------------------------------------------- */

/* FullJitter, HalfJitter, ScatteredJitter(range) on d: one draw, even
   for a d of 0 (PHP's mt_rand(0, 0) draws too) */
static inline double eventsauce_jitter(backoff_t *b, double d) {
  const backoff_config *c = &b->cfg;
  double u = draw(b), spread, half;
  switch (c->jitter) {
    case BACKOFF_JITTER_FULL: return d * u;
    case BACKOFF_JITTER_HALF:   /* never above d, subnormal d included */
      half = d / 2 + d / 2 * u;
      return half > d ? d : half;
    default:    /* scattered: d - d * range + U(0, 2 * d * range) */
      spread = fin(d * c->jitter_factor);
      return fin(fin(d - spread) + fin(2 * spread) * u);
  }
}

/* tries = n: the curve (exponential, fibonacci, linear or 0), capped,
   then jittered (JitterAfterThreshold: only what exceeds the threshold,
   no draw below it) */
static inline double eventsauce_delay(backoff_t *b, uint64_t n) {
  const backoff_config *c = &b->cfg;
  const double first = c->p.eventsauce.initial_delay;
  double d = 0, t = c->p.eventsauce.jitter_threshold;
  switch (c->backoff_type) {
    case BACKOFF_TYPE_EXPONENTIAL:
      d = fin(first * fin(pow(c->p.eventsauce.base, (double)(n - 1))));
      break;
    case BACKOFF_TYPE_FIBONACCI: d = fibonacci_next(b, n, first, first); break;
    case BACKOFF_TYPE_LINEAR: d = fin(first * (double)n); break;
    default: return 0;     /* NoWaiting */
  }
  if (c->has_max_delay && d > c->max_delay) d = c->max_delay;
  if (c->jitter == BACKOFF_JITTER_NONE) return d;
  if (t > 0) return d <= t ? d : fin(t + eventsauce_jitter(b, d - t));
  return eventsauce_jitter(b, d);
}

/* ----------------------------------------------------------------- */
/* Polly v8 and Polly.Contrib's DecorrelatedJitterBackoffV2          */
/* ----------------------------------------------------------------- */

/* TimeSpan.MaxValue, and V2's clamp (long.MaxValue - 1000 ticks, as a
   double), in seconds */
#define TIMESPAN_MAX 922337203685.4775807
#define V2_TICKS_MAX 922337203685.4774784

/*
** V2 for 0-based attempt a from the first delay's median: t = a + r,
** f(t) = 2^t * tanh(sqrt(4t)); the delay is (f(t) - f(previous t)) / 1.4
** times the median (f of the previous t in seq_a, 0 at first).  Once
** 2^t overflows, the largest delay from then on (Polly v8's guard).
*/
static inline double v2_delay(backoff_t *b, uint64_t a, double median) {
  double t = (double)a + draw(b), next, prev = b->has_seq ? b->seq_a : 0;
  next = pow(2.0, t) * tanh(sqrt(4.0 * t));
  b->has_seq = 1;
  if (!is_finite(next) || !is_finite(prev)) {
    b->seq_a = HUGE_VAL;    /* every later delay is the largest */
    return V2_TICKS_MAX;
  }
  b->seq_a = next;
  next = fin(fin((next - prev) * (1 / 1.4)) * median);
  return next > V2_TICKS_MAX ? V2_TICKS_MAX : next;
}

/* Polly's ApplyJitter: d + (d * 0.5 * r - d * 0.5 / 2), in [0.75d, 1.25d] */
static inline double polly_jitter(backoff_t *b, double d) {
  double offset = (d * 0.5) / 2;
  return fin(d + (fin(d * 0.5 * draw(b)) - offset));
}

/*
** Polly v8's GetRetryDelay for 0-based attempt a: no draw for a delay of
** 0 or without jitter; constant, linear ((a+1) * delay) and exponential
** (2^a * delay, or V2 with jitter); then MaxDelay clamps (after jitter).
** An overflow gives MaxDelay, or TimeSpan.MaxValue without one.
*/
static inline double polly_delay(backoff_t *b, uint64_t a) {
  const backoff_config *c = &b->cfg;
  double base = c->p.polly.delay, d, top;
  top = c->has_max_delay ? c->max_delay : TIMESPAN_MAX;
  if (base == 0) return 0;
  switch (c->backoff_type) {
    case BACKOFF_TYPE_LINEAR: d = fin(((double)a + 1) * base); break;
    case BACKOFF_TYPE_EXPONENTIAL:
      d = c->use_jitter ? v2_delay(b, a, base)
                        : fin(fin(pow(2.0, (double)a)) * base);
      break;
    default: d = base; break;
  }
  if (d > TIMESPAN_MAX) return top;   /* OverflowException, caught */
  if (c->use_jitter && c->backoff_type != BACKOFF_TYPE_EXPONENTIAL)
    d = polly_jitter(b, d);
  if (d > TIMESPAN_MAX) return top;
  return d > top ? top : d;
}

/* ----------------------------------------------------------------- */
/* the AWS article                                                   */
/* ----------------------------------------------------------------- */

/* sleep = min(cap, U(base, 3 * sleep)), sleep starting at base; full
   and equal are base * 2^n with the pipeline's full or equal jitter
   (which draw from the capped value), n from 0 */
static inline double aws_delay(backoff_t *b, uint64_t n) {
  const backoff_config *c = &b->cfg;
  double base = c->p.aws.base, tmp;
  if (c->jitter != BACKOFF_JITTER_DECORRELATED)
    return fin(base * (n <= 1024 ? pow2(n - 1) : DBL_MAX));
  tmp = b->has_seq ? b->seq_a : base;
  tmp = between(b, base, fin(tmp * 3));
  if (tmp > c->max_delay) tmp = c->max_delay;
  b->seq_a = tmp;
  b->has_seq = 1;
  return tmp;
}

#endif
