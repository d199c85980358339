/*
** lbackoff_methods.h -- the methods of a backoff object, as lists for
** luaopen_backoff_core to register (every function takes the metatable
** and the state as upvalues 1 and 2: lbackoff_object.h).
*/

#ifndef LBACKOFF_METHODS_H
#define LBACKOFF_METHODS_H

#include "lbackoff_object.h"

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

/* __gc, __close, __tostring */
extern const luaL_Reg lbackoff_meta_functions[];
/* failure, success, timeout, ...: the metatable's __index */
extern const luaL_Reg lbackoff_methods[];
/* backoff.core._failure and the other internal functions of objects */
extern const luaL_Reg lbackoff_method_functions[];

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
