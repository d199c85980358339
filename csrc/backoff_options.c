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
};

static const char *const jitter_names[] = {
  [BACKOFF_JITTER_NONE] = "none",
  [BACKOFF_JITTER_PROPORTIONAL] = "proportional",
  [BACKOFF_JITTER_FULL] = "full",
  [BACKOFF_JITTER_EQUAL] = "equal",
};

typedef char every_strategy_has_a_name[
  sizeof strategy_names / sizeof *strategy_names == BACKOFF_NSTRATEGIES
  ? 1 : -1];
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

#define S(x) ((backoff_strategies)1 << BACKOFF_##x)
#define ALL (((backoff_strategies)1 << BACKOFF_NSTRATEGIES) - 1)
#define NOT_DEC (ALL & ~S(DECORRELATED))
#define ID_STRATEGIES (S(LILD) | S(LIMD) | S(MILD) | S(MIMD))

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
  s->start = 0;
  memset(s->given, 0, sizeof s->given);
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

static int is_number(const backoff_value *v) {
  return v->type == BACKOFF_V_NUMBER || v->type == BACKOFF_V_INTEGER;
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
    case BACKOFF_K_SEED: return seed_of(v, (uint64_t *)at);
    case BACKOFF_K_BOOL:
      if (v->type != BACKOFF_V_BOOL) return -1;
      *(unsigned char *)at = (unsigned char)(v->boolean != 0);
      return 0;
    case BACKOFF_K_JITTER:
      j = name_index(v, BACKOFF_NJITTERS, backoff_jitter_name);
      if (j < 0) return -1;
      *(unsigned char *)at = (unsigned char)j;
      return 0;
    case BACKOFF_K_STRATEGY:
      j = name_index(v, BACKOFF_NSTRATEGIES, backoff_strategy_name);
      return j == t->config.strategy ? 0 : -1;
    default: /* BACKOFF_K_FUNCTION: the binding holds it */
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
      return *(const unsigned char *)at < BACKOFF_NJITTERS;
    default:
      return 1;
  }
}

BACKOFF_API int backoff_config_check(const backoff_config *c,
                                     int *bad_option) {
  int i, bad = -1;
  if (c->strategy >= BACKOFF_NSTRATEGIES) {
    bad = O_STRATEGY;
  } else if (c->strategy == BACKOFF_DECORRELATED &&
             c->jitter != BACKOFF_JITTER_NONE) {
    bad = O_JITTER;       /* decorrelated is random by itself */
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
  backoff_init_trusted(b, c, start, seed);
  return BACKOFF_OK;
}

BACKOFF_API int backoff_init_setup(backoff_t *b, const backoff_setup *s,
                                   double start, int *bad_option) {
  if (!s->checked)
    return backoff_init(b, &s->config, start, s->seed, bad_option);
  if (bad_option) *bad_option = -1;
  if (!is_finite(start)) return BACKOFF_ETIME;
  backoff_init_trusted(b, &s->config, start, s->seed);
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
    default: return 0;
  }
}
