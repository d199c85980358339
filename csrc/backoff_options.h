/*
** backoff_options.h -- the configuration kit of the C core: the names
** of strategies and jitter kinds, every strategy's defaults, the table
** of option rules, and backoff_init (check, then start an object).
**
** It sits on top of the engine (backoff.h) and is what a program
** includes: the Lua binding walks the option table below and never
** names an option itself; a C program gets the same checks and
** messages through backoff_setup_*:
**
**   backoff_setup su;  backoff_problem p;  backoff_value v = {0};
**   backoff_setup_init(&su, BACKOFF_EXPONENTIAL);
**   v.type = BACKOFF_V_NUMBER;  v.number = 0.1;
**   backoff_setup_set(&su, backoff_option_find(BACKOFF_EXPONENTIAL,
**                     "initial_delay", 13), &v, &p);
**   if (backoff_setup_finish(&su, &p) != BACKOFF_OK) ... message of p
**   backoff_init_setup(&b, &su, now(), NULL);
*/

#ifndef BACKOFF_OPTIONS_H
#define BACKOFF_OPTIONS_H

#include "backoff.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Names: "exponential", "full", "fibonacci"...; NULL when out of range. */
BACKOFF_API const char *backoff_strategy_name(int s);
BACKOFF_API const char *backoff_jitter_name(int j);
BACKOFF_API const char *backoff_type_name(int t);
/* 1 when strategy s takes jitter kind j (or backoff_type t) */
BACKOFF_API int backoff_strategy_takes_jitter(int s, int j);
BACKOFF_API int backoff_strategy_takes_type(int s, int t);

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

/* ----------------------------------------------------------------- */
/* the option table                                                  */
/* ----------------------------------------------------------------- */

typedef enum backoff_option_kind {
  BACKOFF_K_NUMBER = 0, /* a finite double within the row's range */
  BACKOFF_K_COUNT,      /* an integer >= 0; huge values saturate */
  BACKOFF_K_RETRIES,    /* a number of retries N, kept as max_attempts
                           N + 1 (the range says which integers) */
  BACKOFF_K_BOOL,
  BACKOFF_K_JITTER,     /* a jitter name the strategy takes */
  BACKOFF_K_TYPE,       /* a backoff_type name the strategy takes */
  BACKOFF_K_STRATEGY,   /* the strategy's own name (config round trip) */
  BACKOFF_K_SEED,       /* a 64-bit integer */
  BACKOFF_K_START,      /* a finite number: the start time */
  BACKOFF_K_FUNCTION,   /* a clock: held by the binding, not the core */
  BACKOFF_K_RANDOM,     /* a function of uniform draws: held by the
                           binding, lent as backoff_t.draws */
  BACKOFF_K_ALIAS       /* a number that stands for other options */
} backoff_option_kind;

typedef enum backoff_range {
  BACKOFF_R_ANY = 0,    /* any finite number */
  BACKOFF_R_NONNEG,     /* >= 0 */
  BACKOFF_R_UNIT,       /* [0, 1] */
  BACKOFF_R_GE1,        /* >= 1 */
  BACKOFF_R_POSITIVE,   /* > 0 */
  BACKOFF_R_UNIT_OPEN,  /* [0, 1) */
  BACKOFF_R_COUNT,      /* an integer >= 0; huge values saturate */
  BACKOFF_R_TRIES,      /* an integer >= -1 (-1: unlimited) */
  BACKOFF_R_RETRIES     /* an integer from 1 to 2147483647 (unlimited) */
} backoff_range;

/* when config() shows an option */
typedef enum backoff_show {
  BACKOFF_SHOW_ALWAYS = 0,
  BACKOFF_SHOW_IF_SET,       /* its flag (has_max_delay, ...) is set */
  BACKOFF_SHOW_IF_TIMEOUTS,  /* per-attempt timeouts are wanted */
  BACKOFF_SHOW_IF_GIVEN,     /* seed, start, clock: when the user gave it */
  BACKOFF_SHOW_IF_TRUE,      /* a boolean that is on (off by default) */
  BACKOFF_SHOW_NEVER         /* aliases */
} backoff_show;

