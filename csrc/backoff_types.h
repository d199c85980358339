/*
** backoff_types.h -- the types of the C core: its options
** (backoff_config), one object (backoff_t), what an operation returns
** (backoff_result), status codes and names.  backoff.h declares the
** engine's functions on them; backoff_options.h the configuration kit.
** A header of its own so that the engine's internal headers can use the
** types without the functions that use them.
*/

#ifndef BACKOFF_TYPES_H
#define BACKOFF_TYPES_H

#include <stddef.h>
#include <stdint.h>

/* BACKOFF_HIDDEN (set by the Lua module's builds): the core's symbols
   stay inside the shared object, which exports only luaopen_backoff_core
   and the FFI entry points */
#ifndef BACKOFF_API
#if defined(BACKOFF_HIDDEN) && defined(__GNUC__)
#define BACKOFF_API extern __attribute__((visibility("hidden")))
#else
#define BACKOFF_API extern
#endif
#endif

#define BACKOFF_VERSION "0.2.0"

/* Status codes.  Give-ups are not errors: see backoff_result.give_up. */
enum {
  BACKOFF_OK = 0,
  BACKOFF_EINVAL,   /* a configuration value (or a hint) is out of range */
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
  /* the systems users port from, each with its own parameters, defaults
     and rules (backoff_systems.h has their arithmetic) */
  BACKOFF_GOOGLE,           /* Google's ExponentialBackOff (Java) */
  BACKOFF_CENKALTI,         /* cenkalti/backoff v4's ExponentialBackOff (Go) */
  BACKOFF_EVENTSAUCE,       /* EventSauce BackOff (PHP) */
  BACKOFF_POLLY,            /* Polly v8's retry delays (.NET) */
  BACKOFF_DECORRELATED_V2,  /* Polly.Contrib's DecorrelatedJitterBackoffV2 */
  BACKOFF_AWS,              /* the AWS article's three formulas */
  BACKOFF_NSTRATEGIES
} backoff_strategy;

/* the first of the systems above: below it, the Perl family */
#define BACKOFF_FIRST_SYSTEM BACKOFF_GOOGLE

/* the shape of an EventSauce or Polly delay (backoff_config.backoff_type) */
typedef enum backoff_type {
  BACKOFF_TYPE_CONSTANT = 0,
  BACKOFF_TYPE_LINEAR,
  BACKOFF_TYPE_EXPONENTIAL,
  BACKOFF_TYPE_FIBONACCI,
  BACKOFF_TYPE_NO_WAITING,
  BACKOFF_TYPE_IMMEDIATELY_FAILING,
  BACKOFF_NTYPES
} backoff_type;

typedef enum backoff_jitter {
  BACKOFF_JITTER_NONE = 0,
  BACKOFF_JITTER_PROPORTIONAL,  /* d * U(1-f, 1+f) */
  BACKOFF_JITTER_FULL,          /* U(0, min(d, max_delay)) */
  BACKOFF_JITTER_EQUAL,         /* c/2 + U(0, c/2), c = min(d, max_delay) */
  /* EventSauce's names: half = equal, scattered = proportional after
     the cap (its range is the factor) */
  BACKOFF_JITTER_HALF,
  BACKOFF_JITTER_SCATTERED,
  BACKOFF_JITTER_DECORRELATED,  /* the AWS article's third formula */
  BACKOFF_NJITTERS
} backoff_jitter;

/* Why a failure gave up (backoff_result.give_up). */
typedef enum backoff_give_up {
  BACKOFF_CONTINUE = 0,
  BACKOFF_MAX_ATTEMPTS,
  BACKOFF_MAX_DURATION,
  BACKOFF_RETRY_AFTER     /* the server's hint was longer than max_hint */
} backoff_give_up;

