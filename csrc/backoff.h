/*
** backoff.h -- retry backoff strategies, the portable C core.
**
** No Lua, no malloc, no globals, no clock: the caller owns every
** backoff_t (embed it anywhere), passes the time in as seconds (any
** clock, as long as one object always sees the same one) and passes
** seeds in explicitly.  Every call is deterministic given its inputs.
**
** Typical use:
**
**   backoff_config c;  backoff_t b;  backoff_result r;
**   backoff_config_init(&c, BACKOFF_EXPONENTIAL);
**   c.initial = 0.1;  c.has_max_delay = 1;  c.max_delay = 10;
**   if (backoff_init(&b, &c, now(), seed, NULL) != BACKOFF_OK) ...
**   backoff_failure(&b, now(), &r);    r.give_up ? stop : sleep(r.delay)
**
** Every function that changes a backoff_t validates all of its inputs
** first: on an error status the object is left exactly as it was.
*/

#ifndef BACKOFF_H
#define BACKOFF_H

#include <stddef.h>
#include <stdint.h>

#ifndef BACKOFF_API
#define BACKOFF_API extern
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define BACKOFF_VERSION "0.1.0"

/* Status codes.  Give-ups are not errors: see backoff_result.give_up. */
enum {
  BACKOFF_OK = 0,
  BACKOFF_EINVAL,   /* a configuration value is out of range */
  BACKOFF_ETIME     /* a timestamp is NaN or infinite */
};

typedef enum backoff_strategy {
  BACKOFF_CONSTANT = 0,
  BACKOFF_LINEAR,
  BACKOFF_EXPONENTIAL,
  BACKOFF_FIBONACCI,
  BACKOFF_LILD,
  BACKOFF_LIMD,
  BACKOFF_MILD,
  BACKOFF_MIMD,
  BACKOFF_DECORRELATED,
  BACKOFF_RETRY_TIMEOUTS,
  BACKOFF_NSTRATEGIES
} backoff_strategy;

typedef enum backoff_jitter {
  BACKOFF_JITTER_NONE = 0,
  BACKOFF_JITTER_PROPORTIONAL,  /* d * U(1-f, 1+f) */
  BACKOFF_JITTER_FULL,          /* U(0, min(d, max_delay)) */
  BACKOFF_JITTER_EQUAL,         /* c/2 + U(0, c/2), c = min(d, max_delay) */
  BACKOFF_NJITTERS
} backoff_jitter;

/* Why a failure gave up (backoff_result.give_up). */
typedef enum backoff_give_up {
  BACKOFF_CONTINUE = 0,
  BACKOFF_MAX_ATTEMPTS,
  BACKOFF_MAX_DURATION
} backoff_give_up;

/* Configuration fields, as named by backoff_config_check(). */
typedef enum backoff_field {
  BACKOFF_F_NONE = 0,
  BACKOFF_F_STRATEGY,
  BACKOFF_F_JITTER,
  BACKOFF_F_INITIAL,
  BACKOFF_F_ON_FAILURE,
  BACKOFF_F_ON_SUCCESS,
  BACKOFF_F_MIN_DELAY,
  BACKOFF_F_MAX_DELAY,
  BACKOFF_F_JITTER_FACTOR,
  BACKOFF_F_MAX_DURATION,
  BACKOFF_F_ADJUST_TIMEOUT_FACTOR,
  BACKOFF_F_MIN_ADJUST_TIMEOUT,
  BACKOFF_F_TIMEOUT_JITTER_FACTOR,
  BACKOFF_NFIELDS
} backoff_field;

/*
** The configuration.  All times are seconds.  The three strategy
** parameters mean, per strategy:
**
**   strategy        initial         on_failure          on_success
**   constant        delay           (unused)            delay_on_success
**   linear          initial_delay   delay_increment     delay_on_success
**   exponential     initial_delay   exponent_base       delay_on_success
**   fibonacci       initial_delay1  initial_delay2      delay_on_success
**   lild            initial_delay   delay_increment_on_ delay_increment_on_
**   limd            initial_delay   delay_increment_on_ delay_multiple_on_
**   mild            initial_delay   delay_multiple_on_  delay_increment_on_
**   mimd            initial_delay   delay_multiple_on_  delay_multiple_on_
**   decorrelated    initial_delay   multiplier          delay_on_success
**   retry_timeouts  initial_delay   exponent_base       delay_on_success
**
** (the *I*D options end in _failure and _success respectively)
**
** Use backoff_config_init() to get the defaults, then set fields.
*/
typedef struct backoff_config {
  unsigned char strategy;               /* backoff_strategy */
  unsigned char jitter;                 /* backoff_jitter */
  unsigned char consider_actual_delay;  /* 0 or 1 */
  unsigned char timeouts;               /* 1: per-attempt timeouts wanted */
  unsigned char has_max_delay;          /* 0: no upper bound */
  double initial, on_failure, on_success;
  double min_delay;                     /* >= 0, applied last */
  double max_delay;                     /* >= 0, when has_max_delay */
  double jitter_factor;                 /* [0, 1], proportional jitter only */
  double max_actual_duration;           /* >= 0, 0 = unlimited */
  uint64_t max_attempts;                /* 0 = unlimited */
  double adjust_timeout_factor;         /* [0, 1] */
  double min_adjust_timeout;            /* >= 0 */
  double timeout_jitter_factor;         /* [0, 1] */
} backoff_config;

