/*
** test_backoff.c -- unit tests of the C core alone (no Lua), with
** cmocka.  Built with ASan and UBSan (float-cast-overflow on) by
** `make ctest`; prints TAP with CMOCKA_MESSAGE_OUTPUT=TAP.
*/

#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "backoff_options.h"

/* the strategy's three parameters in order (every member of
   backoff_params is three doubles: the first delay, the failure
   parameter, the success parameter) */
static void set_params(backoff_config *c, double first, double on_failure,
                       double on_success) {
  double v[3];
  v[0] = first;
  v[1] = on_failure;
  v[2] = on_success;
  memcpy(&c->p, v, sizeof v);
}

/* a configuration of strategy s with its three parameters */
static backoff_config config_of(int s, double initial, double on_failure,
                                double on_success) {
  backoff_config c;
  assert_int_equal(backoff_config_init(&c, s), BACKOFF_OK);
  set_params(&c, initial, on_failure, on_success);
  if (s == BACKOFF_DECORRELATED) {
    c.has_max_delay = 1;
    c.max_delay = 100;
  }
  return c;
}

/* an object of configuration c, started at start with seed 1 */
static backoff_t make_at(const backoff_config *c, double start) {
  backoff_t b;
  assert_int_equal(backoff_init(&b, c, start, 1, NULL), BACKOFF_OK);
  return b;
}

static backoff_t make(int s, double initial, double on_failure,
                      double on_success) {
  backoff_config c = config_of(s, initial, on_failure, on_success);
  return make_at(&c, 0);
}

static double on_failure(backoff_t *b, double ts) {
  backoff_result r;
  assert_int_equal(backoff_failure(b, ts, &r), BACKOFF_OK);
  assert_int_equal(r.give_up, BACKOFF_CONTINUE);
  return r.delay;
}

static double on_success(backoff_t *b, double ts) {
  backoff_result r;
  assert_int_equal(backoff_success(b, ts, &r), BACKOFF_OK);
  return r.delay;
}

static int finite_nonneg(double d) {
  return d == d && d >= 0 && d <= DBL_MAX && !(d == 0 && signbit(d));
}

/* ---- strategies ---- */

static void test_constant(void **state) {
  backoff_t b = make(BACKOFF_CONSTANT, 2, 0, 1);
  (void)state;
  assert_true(on_failure(&b, 0) == 2);
  assert_true(on_failure(&b, 0) == 2);
  assert_true(on_success(&b, 0) == 1);
}

static void test_linear(void **state) {
  backoff_t b = make(BACKOFF_LINEAR, 1, 0.5, 0);
  (void)state;
  assert_true(on_failure(&b, 0) == 1);
  assert_true(on_failure(&b, 0) == 1.5);
  assert_true(on_failure(&b, 0) == 2);
  assert_true(on_success(&b, 0) == 0);
  assert_true(on_failure(&b, 0) == 1);
}

static void test_exponential(void **state) {
  backoff_t b = make(BACKOFF_EXPONENTIAL, 5, 3, 0);
  (void)state;
  assert_true(on_failure(&b, 1) == 5);
  assert_true(on_failure(&b, 1) == 15);
  assert_true(on_failure(&b, 1) == 45);
}

static void test_fibonacci(void **state) {
  backoff_t b = make(BACKOFF_FIBONACCI, 0, 1, 0);
  double want[] = {0, 1, 1, 2, 3, 5, 8, 13, 21, 34};
  int i;
  (void)state;
  for (i = 0; i < 10; i++)
    assert_true(on_failure(&b, 0) == want[i]);
  assert_true(on_success(&b, 0) == 0);
  assert_true(on_failure(&b, 0) == 0);     /* restarts after a success */
}

