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
#include "backoff_rng.h"
#include "backoff_strategies.h"
#include "backoff_systems.h"

/* ----------------------------------------------------------------- */
/* the generator (backoff_rng.h)                                     */
/* ----------------------------------------------------------------- */

BACKOFF_API void backoff_rng_seed(backoff_rng *r, uint64_t seed) {
  rng_seed(r, seed);
}

BACKOFF_API uint64_t backoff_rng_next(backoff_rng *r) {
  return rng_next(r);
}

BACKOFF_API double backoff_rng_double(backoff_rng *r) {
  return rng_double(r);
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
  switch (c->strategy) {
    case BACKOFF_GOOGLE: case BACKOFF_CENKALTI: case BACKOFF_AWS:
    case BACKOFF_DECORRELATED_V2:
      return 1;
    case BACKOFF_EVENTSAUCE: return c->jitter != BACKOFF_JITTER_NONE;
    case BACKOFF_POLLY: return c->use_jitter && c->p.polly.delay > 0;
    default: break;
  }
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
** Jitter within [min_delay, max_delay] (DIFF 8).  The reference jitters
** the raw delay and clamps the result, so once d * (1-f) > max_delay
** every client waits exactly max_delay: lock-step, where clients have
** been failing longest (and a band below min_delay piles up on it).
** Here each kind draws over its band, [lo, hi], with hi never above
** max_delay and lo raised to min_delay when the band crosses it:
**   proportional  [(1-f) * min(d, max), min((1+f) * d, max)]: below
**                 max / (1+f), the reference's band, bit for bit; once
**                 d >= max, [(1-f) * max, max];
**   full          [0, min(d, max)];  equal  [min(d, max) / 2, min(d, max)].
** With cap_then_jitter, proportional is the references' order, (1±f) *
** min(d, max), which may exceed max_delay.
*/
static double within(backoff_t *b, double lo, double hi) {
  double floor_ = b->cfg.min_delay;
  if (floor_ > lo && floor_ <= hi) lo = floor_;
  return between_(b, lo, hi, 1);
}

/* general: 0 on the Perl family's own path, where neither min_delay
   (> 0 with jitter) nor cap_then_jitter is set (cfg.special is 0):
   the tests of both fold away there */
PIPELINE double proportional(backoff_t *b, double d, int general) {
  const backoff_config *c = &b->cfg;
  double f = c->jitter_factor, capped = d, hi;
  if (c->has_max_delay && d > c->max_delay) capped = c->max_delay;
  if (general && c->cap_then_jitter)
    return within(b, fin(capped * (1 - f)), fin(capped * (1 + f)));
  hi = fin(d * (1 + f));
  if (c->has_max_delay && hi > c->max_delay) hi = c->max_delay;
  if (general) return within(b, fin(capped * (1 - f)), hi);
  return between_(b, fin(capped * (1 - f)), hi, 0);
}

PIPELINE double add_jitter(backoff_t *b, double d, int general) {
  const backoff_config *c = &b->cfg;
  double cap;
  if (d == 0) return d;
  switch (c->jitter) {
    case BACKOFF_JITTER_PROPORTIONAL:
      return c->jitter_factor > 0 ? proportional(b, d, general) : d;
    case BACKOFF_JITTER_FULL:
      /* DIFF 7: draw from the capped delay (AWS's formulas) */
      cap = (c->has_max_delay && d > c->max_delay) ? c->max_delay : d;
      if (general && c->min_delay > 0 && c->min_delay <= cap)
        return within(b, 0, cap);
      return cap * draw_(b, general);
    case BACKOFF_JITTER_EQUAL:
      cap = (c->has_max_delay && d > c->max_delay) ? c->max_delay : d;
      if (general && c->min_delay > cap / 2 && c->min_delay <= cap)
        return within(b, cap / 2, cap);
      cap = cap / 2;
      return cap + cap * draw_(b, general);
    default:
      return d;
  }
}

static double timeout_jitter(backoff_t *b, double t, int general) {
  double f = b->cfg.timeout_jitter_factor;
  return (t != 0 && f > 0) ? scatter(b, t, f, general) : t;
}

/* step 8: max_delay (unless with_max is 0), then 0, then min_delay
   (which wins) */
static double clamp_delay(const backoff_config *c, double d, int with_max) {
  if (with_max && c->has_max_delay && d > c->max_delay) d = c->max_delay;
  if (d < 0) d = 0;
  if (d < c->min_delay) d = c->min_delay;
  return d;
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
  t = timeout_jitter(b, t, 1);
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
                         double hint, int general) {
  const backoff_config *c = &b->cfg;
  double f = c->adjust_timeout_factor;
  double left = fin(c->max_actual_duration - fin(ts - b->start));
  double max_d = fin(left * (1 - f));
  double t;
  if (d > max_d) d = max_d;
  t = fin(fin(left - (hint > d ? hint : d)) * f);
  t = timeout_jitter(b, t, general);
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
                          int self, int general, backoff_result *r) {
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
    seq = clamp_delay(c, raw, 1);
  /* step 7 (a system that jitters itself has, and capped as it does) */
  if (!self) {
    if (general && c->cap_then_jitter && c->has_max_delay &&
        d > c->max_delay)
      d = c->max_delay;   /* the references' order: cap, then jitter */
    d = add_jitter(b, d, general);
  }
  /* step 8 */
  d = clamp_delay(c, d, !self && !(general && c->cap_then_jitter &&
                                   c->jitter == BACKOFF_JITTER_PROPORTIONAL));
  own = unsign_zero(d);
  /* step 9 */
  if (backoff_config_timeouts_active(c))
    d = timeouts(b, ts, d, hint, general);
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
  return record_steps(b, ts, raw, 0, 0, 0, r);
}

static int record_hint(backoff_t *b, double ts, double raw, double hint,
                       backoff_result *r) {
  return record_steps(b, ts, raw, hint, 0, 0, r);
}

/* the steps off the Perl family's path (cfg.special): nothing folded */
static int record_special(backoff_t *b, double ts, double raw, double hint,
                          int self, backoff_result *r) {
  return record_steps(b, ts, raw, hint, self, 1, r);
}

/* steps 1 and 2 and the hint's limits: 1 when the failure gives up (*r
   filled), else 0 with the attempt counted */
PIPELINE int gives_up(backoff_t *b, double ts, double hint, int step1,
                      backoff_result *r) {
  const backoff_config *c = &b->cfg;
  /* step 1; a duration give-up lasts (timestamps may step back) */
  if (step1 && c->max_actual_duration > 0 &&
      (b->expired || fin(ts - b->start) >= c->max_actual_duration)) {
    b->expired = 1;
    return give_up(b, ts, r, BACKOFF_MAX_DURATION) == BACKOFF_OK;
  }
  /* the server's hint: too long, or past the deadline (not lasting:
     a later failure with a shorter hint may go on) */
  if (hint > 0 && c->has_max_hint && hint > c->max_hint)
    return give_up(b, ts, r, BACKOFF_RETRY_AFTER) == BACKOFF_OK;
  if (hint > 0 && c->max_actual_duration > 0 &&
      fin(fin(ts - b->start) + hint) >= c->max_actual_duration)
    return give_up(b, ts, r, BACKOFF_MAX_DURATION) == BACKOFF_OK;
  /* step 2 */
  if (b->attempts < UINT64_MAX) b->attempts++;   /* saturate */
  if (c->max_attempts > 0 && b->attempts >= c->max_attempts)
    return give_up(b, ts, r, BACKOFF_MAX_ATTEMPTS) == BACKOFF_OK;
  return 0;
}

/*
** A failure off the Perl family's path: a system (backoff_systems.h), or
** fast_first (the first failure waits 0 and counts as an attempt; the
** strategy's sequence starts at the second).  The systems' own stop
** rules: Google's, strict on whole milliseconds, before anything else
** (lasting); cenkalti's look-ahead, elapsed + next > max_elapsed_time,
** after the draw, with the interval advanced and not lasting, as in Go.
*/
#if defined(__GNUC__)
__attribute__((noinline))   /* kept off backoff_failure's path */
#endif
static int special_failure(backoff_t *b, double ts, double hint,
                           backoff_result *r) {
  const backoff_config *c = &b->cfg;
  int s = c->strategy;
  double raw, ns;
  if (s == BACKOFF_GOOGLE && (b->expired || google_expired(b, ts))) {
    b->expired = 1;
    return give_up(b, ts, r, BACKOFF_MAX_DURATION);
  }
  /* Google and cenkalti keep max_elapsed_time as max_actual_duration,
     under rules of their own: only the hint's limit is the common one */
  if (gives_up(b, ts, hint, s != BACKOFF_GOOGLE && s != BACKOFF_CENKALTI, r))
    return BACKOFF_OK;
  if (c->fast_first && b->attempts == 1) {
    raw = 0;
  } else {
    switch (s) {
      case BACKOFF_GOOGLE: raw = interval_delay(b) / 1e3; break;
      case BACKOFF_CENKALTI:
        ns = interval_delay(b);
        if (c->max_actual_duration > 0 &&      /* max_elapsed_time */
            fin(elapsed_ns(b, ts) + ns) >
              whole_units(c->max_actual_duration, 1e9))
          return give_up(b, ts, r, BACKOFF_MAX_DURATION);
        raw = ns / 1e9;
        break;
      case BACKOFF_EVENTSAUCE: raw = eventsauce_delay(b, b->attempts); break;
      case BACKOFF_POLLY: raw = polly_delay(b, b->attempts - 1); break;
      case BACKOFF_DECORRELATED_V2:
        raw = v2_delay(b, b->attempts - 1,
                       c->p.decorrelated_v2.median_first_retry_delay);
        if (c->has_max_delay && raw > c->max_delay) raw = c->max_delay;
        break;
      case BACKOFF_AWS: raw = aws_delay(b, b->attempts); break;
      default: raw = raw_failure(b, b->attempts - c->fast_first, 1); break;
    }
  }
  return record_special(b, ts, raw, hint, jitters_itself(s), r);
}

/* a failure at a finite ts with hint (0: none; finite and >= 0); as
   record_steps(), compiled once with a constant 0 (backoff_failure) */
PIPELINE int failure(backoff_t *b, double ts, double hint,
                     backoff_result *r) {
  double raw;
  ts = effective_ts(b, ts);
  if (b->cfg.special) return special_failure(b, ts, hint, r);
  if (gives_up(b, ts, hint, 1, r)) return BACKOFF_OK;
  /* step 3 */
  raw = raw_failure(b, b->attempts, 0);
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
  if (b->cfg.special)
    return record_special(b, ts, raw_success(b), 0,
                          jitters_itself(b->cfg.strategy), r);
  return record(b, ts, raw_success(b), r);
}

/* ----------------------------------------------------------------- */
/* life cycle and accessors                                          */
/* ----------------------------------------------------------------- */

static void fresh_state(backoff_t *b, double start) {
  rng_seed(&b->rng, b->seed);
  b->attempts = 0;
  b->start = start;
  b->last_ts = 0;
  b->prev_delay = 0;
  b->seq_a = b->seq_b = 0;
  b->has_last_ts = b->has_seq = b->expired = 0;
  initial_timeout(b);
}

BACKOFF_API void backoff_init_trusted(backoff_t *b, const backoff_config *c,
                                      double start, uint64_t seed,
                                      const backoff_draws *draws) {
  b->cfg = *c;
  b->draws = draws;
  /* -0.0 in, +0.0 out: keep every stored bound unsigned */
  b->cfg.min_delay = unsign_zero(c->min_delay);
  b->cfg.max_delay = unsign_zero(c->max_delay);
  if (c->strategy >= BACKOFF_FIRST_SYSTEM) {
    /* what only the Perl family takes is off for the systems, whatever
       the fields held (backoff_config_check looks only at what the
       strategy takes) */
    b->cfg.timeouts = b->cfg.consider_actual_delay = 0;
    b->cfg.cap_then_jitter = 0;
    b->cfg.min_delay = 0;
    if (c->strategy != BACKOFF_DECORRELATED_V2) b->cfg.fast_first = 0;
  }
  /* off the Perl family's own path: a system, fast_first, the
     references' order, or a jitter band that min_delay may cut */
  b->cfg.special = (unsigned char)(c->strategy >= BACKOFF_FIRST_SYSTEM ||
    b->cfg.fast_first || b->cfg.cap_then_jitter || draws != NULL ||
    (b->cfg.min_delay > 0 && c->jitter != BACKOFF_JITTER_NONE));
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
  rng_seed(&b->rng, seed);
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

BACKOFF_API int backoff_current_interval(const backoff_t *b,
                                         double *seconds) {
  int s = b->cfg.strategy;
  double per;
  if (s != BACKOFF_GOOGLE && s != BACKOFF_CENKALTI) return 0;
  per = units_per_second(s);
  *seconds = current_units(b, per) / per;
  return 1;
}

BACKOFF_API void backoff_lend_draws(backoff_t *b, const backoff_draws *d) {
  b->draws = d;
  if (d != NULL) b->cfg.special = 1;     /* off the path that ignores it */
}
