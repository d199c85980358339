/*
** lbackoff.c -- the Lua binding of the backoff core: module "backoff.core".
**
** Each backoff object is a full userdata holding one backoff_t (no
** heap, so nothing can leak when Lua longjmps).  The options that are
** Lua values (a clock function, the start option) live in the object's
** own side table: its uservalue (5.2+) or environment (5.1, LuaJIT), so
** a clock closure that refers back to its object is collected with it.
** The public module "backoff" (lua/backoff.lua) wraps this one and adds
** the parts that must be Lua so that they can yield (retry).
*/

#include <float.h>
#include <string.h>

#include "lbackoff.h"
#include "lbudget.h"

#if LUA_VERSION_NUM == 501
/* luaL_setfuncs of 5.2: table at -(nup+1), nup upvalues on top */
void lbackoff_setfuncs(lua_State *L, const luaL_Reg *l, int nup) {
  int i;
  for (; l->name != NULL; l++) {
    for (i = 0; i < nup; i++)
      lua_pushvalue(L, -nup);
    lua_pushcclosure(L, l->func, nup);
    lua_setfield(L, -(nup + 2), l->name);
  }
  lua_pop(L, nup);
}
#endif

#if LUA_VERSION_NUM < 503
int lbackoff_newmetatable(lua_State *L, const char *name) {
  if (!luaL_newmetatable(L, name)) return 0;
  lua_pushstring(L, name);
  lua_setfield(L, -2, "__name");
  return 1;
}
#endif

/* ----------------------------------------------------------------- */
/* self                                                              */
/* ----------------------------------------------------------------- */

static void bad_self(lua_State *L, int idx, const char *method) {
  const char *got = lbackoff_repr(L, idx);   /* stays on the stack */
  lbackoff_argerror(L, idx, method, lua_pushfstring(L,
    LBACKOFF_MT " expected, got %s",
    lua_type(L, idx) == LUA_TUSERDATA ? "another userdata" : got));
}

/*
** The object at idx: a userdata of our size whose owner is this
** module's state (see lbackoff_object).  Two API calls in the common
** case; the size is checked before owner is read.  inline: it is on
** the path of every method call, and the error is kept out of line.
*/
static inline lbackoff_object *self_st(lua_State *L, int idx,
                                       const lbackoff_state *st,
                                       const char *method) {
  lbackoff_object *o = (lbackoff_object *)lua_touserdata(L, idx);
  if (o == NULL || lua_rawlen(L, idx) != sizeof *o || o->owner != st)
    bad_self(L, idx, method);
  return o;
}

lbackoff_object *lbackoff_check(lua_State *L, int idx, const char *method) {
  return self_st(L, idx, (lbackoff_state *)lua_touserdata(L, UV_STATE),
                 method);
}

static lbackoff_object *self(lua_State *L, const char *method) {
  return lbackoff_check(L, 1, method);
}

static const char *strategy_name(const lbackoff_object *o) {
  return backoff_strategy_name(o->core.cfg.strategy);
}

/* a new userdata of owner (the state at UV_STATE, passed in because
   callers have it) with our metatable (and a slot for a side table when
   side), on top of the stack */
