/*
** lbackoff_ffi.c -- the C half of the LuaJIT FFI fast path (the Lua
** half is lua/backoff/ffi.lua).
**
** Under LuaJIT, b:failure() and b:success() call lbackoff_ffi_step
** through the FFI: the JIT compiles that into a direct call, where a Lua
** C function stops the trace.  The FFI cannot check what it passes, so
** the step reads nothing of a pointer that is not in its state's set of
** live objects: each object enters the set when it is built (once the
** fast path is installed) and leaves it in its __gc.  Lua passes only
** userdata carrying the module's metatable (so that other values never
** reach the FFI at all); a userdata given the metatable by the debug
** library, or by C, is not in the set, and the method proper refuses it.
** The set is a table of addresses in C, not a Lua weak table: entering
** it costs a constructor a few dozen instructions and the collector
** nothing, and a Lua-side check per object made LuaJIT compile the first
** call of each object as a separate path.  Whatever the step does not
** handle (a hint, a Lua clock, a bad timestamp, an unknown pointer) it
** leaves untouched and answers LB_FFI_SLOW: the method proper then runs
** and raises the error or calls the Lua clock.
*/

#include <stdint.h>

#include "lbackoff_ffi.h"

#define LB_FFI_SLOW (-1)
#define LB_FFI_DELAY 0            /* out[0] */
#define LB_FFI_DELAY_TIMEOUT 1    /* out[0], out[1] */
#define LB_FFI_GIVE_UP 2          /* + the backoff_give_up reason */

#define LB_FFI_NOW 2              /* op: LB_OP_* | this: no timestamp */

LBACKOFF_EXPORT int lbackoff_ffi_step(void *ud, const void *owner, int op,
                                      double ts, double *out);
LBACKOFF_EXPORT const void *lbackoff_ffi_token(void);

/* ----------------------------------------------------------------- */
/* the set of live objects                                           */
/* ----------------------------------------------------------------- */

/* a slot that held an object (its search goes on past it) */
#define DEAD ((const void *)&dead_slot)
static const char dead_slot = 0;

static size_t slot_of(const void *p, size_t nslots) {
  uint64_t h = (uint64_t)((uintptr_t)p >> 4) * UINT64_C(0x9e3779b97f4a7c15);
  return (size_t)(h >> 32) & (nslots - 1);
}

/* the slot holding p, or NULL */
static const void **find(const lbackoff_state *st, const void *p) {
  size_t i;
  if (st->nslots == 0) return NULL;
  for (i = slot_of(p, st->nslots); st->objects[i] != NULL;
       i = (i + 1) & (st->nslots - 1))
    if (st->objects[i] == p) return &st->objects[i];
  return NULL;
}

/* the first empty or dead slot on p's path */
static const void **free_slot(const void **slots, size_t nslots,
                              const void *p) {
  size_t i = slot_of(p, nslots);
  while (slots[i] != NULL && slots[i] != DEAD) i = (i + 1) & (nslots - 1);
  return &slots[i];
}

/* room for one more object (may raise a memory error, before anything
   changes) */
static void reserve(lua_State *L, lbackoff_state *st) {
  void *ud;
  lua_Alloc alloc;
  const void **slots;
  size_t n, i, live = st->nlive;
  if ((st->nlive + st->ndead + 1) * 2 <= st->nslots) return;
  for (n = 64; n < (live + 1) * 4; n *= 2) continue;
  alloc = lua_getallocf(L, &ud);
  slots = (const void **)alloc(ud, NULL, 0, n * sizeof *slots);
  if (slots == NULL) luaL_error(L, "not enough memory");
  for (i = 0; i < n; i++) slots[i] = NULL;
  for (i = 0; i < st->nslots; i++)
    if (st->objects[i] != NULL && st->objects[i] != DEAD)
      *free_slot(slots, n, st->objects[i]) = st->objects[i];
  lbackoff_ffi_free(L, st);
  st->objects = slots;
  st->nslots = n;
  st->nlive = live;
}

/* o joins its owner's set, when the FFI path is installed and o is not
   in it yet (the FFI wrappers' slow path) */
void lbackoff_ffi_join(lua_State *L, lbackoff_object *o) {
  lbackoff_state *st = o->owner;
  const void **slot;
  if (!st->ffi || (o->flags & LB_KNOWN)) return;
  reserve(L, st);
  slot = free_slot(st->objects, st->nslots, o);
  if (*slot == DEAD) st->ndead--;
  *slot = o;
  st->nlive++;
  o->flags |= LB_KNOWN;
}

/* o leaves the set (its __gc) */
void lbackoff_ffi_forget(lbackoff_object *o) {
  lbackoff_state *st = o->owner;
  const void **slot;
  if (!(o->flags & LB_KNOWN)) return;
  slot = find(st, o);
  if (slot != NULL) {           /* NULL: the state's own __gc came first */
    *slot = DEAD;
    st->nlive--;
    st->ndead++;
  }
  o->flags &= (unsigned char)~LB_KNOWN;
}

/* the slots back to Lua's allocator (the state's __gc, a regrowth) */
void lbackoff_ffi_free(lua_State *L, lbackoff_state *st) {
  void *ud;
  lua_Alloc alloc = lua_getallocf(L, &ud);
  if (st->objects != NULL)
    alloc(ud, (void *)st->objects, st->nslots * sizeof *st->objects, 0);
  st->objects = NULL;
  st->nslots = st->nlive = st->ndead = 0;
}

LBACKOFF_EXPORT int lbackoff_ffi_step(void *ud, const void *owner, int op,
                                      double ts, double *out) {
  lbackoff_object *o = (lbackoff_object *)ud;
  backoff_result r;
  if (find((const lbackoff_state *)owner, ud) == NULL ||
      (o->flags & LB_HAS_RANDOM))     /* draws from a Lua function */
    return LB_FFI_SLOW;
  if (op & LB_FFI_NOW) {
    if (o->flags & LB_HAS_CLOCK) return LB_FFI_SLOW;
    ts = lbackoff_monotonic();
  } else if (!lbackoff_is_finite(ts)) {
    return LB_FFI_SLOW;
  }
  lbackoff_step(o, op & LB_OP_SUCCESS, ts, 0, &r);
  if (r.give_up != BACKOFF_CONTINUE) return LB_FFI_GIVE_UP + r.give_up;
  out[0] = r.delay;
  if (!r.has_timeout) return LB_FFI_DELAY;
  out[1] = r.timeout;
  return LB_FFI_DELAY_TIMEOUT;
}

/* lets Lua check that the library the FFI loaded is this very one */
static const char ffi_token_byte = 0;

LBACKOFF_EXPORT const void *lbackoff_ffi_token(void) {
  return &ffi_token_byte;
}

void lbackoff_push_ffi_token(lua_State *L) {
  lua_pushlightuserdata(L, (void *)(uintptr_t)&ffi_token_byte);
}

/* _ffi_reasons(): the give-up reasons by step result and the state
   whose set the step looks in (a light userdata); on the first call per
   lua_State only, so that a second load of the module (which finds the
   methods already wrapped) does not wrap them again */
int lbackoff_ffi_reasons(lua_State *L) {
  lbackoff_state *st = (lbackoff_state *)lua_touserdata(L, UV_STATE);
  int g;
  if (st->ffi) return 0;
  st->ffi = 1;
  lua_newtable(L);
  for (g = 1; backoff_give_up_name(g) != NULL; g++) {
    lua_pushstring(L, backoff_give_up_name(g));
    lua_rawseti(L, -2, LB_FFI_GIVE_UP + g);
  }
  lua_pushlightuserdata(L, st);
  return 2;
}
