/*
** backoff_rows.h -- internal to the configuration kit
** (backoff_options.c, backoff_rules.c): the list of every option, which
** gives each its enumerator O_<ID> and its row of the table, and the
** small helpers both files use.
*/

#ifndef BACKOFF_ROWS_H
#define BACKOFF_ROWS_H

#include "backoff_options.h"

/*
** Every option, one line each: its enumerator O_<ID> and its row come
** from the same line, so they cannot drift apart.  Adding a numeric
** option is a field in backoff_config (named in CFG(...): the compiler
** checks it), a line here, and its use in the engine.
**
**  ID, name, kind, range, show, offset, flag, accepted, required, alias
*/
#define OPTIONS(X) \
  X(STRATEGY, "strategy", K(STRATEGY), 0, SH(ALWAYS), NONE, NONE, ALL, 0, \
    NO_ALIAS) \
  X(DELAY, "delay", K(NUMBER), R(NONNEG), SH(ALWAYS), \
    CFG(p.constant.delay), NONE, S(CONSTANT), S(CONSTANT), NO_ALIAS) \
  X(INITIAL_DELAY, "initial_delay", K(NUMBER), R(NONNEG), SH(ALWAYS), \
    CFG(p.linear.initial_delay), NONE, ALL & ~S(CONSTANT) & ~S(FIBONACCI), \
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
    CFG(p.linear.delay_on_success), NONE, ALL & ~ID_STRATEGIES, 0, \
    NO_ALIAS) \
  X(INC_ON_SUCCESS, "delay_increment_on_success", K(NUMBER), R(ANY), \
    SH(ALWAYS), CFG(p.lild.delay_increment_on_success), NONE, \
    S(LILD) | S(MILD), S(LILD) | S(MILD), NO_ALIAS) \
  X(MUL_ON_SUCCESS, "delay_multiple_on_success", K(NUMBER), R(NONNEG), \
    SH(ALWAYS), CFG(p.limd.delay_multiple_on_success), NONE, \
    S(LIMD) | S(MIMD), S(LIMD) | S(MIMD), NO_ALIAS) \
  X(MIN_DELAY, "min_delay", K(NUMBER), R(NONNEG), SH(ALWAYS), \
    CFG(min_delay), NONE, ALL, 0, NO_ALIAS) \
  X(MAX_DELAY, "max_delay", K(NUMBER), R(NONNEG), SH(IF_SET), \
    CFG(max_delay), CFG(has_max_delay), ALL, S(DECORRELATED), NO_ALIAS) \
  X(MAX_ATTEMPTS, "max_attempts", K(COUNT), 0, SH(ALWAYS), \
    CFG(max_attempts), NONE, ALL, 0, NO_ALIAS) \
  X(MAX_DURATION, "max_actual_duration", K(NUMBER), R(NONNEG), SH(ALWAYS), \
    CFG(max_actual_duration), NONE, ALL, 0, NO_ALIAS) \
  X(CONSIDER, "consider_actual_delay", K(BOOL), 0, SH(ALWAYS), \
    CFG(consider_actual_delay), NONE, ALL, 0, NO_ALIAS) \
  X(JITTER, "jitter", K(JITTER), 0, SH(ALWAYS), CFG(jitter), NONE, \
    NOT_DEC, 0, NO_ALIAS) \
  X(JITTER_FACTOR, "jitter_factor", K(NUMBER), R(UNIT), SH(ALWAYS), \
    CFG(jitter_factor), NONE, NOT_DEC, 0, NO_ALIAS) \
  /* given, it turns per-attempt timeouts on (see finish_timeouts) */ \
  X(ADJUST_TIMEOUT_FACTOR, "adjust_timeout_factor", K(NUMBER), R(UNIT), \
    SH(IF_TIMEOUTS), CFG(adjust_timeout_factor), CFG(timeouts), ALL, 0, \
    NO_ALIAS) \
  X(MIN_ADJUST_TIMEOUT, "min_adjust_timeout", K(NUMBER), R(NONNEG), \
    SH(IF_TIMEOUTS), CFG(min_adjust_timeout), NONE, ALL, 0, NO_ALIAS) \
  X(TIMEOUT_JITTER_FACTOR, "timeout_jitter_factor", K(NUMBER), R(UNIT), \
    SH(IF_TIMEOUTS), CFG(timeout_jitter_factor), NONE, ALL, 0, NO_ALIAS) \
  X(MAX_HINT, "max_hint", K(NUMBER), R(NONNEG), SH(IF_SET), CFG(max_hint), \
    CFG(has_max_hint), ALL, 0, NO_ALIAS) \
  X(SEED, "seed", K(SEED), 0, SH(IF_GIVEN), AT(seed), NONE, ALL, 0, \
    NO_ALIAS) \
  X(START, "start", K(START), R(ANY), SH(IF_GIVEN), AT(start), NONE, ALL, \
    0, NO_ALIAS) \
  X(CLOCK, "clock", K(FUNCTION), 0, SH(IF_GIVEN), NONE, NONE, ALL, 0, \
    NO_ALIAS)

#define AS_ENUM(id, ...) O_##id,
enum backoff_row { OPTIONS(AS_ENUM) O_COUNT };

/* more rows than backoff_setup.given has bits: raise BACKOFF_MAX_OPTIONS */
typedef char every_option_fits_in_given[
  O_COUNT <= BACKOFF_MAX_OPTIONS ? 1 : -1];

static inline int accepts(const backoff_option *o, int s) {
  return (o->accepted >> s) & 1u;
}

static inline int given(const backoff_setup *s, int option) {
  return (s->given[option / 32] >> (option % 32)) & 1u;
}

static inline void mark_given(backoff_setup *s, int option) {
  s->given[option / 32] |= (uint32_t)1 << (option % 32);
}

/* fill *p (when not NULL); returns BACKOFF_EINVAL */
static inline int problem(backoff_problem *p, int kind, int option,
                          int other) {
  if (p) {
    p->kind = kind;
    p->option = option;
    p->other = other;
    p->jitter = -1;
  }
  return BACKOFF_EINVAL;
}

#endif
