/*
** lbackoff.c -- the Lua binding of the backoff core: module "backoff.core".
**
** Each backoff object is a full userdata holding one backoff_t (no
** heap, so nothing can leak when Lua longjmps).  The rarely used
** options that are Lua values (a clock function, the start option) live
** in a weak-keyed registry table, so plain objects stay small.
** The public module "backoff" (lua/backoff.lua) wraps this one and adds
** the parts that must be Lua so that they can yield (retry).
*/

#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE   /* MADV_WIPEONFORK */

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "lua.h"
#include "lauxlib.h"

#include "backoff.h"

/* ---- compatibility (only what this file uses) ---- */
#if !defined(LUA_VERSION_NUM) || LUA_VERSION_NUM < 501
#error "backoff needs Lua 5.1 or later"
#endif
#if LUA_VERSION_NUM == 501
#define lua_rawlen(L, i) lua_objlen(L, i)
#endif
#if LUA_VERSION_NUM < 504
#define lua_newuserdatauv(L, sz, nuv) lua_newuserdata(L, sz)
#endif

#if defined(_WIN32)
#define LBACKOFF_EXPORT __declspec(dllexport)
#elif defined(__GNUC__)
#define LBACKOFF_EXPORT __attribute__((visibility("default")))
#else
#define LBACKOFF_EXPORT
#endif

#define LBACKOFF_MT "backoff.Backoff"
#define LBACKOFF_EXTRA "backoff.extra"   /* registry: ud -> {clock,start} */
#define LBACKOFF_STATE "backoff.state"   /* registry: the lbackoff_state */
#define LBACKOFF_FFI "backoff.ffi"       /* registry: weak set of objects */

/* backoff_t.user_flags */
#define LB_SEEDED 1       /* the user gave a seed */
#define LB_EXTRA 2        /* the object has an entry in LBACKOFF_EXTRA */
#define LB_HAS_CLOCK 4
#define LB_HAS_START 8
#define LB_DRAWS 16       /* draws random numbers: see lbackoff_draws */

/* upvalues of every function of this module */
#define UV_META lua_upvalueindex(1)     /* the metatable */
#define UV_STATE lua_upvalueindex(2)    /* lbackoff_state */

/*
** Per lua_State (no C statics): a counter for fresh seeds, and a page
** the kernel zeroes in a forked child (MADV_WIPEONFORK), holding the
** current process's tag: checking for a fork costs one load, not a
** getpid() system call per operation.  wipe is NULL where the kernel
** lacks the feature; then getpid() is the check.
*/
typedef struct lbackoff_state {
  uint64_t counter;
  volatile uint32_t *wipe;
  int ffi;                  /* register new objects for the FFI path */
} lbackoff_state;

/*
** The userdata of one backoff object.  owner is the state of the module
** that built it: the self check compares it with the state upvalue
** (after checking the size), which costs no stack traffic, unlike
** reading the metatable.  Lua code cannot write the bytes of a
** userdata, so it cannot forge owner; a userdata of another library,
** even given our metatable with debug.setmetatable, fails the check.
*/
typedef struct lbackoff_object {
  backoff_t core;                 /* first: the object is its core */
  lbackoff_state *owner;
} lbackoff_object;

/* ----------------------------------------------------------------- */
/* registration with upvalues, the same on every version             */
/* ----------------------------------------------------------------- */

/* table at -(nup+1), nup upvalues on top; pops the upvalues */
static void lbackoff_setfuncs(lua_State *L, const luaL_Reg *l, int nup) {
  int i;
  for (; l->name != NULL; l++) {
    for (i = 0; i < nup; i++)
      lua_pushvalue(L, -nup);
    lua_pushcclosure(L, l->func, nup);
    lua_setfield(L, -(nup + 2), l->name);
  }
  lua_pop(L, nup);
}

/* ----------------------------------------------------------------- */
/* time, seeds, process identity                                     */
/* ----------------------------------------------------------------- */

