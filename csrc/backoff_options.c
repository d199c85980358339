/*
** backoff_options.c -- the configuration kit: names, defaults, the
** rules of every option as one table, and backoff_init.
**
** Each row says what an option is called, what kind of value it takes
** and in which range, where the value lands in a backoff_setup, which
** strategies take it and which need it, and when config() shows it.
** backoff_setup_finish() holds the few rules that tie options together.
** The Lua binding walks this table and never names an option itself;
** a C program gets the same checks and messages through backoff_setup_*.
*/

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "backoff_math.h"
#define BACKOFF_OPTIONS_INTERNAL
#include "backoff_options.h"

/* ----------------------------------------------------------------- */
/* names and defaults                                                */
/* ----------------------------------------------------------------- */

/* by enumerator: a strategy or jitter kind without a name here fails
   to compile (the size checks below) */
static const char *const strategy_names[] = {
  [BACKOFF_CONSTANT] = "constant",
  [BACKOFF_LINEAR] = "linear",
  [BACKOFF_EXPONENTIAL] = "exponential",
  [BACKOFF_FIBONACCI] = "fibonacci",
  [BACKOFF_LILD] = "lild",
  [BACKOFF_LIMD] = "limd",
  [BACKOFF_MILD] = "mild",
  [BACKOFF_MIMD] = "mimd",
  [BACKOFF_DECORRELATED] = "decorrelated",
  [BACKOFF_RETRY_TIMEOUTS] = "retry_timeouts",
  [BACKOFF_GOOGLE] = "google",
  [BACKOFF_CENKALTI] = "cenkalti",
  [BACKOFF_EVENTSAUCE] = "eventsauce",
  [BACKOFF_POLLY] = "polly",
  [BACKOFF_DECORRELATED_V2] = "decorrelated_v2",
  [BACKOFF_AWS] = "aws",
};

static const char *const jitter_names[] = {
  [BACKOFF_JITTER_NONE] = "none",
  [BACKOFF_JITTER_PROPORTIONAL] = "proportional",
  [BACKOFF_JITTER_FULL] = "full",
  [BACKOFF_JITTER_EQUAL] = "equal",
  [BACKOFF_JITTER_HALF] = "half",
  [BACKOFF_JITTER_SCATTERED] = "scattered",
  [BACKOFF_JITTER_DECORRELATED] = "decorrelated",
};

static const char *const type_names[] = {
  [BACKOFF_TYPE_CONSTANT] = "constant",
  [BACKOFF_TYPE_LINEAR] = "linear",
  [BACKOFF_TYPE_EXPONENTIAL] = "exponential",
  [BACKOFF_TYPE_FIBONACCI] = "fibonacci",
  [BACKOFF_TYPE_NO_WAITING] = "no_waiting",
  [BACKOFF_TYPE_IMMEDIATELY_FAILING] = "immediately_failing",
};

#define BIT(x) (1u << (x))
#define J(x) BIT(BACKOFF_JITTER_##x)
#define T(x) BIT(BACKOFF_TYPE_##x)

typedef char every_strategy_has_a_name[
  sizeof strategy_names / sizeof *strategy_names == BACKOFF_NSTRATEGIES
  ? 1 : -1];
typedef char every_type_has_a_name[
  sizeof type_names / sizeof *type_names == BACKOFF_NTYPES ? 1 : -1];
typedef char every_jitter_has_a_name[
  sizeof jitter_names / sizeof *jitter_names == BACKOFF_NJITTERS ? 1 : -1];
/* a set of strategies is a backoff_strategies bit mask */
typedef char strategies_fit_in_a_mask[
  BACKOFF_NSTRATEGIES <= 8 * sizeof(backoff_strategies) ? 1 : -1];

BACKOFF_API const char *backoff_strategy_name(int s) {
  return (s >= 0 && s < BACKOFF_NSTRATEGIES) ? strategy_names[s] : NULL;
}

BACKOFF_API const char *backoff_jitter_name(int j) {
  return (j >= 0 && j < BACKOFF_NJITTERS) ? jitter_names[j] : NULL;
}

BACKOFF_API const char *backoff_type_name(int t) {
  return (t >= 0 && t < BACKOFF_NTYPES) ? type_names[t] : NULL;
}

