-- backoff.check: the one option checker of the Lua half (internal).
--
-- A module declares its options once, as a table of rules, the way the
-- C binding's OPTIONS table does, and gets a checker:
--
--   local check = require "backoff.check"
--   local options = check.options("backoff.budget.earned", {
--     capacity = check.count{ default = 8, max = 2 ^ 30, max_text = "2^30" },
--     earn = check.number{ default = 6, min = 0, max = 1000 },
--     clock = check.fn{},
--   })
--   local o = options(opts)  -- every option, defaults filled in
--
-- Every message has the C binding's wording:
--   backoff.budget.earned: options must be a table (got number)
--   backoff.budget.earned: unknown option 'capcity'
--   backoff.budget.earned: option 'earn' must be a number >= 0 and
--     <= 1000 (got -1)
-- and points at the caller's line: check.raise finds the first frame
-- outside the library, however deep the module's own frames go (and
-- whatever tail calls took away), so no caller counts levels.

local util = require "backoff.util"

local error, floor, getinfo, getmetatable, ipairs, next, pairs, rawget,
      tostring, type = error, math.floor, debug.getinfo, getmetatable,
      ipairs, next, pairs, rawget, tostring, type
local huge = math.huge
local repr = util.repr

local M = {}

------------------------------------------------------------------------
-- raising at the caller's line

-- The library's files: this one's folder (lua/backoff/) and the face
-- beside it (lua/backoff.lua), as the loader named them.
local here = getinfo(1, "S").source
local DIR = here:match("^(@.*/)check%.lua$") or "@?"
local FACE = DIR:sub(1, -2) .. ".lua"