static void test_limd_synopsis(void **state) {
  backoff_config c = config_of(BACKOFF_LIMD, 2, 4, 0.2);
  backoff_t b;
  double want[] = {2, 6, 10, 2, 1, 1, 5, 9, 13};
  int i;
  (void)state;
  c.min_delay = 1;
  b = make_at(&c, 0);
  for (i = 0; i < 9; i++) {
    double d = (i >= 3 && i < 6) ? on_success(&b, 0) : on_failure(&b, 0);
    assert_true(fabs(d - want[i]) < 1e-12);
  }
}

static void test_mimd(void **state) {
  backoff_t b = make(BACKOFF_MIMD, 3, 2, 0.5);
  (void)state;
  assert_true(on_failure(&b, 0) == 3);
  assert_true(on_failure(&b, 0) == 6);
  assert_true(on_success(&b, 0) == 3);
  assert_true(on_success(&b, 0) == 1.5);
}

static void test_decorrelated_bounds(void **state) {
  backoff_t b = make(BACKOFF_DECORRELATED, 1, 3, 0);
  double prev = 1, d;
  int i;
  (void)state;
  for (i = 0; i < 10000; i++) {
    d = on_failure(&b, 0);
    assert_true(d >= 1 && d <= 100 && d <= prev * 3 + 1e-9);
    prev = d;
  }
}

/* ---- limits, clamps, give-ups ---- */

static void test_min_wins_over_max(void **state) {
  backoff_config c = config_of(BACKOFF_CONSTANT, 50, 0, 0);
  backoff_t b;
  (void)state;
  c.has_max_delay = 1;
  c.max_delay = 10;
  c.min_delay = 20;
  b = make_at(&c, 0);
  assert_true(on_failure(&b, 0) == 20);
}

static void test_max_attempts(void **state) {
  backoff_config c = config_of(BACKOFF_CONSTANT, 1, 0, 0);
  backoff_t b;
  backoff_result r;
  (void)state;
  c.max_attempts = 2;
  b = make_at(&c, 0);
  assert_true(on_failure(&b, 0) == 1);
  backoff_failure(&b, 0, &r);
  assert_int_equal(r.give_up, BACKOFF_MAX_ATTEMPTS);
  assert_string_equal(backoff_give_up_name(r.give_up), "max_attempts");
  on_success(&b, 0);
  assert_true(on_failure(&b, 0) == 1);
}

static void test_max_duration_sticks(void **state) {
  backoff_config c = config_of(BACKOFF_CONSTANT, 1, 0, 0);
  backoff_t b;
  backoff_result r;
  (void)state;
  c.max_actual_duration = 10;
  b = make_at(&c, 100);
  assert_true(on_failure(&b, 105) == 1);
  backoff_failure(&b, 110, &r);
  assert_int_equal(r.give_up, BACKOFF_MAX_DURATION);
  backoff_failure(&b, 101, &r);      /* the clock stepped back */
  assert_int_equal(r.give_up, BACKOFF_MAX_DURATION);
  assert_int_equal(backoff_reset(&b, 200), BACKOFF_OK);
  assert_true(on_failure(&b, 201) == 1);
}

static void test_overflow_saturates(void **state) {
  int s, j, i;
  (void)state;
  for (s = 0; s < BACKOFF_FIRST_SYSTEM; s++)   /* systems: test_systems */
    for (j = 0; j < BACKOFF_NJITTERS; j++) {
      backoff_config c;
      backoff_t b;
      backoff_result r;
      if (s != BACKOFF_DECORRELATED && !backoff_strategy_takes_jitter(s, j))
        continue;
      backoff_config_init(&c, s);
      set_params(&c, 1e308, (s == BACKOFF_CONSTANT) ? 0 : 1e308,
                 (s == BACKOFF_LILD || s == BACKOFF_MILD ||
                  s == BACKOFF_LIMD || s == BACKOFF_MIMD) ? 1e308 : 0);
      c.jitter = (unsigned char)(s == BACKOFF_DECORRELATED ? 0 : j);
      c.jitter_factor = (j == BACKOFF_JITTER_PROPORTIONAL) ? 1 : 0;
      c.consider_actual_delay = 1;
      c.max_attempts = 0;
      c.max_actual_duration = (s == BACKOFF_RETRY_TIMEOUTS) ? 1e308 : 0;
      c.has_max_delay = (s == BACKOFF_DECORRELATED);
      c.max_delay = DBL_MAX;
      assert_int_equal(backoff_init(&b, &c, -1e308, 7, NULL), BACKOFF_OK);
      for (i = 0; i < 3000; i++) {
        assert_int_equal(backoff_failure(&b, (i % 5) * 1e307, &r),
                         BACKOFF_OK);
        assert_true(finite_nonneg(r.delay));
        if (r.has_timeout) assert_true(finite_nonneg(r.timeout));
      }
      assert_true(finite_nonneg(backoff_delay(&b)));
    }
}

