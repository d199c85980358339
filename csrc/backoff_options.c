/*
** backoff_options.c -- the rules of every option, as one table.
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

#include "backoff.h"

#define S(x) (1u << BACKOFF_##x)
#define ALL ((1u << BACKOFF_NSTRATEGIES) - 1)
#define NOT_DEC (ALL & ~S(DECORRELATED))
#define ID_STRATEGIES (S(LILD) | S(LIMD) | S(MILD) | S(MIMD))

#define CFG(field) (short)offsetof(backoff_setup, config.field)
#define AT(field) (short)offsetof(backoff_setup, field)
#define NONE (-1)
#define NO_ALIAS {NONE, NONE}

/* rows named in the cross-option rules below: keep in table order */
enum {
  O_STRATEGY, O_DELAY, O_INITIAL_DELAY, O_FIB_INITIAL_DELAY,
  O_INITIAL_DELAY1, O_INITIAL_DELAY2, O_DELAY_INCREMENT, O_EXPONENT_BASE,
  O_INC_ON_FAILURE, O_MUL_ON_FAILURE, O_MULTIPLIER, O_DELAY_ON_SUCCESS,
  O_INC_ON_SUCCESS, O_MUL_ON_SUCCESS, O_MIN_DELAY, O_MAX_DELAY,
  O_MAX_ATTEMPTS, O_MAX_DURATION, O_CONSIDER, O_JITTER, O_JITTER_FACTOR,
  O_ADJUST_TIMEOUT_FACTOR, O_MIN_ADJUST_TIMEOUT, O_TIMEOUT_JITTER_FACTOR,
  O_MAX_HINT, O_SEED, O_START, O_CLOCK, O_COUNT
};

#define K(x) BACKOFF_K_##x
#define R(x) BACKOFF_R_##x
#define SH(x) BACKOFF_SHOW_##x

