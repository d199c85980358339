/*
** lbudget.h -- the retry budget's Lua binding, part of "backoff.core".
*/

#ifndef LBUDGET_H
#define LBUDGET_H

#include "lbackoff_aux.h"

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

/*
** Set field "budget" (the constructor) in the table on top of the
** stack; leaves the stack as it was.  Called by luaopen_backoff_core.
*/
void lbackoff_open_budget(lua_State *L);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