/* base 2 is computed from the bits of the double, not by pow: check it
   against pow (then fin, as the general path does) across 2^1023 */
static void test_base2_matches_pow(void **state) {
  static const double initials[] = { 1e-300, 0.001, 1, 3, 1e300 };
  size_t k;
  uint64_t n;
  (void)state;
  for (k = 0; k < sizeof initials / sizeof initials[0]; k++) {
    backoff_t b = make(BACKOFF_EXPONENTIAL, initials[k], 2, 0);
    for (n = 1; n <= 1100; n++) {
      double p = pow(2.0, (double)(n - 1));
      double want = initials[k] * (p > DBL_MAX ? DBL_MAX : p);
      if (want > DBL_MAX) want = DBL_MAX;
      assert_true(on_failure(&b, 0) == want);
    }
  }
}

static void test_attempts_saturate(void **state) {
  backoff_t b = make(BACKOFF_EXPONENTIAL, 1, 2, 0);
  (void)state;
  b.attempts = UINT64_MAX - 1;       /* as after 2^64 - 2 failures */
  assert_true(on_failure(&b, 0) == DBL_MAX);
  assert_true(on_failure(&b, 0) == DBL_MAX);
  assert_true(backoff_attempts(&b) == UINT64_MAX);
}

/* ---- errors leave state alone ---- */

static void test_bad_config_rejected(void **state) {
  backoff_config c;
  backoff_t b;
  int bad;
  (void)state;
  memset(&b, 0xab, sizeof b);
  backoff_config_init(&c, BACKOFF_CONSTANT);
  c.p.constant.delay = -1;
  assert_int_equal(backoff_init(&b, &c, 0, 1, &bad), BACKOFF_EINVAL);
  assert_int_equal(bad, backoff_option_find(BACKOFF_CONSTANT, "delay", 5));
  assert_int_equal(b.cfg.strategy, 0xab);   /* untouched */
  c.p.constant.delay = NAN;
  assert_int_equal(backoff_config_check(&c, &bad), BACKOFF_EINVAL);
  c.p.constant.delay = INFINITY;
  assert_int_equal(backoff_config_check(&c, &bad), BACKOFF_EINVAL);
  c.p.constant.delay = 1;
  c.jitter_factor = 1.5;
  assert_int_equal(backoff_config_check(&c, &bad), BACKOFF_EINVAL);
  assert_string_equal(backoff_options[bad].name, "jitter_factor");
  c.jitter_factor = 0;
  c.strategy = BACKOFF_NSTRATEGIES;
  assert_int_equal(backoff_config_check(&c, &bad), BACKOFF_EINVAL);
  assert_int_equal(backoff_config_init(&c, 99), BACKOFF_EINVAL);
  backoff_config_init(&c, BACKOFF_DECORRELATED);
  c.p.decorrelated.initial_delay = 1;
  assert_int_equal(backoff_config_check(&c, &bad), BACKOFF_EINVAL);
  assert_string_equal(backoff_options[bad].name, "max_delay");
  assert_int_equal(backoff_init(&b, &c, NAN, 1, NULL), BACKOFF_EINVAL);
}

