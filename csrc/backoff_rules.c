/*
** backoff_rules.c -- the rules that tie options together (required
** options, aliases, defaults that follow other options), run once all
** options are set, and the words of every problem with a setup.
*/

#include <stdio.h>
#include <string.h>

#define BACKOFF_OPTIONS_INTERNAL
#include "backoff_options.h"

/* ----------------------------------------------------------------- */
/* the rules between options                                         */
/* ----------------------------------------------------------------- */


/* an alias given with an option it stands for is an error naming
   both (checked in row order, whatever the table order was); alone,
   it sets each of them */
static int finish_aliases(backoff_setup *s, backoff_problem *p) {
  uint64_t rows;
  int i, k;
  for (rows = s->given; rows != 0; rows &= rows - 1) {  /* given rows */
    const backoff_option *o = &backoff_options[i = lowest_row(rows)];
    if (o->kind != BACKOFF_K_ALIAS) continue;
    for (k = 0; k < 2 && o->alias_of[k] >= 0; k++)
      if (given(s, o->alias_of[k]))
        return problem(p, BACKOFF_P_CONFLICT, i, o->alias_of[k]);
    for (k = 0; k < 2 && o->alias_of[k] >= 0; k++)  /* set by store() */
      mark_given(s, o->alias_of[k]);
  }
  return BACKOFF_OK;
}


