/*
** test_budget.c -- unit tests of the retry budget core alone (no Lua),
** with cmocka.  Built with ASan and UBSan by `make ctest-budget`.
*/

#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "backoff_budget.h"

#define MAX BACKOFF_BUDGET_MAX

static backoff_budget make(uint64_t capacity, uint64_t cost,
                           uint64_t refund) {
  backoff_budget b;
  assert_int_equal(backoff_budget_init(&b, capacity, cost, refund),
                   BACKOFF_BUDGET_OK);
  return b;
}

static int same(const backoff_budget *a, const backoff_budget *b) {
  return a->capacity == b->capacity && a->cost == b->cost &&
         a->refund == b->refund && a->tokens == b->tokens;
}

static void test_starts_full(void **state) {
  backoff_budget b = make(500, 5, 1);
  (void)state;
  assert_true(backoff_budget_tokens(&b) == 500);
  assert_true(b.capacity == 500 && b.cost == 5 && b.refund == 1);
}

static void test_withdraw_until_short(void **state) {
  backoff_budget b = make(12, 5, 1);
  (void)state;
  assert_int_equal(backoff_budget_withdraw(&b, 5), 1);
  assert_true(b.tokens == 7);
  assert_int_equal(backoff_budget_withdraw(&b, 5), 1);
  assert_true(b.tokens == 2);
  /* short: refused, nothing taken */
  assert_int_equal(backoff_budget_withdraw(&b, 5), 0);
  assert_true(b.tokens == 2);
  assert_int_equal(backoff_budget_withdraw(&b, 2), 1);
  assert_true(b.tokens == 0);
  assert_int_equal(backoff_budget_withdraw(&b, 1), 0);
  assert_int_equal(backoff_budget_withdraw(&b, 0), 1);   /* free */
  assert_true(b.tokens == 0);
}

static void test_deposit_caps(void **state) {
  backoff_budget b = make(10, 5, 1);
  (void)state;
  assert_int_equal(backoff_budget_withdraw(&b, 10), 1);
  assert_int_equal(backoff_budget_deposit(&b, 1), BACKOFF_BUDGET_OK);
  assert_true(b.tokens == 1);
  assert_int_equal(backoff_budget_deposit(&b, 8), BACKOFF_BUDGET_OK);
  assert_true(b.tokens == 9);
  assert_int_equal(backoff_budget_deposit(&b, 5), BACKOFF_BUDGET_OK);
  assert_true(b.tokens == 10);
  assert_int_equal(backoff_budget_deposit(&b, MAX), BACKOFF_BUDGET_OK);
  assert_true(b.tokens == 10);
  assert_int_equal(backoff_budget_deposit(&b, 0), BACKOFF_BUDGET_OK);
  assert_true(b.tokens == 10);
}

static void test_extremes(void **state) {
  backoff_budget b = make(MAX, MAX, MAX);
  backoff_budget z = make(0, 0, 0);
  backoff_budget c = make(3, 5, 1);
  (void)state;
  assert_int_equal(backoff_budget_withdraw(&b, MAX), 1);
  assert_true(b.tokens == 0);
  assert_int_equal(backoff_budget_deposit(&b, MAX), BACKOFF_BUDGET_OK);
  assert_true(b.tokens == MAX);
  assert_int_equal(backoff_budget_deposit(&b, MAX), BACKOFF_BUDGET_OK);
  assert_true(b.tokens == MAX);                   /* no overflow */
  assert_int_equal(backoff_budget_withdraw(&z, 1), 0);
  assert_int_equal(backoff_budget_deposit(&z, 7), BACKOFF_BUDGET_OK);
  assert_true(z.tokens == 0);
  /* cost above capacity: never allows the default withdrawal */
  assert_int_equal(backoff_budget_withdraw(&c, c.cost), 0);
  assert_true(c.tokens == 3);
}