static void test_bad_timestamp_changes_nothing(void **state) {
  backoff_config c;
  backoff_t a, b;
  backoff_result r;
  int i;
  (void)state;
  backoff_config_init(&c, BACKOFF_EXPONENTIAL);
  c.p.exponential.initial_delay = 1;
  c.jitter = BACKOFF_JITTER_FULL;
  c.consider_actual_delay = 1;
  backoff_init(&a, &c, 0, 99, NULL);
  b = a;
  for (i = 0; i < 50; i++) {
    backoff_result ra, rb;
    assert_int_equal(backoff_failure(&b, NAN, &r), BACKOFF_ETIME);
    assert_int_equal(backoff_success(&b, INFINITY, &r), BACKOFF_ETIME);
    assert_int_equal(backoff_reset(&b, -INFINITY), BACKOFF_ETIME);
    assert_memory_equal(&a, &b, sizeof a);
    backoff_failure(&a, i, &ra);
    backoff_failure(&b, i, &rb);
    assert_true(ra.delay == rb.delay);
  }
}

static void test_decreasing_timestamp(void **state) {
  backoff_config c = config_of(BACKOFF_CONSTANT, 2, 0, 0);
  backoff_t b;
  (void)state;
  c.consider_actual_delay = 1;
  b = make_at(&c, 0);
  assert_true(on_failure(&b, 10) == 2);
  assert_true(on_failure(&b, 3) == 4);   /* as if at 10 */
}

/* ---- timeouts ---- */

static void test_retry_timeouts_scenario(void **state) {
  backoff_config c;
  backoff_t b;
  backoff_result r;
  double t;
  (void)state;
  backoff_config_init(&c, BACKOFF_RETRY_TIMEOUTS);
  c.jitter_factor = 0;
  c.timeout_jitter_factor = 0;
  assert_int_equal(backoff_init(&b, &c, 0, 1, NULL), BACKOFF_OK);
  assert_int_equal(backoff_timeout(&b, &t), 1);
  assert_true(t == 25);
  backoff_failure(&b, 0, &r);
  assert_true(fabs(r.delay - sqrt(2.0)) < 1e-12);
  assert_true(fabs(r.timeout - 24.292893218813454) < 1e-12);
  assert_int_equal(r.has_timeout, 1);
}

/* ---- generator ---- */

static void test_rng_reference_values(void **state) {
  backoff_rng r;
  uint64_t x = 0;
  (void)state;
  /* splitmix64 from 0: its published first output */
  backoff_rng_seed(&r, 0);
  assert_true(r.s[0] == UINT64_C(0xe220a8397b1dcdaf));
  /* xoshiro256** from state {1, 2, 3, 4}: the reference code's output
     is rotl(2 * 5, 7) * 9 = 11520 */
  r.s[0] = 1; r.s[1] = 2; r.s[2] = 3; r.s[3] = 4;
  assert_true(backoff_rng_next(&r) == 11520);
  assert_true(backoff_rng_next(&r) == 0);
  assert_true(backoff_rng_next(&r) == UINT64_C(1509978240));
  for (x = 0; x < 100000; x++) {
    double u = backoff_rng_double(&r);
    assert_true(u >= 0 && u < 1);
  }
}

static void test_names(void **state) {
  (void)state;
  assert_string_equal(backoff_strategy_name(BACKOFF_RETRY_TIMEOUTS),
                      "retry_timeouts");
  assert_null(backoff_strategy_name(-1));
  assert_string_equal(backoff_jitter_name(BACKOFF_JITTER_EQUAL), "equal");
  assert_null(backoff_jitter_name(BACKOFF_NJITTERS));
  assert_null(backoff_give_up_name(BACKOFF_CONTINUE));
  assert_string_equal(backoff_strerror(BACKOFF_ETIME),
                      "timestamp is not a finite number");
  assert_string_equal(backoff_give_up_name(BACKOFF_RETRY_AFTER),
                      "retry_after");
}

/* ---- the option table, as a C program uses it ---- */

static backoff_value number_value(double d) {
  backoff_value v;
  memset(&v, 0, sizeof v);
  v.type = BACKOFF_V_NUMBER;
  v.number = d;
  return v;
}

