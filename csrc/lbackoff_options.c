/*
** lbackoff_options.c -- constructors and config(): the option table of
** the core (backoff_options.c) walked for Lua.  This file names no
** option: names, kinds, ranges and the rules between options are the
** core's; here are only Lua values in and out.
**
** Options are read with raw access (lua_next): a proxy table's __index
** and __pairs are not consulted, so what is read is what is checked.
** Each key costs one lookup in a table of the strategy's option names
** (interned strings), made once when the module loads.
*/

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "lbackoff_options.h"

/* constructors: the strategy number and its name -> option row table */
#define UV_STRATEGY lua_upvalueindex(3)
#define UV_NAMES lua_upvalueindex(4)

/* the slot of the side table that holds an option of this kind */
#define LB_SLOT(kind) \
  ((kind) == BACKOFF_K_START ? LB_SLOT_START \
   : (kind) == BACKOFF_K_RANDOM ? LB_SLOT_RANDOM : LB_SLOT_CLOCK)
#define HELD_BY_BINDING(kind) \
  ((kind) == BACKOFF_K_START || (kind) == BACKOFF_K_FUNCTION || \
   (kind) == BACKOFF_K_RANDOM)

/* push a table: each option name strategy s takes -> its row, as a
   light userdata pointing into backoff_options (one lua_touserdata per
   key reads it, where a number needs a type check and a conversion) */
static void push_names(lua_State *L, int s) {
  int i;
  lua_newtable(L);
  for (i = 0; backoff_options[i].name != NULL; i++)
    if ((backoff_options[i].accepted >> s) & 1u) {
      lua_pushlightuserdata(L, (void *)(uintptr_t)&backoff_options[i]);
      lua_setfield(L, -2, backoff_options[i].name);
    }
}

const char *lbackoff_kind_name(int kind) {
  int i;
  for (i = 0; backoff_options[i].name != NULL; i++)
    if (backoff_options[i].kind == kind) return backoff_options[i].name;
  return "?";
}

/* what the options gave that the binding itself holds or acts on */
typedef struct held {
  unsigned char flags;    /* LB_SEEDED, LB_HAS_START, LB_HAS_CLOCK,
                             LB_HAS_RANDOM */
  int clock;              /* the row of the clock, when given */
} held;

/* the one place where a core problem becomes a Lua error; the value
   quoted (when the problem quotes one) is at value_idx */
static int raise_problem(lua_State *L, int s, const backoff_problem *p,
                         int value_idx) {
  char msg[200];
  backoff_problem_message(p, s, msg, sizeof msg);
  if (backoff_problem_quotes(p))
    return luaL_error(L, "backoff.%s: %s (got %s)", backoff_strategy_name(s),
                      msg, lbackoff_repr(L, value_idx));
  return luaL_error(L, "backoff.%s: %s", backoff_strategy_name(s), msg);
}

/* the Lua value at idx as the core sees it */
static void value_at(lua_State *L, int idx, backoff_value *v) {
  v->number = 0;
  v->integer = 0;
  v->boolean = 0;
  v->string = NULL;
  v->len = 0;
  switch (lua_type(L, idx)) {
    case LUA_TNUMBER:
      v->type = BACKOFF_V_NUMBER;
      v->number = (double)lua_tonumber(L, idx);
#if LUA_VERSION_NUM >= 503
      if (lua_isinteger(L, idx)) {
        v->type = BACKOFF_V_INTEGER;
        v->integer = (int64_t)lua_tointeger(L, idx);
      }
#endif
      break;
    case LUA_TBOOLEAN:
      v->type = BACKOFF_V_BOOL;
      v->boolean = lua_toboolean(L, idx);
      break;
    case LUA_TSTRING:
      v->type = BACKOFF_V_STRING;
      v->string = lua_tolstring(L, idx, &v->len);
      break;
    case LUA_TFUNCTION: v->type = BACKOFF_V_FUNCTION; break;
    default: v->type = BACKOFF_V_OTHER; break;
  }
}

/* the edit distance of a and b (insertions, deletions, substitutions
   and two neighbours swapped), for "did you mean"; names longer than
   LB_NEAR_MAX are not compared */
