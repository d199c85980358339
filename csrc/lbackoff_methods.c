/*
** lbackoff_methods.c -- the methods of a backoff object: failure,
** success and the rest of API.md section 4, and the internal functions
** the Lua half uses (the runner's view of a failure, the FFI wrappers'
** slow path).
*/

#include <float.h>
#include <stdio.h>
#include <string.h>

#include "lbackoff_ffi.h"
#include "lbackoff_methods.h"
#include "lbackoff_options.h"

static lbackoff_object *self(lua_State *L, const char *method) {
  return lbackoff_check(L, 1, method);
}

static const char *strategy_name(const lbackoff_object *o) {
  return backoff_strategy_name(o->core.cfg.strategy);
}

/* ----------------------------------------------------------------- */
/* time                                                              */
/* ----------------------------------------------------------------- */

/* the current time of the object at idx, from its clock */
static double object_now(lua_State *L, int idx, const lbackoff_object *o,
                         const char *method) {
  double t;
  if (!(o->flags & LB_HAS_CLOCK)) return lbackoff_monotonic();
  lbackoff_getuv(L, idx);
  if (!lbackoff_call_clock(L, lua_gettop(L), &t))
    luaL_error(L, "backoff.%s:%s: %s must return a finite number (got %s)",
               strategy_name(o), method, lbackoff_kind_name(BACKOFF_K_FUNCTION),
               lbackoff_repr(L, -1));
  lua_pop(L, 1);
  return t;
}

/* argument arg, of type t, when it is not a finite number: nil or none
   asks the clock of the object at 1, anything else is an error */
static double time_arg_other(lua_State *L, int arg, int t,
                             const lbackoff_object *o, const char *method) {
  if (t == LUA_TNONE || t == LUA_TNIL) return object_now(L, 1, o, method);
  lbackoff_argerror(L, arg, method, lua_pushfstring(L,
    "timestamp must be a finite number (got %s)", lbackoff_repr(L, arg)));
  return 0;   /* not reached: lbackoff_argerror raises */
}

/* optional timestamp argument arg, of type t (lua_type: the caller may
   need it too, and each C API call counts on the path of b:failure()),
   else the object's clock */
static inline double time_arg_typed(lua_State *L, int arg, int t,
                                    const lbackoff_object *o,
                                    const char *method) {
  if (t == LUA_TNUMBER) {
    double ts = (double)lua_tonumber(L, arg);
    if (lbackoff_is_finite(ts)) return ts;
  }
  return time_arg_other(L, arg, t, o, method);
}

static inline double time_arg(lua_State *L, int arg,
                              const lbackoff_object *o, const char *method) {
  return time_arg_typed(L, arg, lua_type(L, arg), o, method);
}

/* optional hint argument arg: 0 for none */
static double hint_arg(lua_State *L, int arg, const char *method) {
  double h;
  if (lua_isnoneornil(L, arg)) return 0;
  h = lua_tonumber(L, arg);
  if (lua_type(L, arg) != LUA_TNUMBER || !lbackoff_is_finite(h) || !(h >= 0))
    lbackoff_argerror(L, arg, method, lua_pushfstring(L,
      "hint must be a finite number >= 0 (got %s)", lbackoff_repr(L, arg)));
  return h;
}

/* ----------------------------------------------------------------- */
/* methods                                                           */
/* ----------------------------------------------------------------- */