/* set option name of *s to d; returns the status */
static int set_number(backoff_setup *s, const char *name, double d,
                      backoff_problem *p) {
  backoff_value v = number_value(d);
  int row = backoff_option_find(s->config.strategy, name, strlen(name));
  return backoff_setup_set(s, row, &v, p);
}

static void test_options_by_name(void **state) {
  backoff_setup s;
  backoff_problem p;
  backoff_t b;
  char msg[200];
  (void)state;
  assert_int_equal(backoff_setup_init(&s, BACKOFF_FIBONACCI), BACKOFF_OK);
  /* another strategy's option, or a name with a NUL inside */
  assert_int_equal(backoff_option_find(BACKOFF_FIBONACCI, "delay", 5), -1);
  assert_int_equal(backoff_option_find(BACKOFF_FIBONACCI,
                                       "initial_delay1\0x", 16), -1);
  /* a bad value names the option and changes nothing */
  assert_int_equal(set_number(&s, "initial_delay1", -1, &p), BACKOFF_EINVAL);
  backoff_problem_message(&p, BACKOFF_FIBONACCI, msg, sizeof msg);
  assert_string_equal(msg, "option 'initial_delay1' must be a finite "
                      "number >= 0");
  assert_true(s.given == 0);
  /* the alias with an option it stands for: an error naming both */
  assert_int_equal(set_number(&s, "initial_delay", 5, &p), BACKOFF_OK);
  assert_int_equal(set_number(&s, "initial_delay2", 2, &p), BACKOFF_OK);
  assert_int_equal(backoff_setup_finish(&s, &p), BACKOFF_EINVAL);
  backoff_problem_message(&p, BACKOFF_FIBONACCI, msg, sizeof msg);
  assert_string_equal(msg, "options 'initial_delay' and 'initial_delay2' "
                      "cannot be given together");
  /* the alias alone sets both */
  backoff_setup_init(&s, BACKOFF_FIBONACCI);
  assert_int_equal(set_number(&s, "initial_delay", 3, &p), BACKOFF_OK);
  assert_int_equal(backoff_setup_finish(&s, &p), BACKOFF_OK);
  assert_true(s.config.p.fibonacci.initial_delay1 == 3);
  assert_true(s.config.p.fibonacci.initial_delay2 == 3);
  assert_int_equal(backoff_init(&b, &s.config, 0, 1, NULL), BACKOFF_OK);
  assert_true(on_failure(&b, 0) == 3);
  /* a required option missing */
  backoff_setup_init(&s, BACKOFF_LIMD);
  assert_int_equal(set_number(&s, "initial_delay", 1, &p), BACKOFF_OK);
  assert_int_equal(backoff_setup_finish(&s, &p), BACKOFF_EINVAL);
  backoff_problem_message(&p, BACKOFF_LIMD, msg, sizeof msg);
  assert_string_equal(msg, "missing required option "
                      "'delay_increment_on_failure'");
}

/* a first delay above the cap: an error through the C API too, naming
   what was given, with both values */
