/*
** lbackoff_options.h -- constructors and config(): the option table of
** the core (backoff_options.h) walked for Lua.
*/

#ifndef LBACKOFF_OPTIONS_H
#define LBACKOFF_OPTIONS_H

#include "backoff_options.h"
#include "lbackoff_object.h"

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

/* the name of the first option of this kind, for messages */
const char *lbackoff_kind_name(int kind);

/* b:config() */
int lbackoff_config(lua_State *L);

/*
** Set backoff.<strategy> for each strategy, backoff.new and
** backoff.strategies in the module table at M; mt and state are the
** indices of the metatable and the state (every constructor's
** upvalues).  Leaves the stack as it was.
*/
void lbackoff_open_constructors(lua_State *L, int M, int mt, int state);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
