/*
** fuzz_backoff.c -- libFuzzer target for the core.  The input picks a
** configuration (interesting values or raw doubles, NaN and inf
** included) and a sequence of operations with hostile timestamps, and
** checks the invariants after every call:
**   - an error status only for a bad input, and then no change at all;
**   - every delay and timeout finite, >= 0, never -0;
**   - delays within [min_delay, max_delay] (min wins) without timeouts;
**   - give-ups only for the configured reasons, only on failure.
** Run: make fuzz FUZZ_TIME=600
*/

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backoff_options.h"

typedef struct input {
  const uint8_t *p;
  size_t n;
} input;

static uint8_t byte(input *in) {
  uint8_t b = 0;
  if (in->n > 0) {
    b = *in->p++;
    in->n--;
  }
  return b;
}

static double pick(input *in) {
  static const double table[] = {
    0, -0.0, 1, 0.5, 2, 3, 0.2, 10, 100, 1e-300, 1e300, DBL_MAX, -DBL_MAX,
    -1, 1.4142135623730951, 1e9, 1.7e9, 50, 0.1, 4, -5, 1e308, 5e-324,
    9007199254740993.0, 0.999, 1.0000001
  };
  uint8_t s = byte(in);
  if (s == 250) return NAN;
  if (s == 251) return INFINITY;
  if (s == 252) return -INFINITY;
  if (s >= 200) {              /* 8 raw bytes */
    double d = 0;
    uint8_t raw[8];
    int i;
    for (i = 0; i < 8; i++) raw[i] = byte(in);
    memcpy(&d, raw, sizeof d);
    return d;
  }
  return table[s % (sizeof table / sizeof table[0])];
}

static int finite(double x) {
  return x == x && x <= DBL_MAX && x >= -DBL_MAX;
}

static void check(int ok) {
  if (!ok) abort();
}

static void check_delay(double d) {
  check(finite(d) && d >= 0 && !(d == 0 && signbit(d)));
}

/* does max_delay bound every delay?  Not for the references' order
   (proportional jitter after the cap), nor for Google and cenkalti,
   which have max_interval instead */
static int within_max(const backoff_config *c) {
  switch (c->strategy) {
    case BACKOFF_GOOGLE: case BACKOFF_CENKALTI: return 0;
    case BACKOFF_EVENTSAUCE: return c->jitter != BACKOFF_JITTER_SCATTERED;
    default:
      return !(c->cap_then_jitter && c->jitter == BACKOFF_JITTER_PROPORTIONAL);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  input in;
  backoff_config c;
  backoff_t b, before;
  backoff_result r;
  uint64_t seed = 0;
  double start, ts = 0, hint = 0;
  int i, status, bad;
  in.p = data;
  in.n = size;
  if (backoff_config_init(&c, byte(&in) % BACKOFF_NSTRATEGIES) != BACKOFF_OK)
    abort();
  c.jitter = (unsigned char)(byte(&in) % BACKOFF_NJITTERS);
  i = byte(&in);
  c.consider_actual_delay = (unsigned char)(i & 1);
  c.timeouts = (unsigned char)((i >> 1) & 1);
  c.has_max_delay = (unsigned char)((i >> 2) & 1);
  c.has_max_hint = (unsigned char)((i >> 3) & 1);
  c.cap_then_jitter = (unsigned char)((i >> 4) & 1);
  c.fast_first = (unsigned char)((i >> 5) & 1);
  c.use_jitter = (unsigned char)((i >> 6) & 1);
  c.backoff_type = (unsigned char)(byte(&in) % BACKOFF_NTYPES);
  {
    double v[sizeof c.p / sizeof(double)];  /* every member: doubles */
    for (i = 0; i < (int)(sizeof v / sizeof *v); i++) v[i] = pick(&in);
    memcpy(&c.p, v, sizeof v);
  }
  c.min_delay = pick(&in);
  c.max_delay = pick(&in);
  c.jitter_factor = pick(&in);
  c.max_actual_duration = pick(&in);
  c.adjust_timeout_factor = pick(&in);
  c.min_adjust_timeout = pick(&in);
  c.timeout_jitter_factor = pick(&in);
  c.max_hint = pick(&in);
  c.max_attempts = byte(&in) % 16;
  for (i = 0; i < 8; i++) seed = (seed << 8) | byte(&in);
  start = pick(&in);

  memset(&b, 0x5a, sizeof b);
  before = b;
  status = backoff_init(&b, &c, start, seed, &bad);
  if (status != BACKOFF_OK) {
    check(memcmp(&b, &before, sizeof b) == 0);   /* untouched */
    check(backoff_config_check(&c, NULL) != BACKOFF_OK || !finite(start));
    return 0;
  }
  check(finite(start));
  c = b.cfg;        /* as the object took it: what the strategy takes */
  ts = start;
  while (in.n > 0) {
    uint8_t op = byte(&in);
    double t = pick(&in);
    /* mostly move forward, sometimes jump or step back */
    if (op & 0x10) t = finite(ts + t) ? ts + t : t;
    before = b;
    switch (op % 4) {
      case 0:
        status = backoff_failure(&b, t, &r);
        break;
      case 1:   /* with a hint from the input (hostile values too) */
        hint = pick(&in);
        status = backoff_failure_hint(&b, t, hint, &r);
        if (status == BACKOFF_EINVAL) {
          check(!(hint >= 0) || !finite(hint));
          check(memcmp(&b, &before, sizeof b) == 0);
          continue;
        }
        break;
      case 2:
        status = backoff_success(&b, t, &r);
        break;
      default:
        status = backoff_reset(&b, t);
        if (status == BACKOFF_OK) check(backoff_attempts(&b) == 0);
        else check(memcmp(&b, &before, sizeof b) == 0);
        continue;
    }
    if (status != BACKOFF_OK) {
      check(status == BACKOFF_ETIME && !finite(t));
      check(memcmp(&b, &before, sizeof b) == 0);
      continue;
    }
    check(finite(t));
    ts = t;
    check_delay(r.delay);
    if (r.give_up != BACKOFF_CONTINUE) {
      check(op % 4 != 2);
      check(r.delay == 0);
      if (r.give_up == BACKOFF_MAX_ATTEMPTS)
        check(c.max_attempts > 0 && backoff_attempts(&b) >= c.max_attempts);
      else if (r.give_up == BACKOFF_RETRY_AFTER)
        check(op % 4 == 1 && c.has_max_hint && hint > c.max_hint);
      else
        check(r.give_up == BACKOFF_MAX_DURATION &&
              c.max_actual_duration > 0);   /* google: max_elapsed_time */
      check(backoff_delay(&b) == backoff_delay(&before));
      continue;
    }
    check(backoff_delay(&b) == r.delay);
    if (op % 4 == 2) check(backoff_attempts(&b) == 0);
    if (r.has_timeout) {
      check_delay(r.timeout);
      check(r.timeout >= c.min_adjust_timeout);
    } else if (op % 4 == 1 && hint > 0) {
      check(r.delay >= hint && r.delay >= r.own);   /* max(hint, own) */
    } else {
      check(r.delay >= c.min_delay);
      if (c.has_max_delay && c.max_delay >= c.min_delay && within_max(&c))
        check(r.delay <= c.max_delay);
    }
  }
  return 0;
}