static double lbackoff_monotonic(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int lbackoff_is_finite(double v) {
  return v == v && v <= DBL_MAX && v >= -DBL_MAX;
}

/* changes in a forked child: jitter streams must never be shared */
static uint32_t lbackoff_tag_st(lbackoff_state *st) {
  uint32_t tag;
  if (st->wipe == NULL) return (uint32_t)getpid();
  tag = *st->wipe;
  if (tag == 0) {             /* first use in this process */
    tag = (uint32_t)getpid();
    *st->wipe = tag;
  }
  return tag;
}

static void lbackoff_state_init(lbackoff_state *st) {
  void *page = MAP_FAILED;
  st->counter = 0;
  st->wipe = NULL;
  st->ffi = 0;
#if defined(MADV_WIPEONFORK) && defined(MAP_ANONYMOUS)
  page = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (page != MAP_FAILED && madvise(page, 4096, MADV_WIPEONFORK) != 0) {
    munmap(page, 4096);
    page = MAP_FAILED;
  }
#endif
  if (page != MAP_FAILED) st->wipe = (volatile uint32_t *)page;
}

/* __gc of the per-state userdata: give the page back */
static int lbackoff_state_gc(lua_State *L) {
  lbackoff_state *st = (lbackoff_state *)lua_touserdata(L, 1);
  if (st != NULL && st->wipe != NULL) {
    munmap((void *)(uintptr_t)st->wipe, 4096);
    st->wipe = NULL;
  }
  return 0;
}

/*
** A seed for an object given none: the clocks, the process, the
** object's address and a per-state counter, mixed by backoff_rng
** (splitmix64 seeding + one xoshiro step).  Includes the pid, so
** workers forked from one master draw different streams.
*/
static uint64_t lbackoff_fresh_seed(lbackoff_state *st, const void *p) {
  struct timespec m, r;
  backoff_rng rng;
  uint64_t x;
  clock_gettime(CLOCK_MONOTONIC, &m);
  clock_gettime(CLOCK_REALTIME, &r);
  x = (uint64_t)m.tv_sec * UINT64_C(1000000000) + (uint64_t)m.tv_nsec;
  x ^= ((uint64_t)r.tv_sec << 32) ^ (uint64_t)r.tv_nsec;
  x ^= (uint64_t)getpid() << 40;
  x ^= (uint64_t)(uintptr_t)p * UINT64_C(0x9e3779b97f4a7c15);
  x += ++st->counter * UINT64_C(0xbf58476d1ce4e5b9);
  backoff_rng_seed(&rng, x);
  return backoff_rng_next(&rng);
}

/* does this object ever draw random numbers? */
static int lbackoff_draws(const backoff_t *b) {
  const backoff_config *c = &b->cfg;
  return c->strategy == BACKOFF_DECORRELATED ||
         (c->jitter != BACKOFF_JITTER_NONE &&
          (c->jitter != BACKOFF_JITTER_PROPORTIONAL || c->jitter_factor > 0)) ||
         (backoff_config_timeouts_active(c) && c->timeout_jitter_factor > 0);
}

/* the state of the module that built b (see lbackoff_object) */
static lbackoff_state *lbackoff_owner(backoff_t *b) {
  return ((lbackoff_object *)(void *)b)->owner;
}

/* a new jitter stream for an unseeded object, owned by this process */
static void lbackoff_fresh_stream(backoff_t *b) {
  lbackoff_state *st = lbackoff_owner(b);
  backoff_reseed(b, lbackoff_fresh_seed(st, b));
  b->user_tag = lbackoff_tag_st(st);
}

/* an unseeded object copied into a forked child gets its own stream */
static void lbackoff_forkcheck(backoff_t *b) {
  if ((b->user_flags & (LB_SEEDED | LB_DRAWS)) != LB_DRAWS) return;
  if (b->user_tag != lbackoff_tag_st(lbackoff_owner(b)))
    lbackoff_fresh_stream(b);
}

/* what lbackoff_step does (also the low bit of lbackoff_ffi_step's op) */
#define LB_OP_FAILURE 0
#define LB_OP_SUCCESS 1

/* one failure or success at a finite ts (the core cannot fail then),
   after the fork check: the one path of both methods and the FFI */
static inline void lbackoff_step(backoff_t *b, int op, double ts,
                                 backoff_result *r) {
  lbackoff_forkcheck(b);
  if (op == LB_OP_SUCCESS)
    backoff_success(b, ts, r);
  else
    backoff_failure(b, ts, r);
}

/* ----------------------------------------------------------------- */
/* values in messages                                                */
/* ----------------------------------------------------------------- */

/* push a short description of the value at idx: -1, 'text', table */
static const char *lbackoff_repr(lua_State *L, int idx) {
  switch (lua_type(L, idx)) {
    case LUA_TNUMBER:
      if (lua_tonumber(L, idx) != lua_tonumber(L, idx))
        return lua_pushfstring(L, "nan");   /* not "-nan" on some libcs */
      lua_pushvalue(L, idx);  /* convert a copy, never the original */
      lua_tostring(L, -1);
      return lua_tostring(L, -1);
    case LUA_TSTRING:
      return lua_pushfstring(L, "'%s'", lua_tostring(L, idx));
    case LUA_TBOOLEAN:
      return lua_pushfstring(L, "%s", lua_toboolean(L, idx) ? "true" : "false");
    default:
      return lua_pushfstring(L, "%s", luaL_typename(L, idx));
  }
}

/* ----------------------------------------------------------------- */
/* self                                                              */
/* ----------------------------------------------------------------- */

/*
** luaL_argerror with the function's name given, not looked up: Lua's
** debug information has no name for pcall(b.failure, b, x), for a tail
** call, or for a call from the FFI wrapper (it would say '?' or the name
** of a local).  Same wording and numbering as luaL_argerror: a method
** call counts self as argument 0.
*/
static int lbackoff_argerror(lua_State *L, int arg, const char *fname,
                             const char *msg) {
  lua_Debug ar;
  if (lua_getstack(L, 0, &ar) && lua_getinfo(L, "n", &ar) &&
      ar.namewhat != NULL && strcmp(ar.namewhat, "method") == 0) {
    arg--;
    if (arg == 0)
      return luaL_error(L, "calling '%s' on bad self (%s)", fname, msg);
  }
  return luaL_error(L, "bad argument #%d to '%s' (%s)", arg, fname, msg);
}

/* raise the error for a wrong object at index 1 */
static void lbackoff_bad_self(lua_State *L, const char *method) {
  const char *got = lbackoff_repr(L, 1);   /* stays on the stack */
  lbackoff_argerror(L, 1, method, lua_pushfstring(L,
    LBACKOFF_MT " expected, got %s",
    lua_type(L, 1) == LUA_TUSERDATA ? "another userdata" : got));
}

/*
** The object at index 1: a userdata of our size whose owner is this
** module's state (see lbackoff_object).  Two API calls in the common
** case; the size is checked before owner is read.  inline: it is on
** the path of every method call, and the error is kept out of line.
*/
static inline backoff_t *lbackoff_self_st(lua_State *L,
                                          const lbackoff_state *st,
                                          const char *method) {
  lbackoff_object *o = (lbackoff_object *)lua_touserdata(L, 1);
  if (o == NULL || lua_rawlen(L, 1) != sizeof *o || o->owner != st)
    lbackoff_bad_self(L, method);
  return &o->core;
}

static backoff_t *lbackoff_self(lua_State *L, const char *method) {
  return lbackoff_self_st(L, (lbackoff_state *)lua_touserdata(L, UV_STATE),
                          method);
}

static const char *lbackoff_name(const backoff_t *b) {
  return backoff_strategy_name(b->cfg.strategy);
}

/* push extra[ud] (a table) for the object at index 1, or nil */
static void lbackoff_push_extra(lua_State *L, const backoff_t *b) {
  if (!(b->user_flags & LB_EXTRA)) {
    lua_pushnil(L);
    return;
  }
  lua_getfield(L, LUA_REGISTRYINDEX, LBACKOFF_EXTRA);
  lua_pushvalue(L, 1);
  lua_rawget(L, -2);      /* extra_registry, extra */
  lua_remove(L, -2);
}

/* the current time of object b (at index 1), from its clock */
static double lbackoff_now(lua_State *L, const backoff_t *b,
                           const char *method) {
  double t;
  if (!(b->user_flags & LB_HAS_CLOCK)) return lbackoff_monotonic();
  lbackoff_push_extra(L, b);
  lua_getfield(L, -1, "clock");   /* extra, clock */
  lua_call(L, 0, 1);              /* extra, t */
  t = lua_tonumber(L, -1);
  if (lua_type(L, -1) != LUA_TNUMBER || !lbackoff_is_finite(t))
    luaL_error(L, "backoff.%s:%s: clock must return a finite number (got %s)",
               lbackoff_name(b), method, lbackoff_repr(L, -1));
  lua_pop(L, 2);
  return t;
}

/* timestamp argument 2 when it is not a finite number: nil or none
   asks the object's clock, anything else is an error */
static double lbackoff_time_arg_other(lua_State *L, const backoff_t *b,
                                      const char *method) {
  if (lua_isnoneornil(L, 2)) return lbackoff_now(L, b, method);
  lbackoff_argerror(L, 2, method, lua_pushfstring(L,
    "timestamp must be a finite number (got %s)", lbackoff_repr(L, 2)));
  return 0;   /* not reached: lbackoff_argerror raises */
}

/* optional timestamp argument 2, else the object's clock */
static inline double lbackoff_time_arg(lua_State *L, const backoff_t *b,
                                       const char *method) {
  if (lua_type(L, 2) == LUA_TNUMBER) {
    double t = (double)lua_tonumber(L, 2);
    if (lbackoff_is_finite(t)) return t;
  }
  return lbackoff_time_arg_other(L, b, method);
}

/* ----------------------------------------------------------------- */
/* options                                                           */
/* ----------------------------------------------------------------- */

enum { OPT_NUMBER, OPT_COUNT, OPT_BOOL, OPT_JITTER, OPT_SEED, OPT_TIME,
       OPT_CLOCK, OPT_STRATEGY };

#define S(x) (1u << BACKOFF_##x)
#define ALL ((1u << BACKOFF_NSTRATEGIES) - 1)
#define NOT_DEC (ALL & ~S(DECORRELATED))
#define ID_STRATEGIES (S(LILD) | S(LIMD) | S(MILD) | S(MIMD))

typedef struct lbackoff_option {
  const char *name;
  unsigned char kind;       /* OPT_* */
  unsigned char field;      /* backoff_field, for OPT_NUMBER */
  unsigned short accepted;  /* strategies taking it (bit mask) */
  unsigned short required;  /* strategies needing it */
} lbackoff_option;

/* initial_delay1/2 come before initial_delay: see lbackoff_option_of */
static const lbackoff_option lbackoff_options[] = {
  {"strategy", OPT_STRATEGY, 0, ALL, 0},
  {"delay", OPT_NUMBER, BACKOFF_F_INITIAL, S(CONSTANT), S(CONSTANT)},
  {"initial_delay1", OPT_NUMBER, BACKOFF_F_INITIAL, S(FIBONACCI), 0},
  {"initial_delay2", OPT_NUMBER, BACKOFF_F_ON_FAILURE, S(FIBONACCI), 0},
  {"initial_delay", OPT_NUMBER, BACKOFF_F_INITIAL, ALL & ~S(CONSTANT),
   S(LINEAR) | S(EXPONENTIAL) | ID_STRATEGIES | S(DECORRELATED)},
  {"delay_increment", OPT_NUMBER, BACKOFF_F_ON_FAILURE, S(LINEAR), 0},
  {"exponent_base", OPT_NUMBER, BACKOFF_F_ON_FAILURE,
   S(EXPONENTIAL) | S(RETRY_TIMEOUTS), 0},
  {"delay_increment_on_failure", OPT_NUMBER, BACKOFF_F_ON_FAILURE,
   S(LILD) | S(LIMD), S(LILD) | S(LIMD)},
  {"delay_multiple_on_failure", OPT_NUMBER, BACKOFF_F_ON_FAILURE,
   S(MILD) | S(MIMD), S(MILD) | S(MIMD)},
  {"multiplier", OPT_NUMBER, BACKOFF_F_ON_FAILURE, S(DECORRELATED), 0},
  {"delay_on_success", OPT_NUMBER, BACKOFF_F_ON_SUCCESS,
   ALL & ~ID_STRATEGIES, 0},
  {"delay_increment_on_success", OPT_NUMBER, BACKOFF_F_ON_SUCCESS,
   S(LILD) | S(MILD), S(LILD) | S(MILD)},
  {"delay_multiple_on_success", OPT_NUMBER, BACKOFF_F_ON_SUCCESS,
   S(LIMD) | S(MIMD), S(LIMD) | S(MIMD)},
  {"min_delay", OPT_NUMBER, BACKOFF_F_MIN_DELAY, ALL, 0},
  {"max_delay", OPT_NUMBER, BACKOFF_F_MAX_DELAY, ALL, S(DECORRELATED)},
  {"max_attempts", OPT_COUNT, 0, ALL, 0},
  {"max_actual_duration", OPT_NUMBER, BACKOFF_F_MAX_DURATION, ALL, 0},
  {"consider_actual_delay", OPT_BOOL, 0, ALL, 0},
  {"jitter", OPT_JITTER, 0, NOT_DEC, 0},
  {"jitter_factor", OPT_NUMBER, BACKOFF_F_JITTER_FACTOR, NOT_DEC, 0},
  {"adjust_timeout_factor", OPT_NUMBER, BACKOFF_F_ADJUST_TIMEOUT_FACTOR,
   ALL, 0},
  {"min_adjust_timeout", OPT_NUMBER, BACKOFF_F_MIN_ADJUST_TIMEOUT, ALL, 0},
  {"timeout_jitter_factor", OPT_NUMBER, BACKOFF_F_TIMEOUT_JITTER_FACTOR,
   ALL, 0},
  {"seed", OPT_SEED, 0, ALL, 0},
  {"start", OPT_TIME, 0, ALL, 0},
  {"clock", OPT_CLOCK, 0, ALL, 0},
  {NULL, 0, 0, 0, 0}
};

static int lbackoff_option_index(const char *name) {
  int i;
  for (i = 0; lbackoff_options[i].name != NULL; i++)
    if (strcmp(lbackoff_options[i].name, name) == 0) return i;
  return -1;
}

static double *lbackoff_field_ptr(backoff_config *c, int field) {
  switch (field) {
    case BACKOFF_F_INITIAL: return &c->initial;
    case BACKOFF_F_ON_FAILURE: return &c->on_failure;
    case BACKOFF_F_ON_SUCCESS: return &c->on_success;
    case BACKOFF_F_MIN_DELAY: return &c->min_delay;
    case BACKOFF_F_MAX_DELAY: return &c->max_delay;
    case BACKOFF_F_JITTER_FACTOR: return &c->jitter_factor;
    case BACKOFF_F_MAX_DURATION: return &c->max_actual_duration;
    case BACKOFF_F_ADJUST_TIMEOUT_FACTOR: return &c->adjust_timeout_factor;
    case BACKOFF_F_MIN_ADJUST_TIMEOUT: return &c->min_adjust_timeout;
    default: return &c->timeout_jitter_factor;
  }
}

/* everything a constructor reads, before anything is allocated */
typedef struct lbackoff_spec {
  backoff_config cfg;
  const char *ctor;      /* "exponential": for messages */
  int strategy;
  unsigned long given;   /* bit i: option i was in the table */
  uint64_t seed;
  double start;
} lbackoff_spec;

static int lbackoff_given(const lbackoff_spec *sp, const char *name) {
  int i = lbackoff_option_index(name);
  return i >= 0 && ((sp->given >> i) & 1u);
}

/* raise "backoff.<ctor>: option 'x' must be RULE (got V)"; V at idx */
static int lbackoff_opt_error(lua_State *L, const lbackoff_spec *sp,
                              const char *name, const char *rule, int idx) {
  return luaL_error(L, "backoff.%s: option '%s' must be %s (got %s)",
                    sp->ctor, name, rule, lbackoff_repr(L, idx));
}

/* read one option value (at the top of the stack) into *sp */
static void lbackoff_read_option(lua_State *L, lbackoff_spec *sp, int i) {
  const lbackoff_option *o = &lbackoff_options[i];
  int t = lua_type(L, -1);
  double v = lua_tonumber(L, -1);
  switch (o->kind) {
    case OPT_NUMBER:
      if (t != LUA_TNUMBER || !lbackoff_is_finite(v))
        lbackoff_opt_error(L, sp, o->name,
                           backoff_field_rule(sp->strategy, o->field), -1);
      *lbackoff_field_ptr(&sp->cfg, o->field) = v;
      if (o->field == BACKOFF_F_MAX_DELAY) sp->cfg.has_max_delay = 1;
      break;
    case OPT_COUNT:
      if (t != LUA_TNUMBER || !(v >= 0) || v > DBL_MAX || v != floor(v))
        lbackoff_opt_error(L, sp, o->name, "an integer >= 0", -1);
      /* huge counts saturate: 1e300 attempts is "never give up" */
      sp->cfg.max_attempts = v >= 18446744073709551615.0
                               ? UINT64_MAX : (uint64_t)v;
      break;
    case OPT_BOOL:
      if (t != LUA_TBOOLEAN)
        lbackoff_opt_error(L, sp, o->name, "a boolean", -1);
      sp->cfg.consider_actual_delay = (unsigned char)lua_toboolean(L, -1);
      break;
    case OPT_JITTER: {
      int j = BACKOFF_NJITTERS;
      if (t == LUA_TSTRING)
        for (j = 0; j < BACKOFF_NJITTERS; j++)
          if (strcmp(lua_tostring(L, -1), backoff_jitter_name(j)) == 0)
            break;
      if (j == BACKOFF_NJITTERS)
        lbackoff_opt_error(L, sp, o->name,
                           backoff_field_rule(sp->strategy, BACKOFF_F_JITTER),
                           -1);
      sp->cfg.jitter = (unsigned char)j;
      break;
    }
    case OPT_SEED:
      /* the same integer gives the same stream on every Lua version;
         2^53 is where 5.1's doubles stop being exact integers */
#if LUA_VERSION_NUM >= 503
      if (t == LUA_TNUMBER && lua_isinteger(L, -1)) {
        sp->seed = (uint64_t)lua_tointeger(L, -1);
        break;
      }
#endif
      if (t != LUA_TNUMBER || v != floor(v) || !(v >= -9223372036854775808.0)
          || !(v < 9223372036854775808.0))
        lbackoff_opt_error(L, sp, o->name, "an integer", -1);
      sp->seed = (uint64_t)(int64_t)v;
      break;
    case OPT_TIME:
      if (t != LUA_TNUMBER || !lbackoff_is_finite(v))
        lbackoff_opt_error(L, sp, o->name, "a finite number", -1);
      sp->start = v;
      break;
    case OPT_CLOCK:
      if (t != LUA_TFUNCTION)
        lbackoff_opt_error(L, sp, o->name, "a function", -1);
      break;
    default: /* OPT_STRATEGY: allowed so that config() round-trips */
      if (t != LUA_TSTRING || strcmp(lua_tostring(L, -1), sp->ctor) != 0)
        lbackoff_opt_error(L, sp, o->name,
                           lua_pushfstring(L, "'%s'", sp->ctor), -2);
      break;
  }
}

/* the option that set field f (for messages about the core's check) */
static const char *lbackoff_option_of(const lbackoff_spec *sp, int f) {
  int i;
  for (i = 0; lbackoff_options[i].name != NULL; i++) {
    const lbackoff_option *o = &lbackoff_options[i];
    if (o->kind == OPT_NUMBER && o->field == f &&
        (o->accepted >> sp->strategy) & 1u && (sp->given >> i) & 1u)
      return o->name;
  }
  return NULL;
}

/*
** Read and check the options table at index idx into *sp.  Raises on
** any problem; allocates nothing, so a raise leaks nothing.
*/
static void lbackoff_read_spec(lua_State *L, int idx, lbackoff_spec *sp) {
  backoff_config *c = &sp->cfg;
  int i, bad;
  sp->given = 0;
  sp->seed = 0;
  sp->start = 0;
  backoff_config_init(c, sp->strategy);
  if (!lua_isnoneornil(L, idx)) {
    if (!lua_istable(L, idx))
      luaL_error(L, "backoff.%s: options must be a table (got %s)",
                 sp->ctor, luaL_typename(L, idx));
    lua_pushnil(L);
    while (lua_next(L, idx)) {   /* key, value */
      if (lua_type(L, -2) != LUA_TSTRING)
        luaL_error(L, "backoff.%s: unknown option %s", sp->ctor,
                   lbackoff_repr(L, -2));
      i = lbackoff_option_index(lua_tostring(L, -2));
      if (i < 0 || !((lbackoff_options[i].accepted >> sp->strategy) & 1u))
        luaL_error(L, "backoff.%s: unknown option '%s'", sp->ctor,
                   lua_tostring(L, -2));
      lbackoff_read_option(L, sp, i);
      sp->given |= 1ul << i;
      lua_pop(L, 1);
    }
  }
  /* required options (fibonacci: initial_delay stands for both) */
  for (i = 0; lbackoff_options[i].name != NULL; i++)
    if ((lbackoff_options[i].required >> sp->strategy) & 1u &&
        !((sp->given >> i) & 1u))
      luaL_error(L, "backoff.%s: missing required option '%s'", sp->ctor,
                 lbackoff_options[i].name);
  if (sp->strategy == BACKOFF_FIBONACCI) {
    int alias = lbackoff_given(sp, "initial_delay");
    const char *missing =
      !lbackoff_given(sp, "initial_delay1") ? "initial_delay1"
      : !lbackoff_given(sp, "initial_delay2") ? "initial_delay2" : NULL;
    if (missing != NULL && !alias)
      luaL_error(L, "backoff.%s: missing required option '%s'", sp->ctor,
                 missing);
    if (alias) {
      lua_getfield(L, idx, "initial_delay");
      if (!lbackoff_given(sp, "initial_delay1"))
        c->initial = lua_tonumber(L, -1);
      if (!lbackoff_given(sp, "initial_delay2"))
        c->on_failure = lua_tonumber(L, -1);
      lua_pop(L, 1);
    }
  }
  /* linear: the increment defaults to the initial delay */
  if (sp->strategy == BACKOFF_LINEAR && !lbackoff_given(sp, "delay_increment"))
    c->on_failure = c->initial;
  /* jitter: "proportional" when a factor is given, else "none"; a
     factor with another kind is a mistake worth reporting */
  if (!lbackoff_given(sp, "jitter")) {
    if (sp->strategy != BACKOFF_DECORRELATED)
      c->jitter = c->jitter_factor > 0 ? BACKOFF_JITTER_PROPORTIONAL
                                       : BACKOFF_JITTER_NONE;
  } else if (c->jitter != BACKOFF_JITTER_PROPORTIONAL) {
    if (lbackoff_given(sp, "jitter_factor") && c->jitter_factor != 0) {
      lua_getfield(L, idx, "jitter_factor");
      lbackoff_opt_error(L, sp, "jitter_factor",
                         lua_pushfstring(L, "0 with jitter '%s'",
                                         backoff_jitter_name(c->jitter)), -2);
    }
    c->jitter_factor = 0;
  }
  /* per-attempt timeouts: retry_timeouts, or adjust_timeout_factor */
  if (sp->strategy != BACKOFF_RETRY_TIMEOUTS) {
    c->timeouts = (unsigned char)lbackoff_given(sp, "adjust_timeout_factor");
    if (!c->timeouts) {
      const char *alone = lbackoff_given(sp, "min_adjust_timeout")
                            ? "min_adjust_timeout"
                        : lbackoff_given(sp, "timeout_jitter_factor")
                            ? "timeout_jitter_factor" : NULL;
      if (alone != NULL)
        luaL_error(L, "backoff.%s: option '%s' needs option "
                   "'adjust_timeout_factor' (per-attempt timeouts are off)",
                   sp->ctor, alone);
    }
  }
  /* ranges, by the core's own check */
  if (backoff_config_check(c, &bad) != BACKOFF_OK) {
    const char *name = lbackoff_option_of(sp, bad);
    if (name == NULL)
      luaL_error(L, "backoff.%s: invalid configuration (%s)", sp->ctor,
                 backoff_field_rule(sp->strategy, bad));
    lua_getfield(L, idx, name);
    lbackoff_opt_error(L, sp, name, backoff_field_rule(sp->strategy, bad), -1);
  }
}

/* ----------------------------------------------------------------- */
/* construction                                                      */
/* ----------------------------------------------------------------- */

/* a new weak-keyed table, stored in the registry as name, left on top */
static void lbackoff_new_weak_set(lua_State *L, const char *name) {
  lua_newtable(L);
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "k");
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
  lua_pushvalue(L, -1);
  lua_setfield(L, LUA_REGISTRYINDEX, name);
}