lbackoff_object *lbackoff_newud(lua_State *L, lbackoff_state *owner,
                                int side) {
  lbackoff_object *o =
    (lbackoff_object *)lua_newuserdatauv(L, sizeof *o, side ? 1 : 0);
  (void)side;   /* before 5.4, every userdata has the slot */
  o->owner = owner;
  o->flags = 0;
  o->tag = 0;
  lua_pushvalue(L, UV_META);
  lua_setmetatable(L, -2);
  return o;
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
LBACKOFF_HOT void operate_into(lua_State *L, int op, const char *method,
                               backoff_result *r) {
  lbackoff_state *st = (lbackoff_state *)lua_touserdata(L, UV_STATE);
  lbackoff_object *o = self_st(L, 1, st, method);
  int t = lua_type(L, 2);
  if (op == LB_OP_FAILURE && t != LUA_TNONE && lua_gettop(L) > 2)
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

static int m_delay(lua_State *L) {
  lua_pushnumber(L, (lua_Number)backoff_delay(&self(L, "delay")->core));
  return 1;
}

void lbackoff_push_count(lua_State *L, uint64_t n) {
  if (n <= UINT64_C(9007199254740992))  /* exact in every Lua's number */
    lua_pushinteger(L, (lua_Integer)n);
  else
    lua_pushnumber(L, (lua_Number)n);
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

/* o as new, started at start (finite): the stream of its seed again,
   or a new stream when it has no seed of its own */
static void restart(lbackoff_object *o, double start) {
  if (o->flags & LB_SEEDED)
    backoff_reset(&o->core, start);
  else
    backoff_restart(&o->core, start, lbackoff_new_seed(o->owner, &o->tag));
}

static int m_reset(lua_State *L) {
  lbackoff_object *o = self(L, "reset");
  restart(o, time_arg(L, 2, o, "reset"));
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
  restart(c, start);
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
  restart(&tmp, backoff_start(&o->core));
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

/* backoff.<strategy>(opts) */
static int f_strategy_ctor(lua_State *L) {
  return lbackoff_construct(L, (int)lua_tointeger(L, UV_STRATEGY), 1,
                            UV_NAMES);
}

/* backoff.new(strategy, opts): upvalue 3 maps each strategy name to
   its number, upvalue 4 each number + 1 to its option names */
static int f_new(lua_State *L) {
  if (lua_type(L, 1) == LUA_TSTRING) {
    lua_settop(L, 2);
    lua_pushvalue(L, 1);
    lua_rawget(L, lua_upvalueindex(3));
    if (lua_isnumber(L, -1)) {
      int s = (int)lua_tointeger(L, -1);
      lua_rawgeti(L, lua_upvalueindex(4), s + 1);
      return lbackoff_construct(L, s, 2, lua_gettop(L));
    }
  }
  return luaL_error(L, "backoff.new: unknown strategy %s",
                    lbackoff_repr(L, 1));
}

/* ----------------------------------------------------------------- */
/* registration                                                      */
/* ----------------------------------------------------------------- */

static const luaL_Reg meta_functions[] = {
  {"__gc", m_gc},
  {"__close", m_close},
  {"__tostring", m_tostring},
  {NULL, NULL}
};

static const luaL_Reg methods[] = {
  {"failure", m_failure},
  {"success", m_success},
  {"timeout", m_timeout},
  {"delay", m_delay},
  {"attempts", m_attempts},
  {"elapsed", m_elapsed},
  {"reset", m_reset},
  {"clone", m_clone},
  {"config", lbackoff_config},
  {NULL, NULL}
};

static const luaL_Reg functions[] = {
  {"_ffi_reasons", lbackoff_ffi_reasons},
  {"_ffi_failure", f_ffi_failure},
  {"_ffi_success", f_ffi_success},
  {"_failure", f_failure},
  {"_first_timeout", f_first_timeout},
  {"_now", f_now},
  {"_repr", lbackoff_repr_lua},
  {"now", lbackoff_now},
  {"sleep", lbackoff_sleep},
  {NULL, NULL}
};

/* register l into the table at index t, with upvalues mt and state */
static void register_in(lua_State *L, int t, int mt, int state,
                        const luaL_Reg *l) {
  lua_pushvalue(L, t);
  lua_pushvalue(L, mt);
  lua_pushvalue(L, state);        /* t, mt, state */
  luaL_setfuncs(L, l, 2);
  lua_pop(L, 1);
}

/*
** The metatable and its methods are built once per lua_State: a second
** load keeps them as they are (with the FFI wrappers and retry that
** lua/backoff.lua put in), so old and new objects and both loads agree.
** Leaves the metatable and the methods table on the stack.
*/
static void open_metatable(lua_State *L, int state) {
  int mt;
  if (lbackoff_newmetatable(L, LBACKOFF_MT)) {
    mt = lua_gettop(L);
    register_in(L, mt, mt, state, meta_functions);
  }
  mt = lua_gettop(L);
  lua_getfield(L, mt, "__index");
  if (!lua_istable(L, -1)) {
    lua_pop(L, 1);
    lua_newtable(L);
    register_in(L, lua_gettop(L), mt, state, methods);
    lua_pushvalue(L, -1);
    lua_setfield(L, mt, "__index");
  }
}

/* backoff.<strategy> for each, backoff.new and backoff.strategies */
static void open_constructors(lua_State *L, int M, int mt, int state) {
  int s, names, numbers, options;
  lua_createtable(L, BACKOFF_NSTRATEGIES, 0);
  names = lua_gettop(L);
  lua_createtable(L, 0, BACKOFF_NSTRATEGIES);
  numbers = lua_gettop(L);
  lua_createtable(L, BACKOFF_NSTRATEGIES, 0);
  options = lua_gettop(L);
  for (s = 0; s < BACKOFF_NSTRATEGIES; s++) {
    lbackoff_push_names(L, s);
    lua_pushvalue(L, -1);
    lua_rawseti(L, options, s + 1);
    lua_pushvalue(L, mt);
    lua_pushvalue(L, state);
    lua_pushinteger(L, s);
    lua_pushvalue(L, -4);               /* the names */
    lua_pushcclosure(L, f_strategy_ctor, 4);
    lua_setfield(L, M, backoff_strategy_name(s));
    lua_pop(L, 1);
    lua_pushstring(L, backoff_strategy_name(s));
    lua_rawseti(L, names, s + 1);
    lua_pushinteger(L, s);
    lua_setfield(L, numbers, backoff_strategy_name(s));
  }
  lua_pushvalue(L, mt);
  lua_pushvalue(L, state);
  lua_pushvalue(L, numbers);
  lua_pushvalue(L, options);
  lua_pushcclosure(L, f_new, 4);
  lua_setfield(L, M, "new");
  lua_pop(L, 2);
  lua_setfield(L, M, "strategies");
}

LBACKOFF_EXPORT int luaopen_backoff_core(lua_State *L);

LBACKOFF_EXPORT int luaopen_backoff_core(lua_State *L) {
  int M, mt, state;
  lua_newtable(L);
  M = lua_gettop(L);
  lbackoff_push_state(L);
  state = lua_gettop(L);
  open_metatable(L, state);     /* mt, methods */
  mt = state + 1;
  register_in(L, M, mt, state, functions);
  open_constructors(L, M, mt, state);
  lua_pushvalue(L, mt + 1);     /* for the Lua half: adds retry */
  lua_setfield(L, M, "methods");
  lua_pushvalue(L, mt);         /* for the Lua half: "is it an object?" */
  lua_setfield(L, M, "_metatable");
  lua_pushliteral(L, "backoff " BACKOFF_VERSION);
  lua_setfield(L, M, "_VERSION");
  lbackoff_push_ffi_token(L);
  lua_setfield(L, M, "_ffi_token");
  lua_settop(L, M);
  lbackoff_open_budget(L);        /* backoff.core.budget */
  return 1;
}