/* a set of strategies: bit s for strategy s */
typedef uint32_t backoff_strategies;

typedef struct backoff_option {
  const char *name;
  unsigned char kind;        /* backoff_option_kind */
  unsigned char range;       /* backoff_range, for numbers */
  unsigned char show;        /* backoff_show */
  short offset;              /* where it lands in backoff_setup, or -1 */
  short flag;                /* unsigned char set to 1 with it, or -1 */
  backoff_strategies accepted;  /* the strategies that take it */
  backoff_strategies required;  /* the strategies that need it */
  signed char alias_of[2];   /* BACKOFF_K_ALIAS: the options it sets */
} backoff_option;

/* The rows (backoff_options.c), ended by a row whose name is NULL. */
BACKOFF_API const backoff_option backoff_options[];

/* Room for this many options in backoff_setup.given (the option table
   fails to compile when it has more rows: widen given then). */
#define BACKOFF_MAX_OPTIONS 64

/* Everything an options list sets, before an object exists. */
typedef struct backoff_setup {
  backoff_config config;
  uint64_t seed;          /* BACKOFF_K_SEED */
  double start;           /* BACKOFF_K_START */
  const backoff_draws *draws;  /* lent to the object by backoff_init_setup
                                  (NULL: its generator) */
  uint64_t given;          /* bit i: row i was set */
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
  BACKOFF_P_NEEDS,      /* option needs other */
  BACKOFF_P_BELOW,      /* option must be >= other (both values quoted) */
  BACKOFF_P_ABOVE       /* option must be <= other (both values quoted) */
} backoff_problem_kind;

typedef struct backoff_problem {
  int kind;               /* backoff_problem_kind */
  int option, other;      /* rows, -1 for none */
  int jitter;             /* P_RULE on jitter_factor: the jitter kind */
  double value, limit;    /* P_BELOW, P_ABOVE: option's value, other's */
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
/* a K_RETRIES row's value, shown from max_attempts: N retries, or for no
   limit -1 (R_TRIES) or 2147483647 (R_RETRIES) */
BACKOFF_API double backoff_retries(int option, uint64_t max_attempts);
/* 1 when config() should show row `option` of *c (given: the user gave it) */
BACKOFF_API int backoff_option_shown(const backoff_config *c, int option,
                                     int given);

/*
** backoff_init from s->config and s->seed.  A setup that
** backoff_setup_finish accepted, and that nothing changed since (neither
** backoff_setup_set nor a direct write), is not checked:
** every value in it was checked as it was set.  Any other is checked
** as backoff_init checks.
*/
BACKOFF_API int backoff_init_setup(backoff_t *b, const backoff_setup *s,
                                   double start, int *bad_option);

/* ----------------------------------------------------------------- */
/* internal to the configuration kit (backoff_options.c and          */
/* backoff_rules.c): the list of every option, which gives each its   */
/* enumerator O_<ID> and its row, and the helpers both files use      */
/* ----------------------------------------------------------------- */

#ifdef BACKOFF_OPTIONS_INTERNAL

/* sets of strategies, as the list below writes them */
#define S(x) ((backoff_strategies)1 << BACKOFF_##x)
#define ALL (((backoff_strategies)1 << BACKOFF_NSTRATEGIES) - 1)
#define PERL (((backoff_strategies)1 << BACKOFF_FIRST_SYSTEM) - 1)
#define ID_STRATEGIES (S(LILD) | S(LIMD) | S(MILD) | S(MIMD))
#define COUNTS_ATTEMPTS (PERL | S(GOOGLE) | S(CENKALTI) | \
                         S(DECORRELATED_V2) | S(AWS))

