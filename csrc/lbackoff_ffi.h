/*
** lbackoff_ffi.h -- the C half of the LuaJIT FFI fast path of
** b:failure() and b:success() (the Lua half is lua/backoff/ffi.lua):
** the set of live objects the step may read, and the step itself.
*/

#ifndef LBACKOFF_FFI_H
#define LBACKOFF_FFI_H

#include "lbackoff_object.h"

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

/* core._ffi_reasons(): see lbackoff_ffi.c */
int lbackoff_ffi_reasons(lua_State *L);
/* o joins its owner's set (when the FFI path is installed) */
void lbackoff_ffi_join(lua_State *L, lbackoff_object *o);
/* o leaves the set (its __gc) */
void lbackoff_ffi_forget(lbackoff_object *o);
/* the set's slots back to Lua's allocator (the state's __gc) */
void lbackoff_ffi_free(lua_State *L, lbackoff_state *st);
/* core._ffi_token: the address lbackoff_ffi_token() returns */
void lbackoff_push_ffi_token(lua_State *L);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