/* name, kind, range, show, offset, flag, accepted, required, alias_of */
const backoff_option backoff_options[] = {
  {"strategy", K(STRATEGY), 0, SH(ALWAYS), NONE, NONE, ALL, 0, NO_ALIAS},
  {"delay", K(NUMBER), R(NONNEG), SH(ALWAYS), CFG(p.constant.delay), NONE,
   S(CONSTANT), S(CONSTANT), NO_ALIAS},
  {"initial_delay", K(NUMBER), R(NONNEG), SH(ALWAYS),
   CFG(p.linear.initial_delay), NONE, ALL & ~S(CONSTANT) & ~S(FIBONACCI),
   S(LINEAR) | S(EXPONENTIAL) | ID_STRATEGIES | S(DECORRELATED), NO_ALIAS},
  /* fibonacci: initial_delay stands for both of its first delays */
  {"initial_delay", K(ALIAS), R(NONNEG), SH(NEVER), NONE, NONE,
   S(FIBONACCI), 0, {O_INITIAL_DELAY1, O_INITIAL_DELAY2}},
  {"initial_delay1", K(NUMBER), R(NONNEG), SH(ALWAYS),
   CFG(p.fibonacci.initial_delay1), NONE, S(FIBONACCI), S(FIBONACCI),
   NO_ALIAS},
  {"initial_delay2", K(NUMBER), R(NONNEG), SH(ALWAYS),
   CFG(p.fibonacci.initial_delay2), NONE, S(FIBONACCI), S(FIBONACCI),
   NO_ALIAS},
  {"delay_increment", K(NUMBER), R(ANY), SH(ALWAYS),
   CFG(p.linear.delay_increment), NONE, S(LINEAR), 0, NO_ALIAS},
  {"exponent_base", K(NUMBER), R(NONNEG), SH(ALWAYS),
   CFG(p.exponential.exponent_base), NONE,
   S(EXPONENTIAL) | S(RETRY_TIMEOUTS), 0, NO_ALIAS},
  {"delay_increment_on_failure", K(NUMBER), R(ANY), SH(ALWAYS),
   CFG(p.lild.delay_increment_on_failure), NONE, S(LILD) | S(LIMD),
   S(LILD) | S(LIMD), NO_ALIAS},
  {"delay_multiple_on_failure", K(NUMBER), R(NONNEG), SH(ALWAYS),
   CFG(p.mild.delay_multiple_on_failure), NONE, S(MILD) | S(MIMD),
   S(MILD) | S(MIMD), NO_ALIAS},
  {"multiplier", K(NUMBER), R(GE1), SH(ALWAYS),
   CFG(p.decorrelated.multiplier), NONE, S(DECORRELATED), 0, NO_ALIAS},
  {"delay_on_success", K(NUMBER), R(NONNEG), SH(ALWAYS),
   CFG(p.linear.delay_on_success), NONE, ALL & ~ID_STRATEGIES, 0, NO_ALIAS},
  {"delay_increment_on_success", K(NUMBER), R(ANY), SH(ALWAYS),
   CFG(p.lild.delay_increment_on_success), NONE, S(LILD) | S(MILD),
   S(LILD) | S(MILD), NO_ALIAS},
  {"delay_multiple_on_success", K(NUMBER), R(NONNEG), SH(ALWAYS),
   CFG(p.limd.delay_multiple_on_success), NONE, S(LIMD) | S(MIMD),
   S(LIMD) | S(MIMD), NO_ALIAS},
  {"min_delay", K(NUMBER), R(NONNEG), SH(ALWAYS), CFG(min_delay), NONE,
   ALL, 0, NO_ALIAS},
  {"max_delay", K(NUMBER), R(NONNEG), SH(IF_SET), CFG(max_delay),
   CFG(has_max_delay), ALL, S(DECORRELATED), NO_ALIAS},
  {"max_attempts", K(COUNT), 0, SH(ALWAYS), CFG(max_attempts), NONE, ALL,
   0, NO_ALIAS},
  {"max_actual_duration", K(NUMBER), R(NONNEG), SH(ALWAYS),
   CFG(max_actual_duration), NONE, ALL, 0, NO_ALIAS},
  {"consider_actual_delay", K(BOOL), 0, SH(ALWAYS),
   CFG(consider_actual_delay), NONE, ALL, 0, NO_ALIAS},
  {"jitter", K(JITTER), 0, SH(ALWAYS), CFG(jitter), NONE, NOT_DEC, 0,
   NO_ALIAS},
  {"jitter_factor", K(NUMBER), R(UNIT), SH(ALWAYS), CFG(jitter_factor),
   NONE, NOT_DEC, 0, NO_ALIAS},
  /* given, it turns per-attempt timeouts on (see finish_timeouts) */
  {"adjust_timeout_factor", K(NUMBER), R(UNIT), SH(IF_TIMEOUTS),
   CFG(adjust_timeout_factor), CFG(timeouts), ALL, 0, NO_ALIAS},
  {"min_adjust_timeout", K(NUMBER), R(NONNEG), SH(IF_TIMEOUTS),
   CFG(min_adjust_timeout), NONE, ALL, 0, NO_ALIAS},
  {"timeout_jitter_factor", K(NUMBER), R(UNIT), SH(IF_TIMEOUTS),
   CFG(timeout_jitter_factor), NONE, ALL, 0, NO_ALIAS},
  {"max_hint", K(NUMBER), R(NONNEG), SH(IF_SET), CFG(max_hint),
   CFG(has_max_hint), ALL, 0, NO_ALIAS},
  {"seed", K(SEED), 0, SH(IF_GIVEN), AT(seed), NONE, ALL, 0, NO_ALIAS},
  {"start", K(START), R(ANY), SH(IF_GIVEN), AT(start), NONE, ALL, 0,
   NO_ALIAS},
  {"clock", K(FUNCTION), 0, SH(IF_GIVEN), NONE, NONE, ALL, 0, NO_ALIAS},
  {NULL, 0, 0, 0, NONE, NONE, 0, 0, NO_ALIAS}
};