/* each system's own names for its jitter kinds and its classes */
BACKOFF_API int backoff_strategy_takes_jitter(int s, int j) {
  unsigned kinds;
  switch (s) {
    case BACKOFF_EVENTSAUCE: kinds = J(NONE) | J(FULL) | J(HALF) | J(SCATTERED);
      break;
    case BACKOFF_AWS: kinds = J(FULL) | J(EQUAL) | J(DECORRELATED); break;
    case BACKOFF_DECORRELATED: kinds = J(NONE); break;   /* random itself */
    default:
      kinds = s < BACKOFF_FIRST_SYSTEM
              ? J(NONE) | J(PROPORTIONAL) | J(FULL) | J(EQUAL) : J(NONE);
      break;
  }
  return j >= 0 && j < BACKOFF_NJITTERS && (kinds & BIT(j)) != 0;
}

BACKOFF_API int backoff_strategy_takes_type(int s, int t) {
  unsigned types = 0;
  if (s == BACKOFF_EVENTSAUCE)
    types = T(EXPONENTIAL) | T(FIBONACCI) | T(LINEAR) | T(NO_WAITING) |
            T(IMMEDIATELY_FAILING);
  if (s == BACKOFF_POLLY) types = T(CONSTANT) | T(LINEAR) | T(EXPONENTIAL);
  return t >= 0 && t < BACKOFF_NTYPES && (types & BIT(t)) != 0;
}

BACKOFF_API int backoff_config_init(backoff_config *c, int s) {
  backoff_config d;
  if (s < 0 || s >= BACKOFF_NSTRATEGIES) return BACKOFF_EINVAL;
  memset(&d, 0, sizeof d);      /* every flag off, every number 0 */
  d.strategy = (unsigned char)s;
  d.jitter = BACKOFF_JITTER_NONE;
  d.adjust_timeout_factor = 0.5;
  d.min_adjust_timeout = 5;
  switch (s) {
    case BACKOFF_EXPONENTIAL: d.p.exponential.exponent_base = 2; break;
    case BACKOFF_DECORRELATED: d.p.decorrelated.multiplier = 3; break;
    case BACKOFF_GOOGLE: case BACKOFF_CENKALTI:
      /* the defaults of both: 0.5 s, 0.5, 1.5, 60 s, 15 min */
      d.p.google.initial_interval = 0.5;
      d.jitter_factor = 0.5;              /* randomization_factor */
      d.p.google.multiplier = 1.5;
      d.has_max_delay = 1;                /* max_interval */
      d.max_delay = 60;
      d.max_actual_duration = 900;        /* max_elapsed_time */
      break;
    case BACKOFF_EVENTSAUCE:
      /* ExponentialBackOffStrategy's: 2.5 s, base 2.0, unlimited */
      d.backoff_type = BACKOFF_TYPE_EXPONENTIAL;
      d.p.eventsauce.base = 2;
      d.has_max_delay = 1;
      d.max_delay = 2.5;
      break;
    case BACKOFF_POLLY:
      /* RetryStrategyOptions': constant 2 s, 3 retries, no jitter */
      d.backoff_type = BACKOFF_TYPE_CONSTANT;
      d.p.polly.delay = 2;
      d.max_attempts = 4;                 /* max_retry_attempts 3 */
      break;
    case BACKOFF_AWS: d.jitter = BACKOFF_JITTER_FULL; break;
    case BACKOFF_RETRY_TIMEOUTS:
      /* Algorithm::Backoff::RetryTimeouts' defaults */
      d.p.exponential.initial_delay = sqrt(2.0);
      d.p.exponential.exponent_base = sqrt(2.0);
      d.consider_actual_delay = 1;
      d.max_attempts = 8;
      d.max_actual_duration = 50;
      d.jitter = BACKOFF_JITTER_PROPORTIONAL;
      d.jitter_factor = 0.1;
      d.timeouts = 1;
      d.timeout_jitter_factor = 0.1;
      break;
    default: break;
  }
  *c = d;
  return BACKOFF_OK;
}

/* ----------------------------------------------------------------- */
/* the table                                                         */
/* ----------------------------------------------------------------- */