#define LB_NEAR_MAX 48
static size_t edit_distance(const char *a, size_t la, const char *b,
                            size_t lb) {
  size_t rows[3][LB_NEAR_MAX + 1], i, j;
  size_t *prev2 = rows[0], *prev = rows[1], *row = rows[2], *t;
  for (j = 0; j <= lb; j++) prev[j] = j;
  for (i = 1; i <= la; i++) {
    row[0] = i;
    for (j = 1; j <= lb; j++) {
      size_t d = prev[j - 1] + (a[i - 1] != b[j - 1]);
      if (prev[j] + 1 < d) d = prev[j] + 1;
      if (row[j - 1] + 1 < d) d = row[j - 1] + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
          prev2[j - 2] + 1 < d)
        d = prev2[j - 2] + 1;
      row[j] = d;
    }
    t = prev2; prev2 = prev; prev = row; row = t;
  }
  return prev[lb];
}

/* the name of an option of strategy s closest to the string at idx (one
   edit, or one per five letters), or NULL */
static const char *near_option(lua_State *L, int s, int idx) {
  size_t len, most, i, d;
  const char *k, *best = NULL;
  if (lua_type(L, idx) != LUA_TSTRING) return NULL;
  k = lua_tolstring(L, idx, &len);
  if (len > LB_NEAR_MAX) return NULL;
  most = len / 5 > 1 ? len / 5 : 1;
  for (i = 0; backoff_options[i].name != NULL; i++) {
    const char *name = backoff_options[i].name;
    size_t ln = strlen(name);
    if (!((backoff_options[i].accepted >> s) & 1u) || ln > LB_NEAR_MAX)
      continue;
    d = edit_distance(k, len, name, ln);
    if (d <= most) {
      best = name;
      most = d;
      if (d == 0) break;
    }
  }
  return best;
}

/* key at -2, value at -1: check it into *su (names: the strategy's
   option names -> rows); values the binding holds (start, clock) go to
   the side table at side (made on first need), and *h notes them */
static void read_option(lua_State *L, int s, int names, backoff_setup *su,
                        int side, held *h) {
  backoff_value v;
  backoff_problem p;
  const backoff_option *o;
  int row, kind;
  lua_pushvalue(L, -2);
  lua_rawget(L, names);
  o = (const backoff_option *)lua_touserdata(L, -1);
  if (o == NULL) {
    const char *near = near_option(L, s, -3);
    if (near != NULL)
      luaL_error(L, "backoff.%s: unknown option %s (did you mean '%s'?)",
                 backoff_strategy_name(s), lbackoff_repr(L, -3), near);
    luaL_error(L, "backoff.%s: unknown option %s", backoff_strategy_name(s),
               lbackoff_repr(L, -3));
  }
  row = (int)(o - backoff_options);
  lua_pop(L, 1);
  value_at(L, -1, &v);
  if (backoff_setup_set(su, row, &v, &p) != BACKOFF_OK)
    raise_problem(L, s, &p, -1);
  kind = backoff_options[row].kind;
  if (kind == BACKOFF_K_SEED) h->flags |= LB_SEEDED;
  if (kind == BACKOFF_K_START) h->flags |= LB_HAS_START;
  if (kind == BACKOFF_K_FUNCTION) {
    h->flags |= LB_HAS_CLOCK;
    h->clock = row;
  }
  if (kind == BACKOFF_K_RANDOM) h->flags |= LB_HAS_RANDOM;
  if (HELD_BY_BINDING(kind)) {
    if (lua_isnil(L, side)) {
      lua_createtable(L, 0, 2);
      lua_replace(L, side);
    }
    lua_pushvalue(L, -1);
    lua_rawseti(L, side, LB_SLOT(kind));
  }
}

/* the start time: the start option, else the clock's now (the clock
   may raise or misbehave: nothing is allocated yet) */
static double start_of(lua_State *L, int s, const backoff_setup *su,
                       int side, const held *h) {
  double t;
  if (h->flags & LB_HAS_START) return su->start;
  if (!(h->flags & LB_HAS_CLOCK)) return lbackoff_monotonic();
  if (!lbackoff_call_clock(L, side, &t))
    luaL_error(L, "backoff.%s: option '%s' must return a finite number "
               "(got %s)", backoff_strategy_name(s),
               backoff_options[h->clock].name, lbackoff_repr(L, -1));
  return t;
}

