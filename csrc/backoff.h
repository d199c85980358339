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
**   c.p.exponential.initial_delay = 0.1;
**   c.has_max_delay = 1;  c.max_delay = 10;
**   if (backoff_init(&b, &c, now(), seed, NULL) != BACKOFF_OK) ...
**
** (or set options by name with backoff_setup_*, as the Lua module does)
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

/* ----------------------------------------------------------------- */
/* Options: one table of rules (backoff_options.c), walked by every  */
/* binding.  A C program gets the same checks and messages.          */
/* ----------------------------------------------------------------- */

typedef enum backoff_option_kind {
  BACKOFF_K_NUMBER = 0, /* a finite double within the row's range */
  BACKOFF_K_COUNT,      /* an integer >= 0; huge values saturate */
  BACKOFF_K_BOOL,
  BACKOFF_K_JITTER,     /* a jitter name */
  BACKOFF_K_STRATEGY,   /* the strategy's own name (config round trip) */
  BACKOFF_K_SEED,       /* a 64-bit integer */
  BACKOFF_K_START,      /* a finite number: the start time */
  BACKOFF_K_FUNCTION,   /* a clock: held by the binding, not the core */
  BACKOFF_K_ALIAS       /* a number that stands for other options */
} backoff_option_kind;

typedef enum backoff_range {
  BACKOFF_R_ANY = 0,    /* any finite number */
  BACKOFF_R_NONNEG,     /* >= 0 */
  BACKOFF_R_UNIT,       /* [0, 1] */
  BACKOFF_R_GE1         /* >= 1 */
} backoff_range;

/* when config() shows an option */
typedef enum backoff_show {
  BACKOFF_SHOW_ALWAYS = 0,
  BACKOFF_SHOW_IF_SET,       /* its flag (has_max_delay, ...) is set */
  BACKOFF_SHOW_IF_TIMEOUTS,  /* per-attempt timeouts are wanted */
  BACKOFF_SHOW_IF_GIVEN,     /* seed, start, clock: when the user gave it */
  BACKOFF_SHOW_NEVER         /* aliases */
} backoff_show;

typedef struct backoff_option {
  const char *name;
  unsigned char kind;        /* backoff_option_kind */
  unsigned char range;       /* backoff_range, for numbers */
  unsigned char show;        /* backoff_show */
  short offset;              /* where it lands in backoff_setup, or -1 */
  short flag;                /* unsigned char set to 1 with it, or -1 */
  unsigned short accepted;   /* bit s: strategy s takes it */
  unsigned short required;   /* bit s: strategy s needs it */
  signed char alias_of[2];   /* BACKOFF_K_ALIAS: the options it sets */
} backoff_option;

/* The rows, ended by a row whose name is NULL. */
extern const backoff_option backoff_options[];

/* Everything an options list sets, before an object exists. */
typedef struct backoff_setup {
  backoff_config config;
  uint64_t seed;          /* BACKOFF_K_SEED */
  double start;           /* BACKOFF_K_START */
  uint32_t given;         /* bit i: row i was set */
  int checked;            /* 1 after backoff_setup_finish accepted it */
} backoff_setup;

/* A value as the binding found it. */
typedef enum backoff_value_type {
  BACKOFF_V_NUMBER = 0, BACKOFF_V_INTEGER, BACKOFF_V_BOOL, BACKOFF_V_STRING,
  BACKOFF_V_FUNCTION, BACKOFF_V_OTHER
} backoff_value_type;

typedef struct backoff_value {
  int type;               /* backoff_value_type */
  double number;          /* NUMBER and INTEGER */
  int64_t integer;        /* INTEGER: exact */
  int boolean;            /* BOOL */
  const char *string;     /* STRING: len bytes, NULs allowed */
  size_t len;
} backoff_value;

/* What is wrong with a setup, for one message. */
typedef enum backoff_problem_kind {
  BACKOFF_P_NONE = 0,
  BACKOFF_P_RULE,       /* option must be <rule> (quote its value) */
  BACKOFF_P_MISSING,    /* missing required option */
  BACKOFF_P_CONFLICT,   /* option and other given together */
  BACKOFF_P_NEEDS       /* option needs other */
} backoff_problem_kind;

typedef struct backoff_problem {
  int kind;               /* backoff_problem_kind */
  int option, other;      /* rows, -1 for none */
  int jitter;             /* P_RULE on jitter_factor: the jitter kind */
} backoff_problem;

/* Defaults of strategy s; nothing given.  EINVAL for an unknown s. */
BACKOFF_API int backoff_setup_init(backoff_setup *s, int strategy);
/* The row of option name (len bytes) for strategy s, -1 if it takes none. */
BACKOFF_API int backoff_option_find(int strategy, const char *name,
                                    size_t len);