#define K(x) BACKOFF_K_##x
#define R(x) BACKOFF_R_##x
#define SH(x) BACKOFF_SHOW_##x
#define CFG(field) (short)offsetof(backoff_setup, config.field)
#define AT(field) (short)offsetof(backoff_setup, field)
#define NONE (-1)
#define NO_ALIAS {NONE, NONE}
#define ALIAS(a, b) {O_##a, O_##b}

/* each line of OPTIONS (backoff_options.h) as the row of its enumerator */
#define AS_ROW(id, name, kind, range, show, offset, flag, accepted, \
               required, alias) \
  [O_##id] = {name, kind, range, show, offset, flag, accepted, required, \
              alias},

const backoff_option backoff_options[] = {
  OPTIONS(AS_ROW)
  [O_COUNT] = {NULL, 0, 0, 0, NONE, NONE, 0, 0, NO_ALIAS}
};

/* ----------------------------------------------------------------- */
/* values                                                            */
/* ----------------------------------------------------------------- */

static inline int in_range(int range, double v) {
  if (!is_finite(v)) return 0;
  switch (range) {
    case BACKOFF_R_NONNEG: return v >= 0;
    case BACKOFF_R_UNIT: return v >= 0 && v <= 1;
    case BACKOFF_R_GE1: return v >= 1;
    case BACKOFF_R_POSITIVE: return v > 0;
    case BACKOFF_R_UNIT_OPEN: return v >= 0 && v < 1;
    case BACKOFF_R_TRIES: return v >= -1 && v == floor(v);
    case BACKOFF_R_RETRIES: return v >= 1 && v <= 2147483647 && v == floor(v);
    default: return 1;
  }
}

static void *field_of(void *base, int offset) {
  return (char *)base + offset;
}


BACKOFF_API int backoff_setup_init(backoff_setup *s, int strategy) {
  if (backoff_config_init(&s->config, strategy) != BACKOFF_OK)
    return BACKOFF_EINVAL;
  s->seed = 0;
  s->draws = NULL;
  s->start = 0;
  s->given = 0;
  s->checked = 0;
  return BACKOFF_OK;
}

BACKOFF_API int backoff_option_find(int strategy, const char *name,
                                    size_t len) {
  int i;
  for (i = 0; i < O_COUNT; i++) {
    const backoff_option *o = &backoff_options[i];
    if (accepts(o, strategy) && strlen(o->name) == len &&
        memcmp(o->name, name, len) == 0)
      return i;
  }
  return -1;
}

/* the name of jitter kind or strategy in v, or -1 */
static int name_index(const backoff_value *v, int n,
                      const char *(*name_of)(int)) {
  int i;
  if (v->type != BACKOFF_V_STRING) return -1;
  for (i = 0; i < n; i++)
    if (strlen(name_of(i)) == v->len && memcmp(name_of(i), v->string,
                                               v->len) == 0)
      return i;
  return -1;
}

static int is_number(const backoff_value *v) {
  return v->type == BACKOFF_V_NUMBER || v->type == BACKOFF_V_INTEGER;
}

/* an integer >= 0 as uint64 (huge values saturate: "never"), or -1 */
static int count_of(const backoff_value *v, uint64_t *out) {
  double d = v->number;
  if (v->type == BACKOFF_V_INTEGER) {
    if (v->integer < 0) return -1;
    *out = (uint64_t)v->integer;
    return 0;
  }
  if (v->type != BACKOFF_V_NUMBER || !(d >= 0) || d > DBL_MAX ||
      d != floor(d))
    return -1;
  *out = d >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)d;
  return 0;
}

/* N retries as max_attempts N + 1 (saturating); no limit (-1 for
   R_TRIES, 2147483647 for R_RETRIES) as 0; -1 when v is not of range */
static int retries_of(int range, const backoff_value *v, uint64_t *out) {
  uint64_t n;
  if (range == BACKOFF_R_COUNT) {
    if (count_of(v, &n) != 0) return -1;
  } else {
    if (!is_number(v) || !in_range(range, v->number)) return -1;
    if ((range == BACKOFF_R_TRIES && v->number < 0) ||
        (range == BACKOFF_R_RETRIES && v->number >= 2147483647)) {
      *out = 0;
      return 0;
    }
    /* saturating, as count_of: a double of 2^64 or more has no uint64_t */
    n = v->number >= 18446744073709551615.0 ? UINT64_MAX
                                             : (uint64_t)v->number;
  }
  *out = n == UINT64_MAX ? UINT64_MAX : n + 1;
  return 0;
}