/* delay [, timeout] or nil, reason */
static inline int push_result(lua_State *L, const backoff_result *r) {
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

/* a failure with a third argument, the hint (nil: none), after the self
   check: the hint is checked first, before the clock can run.  Out of
   line, and into the hint's own entry of the core, so that a failure
   without a third argument runs the code it ran before hints */
LBACKOFF_COLD void hinted_failure(lua_State *L, lbackoff_object *o,
                                  const char *method, backoff_result *r) {
  double hint = hint_arg(L, 3, method);
  double ts = time_arg(L, 2, o, method);
  lbackoff_step(o, LB_OP_FAILURE, ts, hint, r);
}

/* a failure (self [, ts] [, hint]) or success (self [, ts]) into *r:
   every argument is checked before anything changes.  Each C API call
   costs some 3 ns here (4% of b:failure(ts) under 5.4), so: b:failure()
   is told apart by lua_type(L, 2) alone (LUA_TNONE: no hint either),
   and the type is handed on rather than asked for again; a failure with
   a second argument asks lua_gettop, the one call that the hint adds
   (no call that is made anyway says whether a third argument exists) */
/* the object's draws come from its random option: the arguments
   checked as usual, then the step with the function lent */
LBACKOFF_COLD void drawn_operate(lua_State *L, lbackoff_object *o, int op,
                                 const char *method, backoff_result *r) {
  lbackoff_lender ln;
  char where[80];
  double hint = 0, ts;
  if (op == LB_OP_FAILURE && lua_gettop(L) > 2) hint = hint_arg(L, 3, method);
  ts = time_arg(L, 2, o, method);
  snprintf(where, sizeof where, "backoff.%s:%s", strategy_name(o), method);
  lbackoff_getuv(L, 1);
  lbackoff_lend(L, &o->core, lua_gettop(L), &ln);
  lbackoff_step(o, op, ts, hint, r);
  lbackoff_unlend(L, &o->core, &ln, where);
  lua_pop(L, 1);
}

LBACKOFF_HOT void operate_into(lua_State *L, int op, const char *method,
                               backoff_result *r) {
  lbackoff_state *st = (lbackoff_state *)lua_touserdata(L, UV_STATE);
  lbackoff_object *o = lbackoff_self(L, 1, st, method);
  int t = lua_type(L, 2);
  if (o->flags & LB_HAS_RANDOM)
    drawn_operate(L, o, op, method, r);
  else if (op == LB_OP_FAILURE && t != LUA_TNONE && lua_gettop(L) > 2)
    hinted_failure(L, o, method, r);
  else
    lbackoff_step(o, op, time_arg_typed(L, 2, t, o, method), 0, r);
}

/* b:failure([ts] [, hint]) and b:success([ts]); inlined into each, so
   that op is a constant in operate_into */
LBACKOFF_HOT int operate(lua_State *L, int op, const char *method) {
  backoff_result r;
  operate_into(L, op, method, &r);
  return push_result(L, &r);
}

static int m_failure(lua_State *L) {
  return operate(L, LB_OP_FAILURE, "failure");
}

static int m_success(lua_State *L) {
  return operate(L, LB_OP_SUCCESS, "success");
}

/* core._ffi_failure, core._ffi_success: the methods, for the slow path
   of the FFI wrappers (lua/backoff/ffi.lua).  An object of ours not yet
   in its state's set joins it here, on its first call, so that its later
   calls take the fast path: objects that never meet the FFI (a runner's
   clones, which it drives through core._failure) cost nothing. */
static int f_ffi_failure(lua_State *L) {
  lbackoff_ffi_join(L, self(L, "failure"));
  return m_failure(L);
}

static int f_ffi_success(lua_State *L) {
  lbackoff_ffi_join(L, self(L, "success"));
  return m_success(L);
}

/* core._failure(b, ts, hint): delay, timeout (or nil), own; or nil,
   reason -- the runner's view of a failure (see lua/backoff.lua) */
static int f_failure(lua_State *L) {
  backoff_result r;
  int n;
  operate_into(L, LB_OP_FAILURE, "_failure", &r);
  n = push_result(L, &r);
  if (r.give_up != BACKOFF_CONTINUE) return n;
  if (n == 1) lua_pushnil(L);
  lua_pushnumber(L, (lua_Number)r.own);
  return 3;
}

static int m_timeout(lua_State *L) {
  double t;
  if (backoff_timeout(&self(L, "timeout")->core, &t))
    lua_pushnumber(L, (lua_Number)t);
  else
    lua_pushnil(L);
  return 1;
}

/* b:current_interval(): google and cenkalti's interval; nil for others */
static int m_current_interval(lua_State *L) {
  double t;
  if (backoff_current_interval(&self(L, "current_interval")->core, &t))
    lua_pushnumber(L, (lua_Number)t);
  else
    lua_pushnil(L);
  return 1;
}

static int m_delay(lua_State *L) {
  lua_pushnumber(L, (lua_Number)backoff_delay(&self(L, "delay")->core));
  return 1;
}

static int m_attempts(lua_State *L) {
  lbackoff_push_count(L, backoff_attempts(&self(L, "attempts")->core));
  return 1;
}

static int m_elapsed(lua_State *L) {
  lbackoff_object *o = self(L, "elapsed");
  double e = time_arg(L, 2, o, "elapsed") - backoff_start(&o->core);
  /* before the start counts as no time; never inf */
  lua_pushnumber(L, (lua_Number)(e > 0 ? (e > DBL_MAX ? DBL_MAX : e) : 0.0));
  return 1;
}

/* lbackoff_restart of o (into core, which may be another object's),
   with o's random function lent when it has one (the initial timeout's
   draw); o is at index 1 */
static void restart_into(lua_State *L, lbackoff_object *o,
                         lbackoff_object *into, double start,
                         const char *method) {
  lbackoff_lender ln;
  char where[80];
  if (!(o->flags & LB_HAS_RANDOM)) {
    lbackoff_restart(into, start);
    return;
  }
  snprintf(where, sizeof where, "backoff.%s:%s", strategy_name(o), method);
  lbackoff_getuv(L, 1);
  lbackoff_lend(L, &into->core, lua_gettop(L), &ln);
  lbackoff_restart(into, start);
  lbackoff_unlend(L, &into->core, &ln, where);
  lua_pop(L, 1);
}

static int m_reset(lua_State *L) {
  lbackoff_object *o = self(L, "reset");
  restart_into(L, o, o, time_arg(L, 2, o, "reset"), "reset");
  lua_settop(L, 1);
  return 1;
}

/* the start of a new object like o: its start option, else ts */
static double start_of(lua_State *L, const lbackoff_object *o) {
  double start;
  if (!(o->flags & LB_HAS_START)) return time_arg(L, 2, o, "clone");
  lbackoff_getuv(L, 1);
  lua_rawgeti(L, -1, LB_SLOT_START);
  start = lua_tonumber(L, -1);
  lua_pop(L, 2);
  return start;
}

/* b:clone([ts]): as if just constructed (at ts, default now) */
static int m_clone(lua_State *L) {
  lbackoff_object *o = self(L, "clone"), *c;
  double start = start_of(L, o);
  c = lbackoff_newud(L, o->owner, o->flags & LB_SIDE);
  memcpy(&c->core, &o->core, sizeof c->core);
  c->flags |= o->flags & (unsigned char)~LB_KNOWN;   /* c's own KNOWN */
  c->tag = o->tag;
  restart_into(L, o, c, start, "clone");
  if (c->flags & LB_SIDE) {         /* the side table is never changed: */
    lbackoff_getuv(L, 1);           /* share it */
    lbackoff_setuv(L, -2);
  }
  return 1;
}

/* core._first_timeout(b): the initial timeout a fresh clone of b would
   draw, without making one (nil when timeouts are off) */
static int f_first_timeout(lua_State *L) {
  lbackoff_object *o = self(L, "_first_timeout"), tmp;
  double t;
  if (!backoff_config_timeouts_active(&o->core.cfg)) return 0;
  tmp = *o;
  restart_into(L, o, &tmp, backoff_start(&o->core), "_first_timeout");
  backoff_timeout(&tmp.core, &t);
  lua_pushnumber(L, (lua_Number)t);
  return 1;
}

/* core._now(b): the object's clock */
static int f_now(lua_State *L) {
  lbackoff_object *o = self(L, "_now");
  lua_pushnumber(L, (lua_Number)object_now(L, 1, o, "_now"));
  return 1;
}

static int m_tostring(lua_State *L) {
  lbackoff_object *o = self(L, "__tostring");
  lua_pushfstring(L, "backoff.%s: %p", strategy_name(o), (void *)o);
  return 1;
}

/* __gc and __close: the object owns no resource (its side table is
   Lua's), so there is nothing to release; checking self keeps a stray
   call through getmetatable harmless. */
static int m_gc(lua_State *L) {
  lbackoff_object *o = self(L, "__gc");
  lbackoff_ffi_forget(o);
  return 0;
}

static int m_close(lua_State *L) {
  self(L, "__close");
  return 0;
}

/* ----------------------------------------------------------------- */
/* registration                                                      */
/* ----------------------------------------------------------------- */

const luaL_Reg lbackoff_meta_functions[] = {
  {"__gc", m_gc},
  {"__close", m_close},
  {"__tostring", m_tostring},
  {NULL, NULL}
};

const luaL_Reg lbackoff_methods[] = {
  {"failure", m_failure},
  {"success", m_success},
  {"timeout", m_timeout},
  {"delay", m_delay},
  {"attempts", m_attempts},
  {"elapsed", m_elapsed},
  {"reset", m_reset},
  {"clone", m_clone},
  {"config", lbackoff_config},
  {"current_interval", m_current_interval},
  {NULL, NULL}
};

const luaL_Reg lbackoff_method_functions[] = {
  {"_ffi_failure", f_ffi_failure},
  {"_ffi_success", f_ffi_success},
  {"_failure", f_failure},
  {"_first_timeout", f_first_timeout},
  {"_now", f_now},
  {NULL, NULL}
};