static void test_bad_input_changes_nothing(void **state) {
  backoff_budget b = make(10, 5, 1), before;
  (void)state;
  assert_int_equal(backoff_budget_withdraw(&b, 3), 1);
  before = b;
  assert_int_equal(backoff_budget_withdraw(&b, MAX + 1),
                   BACKOFF_BUDGET_ERANGE);
  assert_true(same(&b, &before));
  assert_int_equal(backoff_budget_withdraw(&b, UINT64_MAX),
                   BACKOFF_BUDGET_ERANGE);
  assert_int_equal(backoff_budget_deposit(&b, MAX + 1),
                   BACKOFF_BUDGET_ERANGE);
  assert_int_equal(backoff_budget_deposit(&b, UINT64_MAX),
                   BACKOFF_BUDGET_ERANGE);
  assert_true(same(&b, &before));
  assert_int_equal(backoff_budget_init(&b, MAX + 1, 1, 1),
                   BACKOFF_BUDGET_ERANGE);
  assert_int_equal(backoff_budget_init(&b, 1, MAX + 1, 1),
                   BACKOFF_BUDGET_ERANGE);
  assert_int_equal(backoff_budget_init(&b, 1, 1, UINT64_MAX),
                   BACKOFF_BUDGET_ERANGE);
  assert_true(same(&b, &before));
}

static void test_count_from_double(void **state) {
  uint64_t v = 42;
  (void)state;
  assert_int_equal(backoff_budget_count(0, &v), BACKOFF_BUDGET_OK);
  assert_true(v == 0);
  assert_int_equal(backoff_budget_count(500, &v), BACKOFF_BUDGET_OK);
  assert_true(v == 500);
  assert_int_equal(backoff_budget_count(9007199254740992.0, &v),
                   BACKOFF_BUDGET_OK);
  assert_true(v == MAX);
  v = 42;
  assert_int_equal(backoff_budget_count(-1, &v), BACKOFF_BUDGET_ERANGE);
  assert_int_equal(backoff_budget_count(2.5, &v), BACKOFF_BUDGET_ERANGE);
  assert_int_equal(backoff_budget_count(0.5, &v), BACKOFF_BUDGET_ERANGE);
  assert_int_equal(backoff_budget_count(18014398509481984.0, &v),
                   BACKOFF_BUDGET_ERANGE);
  assert_int_equal(backoff_budget_count(1e300, &v), BACKOFF_BUDGET_ERANGE);
  assert_int_equal(backoff_budget_count(HUGE_VAL, &v), BACKOFF_BUDGET_ERANGE);
  assert_int_equal(backoff_budget_count(-HUGE_VAL, &v),
                   BACKOFF_BUDGET_ERANGE);
  assert_int_equal(backoff_budget_count(nan(""), &v), BACKOFF_BUDGET_ERANGE);
  assert_int_equal(backoff_budget_count(-0.0, &v), BACKOFF_BUDGET_OK);
  assert_true(v == 0);
}

/* a long random walk keeps 0 <= tokens <= capacity and matches a model */
static void test_random_walk(void **state) {
  backoff_budget b = make(1000, 7, 3);
  uint64_t x = 88172645463325252u, model = 1000, n;
  int i, r;
  (void)state;
  for (i = 0; i < 100000; i++) {
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;   /* xorshift64 */
    n = (x >> 8) % 40;
    if (x & 1) {
      r = backoff_budget_withdraw(&b, n);
      assert_int_equal(r, model >= n);
      if (r) model -= n;
    } else {
      assert_int_equal(backoff_budget_deposit(&b, n), BACKOFF_BUDGET_OK);
      model = model + n > 1000 ? 1000 : model + n;
    }
    assert_true(b.tokens == model && b.tokens <= b.capacity);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_starts_full),
    cmocka_unit_test(test_withdraw_until_short),
    cmocka_unit_test(test_deposit_caps),
    cmocka_unit_test(test_extremes),
    cmocka_unit_test(test_bad_input_changes_nothing),
    cmocka_unit_test(test_count_from_double),
    cmocka_unit_test(test_random_walk),
  };
  return cmocka_run_group_tests_name("backoff budget core", tests, NULL,
                                     NULL);
}
