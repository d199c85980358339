/*
** lbackoff.h -- what the files of the Lua binding share (internal).
**
**   lbackoff.c          the userdata, its methods, luaopen_backoff_core
**   lbackoff_options.c  constructors and config(): walks the core's
**                       option table (backoff_options.c)
**   lbackoff_env.c      clock, sleep, seeds, fork detection
**   lbackoff_ffi.c      the LuaJIT FFI fast path (C half)
**   lbackoff_msg.c      values in messages, argument errors
**   lbudget.c           retry budgets
*/

#ifndef LBACKOFF_H
#define LBACKOFF_H

#include <float.h>
#include <stdint.h>

#include "lua.h"
#include "lauxlib.h"

#include "backoff.h"

#if !defined(LUA_VERSION_NUM) || LUA_VERSION_NUM < 501
#error "backoff needs Lua 5.1 or later"
#endif

/* ---- compatibility (only what the binding uses) ---- */
#if LUA_VERSION_NUM == 501
#define lua_rawlen(L, i) lua_objlen(L, i)
void lbackoff_setfuncs(lua_State *L, const luaL_Reg *l, int nup);
#define luaL_setfuncs(L, l, nup) lbackoff_setfuncs(L, l, nup)
#endif
#if LUA_VERSION_NUM < 504
#define lua_newuserdatauv(L, sz, nuv) lua_newuserdata(L, sz)
#endif
/* luaL_newmetatable, with __name before 5.3 too (5.3+ sets it) */
#if LUA_VERSION_NUM < 503
int lbackoff_newmetatable(lua_State *L, const char *name);
#else
#define lbackoff_newmetatable(L, name) luaL_newmetatable(L, name)
#endif
/* the side table of an object: its uservalue (5.2+) or environment */
#if LUA_VERSION_NUM == 501
#define lbackoff_setuv(L, i) lua_setfenv(L, i)
#define lbackoff_getuv(L, i) lua_getfenv(L, i)
#elif LUA_VERSION_NUM < 504
#define lbackoff_setuv(L, i) lua_setuservalue(L, i)
#define lbackoff_getuv(L, i) lua_getuservalue(L, i)
#else
#define lbackoff_setuv(L, i) lua_setiuservalue(L, i, 1)
#define lbackoff_getuv(L, i) lua_getiuservalue(L, i, 1)
#endif
/* its slots, by the kind of option they hold (integer keys: the binding
   names no option) */
#define LB_SLOT_START 1
#define LB_SLOT_CLOCK 2
#define LB_SLOT(kind) \
  ((kind) == BACKOFF_K_START ? LB_SLOT_START : LB_SLOT_CLOCK)

#if defined(_WIN32)
#define LBACKOFF_EXPORT __declspec(dllexport)
#elif defined(__GNUC__)
#define LBACKOFF_EXPORT __attribute__((visibility("default")))
#else
#define LBACKOFF_EXPORT
#endif

#define LBACKOFF_MT "backoff.Backoff"
#define LBACKOFF_STATE "backoff.state"   /* registry: the lbackoff_state */

/* upvalues of every function of the module */
#define UV_META lua_upvalueindex(1)     /* the metatable */
#define UV_STATE lua_upvalueindex(2)    /* lbackoff_state */
/* constructors: the strategy number and its name -> option row table */
#define UV_STRATEGY lua_upvalueindex(3)
#define UV_NAMES lua_upvalueindex(4)

/*
** Per lua_State (no C statics): a generator for the seeds of unseeded
** objects, and a page the kernel zeroes in a forked child
** (MADV_WIPEONFORK) holding the current process's tag, so that noticing
** a fork costs one load, not a getpid() system call.  wipe is NULL
** where the kernel lacks the feature; then getpid() is the check.
*/
typedef struct lbackoff_state {
  backoff_rng seeds;        /* seeded from the clocks and pid */
  uint32_t seeds_tag;       /* the process tag seeds was seeded in */
  volatile uint32_t *wipe;
  int ffi;                  /* _ffi_reasons was handed out (once per state) */
  /* with ffi: the addresses of the live objects, for the FFI step (open
     addressing, a power-of-two number of slots from Lua's allocator) */
  const void **objects;
  size_t nslots, nlive, ndead;
} lbackoff_state;

/* lbackoff_object.flags */
#define LB_SEEDED 1       /* the user gave a seed */
#define LB_SIDE 2         /* the object has a side table (clock, start) */
#define LB_HAS_CLOCK 4
#define LB_HAS_START 8
#define LB_DRAWS 16       /* draws random numbers (backoff_config_draws) */
#define LB_KNOWN 32       /* in its owner's objects (the FFI step's set) */