/*
** Every option, one line each: its enumerator O_<ID> and its row come
** from the same line, so they cannot drift apart.  Adding a numeric
** option is a field in backoff_config (named in CFG(...): the compiler
** checks it), a line here, and its use in the engine.
**
**  ID, name, kind, range, show, offset, flag, accepted, required, alias
**
** Strategy sets: PERL (the ten strategies of the Perl family), S(x) one
** strategy, ALL, COUNTS_ATTEMPTS (those limited by attempts), above.  A system's option of the same name as another
** (multiplier, initial_delay) is a row of its own: its rule differs.
*/
#define OPTIONS(X) \
  X(STRATEGY, "strategy", K(STRATEGY), 0, SH(ALWAYS), NONE, NONE, ALL, 0, \
    NO_ALIAS) \
  X(DELAY, "delay", K(NUMBER), R(NONNEG), SH(ALWAYS), \
    CFG(p.constant.delay), NONE, S(CONSTANT), S(CONSTANT), NO_ALIAS) \
  X(INITIAL_DELAY, "initial_delay", K(NUMBER), R(NONNEG), SH(ALWAYS), \
    CFG(p.linear.initial_delay), NONE, \
    PERL & ~S(CONSTANT) & ~S(FIBONACCI), \
    S(LINEAR) | S(EXPONENTIAL) | ID_STRATEGIES | S(DECORRELATED), NO_ALIAS) \
  /* fibonacci: initial_delay stands for both of its first delays */ \
  X(FIB_INITIAL_DELAY, "initial_delay", K(ALIAS), R(NONNEG), SH(NEVER), \
    NONE, NONE, S(FIBONACCI), 0, ALIAS(INITIAL_DELAY1, INITIAL_DELAY2)) \
  X(INITIAL_DELAY1, "initial_delay1", K(NUMBER), R(NONNEG), SH(ALWAYS), \
    CFG(p.fibonacci.initial_delay1), NONE, S(FIBONACCI), S(FIBONACCI), \
    NO_ALIAS) \
  X(INITIAL_DELAY2, "initial_delay2", K(NUMBER), R(NONNEG), SH(ALWAYS), \
    CFG(p.fibonacci.initial_delay2), NONE, S(FIBONACCI), S(FIBONACCI), \
    NO_ALIAS) \
  X(DELAY_INCREMENT, "delay_increment", K(NUMBER), R(ANY), SH(ALWAYS), \
    CFG(p.linear.delay_increment), NONE, S(LINEAR), 0, NO_ALIAS) \
  X(EXPONENT_BASE, "exponent_base", K(NUMBER), R(NONNEG), SH(ALWAYS), \
    CFG(p.exponential.exponent_base), NONE, \
    S(EXPONENTIAL) | S(RETRY_TIMEOUTS), 0, NO_ALIAS) \
  X(INC_ON_FAILURE, "delay_increment_on_failure", K(NUMBER), R(ANY), \
    SH(ALWAYS), CFG(p.lild.delay_increment_on_failure), NONE, \
    S(LILD) | S(LIMD), S(LILD) | S(LIMD), NO_ALIAS) \
  X(MUL_ON_FAILURE, "delay_multiple_on_failure", K(NUMBER), R(NONNEG), \
    SH(ALWAYS), CFG(p.mild.delay_multiple_on_failure), NONE, \
    S(MILD) | S(MIMD), S(MILD) | S(MIMD), NO_ALIAS) \
  X(MULTIPLIER, "multiplier", K(NUMBER), R(GE1), SH(ALWAYS), \
    CFG(p.decorrelated.multiplier), NONE, S(DECORRELATED), 0, NO_ALIAS) \
  X(DELAY_ON_SUCCESS, "delay_on_success", K(NUMBER), R(NONNEG), SH(ALWAYS), \
    CFG(p.linear.delay_on_success), NONE, PERL & ~ID_STRATEGIES, 0, \
    NO_ALIAS) \
  X(INC_ON_SUCCESS, "delay_increment_on_success", K(NUMBER), R(ANY), \
    SH(ALWAYS), CFG(p.lild.delay_increment_on_success), NONE, \
    S(LILD) | S(MILD), S(LILD) | S(MILD), NO_ALIAS) \
  X(MUL_ON_SUCCESS, "delay_multiple_on_success", K(NUMBER), R(NONNEG), \
    SH(ALWAYS), CFG(p.limd.delay_multiple_on_success), NONE, \
    S(LIMD) | S(MIMD), S(LIMD) | S(MIMD), NO_ALIAS) \
  /* Google's ExponentialBackOff (its checks) and cenkalti's (none) */ \
  X(GOOGLE_INITIAL, "initial_interval", K(NUMBER), R(POSITIVE), SH(ALWAYS), \
    CFG(p.google.initial_interval), NONE, S(GOOGLE), 0, NO_ALIAS) \
  X(GOOGLE_FACTOR, "randomization_factor", K(NUMBER), R(UNIT_OPEN), \
    SH(ALWAYS), CFG(jitter_factor), NONE, S(GOOGLE), 0, NO_ALIAS) \
  X(GOOGLE_MULTIPLIER, "multiplier", K(NUMBER), R(GE1), SH(ALWAYS), \
    CFG(p.google.multiplier), NONE, S(GOOGLE), 0, NO_ALIAS) \
  X(GOOGLE_MAX, "max_interval", K(NUMBER), R(POSITIVE), SH(ALWAYS), \
    CFG(max_delay), CFG(has_max_delay), S(GOOGLE), 0, NO_ALIAS) \
  X(GOOGLE_ELAPSED, "max_elapsed_time", K(NUMBER), R(POSITIVE), \
    SH(ALWAYS), CFG(max_actual_duration), NONE, S(GOOGLE), 0, NO_ALIAS) \
  X(GO_INITIAL, "initial_interval", K(NUMBER), R(NONNEG), SH(ALWAYS), \
    CFG(p.google.initial_interval), NONE, S(CENKALTI), 0, NO_ALIAS) \
  X(GO_FACTOR, "randomization_factor", K(NUMBER), R(UNIT), SH(ALWAYS), \
    CFG(jitter_factor), NONE, S(CENKALTI), 0, NO_ALIAS) \
  X(GO_MULTIPLIER, "multiplier", K(NUMBER), R(NONNEG), SH(ALWAYS), \
    CFG(p.google.multiplier), NONE, S(CENKALTI), 0, NO_ALIAS) \
  X(GO_MAX, "max_interval", K(NUMBER), R(NONNEG), SH(ALWAYS), \
    CFG(max_delay), CFG(has_max_delay), S(CENKALTI), 0, NO_ALIAS) \
  X(GO_ELAPSED, "max_elapsed_time", K(NUMBER), R(NONNEG), SH(ALWAYS), \
    CFG(max_actual_duration), NONE, S(CENKALTI), 0, NO_ALIAS) \
  /* EventSauce and Polly v8 (backoff_type: their classes, their enum) */ \
  X(BACKOFF_TYPE, "backoff_type", K(TYPE), 0, SH(ALWAYS), \
    CFG(backoff_type), NONE, S(EVENTSAUCE) | S(POLLY), 0, NO_ALIAS) \
  X(ES_INITIAL_DELAY, "initial_delay", K(NUMBER), R(NONNEG), SH(ALWAYS), \
    CFG(p.eventsauce.initial_delay), NONE, S(EVENTSAUCE), 0, NO_ALIAS) \
  X(MAX_TRIES, "max_tries", K(RETRIES), R(TRIES), SH(ALWAYS), \
    CFG(max_attempts), NONE, S(EVENTSAUCE), 0, NO_ALIAS) \
  X(BASE, "base", K(NUMBER), R(NONNEG), SH(ALWAYS), \
    CFG(p.eventsauce.base), NONE, S(EVENTSAUCE), 0, NO_ALIAS) \
  X(RANGE, "range", K(NUMBER), R(UNIT), SH(ALWAYS), CFG(jitter_factor), \
    NONE, S(EVENTSAUCE), 0, NO_ALIAS) \
  X(JITTER_THRESHOLD, "jitter_threshold", K(NUMBER), R(NONNEG), \
    SH(ALWAYS), CFG(p.eventsauce.jitter_threshold), NONE, S(EVENTSAUCE), \
    0, NO_ALIAS) \
  X(POLLY_DELAY, "delay", K(NUMBER), R(NONNEG), SH(ALWAYS), \
    CFG(p.polly.delay), NONE, S(POLLY), 0, NO_ALIAS) \
  X(USE_JITTER, "use_jitter", K(BOOL), 0, SH(ALWAYS), CFG(use_jitter), \
    NONE, S(POLLY), 0, NO_ALIAS) \
  X(MAX_RETRY_ATTEMPTS, "max_retry_attempts", K(RETRIES), R(RETRIES), \
    SH(ALWAYS), CFG(max_attempts), NONE, S(POLLY), 0, NO_ALIAS) \
  X(MEDIAN, "median_first_retry_delay", K(NUMBER), R(NONNEG), SH(ALWAYS), \
    CFG(p.decorrelated_v2.median_first_retry_delay), NONE, \
    S(DECORRELATED_V2), S(DECORRELATED_V2), NO_ALIAS) \
  /* the AWS article: base and cap (its Go code's names) */ \
  X(AWS_BASE, "base", K(NUMBER), R(NONNEG), SH(ALWAYS), CFG(p.aws.base), \
    NONE, S(AWS), S(AWS), NO_ALIAS) \
  X(CAP, "cap", K(NUMBER), R(NONNEG), SH(IF_SET), CFG(max_delay), \
    CFG(has_max_delay), S(AWS), S(AWS), NO_ALIAS) \
  /* options common to many */ \
  X(MIN_DELAY, "min_delay", K(NUMBER), R(NONNEG), SH(ALWAYS), \
    CFG(min_delay), NONE, PERL, 0, NO_ALIAS) \
  X(MAX_DELAY, "max_delay", K(NUMBER), R(NONNEG), SH(IF_SET), \
    CFG(max_delay), CFG(has_max_delay), \
    PERL | S(EVENTSAUCE) | S(POLLY) | S(DECORRELATED_V2), S(DECORRELATED), \
    NO_ALIAS) \
  X(MAX_ATTEMPTS, "max_attempts", K(COUNT), 0, SH(ALWAYS), \
    CFG(max_attempts), NONE, COUNTS_ATTEMPTS, 0, NO_ALIAS) \
  /* max_retries N is max_attempts N + 1 (config() shows that) */ \
  X(MAX_RETRIES, "max_retries", K(RETRIES), R(COUNT), SH(NEVER), \
    CFG(max_attempts), NONE, COUNTS_ATTEMPTS, 0, NO_ALIAS) \
  X(MAX_DURATION, "max_actual_duration", K(NUMBER), R(NONNEG), SH(ALWAYS), \
    CFG(max_actual_duration), NONE, \
    PERL | S(EVENTSAUCE) | S(POLLY) | S(DECORRELATED_V2) | S(AWS), 0, \
    NO_ALIAS) \
  X(CONSIDER, "consider_actual_delay", K(BOOL), 0, SH(ALWAYS), \
    CFG(consider_actual_delay), NONE, PERL, 0, NO_ALIAS) \
  X(JITTER, "jitter", K(JITTER), 0, SH(ALWAYS), CFG(jitter), NONE, \
    (PERL & ~S(DECORRELATED)) | S(EVENTSAUCE) | S(AWS), 0, NO_ALIAS) \
  X(JITTER_FACTOR, "jitter_factor", K(NUMBER), R(UNIT), SH(ALWAYS), \
    CFG(jitter_factor), NONE, PERL & ~S(DECORRELATED), 0, NO_ALIAS) \
  X(CAP_THEN_JITTER, "cap_then_jitter", K(BOOL), 0, SH(IF_TRUE), \
    CFG(cap_then_jitter), NONE, PERL, 0, NO_ALIAS) \
  X(FAST_FIRST, "fast_first", K(BOOL), 0, SH(IF_TRUE), CFG(fast_first), \
    NONE, S(CONSTANT) | S(LINEAR) | S(EXPONENTIAL) | S(FIBONACCI) | \
    S(DECORRELATED) | S(DECORRELATED_V2), 0, NO_ALIAS) \
  /* given, it turns per-attempt timeouts on (see finish_timeouts) */ \
  X(ADJUST_TIMEOUT_FACTOR, "adjust_timeout_factor", K(NUMBER), R(UNIT), \
    SH(IF_TIMEOUTS), CFG(adjust_timeout_factor), CFG(timeouts), PERL, 0, \
    NO_ALIAS) \
  X(MIN_ADJUST_TIMEOUT, "min_adjust_timeout", K(NUMBER), R(NONNEG), \
    SH(IF_TIMEOUTS), CFG(min_adjust_timeout), NONE, PERL, 0, NO_ALIAS) \
  X(TIMEOUT_JITTER_FACTOR, "timeout_jitter_factor", K(NUMBER), R(UNIT), \
    SH(IF_TIMEOUTS), CFG(timeout_jitter_factor), NONE, PERL, 0, NO_ALIAS) \
  X(MAX_HINT, "max_hint", K(NUMBER), R(NONNEG), SH(IF_SET), CFG(max_hint), \
    CFG(has_max_hint), ALL, 0, NO_ALIAS) \
  X(SEED, "seed", K(SEED), 0, SH(IF_GIVEN), AT(seed), NONE, ALL, 0, \
    NO_ALIAS) \
  X(START, "start", K(START), R(ANY), SH(IF_GIVEN), AT(start), NONE, ALL, \
    0, NO_ALIAS) \
  X(CLOCK, "clock", K(FUNCTION), 0, SH(IF_GIVEN), NONE, NONE, ALL, 0, \
    NO_ALIAS) \
  X(RANDOM, "random", K(RANDOM), 0, SH(IF_GIVEN), NONE, NONE, ALL, 0, \
    NO_ALIAS)