/* registry[name][object on top] = the value at index vi */
static void lbackoff_weak_put(lua_State *L, const char *name, int vi) {
  if (vi < 0) vi = lua_gettop(L) + 1 + vi;    /* absolute */
  lua_getfield(L, LUA_REGISTRYINDEX, name);   /* ud, set */
  lua_pushvalue(L, -2);
  lua_pushvalue(L, vi);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

/* a new userdata with our metatable, on top of the stack */
static backoff_t *lbackoff_newud(lua_State *L) {
  lbackoff_object *o =
    (lbackoff_object *)lua_newuserdatauv(L, sizeof *o, 0);
  o->owner = (lbackoff_state *)lua_touserdata(L, UV_STATE);
  lua_pushvalue(L, UV_META);
  lua_setmetatable(L, -2);
  if (o->owner->ffi) {          /* the set the FFI path trusts: see below */
    lua_pushboolean(L, 1);
    lua_pushvalue(L, -2);       /* ud, true, ud */
    lbackoff_weak_put(L, LBACKOFF_FFI, -2);
    lua_pop(L, 2);
  }
  return &o->core;
}

static int lbackoff_construct(lua_State *L, int strategy, int idx) {
  lbackoff_spec sp;
  backoff_t *b;
  int top;
  sp.strategy = strategy;
  sp.ctor = backoff_strategy_name(strategy);
  lbackoff_read_spec(L, idx, &sp);
  top = lua_gettop(L);
  if (lbackoff_given(&sp, "clock") || lbackoff_given(&sp, "start")) {
    lua_createtable(L, 0, 2);            /* extra */
    lua_getfield(L, idx, "clock");
    lua_setfield(L, -2, "clock");
    lua_getfield(L, idx, "start");
    lua_setfield(L, -2, "start");
  }
  /* the start time: the option, else the clock's now (the clock may
     raise or misbehave: nothing is allocated yet) */
  if (!lbackoff_given(&sp, "start")) {
    if (lbackoff_given(&sp, "clock")) {
      lua_getfield(L, idx, "clock");
      lua_call(L, 0, 1);
      sp.start = lua_tonumber(L, -1);
      if (lua_type(L, -1) != LUA_TNUMBER || !lbackoff_is_finite(sp.start))
        luaL_error(L, "backoff.%s: option 'clock' must return a finite "
                   "number (got %s)", sp.ctor, lbackoff_repr(L, -1));
      lua_pop(L, 1);
    } else {
      sp.start = lbackoff_monotonic();
    }
  }
  b = lbackoff_newud(L);
  if (!lbackoff_given(&sp, "seed"))
    sp.seed = lbackoff_fresh_seed(lbackoff_owner(b), b);
  backoff_init(b, &sp.cfg, sp.start, sp.seed, NULL);  /* checked above */
  b->user_flags = (unsigned char)
    ((lbackoff_given(&sp, "seed") ? LB_SEEDED : 0) |
     (lbackoff_given(&sp, "clock") ? LB_EXTRA | LB_HAS_CLOCK : 0) |
     (lbackoff_given(&sp, "start") ? LB_EXTRA | LB_HAS_START : 0));
  if (lbackoff_draws(b)) b->user_flags |= LB_DRAWS;
  b->user_tag = lbackoff_tag_st(lbackoff_owner(b));
  if (b->user_flags & LB_EXTRA) lbackoff_weak_put(L, LBACKOFF_EXTRA, top);
  return 1;
}

/* backoff.<strategy>(opts): the strategy is upvalue 3 */
static int lbackoff_strategy_ctor(lua_State *L) {
  return lbackoff_construct(L, (int)lua_tointeger(L, lua_upvalueindex(3)), 1);
}

/* backoff.new(strategy, opts) */
static int lbackoff_new(lua_State *L) {
  const char *name = lua_tostring(L, 1);
  int s;
  if (lua_type(L, 1) == LUA_TSTRING)
    for (s = 0; s < BACKOFF_NSTRATEGIES; s++)
      if (strcmp(name, backoff_strategy_name(s)) == 0)
        return lbackoff_construct(L, s, 2);
  return luaL_error(L, "backoff.new: unknown strategy %s",
                    lbackoff_repr(L, 1));
}

/* ----------------------------------------------------------------- */
/* methods                                                           */
/* ----------------------------------------------------------------- */

/* delay [, timeout] or nil, reason */
static inline int lbackoff_push_result(lua_State *L,
                                       const backoff_result *r) {
  if (r->give_up != BACKOFF_CONTINUE) {
    lua_pushnil(L);
    lua_pushstring(L, backoff_give_up_name(r->give_up));
    return 2;
  }
  lua_pushnumber(L, (lua_Number)r->delay);
  if (!r->has_timeout) return 1;
  lua_pushnumber(L, (lua_Number)r->timeout);
  return 2;
}

/* b:failure([ts]) and b:success([ts]) */
static inline int lbackoff_operate(lua_State *L, int op, const char *method) {
  lbackoff_state *st = (lbackoff_state *)lua_touserdata(L, UV_STATE);
  backoff_t *b = lbackoff_self_st(L, st, method);
  double ts = lbackoff_time_arg(L, b, method);
  backoff_result r;
  lbackoff_step(b, op, ts, &r);
  return lbackoff_push_result(L, &r);
}

static int lbackoff_failure(lua_State *L) {
  return lbackoff_operate(L, LB_OP_FAILURE, "failure");
}

static int lbackoff_success(lua_State *L) {
  return lbackoff_operate(L, LB_OP_SUCCESS, "success");
}

static int lbackoff_timeout(lua_State *L) {
  double t;
  if (backoff_timeout(lbackoff_self(L, "timeout"), &t))
    lua_pushnumber(L, (lua_Number)t);
  else
    lua_pushnil(L);
  return 1;
}

static int lbackoff_delay(lua_State *L) {
  lua_pushnumber(L, (lua_Number)backoff_delay(lbackoff_self(L, "delay")));
  return 1;
}

static void lbackoff_push_count(lua_State *L, uint64_t n) {
  if (n <= UINT64_C(9007199254740992))  /* exact in every Lua's number */
    lua_pushinteger(L, (lua_Integer)n);
  else
    lua_pushnumber(L, (lua_Number)n);
}

static int lbackoff_attempts(lua_State *L) {
  lbackoff_push_count(L, backoff_attempts(lbackoff_self(L, "attempts")));
  return 1;
}

static int lbackoff_elapsed(lua_State *L) {
  backoff_t *b = lbackoff_self(L, "elapsed");
  double e = lbackoff_time_arg(L, b, "elapsed") - backoff_start(b);
  /* before the start counts as no time; never inf */
  lua_pushnumber(L, (lua_Number)(e > 0 ? (e > DBL_MAX ? DBL_MAX : e) : 0.0));
  return 1;
}

static int lbackoff_reset(lua_State *L) {
  backoff_t *b = lbackoff_self(L, "reset");
  double start = lbackoff_time_arg(L, b, "reset");
  if (!(b->user_flags & LB_SEEDED)) lbackoff_fresh_stream(b);
  backoff_reset(b, start);            /* restarts the stream of b->seed */
  lua_settop(L, 1);
  return 1;
}

static int lbackoff_clone(lua_State *L) {
  backoff_t *b = lbackoff_self(L, "clone"), *c;
  double start;
  int extra;
  if (b->user_flags & LB_HAS_START) {
    lbackoff_push_extra(L, b);
    lua_getfield(L, -1, "start");
    start = lua_tonumber(L, -1);
    lua_pop(L, 2);
  } else {
    start = lbackoff_now(L, b, "clone");
  }
  lbackoff_push_extra(L, b);        /* extra (or nil) */
  extra = lua_gettop(L);
  c = lbackoff_newud(L);            /* extra, clone */
  memcpy(c, b, sizeof *c);
  if (!(c->user_flags & LB_SEEDED)) lbackoff_fresh_stream(c);
  backoff_reset(c, start);          /* restarts the stream of c->seed */
  if (c->user_flags & LB_EXTRA) lbackoff_weak_put(L, LBACKOFF_EXTRA, extra);
  return 1;
}

static void lbackoff_set_number(lua_State *L, const char *k, double v) {
  lua_pushnumber(L, (lua_Number)v);
  lua_setfield(L, -2, k);
}

/* a new table of every effective option: new(t.strategy, t) rebuilds */
static int lbackoff_config(lua_State *L) {
  backoff_t *b = lbackoff_self(L, "config");
  const backoff_config *c = &b->cfg;
  backoff_config tmp = *c;
  int s = c->strategy, i;
  lua_createtable(L, 0, 16);
  lua_pushstring(L, lbackoff_name(b));
  lua_setfield(L, -2, "strategy");
  for (i = 0; lbackoff_options[i].name != NULL; i++) {
    const lbackoff_option *o = &lbackoff_options[i];
    if (!((o->accepted >> s) & 1u)) continue;
    switch (o->kind) {
      case OPT_NUMBER:
        if (s == BACKOFF_FIBONACCI && o->field == BACKOFF_F_INITIAL &&
            strcmp(o->name, "initial_delay") == 0)
          continue;   /* the alias: initial_delay1/2 say it all */
        if (o->field == BACKOFF_F_MAX_DELAY && !c->has_max_delay) continue;
        if ((o->field == BACKOFF_F_ADJUST_TIMEOUT_FACTOR ||
             o->field == BACKOFF_F_MIN_ADJUST_TIMEOUT ||
             o->field == BACKOFF_F_TIMEOUT_JITTER_FACTOR) && !c->timeouts)
          continue;
        lbackoff_set_number(L, o->name, *lbackoff_field_ptr(&tmp, o->field));
        break;
      case OPT_COUNT:
        lbackoff_push_count(L, c->max_attempts);
        lua_setfield(L, -2, o->name);
        break;
      case OPT_BOOL:
        lua_pushboolean(L, c->consider_actual_delay);
        lua_setfield(L, -2, o->name);
        break;
      case OPT_JITTER:
        lua_pushstring(L, backoff_jitter_name(c->jitter));
        lua_setfield(L, -2, o->name);
        break;
      case OPT_SEED:
        if (b->user_flags & LB_SEEDED) {
#if LUA_VERSION_NUM >= 503
          lua_pushinteger(L, (lua_Integer)b->seed);
#else
          lua_pushnumber(L, (lua_Number)(int64_t)b->seed);
#endif
          lua_setfield(L, -2, o->name);
        }
        break;
      default:
        break;
    }
  }
  if (b->user_flags & LB_EXTRA) {     /* clock and start, when given */
    lbackoff_push_extra(L, b);        /* config, extra */
    lua_getfield(L, -1, "clock");
    lua_setfield(L, -3, "clock");
    lua_getfield(L, -1, "start");
    lua_setfield(L, -3, "start");
    lua_pop(L, 1);
  }
  return 1;
}

static int lbackoff_tostring(lua_State *L) {
  backoff_t *b = lbackoff_self(L, "__tostring");
  lua_pushfstring(L, "backoff.%s: %p", lbackoff_name(b), (void *)b);
  return 1;
}

/* __gc and __close: the object owns no resource (its clock and start
   sit in a weak table), so there is nothing to release; checking self
   keeps a stray call through getmetatable harmless. */
static int lbackoff_gc(lua_State *L) {
  lbackoff_self(L, "__gc");
  return 0;
}

static int lbackoff_close(lua_State *L) {
  lbackoff_self(L, "__close");
  return 0;
}

/* ----------------------------------------------------------------- */
/* the LuaJIT FFI fast path                                          */
/* ----------------------------------------------------------------- */

/*
** Under LuaJIT, lua/backoff.lua calls lbackoff_ffi_step through the FFI
** for b:failure() and b:success(): the JIT compiles that into a direct
** call, where a Lua C function stops the trace.  The FFI cannot check
** what it passes, so Lua passes only objects found in the weak set
** _ffi_objects() returns, which this module fills as it builds objects.
** It hands the set out once per lua_State, to lua/backoff.lua, which
** keeps it in a local: no other Lua code can add a foreign value to it
** (short of the debug library).  Whatever the step does not handle it
** leaves untouched and answers LB_FFI_SLOW: the method proper then runs
** and raises the error or calls the Lua clock.
*/
#define LB_FFI_SLOW (-1)
#define LB_FFI_DELAY 0            /* out[0] */
#define LB_FFI_DELAY_TIMEOUT 1    /* out[0], out[1] */
#define LB_FFI_GIVE_UP 2          /* + the backoff_give_up reason */

#define LB_FFI_NOW 2              /* op: LB_OP_* | this: no timestamp */

LBACKOFF_EXPORT int lbackoff_ffi_step(void *ud, int op, double ts,
                                      double *out);
LBACKOFF_EXPORT const void *lbackoff_ffi_token(void);

LBACKOFF_EXPORT int lbackoff_ffi_step(void *ud, int op, double ts,
                                      double *out) {
  backoff_t *b = &((lbackoff_object *)ud)->core;
  backoff_result r;
  if (op & LB_FFI_NOW) {
    if (b->user_flags & LB_HAS_CLOCK) return LB_FFI_SLOW;
    ts = lbackoff_monotonic();
  } else if (!lbackoff_is_finite(ts)) {
    return LB_FFI_SLOW;
  }
  lbackoff_step(b, op & LB_OP_SUCCESS, ts, &r);
  if (r.give_up != BACKOFF_CONTINUE) return LB_FFI_GIVE_UP + r.give_up;
  out[0] = r.delay;
  if (!r.has_timeout) return LB_FFI_DELAY;
  out[1] = r.timeout;
  return LB_FFI_DELAY_TIMEOUT;
}

/* lets Lua check that the library the FFI loaded is this very one */
static const char lbackoff_ffi_token_byte = 0;

LBACKOFF_EXPORT const void *lbackoff_ffi_token(void) {
  return &lbackoff_ffi_token_byte;
}

/* _ffi_objects(): the first call per lua_State returns a new weak set
   that every object built from now on goes into, and the give-up
   reasons by step result; later calls return nothing */
static int lbackoff_ffi_objects(lua_State *L) {
  lbackoff_state *st = (lbackoff_state *)lua_touserdata(L, UV_STATE);
  int g;
  if (st->ffi) return 0;
  lbackoff_new_weak_set(L, LBACKOFF_FFI);
  lua_newtable(L);
  for (g = 1; backoff_give_up_name(g) != NULL; g++) {
    lua_pushstring(L, backoff_give_up_name(g));
    lua_rawseti(L, -2, LB_FFI_GIVE_UP + g);
  }
  st->ffi = 1;
  return 2;
}

/* ----------------------------------------------------------------- */
/* module functions                                                  */
/* ----------------------------------------------------------------- */

static int lbackoff_monotonic_now(lua_State *L) {
  lua_pushnumber(L, (lua_Number)lbackoff_monotonic());
  return 1;
}

/* blocking sleep for plain Lua: nanosleep, restarted on EINTR */
static int lbackoff_sleep(lua_State *L) {
  double s = lua_tonumber(L, 1);
  struct timespec req, rem;
  if (lua_type(L, 1) != LUA_TNUMBER || !(s >= 0) || s > DBL_MAX)
    return lbackoff_argerror(L, 1, "sleep", lua_pushfstring(L,
      "seconds must be a finite number >= 0 (got %s)", lbackoff_repr(L, 1)));
  if (s > 1e9) s = 1e9;   /* ~31 years: keeps tv_sec in range */
  req.tv_sec = (time_t)s;
  req.tv_nsec = (long)((s - (double)req.tv_sec) * 1e9);
  if (req.tv_nsec > 999999999L) req.tv_nsec = 999999999L;
  while (nanosleep(&req, &rem) != 0 && errno == EINTR)
    req = rem;
  return 0;
}

static const luaL_Reg lbackoff_meta[] = {
  {"__gc", lbackoff_gc},
  {"__close", lbackoff_close},
  {"__tostring", lbackoff_tostring},
  {NULL, NULL}
};

static const luaL_Reg lbackoff_methods[] = {
  {"failure", lbackoff_failure},
  {"success", lbackoff_success},
  {"timeout", lbackoff_timeout},
  {"delay", lbackoff_delay},
  {"attempts", lbackoff_attempts},
  {"elapsed", lbackoff_elapsed},
  {"reset", lbackoff_reset},
  {"clone", lbackoff_clone},
  {"config", lbackoff_config},
  {NULL, NULL}
};

static const luaL_Reg lbackoff_functions[] = {
  {"_ffi_objects", lbackoff_ffi_objects},
  {"new", lbackoff_new},
  {"now", lbackoff_monotonic_now},
  {"sleep", lbackoff_sleep},
  {NULL, NULL}
};

LBACKOFF_EXPORT int luaopen_backoff_core(lua_State *L);

/* register l into the table at index t, with upvalues mt and state */
static void lbackoff_register(lua_State *L, int t, int mt, int state,
                              const luaL_Reg *l) {
  lua_pushvalue(L, t);
  lua_pushvalue(L, mt);
  lua_pushvalue(L, state);        /* t, mt, state */
  lbackoff_setfuncs(L, l, 2);
  lua_pop(L, 1);
}

LBACKOFF_EXPORT int luaopen_backoff_core(lua_State *L) {
  int s, M, mt, state, methods, names;
  /* the weak-keyed side table for clocks and start options */
  lua_getfield(L, LUA_REGISTRYINDEX, LBACKOFF_EXTRA);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lbackoff_new_weak_set(L, LBACKOFF_EXTRA);
  }
  lua_pop(L, 1);

  lua_newtable(L);
  M = lua_gettop(L);
  /* one state per lua_State, kept in the registry: a second load of
     the module (package.loaded cleared) shares the metatable, so it
     must share the owner that objects are checked against too */
  lua_getfield(L, LUA_REGISTRYINDEX, LBACKOFF_STATE);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lbackoff_state_init((lbackoff_state *)
                        lua_newuserdatauv(L, sizeof(lbackoff_state), 0));
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, lbackoff_state_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, LBACKOFF_STATE);
  }
  state = lua_gettop(L);
  /* the metatable and its methods are built once per lua_State: a
     second load keeps them as they are (with the FFI wrappers and
     retry that lua/backoff.lua put in), so old and new objects and
     both loads agree */
  if (luaL_newmetatable(L, LBACKOFF_MT)) {
    mt = lua_gettop(L);
#if LUA_VERSION_NUM < 503
    lua_pushstring(L, LBACKOFF_MT);     /* 5.3+ sets __name itself */
    lua_setfield(L, mt, "__name");
#endif
    lbackoff_register(L, mt, mt, state, lbackoff_meta);
  }
  mt = lua_gettop(L);
  lua_getfield(L, mt, "__index");
  if (!lua_istable(L, -1)) {
    lua_pop(L, 1);
    lua_newtable(L);
    lbackoff_register(L, lua_gettop(L), mt, state, lbackoff_methods);
    lua_pushvalue(L, -1);
    lua_setfield(L, mt, "__index");
  }
  methods = lua_gettop(L);
  lbackoff_register(L, M, mt, state, lbackoff_functions);

  /* backoff.<strategy>(opts), and the list of names */
  lua_createtable(L, BACKOFF_NSTRATEGIES, 0);
  names = lua_gettop(L);
  for (s = 0; s < BACKOFF_NSTRATEGIES; s++) {
    lua_pushvalue(L, mt);
    lua_pushvalue(L, state);
    lua_pushinteger(L, s);
    lua_pushcclosure(L, lbackoff_strategy_ctor, 3);
    lua_setfield(L, M, backoff_strategy_name(s));
    lua_pushstring(L, backoff_strategy_name(s));
    lua_rawseti(L, names, s + 1);
  }
  lua_setfield(L, M, "strategies");
  lua_pushvalue(L, methods);            /* for the Lua half: adds retry */
  lua_setfield(L, M, "methods");
  lua_pushliteral(L, "backoff " BACKOFF_VERSION);
  lua_setfield(L, M, "_VERSION");
  lua_pushlightuserdata(L, (void *)(uintptr_t)&lbackoff_ffi_token_byte);
  lua_setfield(L, M, "_ffi_token");
  lua_settop(L, M);
  { void lbackoff_open_budget(lua_State *); lbackoff_open_budget(L); }
  return 1;
}