/*
** The userdata of one backoff object.  owner is the state of the module
** that built it: the self check compares it with the state upvalue
** (after checking the size), which costs no stack traffic, unlike
** reading the metatable.  Lua code cannot write the bytes of a
** userdata, so it cannot forge owner; a userdata of another library,
** even given our metatable with debug.setmetatable, fails the methods'
** check.  (The FFI step reads nothing of a userdata that is not in its
** owner's set of live objects: see lbackoff_ffi.c.)
*/
typedef struct lbackoff_object {
  backoff_t core;                 /* first: the FFI passes the object */
  lbackoff_state *owner;
  uint32_t tag;                   /* process tag its stream belongs to */
  unsigned char flags;            /* LB_* */
} lbackoff_object;

/* lbackoff_env.c */
double lbackoff_monotonic(void);
lbackoff_state *lbackoff_push_state(lua_State *L);
uint32_t lbackoff_tag_slow(lbackoff_state *st);

/* inline: both are on the path of every failure()/success() */
static inline int lbackoff_is_finite(double v) {
  return v == v && v <= DBL_MAX && v >= -DBL_MAX;
}

/* changes in a forked child: one load where the kernel can wipe a page
   (the page reads 0 in a new child), else getpid() */
static inline uint32_t lbackoff_tag(lbackoff_state *st) {
  uint32_t tag = st->wipe != NULL ? *st->wipe : 0;
  return tag != 0 ? tag : lbackoff_tag_slow(st);
}
uint64_t lbackoff_new_seed(lbackoff_state *st, uint32_t *tag);
void lbackoff_fresh_stream(lbackoff_object *o);
int lbackoff_now(lua_State *L);
int lbackoff_call_clock(lua_State *L, int side, double *t);
int lbackoff_sleep(lua_State *L);

/* an unseeded object copied into a forked child gets its own stream */
static inline void lbackoff_forkcheck(lbackoff_object *o) {
  if ((o->flags & (LB_SEEDED | LB_DRAWS)) != LB_DRAWS) return;
  if (o->tag != lbackoff_tag(o->owner)) lbackoff_fresh_stream(o);
}

/* lbackoff_msg.c */
const char *lbackoff_repr(lua_State *L, int idx);
int lbackoff_repr_lua(lua_State *L);
int lbackoff_argerror(lua_State *L, int arg, const char *fname,
                      const char *msg);

/* lbackoff.c */
lbackoff_object *lbackoff_newud(lua_State *L, lbackoff_state *owner,
                                int side);
void lbackoff_push_count(lua_State *L, uint64_t n);
lbackoff_object *lbackoff_check(lua_State *L, int idx, const char *fname);

/* lbackoff_options.c */
void lbackoff_push_names(lua_State *L, int strategy);
const char *lbackoff_kind_name(int kind);
int lbackoff_construct(lua_State *L, int strategy, int idx, int names);
int lbackoff_config(lua_State *L);

/* lbackoff_ffi.c */
int lbackoff_ffi_reasons(lua_State *L);
void lbackoff_ffi_join(lua_State *L, lbackoff_object *o);
void lbackoff_ffi_forget(lbackoff_object *o);
void lbackoff_ffi_free(lua_State *L, lbackoff_state *st);
void lbackoff_push_ffi_token(lua_State *L);

/* what lbackoff_step does (also the low bit of lbackoff_ffi_step's op) */
#define LB_OP_FAILURE 0
#define LB_OP_SUCCESS 1

/* on the path of every method call: inlined where it is used */
/* off that path: kept out of line, away from it */
#if defined(__GNUC__)
#define LBACKOFF_HOT static inline __attribute__((always_inline))
#define LBACKOFF_COLD static __attribute__((noinline, cold))
#else
#define LBACKOFF_HOT static inline
#define LBACKOFF_COLD static
#endif

/* one failure or success at a finite ts with a valid hint (0: none;
   the core cannot fail then), after the fork check: the one path of
   both methods and the FFI.  Callers without a hint pass a constant 0,
   which takes the hint's test off their path */
LBACKOFF_HOT void lbackoff_step(lbackoff_object *o, int op, double ts,
                                double hint, backoff_result *r) {
  lbackoff_forkcheck(o);
  if (op == LB_OP_SUCCESS)
    backoff_success(&o->core, ts, r);
  else if (hint > 0)
    backoff_failure_hint(&o->core, ts, hint, r);
  else
    backoff_failure(&o->core, ts, r);
}

#endif