static void test_first_delay_above_cap(void **state) {
  backoff_setup s;
  backoff_problem p;
  char msg[200];
  (void)state;
  backoff_setup_init(&s, BACKOFF_EXPONENTIAL);
  assert_int_equal(set_number(&s, "initial_delay", 100, &p), BACKOFF_OK);
  assert_int_equal(set_number(&s, "max_delay", 10, &p), BACKOFF_OK);
  assert_int_equal(backoff_setup_finish(&s, &p), BACKOFF_EINVAL);
  assert_int_equal(s.checked, 0);
  backoff_problem_message(&p, BACKOFF_EXPONENTIAL, msg, sizeof msg);
  assert_string_equal(msg, "option 'initial_delay' must be <= max_delay "
                      "(got 100 > 10)");
  assert_int_equal(backoff_problem_quotes(&p), 0);
  /* equal is fine */
  assert_int_equal(set_number(&s, "max_delay", 100, &p), BACKOFF_OK);
  assert_int_equal(backoff_setup_finish(&s, &p), BACKOFF_OK);
  /* the cap alone, below a default first delay: the cap is named */
  backoff_setup_init(&s, BACKOFF_GOOGLE);
  assert_int_equal(set_number(&s, "max_interval", 0.25, &p), BACKOFF_OK);
  assert_int_equal(backoff_setup_finish(&s, &p), BACKOFF_EINVAL);
  backoff_problem_message(&p, BACKOFF_GOOGLE, msg, sizeof msg);
  assert_string_equal(msg, "option 'max_interval' must be >= "
                      "initial_interval (got 0.25 < 0.5)");
  /* constant keeps Perl's delay above max_delay */
  backoff_setup_init(&s, BACKOFF_CONSTANT);
  assert_int_equal(set_number(&s, "delay", 3, &p), BACKOFF_OK);
  assert_int_equal(set_number(&s, "max_delay", 2, &p), BACKOFF_OK);
  assert_int_equal(backoff_setup_finish(&s, &p), BACKOFF_OK);
}

/* one random option of strategy s (mostly a row s accepts), with a
   random value (mostly a valid number); x is the generator */
static void set_random(backoff_setup *su, int s, int rows, uint64_t *x) {
  static const double numbers[] = { -1, 0, 0.25, 0.5, 1, 1.5, 2, 3, 10,
                                    1e308, -0.0, NAN, INFINITY };
  static const char *const names[] = { "none", "full", "equal",
                                       "proportional", "bogus", "half",
                                       "scattered", "decorrelated",
                                       "linear", "exponential",
                                       "fibonacci", "no_waiting",
                                       "immediately_failing", "constant" };
  backoff_value v;
  backoff_problem p;
  int row, pick;
  *x = *x * 6364136223846793005u + 1442695040888963407u;
  row = (int)((*x >> 40) % (uint64_t)rows);
  if ((*x >> 20) % 4 != 0)        /* 3 in 4: a row this strategy takes */
    while (!((backoff_options[row].accepted >> s) & 1u))
      row = (row + 1) % rows;
  pick = (int)((*x >> 33) % 18);
  memset(&v, 0, sizeof v);
  if (pick < 13) {
    v = number_value(numbers[pick]);
  } else if (pick < 15) {
    v.type = BACKOFF_V_BOOL;
    v.boolean = pick == 14;
  } else {
    v.type = BACKOFF_V_STRING;
    v.string = names[(*x >> 50) % (sizeof names / sizeof *names)];
    v.len = strlen(v.string);
  }
  backoff_setup_set(su, row, &v, &p);
}

/* backoff_setup_finish does not re-check the configuration: whatever
   it accepts must pass backoff_config_check.  For every strategy,
   random option sets (its required options first, most of the time;
   then any rows, any kind of value, valid or not). */
static void test_finish_implies_check(void **state) {
  uint64_t x = 12345;
  int s, trial, k, rows;
  (void)state;
  for (rows = 0; backoff_options[rows].name != NULL; rows++) continue;
  for (s = 0; s < BACKOFF_NSTRATEGIES; s++) {
    int accepted = 0;
    for (trial = 0; trial < 3000; trial++) {
      backoff_setup su;
      backoff_problem p;
      backoff_t b;
      backoff_value one = number_value(1);
      int n, with_required;
      x = x * 6364136223846793005u + 1442695040888963407u;
      n = (int)((x >> 33) % 7);
      with_required = (x >> 13) % 10 != 0;    /* 9 in 10 */
      assert_int_equal(backoff_setup_init(&su, s), BACKOFF_OK);
      for (k = 0; k < rows && with_required; k++)
        if ((backoff_options[k].required >> s) & 1u)
          backoff_setup_set(&su, k, &one, &p);
      if (with_required && s == BACKOFF_EVENTSAUCE) {  /* by its class */
        backoff_setup_set(&su, backoff_option_find(s, "initial_delay", 13),
                          &one, &p);
        backoff_setup_set(&su, backoff_option_find(s, "max_tries", 9), &one,
                          &p);
      }
      for (k = 0; k < n; k++) set_random(&su, s, rows, &x);
      if (backoff_setup_finish(&su, &p) != BACKOFF_OK) continue;
      accepted++;
      assert_int_equal(backoff_config_check(&su.config, NULL), BACKOFF_OK);
      assert_int_equal(backoff_init_setup(&b, &su, 0, NULL), BACKOFF_OK);
      su.checked = 0;             /* the checking path agrees */
      assert_int_equal(backoff_init_setup(&b, &su, 0, NULL), BACKOFF_OK);
    }
    assert_true(accepted > 300);  /* every strategy reached the check */
  }
}