/* the options table at idx, checked; the side table is left at side */
static void read_options(lua_State *L, int s, int idx, int names,
                         backoff_setup *su, int side, held *h) {
  backoff_problem p;
  backoff_setup_init(su, s);
  h->flags = 0;
  h->clock = -1;
  if (!lua_isnoneornil(L, idx)) {
    if (!lua_istable(L, idx))
      luaL_error(L, "backoff.%s: options must be a table (got %s)",
                 backoff_strategy_name(s), luaL_typename(L, idx));
    lua_pushnil(L);
    while (lua_next(L, idx)) {    /* key, value */
      read_option(L, s, names, su, side, h);
      lua_pop(L, 1);
    }
  }
  if (backoff_setup_finish(su, &p) != BACKOFF_OK) {
    if (p.option >= 0 && lua_istable(L, idx)) {   /* the value to quote */
      lua_pushstring(L, backoff_options[p.option].name);
      lua_rawget(L, idx);
    } else {
      lua_pushnil(L);             /* no options table: nothing given */
    }
    raise_problem(L, s, &p, -1);
  }
}

/* backoff.<s>(opts at idx), names as in read_option */
static int construct(lua_State *L, int s, int idx, int names) {
  char where[64];
  backoff_setup su;
  held h;
  lbackoff_object *o;
  double start;
  int side;
  lua_pushnil(L);                 /* the side table, if any */
  side = lua_gettop(L);
  read_options(L, s, idx, names, &su, side, &h);
  start = start_of(L, s, &su, side, &h);
  o = lbackoff_newud(L, (lbackoff_state *)lua_touserdata(L, UV_STATE),
                     !lua_isnil(L, side));
  if (!(h.flags & LB_SEEDED))
    su.seed = lbackoff_new_seed(&o->owner->env, &o->tag);
  else
    o->tag = lbackoff_tag(&o->owner->env);
  if (h.flags & LB_HAS_RANDOM) {    /* the initial timeout's draw */
    lbackoff_lender ln;
    memset(&o->core, 0, sizeof o->core);
    lbackoff_lend(L, &o->core, side, &ln);
    su.draws = &ln.draws;
    backoff_init_setup(&o->core, &su, start, NULL);
    snprintf(where, sizeof where, "backoff.%s", backoff_strategy_name(s));
    lbackoff_unlend(L, &o->core, &ln, where);
  } else {
    backoff_init_setup(&o->core, &su, start, NULL); /* finish checked it */
  }
  o->flags |= (unsigned char)
    (h.flags | (backoff_config_draws(&su.config) ? LB_DRAWS : 0));
  if (!lua_isnil(L, side)) {
    o->flags |= LB_SIDE;
    lua_pushvalue(L, side);
    lbackoff_setuv(L, -2);
  }
  return 1;
}

/* ----------------------------------------------------------------- */
/* config()                                                          */
/* ----------------------------------------------------------------- */

static void push_seed(lua_State *L, uint64_t seed) {
#if LUA_VERSION_NUM >= 503
  lua_pushinteger(L, (lua_Integer)seed);
#else
  lua_pushnumber(L, (lua_Number)(int64_t)seed);
#endif
}

/* push the value of row i of object o (at index 1); 0 if none */
static int push_option(lua_State *L, const lbackoff_object *o, int i) {
  const backoff_config *c = &o->core.cfg;
  const void *at = backoff_option_field(c, i);
  double d;
  switch (backoff_options[i].kind) {
    case BACKOFF_K_NUMBER:
      memcpy(&d, at, sizeof d);
      lua_pushnumber(L, (lua_Number)d);
      return 1;
    case BACKOFF_K_RETRIES:     /* N retries: an integer, or -1 */
      d = backoff_retries(i, *(const uint64_t *)at);
      if (d <= 9007199254740992.0)  /* exact: an integer on every Lua */
        lua_pushinteger(L, (lua_Integer)d);
      else                          /* beyond lua_Integer on 5.3+ too */
        lua_pushnumber(L, (lua_Number)d);
      return 1;
    case BACKOFF_K_TYPE:
      lua_pushstring(L, backoff_type_name(*(const unsigned char *)at));
      return 1;
    case BACKOFF_K_COUNT:
      lbackoff_push_count(L, *(const uint64_t *)at);
      return 1;
    case BACKOFF_K_BOOL:
      lua_pushboolean(L, *(const unsigned char *)at);
      return 1;
    case BACKOFF_K_JITTER:
      lua_pushstring(L, backoff_jitter_name(*(const unsigned char *)at));
      return 1;
    case BACKOFF_K_STRATEGY:
      lua_pushstring(L, backoff_strategy_name(c->strategy));
      return 1;
    case BACKOFF_K_SEED:
      push_seed(L, o->core.seed);
      return 1;
    case BACKOFF_K_START: case BACKOFF_K_FUNCTION: case BACKOFF_K_RANDOM:
      if (!(o->flags & LB_SIDE)) return 0;
      lbackoff_getuv(L, 1);
      lua_rawgeti(L, -1, LB_SLOT(backoff_options[i].kind));
      lua_remove(L, -2);
      if (!lua_isnil(L, -1)) return 1;
      lua_pop(L, 1);
      return 0;
    default:
      return 0;
  }
}

