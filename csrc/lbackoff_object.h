/*
** lbackoff_object.h -- the userdata of one backoff object, and the
** state of the module per lua_State that owns it: what the features
** (constructors, methods, the FFI step) share.
*/

#ifndef LBACKOFF_OBJECT_H
#define LBACKOFF_OBJECT_H

#include <stddef.h>
#include <stdint.h>

#include "backoff.h"
#include "lbackoff_aux.h"
#include "lbackoff_env.h"

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

#define LBACKOFF_MT "backoff.Backoff"

/* upvalues of every function of the module */
#define UV_META lua_upvalueindex(1)     /* the metatable */
#define UV_STATE lua_upvalueindex(2)    /* lbackoff_state */

/*
** Per lua_State (no C statics): the system's part (seeds, forks), and
** the set of live objects the FFI step may read (lbackoff_ffi.c).
*/
typedef struct lbackoff_state {
  lbackoff_env env;
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
#define LB_HAS_RANDOM 64  /* draws come from a Lua function (random) */

/* the slots of an object's side table, by the kind of option they hold
   (integer keys: the binding names no option) */
#define LB_SLOT_START 1
#define LB_SLOT_CLOCK 2
#define LB_SLOT_RANDOM 3

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

/* a new userdata of owner with the metatable at UV_META (and a slot for
   a side table when side), on top of the stack */
lbackoff_object *lbackoff_newud(lua_State *L, lbackoff_state *owner,
                                int side);

/* the object at idx, else an argument error naming method */
lbackoff_object *lbackoff_check(lua_State *L, int idx, const char *method);

/*
** The object at idx: a userdata of our size whose owner is this
** module's state st.  Two API calls in the common case; the size is
** checked before owner is read.  inline: it is on the path of every
** method call, and the error is kept out of line.
*/
void lbackoff_bad_self(lua_State *L, int idx, const char *method);
static inline lbackoff_object *lbackoff_self(lua_State *L, int idx,
                                             const lbackoff_state *st,
                                             const char *method) {
  lbackoff_object *o = (lbackoff_object *)lua_touserdata(L, idx);
  if (o == NULL || lua_rawlen(L, idx) != sizeof *o || o->owner != st)
    lbackoff_bad_self(L, idx, method);
  return o;
}

/* call the clock held by the side table at side: 1 and *t when it
   returns a finite number; else 0, with what it returned on top of the
   stack (for the caller's message) */
int lbackoff_call_clock(lua_State *L, int side, double *t);

/* o as new, started at start (finite): the stream of its seed again,
   or a new stream when it has no seed of its own */
void lbackoff_restart(lbackoff_object *o, double start);

/* an unseeded object copied into a forked child gets its own stream */
void lbackoff_fresh_stream(lbackoff_object *o);
static inline void lbackoff_forkcheck(lbackoff_object *o) {
  if ((o->flags & (LB_SEEDED | LB_DRAWS)) != LB_DRAWS) return;
  if (o->tag != lbackoff_tag(&o->owner->env)) lbackoff_fresh_stream(o);
}

/*
** The user's random function lent to an object as its source of draws
** (backoff_t.draws) for one call into the core.  The core cannot fail,
** so a draw that raises or is not a number in [0, 1] is noted, the call
** finishes on a placeholder draw, and lbackoff_unlend puts back the
** object as it was before the call and raises: validate, then commit.
*/
typedef struct lbackoff_lender {
  backoff_draws draws;
  lua_State *L;
  int fn;                   /* stack index of the function */
  int status;               /* 0, or what went wrong (on top of stack) */
  backoff_t saved;          /* the object before the call */
} lbackoff_lender;

/* push the random function from the side table at side (an absolute
   index) and lend it to core (*core kept in ln->saved) */
void lbackoff_lend(lua_State *L, backoff_t *core, int side,
                   lbackoff_lender *ln);
/* take the draws back; after a failed draw, core as it was, and raise
   "<where>: option 'random' must return ..." (or the function's own
   error).  Pops the function. */
void lbackoff_unlend(lua_State *L, backoff_t *core, lbackoff_lender *ln,
                     const char *where);

/* what lbackoff_step does (also the low bit of lbackoff_ffi_step's op) */
#define LB_OP_FAILURE 0
#define LB_OP_SUCCESS 1

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

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