#define AS_ENUM(id, ...) O_##id,
enum backoff_row { OPTIONS(AS_ENUM) O_COUNT };

/* more rows than backoff_setup.given has bits: widen it */
typedef char every_option_fits_in_given[
  O_COUNT <= BACKOFF_MAX_OPTIONS &&
  BACKOFF_MAX_OPTIONS <= 8 * sizeof(uint64_t) ? 1 : -1];

static inline int accepts(const backoff_option *o, int s) {
  return (o->accepted >> s) & 1u;
}

static inline int given(const backoff_setup *s, int option) {
  return (int)((s->given >> option) & 1u);
}

static inline void mark_given(backoff_setup *s, int option) {
  s->given |= (uint64_t)1 << option;
}

/* the lowest row of a non-empty set of rows */
static inline int lowest_row(uint64_t rows) {
#if defined(__GNUC__)
  return __builtin_ctzll(rows);
#else
  int i = 0;
  while (!((rows >> i) & 1u)) i++;
  return i;
#endif
}

/* fill *p (when not NULL); returns BACKOFF_EINVAL */
static inline int problem(backoff_problem *p, int kind, int option,
                          int other) {
  if (p) {
    p->kind = kind;
    p->option = option;
    p->other = other;
    p->jitter = -1;
    p->value = 0;
    p->limit = 0;
  }
  return BACKOFF_EINVAL;
}

#endif /* BACKOFF_OPTIONS_INTERNAL */

#ifdef __cplusplus
}
#endif

#endif