BACKOFF_API double backoff_retries(int option, uint64_t max_attempts) {
  int range = option >= 0 && option < O_COUNT ? backoff_options[option].range
                                              : BACKOFF_R_COUNT;
  if (max_attempts == 0)
    return range == BACKOFF_R_TRIES ? -1
         : range == BACKOFF_R_RETRIES ? 2147483647 : 18446744073709551615.0;
  return (double)(max_attempts - 1);
}

/* a 64-bit integer (the same seed gives the same stream everywhere) */
static int seed_of(const backoff_value *v, uint64_t *out) {
  double d = v->number;
  if (v->type == BACKOFF_V_INTEGER) {
    *out = (uint64_t)v->integer;
    return 0;
  }
  if (v->type != BACKOFF_V_NUMBER || d != floor(d) ||
      !(d >= -9223372036854775808.0) || !(d < 9223372036854775808.0))
    return -1;
  *out = (uint64_t)(int64_t)d;
  return 0;
}

/* store v into *s per row o; -1 (and nothing written) when v is not
   acceptable */
static int store(backoff_setup *t, const backoff_option *o,
                 const backoff_value *v) {
  void *at = field_of(t, o->offset >= 0 ? o->offset : 0);
  int j;
  switch (o->kind) {
    case BACKOFF_K_NUMBER: case BACKOFF_K_START:
      if (!is_number(v) || !in_range(o->range, v->number)) return -1;
      memcpy(at, &v->number, sizeof(double));
      return 0;
    case BACKOFF_K_ALIAS:     /* the value goes to each option it sets */
      if (!is_number(v) || !in_range(o->range, v->number)) return -1;
      for (j = 0; j < 2 && o->alias_of[j] >= 0; j++)
        memcpy(field_of(t, backoff_options[(int)o->alias_of[j]].offset),
               &v->number, sizeof(double));
      return 0;
    case BACKOFF_K_COUNT: return count_of(v, (uint64_t *)at);
    case BACKOFF_K_RETRIES: return retries_of(o->range, v, (uint64_t *)at);
    case BACKOFF_K_SEED: return seed_of(v, (uint64_t *)at);
    case BACKOFF_K_BOOL:
      if (v->type != BACKOFF_V_BOOL) return -1;
      *(unsigned char *)at = (unsigned char)(v->boolean != 0);
      return 0;
    case BACKOFF_K_JITTER:
      j = name_index(v, BACKOFF_NJITTERS, backoff_jitter_name);
      if (!backoff_strategy_takes_jitter(t->config.strategy, j)) return -1;
      *(unsigned char *)at = (unsigned char)j;
      return 0;
    case BACKOFF_K_TYPE:
      j = name_index(v, BACKOFF_NTYPES, backoff_type_name);
      if (!backoff_strategy_takes_type(t->config.strategy, j)) return -1;
      *(unsigned char *)at = (unsigned char)j;
      return 0;
    case BACKOFF_K_STRATEGY:
      j = name_index(v, BACKOFF_NSTRATEGIES, backoff_strategy_name);
      return j == t->config.strategy ? 0 : -1;
    default: /* BACKOFF_K_FUNCTION, BACKOFF_K_RANDOM: the binding's */
      return v->type == BACKOFF_V_FUNCTION ? 0 : -1;
  }
}

BACKOFF_API int backoff_setup_set(backoff_setup *s, int option,
                                  const backoff_value *v, backoff_problem *p) {
  const backoff_option *o;
  if (option < 0 || option >= O_COUNT ||
      !accepts(&backoff_options[option], s->config.strategy))
    return problem(p, BACKOFF_P_RULE, option, -1);
  o = &backoff_options[option];
  /* store() checks before it writes: s is unchanged on error */
  if (store(s, o, v) != 0) return problem(p, BACKOFF_P_RULE, option, -1);
  if (o->flag >= 0) *(unsigned char *)field_of(s, o->flag) = 1;
  mark_given(s, option);
  s->checked = 0;
  return BACKOFF_OK;
}