/* ---- the server's hint ---- */

static void test_hint(void **state) {
  backoff_config c = config_of(BACKOFF_EXPONENTIAL, 1, 2, 0);
  backoff_t b, before;
  backoff_result r;
  (void)state;
  c.has_max_delay = 1;
  c.max_delay = 4;
  c.has_max_hint = 1;
  c.max_hint = 30;
  c.max_actual_duration = 100;
  b = make_at(&c, 0);
  /* max(hint, strategy), not cut by max_delay; memory not fed */
  assert_int_equal(backoff_failure_hint(&b, 0, 10, &r), BACKOFF_OK);
  assert_true(r.delay == 10 && r.own == 1);
  assert_true(backoff_delay(&b) == 10);
  assert_true(on_failure(&b, 0) == 2);
  assert_int_equal(backoff_failure_hint(&b, 0, 0.5, &r), BACKOFF_OK);
  assert_true(r.delay == 4);          /* the strategy asks for longer */
  /* too long: gives up, counts no attempt */
  assert_int_equal(backoff_failure_hint(&b, 0, 31, &r), BACKOFF_OK);
  assert_int_equal(r.give_up, BACKOFF_RETRY_AFTER);
  assert_true(backoff_attempts(&b) == 3);
  /* ends at the deadline: gives up, but not for good */
  assert_int_equal(backoff_failure_hint(&b, 80, 20, &r), BACKOFF_OK);
  assert_int_equal(r.give_up, BACKOFF_MAX_DURATION);
  assert_true(on_failure(&b, 80) == 4);
  /* bad hints change nothing */
  before = b;
  assert_int_equal(backoff_failure_hint(&b, 80, -1, &r), BACKOFF_EINVAL);
  assert_int_equal(backoff_failure_hint(&b, 80, NAN, &r), BACKOFF_EINVAL);
  assert_int_equal(backoff_failure_hint(&b, 80, INFINITY, &r),
                   BACKOFF_EINVAL);
  assert_memory_equal(&b, &before, sizeof b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_constant),
    cmocka_unit_test(test_linear),
    cmocka_unit_test(test_exponential),
    cmocka_unit_test(test_fibonacci),
    cmocka_unit_test(test_limd_synopsis),
    cmocka_unit_test(test_mimd),
    cmocka_unit_test(test_decorrelated_bounds),
    cmocka_unit_test(test_min_wins_over_max),
    cmocka_unit_test(test_max_attempts),
    cmocka_unit_test(test_max_duration_sticks),
    cmocka_unit_test(test_overflow_saturates),
    cmocka_unit_test(test_base2_matches_pow),
    cmocka_unit_test(test_attempts_saturate),
    cmocka_unit_test(test_bad_config_rejected),
    cmocka_unit_test(test_bad_timestamp_changes_nothing),
    cmocka_unit_test(test_decreasing_timestamp),
    cmocka_unit_test(test_retry_timeouts_scenario),
    cmocka_unit_test(test_rng_reference_values),
    cmocka_unit_test(test_names),
    cmocka_unit_test(test_options_by_name),
    cmocka_unit_test(test_first_delay_above_cap),
    cmocka_unit_test(test_finish_implies_check),
    cmocka_unit_test(test_hint),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