/* xoshiro256** state; never all zero. */
typedef struct backoff_rng {
  uint64_t s[4];
} backoff_rng;

/*
** One backoff object.  A complete type so that callers can embed it;
** treat the fields as private and use the functions below.
*/
typedef struct backoff_t {
  backoff_config cfg;
  backoff_rng rng;
  uint64_t seed;          /* what rng was seeded with; reset() reuses it */
  uint64_t attempts;      /* consecutive failures, saturating */
  double start;           /* start time */
  double last_ts;         /* time of the last recorded operation */
  double prev_delay;      /* last returned delay */
  double seq_a, seq_b;    /* strategy memory (fibonacci, *I*D, decorrelated) */
  double timeout;         /* current suggested timeout */
  unsigned char has_last_ts, has_seq, expired;
  unsigned char user_flags;  /* free for the embedder; the core never reads */
  uint32_t user_tag;         /* free for the embedder; the core never reads */
} backoff_t;

/* What one success or failure produced. */
typedef struct backoff_result {
  double delay;       /* seconds to wait, finite and >= 0 (0 on give-up) */
  double timeout;     /* suggested timeout, finite and >= 0, if has_timeout */
  int has_timeout;    /* 1 when per-attempt timeouts are active */
  int give_up;        /* backoff_give_up: BACKOFF_CONTINUE or why not */
} backoff_result;

/*
** Fill *c with the defaults of strategy s (exponent_base 2, multiplier 3,
** the retry_timeouts defaults, ...).  Required parameters are set to 0.
** Returns BACKOFF_EINVAL for an unknown strategy (and leaves *c alone).
*/
BACKOFF_API int backoff_config_init(backoff_config *c, int s);

/*
** Check every field of *c.  Returns BACKOFF_OK or BACKOFF_EINVAL; on
** error *bad_field (if not NULL) names the first bad field.
*/
BACKOFF_API int backoff_config_check(const backoff_config *c, int *bad_field);

/*
** A phrase describing the valid values of field f for strategy s,
** such as "a finite number >= 0"; for error messages.
*/
BACKOFF_API const char *backoff_field_rule(int s, int f);

/*
** Initialise *b from *c (checked first), starting at time start (finite)
** with the jitter stream of seed.  Draws the initial timeout.  On error
** (BACKOFF_EINVAL, BACKOFF_ETIME) *b is not touched; *bad_field as in
** backoff_config_check (BACKOFF_F_NONE for a bad start).
*/
BACKOFF_API int backoff_init(backoff_t *b, const backoff_config *c,
                             double start, uint64_t seed, int *bad_field);

/*
** Record a failure (or a success) at time ts (seconds, finite; a time
** before the last recorded one counts as that one) and fill *r.
** Returns BACKOFF_OK, or BACKOFF_ETIME for a non-finite ts (no change).
*/
BACKOFF_API int backoff_failure(backoff_t *b, double ts, backoff_result *r);
BACKOFF_API int backoff_success(backoff_t *b, double ts, backoff_result *r);

/*
** Back to the state of a new object started at start, with the jitter
** stream of the object's seed.  BACKOFF_ETIME for a non-finite start.
*/
BACKOFF_API int backoff_reset(backoff_t *b, double start);

/* Restart the jitter stream from seed (and remember it for reset). */
BACKOFF_API void backoff_reseed(backoff_t *b, uint64_t seed);

/* Accessors; none changes the object. */
BACKOFF_API double backoff_delay(const backoff_t *b);      /* last delay */
BACKOFF_API uint64_t backoff_attempts(const backoff_t *b);
BACKOFF_API double backoff_start(const backoff_t *b);
/* 1 and *timeout set when timeouts are active, else 0. */
BACKOFF_API int backoff_timeout(const backoff_t *b, double *timeout);
/* 1 when per-attempt timeouts are active for this configuration. */
BACKOFF_API int backoff_config_timeouts_active(const backoff_config *c);

/* Names: "exponential", "full", ...; NULL when out of range. */
BACKOFF_API const char *backoff_strategy_name(int s);
BACKOFF_API const char *backoff_jitter_name(int j);
BACKOFF_API const char *backoff_give_up_name(int g);
BACKOFF_API const char *backoff_strerror(int status);

/*
** The generator alone, for tests and embedders: seed with splitmix64,
** next 64-bit output, and a double in [0, 1) from the top 53 bits.
*/
BACKOFF_API void backoff_rng_seed(backoff_rng *r, uint64_t seed);
BACKOFF_API uint64_t backoff_rng_next(backoff_rng *r);
BACKOFF_API double backoff_rng_double(backoff_rng *r);

#ifdef __cplusplus
}
#endif

#endif