/* ----------------------------------------------------------------- */
/* checking a filled-in configuration                                */
/* ----------------------------------------------------------------- */

/* is row o's value in *c acceptable?  (rows with a flag: when set) */
static inline int field_ok(const backoff_config *c,
                           const backoff_option *o) {
  const void *at = (const char *)c + o->offset;
  double d;
  if (o->flag >= 0 && !*((const unsigned char *)c + o->flag))
    return !((o->required >> c->strategy) & 1u);
  switch (o->kind) {
    case BACKOFF_K_NUMBER:
      memcpy(&d, at, sizeof d);
      return in_range(o->range, d);
    case BACKOFF_K_JITTER:
      return backoff_strategy_takes_jitter(c->strategy,
                                           *(const unsigned char *)at);
    case BACKOFF_K_TYPE:
      return backoff_strategy_takes_type(c->strategy,
                                         *(const unsigned char *)at);
    default:
      return 1;
  }
}

BACKOFF_API int backoff_config_check(const backoff_config *c,
                                     int *bad_option) {
  int i, bad = -1;
  if (c->strategy >= BACKOFF_NSTRATEGIES) {
    bad = O_STRATEGY;
  } else if (!backoff_strategy_takes_jitter(c->strategy, c->jitter)) {
    bad = O_JITTER;       /* decorrelated is random by itself, ... */
  } else if (c->strategy == BACKOFF_GOOGLE &&
             c->max_delay < c->p.google.initial_interval) {
    bad = O_GOOGLE_MAX;
  } else {
    for (i = 0; i < O_COUNT && bad < 0; i++) {
      const backoff_option *o = &backoff_options[i];
      if (o->offset >= 0 && o->offset < (short)sizeof *c &&
          (o->accepted >> c->strategy) & 1u && !field_ok(c, o))
        bad = i;
    }
  }
  if (bad_option) *bad_option = bad;
  return bad < 0 ? BACKOFF_OK : BACKOFF_EINVAL;
}

BACKOFF_API int backoff_init(backoff_t *b, const backoff_config *c,
                             double start, uint64_t seed, int *bad_option) {
  int status = backoff_config_check(c, bad_option);
  if (status != BACKOFF_OK) return status;
  if (!is_finite(start)) return BACKOFF_ETIME;
  backoff_init_trusted(b, c, start, seed, NULL);
  return BACKOFF_OK;
}

BACKOFF_API int backoff_init_setup(backoff_t *b, const backoff_setup *s,
                                   double start, int *bad_option) {
  if (!s->checked) {
    int status = backoff_config_check(&s->config, bad_option);
    if (status != BACKOFF_OK) return status;
  } else if (bad_option) {
    *bad_option = -1;
  }
  if (!is_finite(start)) return BACKOFF_ETIME;
  backoff_init_trusted(b, &s->config, start, s->seed, s->draws);
  return BACKOFF_OK;
}

/* ----------------------------------------------------------------- */
/* config()                                                          */
/* ----------------------------------------------------------------- */

BACKOFF_API const void *backoff_option_field(const backoff_config *c,
                                             int option) {
  const backoff_option *o = &backoff_options[option];
  if (option < 0 || option >= O_COUNT || o->offset < 0 ||
      o->offset >= (short)sizeof *c)
    return NULL;
  return (const char *)c + o->offset;
}

BACKOFF_API int backoff_option_shown(const backoff_config *c, int option,
                                     int given_by_user) {
  const backoff_option *o = &backoff_options[option];
  if (option < 0 || option >= O_COUNT || !accepts(o, c->strategy)) return 0;
  switch (o->show) {
    case BACKOFF_SHOW_ALWAYS: return 1;
    case BACKOFF_SHOW_IF_SET:
      return *((const unsigned char *)c + o->flag) != 0;
    case BACKOFF_SHOW_IF_TIMEOUTS: return c->timeouts;
    case BACKOFF_SHOW_IF_GIVEN: return given_by_user;
    case BACKOFF_SHOW_IF_TRUE:
      return *((const unsigned char *)c + o->offset) != 0;
    default: return 0;
  }
}
