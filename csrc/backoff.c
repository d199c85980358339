/*
** backoff.c -- the strategies, jitter, limits and per-attempt timeouts.
**
** The pipeline of one operation follows Perl's Algorithm::Backoff 0.010
** and Algorithm::Backoff::RetryTimeouts step by step, including the
** order of floating-point operations, so that results match the
** reference to the last bit where the reference is well defined.  The
** deliberate differences (API.md section 8) are marked "DIFF n".
**
** Every arithmetic result that could overflow goes through fin()
** (backoff_math.h).
*/

#include <float.h>
#include <math.h>
#include <string.h>

#include "backoff.h"
#include "backoff_math.h"

/* The steps of one operation, inlined into each caller as they were
   when the pipeline had one caller: given a second (the hint's entry),
   GCC put raw_failure, exponential and timeouts out of line, and
   b:failure(ts) paid for the calls (about 15 instructions, 4%). */
#if defined(__GNUC__)
#define PIPELINE static inline __attribute__((always_inline))
#else
#define PIPELINE static inline
#endif

/* ----------------------------------------------------------------- */
/* xoshiro256** 1.0 (Blackman and Vigna, 2018, public domain         */
/* algorithm), seeded with splitmix64 as its authors recommend.      */
/* ----------------------------------------------------------------- */

static uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

BACKOFF_API void backoff_rng_seed(backoff_rng *r, uint64_t seed) {
  uint64_t x = seed;
  int i;
  for (i = 0; i < 4; i++)
    r->s[i] = splitmix64(&x);
  /* splitmix64 is a bijection of a counter: four consecutive outputs
     cannot all be zero, but keep the invariant explicit */
  if ((r->s[0] | r->s[1] | r->s[2] | r->s[3]) == 0)
    r->s[1] = 0xff;
}