local function ours(info)
  local s = info.source
  return s:sub(1, #DIR) == DIR or s == FACE
    or info.what == "tail"                 -- 5.1: a frame a tail call took
end

-- The level, as error() counts it from raise, of the first frame that
-- is not the library's.  getinfo counts from here: 1 is this function,
-- 2 raise, so frame i is error()'s level i - 1.  A C frame the library
-- itself called (its pcall) is skipped; one the caller called (the
-- caller's pcall) is where the error goes, and gets no position, as
-- any error raised through pcall.
local function caller_level()
  local i = 3
  while true do
    local info = getinfo(i, "S")
    if info == nil then return i - 1 end
    if not ours(info) then
      if info.what ~= "C" then return i - 1 end
      local up = getinfo(i + 1, "S")
      if up == nil or not ours(up) then return i - 1 end
    end
    i = i + 1
  end
end

--- check.raise(msg): error(msg) at the first frame outside the library
function M.raise(msg)
  error(msg, caller_level())
end
local raise = M.raise

--- check.bad_self(method, expected, v): the one message for a method
-- called on something that is not its object, raised at the caller's
-- line: "calling 'withdraw' on bad self (backoff.budget.grpc expected,
-- got table)" (lauxlib's words)
function M.bad_self(method, expected, v)
  raise(("calling '%s' on bad self (%s expected, got %s)"):format(method,
        expected, type(v)))
end

------------------------------------------------------------------------
-- a function where an object was wanted: a constructor not called?

-- the public name of a function of the library (backoff.X or
-- backoff.Y.X, the shortest), or nil: read from package.loaded, so
-- that this floor requires nothing above it
local loaded = package.loaded
local function public_name(fn)
  local best
  for mod, t in pairs(loaded) do
    if type(mod) == "string" and type(t) == "table"
       and (mod == "backoff" or mod:sub(1, 8) == "backoff.")
       and mod ~= "backoff.core" then
      for k, v in next, t do
        if v == fn and type(k) == "string" then
          local name = mod .. "." .. k
          if best == nil or #name < #best
             or #name == #best and name < best then
            best = name
          end
        end
      end
    end
  end
  return best
end

--- check.got(v [, plain]) -> v as a message's "(got ...)" says it; a
-- function with the hint that a constructor was passed where its
-- object was wanted ("function: did you mean
-- backoff.budget.recommended()?"); plain: the bare type unless the
-- function is the library's (backoff.retry(fn) forgot the policy: no
-- constructor to call)
function M.got(v, plain)
  if type(v) ~= "function" then return plain and type(v) or repr(v) end
  local name = public_name(v)
  if name then return "function: did you mean " .. name .. "()?" end
  if plain then return "function" end
  return "function: an object is wanted here; call its constructor"
end
local got = M.got

--- check.fail(ctor, name, rule_text, v): the option's message, raised
-- (the rule refused v: a function given for an object gets the hint)
function M.fail(ctor, name, text, v)
  raise(("%s: option '%s' must be %s (got %s)"):format(ctor, tostring(name),
        text, got(v)))
end

------------------------------------------------------------------------
-- rules: { test = function(v) -> true|false, text = "...", default }

local function finite(v)
  return type(v) == "number" and v == v and v ~= huge and v ~= -huge
end
M.finite = finite

local num = util.num            -- a bound as text: 1000, 0.5

--- an integer from min (0) to max (2^53)
function M.count(o)
  local lo, hi = o.min or 0, o.max or 2 ^ 53
  return { default = o.default,
    test = function(v)
      return type(v) == "number" and v >= lo and v <= hi and v == floor(v)
    end,
    text = o.text or ("an integer >= %s and <= %s"):format(num(lo),
      o.max_text or (hi == 2 ^ 53 and "2^53" or num(hi))) }
end

--- a finite number; min/max inclusive unless open_min/open_max (max_text:
-- the bound as the message says it, "2^20")
function M.number(o)
  local lo, hi = o.min, o.max
  local parts = {}
  if lo then parts[#parts + 1] = (o.open_min and "> " or ">= ") .. num(lo) end
  if hi then
    parts[#parts + 1] = (o.open_max and "< " or "<= ") .. (o.max_text
                                                          or num(hi))
  end
  local text = (lo and hi) and "a number " or "a finite number "
  return { default = o.default,
    test = function(v)
      if not finite(v) then return false end
      if lo and (v < lo or o.open_min and v == lo) then return false end
      if hi and (v > hi or o.open_max and v == hi) then return false end
      return true
    end,
    text = o.text or (text .. table.concat(parts, " and ")):gsub(" $", "") }
end

function M.boolean(o)
  return { default = o and o.default,
    test = function(v) return type(v) == "boolean" end, text = "a boolean" }
end

--- a function (a callable object too with callable = true)
function M.fn(o)
  o = o or {}
  local callable = o.callable and util.callable
  return { default = o.default,
    test = function(v) return type(v) == "function" or callable and
                              callable(v) end,
    text = o.text or "a function" }
end

--- a string (non-empty by default; `pattern` anchored by the caller)
function M.string(o)
  o = o or {}
  return { default = o.default,
    test = function(v)
      return type(v) == "string" and (o.empty or v ~= "")
             and (not o.pattern or v:match(o.pattern) ~= nil)
    end,
    text = o.text or "a non-empty string" }
end

--- one of the names in the list
function M.one_of(list, o)
  local set = {}
  for _, v in pairs(list) do set[v] = true end
  return { default = o and o.default,
    test = function(v) return set[v] == true end,
    text = o and o.text or ("one of " .. table.concat(list, ", ")) }
end

--- anything test(v) accepts
function M.custom(text, test, default)
  return { default = default, test = test, text = text }
end

--- `shared`: an ngx.shared dict, or false for a per-worker (per-process)
-- object on purpose.  nil is per process outside nginx, and an error
-- inside it: each worker would keep its own, and a host of 16 workers
-- would act 16 times over.  `what` names the thing shared ("budget").
function M.shared(what, consequence)
  return { shared = true, what = what,
    consequence = consequence or "a host of N workers acts N times over",
    test = function(v) return v == false or util.is_dict(v) end,
    text = "an ngx.shared dict (lua_shared_dict), or false for one per "
           .. "worker",
    -- "must be an ngx.shared dict (got 5)" first, as the budgets have
    -- always said it, then the way out (and a name given for the dict)
    fail = function(ctor, name, v)
      raise(("%s: option '%s' must be an ngx.shared dict (got %s%s), or "
        .. "false for one %s per worker"):format(ctor, tostring(name),
        repr(v), type(v) == "string" and ": the dict is "
        .. "ngx.shared[name], not its name" or "", what))
    end }
end
-- the shared rule's verdict on nil: nothing outside nginx, an error in it
local function shared_nil(ctor, name, rule)
  if util.ngx_phase() == nil then return end
  raise(("%s: option '%s' must be an ngx.shared dict inside nginx (got "
    .. "nil: a lua_shared_dict's name misspelled in ngx.shared.NAME gives "
    .. "nil too); without it each worker keeps its own %s, and %s; %s = "
    .. "false asks for that on purpose"):format(ctor, name, rule.what,
    rule.consequence, name))
end

------------------------------------------------------------------------
-- option tables

-- the rule's message for v (a rule may say more, with fail(ctor, k, v))
local function refuse(ctor, k, r, v)
  if r.fail then r.fail(ctor, k, v) end
  M.fail(ctor, k, r.text, v)
end

-- options renamed before 1.0: ctor -> { old name -> new name }, so that
-- the old name is refused with the new one (CHANGELOG.md lists them)
M.RENAMED = {}

-- the edit distance of a and b (insertions, deletions, substitutions,
-- and two letters swapped), for "did you mean"
local function distance(a, b)
  local prev, prev2 = {}, {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    local row = { [0] = i }
    for j = 1, #b do
      local cost = a:byte(i) == b:byte(j) and 0 or 1
      local d = math.min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + cost)
      if i > 1 and j > 1 and a:byte(i) == b:byte(j - 1)
         and a:byte(i - 1) == b:byte(j) then
        d = math.min(d, prev2[j - 2] + 1)
      end
      row[j] = d
    end
    prev2, prev = prev, row
  end
  return prev[#b]
end
M.distance = distance

-- the known name closest to a misspelt one (one edit, or one per five
-- letters: 'retries' is not 'metrics'), or nil
local function closest(k, known)
  -- (a long key is no misspelling: and its distances would cost)
  if type(k) ~= "string" or not known or #k > 48 then return nil end
  local best, most = nil, math.max(1, math.floor(#k / 5))
  local names = {}
  for name in pairs(known) do
    if type(name) == "string" then names[#names + 1] = name end
  end
  table.sort(names)
  for _, name in ipairs(names) do
    local d = distance(k, name)
    if d <= most then best, most = name, d - 1 end
  end
  return best
end

local function unknown(ctor, k, known, extra)
  local r = M.RENAMED[ctor]
  local new = r and r[k]
  if new then
    raise(("%s: unknown option %s (renamed '%s' in 0.3.0)"):format(ctor,
          repr(k), new))
  end
  local near = closest(k, known) or closest(k, extra)
  raise(ctor .. ": unknown option " .. repr(k)
    .. (near and (" (did you mean '" .. near .. "'?)") or ""))
end

local function not_table(ctor, opts)
  raise(("%s: options must be a table (got %s)"):format(ctor, type(opts)))
end

--- check.validator(ctor, rules) -> function(opts) -> opts: checks opts
-- where it is, for options read at every call (a door's): nil passes;
-- no defaults (the rules have none), and no copy unless opts has a
-- metatable: then a raw copy is returned, so that no metamethod of the
-- caller's runs when the options are read.
function M.validator(ctor, rules)
  return function(opts)
    if opts == nil then return nil end
    if type(opts) ~= "table" then not_table(ctor, opts) end
    for k, v in next, opts do
      local r = rules[k]
      if not r then unknown(ctor, k, rules) end
      if not r.test(v) then refuse(ctor, k, r, v) end
    end
    if getmetatable(opts) == nil then return opts end
    local copy = {}
    for k, v in next, opts do copy[k] = v end
    return copy
  end
end

--- check.only(ctor, opts, keys, instead): a `recommended` constructor
-- takes a few of its kind's options: anything else is refused, naming
-- what it takes and what to tune instead ("backoff.budget.recommended:
-- unknown option 'capacity' (it takes shared, key and clock; tune
-- backoff.budget.earned instead)").  opts nil or not a table is left
-- to the kind's own checker.  Raw reads: no metamethod of opts runs.
function M.only(ctor, opts, keys, instead)
  if type(opts) ~= "table" then return end
  for k in next, opts do
    local known = false
    for _, name in ipairs(keys) do
      if k == name then known = true break end
    end
    if not known then
      local list = table.concat(keys, ", ", 1, #keys - 1) .. " and "
        .. keys[#keys]
      raise(("%s: unknown option %s (it takes %s; tune %s instead)")
        :format(ctor, repr(k), list, instead))
    end
  end
end

--- check.options(ctor, rules [, extra]) -> function(opts) -> o: every
-- option (rules' defaults filled in); `extra` names keys taken as they
-- are (checked by the module).  opts nil counts as {}.  Raw reads: no
-- metamethod of opts runs.
function M.options(ctor, rules, extra)
  return function(opts)
    if opts == nil then opts = {} end
    if type(opts) ~= "table" then not_table(ctor, opts) end
    local out = {}
    for k, v in next, opts do
      local r = rules[k]
      if r then
        if not r.test(v) then refuse(ctor, k, r, v) end
        out[k] = v
      elseif extra and extra[k] then
        out[k] = v
      else
        unknown(ctor, k, rules, extra)
      end
    end
    for k, r in pairs(rules) do
      if rawget(out, k) == nil then
        if r.shared then shared_nil(ctor, k, r) end
        out[k] = r.default
      end
    end
    return out
  end
end

return M