/* b:config(): a new table of every effective option, defaults filled
   in; backoff.new(t.strategy, t) rebuilds the object */
int lbackoff_config(lua_State *L) {
  lbackoff_object *o = lbackoff_check(L, 1, "config");
  int i, given;
  lua_createtable(L, 0, 16);
  for (i = 0; backoff_options[i].name != NULL; i++) {
    given = backoff_options[i].kind != BACKOFF_K_SEED
            || (o->flags & LB_SEEDED);
    if (!backoff_option_shown(&o->core.cfg, i, given)) continue;
    if (push_option(L, o, i)) lua_setfield(L, -2, backoff_options[i].name);
  }
  return 1;
}

/* ----------------------------------------------------------------- */
/* constructors                                                      */
/* ----------------------------------------------------------------- */

/* backoff.<strategy>(opts) */
static int f_strategy_ctor(lua_State *L) {
  return construct(L, (int)lua_tointeger(L, UV_STRATEGY), 1, UV_NAMES);
}

/* backoff.new called with something else than a known strategy name:
   say what is wrong and how to call it.  The likeliest mistake is one
   table of options with the strategy inside (the form of config()), so a
   table's own `strategy` (read raw), when known, is named in the fix. */
static int new_misused(lua_State *L) {
  if (lua_type(L, 1) == LUA_TSTRING)
    return luaL_error(L, "backoff.new: unknown strategy %s (see "
                      "backoff.strategies)", lbackoff_repr(L, 1));
  if (lua_type(L, 1) == LUA_TTABLE) {
    lua_pushliteral(L, "strategy");
    lua_rawget(L, 1);
    if (lua_type(L, -1) == LUA_TSTRING) {
      lua_pushvalue(L, -1);
      lua_rawget(L, lua_upvalueindex(3));
      if (lua_isnumber(L, -1)) {
        const char *name = lua_tostring(L, -2);
        return luaL_error(L, "backoff.new: argument 1 must be a strategy "
                          "name (got table); use backoff.new(\"%s\", opts) "
                          "or backoff.%s(opts)", name, name);
      }
    }
  }
  if (lua_type(L, 1) != LUA_TTABLE)
    return luaL_error(L, "backoff.new: argument 1 must be a strategy name "
                      "(got %s); see backoff.strategies",
                      luaL_typename(L, 1));
  return luaL_error(L, "backoff.new: argument 1 must be a strategy name "
                    "(got table); use backoff.new(opts.strategy, opts) or "
                    "backoff.<strategy>(opts)");
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
      return construct(L, s, 2, lua_gettop(L));
    }
  }
  return new_misused(L);
}

/* core._options: strategy -> the names of the options it takes, in the
   table's order (for tools and the docs' completeness spec) */
static void push_option_lists(lua_State *L) {
  int s, i, n;
  lua_createtable(L, 0, BACKOFF_NSTRATEGIES);
  for (s = 0; s < BACKOFF_NSTRATEGIES; s++) {
    lua_newtable(L);
    for (i = 0, n = 0; backoff_options[i].name != NULL; i++) {
      if (!((backoff_options[i].accepted >> s) & 1u)) continue;
      lua_pushstring(L, backoff_options[i].name);
      lua_rawseti(L, -2, ++n);
    }
    lua_setfield(L, -2, backoff_strategy_name(s));
  }
}

void lbackoff_open_constructors(lua_State *L, int M, int mt, int state) {
  int s, names, numbers, options;
  lua_createtable(L, BACKOFF_NSTRATEGIES, 0);
  names = lua_gettop(L);
  lua_createtable(L, 0, BACKOFF_NSTRATEGIES);
  numbers = lua_gettop(L);
  lua_createtable(L, BACKOFF_NSTRATEGIES, 0);
  options = lua_gettop(L);
  for (s = 0; s < BACKOFF_NSTRATEGIES; s++) {
    push_names(L, s);
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
  push_option_lists(L);
  lua_setfield(L, M, "_options");
  lua_pop(L, 2);
  lua_setfield(L, M, "strategies");
}