BACKOFF_API uint64_t backoff_rng_next(backoff_rng *r) {
  uint64_t *s = r->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

/* [0, 1) from the top 53 bits, as Lua 5.4's I2d does */
BACKOFF_API double backoff_rng_double(backoff_rng *r) {
  return (double)(backoff_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* ----------------------------------------------------------------- */
/* names                                                             */
/* ----------------------------------------------------------------- */

BACKOFF_API const char *backoff_give_up_name(int g) {
  switch (g) {
    case BACKOFF_MAX_ATTEMPTS: return "max_attempts";
    case BACKOFF_MAX_DURATION: return "max_actual_duration";
    case BACKOFF_RETRY_AFTER: return "retry_after";
    default: return NULL;
  }
}

BACKOFF_API const char *backoff_strerror(int status) {
  switch (status) {
    case BACKOFF_OK: return "ok";
    case BACKOFF_EINVAL: return "invalid configuration or hint";
    case BACKOFF_ETIME: return "timestamp is not a finite number";
    default: return "unknown status";
  }
}

/* ----------------------------------------------------------------- */
/* what a configuration needs                                        */
/* ----------------------------------------------------------------- */

BACKOFF_API int backoff_config_draws(const backoff_config *c) {
  return c->strategy == BACKOFF_DECORRELATED ||
         (c->jitter != BACKOFF_JITTER_NONE &&
          (c->jitter != BACKOFF_JITTER_PROPORTIONAL || c->jitter_factor > 0)) ||
         (backoff_config_timeouts_active(c) && c->timeout_jitter_factor > 0);
}

BACKOFF_API int backoff_config_timeouts_active(const backoff_config *c) {
  return c->timeouts && c->max_actual_duration > 0;
}

/* ----------------------------------------------------------------- */
/* jitter                                                            */
/* ----------------------------------------------------------------- */

/*
** d * U(1-f, 1+f), written as the reference writes it:
** min + (max - min) * U(0, 1).  Used for delays and for timeouts.
*/
static double scatter(backoff_rng *rng, double d, double f) {
  double lo = fin(d * (1 - f));
  double hi = fin(d * (1 + f));
  return fin(lo + fin(hi - lo) * backoff_rng_double(rng));
}

PIPELINE double add_jitter(backoff_t *b, double d) {
  const backoff_config *c = &b->cfg;
  double cap;
  if (d == 0) return d;
  switch (c->jitter) {
    case BACKOFF_JITTER_PROPORTIONAL:
      return c->jitter_factor > 0 ? scatter(&b->rng, d, c->jitter_factor) : d;
    case BACKOFF_JITTER_FULL:
      /* DIFF 7: draw from the capped delay (AWS's formulas) */
      cap = (c->has_max_delay && d > c->max_delay) ? c->max_delay : d;
      return cap * backoff_rng_double(&b->rng);
    case BACKOFF_JITTER_EQUAL:
      cap = (c->has_max_delay && d > c->max_delay) ? c->max_delay : d;
      cap = cap / 2;
      return cap + cap * backoff_rng_double(&b->rng);
    default:
      return d;
  }
}

static double timeout_jitter(backoff_t *b, double t) {
  double f = b->cfg.timeout_jitter_factor;
  return (t != 0 && f > 0) ? scatter(&b->rng, t, f) : t;
}

/* step 8: max_delay, then 0, then min_delay (which wins) */
static double clamp_delay(const backoff_config *c, double d) {
  if (c->has_max_delay && d > c->max_delay) d = c->max_delay;
  if (d < 0) d = 0;
  if (d < c->min_delay) d = c->min_delay;
  return d;
}

/* ----------------------------------------------------------------- */
/* the strategies: the raw delay of one operation                    */
/* ----------------------------------------------------------------- */

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

/* min(cap, U(base, prev * multiplier)), prev starting at base */
PIPELINE double decorrelated(backoff_t *b) {
  const backoff_config *c = &b->cfg;
  double base = c->p.decorrelated.initial_delay;
  double tmp = b->has_seq ? b->seq_a : base;
  tmp = fin(tmp * c->p.decorrelated.multiplier);
  tmp = fin(base + fin(tmp - base) * backoff_rng_double(&b->rng));
  if (tmp > c->max_delay) tmp = c->max_delay;
  b->seq_a = tmp;
  b->has_seq = 1;
  return tmp;
}

/* n-th consecutive failure, n >= 1 */
PIPELINE double raw_failure(backoff_t *b) {
  const backoff_config *c = &b->cfg;
  const backoff_params *p = &c->p;
  uint64_t n = b->attempts;
  double tmp;
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
      if (n == 1) {
        b->seq_a = 0;
        b->seq_b = p->fibonacci.initial_delay1;
      } else if (n == 2) {
        b->seq_a = p->fibonacci.initial_delay1;
        b->seq_b = p->fibonacci.initial_delay2;
      } else {
        tmp = b->seq_b;
        b->seq_b = fin(b->seq_a + b->seq_b);
        b->seq_a = tmp;
      }
      return b->seq_b;
    case BACKOFF_LILD:   /* same place as limd's */
    case BACKOFF_LIMD:
      return b->has_seq ? fin(b->seq_a + p->lild.delay_increment_on_failure)
                        : p->lild.initial_delay;
    case BACKOFF_MILD:   /* same place as mimd's */
    case BACKOFF_MIMD:
      return b->has_seq ? fin(b->seq_a * p->mild.delay_multiple_on_failure)
                        : p->mild.initial_delay;
    case BACKOFF_DECORRELATED:
      return decorrelated(b);
    default:
      return 0;
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
    default:   /* delay_on_success sits at the same place in the others */
      return p->linear.delay_on_success;
  }
}

/* ----------------------------------------------------------------- */
/* the pipeline                                                      */
/* ----------------------------------------------------------------- */

/* the timeout before any operation: max(jitter(dur * f), min) */
static void initial_timeout(backoff_t *b) {
  const backoff_config *c = &b->cfg;
  double t;
  if (!backoff_config_timeouts_active(c)) {
    b->timeout = 0;
    return;
  }
  t = fin(c->max_actual_duration * c->adjust_timeout_factor);
  t = timeout_jitter(b, t);
  if (c->min_adjust_timeout > t) t = c->min_adjust_timeout;
  b->timeout = unsign_zero(t);
}

/* DIFF 3: a time before the last recorded one counts as that one */
static double effective_ts(const backoff_t *b, double ts) {
  if (b->has_last_ts) return ts < b->last_ts ? b->last_ts : ts;
  if (b->cfg.timeouts && ts < b->start) return b->start;
  return ts;
}

static void fill_result(const backoff_t *b, backoff_result *r, int give_up) {
  r->give_up = give_up;
  r->delay = give_up ? 0 : b->prev_delay;
  r->own = r->delay;
  r->has_timeout = backoff_config_timeouts_active(&b->cfg);
  r->timeout = r->has_timeout ? b->timeout : 0;
}

/* a give-up records nothing but, with timeouts on, the time (as
   RetryTimeouts::failure does) */
static int give_up(backoff_t *b, double ts, backoff_result *r, int why) {
  if (b->cfg.timeouts) {
    b->last_ts = ts;
    b->has_last_ts = 1;
  }
  fill_result(b, r, why);
  return BACKOFF_OK;
}

/* step 9: per-attempt timeouts, as RetryTimeouts::_set_last_timeout;
   d is the strategy's delay, hint the server's (0: none); returns the
   strategy's delay capped by the time left, and sets b->timeout from
   the delay that will be returned, max(that, hint) */
PIPELINE double timeouts(backoff_t *b, double ts, double d,
                         double hint) {
  const backoff_config *c = &b->cfg;
  double f = c->adjust_timeout_factor;
  double left = fin(c->max_actual_duration - fin(ts - b->start));
  double max_d = fin(left * (1 - f));
  double t;
  if (d > max_d) d = max_d;
  t = fin(fin(left - (hint > d ? hint : d)) * f);
  t = timeout_jitter(b, t);
  if (c->min_adjust_timeout > t) t = c->min_adjust_timeout;
  b->timeout = unsign_zero(t);
  return d < 0 ? 0 : d;    /* DIFF 5 */
}

/*
** Steps 5 to 10 of API.md section 3, with the server's hint (0: none).
** Written once, compiled twice: record() passes a constant 0, which
** folds every test of the hint away, so that a failure or success
** without one runs the pipeline it ran before hints existed (the tests,
** few as they are, cost b:failure(ts) some 5%: branches, code layout).
** Only backoff_failure_hint() pays for them, through record_hint().
*/
PIPELINE int record_steps(backoff_t *b, double ts, double raw, double hint,
                          backoff_result *r) {
  const backoff_config *c = &b->cfg;
  double d = raw, seq = 0, own;
  /* step 5 */
  if (!b->has_last_ts) {
    b->last_ts = c->timeouts ? b->start : ts;
    b->has_last_ts = 1;
  }
  /* step 6: raw + previous delay - time that actually passed */
  if (c->consider_actual_delay)
    d = fin(fin(d + b->prev_delay) - fin(ts - b->last_ts));
  /* DIFF 2: the *I*D sequence advances from clamp(raw) when the
     actual delay is considered, so the previous delay counts once */
  if (c->consider_actual_delay && is_increase_decrease(c->strategy))
    seq = clamp_delay(c, raw);
  /* step 7 */
  d = add_jitter(b, d);
  /* step 8 */
  d = clamp_delay(c, d);
  own = unsign_zero(d);
  /* step 9 */
  if (backoff_config_timeouts_active(c))
    d = timeouts(b, ts, d, hint);
  /* step 10; the strategy's memory never sees the hint */
  d = unsign_zero(d);
  if (hint <= d) hint = 0;      /* the strategy asks for as long */
  b->last_ts = ts;
  b->prev_delay = hint > 0 ? hint : d;
  if (is_increase_decrease(c->strategy)) {
    b->seq_a = c->consider_actual_delay ? seq : d;
    b->has_seq = 1;
  }
  fill_result(b, r, BACKOFF_CONTINUE);
  r->own = own;
  return BACKOFF_OK;
}

static int record(backoff_t *b, double ts, double raw, backoff_result *r) {
  return record_steps(b, ts, raw, 0, r);
}

static int record_hint(backoff_t *b, double ts, double raw, double hint,
                       backoff_result *r) {
  return record_steps(b, ts, raw, hint, r);
}

/* a failure at a finite ts with hint (0: none; finite and >= 0); as
   record_steps(), compiled once with a constant 0 (backoff_failure) */
PIPELINE int failure(backoff_t *b, double ts, double hint,
                     backoff_result *r) {
  const backoff_config *c = &b->cfg;
  double raw;
  ts = effective_ts(b, ts);
  /* step 1; a duration give-up lasts (timestamps may step back) */
  if (c->max_actual_duration > 0 &&
      (b->expired || fin(ts - b->start) >= c->max_actual_duration)) {
    b->expired = 1;
    return give_up(b, ts, r, BACKOFF_MAX_DURATION);
  }
  /* the server's hint: too long, or past the deadline (not lasting:
     a later failure with a shorter hint may go on) */
  if (hint > 0 && c->has_max_hint && hint > c->max_hint)
    return give_up(b, ts, r, BACKOFF_RETRY_AFTER);
  if (hint > 0 && c->max_actual_duration > 0 &&
      fin(fin(ts - b->start) + hint) >= c->max_actual_duration)
    return give_up(b, ts, r, BACKOFF_MAX_DURATION);
  /* step 2 */
  if (b->attempts < UINT64_MAX) b->attempts++;   /* saturate */
  if (c->max_attempts > 0 && b->attempts >= c->max_attempts)
    return give_up(b, ts, r, BACKOFF_MAX_ATTEMPTS);
  /* step 3 */
  raw = raw_failure(b);
  return hint > 0 ? record_hint(b, ts, raw, hint, r) : record(b, ts, raw, r);
}

BACKOFF_API int backoff_failure(backoff_t *b, double ts, backoff_result *r) {
  if (!is_finite(ts)) return BACKOFF_ETIME;
  return failure(b, ts, 0, r);
}

BACKOFF_API int backoff_failure_hint(backoff_t *b, double ts, double hint,
                                     backoff_result *r) {
  if (!is_finite(ts)) return BACKOFF_ETIME;
  if (!is_finite(hint) || !(hint >= 0)) return BACKOFF_EINVAL;
  return failure(b, ts, hint, r);
}

BACKOFF_API int backoff_success(backoff_t *b, double ts, backoff_result *r) {
  if (!is_finite(ts)) return BACKOFF_ETIME;
  ts = effective_ts(b, ts);
  /* step 4 */
  b->attempts = 0;
  return record(b, ts, raw_success(b), r);
}

/* ----------------------------------------------------------------- */
/* life cycle and accessors                                          */
/* ----------------------------------------------------------------- */

static void fresh_state(backoff_t *b, double start) {
  backoff_rng_seed(&b->rng, b->seed);
  b->attempts = 0;
  b->start = start;
  b->last_ts = 0;
  b->prev_delay = 0;
  b->seq_a = b->seq_b = 0;
  b->has_last_ts = b->has_seq = b->expired = 0;
  initial_timeout(b);
}

BACKOFF_API void backoff_init_trusted(backoff_t *b, const backoff_config *c,
                                      double start, uint64_t seed) {
  b->cfg = *c;
  /* -0.0 in, +0.0 out: keep every stored bound unsigned */
  b->cfg.min_delay = unsign_zero(c->min_delay);
  b->cfg.max_delay = unsign_zero(c->max_delay);
  b->seed = seed;
  fresh_state(b, start);
}

BACKOFF_API int backoff_reset(backoff_t *b, double start) {
  if (!is_finite(start)) return BACKOFF_ETIME;
  fresh_state(b, start);
  return BACKOFF_OK;
}

BACKOFF_API int backoff_restart(backoff_t *b, double start, uint64_t seed) {
  if (!is_finite(start)) return BACKOFF_ETIME;
  b->seed = seed;
  fresh_state(b, start);
  return BACKOFF_OK;
}

BACKOFF_API void backoff_reseed(backoff_t *b, uint64_t seed) {
  b->seed = seed;
  backoff_rng_seed(&b->rng, seed);
}

BACKOFF_API double backoff_delay(const backoff_t *b) {
  return b->prev_delay;
}

BACKOFF_API uint64_t backoff_attempts(const backoff_t *b) {
  return b->attempts;
}

BACKOFF_API double backoff_start(const backoff_t *b) {
  return b->start;
}

BACKOFF_API int backoff_timeout(const backoff_t *b, double *timeout) {
  if (!backoff_config_timeouts_active(&b->cfg)) return 0;
  *timeout = b->timeout;
  return 1;
}