typedef char row_count_matches[
  sizeof backoff_options / sizeof backoff_options[0] == O_COUNT + 1 ? 1 : -1];

/* ----------------------------------------------------------------- */
/* values                                                            */
/* ----------------------------------------------------------------- */

static int is_finite(double x) {
  return x == x && x <= DBL_MAX && x >= -DBL_MAX;
}

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

static int accepts(const backoff_option *o, int s) {
  return (o->accepted >> s) & 1u;
}

BACKOFF_API int backoff_setup_init(backoff_setup *s, int strategy) {
  if (backoff_config_init(&s->config, strategy) != BACKOFF_OK)
    return BACKOFF_EINVAL;
  s->seed = 0;
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

/* fill *p (when not NULL); returns BACKOFF_EINVAL */
static int problem(backoff_problem *p, int kind, int option, int other) {
  if (p) {
    p->kind = kind;
    p->option = option;
    p->other = other;
    p->jitter = -1;
  }
  return BACKOFF_EINVAL;
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
  s->given |= (uint32_t)1 << option;
  s->checked = 0;
  return BACKOFF_OK;
}

/* ----------------------------------------------------------------- */
/* the rules between options                                         */
/* ----------------------------------------------------------------- */

static int given(const backoff_setup *s, int option) {
  return (s->given >> option) & 1u;
}

/* an alias given with an option it stands for is an error naming
   both (checked in row order, whatever the table order was); alone,
   it sets each of them */
static int finish_aliases(backoff_setup *s, backoff_problem *p) {
  int i, k;
  for (i = 0; i < O_COUNT; i++) {
    const backoff_option *o = &backoff_options[i];
    if (o->kind != BACKOFF_K_ALIAS || !given(s, i)) continue;
    for (k = 0; k < 2 && o->alias_of[k] >= 0; k++)
      if (given(s, o->alias_of[k]))
        return problem(p, BACKOFF_P_CONFLICT, i, o->alias_of[k]);
    for (k = 0; k < 2 && o->alias_of[k] >= 0; k++)  /* set by store() */
      s->given |= (uint32_t)1 << o->alias_of[k];
  }
  return BACKOFF_OK;
}


static int finish_required(const backoff_setup *s, backoff_problem *p) {
  int i, st = s->config.strategy;
  for (i = 0; i < O_COUNT; i++)
    if ((backoff_options[i].required >> st) & 1u && !given(s, i))
      return problem(p, BACKOFF_P_MISSING, i, -1);
  return BACKOFF_OK;
}

/* jitter: "proportional" when a factor is given, else "none"; a
   factor with another kind is a mistake worth reporting */
static int finish_jitter(backoff_setup *s, backoff_problem *p) {
  backoff_config *c = &s->config;
  if (c->strategy == BACKOFF_DECORRELATED) return BACKOFF_OK;
  if (!given(s, O_JITTER)) {
    c->jitter = c->jitter_factor > 0 ? BACKOFF_JITTER_PROPORTIONAL
                                     : BACKOFF_JITTER_NONE;
  } else if (c->jitter != BACKOFF_JITTER_PROPORTIONAL) {
    if (given(s, O_JITTER_FACTOR) && c->jitter_factor != 0) {
      problem(p, BACKOFF_P_RULE, O_JITTER_FACTOR, -1);
      p->jitter = c->jitter;
      return BACKOFF_EINVAL;
    }
    c->jitter_factor = 0;
  }
  return BACKOFF_OK;
}

/* per-attempt timeouts: retry_timeouts, or adjust_timeout_factor */
static int finish_timeouts(backoff_setup *s, backoff_problem *p) {
  if (s->config.strategy == BACKOFF_RETRY_TIMEOUTS || s->config.timeouts)
    return BACKOFF_OK;
  if (given(s, O_MIN_ADJUST_TIMEOUT))
    return problem(p, BACKOFF_P_NEEDS, O_MIN_ADJUST_TIMEOUT,
                   O_ADJUST_TIMEOUT_FACTOR);
  if (given(s, O_TIMEOUT_JITTER_FACTOR))
    return problem(p, BACKOFF_P_NEEDS, O_TIMEOUT_JITTER_FACTOR,
                   O_ADJUST_TIMEOUT_FACTOR);
  return BACKOFF_OK;
}

BACKOFF_API int backoff_setup_finish(backoff_setup *s, backoff_problem *p) {
  backoff_problem local;
  backoff_setup t = *s;
  if (p == NULL) p = &local;
  if (finish_aliases(&t, p) != BACKOFF_OK ||
      finish_required(&t, p) != BACKOFF_OK ||
      finish_jitter(&t, p) != BACKOFF_OK ||
      finish_timeouts(&t, p) != BACKOFF_OK)
    return BACKOFF_EINVAL;
  /* linear: the increment defaults to the initial delay */
  if (t.config.strategy == BACKOFF_LINEAR && !given(&t, O_DELAY_INCREMENT))
    t.config.p.linear.delay_increment = t.config.p.linear.initial_delay;
  /* No backoff_config_check here: setup_set checked every value it
     stored, and the rules above only copy checked values or write valid
     ones, so the result always passes it (spec/c/test_backoff.c tries
     random option sets, valid and not, for every strategy, and fails
     when a rule lets a bad value through).  Constructors check once. */
  t.checked = 1;
  *s = t;
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

/* ----------------------------------------------------------------- */
/* messages and config()                                             */
/* ----------------------------------------------------------------- */

static const char *rule_text(const backoff_option *o, int s) {
  switch (o->kind) {
    case BACKOFF_K_COUNT: return "an integer >= 0";
    case BACKOFF_K_BOOL: return "a boolean";
    case BACKOFF_K_JITTER:
      return s == BACKOFF_DECORRELATED
               ? "'none' (decorrelated is random)"
               : "'none', 'proportional', 'full' or 'equal'";
    case BACKOFF_K_STRATEGY: return "a known strategy";
    case BACKOFF_K_SEED: return "an integer";
    case BACKOFF_K_FUNCTION: return "a function";
    default: break;
  }
  switch (o->range) {
    case BACKOFF_R_ANY: return "a finite number";
    case BACKOFF_R_UNIT: return "a number in [0, 1]";
    case BACKOFF_R_GE1: return "a finite number >= 1";
    default: return "a finite number >= 0";
  }
}

static const char *row_name(int option) {
  return option >= 0 && option < O_COUNT ? backoff_options[option].name
                                         : "?";
}

BACKOFF_API int backoff_problem_message(const backoff_problem *p, int s,
                                        char *buf, size_t n) {
  const char *name = row_name(p->option), *other = row_name(p->other);
  switch (p->kind) {
    case BACKOFF_P_MISSING:
      return snprintf(buf, n, "missing required option '%s'", name);
    case BACKOFF_P_CONFLICT:
      return snprintf(buf, n, "options '%s' and '%s' cannot be given "
                      "together", name, other);
    case BACKOFF_P_NEEDS:
      return snprintf(buf, n, "option '%s' needs option '%s'%s", name, other,
                      p->other == O_ADJUST_TIMEOUT_FACTOR
                        ? " (per-attempt timeouts are off)" : "");
    default:
      break;
  }
  if (p->option == O_STRATEGY && s >= 0 && s < BACKOFF_NSTRATEGIES)
    return snprintf(buf, n, "option 'strategy' must be '%s'",
                    backoff_strategy_name(s));
  if (p->jitter >= 0)
    return snprintf(buf, n, "option '%s' must be 0 with jitter '%s'", name,
                    backoff_jitter_name(p->jitter));
  if (p->option < 0 || p->option >= O_COUNT)
    return snprintf(buf, n, "invalid configuration");
  return snprintf(buf, n, "option '%s' must be %s", name,
                  rule_text(&backoff_options[p->option], s));
}

BACKOFF_API int backoff_problem_quotes(const backoff_problem *p) {
  return p->kind == BACKOFF_P_RULE;
}

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