/* Set row `option` from *v.  On EINVAL, *p says why; s is unchanged. */
BACKOFF_API int backoff_setup_set(backoff_setup *s, int option,
                                  const backoff_value *v, backoff_problem *p);
/* The rules between options (required, aliases, defaults that follow
   other options); EINVAL with *p filled.  What it accepts passes
   backoff_config_check, and backoff_init_setup trusts it. */
BACKOFF_API int backoff_setup_finish(backoff_setup *s, backoff_problem *p);
/* "option 'x' must be a finite number >= 0" and the like, for strategy s;
   returns what snprintf returns.  Quote the value after it yourself. */
BACKOFF_API int backoff_problem_message(const backoff_problem *p, int s,
                                        char *buf, size_t n);
/* 1 when the message of *p should be followed by the option's value. */
BACKOFF_API int backoff_problem_quotes(const backoff_problem *p);
/* where row `option`'s value sits in *c (a double for NUMBER, uint64_t
   for COUNT, unsigned char for BOOL and JITTER), or NULL when it is not
   in the configuration (seed, start, clock, aliases) */
BACKOFF_API const void *backoff_option_field(const backoff_config *c,
                                             int option);
/* 1 when config() should show row `option` of *c (given: the user gave it) */
BACKOFF_API int backoff_option_shown(const backoff_config *c, int option,
                                     int given);

/*
** Fill *c with the defaults of strategy s (exponent_base 2, multiplier 3,
** the retry_timeouts defaults, ...).  Required parameters are set to 0.
** Returns BACKOFF_EINVAL for an unknown strategy (and leaves *c alone).
*/
BACKOFF_API int backoff_config_init(backoff_config *c, int s);

/*
** Check every field of *c against the option table.  Returns BACKOFF_OK
** or BACKOFF_EINVAL; on error *bad_option (if not NULL) is the row of
** the first bad option (-1 for a bad strategy).
*/
BACKOFF_API int backoff_config_check(const backoff_config *c, int *bad_option);

/*
** Initialise *b from *c (checked first), starting at time start (finite)
** with the jitter stream of seed.  Draws the initial timeout.  On error
** (BACKOFF_EINVAL, BACKOFF_ETIME) *b is not touched; *bad_option as in
** backoff_config_check (-1 for a bad start).
*/
BACKOFF_API int backoff_init(backoff_t *b, const backoff_config *c,
                             double start, uint64_t seed, int *bad_option);

/*
** backoff_init from s->config and s->seed.  A setup that
** backoff_setup_finish accepted, and that nothing changed since (neither
** backoff_setup_set nor a direct write), is not checked:
** every value in it was checked as it was set.  Any other is checked
** as backoff_init checks.
*/
BACKOFF_API int backoff_init_setup(backoff_t *b, const backoff_setup *s,
                                   double start, int *bad_option);

/*
** Record a failure (or a success) at time ts (seconds, finite; a time
** before the last recorded one counts as that one) and fill *r.
** Returns BACKOFF_OK, or BACKOFF_ETIME for a non-finite ts (no change).
*/
BACKOFF_API int backoff_failure(backoff_t *b, double ts, backoff_result *r);
BACKOFF_API int backoff_success(backoff_t *b, double ts, backoff_result *r);

/*
** A failure with the server's hint: wait at least `hint` seconds
** (finite, >= 0, else BACKOFF_EINVAL and no change).  The delay is
** max(hint, the strategy's delay), not cut by max_delay or the time
** left; a hint over max_hint gives up (BACKOFF_RETRY_AFTER), one that
** ends at or after start + max_actual_duration gives up
** (BACKOFF_MAX_DURATION; not lasting, unlike the duration give-up).
** Neither counts an attempt.  The hint never feeds the strategy's
** memory: the next delay grows from the strategy's own value.
*/
BACKOFF_API int backoff_failure_hint(backoff_t *b, double ts, double hint,
                                     backoff_result *r);

/* 1 when objects of this configuration draw random numbers (jitter,
   timeout jitter, decorrelated): only they need a seed of their own. */
BACKOFF_API int backoff_config_draws(const backoff_config *c);

/*
** Back to the state of a new object started at start, with the jitter
** stream of the object's seed.  BACKOFF_ETIME for a non-finite start.
*/
BACKOFF_API int backoff_reset(backoff_t *b, double start);

/* Restart the jitter stream from seed (and remember it for reset). */
BACKOFF_API void backoff_reseed(backoff_t *b, uint64_t seed);

/* backoff_reset with a new seed: one seeding where backoff_reseed and
   backoff_reset would do two (clone, reset of unseeded objects). */
BACKOFF_API int backoff_restart(backoff_t *b, double start, uint64_t seed);

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