/*
** Each strategy's own parameters, named as its options.  They share
** storage (a strategy reads only its own member); options that mean
** the same in several strategies sit at the same place, so that one
** row of the option table (backoff_options) serves them all.
*/
typedef union backoff_params {
  struct { double delay, unused, delay_on_success; } constant;
  struct { double initial_delay, delay_increment, delay_on_success; } linear;
  /* exponential and retry_timeouts */
  struct { double initial_delay, exponent_base, delay_on_success; } exponential;
  struct { double initial_delay1, initial_delay2, delay_on_success; } fibonacci;
  struct { double initial_delay, delay_increment_on_failure,
                  delay_increment_on_success; } lild;
  struct { double initial_delay, delay_increment_on_failure,
                  delay_multiple_on_success; } limd;
  struct { double initial_delay, delay_multiple_on_failure,
                  delay_increment_on_success; } mild;
  struct { double initial_delay, delay_multiple_on_failure,
                  delay_multiple_on_success; } mimd;
  struct { double initial_delay, multiplier, delay_on_success; } decorrelated;
  /* google and cenkalti: the Java and Go fields, in seconds; the others
     are common fields: randomization_factor is jitter_factor,
     max_interval max_delay, max_elapsed_time max_actual_duration */
  struct { double initial_interval, multiplier; } google;
  /* eventsauce: jitter_threshold 0 is none; max_tries is max_attempts */
  struct { double initial_delay, base, jitter_threshold; } eventsauce;
  /* polly: max_retry_attempts is max_attempts */
  struct { double delay; } polly;
  struct { double median_first_retry_delay; } decorrelated_v2;
  struct { double base; } aws;      /* at initial_delay's place */
} backoff_params;

/*
** The configuration.  All times are seconds.  Use backoff_config_init()
** for the defaults, or better backoff_setup_* below, which applies the
** same rules (and messages) as the Lua module.
*/
typedef struct backoff_config {
  unsigned char strategy;               /* backoff_strategy */
  unsigned char jitter;                 /* backoff_jitter */
  unsigned char consider_actual_delay;  /* 0 or 1 */
  unsigned char timeouts;               /* 1: per-attempt timeouts wanted */
  unsigned char has_max_delay;          /* 0: no upper bound */
  unsigned char has_max_hint;           /* 0: any hint is obeyed */
  unsigned char cap_then_jitter;        /* 1: max_delay caps the delay
                                           before jitter (the references'
                                           order), not after */
  unsigned char fast_first;             /* 1: the first failure waits 0 */
  unsigned char backoff_type;           /* eventsauce, polly: backoff_type */
  unsigned char use_jitter;             /* polly: UseJitter */
  unsigned char special;                /* set by backoff_init*: a system
                                           or fast_first (off the Perl
                                           family's path) */
  backoff_params p;                     /* the strategy's parameters */
  double min_delay;                     /* >= 0, applied last */
  double max_delay;                     /* >= 0, when has_max_delay */
  double jitter_factor;                 /* [0, 1], proportional jitter only */
  double max_actual_duration;           /* >= 0, 0 = unlimited */
  uint64_t max_attempts;                /* 0 = unlimited */
  double adjust_timeout_factor;         /* [0, 1] */
  double min_adjust_timeout;            /* >= 0 */
  double timeout_jitter_factor;         /* [0, 1] */
  double max_hint;                      /* >= 0, when has_max_hint */
} backoff_config;

/*
** A source of uniform draws in [0, 1] that a caller lends an object
** (backoff_t.draws) in place of its own generator: tests replay the
** draws a reference library made, and the Lua binding calls a user's
** function.  next is called once per draw, in the order of the
** pipeline: the initial timeout (init, reset), then per operation the
** strategy's own draw (decorrelated), the delay's jitter, the timeout's
** jitter.
*/
typedef struct backoff_draws {
  double (*next)(void *ctx);
  void *ctx;
} backoff_draws;

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
  /* NULL: the generator above; else a source lent for the calls made
     while it is set (it must outlive them).  Set it with
     backoff_lend_draws (or at init: backoff_init_trusted's draws). */
  const backoff_draws *draws;
} backoff_t;

/* What one success or failure produced. */
typedef struct backoff_result {
  double delay;       /* seconds to wait, finite and >= 0 (0 on give-up) */
  double timeout;     /* suggested timeout, finite and >= 0, if has_timeout */
  double own;         /* the strategy's delay before the time-left cap of
                         timeouts and before a hint (0 on give-up) */
  int has_timeout;    /* 1 when per-attempt timeouts are active */
  int give_up;        /* backoff_give_up: BACKOFF_CONTINUE or why not */
} backoff_result;

#endif