/* the rows some strategy requires, as one constant of the list */
#define REQUIRED_ROW(id, name, kind, range, show, offset, flag, accepted, \
                     required, alias) \
  | ((uint64_t)((required) != 0) << O_##id)
static const uint64_t required_rows = 0 OPTIONS(REQUIRED_ROW);

/* the first required row not given, in row order */
static int finish_required(const backoff_setup *s, backoff_problem *p) {
  uint64_t rows;
  int i, st = s->config.strategy;
  for (rows = required_rows & ~s->given; rows != 0; rows &= rows - 1) {
    i = lowest_row(rows);
    if ((backoff_options[i].required >> st) & 1u)
      return problem(p, BACKOFF_P_MISSING, i, -1);
  }
  return BACKOFF_OK;
}

/* a factor with a jitter kind that takes none: worth reporting */
static int factor_without_use(backoff_setup *s, int factor,
                              backoff_problem *p) {
  if (given(s, factor) && s->config.jitter_factor != 0) {
    problem(p, BACKOFF_P_RULE, factor, -1);
    p->jitter = s->config.jitter;
    return BACKOFF_EINVAL;
  }
  s->config.jitter_factor = 0;
  return BACKOFF_OK;
}

/* jitter: "proportional" when a factor is given, else "none" (the Perl
   family); EventSauce's scattered needs its range; the AWS formulas
   default to full (backoff_config_init) */
static int finish_jitter(backoff_setup *s, backoff_problem *p) {
  backoff_config *c = &s->config;
  if (c->strategy == BACKOFF_EVENTSAUCE) {
    /* JitterAfterThreshold's inner jitter is FullJitter by default */
    if (given(s, O_JITTER_THRESHOLD) && !given(s, O_JITTER))
      c->jitter = BACKOFF_JITTER_FULL;
    if (c->jitter == BACKOFF_JITTER_SCATTERED)
      return given(s, O_RANGE) ? BACKOFF_OK
               : problem(p, BACKOFF_P_NEEDS, O_JITTER, O_RANGE);
    return factor_without_use(s, O_RANGE, p);
  }
  if (c->strategy == BACKOFF_DECORRELATED ||
      c->strategy >= BACKOFF_FIRST_SYSTEM)
    return BACKOFF_OK;
  if (!given(s, O_JITTER)) {
    c->jitter = c->jitter_factor > 0 ? BACKOFF_JITTER_PROPORTIONAL
                                     : BACKOFF_JITTER_NONE;
  } else if (c->jitter != BACKOFF_JITTER_PROPORTIONAL) {
    return factor_without_use(s, O_JITTER_FACTOR, p);
  }
  return BACKOFF_OK;
}

/* attempts in each system's terms (stored as max_attempts: max_retries
   N, EventSauce's max_tries N and Polly's max_retry_attempts N allow N
   delays), and the systems' required options and cross rules */
static int finish_attempts(backoff_setup *s, backoff_problem *p) {
  backoff_config *c = &s->config;
  if (given(s, O_MAX_RETRIES) && given(s, O_MAX_ATTEMPTS))
    return problem(p, BACKOFF_P_CONFLICT, O_MAX_RETRIES, O_MAX_ATTEMPTS);
  if (c->strategy == BACKOFF_EVENTSAUCE) {
    if (c->backoff_type == BACKOFF_TYPE_IMMEDIATELY_FAILING) {
      c->max_attempts = 1;        /* it never sleeps */
      return BACKOFF_OK;
    }
    if (c->backoff_type != BACKOFF_TYPE_NO_WAITING) {
      if (!given(s, O_ES_INITIAL_DELAY))
        return problem(p, BACKOFF_P_MISSING, O_ES_INITIAL_DELAY, -1);
      if (!given(s, O_MAX_TRIES))
        return problem(p, BACKOFF_P_MISSING, O_MAX_TRIES, -1);
    }
  }
  return BACKOFF_OK;
}

static double number_of(const backoff_config *c, int row) {
  double d;
  memcpy(&d, backoff_option_field(c, row), sizeof d);
  return d;
}

/* the first delay (row first, or its alias) must not be above the cap
   (row cap): every delay would be the cap, and the first delay given
   would mean nothing.  The message names what the caller gave: the
   first delay (by the alias when that was given), else the cap alone,
   against the first delay's default. */
static int first_within_cap(const backoff_setup *s, backoff_problem *p,
                            int first, int alias, int cap) {
  double d = number_of(&s->config, first), m = number_of(&s->config, cap);
  if (d <= m) return BACKOFF_OK;
  if (given(s, first) || !given(s, cap)) {
    problem(p, BACKOFF_P_ABOVE,
            alias >= 0 && given(s, alias) ? alias : first, cap);
    p->value = d;
    p->limit = m;
  } else {
    problem(p, BACKOFF_P_BELOW, cap, first);
    p->value = m;
    p->limit = d;
  }
  return BACKOFF_EINVAL;
}

/* A first delay above the cap is an error wherever the reference
   refuses it (Google's Java) or clamps it to the cap (Algorithm::Backoff,
   EventSauce, Polly, the contrib's README, the AWS article), so a
   mistake such as milliseconds for seconds (initial_delay = 100,
   max_delay = 10) does not pass silently.  Not for constant (delay is
   no first delay, and Perl's own tests give delay 3 with max_delay 2)
   nor cenkalti (Go returns InitialInterval first whatever MaxInterval
   is: its sequence stays reproducible). */
static int finish_first_delay(const backoff_setup *s, backoff_problem *p) {
  const backoff_config *c = &s->config;
  switch (c->strategy) {
    case BACKOFF_CONSTANT: case BACKOFF_CENKALTI:
      return BACKOFF_OK;
    case BACKOFF_GOOGLE:
      return first_within_cap(s, p, O_GOOGLE_INITIAL, -1, O_GOOGLE_MAX);
    case BACKOFF_AWS:
      return first_within_cap(s, p, O_AWS_BASE, -1, O_CAP);
    case BACKOFF_EVENTSAUCE:        /* max_delay has a default: 2.5 s */
      if (c->backoff_type == BACKOFF_TYPE_NO_WAITING ||
          c->backoff_type == BACKOFF_TYPE_IMMEDIATELY_FAILING)
        return BACKOFF_OK;          /* they ignore initial_delay */
      return first_within_cap(s, p, O_ES_INITIAL_DELAY, -1, O_MAX_DELAY);
    default:
      break;
  }
  if (!c->has_max_delay) return BACKOFF_OK;   /* no cap given */
  switch (c->strategy) {
    case BACKOFF_FIBONACCI:
      if (first_within_cap(s, p, O_INITIAL_DELAY1, O_FIB_INITIAL_DELAY,
                           O_MAX_DELAY) != BACKOFF_OK)
        return BACKOFF_EINVAL;
      return first_within_cap(s, p, O_INITIAL_DELAY2, O_FIB_INITIAL_DELAY,
                              O_MAX_DELAY);
    case BACKOFF_POLLY:
      return first_within_cap(s, p, O_POLLY_DELAY, -1, O_MAX_DELAY);
    case BACKOFF_DECORRELATED_V2:
      return first_within_cap(s, p, O_MEDIAN, -1, O_MAX_DELAY);
    default:                        /* the Perl family's initial_delay */
      return first_within_cap(s, p, O_INITIAL_DELAY, -1, O_MAX_DELAY);
  }
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
      finish_attempts(&t, p) != BACKOFF_OK ||
      finish_first_delay(&t, p) != BACKOFF_OK ||
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
/* messages and config()                                             */
/* ----------------------------------------------------------------- */

static const char *rule_text(const backoff_option *o, int s) {
  switch (o->kind) {
    case BACKOFF_K_COUNT: return "an integer >= 0";
    case BACKOFF_K_RETRIES: break;    /* by its range */
    case BACKOFF_K_BOOL: return "a boolean";
    case BACKOFF_K_JITTER:
      switch (s) {
        case BACKOFF_DECORRELATED: return "'none' (decorrelated is random)";
        case BACKOFF_EVENTSAUCE:
          return "'none', 'full', 'half' or 'scattered'";
        case BACKOFF_AWS: return "'full', 'equal' or 'decorrelated'";
        default: return "'none', 'proportional', 'full' or 'equal'";
      }
    case BACKOFF_K_TYPE:
      return s == BACKOFF_POLLY
               ? "'constant', 'linear' or 'exponential'"
               : "'exponential', 'fibonacci', 'linear', 'no_waiting' or "
                 "'immediately_failing'";
    case BACKOFF_K_STRATEGY: return "a known strategy";
    case BACKOFF_K_SEED: return "an integer";
    case BACKOFF_K_FUNCTION: return "a function";
    case BACKOFF_K_RANDOM:
      return "a function returning numbers in [0, 1]";
    default: break;
  }
  switch (o->range) {
    case BACKOFF_R_ANY: return "a finite number";
    case BACKOFF_R_UNIT: return "a number in [0, 1]";
    case BACKOFF_R_GE1: return "a finite number >= 1";
    case BACKOFF_R_POSITIVE: return "a finite number > 0";
    case BACKOFF_R_UNIT_OPEN: return "a number in [0, 1)";
    case BACKOFF_R_COUNT: return "an integer >= 0";
    case BACKOFF_R_TRIES: return "an integer >= -1 (-1: no limit)";
    case BACKOFF_R_RETRIES:
      return "an integer from 1 to 2147483647 (2147483647: no limit)";
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
    case BACKOFF_P_BELOW:
      return snprintf(buf, n, "option '%s' must be >= %s (got %.14g < "
                      "%.14g)", name, other, p->value, p->limit);
    case BACKOFF_P_ABOVE:
      return snprintf(buf, n, "option '%s' must be <= %s (got %.14g > "
                      "%.14g)", name, other, p->value, p->limit);
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

